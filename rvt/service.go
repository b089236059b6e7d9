package rvt

import (
	"errors"
	"io"
	"net/netip"
	"slices"
	"sync"

	"github.com/softverbs/softverbs/netdev"
)

// services are the per-device services of higher layers (the connection
// manager's agent), kept by the device so that no package needs a
// registry of its own, as the kernel keeps one ib_client's data per
// device. Lock order: services.mu is a leaf; it is never held while a
// service opens or closes.
type services struct {
	mu     sync.Mutex
	closed bool
	byKey  map[any]*service
	order  []*service // opened, in order of opening
}

type service struct {
	key   any
	ready chan struct{} // closed when open has returned
	c     io.Closer
	err   error
}

// Service returns the device's service for key, opening it with open on
// the first call: one service per key and device, as the kernel keeps one
// client per device. Concurrent calls for a key wait for the one that
// opens it and get the same service, or the same error; a failed open is
// not kept, so a later call tries again. open runs with no device lock
// held and may use the device (create PDs, CQs, QPs) and ask for other
// keys, but not for its own. Device.Close closes the services, in the
// reverse order of their opening, before it stops the device's QPs; after
// Close, Service returns ErrClosed. key must be comparable; a package
// uses a key type of its own (an unexported struct type), as with
// context.WithValue.
func (d *Device) Service(key any, open func() (io.Closer, error)) (any, error) {
	s := &d.svc
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if e := s.byKey[key]; e != nil {
		s.mu.Unlock()
		<-e.ready
		if e.err != nil {
			return nil, e.err
		}
		return e.c, nil
	}
	e := &service{key: key, ready: make(chan struct{})}
	if s.byKey == nil {
		s.byKey = make(map[any]*service)
	}
	s.byKey[key] = e
	s.mu.Unlock()

	e.c, e.err = open()
	if e.err == nil && e.c == nil {
		e.err = errors.New("rvt: service opened nil")
	}
	s.mu.Lock()
	closing := s.closed
	switch {
	case e.err != nil:
		delete(s.byKey, key)
	case closing:
		delete(s.byKey, key)
		e.err = ErrClosed
	default:
		s.order = append(s.order, e)
	}
	s.mu.Unlock()
	if closing && e.c != nil {
		_ = e.c.Close() // the device closed while it opened
		e.c = nil
	}
	close(e.ready)
	if e.err != nil {
		return nil, e.err
	}
	return e.c, nil
}

// DropService forgets the service under key if it is c, without closing
// it: for a service that is being closed by its owner, so that the next
// Service call for key opens a new one. It reports whether c was the
// device's service.
func (d *Device) DropService(key any, c io.Closer) bool {
	s := &d.svc
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byKey[key]
	if e == nil || e.c != c {
		return false
	}
	delete(s.byKey, key)
	s.order = slices.DeleteFunc(s.order, func(x *service) bool { return x == e })
	return true
}

// closeServices closes the services, newest first (Close).
func (d *Device) closeServices() {
	s := &d.svc
	s.mu.Lock()
	s.closed = true
	order := s.order
	s.order = nil
	clear(s.byKey)
	s.mu.Unlock()
	for _, e := range slices.Backward(order) {
		_ = e.c.Close()
	}
}

// Route returns the next hop of a packet to dst by the port's routing
// table (Options.Route): dst itself on a subnet of the port, a gateway
// off them, or an error wrapping netdev.ErrNetUnreachable when no route
// covers dst, as the connection manager's address resolution asks
// (rdma_resolve_addr fails at once with ENETUNREACH on Linux). A device
// without a table takes every destination as on-link.
func (d *Device) Route(dst netip.Addr) (netip.Addr, error) {
	if d.opts.Route == nil {
		return dst.Unmap(), nil
	}
	return d.opts.Route(dst)
}

// ResolveNeighbour asks the port's resolver (Options.Resolve) for the MAC
// of ip, as the transport does for each destination. It is false when the
// resolver does not know ip (yet) and when the device has none; a
// resolver that resolves on the wire (host.Host, the kernel's neighbour
// table) may send a request as it is asked, so a later call may succeed.
// For the connection manager's route resolution, which needs no Resolve
// option of its own.
func (d *Device) ResolveNeighbour(ip netip.Addr) (netdev.MAC, bool) {
	if d.opts.Resolve == nil {
		return netdev.MAC{}, false
	}
	return d.opts.Resolve(ip)
}
