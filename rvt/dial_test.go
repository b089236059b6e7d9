package rvt_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/transport"
)

// The verbs tests of this file run the same code, with the same
// assertions, on two embedded devices (rvt.Open on one in-memory fabric)
// and on two devices of an in-process rvtd (rvt.Dial): rvt0 and rvt1,
// GID index 1 the IPv4-mapped address, as the daemon's default config.

// startRVTD runs an in-process rvtd on a socket in a temporary directory.
func startRVTD(t testing.TB) string {
	t.Helper()
	_, sock := startRVTDServer(t)
	return sock
}

// startRVTDServer is startRVTD that also returns the server, for a test
// that changes the daemon's devices.
func startRVTDServer(t testing.TB) (*rvtd.Server, string) {
	t.Helper()
	srv, err := rvtd.New(nil, rvtd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "rvtd.sock")
	if err := srv.Listen(sock); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return srv, sock
}

// pairOpeners open rvt0 and rvt1 each way.
var pairOpeners = []struct {
	name string
	open func(t testing.TB) [2]*rvt.Device
}{
	{"embedded", func(t testing.TB) [2]*rvt.Device {
		p, err := devopen.OpenPair(devopen.PairConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return [2]*rvt.Device{p.N[0].Dev, p.N[1].Dev}
	}},
	{"rvtd", func(t testing.TB) [2]*rvt.Device {
		sock := startRVTD(t)
		var ds [2]*rvt.Device
		for i, name := range []string{"rvt0", "rvt1"} {
			d, err := rvt.Dial(sock, name)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			if d.Remote() == nil {
				t.Fatal("Remote() is nil for a Dial'd device")
			}
			ds[i] = d
		}
		return ds
	}},
}

// end is one side of a connection: a device, PD, CQ, QP and a buffer.
type end struct {
	dev *rvt.Device
	pd  *rvt.PD
	cq  *rvt.CQ
	qp  *rvt.QP
	buf []byte
	mr  *rvt.MR
	gid rvt.GID
}

const bufLen = 64 << 10

func newEnd(t testing.TB, d *rvt.Device, typ rvt.QPType) *end {
	t.Helper()
	e := &end{dev: d}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = d.CreateCQ(256, nil); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = e.pd.CreateQP(rvt.QPInitAttr{Type: typ, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: rvt.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}}); err != nil {
		t.Fatal(err)
	}
	if (d.Remote() != nil) != (e.qp.RemoteHandle() != 0) {
		t.Fatalf("RemoteHandle %d on a device with Remote %v", e.qp.RemoteHandle(), d.Remote())
	}
	if e.buf, err = d.AllocBuf(bufLen); err != nil {
		t.Fatal(err)
	}
	if e.mr, err = e.pd.Reg(e.buf, keys.LocalWrite|keys.RemoteWrite|keys.RemoteRead|keys.RemoteAtomic); err != nil {
		t.Fatal(err)
	}
	if e.gid, err = d.QueryGID(1, 1); err != nil {
		t.Fatal(err)
	}
	return e
}

// connect moves a and b to RTS, each aimed at the other (RC, UC), or
// to RTS on their own (UD).
func connect(t testing.TB, a, b *end) {
	t.Helper()
	for _, p := range [][2]*end{{a, b}, {b, a}} {
		me, peer := p[0], p[1]
		q := me.qp
		init := rvt.QPAttr{State: qp.Init, Port: 1, AccessFlags: keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic, QKey: 0x11111111}
		mask := qp.AttrState | qp.AttrPkeyIndex | qp.AttrPort
		if q.Type() == qp.UD {
			mask |= qp.AttrQKey
		} else {
			mask |= qp.AttrAccessFlags
		}
		if err := q.Modify(&init, mask); err != nil {
			t.Fatalf("INIT: %v", err)
		}
		rtr := rvt.QPAttr{State: qp.RTR}
		mask = qp.AttrState
		if q.Type() != qp.UD {
			rtr.PathMTU, rtr.DestQPN, rtr.RQPSN = qp.MTU1024, peer.qp.Num(), 100
			rtr.AV = rvt.AddressVector{DGID: peer.gid, SGIDIndex: 1, HopLimit: 64, Port: 1}
			mask |= qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
			if q.Type() == qp.RC {
				rtr.MaxDestRdAtomic, rtr.MinRNRTimer = 4, 1
				mask |= qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
			}
		}
		if err := q.Modify(&rtr, mask); err != nil {
			t.Fatalf("RTR: %v", err)
		}
		rts := rvt.QPAttr{State: qp.RTS, SQPSN: 100}
		mask = qp.AttrState | qp.AttrSQPSN
		if q.Type() == qp.RC {
			rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = 14, 7, 7, 4
			mask |= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
		}
		if err := q.Modify(&rts, mask); err != nil {
			t.Fatalf("RTS: %v", err)
		}
		if s := q.State(); s != qp.RTS {
			t.Fatalf("state %v after RTS", s)
		}
	}
}

// poll waits for n completions on c.
func poll(t testing.TB, c *rvt.CQ, n int) []rvt.WC {
	t.Helper()
	out := make([]rvt.WC, 0, n)
	buf := make([]rvt.WC, 16)
	for deadline := time.Now().Add(10 * time.Second); len(out) < n; {
		k := c.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions after 10 s: %+v", len(out), n, out)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	for _, wc := range out {
		if wc.Status != cq.Success {
			t.Fatalf("completion %+v", wc)
		}
	}
	return out
}

// settleRecv lets rvtd take receives just posted: it takes them on a
// doorbell, a modify or its 1 ms tick, and a UC or UD message finding none
// is dropped, as on any device (docs/rvtd.md, "Not yet": the engine does
// not yet ask the daemon for a receive when it finds none).
func settleRecv() { time.Sleep(20 * time.Millisecond) }

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed + byte(i*7)
	}
}

func sge(e *end, off, n int) rvt.SGE {
	return rvt.SGE{Addr: e.mr.IOVA + uint64(off), Length: uint32(n), Lkey: e.mr.Lkey}
}

func TestDialVerbsTable(t *testing.T) {
	tests := []struct {
		name string
		typ  rvt.QPType
		run  func(t *testing.T, a, b *end)
	}{
		{"RC send recv write read atomics", qp.RC, func(t *testing.T, a, b *end) {
			sizes := []int{1, 8, 1000, 4096, 9000}
			for i, n := range sizes {
				if err := b.qp.PostRecv(rvt.RecvWR{WRID: uint64(i), SGL: []rvt.SGE{sge(b, 16<<10, n)}}); err != nil {
					t.Fatal(err)
				}
			}
			for i, n := range sizes {
				fill(a.buf[:n], byte(i+1))
				if err := a.qp.PostSend(rvt.SendWR{WRID: uint64(100 + i), Opcode: qp.OpSendWithImm, ImmData: 0xabc0 + uint32(i),
					Flags: qp.Signaled, SGL: []rvt.SGE{sge(a, 0, n)}}); err != nil {
					t.Fatal(err)
				}
				if wc := poll(t, a.cq, 1)[0]; wc.WRID != uint64(100+i) || wc.Opcode != cq.Send {
					t.Fatalf("send completion %+v", wc)
				}
				wc := poll(t, b.cq, 1)[0]
				if wc.WRID != uint64(i) || wc.ByteLen != uint32(n) || wc.Flags&cq.WithImm == 0 || wc.ImmData != 0xabc0+uint32(i) ||
					wc.Opcode != cq.Recv || wc.QPNum != b.qp.Num() {
					t.Fatalf("receive completion %+v", wc)
				}
				if !bytes.Equal(b.buf[16<<10:16<<10+n], a.buf[:n]) {
					t.Fatalf("SEND of %d bytes: bytes differ", n)
				}
			}
			// RDMA WRITE of two SGEs, then READ back into another place.
			fill(a.buf[:20000], 0x33)
			w := rvt.SendWR{WRID: 1, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: []rvt.SGE{sge(a, 0, 12000), sge(a, 12000, 8000)},
				RemoteAddr: b.mr.IOVA + 32<<10, Rkey: b.mr.Rkey}
			if err := a.qp.PostSend(w); err != nil {
				t.Fatal(err)
			}
			poll(t, a.cq, 1)
			if !bytes.Equal(b.buf[32<<10:32<<10+20000], a.buf[:20000]) {
				t.Fatal("RDMA WRITE: bytes differ")
			}
			fill(b.buf[:5000], 0x77)
			r := rvt.SendWR{WRID: 2, Opcode: qp.OpRDMARead, Flags: qp.Signaled, SGL: []rvt.SGE{sge(a, 40<<10, 5000)},
				RemoteAddr: b.mr.IOVA, Rkey: b.mr.Rkey}
			if err := a.qp.PostSend(r); err != nil {
				t.Fatal(err)
			}
			if wc := poll(t, a.cq, 1)[0]; wc.Opcode != cq.RDMARead || wc.ByteLen != 5000 {
				t.Fatalf("read completion %+v", wc)
			}
			if !bytes.Equal(a.buf[40<<10:40<<10+5000], b.buf[:5000]) {
				t.Fatal("RDMA READ: bytes differ")
			}
			// Atomics on a word of b's buffer.
			binary.NativeEndian.PutUint64(b.buf[60<<10:], 40)
			faa := rvt.SendWR{WRID: 3, Opcode: qp.OpAtomicFetchAdd, Flags: qp.Signaled, SGL: []rvt.SGE{sge(a, 0, 8)},
				RemoteAddr: b.mr.IOVA + 60<<10, Rkey: b.mr.Rkey, CompareAdd: 2}
			cas := rvt.SendWR{WRID: 4, Opcode: qp.OpAtomicCmpSwp, Flags: qp.Signaled, SGL: []rvt.SGE{sge(a, 8, 8)},
				RemoteAddr: b.mr.IOVA + 60<<10, Rkey: b.mr.Rkey, CompareAdd: 42, Swap: 1000}
			if err := a.qp.PostSend(faa, cas); err != nil {
				t.Fatal(err)
			}
			poll(t, a.cq, 2)
			if got, old1, old2 := binary.NativeEndian.Uint64(b.buf[60<<10:]), binary.NativeEndian.Uint64(a.buf[0:]),
				binary.NativeEndian.Uint64(a.buf[8:]); got != 1000 || old1 != 40 || old2 != 42 {
				t.Fatalf("atomics: word %d, fetched %d and %d; want 1000, 40, 42", got, old1, old2)
			}
			// Inline SEND.
			if err := b.qp.PostRecv(rvt.RecvWR{WRID: 9, SGL: []rvt.SGE{sge(b, 0, 64)}}); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.PostSend(rvt.SendWR{WRID: 5, Opcode: qp.OpSend, Flags: qp.Signaled | qp.Inline,
				InlineData: []byte("inline through the ring")}); err != nil {
				t.Fatal(err)
			}
			poll(t, a.cq, 1)
			if wc := poll(t, b.cq, 1)[0]; wc.ByteLen != 23 || string(b.buf[:23]) != "inline through the ring" {
				t.Fatalf("inline: %+v %q", wc, b.buf[:23])
			}
		}},
		{"UC send and write", qp.UC, func(t *testing.T, a, b *end) {
			fill(a.buf[:3000], 9)
			if err := b.qp.PostRecv(rvt.RecvWR{WRID: 1, SGL: []rvt.SGE{sge(b, 0, 4096)}}); err != nil {
				t.Fatal(err)
			}
			settleRecv()
			if err := a.qp.PostSend(rvt.SendWR{WRID: 2, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: []rvt.SGE{sge(a, 0, 3000)}}); err != nil {
				t.Fatal(err)
			}
			poll(t, a.cq, 1)
			if wc := poll(t, b.cq, 1)[0]; wc.ByteLen != 3000 || !bytes.Equal(b.buf[:3000], a.buf[:3000]) {
				t.Fatalf("UC SEND: %+v", wc)
			}
			fill(a.buf[:7000], 21)
			if err := a.qp.PostSend(rvt.SendWR{WRID: 3, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: []rvt.SGE{sge(a, 0, 7000)},
				RemoteAddr: b.mr.IOVA + 8192, Rkey: b.mr.Rkey}); err != nil {
				t.Fatal(err)
			}
			poll(t, a.cq, 1)
			// A SEND after the WRITE on the same QP: its receive completion
			// says the WRITE's bytes are in place (UC delivers in order).
			if err := b.qp.PostRecv(rvt.RecvWR{WRID: 4, SGL: []rvt.SGE{sge(b, 0, 64)}}); err != nil {
				t.Fatal(err)
			}
			settleRecv()
			if err := a.qp.PostSend(rvt.SendWR{WRID: 5, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: []rvt.SGE{sge(a, 0, 8)}}); err != nil {
				t.Fatal(err)
			}
			poll(t, a.cq, 1)
			poll(t, b.cq, 1)
			if !bytes.Equal(b.buf[8192:8192+7000], a.buf[:7000]) {
				t.Fatal("UC WRITE: bytes differ")
			}
		}},
		{"UD send through an AH", qp.UD, func(t *testing.T, a, b *end) {
			ah, err := a.pd.CreateAH(rvt.AddressVector{DGID: b.gid, SGIDIndex: 1, HopLimit: 64, Port: 1})
			if err != nil {
				t.Fatal(err)
			}
			const n = 1000
			if err := b.qp.PostRecv(rvt.RecvWR{WRID: 7, SGL: []rvt.SGE{sge(b, 0, 40+n)}}); err != nil {
				t.Fatal(err)
			}
			settleRecv()
			fill(a.buf[:n], 5)
			if err := a.qp.PostSend(rvt.SendWR{WRID: 8, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: []rvt.SGE{sge(a, 0, n)},
				AH: ah, RemoteQPN: b.qp.Num(), RemoteQKey: 0x11111111}); err != nil {
				t.Fatal(err)
			}
			poll(t, a.cq, 1)
			wc := poll(t, b.cq, 1)[0]
			if wc.ByteLen != 40+n || wc.SrcQP != a.qp.Num() || wc.Flags&cq.GRH == 0 {
				t.Fatalf("UD receive %+v", wc)
			}
			if !bytes.Equal(b.buf[40:40+n], a.buf[:n]) {
				t.Fatal("UD SEND: bytes differ")
			}
			if err := a.dev.DestroyAH(ah); err != nil {
				t.Fatal(err)
			}
			if err := a.dev.DestroyAH(ah); !errors.Is(err, rvt.ErrInvalidArgument) {
				t.Fatalf("second DestroyAH: %v", err)
			}
		}},
	}
	for _, o := range pairOpeners {
		t.Run(o.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					ds := o.open(t)
					a, b := newEnd(t, ds[0], tc.typ), newEnd(t, ds[1], tc.typ)
					connect(t, a, b)
					tc.run(t, a, b)
					// Counters, QP listing, query, teardown: the same on both.
					if a.dev.Counters()["sent_pkts"] == 0 {
						t.Errorf("device counters %v: no sent_pkts", a.dev.Counters())
					}
					if !slices.ContainsFunc(a.dev.QPs(), func(i rvt.QPInfo) bool { return i.Num == a.qp.Num() && i.State == qp.RTS }) {
						t.Errorf("QPs() %+v lacks QP %#x in RTS", a.dev.QPs(), a.qp.Num())
					}
					if a.qp.Counters() == nil {
						t.Error("QP counters nil")
					}
					if la := a.qp.QP.Query(); la.State != qp.RTS || (tc.typ != qp.UD && la.DestQPN != b.qp.Num()) {
						t.Errorf("the local QP's attributes: state %v dest QPN %#x", la.State, la.DestQPN)
					}
					if got := a.qp.Query(); got.State != qp.RTS || got.CurState != qp.RTS {
						t.Errorf("Query state %v/%v", got.State, got.CurState)
					}
					if err := a.dev.DestroyCQ(a.cq); !errors.Is(err, rvt.ErrBusy) {
						t.Errorf("DestroyCQ of a CQ a QP uses: %v, want ErrBusy", err)
					}
					if err := a.qp.Drain(context.Background()); err != nil {
						t.Fatal(err)
					}
					if err := a.qp.Destroy(); err != nil {
						t.Fatal(err)
					}
					if err := a.qp.Destroy(); !errors.Is(err, rvt.ErrInvalidArgument) {
						t.Errorf("second Destroy: %v", err)
					}
					if err := a.dev.DeregMR(a.mr); err != nil {
						t.Fatal(err)
					}
					if err := a.dev.DestroyCQ(a.cq); err != nil {
						t.Fatal(err)
					}
					if err := a.pd.Dealloc(); err != nil {
						t.Fatal(err)
					}
					if err := a.dev.FreeBuf(a.buf); err != nil {
						t.Fatal(err)
					}
				})
			}
		})
	}
}

// TestDialDevice: queries, memory windows and the verbs the daemon does
// not serve yet, on both kinds of device.
func TestDialDevice(t *testing.T) {
	for _, o := range pairOpeners {
		t.Run(o.name, func(t *testing.T) {
			ds := o.open(t)
			d := ds[0]
			if d.Name() != "rvt0" {
				t.Errorf("Name %q", d.Name())
			}
			a := d.QueryDevice()
			if a.MaxQP == 0 || a.MaxCQE == 0 || a.PhysPortCnt != 1 || a.AtomicCap != "HCA" {
				t.Errorf("QueryDevice %+v", a)
			}
			pa, err := d.QueryPort(1)
			if err != nil || pa.State != "ACTIVE" || pa.ActiveMTU == 0 || pa.GIDTblLen < 2 {
				t.Errorf("QueryPort %+v, %v", pa, err)
			}
			if _, err := d.QueryPort(2); !errors.Is(err, rvt.ErrInvalidArgument) {
				t.Errorf("QueryPort(2): %v", err)
			}
			if k, err := d.QueryPKey(1, 0); err != nil || k != 0xFFFF {
				t.Errorf("QueryPKey %#x, %v", k, err)
			}
			g, err := d.QueryGID(1, 1)
			if err != nil || g.IP().String() != "198.18.0.1" {
				t.Errorf("QueryGID(1, 1) %v, %v", g, err)
			}
			if d.PollLink() {
				t.Error("PollLink true with no traffic")
			}
			if d.Clock() == nil {
				t.Error("Clock nil")
			}
			pd, err := d.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			buf, err := d.AllocBuf(8192)
			if err != nil {
				t.Fatal(err)
			}
			mr, err := pd.RegMR(buf[4096:], 0x5000, keys.LocalWrite|keys.RemoteWrite|keys.MWBind)
			if err != nil {
				t.Fatal(err)
			}
			if mr.IOVA != 0x5000 || mr.Length != 4096 || mr.Lkey == 0 {
				t.Errorf("MR %+v", mr)
			}
			mw, err := pd.AllocMW(keys.MWType1)
			if err != nil {
				t.Fatal(err)
			}
			old := mw.Rkey
			rkey, err := d.BindMW(mw, mr, 0x5100, 256, keys.RemoteWrite)
			if err != nil || rkey == old || mw.Rkey != rkey {
				t.Errorf("BindMW: rkey %#x (was %#x, field %#x), %v", rkey, old, mw.Rkey, err)
			}
			if err := d.DeallocMW(mw); err != nil {
				t.Error(err)
			}
			if err := pd.Dealloc(); !errors.Is(err, rvt.ErrBusy) {
				t.Errorf("Dealloc of a PD with an MR: %v, want ErrBusy", err)
			}
			if err := d.DeregMR(mr); err != nil {
				t.Fatal(err)
			}
			if err := d.DeregMR(mr); !errors.Is(err, rvt.ErrInvalidState) {
				t.Errorf("second DeregMR: %v", err)
			}
			c, err := d.CreateCQ(10, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.Depth() < 10 || c.Len() != 0 {
				t.Errorf("CQ depth %d len %d", c.Depth(), c.Len())
			}
			if err := c.Resize(100); err != nil || c.Depth() < 100 {
				t.Errorf("Resize: depth %d, %v", c.Depth(), err)
			}
			if queued, err := c.ArmAndCheck(false); err != nil || queued {
				t.Errorf("ArmAndCheck %v %v", queued, err)
			}
			if err := d.DestroyCQ(c); err != nil {
				t.Error(err)
			}
			if err := pd.Dealloc(); err != nil {
				t.Error(err)
			}
			if err := d.FreeBuf(buf); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestDialUnserved: what the daemon answers EOPNOTSUPP to today reaches
// the caller as ErrNotSupported, and plain Go memory is a process_vm
// registration (not served yet either). When the daemon learns them,
// these calls succeed and this test says so.
func TestDialUnserved(t *testing.T) {
	sock := startRVTD(t)
	d, err := rvt.Dial(sock, "rvt0")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Logf("%s: served by the daemon now", what)
			return
		}
		if !errors.Is(err, rvt.ErrNotSupported) {
			t.Errorf("%s: %v, want an error wrapping ErrNotSupported", what, err)
		}
	}
	mr, err := pd.Reg(make([]byte, 4096), keys.LocalWrite)
	check("RegMR of Go memory", err)
	if err == nil {
		_ = d.DeregMR(mr)
	}
	srq, err := pd.CreateSRQ(16, 1)
	check("CreateSRQ", err)
	if err == nil {
		_ = srq.Destroy()
	}
	fmr, err := pd.AllocMR(4)
	check("AllocMR", err)
	if err == nil {
		_ = d.DeregMR(fmr)
	}
	if _, err := rvt.Dial(sock, "nosuch"); err == nil {
		t.Error("Dial of a device the daemon does not serve succeeded")
	}
	if d.Engine() != nil {
		t.Error("Engine() of a Dial'd device is not nil")
	}
	if err := d.SetAddrs(nil); err == nil {
		t.Error("SetAddrs succeeded")
	}
}

// TestDialEvents: the completion handler, a completion channel and an
// async event (CQ overflow) on both kinds of device.
func TestDialEvents(t *testing.T) {
	for _, o := range pairOpeners {
		t.Run(o.name, func(t *testing.T) {
			ds := o.open(t)
			a, b := newEnd(t, ds[0], qp.RC), newEnd(t, ds[1], qp.RC)
			connect(t, a, b)
			fired := make(chan *rvt.CQ, 4)
			c, err := b.dev.CreateCQ(4, func(c *rvt.CQ) { fired <- c })
			if err != nil {
				t.Fatal(err)
			}
			ch := cq.NewChannel(4)
			c.Attach(ch)
			q, err := b.pd.CreateQP(rvt.QPInitAttr{Type: qp.RC, SendCQ: c, RecvCQ: c,
				Cap: rvt.QPCap{MaxSendWR: 4, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			// Use q in place of b's QP.
			if err := b.qp.Destroy(); err != nil {
				t.Fatal(err)
			}
			b.qp = q
			a2 := newEnd(t, ds[0], qp.RC)
			connect(t, a2, b)
			events := make(chan rvt.Event, 16)
			cancel := b.dev.Subscribe(func(ev rvt.Event) { events <- ev })
			defer cancel()

			if err := c.Arm(false); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				if err := q.PostRecv(rvt.RecvWR{WRID: uint64(i), SGL: []rvt.SGE{sge(b, 0, 64)}}); err != nil {
					t.Fatal(err)
				}
			}
			send := func(id uint64) {
				if err := a2.qp.PostSend(rvt.SendWR{WRID: id, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: []rvt.SGE{sge(a2, 0, 8)}}); err != nil {
					t.Fatal(err)
				}
				poll(t, a2.cq, 1)
			}
			send(1)
			select {
			case got := <-fired:
				if got != c {
					t.Fatal("handler called with another CQ")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no completion handler call")
			}
			ctx, cancelCtx := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancelCtx()
			got, err := ch.Get(ctx)
			if err != nil || got != c {
				t.Fatalf("channel Get: %v %v", got, err)
			}
			c.AckEvents(1)
			poll(t, c, 1)
			// Not armed: no further call.
			send(2)
			poll(t, c, 1)
			select {
			case <-fired:
				t.Fatal("handler called without an arm")
			case <-time.After(50 * time.Millisecond):
			}
			// Overflow the CQ (one completion more than it holds,
			// unpolled): EventCQErr for it. The SEND whose receive
			// completion is lost is ACKed before, so every send here
			// succeeds; the QP is in ERR afterwards (below).
			n := c.Depth() + 1
			for i := range n {
				if err := q.PostRecv(rvt.RecvWR{WRID: uint64(100 + i), SGL: []rvt.SGE{sge(b, 0, 64)}}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range n {
				send(uint64(100 + i))
			}
			deadline := time.After(10 * time.Second)
			for {
				select {
				case ev := <-events:
					if ev.Type == transport.EventCQErr {
						if ev.CQ != c {
							t.Fatalf("CQ error event for another CQ: %+v", ev)
						}
						if o.name == "embedded" {
							// The QP that lost a completion goes to ERR
							// (IBTA class G, as rxe's responder does).
							for q.State() != qp.Err {
								select {
								case <-deadline:
									t.Fatalf("QP in %v after its CQ overflowed, want ERR", q.State())
								case <-time.After(time.Millisecond):
								}
							}
						}
						return
					}
				case <-deadline:
					t.Fatal("no EventCQErr after overflowing the CQ")
				}
			}
		})
	}
}

// BenchmarkDialRoundTrip is an 8-byte RC SEND round trip between two
// devices, each way (embedded, rvtd), busy polling.
func BenchmarkDialRoundTrip(b *testing.B) {
	for _, o := range pairOpeners {
		b.Run(o.name, func(b *testing.B) {
			ds := o.open(b)
			x, y := newEnd(b, ds[0], qp.RC), newEnd(b, ds[1], qp.RC)
			connect(b, x, y)
			for _, e := range []*end{x, y} {
				for i := range 32 {
					if err := e.qp.PostRecv(rvt.RecvWR{WRID: uint64(i), SGL: []rvt.SGE{sge(e, 4096, 64)}}); err != nil {
						b.Fatal(err)
					}
				}
			}
			settleRecv()
			wcs := make([]rvt.WC, 4)
			wait := func(e *end) {
				for empty := 0; ; empty++ {
					n := e.cq.Poll(wcs[:1])
					// Two pollers spinning on 2 CPUs would starve the engine's
					// goroutines (embedded) and the netpoller that wakes
					// rvtd's loops (in process): yield, then sleep.
					switch {
					case n == 1:
						empty = 0
					case empty < 64:
						runtime.Gosched()
					default:
						time.Sleep(time.Microsecond)
					}
					if n == 1 {
						if wcs[0].Status != cq.Success {
							b.Fatalf("%+v", wcs[0])
						}
						if wcs[0].Opcode.IsRecv() {
							if err := e.qp.PostRecv(rvt.RecvWR{WRID: 1, SGL: []rvt.SGE{sge(e, 4096, 64)}}); err != nil {
								b.Fatal(err)
							}
							return
						}
					}
				}
			}
			send := func(e *end) {
				if err := e.qp.PostSend(rvt.SendWR{WRID: 7, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: []rvt.SGE{sge(e, 0, 8)}}); err != nil {
					b.Fatal(err)
				}
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for range b.N {
					wait(y)
					send(y)
				}
			}()
			b.ResetTimer()
			for range b.N {
				send(x)
				wait(x)
			}
			<-done
		})
	}
}

// TestDialUseAfterClose: posts and polls after Device.Close, or after the
// QP or CQ is destroyed, return errors or nothing; they never touch the
// unmapped rings.
func TestDialUseAfterClose(t *testing.T) {
	sock := startRVTD(t)
	d, err := rvt.Dial(sock, "rvt0")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnd(t, d, qp.RC)
	c2, err := d.CreateCQ(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.DestroyCQ(c2); err != nil {
		t.Fatal(err)
	}
	if n := c2.Poll(make([]rvt.WC, 4)); n != 0 {
		t.Errorf("Poll of a destroyed CQ: %d", n)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.qp.PostSend(rvt.SendWR{Opcode: qp.OpSend, SGL: []rvt.SGE{sge(e, 0, 8)}}); err == nil {
		t.Error("PostSend after Close succeeded")
	}
	if err := e.qp.PostRecv(rvt.RecvWR{SGL: []rvt.SGE{sge(e, 0, 8)}}); err == nil {
		t.Error("PostRecv after Close succeeded")
	}
	if n := e.cq.Poll(make([]rvt.WC, 4)); n != 0 {
		t.Errorf("Poll after Close: %d", n)
	}
	if err := e.cq.Arm(false); err == nil {
		t.Error("Arm after Close succeeded")
	}
}

// TestDialPortEvent: a GID change of the port reaches Subscribe, and the
// new GID QueryGID, on both kinds of device.
func TestDialPortEvent(t *testing.T) {
	mac, addrs := devopen.NodeAddrs(0)
	extra := netip.MustParseAddr("2001:db8::5")
	newAddrs := netdev.GIDOrder(mac, append(addrs[1:], extra))
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (dev, owner *rvt.Device)
	}{
		{"embedded", func(t *testing.T) (*rvt.Device, *rvt.Device) {
			d := pairOpeners[0].open(t)[0]
			return d, d
		}},
		{"rvtd", func(t *testing.T) (*rvt.Device, *rvt.Device) {
			srv, sock := startRVTDServer(t)
			d, err := rvt.Dial(sock, "rvt0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			return d, srv.Device("rvt0")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, owner := tc.open(t)
			events := make(chan rvt.Event, 4)
			cancel := d.Subscribe(func(ev rvt.Event) { events <- ev })
			defer cancel()
			if err := owner.SetAddrs(newAddrs); err != nil {
				t.Fatal(err)
			}
			select {
			case ev := <-events:
				if ev.Type != transport.EventGIDChange || ev.Port != 1 {
					t.Fatalf("event %+v, want GID change on port 1", ev)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no GID change event")
			}
			i := slices.Index(newAddrs, extra)
			if g, err := d.QueryGID(1, i); err != nil || g.IP() != extra {
				t.Fatalf("GID %d: %v %v, want %v", i, g, err, extra)
			}
		})
	}
}
