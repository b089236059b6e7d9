package cm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/softverbs/softverbs/rvt"
)

// The net-like API: Listen, Accept, Dial, Conn, over the event form. No
// goroutine is started: each ID's events are handled by a small function
// that the agent's task calls; the blocking calls wait on channels.

// ErrPeerDisconnected is Conn.Err after the peer disconnected.
var ErrPeerDisconnected = errors.New("cm: peer disconnected")

// ListenOptions configure Listen.
type ListenOptions struct {
	PortSpace PortSpace // default PSTCP (PSUDP for UD services)
	// Backlog bounds the requests waiting for Accept (default 1024: what
	// rdma_listen(id, 0) gets, ucma's max_backlog). Beyond it a request
	// is dropped unanswered, as Linux drops it (ID.Discard): the peer's
	// REQ is resent after its CM period (6144 ms from Linux) and taken
	// if Accept has made room by then.
	Backlog int
}

// defaultBacklog is Linux's for rdma_listen(id, 0): ucma's max_backlog
// (net.rdma_ucm.max_backlog), which the rdma_cm tools' listens get.
const defaultBacklog = 1024

// Listener accepts connection requests for one port.
type Listener struct {
	id      *ID
	reqs    chan *Request
	done    chan struct{}
	once    sync.Once
	removed chan struct{} // closed on DEVICE_REMOVAL
}

// Listen listens on addr (an unspecified address: every GID of the
// device) in the device's CM agent (AgentFor).
func Listen(dev *rvt.Device, addr netip.AddrPort, o *ListenOptions) (*Listener, error) {
	a, err := AgentFor(dev)
	if err != nil {
		return nil, err
	}
	return a.Listen(addr, o)
}

// Listen is Listen on this agent.
func (a *Agent) Listen(addr netip.AddrPort, o *ListenOptions) (*Listener, error) {
	var lo ListenOptions
	if o != nil {
		lo = *o
	}
	if lo.PortSpace == 0 {
		lo.PortSpace = PSTCP
	}
	if lo.Backlog <= 0 {
		lo.Backlog = defaultBacklog
	}
	l := &Listener{reqs: make(chan *Request, lo.Backlog), done: make(chan struct{}), removed: make(chan struct{})}
	l.id = a.newID(lo.PortSpace, nil, l.onEvent)
	if err := l.id.BindAddr(addr); err != nil {
		l.id.Destroy()
		return nil, fmt.Errorf("listen %v: %w", addr, err)
	}
	if err := l.id.Listen(); err != nil {
		l.id.Destroy()
		return nil, fmt.Errorf("listen %v: %w", addr, err)
	}
	return l, nil
}

func (l *Listener) onEvent(ev Event) {
	if ev.Type == EventDeviceRemoval {
		close(l.removed) // once: the agent tells an ID once
		return
	}
	if ev.Type != EventConnectRequest {
		return
	}
	r := &Request{id: ev.ID, PrivateData: ev.Param.PrivateData, Param: ev.Param, UD: ev.UD != nil,
		relay: newRelay()}
	r.RemoteAddr, r.LocalAddr = ev.ID.RemoteAddr(), ev.ID.LocalAddr()
	ev.ID.setSink(r.on)
	select {
	case <-l.done:
		_ = ev.ID.Reject(nil)
		ev.ID.Destroy()
	case l.reqs <- r:
	default:
		// Backlog full: as Linux, no answer; the peer resends the REQ
		// after its CM period, and it is a new request then.
		ev.ID.Discard()
	}
}

// Accept waits for the next connection request. It returns ErrClosed
// after Close, ErrDeviceRemoved once the device (or its agent) closed,
// ctx.Err() when ctx ends first.
func (l *Listener) Accept(ctx context.Context) (*Request, error) {
	select {
	case <-l.removed:
		return nil, ErrDeviceRemoved // requests still queued were told too
	default:
	}
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.done:
		return nil, ErrClosed
	case <-l.removed:
		return nil, ErrDeviceRemoved
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Addr returns the address the listener is bound to.
func (l *Listener) Addr() netip.AddrPort { return l.id.LocalAddr() }

// Close stops listening; requests not yet accepted are rejected.
// Connections already made are not affected. It returns nil, also after
// the device was removed.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.id.Destroy()
		for {
			select {
			case r := <-l.reqs:
				_ = r.Reject(nil)
			default:
				return
			}
		}
	})
	return nil
}

// Request is a connection request (a REQ or SIDR_REQ) waiting for Accept
// or Reject.
type Request struct {
	id          *ID
	RemoteAddr  netip.AddrPort
	LocalAddr   netip.AddrPort
	PrivateData []byte    // the peer's, after the rdma_cm header (zero padded)
	Param       ConnParam // what the peer offered
	UD          bool      // a SIDR request: answer with AcceptUD
	relay
}

// ID returns the request's ID (the event form).
func (r *Request) ID() *ID { return r.id }

// relay hands an ID's events to whoever waits for the outcome of a
// connection setup, then to the connection.
type relay struct {
	mu  sync.Mutex
	c   *Conn
	res chan Event
}

func newRelay() relay { return relay{res: make(chan Event, 8)} }

func (r *relay) on(ev Event) {
	r.mu.Lock()
	c := r.c
	if c == nil {
		select {
		case r.res <- ev:
		default:
		}
	}
	r.mu.Unlock()
	if c != nil {
		c.onEvent(ev)
	}
}

// wait returns the next event, an error if it is not want.
func (r *relay) wait(ctx context.Context, want EventType) (Event, error) {
	select {
	case ev := <-r.res:
		if ev.Type != want {
			return ev, eventErr(ev)
		}
		return ev, nil
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

// attach sends later events, and those that came meanwhile, to c.
func (r *relay) attach(c *Conn) {
	r.mu.Lock()
	r.c = c
	r.mu.Unlock()
	for {
		select {
		case ev := <-r.res:
			c.onEvent(ev)
		default:
			return
		}
	}
}

// Accept accepts an RC or UC request with q (moved to RTS with the settled
// attributes) and the private data for the REP, and waits for the RTU.
func (r *Request) Accept(ctx context.Context, q *rvt.QP, priv []byte) (*Conn, error) {
	if r.UD {
		return nil, fmt.Errorf("accept: %w: a SIDR request (use AcceptUD)", ErrInvalidState)
	}
	p := ConnParam{PrivateData: priv, ResponderResources: r.Param.InitiatorDepth,
		InitiatorDepth: r.Param.ResponderResources, RNRRetryCount: 7}
	if err := r.id.Accept(q, &p); err != nil {
		r.id.Destroy()
		return nil, err
	}
	ev, err := r.wait(ctx, EventEstablished)
	if err != nil {
		r.id.Destroy()
		return nil, err
	}
	c := newConn(r.id, q)
	c.established(ev)
	r.attach(c)
	return c, nil
}

// AcceptUD answers a SIDR request with the UD QP q (ready: see PrepareUD).
func (r *Request) AcceptUD(q *rvt.QP, priv []byte) error {
	if !r.UD {
		return fmt.Errorf("accept UD: %w: not a SIDR request", ErrInvalidState)
	}
	return r.id.Accept(q, &ConnParam{PrivateData: priv})
}

// Reject refuses the request with REJ reason 28 (SIDR: status REJECT) and
// private data.
func (r *Request) Reject(priv []byte) error {
	err := r.id.Reject(priv)
	r.id.Destroy()
	return err
}

func eventErr(ev Event) error {
	if ev.Err != nil {
		return ev.Err
	}
	return fmt.Errorf("cm: %v", ev.Type)
}

// DialOptions configure Dial and ResolveUD.
type DialOptions struct {
	PortSpace PortSpace  // default PSTCP (ResolveUD: PSUDP)
	Src       netip.Addr // source address; zero: chosen by the route
	TOS       uint8
	// AckTimeout is the local ACK timeout exponent of the QP
	// (rdma_set_option ACK_TIMEOUT); 0: packet lifetime + 1.
	AckTimeout  uint8
	PrivateData []byte
	// Param overrides the offered parameters (default: responder
	// resources and initiator depth 1, retry 7, RNR retry 7, as rping).
	Param *ConnParam
}

// Conn is an established RC or UC connection.
type Conn struct {
	id   *ID
	q    *rvt.QP
	done chan struct{}

	mu          sync.Mutex
	err         error
	closed      bool
	doneClosed  bool
	local       netip.AddrPort
	remote      netip.AddrPort
	peerPrivate []byte
	peerQPN     uint32
}

func newConn(id *ID, q *rvt.QP) *Conn { return &Conn{id: id, q: q, done: make(chan struct{})} }

func (c *Conn) established(ev Event) {
	c.mu.Lock()
	c.peerPrivate, c.peerQPN = ev.Param.PrivateData, ev.Param.QPN
	c.mu.Unlock()
	c.local, c.remote = c.id.LocalAddr(), c.id.RemoteAddr()
}

// end records why the connection ended, unless a reason is recorded
// already (why runs under c.mu), and closes Done once.
func (c *Conn) end(why func() error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = why()
	}
	first := !c.doneClosed
	c.doneClosed = true
	c.mu.Unlock()
	if first {
		close(c.done)
	}
}

// onEvent handles the events of an established connection.
func (c *Conn) onEvent(ev Event) {
	switch ev.Type {
	case EventDeviceRemoval:
		// An embedded agent moved the QP to ERR and forgot the ID; a
		// daemon's device goes with its session.
		c.end(func() error { return ErrDeviceRemoved })
	case EventDisconnected:
		c.end(func() error {
			if c.closed {
				return ErrClosed
			}
			return ErrPeerDisconnected
		})
		_ = c.id.Disconnect() // the DREP, when the peer disconnected
	case EventTimewaitExit:
		c.id.Destroy()
	}
}

// Dial connects q to raddr through the device's agent: address and route
// resolution, REQ, REP, RTU. It returns the established connection, a
// *RejectError (ErrNoListener when nobody listens), ErrUnreachable,
// ErrDeviceRemoved when the device closes meanwhile, or ctx.Err().
func Dial(ctx context.Context, dev *rvt.Device, raddr netip.AddrPort, q *rvt.QP, o *DialOptions) (*Conn, error) {
	a, err := AgentFor(dev)
	if err != nil {
		return nil, err
	}
	return a.Dial(ctx, raddr, q, o)
}

// Dial is Dial on this agent.
func (a *Agent) Dial(ctx context.Context, raddr netip.AddrPort, q *rvt.QP, o *DialOptions) (*Conn, error) {
	var do DialOptions
	if o != nil {
		do = *o
	}
	if do.PortSpace == 0 {
		do.PortSpace = PSTCP
	}
	rl := newRelay()
	id := a.newID(do.PortSpace, nil, rl.on)
	fail := func(err error) (*Conn, error) {
		id.Destroy()
		return nil, fmt.Errorf("dial %v: %w", raddr, err)
	}
	id.SetTOS(do.TOS)
	id.SetAckTimeout(do.AckTimeout)
	if err := id.ResolveAddr(do.Src, raddr); err != nil {
		return fail(err)
	}
	if _, err := rl.wait(ctx, EventAddrResolved); err != nil {
		return fail(err)
	}
	p := do.Param
	if p == nil {
		p = &ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	}
	pp := *p
	pp.PrivateData = do.PrivateData
	if err := id.Connect(q, &pp); err != nil {
		return fail(err)
	}
	ev, err := rl.wait(ctx, EventEstablished)
	if err != nil {
		return fail(err)
	}
	c := newConn(id, q)
	c.established(ev)
	rl.attach(c)
	return c, nil
}

// QP returns the connection's QP.
func (c *Conn) QP() *rvt.QP { return c.q }

// ID returns the connection's ID (the event form).
func (c *Conn) ID() *ID { return c.id }

// LocalAddr and RemoteAddr return the connection's addresses.
func (c *Conn) LocalAddr() netip.AddrPort  { return c.local }
func (c *Conn) RemoteAddr() netip.AddrPort { return c.remote }

// PeerPrivateData returns the private data of the peer's REP (active side)
// or RTU (passive side).
func (c *Conn) PeerPrivateData() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peerPrivate
}

// Done is closed when the connection is over: the peer disconnected,
// Disconnect finished, or the device (or its agent) closed. Err says
// which.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns nil while connected, then ErrPeerDisconnected, ErrClosed or
// ErrDeviceRemoved (the QP is in ERR then; the peer was not told).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Disconnect sends the DREQ (the QP goes to ERR, its WRs flush) and waits
// until the peer answered or the CM gave up, or ctx ends. The ID is
// released after TIMEWAIT.
func (c *Conn) Disconnect(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	if err := c.id.Disconnect(); err != nil && c.id.State() != StateIdle {
		return err
	}
	if c.id.State() == StateIdle {
		c.id.Destroy()
		return nil
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close disconnects without waiting.
func (c *Conn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	if c.id.Disconnect() != nil && c.id.State() == StateIdle {
		c.id.Destroy()
	}
	return nil
}

// UDPeer is a UD service found by SIDR: where to send datagrams.
type UDPeer struct {
	QPN         uint32
	QKey        uint32
	AH          *rvt.AH
	PrivateData []byte // of the SIDR_REP
}

// ResolveUD finds the UD QP behind raddr by SIDR (rdma_connect on a UDP
// ID) and makes an address handle for it in pd.
func ResolveUD(ctx context.Context, dev *rvt.Device, pd *rvt.PD, raddr netip.AddrPort, o *DialOptions) (*UDPeer, error) {
	var do DialOptions
	if o != nil {
		do = *o
	}
	if do.PortSpace == 0 {
		do.PortSpace = PSUDP
	}
	a, err := AgentFor(dev)
	if err != nil {
		return nil, err
	}
	rl := newRelay()
	id := a.newID(do.PortSpace, nil, rl.on)
	defer id.Destroy()
	wait := func(want EventType) (Event, error) { return rl.wait(ctx, want) }
	id.SetTOS(do.TOS)
	if err := id.ResolveAddr(do.Src, raddr); err != nil {
		return nil, fmt.Errorf("resolve UD %v: %w", raddr, err)
	}
	if _, err := wait(EventAddrResolved); err != nil {
		return nil, fmt.Errorf("resolve UD %v: %w", raddr, err)
	}
	if err := id.Connect(nil, &ConnParam{PrivateData: do.PrivateData}); err != nil {
		return nil, fmt.Errorf("resolve UD %v: %w", raddr, err)
	}
	ev, err := wait(EventEstablished)
	if err != nil {
		return nil, fmt.Errorf("resolve UD %v: %w", raddr, err)
	}
	ah, err := pd.CreateAH(ev.UD.AV)
	if err != nil {
		return nil, fmt.Errorf("resolve UD %v: %w", raddr, err)
	}
	return &UDPeer{QPN: ev.UD.QPN, QKey: ev.UD.QKey, AH: ah, PrivateData: ev.Param.PrivateData}, nil
}
