package rvt

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/qp"
)

// countingPort is a fabric port that counts the buffers its user takes
// with TxFrame, and recycles received frames (netdev.FrameRecycler) only
// if told to.
type countingPort struct {
	*fabric.Port
	recycles bool
	txFrames atomic.Int64
}

func (p *countingPort) Lender() netdev.Link { return p }

func (p *countingPort) TxFrame(n int) []byte {
	p.txFrames.Add(1)
	return p.Port.TxFrame(n)
}

func (p *countingPort) RecyclesFrames() bool { return p.recycles }

// TestFabricRecycledFrames sends RC SENDs and READs between two devices
// on the fabric, inline or with worker pools, with and without recycling
// received frames: every message arrives intact and completes either way,
// and with recycling the receiver builds its ACKs in the requests' buffers
// (fewer TxFrame calls than frames sent), without it in TxFrame's.
func TestFabricRecycledFrames(t *testing.T) {
	for _, tc := range []struct {
		workers  int
		recycles bool
	}{{0, false}, {0, true}, {2, false}, {2, true}} {
		recycles := tc.recycles
		t.Run(fmt.Sprintf("workers=%d/recycles=%v", tc.workers, recycles), func(t *testing.T) {
			fab := fabric.New(clock.Real(), 1)
			var ports []*countingPort
			open := func(i byte) *node {
				o := fabricOptions(fab, i)
				p := &countingPort{Port: o.Link.(*fabric.Port), recycles: recycles}
				ports = append(ports, p)
				o.Link, o.Workers = p, tc.workers
				return newNode(t, o)
			}
			na, nb := open(1), open(2)
			qa, qb := na.qp(t, qp.RC), nb.qp(t, qp.RC)
			connect(t, qa, na.d, qb, nb.d, defaultAttrs())
			const n, size = 2000, 8
			srcBuf, dstBuf, backBuf := make([]byte, n*size), make([]byte, n*size), make([]byte, 4096)
			for i := range n {
				binary.LittleEndian.PutUint64(srcBuf[i*size:], uint64(i)*0x9E3779B97F4A7C15)
			}
			reg := func(pd *PD, b []byte) *MR {
				mr, err := pd.Reg(b, keysWriteAccess)
				require.NoError(t, err)
				return mr
			}
			src, dst, back := reg(na.pd, srcBuf), reg(nb.pd, dstBuf), reg(na.pd, backBuf)
			wcs := make([]WC, 64)
			posted, recvd, sent := 0, 0, 0
			deadline := time.Now().Add(20 * time.Second)
			for recvd < n || sent < n {
				require.True(t, time.Now().Before(deadline), "sent %d, received %d of %d", sent, recvd, n)
				for posted < n && posted-sent < 32 {
					require.NoError(t, qb.PostRecv(RecvWR{WRID: uint64(posted),
						SGL: []SGE{{Addr: dst.IOVA + uint64(posted*size), Length: size, Lkey: dst.Lkey}}}))
					require.NoError(t, qa.PostSend(SendWR{WRID: uint64(posted), Opcode: qp.OpSend, Flags: qp.Signaled,
						SGL: []SGE{{Addr: src.IOVA + uint64(posted*size), Length: size, Lkey: src.Lkey}}}))
					posted++
				}
				for _, c := range []struct {
					cq *CQ
					n  *int
				}{{na.cq, &sent}, {nb.cq, &recvd}} {
					k := c.cq.Poll(wcs)
					for _, w := range wcs[:k] {
						require.Equal(t, cq.Success, w.Status, "%+v", w)
					}
					*c.n += k
				}
			}
			require.Equal(t, srcBuf, dstBuf, "the messages as sent")
			// A READ back: 4 KiB responses, in buffers longer than
			// the requests' ones the responder keeps.
			require.NoError(t, qa.PostSend(SendWR{WRID: 1, Opcode: qp.OpRDMARead, Flags: qp.Signaled,
				SGL:        []SGE{{Addr: back.IOVA, Length: 4096, Lkey: back.Lkey}},
				RemoteAddr: dst.IOVA, Rkey: dst.Rkey}))
			w := poll(t, na.cq, 1, nil)[0]
			require.Equal(t, cq.Success, w.Status, "%+v", w)
			require.Equal(t, dstBuf[:4096], backBuf)

			b := ports[1]
			frames := int64(b.Stats().TxFrames)
			require.Positive(t, frames)
			if recycles {
				require.Less(t, b.txFrames.Load(), frames/2,
					"the responder's ACKs were built in the requests' buffers")
			} else {
				require.Equal(t, frames, b.txFrames.Load(), "every frame in a buffer from TxFrame")
			}
		})
	}
}
