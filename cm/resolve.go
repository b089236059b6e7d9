package cm

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// ErrAddrTimeout is the error of an ADDR_ERROR event when the neighbour
// did not answer within the resolution's timeout (rdma_cm reports
// -ETIMEDOUT, as Linux does when ARP or neighbour discovery fails).
var ErrAddrTimeout = errors.New("cm: address resolution timed out: the neighbour did not answer")

// DefaultResolveTimeout is ResolveAddr's timeout: what rping, ucmatose
// and udaddy pass to rdma_resolve_addr.
const DefaultResolveTimeout = 2 * time.Second

// resolvePoll is how often a pending resolution asks the device's
// resolver again (the resolver itself paces its requests on the wire).
const resolvePoll = 10 * time.Millisecond

// resolveWait is an address resolution waiting for the neighbour.
type resolveWait struct {
	route    Route
	dst      netip.AddrPort
	deadline time.Time
}

// ResolveAddrTimeout resolves dst (and binds an ephemeral port if the ID
// has none), then queues ADDR_RESOLVED or ADDR_ERROR (rdma_resolve_addr
// with timeout_ms). src may be the zero Addr. As over Linux, ADDR_RESOLVED
// waits until the device's resolver knows the neighbour's MAC (on a host
// link: an ARP or neighbour discovery answer); if it does not within
// timeout (<= 0: DefaultResolveTimeout), ADDR_ERROR comes with
// ErrAddrTimeout. A device without a resolver, and a destination that is
// one of our own addresses, resolve at once. A destination the device has
// no route to (off its subnets, no gateway: rvt.Device.Route) fails at
// once with ErrNetUnreachable, returned, with no event, unless a source
// address is given (src, or the address the ID is bound to): then, as on
// Linux, it is taken as on-link and ends in ADDR_ERROR with
// ErrAddrTimeout. One beyond a gateway resolves the gateway's MAC.
func (id *ID) ResolveAddrTimeout(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	if id.r != nil {
		return id.remoteResolveAddr(src, dst)
	}
	if err := id.roceSpace("resolve addr"); err != nil {
		return err
	}
	if timeout <= 0 {
		timeout = DefaultResolveTimeout
	}
	a := id.a
	a.mu.Lock()
	defer a.kick()
	defer a.mu.Unlock()
	if err := a.removedErrLocked("resolve addr"); err != nil {
		return err
	}
	if id.state != StateIdle || id.destroyed || id.resolve != nil {
		return fmt.Errorf("resolve addr: %w: %v", ErrInvalidState, id.state)
	}
	if !src.IsValid() && id.portBound {
		src = id.local.Addr()
	}
	r, err := a.resolveLocked(src, dst.Addr(), id.tc)
	if errors.Is(err, ErrNetUnreachable) {
		// Linux's rdma_resolve_addr returns -ENETUNREACH itself (the
		// route lookup fails before any request is queued): no event.
		return fmt.Errorf("resolve addr: %w", err)
	}
	if err != nil {
		a.emitLocked(id, Event{Type: EventAddrError, Err: err})
		return nil
	}
	if !id.portBound {
		if err := a.bindLocked(id, netip.AddrPortFrom(r.Src, 0)); err != nil {
			a.emitLocked(id, Event{Type: EventAddrError, Err: err})
			return nil
		}
	}
	id.addrOK = false
	id.local = netip.AddrPortFrom(r.Src, id.local.Port())
	if r.Src != r.Dst && r.DstMAC.IsZero() && a.dev.HasNeighbourResolver() {
		// The cached route may predate the answer.
		if m, ok := a.dev.ResolveNeighbour(r.Dst); ok {
			r.DstMAC = m
		} else {
			id.resolve = &resolveWait{route: r, dst: dst, deadline: a.clk.Now().Add(timeout)}
			a.countLocked("addr_wait_neighbour")
			a.armLocked(id, min(resolvePoll, timeout))
			return nil
		}
	}
	a.addrResolvedLocked(id, r, dst)
	return nil
}

func (a *Agent) addrResolvedLocked(id *ID, r Route, dst netip.AddrPort) {
	id.route, id.addrOK = r, true
	id.remote = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	a.emitLocked(id, Event{Type: EventAddrResolved})
}

// resolveTimerLocked runs when the timer of an ID waiting for its
// neighbour fires: ADDR_RESOLVED once the resolver knows the MAC,
// ADDR_ERROR at the deadline, else another look later.
func (a *Agent) resolveTimerLocked(id *ID) {
	w := id.resolve
	if id.destroyed {
		id.resolve = nil
		return
	}
	if m, ok := a.dev.ResolveNeighbour(w.route.Dst); ok {
		id.resolve = nil
		w.route.DstMAC = m
		a.addrResolvedLocked(id, w.route, w.dst)
		return
	}
	now := a.clk.Now()
	if !now.Before(w.deadline) {
		id.resolve = nil
		a.countLocked("addr_timeout")
		a.emitLocked(id, Event{Type: EventAddrError,
			Err: fmt.Errorf("resolve %v: %w", w.route.Dst, ErrAddrTimeout)})
		return
	}
	a.armLocked(id, min(resolvePoll, w.deadline.Sub(now)))
}
