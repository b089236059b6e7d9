package rvt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
)

func TestLoopbackRCSendWriteReadAtomic(t *testing.T) {
	n := newNode(t, Options{})
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	connect(t, a, n.d, b, n.d, defaultAttrs())
	src, dst := n.mr(t, 1<<16), n.mr(t, 1<<16)
	payload := make([]byte, 5000)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	src.WriteAt(payload, src.IOVA)

	// SEND with immediate into a posted receive.
	require.NoError(t, b.PostRecv(RecvWR{WRID: 1, SGL: []SGE{{Addr: dst.IOVA, Length: 8192, Lkey: dst.Lkey}}}))
	require.NoError(t, a.PostSend(SendWR{WRID: 2, Opcode: qp.OpSendWithImm, ImmData: 0xdeadbeef,
		Flags: qp.Signaled, SGL: []SGE{{Addr: src.IOVA, Length: 5000, Lkey: src.Lkey}}}))
	wcs := poll(t, n.cq, 2, nil)
	byID := map[uint64]WC{}
	for _, w := range wcs {
		byID[w.WRID] = w
	}
	require.Equal(t, cq.Success, byID[1].Status)
	require.Equal(t, cq.Recv, byID[1].Opcode)
	require.Equal(t, uint32(5000), byID[1].ByteLen)
	require.Equal(t, uint32(0xdeadbeef), byID[1].ImmData)
	require.Equal(t, cq.Success, byID[2].Status)
	got := make([]byte, 5000)
	dst.ReadAt(got, dst.IOVA)
	require.Equal(t, payload, got)

	// RDMA WRITE then READ back.
	require.NoError(t, a.PostSend(SendWR{WRID: 3, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
		SGL: []SGE{{Addr: src.IOVA, Length: 5000, Lkey: src.Lkey}}, RemoteAddr: dst.IOVA + 10000, Rkey: dst.Rkey}))
	wcs = poll(t, n.cq, 1, nil)
	require.Equal(t, cq.Success, wcs[0].Status, "%+v", wcs[0])
	dst.ReadAt(got, dst.IOVA+10000)
	require.Equal(t, payload, got)

	require.NoError(t, a.PostSend(SendWR{WRID: 4, Opcode: qp.OpRDMARead, Flags: qp.Signaled,
		SGL: []SGE{{Addr: src.IOVA + 20000, Length: 5000, Lkey: src.Lkey}}, RemoteAddr: dst.IOVA + 10000, Rkey: dst.Rkey}))
	wcs = poll(t, n.cq, 1, nil)
	require.Equal(t, cq.Success, wcs[0].Status, "%+v", wcs[0])
	require.Equal(t, cq.RDMARead, wcs[0].Opcode)
	src.ReadAt(got, src.IOVA+20000)
	require.Equal(t, payload, got)

	// Atomics.
	binary.NativeEndian.PutUint64(dst.Word(dst.IOVA+40000), 100)
	require.NoError(t, a.PostSend(SendWR{WRID: 5, Opcode: qp.OpAtomicFetchAdd, Flags: qp.Signaled, CompareAdd: 5,
		SGL: []SGE{{Addr: src.IOVA + 30000, Length: 8, Lkey: src.Lkey}}, RemoteAddr: dst.IOVA + 40000, Rkey: dst.Rkey}))
	require.NoError(t, a.PostSend(SendWR{WRID: 6, Opcode: qp.OpAtomicCmpSwp, Flags: qp.Signaled, CompareAdd: 105, Swap: 7,
		SGL: []SGE{{Addr: src.IOVA + 30008, Length: 8, Lkey: src.Lkey}}, RemoteAddr: dst.IOVA + 40000, Rkey: dst.Rkey}))
	wcs = poll(t, n.cq, 2, nil)
	require.Equal(t, cq.Success, wcs[0].Status)
	require.Equal(t, cq.Success, wcs[1].Status)
	require.Equal(t, uint64(100), binary.NativeEndian.Uint64(src.Word(src.IOVA+30000)))
	require.Equal(t, uint64(105), binary.NativeEndian.Uint64(src.Word(src.IOVA+30008)))
	require.Equal(t, uint64(7), binary.NativeEndian.Uint64(dst.Word(dst.IOVA+40000)))
}

// A loopback burst stands for every packet of its message: PSNs advance
// on both sides exactly as on the wire, and the next message (over the
// wire-sized path) follows on.
func TestLoopbackBurstPSNs(t *testing.T) {
	n := newNode(t, Options{})
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	connect(t, a, n.d, b, n.d, defaultAttrs()) // path MTU 1024
	src, dst := n.mr(t, 1<<16), n.mr(t, 1<<16)
	for i := range 3 {
		before := a.Conn().Snapshot().NextPSN
		rbefore := b.Conn().Snapshot().ExpectedPSN
		size := uint32(10000 + i*3000)
		require.NoError(t, b.PostRecv(RecvWR{WRID: 1, SGL: sge(dst, 0, 1<<16)}))
		require.NoError(t, a.PostSend(
			SendWR{WRID: 2, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: sge(src, 0, size),
				RemoteAddr: dst.IOVA + 20000, Rkey: dst.Rkey},
			SendWR{WRID: 3, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(src, 0, size)},
			SendWR{WRID: 4, Opcode: qp.OpRDMARead, Flags: qp.Signaled, SGL: sge(src, 30000, size),
				RemoteAddr: dst.IOVA + 20000, Rkey: dst.Rkey}))
		wcs := poll(t, n.cq, 4, nil)
		for _, w := range wcs {
			require.Equal(t, cq.Success, w.Status, "%+v", w)
		}
		k := (size + 1023) / 1024
		require.Equal(t, before.Add(3*k), a.Conn().Snapshot().NextPSN)
		require.Equal(t, rbefore.Add(3*k), b.Conn().Snapshot().ExpectedPSN)
		got := make([]byte, size)
		src.ReadAt(got, src.IOVA+30000)
		want := make([]byte, size)
		src.ReadAt(want, src.IOVA)
		require.Equal(t, want, got, "WRITE then READ back")
	}
}

// A message longer than the requester's window (128 PSNs) travels as
// several window-sized bursts (FIRST, MIDDLE, LAST), each an exact run of
// PSNs, for every opcode that bursts.
func TestLoopbackBurstsLongerThanWindow(t *testing.T) {
	n := newNode(t, Options{})
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	at := defaultAttrs()
	at.mtu = qp.MTU256
	connect(t, a, n.d, b, n.d, at)
	const size = 300*256 + 17 // 301 packets
	src, dst := n.mr(t, size), n.mr(t, size)
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*13 + 1)
	}
	src.WriteAt(want, src.IOVA)
	for _, op := range []qp.Opcode{qp.OpSend, qp.OpRDMAWrite, qp.OpRDMAWriteWithImm} {
		t.Run(op.String(), func(t *testing.T) {
			dst.WriteAt(make([]byte, size), dst.IOVA)
			before, rbefore := a.Conn().Snapshot().NextPSN, b.Conn().Snapshot().ExpectedPSN
			require.NoError(t, b.PostRecv(RecvWR{WRID: 1, SGL: sge(dst, 0, size)}))
			require.NoError(t, a.PostSend(SendWR{WRID: 2, Opcode: op, Flags: qp.Signaled, SGL: sge(src, 0, size),
				RemoteAddr: dst.IOVA, Rkey: dst.Rkey, ImmData: 7}))
			nwc := 2 // the send and the receive
			if op == qp.OpRDMAWrite {
				nwc = 1 // the receive stays posted for the next case
			}
			wcs := poll(t, n.cq, nwc, nil)
			for _, w := range wcs {
				require.Equal(t, cq.Success, w.Status, "%+v", w)
			}
			require.Equal(t, before.Add(301), a.Conn().Snapshot().NextPSN)
			require.Equal(t, rbefore.Add(301), b.Conn().Snapshot().ExpectedPSN)
			got := make([]byte, size)
			dst.ReadAt(got, dst.IOVA)
			require.Equal(t, want, got)
		})
	}
}

// TestUCSourceReusableAtCompletion: a UC send completes as it leaves (no
// ACK to wait for), and from then on the sender may reuse its buffer. On
// loopback the receiver must therefore not copy from that buffer later:
// the sender's completion handler overwrites it, and the receiver must
// still get what was sent, for a one-packet message and a burst of three.
func TestUCSourceReusableAtCompletion(t *testing.T) {
	for _, size := range []int{8, 3000} { // MTU 1024
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			for _, op := range []qp.Opcode{qp.OpSend, qp.OpRDMAWrite} {
				n, _ := manualNode(t)
				buf := make([]byte, size)
				for i := range buf {
					buf[i] = byte(i%251 + 1)
				}
				want := bytes.Clone(buf)
				src, err := n.pd.Reg(buf, keys.LocalWrite)
				require.NoError(t, err)
				dst := n.mr(t, size)
				var reused int
				scq, err := n.d.CreateCQ(16, func(c *CQ) {
					var wcs [4]WC
					if c.Poll(wcs[:]) > 0 {
						clear(buf) // the application reuses its buffer
						reused++
					}
				})
				require.NoError(t, err)
				require.NoError(t, scq.Arm(false))
				caps := QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
				a, err := n.pd.CreateQP(QPInitAttr{Type: qp.UC, SendCQ: scq, RecvCQ: n.cq, Cap: caps})
				require.NoError(t, err)
				b := n.qp(t, qp.UC)
				connect(t, a, n.d, b, n.d, defaultAttrs())
				wr := SendWR{Opcode: op, Flags: qp.Signaled, SGL: sge(src, 0, uint32(size))}
				if op == qp.OpRDMAWrite {
					wr.RemoteAddr, wr.Rkey = dst.IOVA, dst.Rkey
				} else {
					require.NoError(t, b.PostRecv(RecvWR{SGL: sge(dst, 0, uint32(size))}))
				}
				require.NoError(t, a.PostSend(wr))
				if op == qp.OpSend {
					wc := poll(t, n.cq, 1, nil)[0]
					require.Equal(t, cq.Success, wc.Status, "%+v", wc)
				}
				require.Equal(t, 1, reused, "%v: the send completion", op)
				got := make([]byte, size)
				dst.ReadAt(got, dst.IOVA)
				require.Equal(t, want, got, "%v of %d bytes: the receiver read the reused buffer", op, size)
			}
		})
	}
}
