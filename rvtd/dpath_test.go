package rvtd_test

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// Tests of the data path's completeness: SRQs, multicast, the engine
// pulling receives, RESET.

// withQP is n with q as its QP (to connect another QP of n's session).
func withQP(n *node, q *client.QP) *node {
	m := *n
	m.qp = q
	return &m
}

// connectQPs connects qa (of a's session) and qb (of b's) to each other
// and returns a and b with them as their QPs.
func connectQPs(t *testing.T, a, b *node, qa, qb *client.QP) (na, nb *node) {
	t.Helper()
	na, nb = withQP(a, qa), withQP(b, qb)
	ea, err := na.endpoint()
	if err != nil {
		t.Fatal(err)
	}
	eb, err := nb.endpoint()
	if err != nil {
		t.Fatal(err)
	}
	if err := na.connect(eb); err != nil {
		t.Fatal(err)
	}
	if err := nb.connect(ea); err != nil {
		t.Fatal(err)
	}
	return na, nb
}

// qpCounters returns the counters of one of the session's QPs (or of the
// device, for the device handle).
func qpCounters(t *testing.T, n *node, handle uint32) map[string]uint64 {
	t.Helper()
	r, err := n.c.Call(proto.OpQueryCounters, handle, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]uint64{}
	for _, c := range r.(*proto.CountersReply).Counters {
		m[c.Name] = c.Value
	}
	return m
}

// post sends one SEND of n bytes from off in a's memory, its first two
// bytes tagged, the rest a pattern of the tag.
func postSend(t *testing.T, a *node, q *client.QP, wrid uint64, off uint64, n int, tag uint16) {
	t.Helper()
	m := a.shm.Mem[off:]
	binary.LittleEndian.PutUint16(m, tag)
	for j := 2; j < n; j++ {
		m[j] = pattern(int(tag), j)
	}
	if err := q.PostSend(client.SendWR{WRID: wrid, Opcode: 2, Flags: 2,
		SGL: []client.SGE{{Addr: a.mr.Addr + off, Length: uint32(n), LKey: a.mr.LKey}}}); err != nil {
		t.Fatal(err)
	}
}

// TestSRQSharedByTwoQPs: two RC QPs of one session on one SRQ, each
// connected to a peer of its own (two other sessions); both peers send,
// every message lands in an SRQ receive, on the right QP, byte for byte.
func TestSRQSharedByTwoQPs(t *testing.T) {
	_, sock := startDaemon(t)
	b, err := newNode(sock, "rvt1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.c.Close() })
	const pd = 2 // newNode's PD
	srq, err := b.dev.CreateSRQ(pd, 32, 1, 0, 0xabc)
	if err != nil {
		t.Fatal(err)
	}
	var peers [2]*node
	var qps [2]*client.QP
	for i := range peers {
		if peers[i], err = newNode(sock, "rvt0"); err != nil {
			t.Fatal(err)
		}
		p := peers[i]
		t.Cleanup(func() { p.c.Close() })
		if qps[i], err = b.dev.CreateQPOnSRQ(pd, 2, b.cq, b.cq, srq, proto.Cap{MaxSendWR: 16, MaxSendSGE: 1}); err != nil {
			t.Fatal(err)
		}
		bi := withQP(b, qps[i])
		ea, err := p.endpoint()
		if err != nil {
			t.Fatal(err)
		}
		eb, err := bi.endpoint()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.connect(eb); err != nil {
			t.Fatal(err)
		}
		if err := bi.connect(ea); err != nil {
			t.Fatal(err)
		}
	}
	if err := qps[0].PostRecv(1); err == nil {
		t.Fatal("a QP on an SRQ took a receive of its own")
	}
	const perPeer, size = 8, 1500
	for k := 0; k < 2*perPeer; k++ {
		if err := srq.PostRecv(uint64(1000+k), client.SGE{Addr: b.mr.Addr + uint64(k)*4096, Length: 4096, LKey: b.mr.LKey}); err != nil {
			t.Fatal(err)
		}
	}
	for m := 0; m < perPeer; m++ {
		for i, p := range peers {
			postSend(t, p, p.qp, uint64(m), uint64(m)*4096, size-m*10, uint16(i<<8|m))
		}
	}
	for i, p := range peers {
		if wcs, err := p.poll(perPeer); err != nil {
			t.Fatalf("peer %d sends: %v", i, err)
		} else {
			for _, wc := range wcs {
				if wc.Status != 0 {
					t.Fatalf("peer %d send completion %+v", i, wc)
				}
			}
		}
	}
	wcs, err := b.poll(2 * perPeer)
	if err != nil {
		t.Fatal(err)
	}
	next := [2]int{} // each QP's messages arrive in order
	seen := map[uint64]bool{}
	for _, wc := range wcs {
		if wc.Status != 0 || wc.Opcode != 128 || wc.WRID < 1000 || wc.WRID >= 1000+2*perPeer || seen[wc.WRID] {
			t.Fatalf("receive completion %+v", wc)
		}
		seen[wc.WRID] = true
		buf := b.shm.Mem[(wc.WRID-1000)*4096:]
		tag := binary.LittleEndian.Uint16(buf)
		i, m := int(tag>>8), int(tag&0xff)
		if i > 1 || wc.QPNum != qps[i].QPN || m != next[i] || int(wc.ByteLen) != size-m*10 {
			t.Fatalf("completion %+v: message %d of peer %d, want QP %#x, message %d", wc, m, i, qps[i].QPN, next[i])
		}
		next[i]++
		for j := 2; j < int(wc.ByteLen); j++ {
			if buf[j] != pattern(int(tag), j) {
				t.Fatalf("message %d of peer %d: byte %d", m, i, j)
			}
		}
	}
	// The SRQ is busy while its QPs live.
	if err := srq.Destroy(); err == nil || err != proto.EBUSY {
		t.Fatalf("destroy of a used SRQ: %v, want EBUSY", err)
	}
}

// srqPair connects a new RC QP on a (send depth sendWR) to a new QP of b's
// that takes its receives from a new SRQ of b's (depth srqWR, cookie), in
// PD 2.
func srqPair(t *testing.T, sock string, srqWR uint32, cookie uint64, sendWR uint32) (a, b, na, nb *node, srq *client.SRQ) {
	t.Helper()
	a, b = pair(t, sock, false, false)
	const pd = 2
	srq, err := b.dev.CreateSRQ(pd, srqWR, 1, 0, cookie)
	if err != nil {
		t.Fatal(err)
	}
	q, err := b.dev.CreateQPOnSRQ(pd, 2, b.cq, b.cq, srq, proto.Cap{MaxSendWR: 4, MaxSendSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	qa, err := a.dev.CreateQP(pd, 2, a.cq, a.cq, proto.Cap{MaxSendWR: sendWR, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	na, nb = connectQPs(t, a, b, qa, q)
	return a, b, na, nb, srq
}

// TestSRQLimit: an armed SRQ limit raises IBV_EVENT_SRQ_LIMIT_REACHED
// once, when the WQEs the SRQ holds fall below it, and disarms.
func TestSRQLimit(t *testing.T) {
	_, sock := startDaemon(t)
	a, b, na, nb, srq := srqPair(t, sock, 16, 0x5151, 16)
	if err := srq.Modify(17); err != proto.EINVAL {
		t.Fatalf("a limit above max_wr: %v, want EINVAL", err)
	}
	if err := srq.Modify(3); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 5; k++ {
		if err := srq.PostRecv(uint64(k), client.SGE{Addr: b.mr.Addr + uint64(k)*256, Length: 256, LKey: b.mr.LKey}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(k int) {
		t.Helper()
		postSend(t, a, na.qp, uint64(k), 0, 64, uint16(k))
		if wcs, err := a.poll(1); err != nil || wcs[0].Status != 0 {
			t.Fatalf("send %d: %+v %v", k, wcs, err)
		}
		if wcs, err := b.poll(1); err != nil || wcs[0].Status != 0 || wcs[0].WRID != uint64(k) {
			t.Fatalf("receive %d: %+v %v", k, wcs, err)
		}
	}
	send(0) // 4 left
	send(1) // 3 left: not below the limit
	if attr, err := srq.Query(); err != nil || attr.SRQLimit != 3 || attr.MaxWR != 16 {
		t.Fatalf("query_srq with 3 left: %+v %v, want the limit 3 still armed", attr, err)
	}
	send(2) // 2 left: below
	ev, err := b.dev.ReadAsyncEvent()
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != 15 || ev.Element != srq.Handle || ev.Cookie != 0x5151 {
		t.Fatalf("event %+v, want SRQ_LIMIT_REACHED (15) for SRQ %d", ev, srq.Handle)
	}
	if attr, err := srq.Query(); err != nil || attr.SRQLimit != 0 {
		t.Fatalf("query_srq after the event: %+v %v, want the limit disarmed", attr, err)
	}
	// Destroy in order: the QP, then the SRQ.
	if err := nb.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := srq.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// udNode is a client on dev with a UD QP in RTS (Q_Key udQKey).
func udNode(t *testing.T, sock, dev string) *node {
	t.Helper()
	n, err := newNode(sock, dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.c.Close() })
	if n.qp, err = n.dev.CreateQP(2, 4, n.cq, n.cq, proto.Cap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}); err != nil {
		t.Fatal(err)
	}
	const maskQKey = 1 << 6
	if err := n.qp.Modify(proto.QPAttr{State: 1, Port: 1, QKey: udQKey}, maskState|maskPKey|maskPort|maskQKey); err != nil {
		t.Fatal(err)
	}
	if err := n.qp.Modify(proto.QPAttr{State: 2}, maskState); err != nil {
		t.Fatal(err)
	}
	if err := n.qp.Modify(proto.QPAttr{State: 3}, maskState|maskSQPSN); err != nil {
		t.Fatal(err)
	}
	return n
}

const udQKey = 0x11111111

// TestUDMulticast: UD QPs of two sessions attached to one group both get
// a datagram sent to it; after one detaches only the other does; after
// the other's session ends the group is gone from the device.
func TestUDMulticast(t *testing.T) {
	srv, sock := startDaemon(t)
	src := udNode(t, sock, "rvt0")
	m1 := udNode(t, sock, "rvt1")
	m2 := udNode(t, sock, "rvt1")
	mgid := [16]byte(netdev.GIDFromIP(netip.MustParseAddr("239.1.2.3")))
	for _, m := range []*node{m1, m2} {
		if err := m.qp.AttachMcast(mgid, 0xC000); err != nil {
			t.Fatal(err)
		}
	}
	if err := m1.qp.AttachMcast(mgid, 0xC000); err != proto.EEXIST {
		t.Fatalf("attaching twice: %v, want EEXIST", err)
	}
	// An RC QP cannot join.
	rc, err := newNode(sock, "rvt1")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.c.Close()
	if err := rc.qp.AttachMcast(mgid, 0xC000); err != proto.EINVAL {
		t.Fatalf("attaching an RC QP: %v, want EINVAL", err)
	}
	if _, err := src.dev.CreateAH(2, proto.AV{DGID: mgid, SGIDIndex: 1, HopLimit: 64, Port: 7, IsGlobal: true}); !errors.Is(err, proto.EINVAL) {
		t.Fatalf("an AH on port 7: %v, want EINVAL (rdma_check_ah_attr)", err)
	}
	ah, err := src.dev.CreateAH(2, proto.AV{DGID: mgid, SGIDIndex: 1, HopLimit: 64, Port: 1})
	if err != nil {
		t.Fatal(err)
	}
	recv := func(m *node, wrid uint64) {
		t.Helper()
		if err := m.qp.PostRecv(wrid, client.SGE{Addr: m.mr.Addr, Length: 40 + 512, LKey: m.mr.LKey}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(wrid uint64, tag uint16) {
		t.Helper()
		m := src.shm.Mem
		binary.LittleEndian.PutUint16(m, tag)
		if err := src.qp.PostSend(client.SendWR{WRID: wrid, Opcode: 2, Flags: 2, AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: udQKey,
			SGL: []client.SGE{{Addr: src.mr.Addr, Length: 100, LKey: src.mr.LKey}}}); err != nil {
			t.Fatal(err)
		}
		if wcs, err := src.poll(1); err != nil || wcs[0].Status != 0 {
			t.Fatalf("multicast send: %+v %v", wcs, err)
		}
	}
	got := func(m *node, wrid uint64, tag uint16) {
		t.Helper()
		wcs, err := m.poll(1)
		if err != nil || wcs[0].Status != 0 || wcs[0].WRID != wrid || wcs[0].ByteLen != 140 || wcs[0].SrcQP != src.qp.QPN {
			t.Fatalf("multicast receive: %+v %v", wcs, err)
		}
		if g := binary.LittleEndian.Uint16(m.shm.Mem[40:]); g != tag {
			t.Fatalf("datagram %#x, want %#x", g, tag)
		}
	}
	recv(m1, 1)
	recv(m2, 2)
	send(10, 0x1111)
	got(m1, 1, 0x1111)
	got(m2, 2, 0x1111)

	if err := m1.qp.DetachMcast(mgid, 0xC000); err != nil {
		t.Fatal(err)
	}
	if err := m1.qp.DetachMcast(mgid, 0xC000); err != proto.EINVAL {
		t.Fatalf("detaching twice: %v, want EINVAL", err)
	}
	recv(m1, 3)
	recv(m2, 4)
	send(11, 0x2222)
	got(m2, 4, 0x2222)
	time.Sleep(50 * time.Millisecond)
	var buf [4]client.WC
	if k, _ := m1.cq.Poll(buf[:]); k != 0 {
		t.Fatalf("a detached QP received %+v", buf[:k])
	}
	if c := qpCounters(t, m1, m1.qp.Handle); c["rdma_recvs"] != 1 {
		t.Fatalf("detached QP: %d receives, want 1", c["rdma_recvs"])
	}

	// m2's session ends: its QP leaves the group, which is then empty: a
	// datagram to it reaches the device and is dropped for want of a QP.
	dev := srv.Device("rvt1")
	before := dev.Counters()
	m2.c.Close()
	waitFor(t, "m2's session to end", func() bool { return srv.Stats().Sessions == 3 })
	send(12, 0x3333)
	time.Sleep(50 * time.Millisecond)
	after := dev.Counters()
	unknown := func(c map[string]uint64) uint64 { return c["drop_unknown_qp"] }
	if after["rdma_recvs"] != before["rdma_recvs"] || after["rcvd_pkts"] == before["rcvd_pkts"] || unknown(after) != unknown(before)+1 {
		t.Fatalf("a datagram to the group after its last member's session ended: rcvd_pkts %d -> %d, dropped for no QP %d -> %d, rdma_recvs %d -> %d; want one more packet, dropped",
			before["rcvd_pkts"], after["rcvd_pkts"], unknown(before), unknown(after), before["rdma_recvs"], after["rdma_recvs"])
	}
	if k, _ := m1.cq.Poll(buf[:]); k != 0 {
		t.Fatalf("a detached QP received %+v", buf[:k])
	}
}

// clearNeedWakeup makes the ring of header hdr (a QP's send or receive
// ring) look busy to the client, so that its next post does not ring the
// doorbell: the loop does not take it. (A receive is then taken by the
// engine's pull, a send by a request that follows it.)
func clearNeedWakeup(hdr []byte) {
	binary.LittleEndian.PutUint32(hdr[128:], 0)
}

// TestRecvPulledOnArrival: a receive the loop has not taken (the client
// did not ring) is pulled by the engine when the message arrives: no RNR
// NAK on RC, no dropped datagram on UD.
func TestRecvPulledOnArrival(t *testing.T) {
	_, sock := startDaemon(t)
	t.Run("RC", func(t *testing.T) {
		a, b := pair(t, sock, false, false)
		for i := 0; i < 20; i++ {
			clearNeedWakeup(b.qp.RecvRingHeader())
			if err := b.qp.PostRecv(uint64(100+i), client.SGE{Addr: b.mr.Addr, Length: 4096, LKey: b.mr.LKey}); err != nil {
				t.Fatal(err)
			}
			postSend(t, a, a.qp, uint64(i), 0, 1000, uint16(i))
			if wcs, err := a.poll(1); err != nil || wcs[0].Status != 0 {
				t.Fatalf("send %d: %+v %v", i, wcs, err)
			}
			if wcs, err := b.poll(1); err != nil || wcs[0].Status != 0 || wcs[0].WRID != uint64(100+i) {
				t.Fatalf("receive %d: %+v %v", i, wcs, err)
			}
		}
		if c := qpCounters(t, b, b.qp.Handle); c["send_rnr_err"] != 0 || c["rdma_recvs"] != 20 {
			t.Fatalf("receiver: %d RNR NAKs sent, %d receives; want 0 and 20", c["send_rnr_err"], c["rdma_recvs"])
		}
		if c := qpCounters(t, a, a.qp.Handle); c["rcvd_rnr_err"] != 0 {
			t.Fatalf("sender: %d RNR NAKs received, want 0", c["rcvd_rnr_err"])
		}
	})
	t.Run("UD", func(t *testing.T) {
		a := udNode(t, sock, "rvt0")
		b := udNode(t, sock, "rvt1")
		eb, err := b.endpoint()
		if err != nil {
			t.Fatal(err)
		}
		ah, err := a.dev.CreateAH(2, proto.AV{DGID: eb.GID, SGIDIndex: 1, HopLimit: 64, Port: 1})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 20; i++ {
			clearNeedWakeup(b.qp.RecvRingHeader())
			if err := b.qp.PostRecv(uint64(100+i), client.SGE{Addr: b.mr.Addr, Length: 4096, LKey: b.mr.LKey}); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.PostSend(client.SendWR{WRID: uint64(i), Opcode: 2, Flags: 2, AH: ah, RemoteQPN: b.qp.QPN, RemoteQKey: udQKey,
				SGL: []client.SGE{{Addr: a.mr.Addr, Length: 256, LKey: a.mr.LKey}}}); err != nil {
				t.Fatal(err)
			}
			if wcs, err := a.poll(1); err != nil || wcs[0].Status != 0 {
				t.Fatalf("send %d: %+v %v", i, wcs, err)
			}
			if wcs, err := b.poll(1); err != nil || wcs[0].Status != 0 || wcs[0].WRID != uint64(100+i) {
				t.Fatalf("receive %d: %+v %v", i, wcs, err)
			}
		}
		if c := qpCounters(t, b, b.qp.Handle); c["recv_wqe_missing"] != 0 || c["rdma_recvs"] != 20 {
			t.Fatalf("receiver: %d datagrams without a WQE, %d receives; want 0 and 20", c["recv_wqe_missing"], c["rdma_recvs"])
		}
	})
}

// TestResetReconnect: modify_qp to RESET discards the WQEs on both rings
// (no completions), restarts the ring indices at 0, and the QPs connect
// again and carry traffic, with the right wr_ids.
func TestResetReconnect(t *testing.T) {
	_, sock := startDaemon(t)
	a, b := pair(t, sock, false, false)
	sendOne(t, a, b, 100, 1)
	// Receives left posted on b (taken by the daemon: the client rang).
	for i := 0; i < 5; i++ {
		if err := b.qp.PostRecv(uint64(500+i), client.SGE{Addr: b.mr.Addr, Length: 4096, LKey: b.mr.LKey}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the receives to reach the engine", func() bool {
		r, err := b.c.Call(proto.OpListQPs, b.dev.Handle, &proto.ListQPs{StartQPN: b.qp.QPN})
		qps := r.(*proto.ListQPsReply).QPs
		return err == nil && len(qps) > 0 && qps[0].RQPosted == 5
	})
	for _, n := range []*node{a, b} {
		if err := n.qp.Modify(proto.QPAttr{State: 0}, maskState); err != nil {
			t.Fatal(err)
		}
		for _, h := range [][]byte{n.qp.SendRingHeader(), n.qp.RecvRingHeader()} {
			if p, c := binary.LittleEndian.Uint32(h[0:]), binary.LittleEndian.Uint32(h[64:]); p != 0 || c != 0 {
				t.Fatalf("after RESET: producer %d, consumer %d; want 0 and 0", p, c)
			}
		}
		if attr, err := n.qp.Query(); err != nil || attr.State != 0 {
			t.Fatalf("query after RESET: %+v %v", attr, err)
		}
	}
	ea, _ := a.endpoint()
	eb, _ := b.endpoint()
	if err := a.connect(eb); err != nil {
		t.Fatal(err)
	}
	if err := b.connect(ea); err != nil {
		t.Fatal(err)
	}
	// The discarded receives complete neither now nor later: the next
	// completions are the new WQEs'.
	for i := 0; i < 3; i++ {
		sendOne(t, a, b, 200+i, 2+i)
	}
	var buf [8]client.WC
	if k, _ := b.cq.Poll(buf[:]); k != 0 {
		t.Fatalf("stale completions after RESET: %+v", buf[:k])
	}
	// The whole ring is the client's again: fill it (64 entries).
	for i := 0; i < 64; i++ {
		if err := b.qp.PostRecv(uint64(i), client.SGE{Addr: b.mr.Addr, Length: 64, LKey: b.mr.LKey}); err != nil {
			t.Fatalf("post %d after RESET: %v", i, err)
		}
	}
}

// TestBadRecvPulled: a bad receive WQE that the engine pulls (the loop
// never saw it) completes with its own status, and the QP goes to ERR;
// the receive after it is flushed.
func TestBadRecvPulled(t *testing.T) {
	_, sock := startDaemon(t)
	a, b := pair(t, sock, false, false)
	clearNeedWakeup(b.qp.RecvRingHeader())
	// An SGE past the end of the MR, then a good one.
	if err := b.qp.PostRecv(7, client.SGE{Addr: b.mr.Addr + shmSize - 8, Length: 64, LKey: b.mr.LKey}); err != nil {
		t.Fatal(err)
	}
	clearNeedWakeup(b.qp.RecvRingHeader())
	if err := b.qp.PostRecv(8, client.SGE{Addr: b.mr.Addr, Length: 64, LKey: b.mr.LKey}); err != nil {
		t.Fatal(err)
	}
	postSend(t, a, a.qp, 1, 0, 32, 1)
	wcs, err := b.poll(2)
	if err != nil {
		t.Fatal(err)
	}
	if wcs[0].WRID != 7 || wcs[0].Status != 4 || wcs[1].WRID != 8 || wcs[1].Status != 5 {
		t.Fatalf("receive completions %+v, want wr_id 7 LOC_PROT_ERR (4), then 8 WR_FLUSH_ERR (5)", wcs)
	}
	if attr, err := b.qp.Query(); err != nil || attr.State != 6 {
		t.Fatalf("receiver's QP: %+v %v, want ERR", attr, err)
	}
	if wcs, err := a.poll(1); err != nil || wcs[0].Status == 0 {
		t.Fatalf("sender: %+v %v, want an error completion", wcs, err)
	}
}

// TestSRQBadAndCorrupt: a bad SRQ WQE completes with its status on the QP
// that took it (which goes to ERR) while the message takes the next one;
// an SRQ producer index out of range stops the ring (EPROTO) with
// IBV_EVENT_SRQ_ERR.
func TestSRQBadAndCorrupt(t *testing.T) {
	_, sock := startDaemon(t)
	const pd = 2
	a, b, na, nb, srq := srqPair(t, sock, 8, 0x77, 16)
	if err := srq.PostRecv(1, client.SGE{Addr: b.mr.Addr, Length: 64, LKey: b.mr.LKey + 1}); err != nil { // not our lkey
		t.Fatal(err)
	}
	if err := srq.PostRecv(2, client.SGE{Addr: b.mr.Addr, Length: 64, LKey: b.mr.LKey}); err != nil {
		t.Fatal(err)
	}
	postSend(t, a, na.qp, 1, 0, 32, 1)
	wcs, err := b.poll(2)
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]uint8{wcs[0].WRID: wcs[0].Status, wcs[1].WRID: wcs[1].Status}
	if len(got) != 2 || got[1] != 4 || got[2] != 0 {
		t.Fatalf("completions %+v: want wr_id 1 LOC_PROT_ERR (4) and wr_id 2 received", wcs)
	}
	waitFor(t, "the QP to go to ERR", func() bool { attr, err := nb.qp.Query(); return err == nil && attr.State == 6 })

	// Corrupt the producer index: the next pull finds it out of range.
	binary.LittleEndian.PutUint32(srq.Raw[0:], 1000)
	q2, err := b.dev.CreateQPOnSRQ(pd, 2, b.cq, b.cq, srq, proto.Cap{MaxSendWR: 4, MaxSendSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	qa2, err := a.dev.CreateQP(pd, 2, a.cq, a.cq, proto.Cap{MaxSendWR: 16, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	connectQPs(t, a, b, qa2, q2)
	postSend(t, a, qa2, 2, 0, 32, 2)
	for {
		ev, err := b.dev.ReadAsyncEvent()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == 14 {
			if ev.Element != srq.Handle || ev.Cookie != 0x77 {
				t.Fatalf("SRQ_ERR %+v", ev)
			}
			break
		}
	}
	if st := binary.LittleEndian.Uint32(srq.Raw[208:]); st != uint32(proto.EPROTO) {
		t.Fatalf("SRQ ring status %d, want EPROTO", st)
	}
	waitFor(t, "the SRQ's QPs to go to ERR", func() bool { attr, err := q2.Query(); return err == nil && attr.State == 6 })
}

// TestInlineSendList: inline SENDs posted as one list, each with its own
// data, arrive each with its own bytes (the daemon batches them).
func TestInlineSendList(t *testing.T) {
	_, sock := startDaemon(t)
	a, b := pair(t, sock, false, false)
	const n = 8
	var wrids []uint64
	var sges []client.SGE
	for i := 0; i < n; i++ {
		wrids = append(wrids, uint64(i))
		sges = append(sges, client.SGE{Addr: b.mr.Addr + uint64(i)*256, Length: 256, LKey: b.mr.LKey})
	}
	wrs := make([]client.SendWR, n)
	for i := range wrs {
		data := make([]byte, 16+i)
		for j := range data {
			data[j] = byte(i*31 + j)
		}
		wrs[i] = client.SendWR{WRID: uint64(i), Opcode: 2, Flags: 2 | 8, Inline: data}
	}
	// A QP with room for inline data (the node's has none).
	qa, err := a.dev.CreateQP(2, 2, a.cq, a.cq, proto.Cap{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64})
	if err != nil {
		t.Fatal(err)
	}
	qb, err := b.dev.CreateQP(2, 2, b.cq, b.cq, proto.Cap{MaxSendWR: 1, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	connectQPs(t, a, b, qa, qb)
	if err := qb.PostRecvList(wrids, sges); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostSendList(wrs); err != nil {
		t.Fatal(err)
	}
	if wcs, err := a.poll(n); err != nil {
		t.Fatal(err)
	} else {
		for _, wc := range wcs {
			if wc.Status != 0 {
				t.Fatalf("send %+v", wc)
			}
		}
	}
	wcs, err := b.poll(n)
	if err != nil {
		t.Fatal(err)
	}
	for _, wc := range wcs {
		i := int(wc.WRID)
		if wc.Status != 0 || wc.QPNum != qb.QPN || int(wc.ByteLen) != 16+i {
			t.Fatalf("receive %+v", wc)
		}
		for j := 0; j < 16+i; j++ {
			if got := b.shm.Mem[i*256+j]; got != byte(i*31+j) {
				t.Fatalf("message %d byte %d: %#x, want %#x", i, j, got, byte(i*31+j))
			}
		}
	}
}

// TestSessionWithTwoDevices: one session opens both devices, registers
// memory on each (their keys may be equal: keys are per device) and
// sends between its own QPs: each SGE is checked against the MR of its
// own device.
func TestSessionWithTwoDevices(t *testing.T) {
	_, sock := startDaemon(t)
	c, err := client.Dial(sock, "two-devices")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var n [2]*node
	for i, name := range []string{"rvt0", "rvt1"} {
		d, err := c.OpenDevice(name)
		if err != nil {
			t.Fatal(err)
		}
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		shm, err := d.ShmAlloc(1 << 16)
		if err != nil {
			t.Fatal(err)
		}
		mr, err := d.RegMR(pd, shm, 0, 1<<16, accessAll)
		if err != nil {
			t.Fatal(err)
		}
		cq, err := d.CreateCQ(64, 0)
		if err != nil {
			t.Fatal(err)
		}
		q, err := d.CreateQP(pd, 2, cq, cq, proto.Cap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		n[i] = &node{c: c, dev: d, shm: shm, mr: mr, cq: cq, qp: q}
	}
	t.Logf("lkeys: rvt0 %#x, rvt1 %#x", n[0].mr.LKey, n[1].mr.LKey)
	e0, _ := n[0].endpoint()
	e1, _ := n[1].endpoint()
	if err := n[0].connect(e1); err != nil {
		t.Fatal(err)
	}
	if err := n[1].connect(e0); err != nil {
		t.Fatal(err)
	}
	sendOne(t, n[0], n[1], 1000, 9)
	sendOne(t, n[1], n[0], 1000, 10)
}

// TestPostedBeforeDestroy: datagrams posted before the client destroys
// their AH, or their QP, go out, as over rxe (whose post_send transmits
// them before it returns) and as mckey's sender expects: it posts its
// sends unsignaled, then destroys the AH and the QP at once. Here the
// doorbell is never rung (NEED_WAKEUP cleared), so the loop has not
// taken the WQEs when the destroy arrives: the destroy must take them.
func TestPostedBeforeDestroy(t *testing.T) {
	_, sock := startDaemon(t)
	for _, tc := range []struct {
		name      string
		destroyAH bool
	}{{"AH then QP", true}, {"QP", false}} {
		t.Run(tc.name, func(t *testing.T) {
			a := udNode(t, sock, "rvt0")
			b := udNode(t, sock, "rvt1")
			eb, err := b.endpoint()
			require.NoError(t, err)
			ah, err := a.dev.CreateAH(2, proto.AV{DGID: eb.GID, SGIDIndex: 1, HopLimit: 64, Port: 1})
			require.NoError(t, err)
			const n = 10
			for i := 0; i < n; i++ {
				require.NoError(t, b.qp.PostRecv(uint64(100+i), client.SGE{Addr: b.mr.Addr, Length: 4096, LKey: b.mr.LKey}))
			}
			clearNeedWakeup(a.qp.SendRingHeader())
			for i := 0; i < n; i++ {
				require.NoError(t, a.qp.PostSend(client.SendWR{WRID: uint64(i), Opcode: 2, AH: ah, RemoteQPN: b.qp.QPN,
					RemoteQKey: udQKey, SGL: []client.SGE{{Addr: a.mr.Addr, Length: 100, LKey: a.mr.LKey}}}))
			}
			if tc.destroyAH {
				require.NoError(t, a.dev.DestroyAH(ah))
			}
			require.NoError(t, a.qp.Destroy())
			wcs, err := b.poll(n)
			require.NoError(t, err, "the receiver got %d of %d datagrams", len(wcs), n)
			for i, wc := range wcs {
				require.Zero(t, wc.Status, "receive %d: %+v", i, wc)
				require.Equal(t, uint32(100+40), wc.ByteLen, "receive %d", i)
			}
		})
	}
}

// TestPostedBeforeModifyToErr: a SEND posted (not rung) just before
// modify_qp to ERR is sent first, as over rxe, whose post_send has sent
// it by then; it completes, successfully or flushed, and the peer has
// it. (A client that posts a last message and tears down at once.)
func TestPostedBeforeModifyToErr(t *testing.T) {
	_, sock := startDaemon(t)
	a, b := pair(t, sock, false, false)
	require.NoError(t, b.qp.PostRecv(77, client.SGE{Addr: b.mr.Addr, Length: 8192, LKey: b.mr.LKey}))
	clearNeedWakeup(a.qp.SendRingHeader())
	postSend(t, a, a.qp, 5, 0, 1000, 9)
	require.NoError(t, a.qp.Modify(proto.QPAttr{State: 6}, maskState)) // IBV_QPS_ERR
	wcs, err := b.poll(1)
	require.NoError(t, err, "the receiver got nothing")
	require.Zero(t, wcs[0].Status, "%+v", wcs[0])
	require.Equal(t, uint64(77), wcs[0].WRID)
	require.Equal(t, uint32(1000), wcs[0].ByteLen)
	for j := 2; j < 1000; j++ {
		require.Equal(t, pattern(9, j), b.shm.Mem[j], "byte %d", j)
	}
	wcs, err = a.poll(1)
	require.NoError(t, err)
	require.Equal(t, uint64(5), wcs[0].WRID)
	require.True(t, wcs[0].Status == 0 || wcs[0].Status == 5, "want success or IBV_WC_WR_FLUSH_ERR: %+v", wcs[0])
}
