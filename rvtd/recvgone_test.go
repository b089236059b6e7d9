package rvtd

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/rvtd/ring"
)

// A CQ's drain may find a QP in the device's table just before destroy
// takes it out, and complete a receive of its ring after destroy unmapped
// it: complete must then drop the completion, not release the slot into
// memory that is gone (a loop died of SIGSEGV so, in TestRsocketC with the
// loops spinning).
func TestRecvCompleteAfterDestroy(t *testing.T) {
	l := ring.Layout{Entries: 8, Stride: 64}
	mk := func() (*recvRing, []byte) {
		mem, err := unix.Mmap(-1, 0, int(l.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
		if err != nil {
			t.Fatal(err)
		}
		if err := ring.Init(mem, ring.KindRecv, l); err != nil {
			t.Fatal(err)
		}
		c, err := ring.NewConsumer(mem, ring.KindRecv, l, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		r := newRecvRing(nil, c, l.Entries, l.Stride, 1)
		r.taken, r.wrid[0] = 1, 0x77 // one receive on the engine, the client's wr_id 0x77
		return r, mem
	}

	live, mem := mk()
	wc := cq.WC{WRID: live.engineWRID(0)}
	if !live.complete(&wc) || wc.WRID != 0x77 || live.taken != 0 {
		t.Fatalf("live ring: complete gave wr_id %#x, %d still taken", wc.WRID, live.taken)
	}
	_ = unix.Munmap(mem)

	gone, mem := mk()
	gone.mu.Lock()
	gone.failed, gone.gone = true, true // as qpObj.destroy leaves it
	gone.mu.Unlock()
	if err := unix.Munmap(mem); err != nil {
		t.Fatal(err)
	}
	wc = cq.WC{WRID: gone.engineWRID(0)}
	if gone.complete(&wc) {
		t.Fatal("a completion of a destroyed QP's ring was delivered")
	}
}
