// Package demo is the traffic and the checks of `rvt demo` and `rvt
// stat`: two devices on an in-memory fabric (devopen.OpenPair), every
// operation across them (RC SEND, SEND_WITH_IMM, SEND_WITH_INV, RDMA
// WRITE and READ, atomics, REG_MR, LOCAL_INV, BIND_MW, fences, unsignalled
// WRs; UC; UD with the GRH; UD multicast), each checked byte for byte and
// reported as a result line, a throughput run and the counters (Run); and
// the little traffic `rvt stat` shows the QPs and counters of (OpenStat).
package demo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Config is what Run does.
type Config struct {
	Seconds float64 // length of each throughput run
	Size    int     // RDMA WRITE size of the throughput run (1 to traffic.MaxWriteSize)
	MTU     int     // path MTU in bytes: 256, 512, 1024, 2048 or 4096
	Loss    float64 // RC frame loss probability on both ports, in [0, 1)
	PCAP    string  // capture file for the functional phase ("": none)
	Seed    int64   // seed of the fabric and the fault profile
}

// DefaultConfig is rvt demo's: 1 s runs of 64 KiB WRITEs, path MTU 4096,
// no loss.
func DefaultConfig() Config {
	return Config{Seconds: 1, Size: 64 << 10, MTU: 4096, Seed: 1}
}

// ErrChecks is returned (wrapped) when one or more checks failed.
var ErrChecks = errors.New("checks failed")

// demo runs the functional tour and the throughput runs.
type demo struct {
	w      io.Writer
	cfg    Config
	mtu    rvt.MTU
	p      *devopen.Pair
	failed int
	passed int
}

// Run opens two devices on an in-memory fabric and shows every
// operation, a throughput run and the counters. It returns ErrChecks
// (wrapped) if any check failed.
func Run(w io.Writer, cfg Config) error {
	mtu := qp.MTUFromBytes(cfg.MTU)
	switch {
	case mtu == 0 || mtu.Bytes() != cfg.MTU:
		return fmt.Errorf("path MTU %d: want 256, 512, 1024, 2048 or 4096", cfg.MTU)
	case !(cfg.Seconds > 0), cfg.Size < 1 || cfg.Size > traffic.MaxWriteSize, !(cfg.Loss >= 0 && cfg.Loss < 1):
		return fmt.Errorf("demo: invalid config %+v", cfg)
	}
	pc := devopen.PairConfig{Loss: cfg.Loss, Seed: cfg.Seed}
	var gate *gateWriter
	if cfg.PCAP != "" {
		f, err := os.Create(cfg.PCAP)
		if err != nil {
			return err
		}
		defer f.Close()
		gate = &gateWriter{w: f}
		gate.open.Store(true)
		pc.Capture = gate
	}
	p, err := devopen.OpenPair(pc)
	if err != nil {
		return fmt.Errorf("open devices: %w", err)
	}
	defer p.Close()
	d := &demo{w: w, cfg: cfg, mtu: mtu, p: p}

	fmt.Fprintf(w, "softverbs demo: %s (%s, %s) and %s (%s, %s) on an in-memory fabric, path MTU %d",
		p.N[0].Dev.Name(), p.N[0].Addrs[1], p.N[0].MAC, p.N[1].Dev.Name(), p.N[1].Addrs[1], p.N[1].MAC, mtu.Bytes())
	if cfg.Loss > 0 {
		fmt.Fprintf(w, ", RC frame loss %.3g%%", cfg.Loss*100)
	}
	fmt.Fprintln(w)
	steps := []struct {
		name string
		fn   func() error
	}{
		{"RC", d.rc}, {"RC memory registration and invalidation", d.rcInvalidate},
		{"UC", d.uc}, {"UD", d.ud}, {"UD multicast", d.multicast},
	}
	for _, s := range steps {
		fmt.Fprintf(w, "\n== %s\n", s.name)
		if err := s.fn(); err != nil {
			d.fail(s.name, "setup", err)
		}
	}
	if gate != nil {
		// The capture covers the functional phase only: a throughput
		// run would write gigabytes.
		gate.open.Store(false)
		fmt.Fprintf(w, "\npcap: %d frames written to %s\n", p.Capture.Frames(), cfg.PCAP)
	}
	fmt.Fprintf(w, "\n== throughput (%.3g s each)\n", cfg.Seconds)
	if err := d.throughput(); err != nil {
		d.fail("throughput", "", err)
	}
	d.counters()
	fmt.Fprintf(w, "\n%d checks passed, %d failed\n", d.passed, d.failed)
	if d.failed > 0 {
		return fmt.Errorf("%w: %d of %d", ErrChecks, d.failed, d.failed+d.passed)
	}
	return nil
}

// gateWriter passes writes through while open; once closed it refuses
// them, which stops a capture.Link cleanly between two records.
type gateWriter struct {
	w    io.Writer
	open atomic.Bool
}

var errGateClosed = errors.New("capture closed")

func (g *gateWriter) Write(b []byte) (int, error) {
	if !g.open.Load() {
		return 0, errGateClosed
	}
	return g.w.Write(b)
}

// line prints one result line: verdict, transport, operation, details;
// a failure adds a line with the reason.
func (d *demo) line(tr, op, detail string, err error) {
	verdict := "ok"
	if err != nil {
		verdict = "FAIL"
		d.failed++
	} else {
		d.passed++
	}
	fmt.Fprintf(d.w, "%-4s %-3s %-22s %s\n", verdict, tr, op, detail)
	if err != nil {
		fmt.Fprintf(d.w, "     error: %v\n", err)
	}
}

func (d *demo) fail(tr, op string, err error) { d.line(tr, op, "", err) }

// wcCheck checks that wc succeeded with the expected opcode and WR ID.
func wcCheck(wc rvt.WC, wrid uint64, op cq.Opcode) error {
	switch {
	case wc.Status != cq.Success:
		return fmt.Errorf("wr_id %d: status %q (%d)", wc.WRID, wc.Status, uint8(wc.Status))
	case wc.WRID != wrid:
		return fmt.Errorf("wr_id %d, want %d", wc.WRID, wrid)
	case wc.Opcode != op:
		return fmt.Errorf("opcode %v, want %v", wc.Opcode, op)
	}
	return nil
}

// dataCheck is the byte comparison behind a result line's data verdict,
// so that a line says "data ok" only when the comparison ran and matched.
type dataCheck struct {
	ran bool
	err error
}

// check records the result of a comparison (sameBytes, equalBytes) and
// returns it.
func (c *dataCheck) check(err error) error {
	c.ran, c.err = true, err
	return err
}

// String is the verdict: "data ok", "data differs", or "data not
// checked" when an earlier step failed before the comparison.
func (c dataCheck) String() string {
	switch {
	case !c.ran:
		return "data not checked"
	case c.err != nil:
		return "data differs"
	}
	return "data ok"
}

// one waits for a single completion on e and checks it.
func one(e *traffic.Endpoint, wrid uint64, op cq.Opcode) (rvt.WC, error) {
	wcs, err := traffic.Wait(e.CQ, 1)
	if err != nil {
		return rvt.WC{}, err
	}
	return wcs[0], wcCheck(wcs[0], wrid, op)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// exchange is what message saw: the completions that arrived and the
// data check.
type exchange struct {
	n              int
	send, recv     rvt.WC
	sendOK, recvOK bool // the completion arrived
	data           dataCheck
}

// detail is the result line's text, from what happened.
func (x exchange) detail() string {
	status := func(wc rvt.WC, ok bool) string {
		if !ok {
			return "none"
		}
		return wc.Status.String()
	}
	return fmt.Sprintf("%6d B  send=%s recv=%s len=%d  %v", x.n, status(x.send, x.sendOK), status(x.recv, x.recvOK), x.recv.ByteLen, x.data)
}

// message sends n bytes from a to b with op (a SEND variant) and checks
// both completions and the data.
func (d *demo) message(a, b *traffic.Endpoint, wr rvt.SendWR, n int, seed byte) (exchange, error) {
	x := exchange{n: n}
	src, want, err := traffic.Buffer(a.N, n, seed)
	if err != nil {
		return x, err
	}
	dst, _, err := traffic.Buffer(b.N, n, 0)
	if err != nil {
		return x, err
	}
	if err := b.PostRecv(rvt.RecvWR{WRID: 100, SGL: traffic.SGE(dst, 0, n)}); err != nil {
		return x, err
	}
	wr.WRID, wr.Flags, wr.SGL = 1, wr.Flags|qp.Signaled, traffic.SGE(src, 0, n)
	if err := a.PostSend(wr); err != nil {
		return x, err
	}
	var serr, rerr error
	x.send, serr = one(a, 1, cq.Send)
	x.recv, rerr = one(b, 100, cq.Recv)
	x.sendOK, x.recvOK = !errors.Is(serr, traffic.ErrTimeout), !errors.Is(rerr, traffic.ErrTimeout)
	err = firstErr(serr, rerr)
	if err == nil && x.recv.ByteLen != uint32(n) {
		err = fmt.Errorf("received %d bytes, want %d", x.recv.ByteLen, n)
	}
	if err == nil {
		err = x.data.check(traffic.SameBytes(dst, dst.IOVA, want))
	}
	return x, err
}

// rc shows every RC operation between rvt0 and rvt1.
func (d *demo) rc() error {
	var events atomic.Int32
	a, err := traffic.NewEndpoint(d.p.N[0], qp.RC, traffic.QPOpts{})
	if err != nil {
		return err
	}
	b, err := traffic.NewEndpoint(d.p.N[1], qp.RC, traffic.QPOpts{OnComp: func(*rvt.CQ) { events.Add(1) }})
	if err != nil {
		return err
	}
	if err := traffic.Connect(a, b, d.mtu); err != nil {
		return err
	}
	fmt.Fprintf(d.w, "QP %#x on %s <-> QP %#x on %s\n", a.Num(), a.N.Dev.Name(), b.Num(), b.N.Dev.Name())

	// SEND, several packets long.
	n := 3*d.mtu.Bytes() + 100
	x, err := d.message(a, b, rvt.SendWR{Opcode: qp.OpSend}, n, 1)
	d.line("RC", "SEND", x.detail(), err)

	// SEND_WITH_IMM, solicited, into a CQ armed for solicited events only:
	// a plain SEND first must not raise the event, the solicited one must.
	err = b.CQ.Arm(true)
	if err == nil {
		_, err = d.message(a, b, rvt.SendWR{Opcode: qp.OpSend}, 64, 2)
	}
	var before int32
	if err == nil {
		time.Sleep(time.Millisecond)
		before = events.Load()
		if before != 0 {
			err = fmt.Errorf("completion event for an unsolicited message")
		}
	}
	var rwc rvt.WC
	if err == nil {
		x, err = d.message(a, b, rvt.SendWR{Opcode: qp.OpSendWithImm, ImmData: 0xC0FFEE, Flags: qp.Solicited}, 1000, 3)
		rwc = x.recv
	}
	if err == nil {
		switch {
		case rwc.Flags&cq.WithImm == 0 || rwc.ImmData != 0xC0FFEE:
			err = fmt.Errorf("immediate %#x (flags %v), want 0xc0ffee", rwc.ImmData, rwc.Flags)
		case !rwc.Solicited:
			err = fmt.Errorf("receive completion not marked solicited")
		case !waitUntil(func() bool { return events.Load() == 1 }):
			err = fmt.Errorf("%d completion events, want 1", events.Load())
		}
	}
	d.line("RC", "SEND_WITH_IMM", fmt.Sprintf("%6d B  imm=%#x solicited, CQ event after it only", 1000, rwc.ImmData), err)

	// RDMA_WRITE, a region of several packets.
	n = 64 << 10
	src, want, err := traffic.Buffer(a.N, n, 4)
	if err != nil {
		return err
	}
	dst, _, err := traffic.Buffer(b.N, 2*n, 0)
	if err != nil {
		return err
	}
	err = a.PostSend(rvt.SendWR{WRID: 10, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: traffic.SGE(src, 0, n),
		RemoteAddr: dst.IOVA, Rkey: dst.Rkey})
	if err == nil {
		_, err = one(a, 10, cq.RDMAWrite)
	}
	var dc dataCheck
	if err == nil {
		err = dc.check(traffic.SameBytes(dst, dst.IOVA, want))
	}
	d.line("RC", "RDMA_WRITE", fmt.Sprintf("%6d B  rkey=%#x  %v", n, dst.Rkey, dc), err)

	// RDMA_WRITE_WITH_IMM: the data, then a receive completion with the
	// immediate.
	src2, want2, err := traffic.Buffer(a.N, 5000, 5)
	if err != nil {
		return err
	}
	err = b.PostRecv(rvt.RecvWR{WRID: 11})
	if err == nil {
		err = a.PostSend(rvt.SendWR{WRID: 12, Opcode: qp.OpRDMAWriteWithImm, ImmData: 0x1234, Flags: qp.Signaled,
			SGL: traffic.SGE(src2, 0, 5000), RemoteAddr: dst.IOVA + uint64(n), Rkey: dst.Rkey})
	}
	rwc = rvt.WC{}
	if err == nil {
		_, serr := one(a, 12, cq.RDMAWrite)
		var rerr error
		rwc, rerr = one(b, 11, cq.RecvRDMAWithImm)
		err = firstErr(serr, rerr)
		if err == nil && (rwc.ImmData != 0x1234 || rwc.ByteLen != 5000) {
			err = fmt.Errorf("imm %#x len %d, want 0x1234 and 5000", rwc.ImmData, rwc.ByteLen)
		}
	}
	dc = dataCheck{}
	if err == nil {
		err = dc.check(traffic.SameBytes(dst, dst.IOVA+uint64(n), want2))
	}
	d.line("RC", "RDMA_WRITE_WITH_IMM", fmt.Sprintf("%6d B  imm=%#x recv=%v  %v", 5000, rwc.ImmData, rwc.Opcode, dc), err)

	// RDMA_READ the first write back.
	back, _, err := traffic.Buffer(a.N, n, 0)
	if err != nil {
		return err
	}
	err = a.PostSend(rvt.SendWR{WRID: 13, Opcode: qp.OpRDMARead, Flags: qp.Signaled, SGL: traffic.SGE(back, 0, n),
		RemoteAddr: dst.IOVA, Rkey: dst.Rkey})
	if err == nil {
		var wc rvt.WC
		wc, err = one(a, 13, cq.RDMARead)
		if err == nil && wc.ByteLen != uint32(n) {
			err = fmt.Errorf("read %d bytes, want %d", wc.ByteLen, n)
		}
	}
	dc = dataCheck{}
	if err == nil {
		err = dc.check(traffic.SameBytes(back, back.IOVA, want))
	}
	d.line("RC", "RDMA_READ", fmt.Sprintf("%6d B  read back what RDMA_WRITE wrote  %v", n, dc), err)

	// Atomics on one remote word.
	word, _, err := traffic.Buffer(b.N, 8, 0)
	if err != nil {
		return err
	}
	binary.NativeEndian.PutUint64(word.Word(word.IOVA), 100)
	old, _, err := traffic.Buffer(a.N, 16, 0)
	if err != nil {
		return err
	}
	err = a.PostSend(rvt.SendWR{WRID: 14, Opcode: qp.OpAtomicFetchAdd, Flags: qp.Signaled, CompareAdd: 5,
		SGL: traffic.SGE(old, 0, 8), RemoteAddr: word.IOVA, Rkey: word.Rkey})
	if err == nil {
		_, err = one(a, 14, cq.FetchAdd)
	}
	got, now := binary.NativeEndian.Uint64(old.Word(old.IOVA)), binary.NativeEndian.Uint64(word.Word(word.IOVA))
	if err == nil && (got != 100 || now != 105) {
		err = fmt.Errorf("returned %d, word now %d; want 100 and 105", got, now)
	}
	d.line("RC", "ATOMIC_FETCH_AND_ADD", fmt.Sprintf("%6d B  100 + 5: returned %d, remote now %d", 8, got, now), err)

	err = a.PostSend(rvt.SendWR{WRID: 15, Opcode: qp.OpAtomicCmpSwp, Flags: qp.Signaled, CompareAdd: 105, Swap: 7,
		SGL: traffic.SGE(old, 8, 8), RemoteAddr: word.IOVA, Rkey: word.Rkey})
	if err == nil {
		_, err = one(a, 15, cq.CompSwap)
	}
	got, now = binary.NativeEndian.Uint64(old.Word(old.IOVA+8)), binary.NativeEndian.Uint64(word.Word(word.IOVA))
	if err == nil && (got != 105 || now != 7) {
		err = fmt.Errorf("returned %d, word now %d; want 105 and 7", got, now)
	}
	d.line("RC", "ATOMIC_CMP_AND_SWP", fmt.Sprintf("%6d B  if 105 then 7: returned %d, remote now %d", 8, got, now), err)

	// Fence: READ a remote region into a local buffer, then SEND that
	// buffer with the fence flag: the SEND waits for the READ, so it
	// carries the bytes just read.
	if err := d.fence(a, b, dst, want[:4096]); err != nil {
		d.line("RC", "RDMA_READ + SEND fence", "", err)
	}

	// Selective signalling: three unsignalled WRITEs and a signalled one
	// make a single completion; all four land.
	return d.unsignalled(a, b)
}

func (d *demo) fence(a, b *traffic.Endpoint, remote *rvt.MR, want []byte) error {
	n := len(want)
	local, _, err := traffic.Buffer(a.N, n, 0)
	if err != nil {
		return err
	}
	recv, _, err := traffic.Buffer(b.N, n, 0)
	if err != nil {
		return err
	}
	if err := b.PostRecv(rvt.RecvWR{WRID: 20, SGL: traffic.SGE(recv, 0, n)}); err != nil {
		return err
	}
	err = a.PostSend(
		rvt.SendWR{WRID: 21, Opcode: qp.OpRDMARead, SGL: traffic.SGE(local, 0, n), RemoteAddr: remote.IOVA, Rkey: remote.Rkey},
		rvt.SendWR{WRID: 22, Opcode: qp.OpSend, Flags: qp.Signaled | qp.Fence, SGL: traffic.SGE(local, 0, n)})
	if err != nil {
		return err
	}
	_, serr := one(a, 22, cq.Send)
	_, rerr := one(b, 20, cq.Recv)
	err = firstErr(serr, rerr)
	if err == nil {
		err = traffic.SameBytes(recv, recv.IOVA, want)
	}
	d.line("RC", "RDMA_READ + SEND fence", fmt.Sprintf("%6d B  unsignalled READ, fenced SEND carries its data", n), err)
	return nil
}

func (d *demo) unsignalled(a, b *traffic.Endpoint) error {
	const n, k = 2048, 4
	src, want, err := traffic.Buffer(a.N, n*k, 6)
	if err != nil {
		return err
	}
	dst, _, err := traffic.Buffer(b.N, n*k, 0)
	if err != nil {
		return err
	}
	wrs := make([]rvt.SendWR, k)
	for i := range wrs {
		wrs[i] = rvt.SendWR{WRID: uint64(30 + i), Opcode: qp.OpRDMAWrite, SGL: traffic.SGE(src, uint64(i*n), n),
			RemoteAddr: dst.IOVA + uint64(i*n), Rkey: dst.Rkey}
	}
	wrs[k-1].Flags = qp.Signaled
	if err := a.PostSend(wrs...); err != nil {
		return err
	}
	_, err = one(a, 30+k-1, cq.RDMAWrite)
	if err == nil {
		if extra, _ := traffic.WaitFor(a.CQ, 1, 10*time.Millisecond); len(extra) != 0 {
			err = fmt.Errorf("unexpected completion for wr_id %d", extra[0].WRID)
		}
	}
	if err == nil {
		err = traffic.SameBytes(dst, dst.IOVA, want)
	}
	d.line("RC", "RDMA_WRITE unsignalled", fmt.Sprintf("%6d B  %d WRs, only the last signalled: 1 completion", n*k, k), err)
	return nil
}

// rcInvalidate shows REG_MR, LOCAL_INV, BIND_MW and SEND_WITH_INV: the
// receiver registers memory with work requests, the sender writes through
// the new rkey and then invalidates it with its SEND.
func (d *demo) rcInvalidate() error {
	a, err := traffic.NewEndpoint(d.p.N[0], qp.RC, traffic.QPOpts{})
	if err != nil {
		return err
	}
	b, err := traffic.NewEndpoint(d.p.N[1], qp.RC, traffic.QPOpts{})
	if err != nil {
		return err
	}
	if err := traffic.Connect(a, b, d.mtu); err != nil {
		return err
	}

	// A fast-register MR over four pages on rvt1.
	const page, pages = 4096, 4
	mem := make([]byte, page*pages)
	list := make([][]byte, pages)
	for i := range list {
		list[i] = mem[i*page : (i+1)*page]
	}
	frmr, err := b.N.PD.AllocMR(pages)
	if err != nil {
		return err
	}
	const iova = 0x7f0000000000
	if err := frmr.MapPages(list, page, iova, page*pages); err != nil {
		return err
	}
	access := keys.LocalWrite | keys.RemoteWrite | keys.RemoteRead
	reg := func(key uint8, wrid uint64) error {
		if err := b.PostSend(rvt.SendWR{WRID: wrid, Opcode: qp.OpRegMR, Flags: qp.Signaled,
			Reg: &qp.RegWR{MR: frmr, Key: key, Access: access}}); err != nil {
			return err
		}
		_, err := one(b, wrid, cq.RegMR)
		if err == nil && (!frmr.Valid() || frmr.Rkey&0xff != uint32(key)) {
			err = fmt.Errorf("MR valid=%v rkey %#x after REG_MR with key %#x", frmr.Valid(), frmr.Rkey, key)
		}
		return err
	}
	err = reg(0x5a, 40)
	d.line("RC", "REG_MR", fmt.Sprintf("%6d B  on %s: %d pages at %#x, rkey=%#x", page*pages, b.N.Dev.Name(), pages, uint64(iova), frmr.Rkey), err)
	if err != nil {
		return nil
	}
	rkey := frmr.Rkey

	// Write through the new rkey.
	src, want, err := traffic.Buffer(a.N, page*pages-100, 7)
	if err != nil {
		return err
	}
	err = a.PostSend(rvt.SendWR{WRID: 41, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: traffic.SGE(src, 0, len(want)),
		RemoteAddr: iova + 50, Rkey: rkey})
	if err == nil {
		_, err = one(a, 41, cq.RDMAWrite)
	}
	var dc dataCheck
	if err == nil {
		if err = dc.check(traffic.EqualBytes(mem[50:50+len(want)], want)); err != nil {
			err = fmt.Errorf("in the fast-register pages: %w", err)
		}
	}
	d.line("RC", "RDMA_WRITE (fast-reg)", fmt.Sprintf("%6d B  through rkey=%#x into the page list  %v", len(want), rkey, dc), err)

	// SEND_WITH_INV invalidates it at the receiver (sendInv reports its
	// own line).
	_ = d.sendInv(a, b, rkey, func() bool { return !frmr.Valid() }, "fast-reg MR")

	// Register it again and invalidate it locally.
	err = reg(0x5b, 42)
	if err == nil {
		err = b.PostSend(rvt.SendWR{WRID: 43, Opcode: qp.OpLocalInv, Flags: qp.Signaled, InvalidateRkey: frmr.Rkey})
	}
	if err == nil {
		_, err = one(b, 43, cq.LocalInv)
	}
	if err == nil && frmr.Valid() {
		err = fmt.Errorf("MR still valid after LOCAL_INV")
	}
	d.line("RC", "LOCAL_INV", fmt.Sprintf("%6s    on %s: REG_MR key 0x5b, then LOCAL_INV rkey=%#x", "", b.N.Dev.Name(), frmr.Rkey), err)

	// A type-2 memory window bound by a BIND_MW work request.
	mr, _, err := traffic.Buffer(b.N, 8192, 0)
	if err != nil {
		return err
	}
	mw, err := b.N.PD.AllocMW(keys.MWType2)
	if err != nil {
		return err
	}
	err = b.PostSend(rvt.SendWR{WRID: 44, Opcode: qp.OpBindMW, Flags: qp.Signaled, Bind: &qp.BindWR{
		MW: mw, MR: mr, Addr: mr.IOVA + 4096, Length: 4096, Access: keys.RemoteWrite | keys.RemoteRead, Key: 0x33}})
	if err == nil {
		_, err = one(b, 44, cq.BindMW)
	}
	d.line("RC", "BIND_MW", fmt.Sprintf("%6d B  on %s: type-2 window on the MR's 2nd page, rkey=%#x", 4096, b.N.Dev.Name(), mw.Rkey), err)
	if err != nil {
		return nil
	}
	src2, want2, err := traffic.Buffer(a.N, 4096, 8)
	if err != nil {
		return err
	}
	err = a.PostSend(rvt.SendWR{WRID: 45, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: traffic.SGE(src2, 0, 4096),
		RemoteAddr: mr.IOVA + 4096, Rkey: mw.Rkey})
	if err == nil {
		_, err = one(a, 45, cq.RDMAWrite)
	}
	dc = dataCheck{}
	if err == nil {
		err = dc.check(traffic.SameBytes(mr, mr.IOVA+4096, want2))
	}
	d.line("RC", "RDMA_WRITE (window)", fmt.Sprintf("%6d B  through the window's rkey=%#x  %v", 4096, mw.Rkey, dc), err)
	_ = d.sendInv(a, b, mw.Rkey, func() bool { _, _, _, _, bound := mw.Binding(); return !bound }, "type-2 MW")
	return nil
}

func (d *demo) sendInv(a, b *traffic.Endpoint, rkey uint32, gone func() bool, what string) error {
	x, err := d.message(a, b, rvt.SendWR{Opcode: qp.OpSendWithInv, InvalidateRkey: rkey}, 256, 9)
	rwc := x.recv
	if err == nil {
		switch {
		case rwc.Flags&cq.WithInv == 0 || rwc.InvalidatedRkey != rkey:
			err = fmt.Errorf("recv flags %v invalidated %#x, want WITH_INV %#x", rwc.Flags, rwc.InvalidatedRkey, rkey)
		case !gone():
			err = fmt.Errorf("the %s is still valid", what)
		}
	}
	d.line("RC", "SEND_WITH_INV", fmt.Sprintf("%6d B  recv flags=%v invalidated %s rkey=%#x", 256, rwc.Flags, what, rwc.InvalidatedRkey), err)
	return err
}

// waitUntil polls cond for up to a second.
func waitUntil(cond func() bool) bool {
	deadline := time.Now().Add(time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Microsecond)
	}
	return true
}

// uc shows the UC operations: SENDs and WRITEs, no READ or atomics.
func (d *demo) uc() error {
	a, err := traffic.NewEndpoint(d.p.N[0], qp.UC, traffic.QPOpts{})
	if err != nil {
		return err
	}
	b, err := traffic.NewEndpoint(d.p.N[1], qp.UC, traffic.QPOpts{})
	if err != nil {
		return err
	}
	if err := traffic.Connect(a, b, d.mtu); err != nil {
		return err
	}
	fmt.Fprintf(d.w, "QP %#x on %s <-> QP %#x on %s\n", a.Num(), a.N.Dev.Name(), b.Num(), b.N.Dev.Name())
	n := 2*d.mtu.Bytes() + 10
	x, err := d.message(a, b, rvt.SendWR{Opcode: qp.OpSend}, n, 11)
	d.line("UC", "SEND", x.detail(), err)
	x, err = d.message(a, b, rvt.SendWR{Opcode: qp.OpSendWithImm, ImmData: 0xABCD}, 500, 12)
	rwc := x.recv
	if err == nil && rwc.ImmData != 0xABCD {
		err = fmt.Errorf("imm %#x, want 0xabcd", rwc.ImmData)
	}
	d.line("UC", "SEND_WITH_IMM", fmt.Sprintf("%6d B  imm=%#x  %v", 500, rwc.ImmData, x.data), err)

	// A WRITE, then a WRITE_WITH_IMM behind it: once the immediate
	// arrives, both have landed (UC keeps order on the path).
	n = 3*d.mtu.Bytes() + 1
	src, want, err := traffic.Buffer(a.N, 2*n, 13)
	if err != nil {
		return err
	}
	dst, _, err := traffic.Buffer(b.N, 2*n, 0)
	if err != nil {
		return err
	}
	err = b.PostRecv(rvt.RecvWR{WRID: 50})
	if err == nil {
		err = a.PostSend(
			rvt.SendWR{WRID: 51, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: traffic.SGE(src, 0, n), RemoteAddr: dst.IOVA, Rkey: dst.Rkey},
			rvt.SendWR{WRID: 52, Opcode: qp.OpRDMAWriteWithImm, ImmData: 77, Flags: qp.Signaled, SGL: traffic.SGE(src, uint64(n), n),
				RemoteAddr: dst.IOVA + uint64(n), Rkey: dst.Rkey})
	}
	var werr error
	if err == nil {
		_, werr = one(a, 51, cq.RDMAWrite)
		_, serr := one(a, 52, cq.RDMAWrite)
		var rerr error
		rwc, rerr = one(b, 50, cq.RecvRDMAWithImm)
		err = firstErr(serr, rerr)
		if err == nil && rwc.ImmData != 77 {
			err = fmt.Errorf("imm %d, want 77", rwc.ImmData)
		}
	}
	var wdc, idc dataCheck
	if werr == nil && err == nil {
		werr = wdc.check(traffic.SameBytes(dst, dst.IOVA, want[:n]))
	}
	if err == nil {
		err = idc.check(traffic.SameBytes(dst, dst.IOVA+uint64(n), want[n:]))
	}
	d.line("UC", "RDMA_WRITE", fmt.Sprintf("%6d B  rkey=%#x  %v", n, dst.Rkey, wdc), firstErr(werr, err))
	d.line("UC", "RDMA_WRITE_WITH_IMM", fmt.Sprintf("%6d B  imm=%d recv=%v  %v", n, rwc.ImmData, rwc.Opcode, idc), err)
	return nil
}

// ud shows UD SENDs with the GRH in front of the payload, one to the
// peer's IPv6 GID and one to its IPv4-mapped GID.
func (d *demo) ud() error {
	a, err := traffic.NewEndpoint(d.p.N[0], qp.UD, traffic.QPOpts{})
	if err != nil {
		return err
	}
	b, err := traffic.NewEndpoint(d.p.N[1], qp.UD, traffic.QPOpts{})
	if err != nil {
		return err
	}
	if err := traffic.Connect(a, b, d.mtu); err != nil {
		return err
	}
	fmt.Fprintf(d.w, "QP %#x on %s -> QP %#x on %s, Q_Key %#x\n", a.Num(), a.N.Dev.Name(), b.Num(), b.N.Dev.Name(), traffic.QKey)
	for i, c := range []struct {
		op  qp.Opcode
		gid int
		n   int
	}{{qp.OpSend, 0, d.mtu.Bytes()}, {qp.OpSendWithImm, 1, 300}} {
		dgid, err := b.N.Dev.QueryGID(1, c.gid)
		if err != nil {
			return err
		}
		ah, err := a.N.PD.CreateAH(rvt.AddressVector{DGID: dgid, SGIDIndex: uint8(c.gid), HopLimit: 64, Port: 1})
		if err != nil {
			return err
		}
		wr := rvt.SendWR{Opcode: c.op, AH: ah, RemoteQPN: b.Num(), RemoteQKey: traffic.QKey}
		if c.op.HasImm() {
			wr.ImmData = 0x5EED
		}
		rwc, grhSrc, dc, err := d.datagram(a, []*traffic.Endpoint{b}, wr, c.n, byte(20+i))
		detail := fmt.Sprintf("%6d B  to %v: recv len=%d flags=%v, GRH src %v  %v",
			c.n, netip.AddrFrom16(dgid).Unmap(), rwc.ByteLen, rwc.Flags, grhSrc, dc)
		d.line("UD", c.op.String(), detail, err)
		if err := d.p.N[0].Dev.DestroyAH(ah); err != nil {
			return err
		}
	}
	return nil
}

// datagram sends one UD message of n bytes from a and checks that every
// receiver got it whole, behind a GRH naming a's GID. It returns the last
// receive completion, the GRH's source address and the data check (which
// ran only if it ran for every receiver).
func (d *demo) datagram(a *traffic.Endpoint, to []*traffic.Endpoint, wr rvt.SendWR, n int, seed byte) (rvt.WC, netip.Addr, dataCheck, error) {
	var dc dataCheck
	src, want, err := traffic.Buffer(a.N, n, seed)
	if err != nil {
		return rvt.WC{}, netip.Addr{}, dc, err
	}
	bufs := make([]*rvt.MR, len(to))
	for i, b := range to {
		if bufs[i], _, err = traffic.Buffer(b.N, 40+n, 0); err != nil {
			return rvt.WC{}, netip.Addr{}, dc, err
		}
		if err := b.PostRecv(rvt.RecvWR{WRID: 60, SGL: traffic.SGE(bufs[i], 0, 40+n)}); err != nil {
			return rvt.WC{}, netip.Addr{}, dc, err
		}
	}
	wr.WRID, wr.Flags, wr.SGL = 61, qp.Signaled, traffic.SGE(src, 0, n)
	if err := a.PostSend(wr); err != nil {
		return rvt.WC{}, netip.Addr{}, dc, err
	}
	ran := 0
	_, err = one(a, 61, cq.Send)
	var rwc rvt.WC
	var from netip.Addr
	for i, b := range to {
		var rerr error
		rwc, rerr = one(b, 60, cq.Recv)
		if rerr == nil {
			switch {
			case rwc.Flags&cq.GRH == 0:
				rerr = fmt.Errorf("no GRH flag")
			case rwc.ByteLen != uint32(40+n):
				rerr = fmt.Errorf("received %d bytes, want 40+%d", rwc.ByteLen, n)
			case rwc.SrcQP != a.Num():
				rerr = fmt.Errorf("source QP %#x, want %#x", rwc.SrcQP, a.Num())
			case wr.Opcode.HasImm() && (rwc.Flags&cq.WithImm == 0 || rwc.ImmData != wr.ImmData):
				rerr = fmt.Errorf("imm %#x flags %v, want %#x", rwc.ImmData, rwc.Flags, wr.ImmData)
			}
		}
		if rerr == nil {
			ran++
			if rerr = traffic.SameBytes(bufs[i], bufs[i].IOVA+40, want); rerr != nil && dc.err == nil {
				dc.err = rerr
			}
		}
		if rerr == nil {
			grh := make([]byte, 40)
			bufs[i].ReadAt(grh, bufs[i].IOVA)
			from = grhSource(grh)
			if !slicesContain(a.N.Addrs, from) {
				rerr = fmt.Errorf("GRH source %v is not the sender's", from)
			}
		}
		if rerr != nil {
			err = firstErr(err, fmt.Errorf("%s QP %#x: %w", b.N.Dev.Name(), b.Num(), rerr))
		}
	}
	// A mismatch anywhere is "data differs"; "data ok" needs every
	// receiver's comparison.
	dc.ran = ran == len(to) || dc.err != nil
	return rwc, from, dc, err
}

// grhSource returns the source address in the 40-byte GRH area of a UD
// receive: an IPv6 header, or an IPv4 header in its last 20 bytes.
func grhSource(grh []byte) netip.Addr {
	if grh[20]>>4 == 4 {
		return netdev.IPv4(grh[20:]).Src()
	}
	return netdev.IPv6(grh).Src()
}

func slicesContain(s []netip.Addr, a netip.Addr) bool {
	for _, x := range s {
		if x == a {
			return true
		}
	}
	return false
}

// multicast attaches one UD QP on each device to a group and sends to it.
func (d *demo) multicast() error {
	src, err := traffic.NewEndpoint(d.p.N[0], qp.UD, traffic.QPOpts{})
	if err != nil {
		return err
	}
	var members []*traffic.Endpoint
	for _, n := range d.p.N {
		m, err := traffic.NewEndpoint(n, qp.UD, traffic.QPOpts{})
		if err != nil {
			return err
		}
		members = append(members, m)
	}
	for _, e := range append([]*traffic.Endpoint{src}, members...) {
		if err := traffic.BringUp(e, nil, d.mtu); err != nil {
			return err
		}
	}
	for i, g := range []struct {
		ip   string
		sgid uint8
	}{{"239.1.2.3", 1}, {"ff0e::db8:1", 0}} {
		ip := netip.MustParseAddr(g.ip)
		mgid := netdev.GIDFromIP(ip)
		for _, m := range members {
			if err := m.N.Dev.AttachMcast(m.QP, mgid, 0xC000); err != nil {
				return err
			}
		}
		ah, err := src.N.PD.CreateAH(rvt.AddressVector{DGID: mgid, SGIDIndex: g.sgid, HopLimit: 64, Port: 1})
		if err != nil {
			return err
		}
		wr := rvt.SendWR{Opcode: qp.OpSendWithImm, ImmData: uint32(i + 1), AH: ah, RemoteQPN: 0xFFFFFF, RemoteQKey: traffic.QKey}
		_, from, _, err := d.datagram(src, members, wr, 1024, byte(30+i))
		detail := fmt.Sprintf("%6d B  to %v (MGID %v): QP %#x on %s and QP %#x on %s, GRH src %v",
			1024, ip, mgid, members[0].Num(), members[0].N.Dev.Name(), members[1].Num(), members[1].N.Dev.Name(), from)
		d.line("UD", "SEND_WITH_IMM mcast", detail, err)
		for _, m := range members {
			if err := m.N.Dev.DetachMcast(m.QP, mgid, 0xC000); err != nil {
				return err
			}
		}
		if err := src.N.Dev.DestroyAH(ah); err != nil {
			return err
		}
	}
	return nil
}

// counters prints both devices' counters, like `rdma statistic`.
func (d *demo) counters() {
	fmt.Fprintf(d.w, "\n== counters\n")
	for _, n := range d.p.N {
		PrintCounters(d.w, "link "+n.Dev.Name()+"/1", n.Dev.Counters())
	}
	for i, fl := range d.p.Faults {
		s := fl.Stats()
		fmt.Fprintf(d.w, "faults %s: %d RC frames, %d lost\n", d.p.N[i].Dev.Name(), s.Frames, s.Lost)
	}
}

// PrintCounters prints one line of name value pairs, sorted by name.
func PrintCounters(w io.Writer, prefix string, m map[string]uint64) {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprint(w, prefix)
	for _, k := range names {
		fmt.Fprintf(w, " %s %d", k, m[k])
	}
	fmt.Fprintln(w)
}
