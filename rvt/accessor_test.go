package rvt

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
)

// testAcc is an Accessor over a byte slice at address base that fails
// every copy once failAfter more calls have succeeded (failAfter < 0: never).
type testAcc struct {
	mu        sync.Mutex
	base      uint64
	mem       []byte
	failAfter int
}

func (a *testAcc) do(p []byte, addr uint64, write bool) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.failAfter == 0 {
		return 0, errors.New("test: memory gone")
	}
	if a.failAfter > 0 {
		a.failAfter--
	}
	if addr < a.base || addr-a.base+uint64(len(p)) > uint64(len(a.mem)) {
		return 0, errors.New("test: out of range")
	}
	if write {
		return copy(a.mem[addr-a.base:], p), nil
	}
	return copy(p, a.mem[addr-a.base:]), nil
}

func (a *testAcc) ReadAt(p []byte, addr uint64) (int, error)  { return a.do(p, addr, false) }
func (a *testAcc) WriteAt(p []byte, addr uint64) (int, error) { return a.do(p, addr, true) }

const allRemote = keys.LocalWrite | keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic

// accWorld is two connected RC QPs, a on device da and b on db (the same
// device for loopback), with a manual clock.
type accWorld struct {
	na, nb *node
	a, b   *QP
	clk    *clock.Manual
}

func (w *accWorld) poll(t *testing.T, c *CQ, n int) []WC {
	return poll(t, c, n, func() { w.clk.AdvanceToNext() })
}

// pollAll waits for n completions on a's and b's CQs (one CQ on loopback)
// and returns them by WR ID.
func (w *accWorld) pollAll(t *testing.T, n int) map[uint64]WC {
	t.Helper()
	out := map[uint64]WC{}
	buf := make([]WC, 8)
	for i := 0; len(out) < n; i++ {
		for _, c := range []*CQ{w.na.cq, w.nb.cq} {
			k := c.Poll(buf)
			for _, wc := range buf[:k] {
				out[wc.WRID] = wc
			}
		}
		if i > 100000 {
			require.Failf(t, "timeout", "%d of %d completions: %+v", len(out), n, out)
		}
		w.clk.AdvanceToNext()
	}
	return out
}

func newAccWorld(t *testing.T, fab bool) *accWorld {
	clk := clock.NewManual()
	w := &accWorld{clk: clk}
	if !fab {
		w.na = newNode(t, Options{Inline: true, Clock: clk})
		w.nb = w.na
	} else {
		w.na, w.nb = fabricNodes(t, clk)
	}
	w.a, w.b = w.na.qp(t, qp.RC), w.nb.qp(t, qp.RC)
	connect(t, w.a, w.na.d, w.b, w.nb.d, defaultAttrs())
	return w
}

// TestAccessorMROperations runs every RDMA operation against memory
// reached through an accessor, loopback and across a fabric, and checks
// the bytes; then with the accessor failing, checks each operation's IBTA
// outcome.
func TestAccessorMROperations(t *testing.T) {
	const size = 3000 // several packets at MTU 1024
	const base = 0x7f0000001000
	for _, fab := range []bool{false, true} {
		name := map[bool]string{false: "loopback", true: "fabric"}[fab]
		t.Run(name, func(t *testing.T) {
			w := newAccWorld(t, fab)
			acc := &testAcc{base: base, mem: make([]byte, 16<<10), failAfter: -1}
			vm, err := w.nb.pd.RegMRAccessor(acc, base, uint64(len(acc.mem)), base, allRemote)
			require.NoError(t, err)
			loc := w.na.mr(t, 16<<10)
			pat := make([]byte, size)
			for i := range pat {
				pat[i] = byte(i*7 + 1)
			}
			loc.WriteAt(pat, loc.IOVA)

			// WRITE into it.
			require.NoError(t, w.a.PostSend(SendWR{WRID: 1, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
				SGL: sge(loc, 0, size), RemoteAddr: base + 100, Rkey: vm.Rkey}))
			wc := w.poll(t, w.na.cq, 1)[0]
			require.Equal(t, cq.Success, wc.Status, "%+v", wc)
			require.Equal(t, pat, acc.mem[100:100+size])

			// READ from it.
			require.NoError(t, w.a.PostSend(SendWR{WRID: 2, Opcode: qp.OpRDMARead, Flags: qp.Signaled,
				SGL: sge(loc, 8192, size), RemoteAddr: base + 100, Rkey: vm.Rkey}))
			wc = w.poll(t, w.na.cq, 1)[0]
			require.Equal(t, cq.Success, wc.Status, "%+v", wc)
			got := make([]byte, size)
			loc.ReadAt(got, loc.IOVA+8192)
			require.Equal(t, pat, got)

			// SEND into it.
			require.NoError(t, w.b.PostRecv(RecvWR{WRID: 3, SGL: sge(vm, 5000, size)}))
			require.NoError(t, w.a.PostSend(SendWR{WRID: 4, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: sge(loc, 1, size-1)}))
			for _, wc := range w.pollAll(t, 2) {
				require.Equal(t, cq.Success, wc.Status, "%+v", wc)
			}
			require.Equal(t, pat[1:], acc.mem[5000:5000+size-1])

			// Atomics on it.
			binary.NativeEndian.PutUint64(acc.mem[10000:], 41)
			require.NoError(t, w.a.PostSend(
				SendWR{WRID: 5, Opcode: qp.OpAtomicFetchAdd, Flags: qp.Signaled, SGL: sge(loc, 0, 8), RemoteAddr: base + 10000, Rkey: vm.Rkey, CompareAdd: 1},
				SendWR{WRID: 6, Opcode: qp.OpAtomicCmpSwp, Flags: qp.Signaled, SGL: sge(loc, 8, 8), RemoteAddr: base + 10000, Rkey: vm.Rkey, CompareAdd: 42, Swap: 7}))
			for _, wc := range w.poll(t, w.na.cq, 2) {
				require.Equal(t, cq.Success, wc.Status, "%+v", wc)
			}
			var o [16]byte
			loc.ReadAt(o[:], loc.IOVA)
			require.Equal(t, uint64(41), binary.NativeEndian.Uint64(o[:]))
			require.Equal(t, uint64(42), binary.NativeEndian.Uint64(o[8:]))
			require.Equal(t, uint64(7), binary.NativeEndian.Uint64(acc.mem[10000:]))

			// The other way: the accessor memory as the local side.
			lvm, err := w.na.pd.RegMRAccessor(acc, base, uint64(len(acc.mem)), base+1<<20, allRemote)
			require.NoError(t, err)
			dst := w.nb.mr(t, 16<<10)
			require.NoError(t, w.a.PostSend(SendWR{WRID: 7, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
				SGL: []SGE{{Addr: base + 1<<20 + 100, Length: size, Lkey: lvm.Lkey}}, RemoteAddr: dst.IOVA, Rkey: dst.Rkey}))
			require.Equal(t, cq.Success, w.poll(t, w.na.cq, 1)[0].Status)
			dst.ReadAt(got, dst.IOVA)
			require.Equal(t, pat, got)
		})
	}
}

// TestAccessorMRFaults fails the accessor under each operation and checks
// the completions: never a panic, always the IBTA status.
func TestAccessorMRFaults(t *testing.T) {
	const base = 0x10000
	type result struct {
		a cq.Status // the requester's WR 1
		b cq.Status // b's receive WQE 2, if the case posts one
	}
	cases := []struct {
		name      string
		remote    bool // the accessor MR is b's (the target); else a's (local)
		failAfter int
		wr        func(vm, loc *MR) SendWR
		recv      bool
		want      result
		fabOnly   bool // loopback sends the message as one burst: one copy
	}{
		{"write into", true, 0, func(vm, loc *MR) SendWR {
			return SendWR{Opcode: qp.OpRDMAWrite, SGL: sge(loc, 0, 64), RemoteAddr: vm.IOVA, Rkey: vm.Rkey}
		}, false, result{a: cq.RemAccessErr}, false},
		{"write into, fails mid-message", true, 1, func(vm, loc *MR) SendWR {
			return SendWR{Opcode: qp.OpRDMAWrite, SGL: sge(loc, 0, 3000), RemoteAddr: vm.IOVA, Rkey: vm.Rkey}
		}, false, result{a: cq.RemAccessErr}, true},
		{"read from", true, 0, func(vm, loc *MR) SendWR {
			return SendWR{Opcode: qp.OpRDMARead, SGL: sge(loc, 0, 64), RemoteAddr: vm.IOVA, Rkey: vm.Rkey}
		}, false, result{a: cq.RemAccessErr}, false},
		{"read from, fails at the third response", true, 2, func(vm, loc *MR) SendWR {
			return SendWR{Opcode: qp.OpRDMARead, SGL: sge(loc, 0, 4000), RemoteAddr: vm.IOVA, Rkey: vm.Rkey}
		}, false, result{a: cq.RemAccessErr}, false},
		{"atomic on", true, 0, func(vm, loc *MR) SendWR {
			return SendWR{Opcode: qp.OpAtomicFetchAdd, SGL: sge(loc, 0, 8), RemoteAddr: vm.IOVA, Rkey: vm.Rkey, CompareAdd: 1}
		}, false, result{a: cq.RemAccessErr}, false},
		{"send into", true, 0, func(vm, loc *MR) SendWR {
			return SendWR{Opcode: qp.OpSend, SGL: sge(loc, 0, 64)}
		}, true, result{a: cq.RemOpErr, b: cq.LocProtErr}, false},
		{"send from", false, 0, func(vm, loc *MR) SendWR {
			return SendWR{Opcode: qp.OpSend, SGL: sge(vm, 0, 64)}
		}, false, result{a: cq.LocProtErr}, false},
		{"write from, fails mid-message", false, 1, func(vm, loc *MR) SendWR {
			return SendWR{Opcode: qp.OpRDMAWrite, SGL: sge(vm, 0, 3000), RemoteAddr: loc.IOVA, Rkey: loc.Rkey}
		}, false, result{a: cq.LocProtErr}, false},
		{"read into", false, 0, func(vm, loc *MR) SendWR {
			return SendWR{Opcode: qp.OpRDMARead, SGL: sge(vm, 0, 64), RemoteAddr: loc.IOVA, Rkey: loc.Rkey}
		}, false, result{a: cq.LocProtErr}, false},
		{"atomic into", false, 0, func(vm, loc *MR) SendWR {
			return SendWR{Opcode: qp.OpAtomicFetchAdd, SGL: sge(vm, 0, 8), RemoteAddr: loc.IOVA, Rkey: loc.Rkey, CompareAdd: 1}
		}, false, result{a: cq.LocProtErr}, false},
	}
	for _, fab := range []bool{false, true} {
		for _, tc := range cases {
			if tc.fabOnly && !fab {
				continue
			}
			name := map[bool]string{false: "loopback/", true: "fabric/"}[fab] + tc.name
			t.Run(name, func(t *testing.T) {
				w := newAccWorld(t, fab)
				acc := &testAcc{base: base, mem: make([]byte, 8192), failAfter: -1}
				owner, other := w.nb, w.na
				if !tc.remote {
					owner, other = w.na, w.nb
				}
				vm, err := owner.pd.RegMRAccessor(acc, base, 8192, 0x500000, allRemote)
				require.NoError(t, err)
				loc := other.mr(t, 8192)
				if tc.recv {
					require.NoError(t, w.b.PostRecv(RecvWR{WRID: 2, SGL: sge(vm, 0, 4096)}))
				}
				acc.mu.Lock()
				acc.failAfter = tc.failAfter
				acc.mu.Unlock()
				wr := tc.wr(vm, loc)
				wr.WRID, wr.Flags = 1, qp.Signaled
				require.NoError(t, w.a.PostSend(wr))
				n := 1
				if tc.recv {
					n = 2
				}
				wcs := w.pollAll(t, n)
				require.Equal(t, tc.want.a, wcs[1].Status, "requester: %+v", wcs[1])
				if tc.recv {
					require.Equal(t, tc.want.b, wcs[2].Status, "responder: %+v", wcs[2])
				}
				require.Equal(t, qp.Err, w.a.State(), "the requester's QP is in error")
			})
		}
	}
}
