package rvtd_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softverbs/softverbs/rvtd/proto"
)

// TestCMListenAfterConnect: a REQ that arrives before the listener (perftest
// -R's client connects right after its handshake, sometimes before the
// server's rdma_listen) reaches the listener that appears within the
// daemon's wait, instead of REJ 8; with nobody listening, REJ 8 comes at
// the end of the wait.
func TestCMListenAfterConnect(t *testing.T) {
	srv, sock := startDaemon(t)
	s, err := newCMNode(sock, "rvt0", 2)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newCMNode(sock, "rvt1", 2)
	if err != nil {
		t.Fatal(err)
	}
	// A free port: a listener's, destroyed.
	lid, port, err := listen(s.ch, 1, proto.PSTCP, 2, netip.AddrPortFrom(ip0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lid.Destroy(); err != nil {
		t.Fatal(err)
	}
	id, err := c.ch.CreateID(2, proto.PSTCP, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := resolve(c.ch, id, ip1, netip.AddrPortFrom(ip0, port)); err != nil {
		t.Fatal(err)
	}
	if err := id.Connect(proto.CMConnParam{QP: c.qp.Handle, RetryCount: 7, RNRRetryCount: 7, PrivateData: helloB}); err != nil {
		t.Fatal(err)
	}
	// The REQ has arrived and found nobody; the client hears nothing yet.
	if ev, err := c.ch.GetEvent(200 * time.Millisecond); err == nil {
		t.Fatalf("before the listener: event %d (status %d), want none", ev.Event, ev.Status)
	}
	lid, _, err = listen(s.ch, 3, proto.PSTCP, 2, netip.AddrPortFrom(ip0, port))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := waitEvent(s.ch, evConnectRequest)
	if err != nil {
		t.Fatalf("the late listener: %v", err)
	}
	if ev.ListenID != lid.Handle || ev.Context != 3 {
		t.Errorf("request for listener %d context %d, want %d, 3", ev.ListenID, ev.Context, lid.Handle)
	}
	nid := s.c.EventID(ev)
	if err := nid.Reject([]byte("later")); err != nil {
		t.Fatal(err)
	}
	if ev, err = waitEvent(c.ch, evRejected); err != nil || ev.Status != 28 {
		t.Errorf("after the listener's reject: %+v, %v (want status 28, the consumer's)", ev, err)
	}
	for _, x := range []interface{ Destroy() (uint32, error) }{nid, lid, id} {
		if _, err := x.Destroy(); err != nil {
			t.Error(err)
		}
	}

	// An active ID destroyed while its REQ waits (its REJ withdraws the
	// REQ): a listener that appears later gets no request.
	id, err = c.ch.CreateID(2, proto.PSTCP, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := resolve(c.ch, id, ip1, netip.AddrPortFrom(ip0, port)); err != nil {
		t.Fatal(err)
	}
	if err := id.Connect(proto.CMConnParam{QP: c.qp.Handle}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := id.Destroy(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	lid, _, err = listen(s.ch, 4, proto.PSTCP, 2, netip.AddrPortFrom(ip0, port))
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := s.ch.GetEvent(300 * time.Millisecond); err == nil {
		t.Errorf("request of a destroyed ID reached the listener: event %d", ev.Event)
	}
	if _, err := lid.Destroy(); err != nil {
		t.Error(err)
	}

	// Nobody listens: REJ 8 at the end of the wait, not before.
	id, err = c.ch.CreateID(2, proto.PSTCP, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := resolve(c.ch, id, ip1, netip.AddrPortFrom(ip0, port)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := id.Connect(proto.CMConnParam{QP: c.qp.Handle}); err != nil {
		t.Fatal(err)
	}
	if ev, err = waitEvent(c.ch, evRejected); err != nil || ev.Status != 8 {
		t.Errorf("connect to nobody: %+v, %v", ev, err)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("REJ 8 after %v, want the daemon's wait (1 s)", d)
	}
	if _, err := id.Destroy(); err != nil {
		t.Error(err)
	}
	s.c.Close()
	c.c.Close()
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 })
	cmClean(t, srv)
}
