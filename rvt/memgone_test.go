package rvt

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/qp"
)

// TestReceiveMemoryGone deregisters the memory of a posted receive WQE and
// then sends two messages, for each QP type. The WQE completes with
// LocProtErr. RC then NAKs the request and both QPs go to ERR (the next WQE
// is flushed); UC and UD drop the first message and deliver the second into
// the next WQE. (UC used to keep the broken WQE in hand and panic on the
// second message.)
func TestReceiveMemoryGone(t *testing.T) {
	tests := []struct {
		typ     QPType
		want    map[uint64]cq.Status // by WR ID
		deliver bool                 // the second message lands in WQE 2
	}{
		{qp.RC, map[uint64]cq.Status{1: cq.LocProtErr, 2: cq.WRFlushErr, 10: cq.RemOpErr, 11: cq.WRFlushErr}, false},
		{qp.UC, map[uint64]cq.Status{1: cq.LocProtErr, 2: cq.Success, 10: cq.Success, 11: cq.Success}, true},
		{qp.UD, map[uint64]cq.Status{1: cq.LocProtErr, 2: cq.Success, 10: cq.Success, 11: cq.Success}, true},
	}
	for _, tc := range tests {
		t.Run(tc.typ.String(), func(t *testing.T) {
			n, clk := manualNode(t)
			a, b := n.qp(t, tc.typ), n.qp(t, tc.typ)
			connect(t, a, n.d, b, n.d, defaultAttrs())
			src, gone, dst := n.mr(t, 4096), n.mr(t, 4096), n.mr(t, 4096)
			src.WriteAt([]byte("second message"), src.IOVA)
			require.NoError(t, b.PostRecv(RecvWR{WRID: 1, SGL: sge(gone, 0, 100)}, RecvWR{WRID: 2, SGL: sge(dst, 0, 100)}))
			require.NoError(t, n.d.DeregMR(gone))

			send := SendWR{Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, 14)}
			if tc.typ == qp.UD {
				gid, err := n.d.QueryGID(1, 1)
				require.NoError(t, err)
				ah, err := n.pd.CreateAH(AddressVector{DGID: gid, SGIDIndex: 1})
				require.NoError(t, err)
				send.AH, send.RemoteQPN, send.RemoteQKey = ah, b.Num(), 0x1111
			}
			first, second := send, send
			first.WRID, second.WRID = 10, 11
			require.NoError(t, a.PostSend(first, second))

			wcs := poll(t, n.cq, len(tc.want), func() { clk.AdvanceToNext() })
			got := map[uint64]cq.Status{}
			for _, w := range wcs {
				got[w.WRID] = w.Status
			}
			require.Equal(t, tc.want, got, "completions by WR ID")
			if tc.deliver {
				buf := make([]byte, 14)
				off := uint64(0)
				if tc.typ == qp.UD {
					off = 40 // the GRH area
				}
				dst.ReadAt(buf, dst.IOVA+off)
				require.Equal(t, "second message", string(buf))
			}
		})
	}
}
