package rvtd_test

import (
	"testing"

	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// TestSRQResize: resize_srq (ibv_modify_srq with IBV_SRQ_MAX_WR) grows a
// 4-entry SRQ holding 3 WQEs to 64: the 3 move to the new ring and are
// used first, in order, then 40 more posted there; it shrinks it back to
// 8 once it is empty. As rxe: EINVAL below what the ring holds, below the
// armed limit, for 0 and past max_srq_wr.
func TestSRQResize(t *testing.T) {
	_, sock := startDaemon(t)
	a, b, na, nb, srq := srqPair(t, sock, 4, 0x5252, 64)
	post := func(k int) {
		t.Helper()
		if err := srq.PostRecv(uint64(k), client.SGE{Addr: b.mr.Addr + uint64(k)*256, Length: 256, LKey: b.mr.LKey}); err != nil {
			t.Fatalf("post %d: %v", k, err)
		}
	}
	for k := 0; k < 3; k++ {
		post(k)
	}
	for _, c := range []struct {
		name  string
		maxWR uint32
	}{{"zero", 0}, {"below the 3 posted", 2}, {"past max_srq_wr", 1 << 30}} {
		if err := srq.Resize(c.maxWR); err != proto.EINVAL {
			t.Errorf("resize %s: %v, want EINVAL", c.name, err)
		}
	}
	if err := srq.Resize(64); err != nil {
		t.Fatal(err)
	}
	if attr, err := srq.Query(); err != nil || attr.MaxWR != 64 || srq.MaxWR != 64 {
		t.Fatalf("query_srq after resize: %+v %v (client %d)", attr, err, srq.MaxWR)
	}
	const more = 40
	for k := 3; k < 3+more; k++ {
		post(k)
	}
	for k := 0; k < 3+more; k++ {
		postSend(t, a, na.qp, uint64(k), 0, 64, uint16(k))
		if wcs, err := a.poll(1); err != nil || wcs[0].Status != 0 {
			t.Fatalf("send %d: %+v %v", k, wcs, err)
		}
		if wcs, err := b.poll(1); err != nil || wcs[0].Status != 0 || wcs[0].WRID != uint64(k) || wcs[0].ByteLen != 64 {
			t.Fatalf("receive %d: %+v %v", k, wcs, err)
		}
	}
	if err := srq.Modify(16); err != nil {
		t.Fatal(err)
	}
	if err := srq.Resize(8); err != proto.EINVAL {
		t.Errorf("resize below the armed limit 16: %v, want EINVAL", err)
	}
	if err := srq.Modify(0); err != nil {
		t.Fatal(err)
	}
	if err := srq.Resize(8); err != nil {
		t.Fatal(err)
	}
	if attr, err := srq.Query(); err != nil || attr.MaxWR != 8 {
		t.Fatalf("query_srq after shrinking: %+v %v", attr, err)
	}
	post(100)
	postSend(t, a, na.qp, 100, 0, 64, 100)
	if wcs, err := b.poll(1); err != nil || wcs[0].Status != 0 || wcs[0].WRID != 100 {
		t.Fatalf("receive after shrinking: %+v %v", wcs, err)
	}
	if err := nb.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := srq.Destroy(); err != nil {
		t.Fatal(err)
	}
}
