package rvtd_test

import (
	"bytes"
	"testing"

	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// A QP's inline room is at least its send SGEs' bytes (16 each), as rxe
// gives (max_inline_data = max(max_send_sge * 16, asked)): a program that
// asks for one SGE and no inline data may still post 16 bytes inline
// (rdma_xclient does), and create_qp says so.
func TestQPInlineAtLeastSGEs(t *testing.T) {
	_, sock := startDaemon(t)
	a, b := pair(t, sock, false, false)
	for _, c := range []struct {
		asked proto.Cap
		want  uint32
	}{
		{proto.Cap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, 16},
		{proto.Cap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 4, MaxRecvSGE: 1}, 64},
		{proto.Cap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: 100}, 100},
		{proto.Cap{MaxSendWR: 4, MaxRecvWR: 1}, 16}, // no SGE asked: one is given
	} {
		q, err := a.dev.CreateQP(2, 2, a.cq, a.cq, c.asked)
		if err != nil {
			t.Fatal(err)
		}
		if q.Cap.MaxInlineData != c.want {
			t.Errorf("asked %+v: max_inline_data %d, want %d", c.asked, q.Cap.MaxInlineData, c.want)
		}
		if err := q.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	qa, err := a.dev.CreateQP(2, 2, a.cq, a.cq, proto.Cap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	qb, err := b.dev.CreateQP(2, 2, b.cq, b.cq, proto.Cap{MaxSendWR: 1, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	na, nb := connectQPs(t, a, b, qa, qb)
	if err := qb.PostRecv(5, client.SGE{Addr: b.mr.Addr, Length: 64, LKey: b.mr.LKey}); err != nil {
		t.Fatal(err)
	}
	msg := []byte("sixteen bytes ..")
	if err := qa.PostSend(client.SendWR{WRID: 6, Opcode: 2, Flags: 2 | 8, Inline: msg}); err != nil { // SIGNALED|INLINE
		t.Fatal(err)
	}
	wa, err := na.poll(1)
	if err != nil || wa[0].Status != 0 || wa[0].WRID != 6 {
		t.Fatalf("send completion %+v: %v", wa, err)
	}
	wb, err := nb.poll(1)
	if err != nil || wb[0].Status != 0 || wb[0].ByteLen != 16 || !bytes.Equal(b.shm.Mem[:16], msg) {
		t.Fatalf("receive completion %+v: %v; bytes %q", wb, err, b.shm.Mem[:16])
	}
}
