package cm

import (
	"context"
	"fmt"
	"sync"

	"github.com/softverbs/softverbs/rvt"
)

// EventType is an rdma_cm event (enum rdma_cm_event_type, same values).
type EventType uint8

// rdma_cm events.
const (
	EventAddrResolved EventType = iota
	EventAddrError
	EventRouteResolved
	EventRouteError
	EventConnectRequest
	EventConnectResponse
	EventConnectError
	EventUnreachable
	EventRejected
	EventEstablished
	EventDisconnected
	EventDeviceRemoval
	EventMulticastJoin
	EventMulticastError
	EventAddrChange
	EventTimewaitExit
)

var eventNames = [...]string{"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR",
	"CONNECT_REQUEST", "CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED",
	"ESTABLISHED", "DISCONNECTED", "DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR",
	"ADDR_CHANGE", "TIMEWAIT_EXIT"}

// String returns the name rdma_event_str gives, without RDMA_CM_EVENT_.
func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", uint8(t))
}

// Event is one rdma_cm event (struct rdma_cm_event).
type Event struct {
	Type EventType
	// ID is the ID the event is about; for CONNECT_REQUEST, the new
	// passive ID (its Listener is the listening one).
	ID *ID
	// Err is set for ADDR_ERROR, ROUTE_ERROR, UNREACHABLE (ErrUnreachable),
	// CONNECT_ERROR, REJECTED (a *RejectError) and DEVICE_REMOVAL
	// (ErrDeviceRemoved: the device under the agent, or the agent, closed;
	// each ID gets it once, see Agent.Close).
	Err error
	// Param is what the peer sent: CONNECT_REQUEST, CONNECT_RESPONSE,
	// ESTABLISHED (active side), REJECTED (private data), DISCONNECTED
	// (the DREQ's private data, when a DREQ caused it).
	Param ConnParam
	// UD is set on ESTABLISHED of a SIDR resolution (active UD ID) and on
	// CONNECT_REQUEST of a SIDR_REQ.
	UD *UDParam
}

// ConnParam are the connection parameters (struct rdma_conn_param).
type ConnParam struct {
	// PrivateData: sent in REQ (after the rdma_cm header: at most 56
	// bytes; 180 for SIDR), REP (196), REJ (148), RTU, DREQ, DREP. A
	// received one is the whole field of the message, zero padded, as
	// rdma_cm delivers it.
	PrivateData        []byte
	ResponderResources uint8
	InitiatorDepth     uint8
	RetryCount         uint8 // 0..7
	RNRRetryCount      uint8 // 0..7 (7: infinite)
	SRQ                bool
	QPN                uint32 // the peer's QPN (received), or ours when no QP is given
}

// UDParam is the result of a SIDR resolution: where to send datagrams.
type UDParam struct {
	QPN  uint32
	QKey uint32
	AV   rvt.AddressVector // for PD.CreateAH
}

// EventChannel queues the events of its IDs (rdma_event_channel). Pushing
// never blocks; Get waits, Poll does not.
type EventChannel struct {
	mu     sync.Mutex
	q      []Event
	ready  chan struct{}
	closed bool
}

// NewEventChannel returns an empty channel.
func NewEventChannel() *EventChannel { return &EventChannel{ready: make(chan struct{}, 1)} }

func (ch *EventChannel) push(ev Event) {
	ch.mu.Lock()
	if ch.closed {
		ch.mu.Unlock()
		return
	}
	ch.q = append(ch.q, ev)
	ch.mu.Unlock()
	select {
	case ch.ready <- struct{}{}:
	default:
	}
}

// Poll returns the oldest event, if any.
func (ch *EventChannel) Poll() (Event, bool) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.q) == 0 {
		return Event{}, false
	}
	ev := ch.q[0]
	ch.q[0] = Event{}
	ch.q = ch.q[1:]
	return ev, true
}

// Get waits for the next event (rdma_get_cm_event); ctx.Err() if ctx ends
// first, ErrClosed after Close.
func (ch *EventChannel) Get(ctx context.Context) (Event, error) {
	for {
		if ev, ok := ch.Poll(); ok {
			return ev, nil
		}
		ch.mu.Lock()
		closed := ch.closed
		ch.mu.Unlock()
		if closed {
			return Event{}, ErrClosed
		}
		select {
		case <-ch.ready:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Len returns the number of queued events.
func (ch *EventChannel) Len() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return len(ch.q)
}

// Close drops queued events and makes Get return ErrClosed.
func (ch *EventChannel) Close() {
	ch.mu.Lock()
	ch.closed = true
	ch.q = nil
	ch.mu.Unlock()
	select {
	case ch.ready <- struct{}{}:
	default:
	}
}
