package rvtd_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// pair connects two in-process client sessions, a on rvt0 and b on rvt1.
func pair(t *testing.T, sock string, chA, chB bool) (a, b *node) {
	t.Helper()
	var err error
	if a, err = newNodeCh(sock, "rvt0", chA); err != nil {
		t.Fatal(err)
	}
	if b, err = newNodeCh(sock, "rvt1", chB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.c.Close(); b.c.Close() })
	ea, err := a.endpoint()
	if err != nil {
		t.Fatal(err)
	}
	eb, err := b.endpoint()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.connect(eb); err != nil {
		t.Fatal(err)
	}
	if err := b.connect(ea); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// sendOne sends n bytes from a to b and checks both completions and the
// bytes.
func sendOne(t *testing.T, a, b *node, n int, seed int) {
	t.Helper()
	if err := b.qp.PostRecv(77, client.SGE{Addr: b.mr.Addr, Length: 8192, LKey: b.mr.LKey}); err != nil {
		t.Fatal(err)
	}
	for j := 0; j < n; j++ {
		a.shm.Mem[j] = pattern(seed, j)
	}
	if err := a.qp.PostSend(client.SendWR{WRID: 78, Opcode: 2, Flags: 2,
		SGL: []client.SGE{{Addr: a.mr.Addr, Length: uint32(n), LKey: a.mr.LKey}}}); err != nil {
		t.Fatal(err)
	}
	wa, err := a.poll(1)
	if err != nil || wa[0].Status != 0 || wa[0].WRID != 78 {
		t.Fatalf("send completion %+v: %v", wa, err)
	}
	wb, err := b.poll(1)
	if err != nil || wb[0].Status != 0 || wb[0].WRID != 77 || int(wb[0].ByteLen) != n {
		t.Fatalf("receive completion %+v: %v", wb, err)
	}
	for j := 0; j < n; j++ {
		if b.shm.Mem[j] != pattern(seed, j) {
			t.Fatalf("byte %d", j)
		}
	}
}

func TestCompletionChannel(t *testing.T) {
	_, sock := startDaemon(t)
	a, b := pair(t, sock, false, true)
	b.cq.Arm(false)
	got := make(chan uint32, 1)
	go func() {
		h, err := b.ch.GetEvent()
		if err != nil {
			t.Error(err)
		}
		got <- h
	}()
	sendOne(t, a, b, 100, 1)
	select {
	case h := <-got:
		if h != b.cq.Handle {
			t.Fatalf("event for CQ %d, want %d", h, b.cq.Handle)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no completion event")
	}
}

func TestBadWQE(t *testing.T) {
	_, sock := startDaemon(t)
	a, b := pair(t, sock, false, false)
	// An SGE that leaves the MR, then a good WQE: LOC_PROT_ERR, then a
	// flush, and the QP is in ERR.
	_ = a.qp.PostSend(client.SendWR{WRID: 7, Opcode: 2, Flags: 2,
		SGL: []client.SGE{{Addr: a.mr.Addr + shmSize - 10, Length: 100, LKey: a.mr.LKey}}})
	_ = a.qp.PostSend(client.SendWR{WRID: 8, Opcode: 2, Flags: 2,
		SGL: []client.SGE{{Addr: a.mr.Addr, Length: 100, LKey: a.mr.LKey}}})
	wcs, err := a.poll(2)
	if err != nil {
		t.Fatal(err)
	}
	if wcs[0].WRID != 7 || wcs[0].Status != 4 || wcs[1].WRID != 8 || wcs[1].Status != 5 {
		t.Fatalf("completions %+v: want LOC_PROT_ERR then WR_FLUSH_ERR", wcs)
	}
	if at, err := a.qp.Query(); err != nil || at.State != 6 {
		t.Fatalf("QP state %d (%v), want ERR", at.State, err)
	}
	// Another session's lkey is not this QP's: LOC_PROT_ERR.
	c, d := pair(t, sock, false, false)
	_ = c.qp.PostSend(client.SendWR{WRID: 9, Opcode: 2, Flags: 2,
		SGL: []client.SGE{{Addr: b.mr.Addr, Length: 100, LKey: b.mr.LKey}}})
	if wcs, err := c.poll(1); err != nil || wcs[0].Status != 4 {
		t.Fatalf("foreign lkey: %+v %v", wcs, err)
	}
	// An unknown opcode: LOC_QP_OP_ERR.
	_ = d.qp.PostSend(client.SendWR{WRID: 10, Opcode: 200, Flags: 2})
	if wcs, err := d.poll(1); err != nil || wcs[0].Status != 2 {
		t.Fatalf("bad opcode: %+v %v", wcs, err)
	}
}

func TestRingIndexOutOfRange(t *testing.T) {
	srv, sock := startDaemon(t)
	a, _ := pair(t, sock, false, false)
	c, d := pair(t, sock, false, false)
	// a's client writes a producer index far ahead of the consumer's.
	hdr := a.qp.SendRingHeader()
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&hdr[0])), 1<<20)
	if err := a.qp.RingDoorbell(); err != nil {
		t.Fatal(err)
	}
	ev, err := a.dev.ReadAsyncEvent()
	if err != nil || ev.Type != 1 || ev.Element != a.qp.Handle {
		t.Fatalf("async event %+v (%v), want QP_FATAL for QP %d", ev, err, a.qp.Handle)
	}
	waitFor(t, "ring status EPROTO", func() bool {
		return binary.LittleEndian.Uint32(hdr[208:]) == uint32(proto.EPROTO)
	})
	if at, err := a.qp.Query(); err != nil || at.State != 6 {
		t.Fatalf("QP state %d (%v), want ERR", at.State, err)
	}
	// destroy_qp says how many async events were sent about the QP.
	r, err := a.c.Call(proto.OpDestroyQP, a.qp.Handle, nil)
	if err != nil || r.(*proto.EventsReply).AsyncEvents != 1 {
		t.Fatalf("destroy_qp: %+v %v, want 1 async event", r, err)
	}
	// Everyone else goes on.
	sendOne(t, c, d, 1000, 3)
	if st := srv.Stats(); st.Sessions != 4 {
		t.Fatalf("%+v", st)
	}
}

func TestHandlesArePerSession(t *testing.T) {
	_, sock := startDaemon(t)
	a, err := newNode(sock, "rvt0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.c.Close()
	other, err := client.Dial(sock, "other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.OpenDevice("rvt0"); err != nil {
		t.Fatal(err)
	}
	// a's handles: 1 device, 2 PD, 3 shm, 4 MR, 5 CQ, 6 QP. Named by
	// another session they are nothing.
	for _, tc := range []struct {
		op proto.Op
		h  uint32
	}{
		{proto.OpDeallocPD, 2}, {proto.OpDeregMR, 4}, {proto.OpDestroyCQ, 5}, {proto.OpDestroyQP, 6},
		{proto.OpQueryQP, 6}, {proto.OpShmFree, 3}, {proto.OpDeallocPD, 1}, {proto.OpDeallocPD, 0},
	} {
		var body proto.Body
		if tc.op == proto.OpQueryQP {
			body = &proto.QueryQP{}
		}
		if _, err := other.Call(tc.op, tc.h, body); !errors.Is(err, proto.EINVAL) {
			t.Errorf("op %#x handle %d from another session: %v, want EINVAL", uint16(tc.op), tc.h, err)
		}
	}
	// Wrong kinds in a's own session.
	if _, err := a.c.Call(proto.OpDeallocPD, a.dev.Handle, nil); !errors.Is(err, proto.EINVAL) {
		t.Errorf("dealloc_pd of a device handle: %v", err)
	}
	if _, err := a.c.Call(proto.OpDeallocPD, 2, nil); !errors.Is(err, proto.EBUSY) {
		t.Errorf("dealloc_pd with MRs and QPs: %v, want EBUSY", err)
	}
	// Page 1 is never mapped: the daemon's probe of the range fails.
	if _, err := a.c.Call(proto.OpRegMR, 2, &proto.RegMR{Kind: proto.MRVM, Length: 4096, Addr: 4096, IOVA: 4096}); !errors.Is(err, proto.EFAULT) {
		t.Errorf("process_vm MR of unmapped memory: %v, want EFAULT", err)
	}
	if _, err := a.c.OpenDevice("nosuch"); !errors.Is(err, proto.ENOENT) {
		t.Errorf("open_device nosuch: %v", err)
	}
	if at, err := a.qp.Query(); err != nil || at.State != 0 {
		t.Errorf("a's QP after all that: %+v %v", at, err)
	}
}

func TestShutdownTellsClients(t *testing.T) {
	srv, err := rvtd.New(nil, rvtd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sock := t.TempDir() + "/rvtd.sock"
	if err := srv.Listen(sock); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	a, err := newNode(sock, "rvt0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	ev, err := a.dev.ReadAsyncEvent()
	if err != nil || ev.Type != 8 {
		t.Fatalf("async event %+v (%v), want DEVICE_FATAL", ev, err)
	}
	if _, err := a.dev.AllocPD(); err == nil {
		t.Fatal("the session outlived the daemon")
	}
	if st := srv.Stats(); st.Sessions != 0 || st.QPs != 0 || st.CQs != 0 {
		t.Fatalf("after shutdown: %+v", st)
	}
	if _, err := client.Dial(sock, "late"); err == nil {
		t.Fatal("socket still accepting")
	}
}

func TestListQPs(t *testing.T) {
	_, sock := startDaemon(t)
	a, b := pair(t, sock, false, false)
	r, err := a.c.Call(proto.OpListQPs, a.dev.Handle, &proto.ListQPs{})
	if err != nil {
		t.Fatal(err)
	}
	var mine *proto.QPEntry
	for i, e := range r.(*proto.ListQPsReply).QPs {
		if e.QPN == a.qp.QPN {
			mine = &r.(*proto.ListQPsReply).QPs[i]
		}
	}
	if mine == nil || mine.Handle != a.qp.Handle || mine.PID != uint32(os.Getpid()) || mine.State != 3 || mine.Type != 2 {
		t.Fatalf("a's QP: %+v", mine)
	}
	// Another session sees it, without a handle.
	r, err = b.c.Call(proto.OpListQPs, b.dev.Handle, &proto.ListQPs{StartQPN: b.qp.QPN})
	if err != nil {
		t.Fatal(err)
	}
	qps := r.(*proto.ListQPsReply).QPs
	if len(qps) == 0 || qps[0].QPN != b.qp.QPN || qps[0].Handle != b.qp.Handle {
		t.Fatalf("b's list: %+v", qps)
	}
	c, err := newNode(sock, "rvt0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.c.Close()
	r, err = c.c.Call(proto.OpListQPs, c.dev.Handle, &proto.ListQPs{StartQPN: a.qp.QPN})
	if err != nil {
		t.Fatal(err)
	}
	if qps := r.(*proto.ListQPsReply).QPs; len(qps) == 0 || qps[0].QPN != a.qp.QPN || qps[0].Handle != 0 {
		t.Fatalf("a's QP seen from another session: %+v", qps)
	}
}

func TestCQOverflow(t *testing.T) {
	_, sock := startDaemon(t)
	a, err := newNode(sock, "rvt0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newNodeOpts(sock, "rvt1", false, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer a.c.Close()
	defer b.c.Close()
	ea, _ := a.endpoint()
	eb, _ := b.endpoint()
	if err := a.connect(eb); err != nil {
		t.Fatal(err)
	}
	// b's CQ has 16 entries and its receive queue 64: b does not poll, so
	// the 17th receive completion overflows the CQ.
	for i := 0; i < 40; i++ {
		if err := b.qp.PostRecv(uint64(i), client.SGE{Addr: b.mr.Addr, Length: 64, LKey: b.mr.LKey}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.connect(ea); err != nil {
		t.Fatal(err)
	}
	// 20 SENDs: the ring overflows at the 17th; the engine's CQ behind it
	// (32 entries) does not.
	for i := 0; i < 20; i++ {
		if err := a.qp.PostSend(client.SendWR{WRID: uint64(i), Opcode: 2, Flags: 2,
			SGL: []client.SGE{{Addr: a.mr.Addr, Length: 8, LKey: a.mr.LKey}}}); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := b.dev.ReadAsyncEvent()
	if err != nil || ev.Type != 0 || ev.Element != b.cq.Handle {
		t.Fatalf("async event %+v (%v), want CQ_ERR for CQ %d", ev, err, b.cq.Handle)
	}
	waitFor(t, "ring status EIO", func() bool { return b.cq.Status() == uint32(proto.EIO) })
	wcs := make([]client.WC, 32)
	if n, _ := b.cq.Poll(wcs); n != 16 {
		t.Fatalf("%d completions in the ring, want 16", n)
	}
	// The QP whose completions were lost is in ERR (IBTA class G), as on
	// an embedded device: the daemon moves it when the ring overflows.
	waitFor(t, "b's QP in ERR", func() bool {
		at, err := b.qp.Query()
		return err == nil && qp.State(at.State) == qp.Err
	})
}

// TestCQRingExactlyFull: a CQ ring filled to its last slot with nothing
// more waiting, then polled empty, must still get the completions that come
// after (the daemon has no timer that would look at the CQ again).
func TestCQRingExactlyFull(t *testing.T) {
	_, sock := startDaemon(t)
	a, err := newNode(sock, "rvt0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := newNodeOpts(sock, "rvt1", false, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer a.c.Close()
	defer b.c.Close()
	ea, _ := a.endpoint()
	eb, _ := b.endpoint()
	if err := a.connect(eb); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 32; i++ {
		if err := b.qp.PostRecv(uint64(i), client.SGE{Addr: b.mr.Addr, Length: 64, LKey: b.mr.LKey}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.connect(ea); err != nil {
		t.Fatal(err)
	}
	send := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if err := a.qp.PostSend(client.SendWR{WRID: uint64(i), Opcode: 2, Flags: 2,
				SGL: []client.SGE{{Addr: a.mr.Addr, Length: 8, LKey: a.mr.LKey}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	wcs := make([]client.WC, 32)
	got := 0
	collect := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for got < want && time.Now().Before(deadline) {
			n, err := b.cq.Poll(wcs)
			if err != nil {
				t.Fatal(err)
			}
			for _, wc := range wcs[:n] {
				if wc.Status != 0 || wc.WRID != uint64(got) {
					t.Fatalf("completion %d: %+v", got, wc)
				}
				got++
			}
			time.Sleep(100 * time.Microsecond)
		}
		if got != want {
			t.Fatalf("%d receive completions, want %d", got, want)
		}
	}
	send(0, 16) // exactly the ring's 16 entries
	waitFor(t, "a full ring", func() bool { n, _ := b.cq.Ring().Available(); return n == 16 })
	time.Sleep(20 * time.Millisecond) // let the daemon find the ring full
	collect(16)
	send(16, 4)
	collect(20)
	if st := b.cq.Status(); st != 0 {
		t.Fatalf("ring status %d, want 0 (no overflow)", st)
	}
}

func TestUD(t *testing.T) {
	_, sock := startDaemon(t)
	mk := func(dev string) (*node, uint32) {
		n, err := newNode(sock, dev)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.c.Close() })
		pd := uint32(2)
		if n.qp, err = n.dev.CreateQP(pd, 4, n.cq, n.cq, proto.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}); err != nil {
			t.Fatal(err)
		}
		const qkey, maskQKey = 0x11111111, 1 << 6
		if err := n.qp.Modify(proto.QPAttr{State: 1, Port: 1, QKey: qkey}, maskState|maskPKey|maskPort|maskQKey); err != nil {
			t.Fatal(err)
		}
		if err := n.qp.Modify(proto.QPAttr{State: 2}, maskState); err != nil {
			t.Fatal(err)
		}
		if err := n.qp.Modify(proto.QPAttr{State: 3, SQPSN: 7}, maskState|maskSQPSN); err != nil {
			t.Fatal(err)
		}
		return n, pd
	}
	a, pdA := mk("rvt0")
	b, _ := mk("rvt1")
	eb, err := b.endpoint()
	if err != nil {
		t.Fatal(err)
	}
	ah, err := a.dev.CreateAH(pdA, proto.AV{DGID: eb.GID, SGIDIndex: 1, HopLimit: 64, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.qp.PostRecv(5, client.SGE{Addr: b.mr.Addr, Length: 40 + 1024, LKey: b.mr.LKey}); err != nil {
		t.Fatal(err)
	}
	// A datagram that finds no receive is dropped (UD has no RNR): wait
	// until the daemon has taken the receive from the ring.
	waitFor(t, "the receive to reach the engine", func() bool {
		r, err := b.c.Call(proto.OpListQPs, b.dev.Handle, &proto.ListQPs{StartQPN: b.qp.QPN})
		qps := r.(*proto.ListQPsReply).QPs
		return err == nil && len(qps) > 0 && qps[0].QPN == b.qp.QPN && qps[0].RQPosted == 1
	})
	for j := 0; j < 1000; j++ {
		a.shm.Mem[j] = pattern(4, j)
	}
	if err := a.qp.PostSend(client.SendWR{WRID: 6, Opcode: 2, Flags: 2, AH: ah, RemoteQPN: b.qp.QPN, RemoteQKey: 0x11111111,
		SGL: []client.SGE{{Addr: a.mr.Addr, Length: 1000, LKey: a.mr.LKey}}}); err != nil {
		t.Fatal(err)
	}
	if wcs, err := a.poll(1); err != nil || wcs[0].Status != 0 || wcs[0].WRID != 6 {
		t.Fatalf("UD send: %+v %v", wcs, err)
	}
	wcs, err := b.poll(1)
	if err != nil {
		r, _ := b.c.Call(proto.OpQueryCounters, b.dev.Handle, nil)
		for _, c := range r.(*proto.CountersReply).Counters {
			if c.Value != 0 {
				t.Log(c.Name, c.Value)
			}
		}
	}
	if err != nil || wcs[0].Status != 0 || wcs[0].WRID != 5 || wcs[0].ByteLen != 1040 || wcs[0].SrcQP != a.qp.QPN {
		t.Fatalf("UD receive: %+v %v", wcs, err)
	}
	for j := 0; j < 1000; j++ {
		if b.shm.Mem[40+j] != pattern(4, j) {
			t.Fatalf("byte %d", j)
		}
	}
	// An AH handle that is not one: LOC_QP_OP_ERR, and the QP in ERR.
	_ = a.qp.PostSend(client.SendWR{WRID: 8, Opcode: 2, Flags: 2, AH: 999, RemoteQPN: b.qp.QPN, RemoteQKey: 0x11111111})
	if wcs, err := a.poll(1); err != nil || wcs[0].Status != 2 || wcs[0].WRID != 8 {
		t.Fatalf("bad AH: %+v %v", wcs, err)
	}
}

func TestAsyncEventsWaitForRoom(t *testing.T) {
	_, sock := startDaemon(t)
	a, _ := pair(t, sock, false, false)
	// The client reads no events while the daemon sends more than its
	// socket holds: a QP_FATAL from each of 400 QPs in INIT whose receive
	// ring index it puts out of range.
	const n = 400
	pd := uint32(2)
	var qps []*client.QP
	for i := 0; i < n; i++ {
		q, err := a.dev.CreateQP(pd, 2, a.cq, a.cq, proto.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		qps = append(qps, q)
		if err := q.Modify(proto.QPAttr{State: 1, Port: 1, AccessFlags: accessAll}, maskState|maskPKey|maskPort|maskAccess); err != nil {
			t.Fatal(err)
		}
		hdr := q.RecvRingHeader()
		atomic.StoreUint32((*uint32)(unsafe.Pointer(&hdr[0])), 1<<20)
		_ = q.RingDoorbell()
	}
	time.Sleep(100 * time.Millisecond)
	seen := map[uint32]bool{}
	for len(seen) < n {
		ev, err := a.dev.ReadAsyncEvent()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != 1 {
			t.Fatalf("event %+v", ev)
		}
		seen[ev.Element] = true
	}
	for _, q := range qps {
		if !seen[q.Handle] {
			t.Fatalf("no event for QP %d", q.Handle)
		}
	}
}

func TestPortEvent(t *testing.T) {
	srv, sock := startDaemon(t)
	_, d := openDevice(t, sock, "port", "rvt0")
	mac, addrs := devopen.NodeAddrs(0)
	extra := netip.MustParseAddr("2001:db8::5")
	if err := srv.Device("rvt0").SetAddrs(netdev.GIDOrder(mac, append(addrs[1:], extra))); err != nil {
		t.Fatal(err)
	}
	ev, err := d.ReadAsyncEvent()
	if err != nil || ev.Type != 18 || ev.Element != 1 {
		t.Fatalf("event %+v (%v), want GID_CHANGE on port 1", ev, err)
	}
	g, err := d.QueryGID(2)
	if err != nil || netip.AddrFrom16(g) != extra {
		t.Fatalf("GID 2: %v %v", netip.AddrFrom16(g), err)
	}
}

func TestResizeCQ(t *testing.T) {
	_, sock := startDaemon(t)
	a, b := pair(t, sock, false, false)
	for i := 0; i < 40; i++ {
		if err := b.qp.PostRecv(uint64(i), client.SGE{Addr: b.mr.Addr, Length: 64, LKey: b.mr.LKey}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(from, to int) {
		for i := from; i < to; i++ {
			if err := a.qp.PostSend(client.SendWR{WRID: uint64(i), Opcode: 2, Flags: 2,
				SGL: []client.SGE{{Addr: a.mr.Addr, Length: 8, LKey: a.mr.LKey}}}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.poll(to - from); err != nil {
			t.Fatal(err)
		}
	}
	send(0, 20)
	// 20 receive completions are in b's ring, unread; resize to 1024 and
	// to 64: they stay, in order; then 20 more land in the new ring.
	waitFor(t, "20 receive completions", func() bool {
		r, _ := b.c.Call(proto.OpListQPs, b.dev.Handle, &proto.ListQPs{StartQPN: b.qp.QPN})
		qps := r.(*proto.ListQPsReply).QPs
		return len(qps) > 0 && qps[0].RQPosted == 20
	})
	time.Sleep(10 * time.Millisecond)
	if err := b.cq.Resize(1024); err != nil {
		t.Fatal(err)
	}
	if err := b.cq.Resize(64); err != nil {
		t.Fatal(err)
	}
	if err := b.cq.Resize(8); !errors.Is(err, proto.EINVAL) {
		t.Fatalf("resize below the unread completions: %v, want EINVAL", err)
	}
	send(20, 40)
	wcs, err := b.poll(40)
	if err != nil {
		t.Fatal(err)
	}
	for i, wc := range wcs {
		if wc.WRID != uint64(i) || wc.Status != 0 {
			t.Fatalf("completion %d: %+v", i, wc)
		}
	}
}
