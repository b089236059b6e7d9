package rvtd_test

import (
	"slices"
	"testing"
	"time"

	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// TestCompEventsQueued: 400 CQs armed on one completion channel get a
// completion each (a receive flushed on a QP in ERR) before the client
// reads the channel. The socket takes some 280 records; the daemon keeps
// the rest, as the kernel queues every completion event, and hands them
// over in order as the client reads: every CQ's event arrives, once. A CQ
// destroyed while its event waits takes the event with it, as the kernel
// takes a destroyed CQ's events off its channel.
func TestCompEventsQueued(t *testing.T) {
	const n = 400
	srv, sock := startDaemon(t)
	c, d := openDevice(t, sock, "complost", "rvt0")
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
	ch, err := d.CreateCompChannel()
	if err != nil {
		t.Fatal(err)
	}
	capa := proto.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	cqs := make([]*client.CQ, n)
	qps := make([]*client.QP, n)
	byHandle := map[uint32]int{}
	for i := range cqs {
		if cqs[i], err = d.CreateCQ(16, ch.Handle); err != nil {
			t.Fatalf("CQ %d: %v", i, err)
		}
		if qps[i], err = d.CreateQP(pd, 2, cqs[i], cqs[i], capa); err != nil {
			t.Fatalf("QP %d: %v", i, err)
		}
		if err := qps[i].Modify(proto.QPAttr{State: 1, Port: 1, AccessFlags: 0xf}, 1|8|16|32); err != nil {
			t.Fatal(err)
		}
		if err := qps[i].Modify(proto.QPAttr{State: 6}, 1); err != nil {
			t.Fatal(err)
		}
		cqs[i].Arm(false)
		byHandle[cqs[i].Handle] = i
	}
	for i, q := range qps {
		if err := q.PostRecv(uint64(i), client.SGE{Addr: shm.Addr(), Length: 64, LKey: mr.LKey}); err != nil {
			t.Fatal(err)
		}
	}
	// Every CQ has its completion (not polled), and the events the socket
	// did not take wait in the daemon.
	waitFor(t, "a completion on every CQ", func() bool {
		for _, cq := range cqs {
			if k, _ := cq.Ring().Available(); k != 1 {
				return false
			}
		}
		return true
	})
	var pending []uint32
	waitFor(t, "the events to be made", func() bool {
		pending = srv.ChannelPendingForTest(c.Hello.Session, ch.Handle)
		time.Sleep(20 * time.Millisecond)
		return slices.Equal(pending, srv.ChannelPendingForTest(c.Hello.Session, ch.Handle))
	})
	if len(pending) == 0 {
		t.Fatalf("the channel's socket took all %d events: the test does not fill it", n)
	}
	t.Logf("%d events in the socket, %d waiting in the daemon", n-len(pending), len(pending))

	// The last CQ whose event waits goes, with its QP.
	gone := pending[len(pending)-1]
	pending = pending[:len(pending)-1]
	if err := qps[byHandle[gone]].Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := cqs[byHandle[gone]].Destroy(); err != nil {
		t.Fatal(err)
	}

	got := make(chan uint32, n)
	go func() {
		for {
			h, err := ch.GetEvent()
			if err != nil {
				close(got)
				return
			}
			got <- h
		}
	}()
	var order []uint32
	seen := map[uint32]bool{}
	timeout := time.After(10 * time.Second)
	for len(order) < n-1 {
		select {
		case h, ok := <-got:
			if !ok {
				t.Fatalf("the channel ended after %d events", len(order))
			}
			if seen[h] {
				t.Fatalf("CQ %d's event twice", h)
			}
			if h == gone {
				t.Fatalf("an event of CQ %d, destroyed while its event waited in the daemon", h)
			}
			if _, ok := byHandle[h]; !ok {
				t.Fatalf("an event of CQ %d, not the test's", h)
			}
			seen[h] = true
			order = append(order, h)
		case <-timeout:
			t.Fatalf("%d of %d completion events in 10 s", len(order), n-1)
		}
	}
	// What waited came after what the socket held, in the order made.
	if tail := order[len(order)-len(pending):]; !slices.Equal(tail, pending) {
		t.Errorf("the waiting events arrived as %v, want %v", tail, pending)
	}
	select {
	case h := <-got:
		t.Errorf("an event more: CQ %d", h)
	case <-time.After(100 * time.Millisecond):
	}
	// The channel goes on: a CQ armed again gets its next event at once.
	cq := cqs[byHandle[order[0]]]
	var wc [1]client.WC
	if k, err := cq.Poll(wc[:]); k != 1 || err != nil {
		t.Fatalf("poll: %d, %v", k, err)
	}
	cq.Arm(false)
	if err := qps[byHandle[order[0]]].PostRecv(1, client.SGE{Addr: shm.Addr(), Length: 64, LKey: mr.LKey}); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-got:
		if h != cq.Handle {
			t.Errorf("event of CQ %d, want %d", h, cq.Handle)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("no event for a CQ armed again")
	}
}
