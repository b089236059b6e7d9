package perftest

// The measuring loops: run_iter_bw, run_iter_bw_server, run_iter_bi,
// run_iter_lat_send, run_iter_lat_write and run_iter_lat as perftest
// runs them (what is posted when, what is signalled, what is time-stamped),
// and the tools' sequences of handshakes around them, which a perftest peer
// expects exactly.

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// errStop ends a timed (-D) run's waits when its time is up.
var errStop = errors.New("duration over")

// errTimeout is returned when Config.Timeout runs out.
var errTimeout = errors.New("timed out waiting for the peer")

// cqWaiter turns a CQ's completion handler into something to wait on.
type cqWaiter struct{ ch chan struct{} }

func newCQWaiter() *cqWaiter { return &cqWaiter{ch: make(chan struct{}, 1)} }

// notify is the CQ's completion handler; it never blocks.
func (w *cqWaiter) notify(*rvt.CQ) {
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// idleWait is one pause of a poll loop that found nothing: a yield for the
// first rounds, then a 20 us sleep on the device's clock, so that a poller
// never starves the device's workers on a small machine. With a waiter
// (-e), it arms c and sleeps until the completion handler runs.
func (s *side) idleWait(idle int, c *rvt.CQ, w *cqWaiter, stopAt time.Time) error {
	now := s.clk.Now()
	if !s.deadline.IsZero() && now.After(s.deadline) {
		return errTimeout
	}
	if !stopAt.IsZero() && !now.Before(stopAt) {
		return errStop
	}
	if w != nil && c != nil {
		queued, err := c.ArmAndCheck(false)
		if err != nil || queued {
			return err
		}
		d := 100 * time.Millisecond // wake up to check the deadlines
		t := s.clk.AfterFunc(d, func() { w.notify(nil) })
		<-w.ch
		t.Stop()
		return nil
	}
	if idle < 64 {
		runtime.Gosched()
		return nil
	}
	ch := make(chan struct{})
	s.clk.AfterFunc(20*time.Microsecond, func() { close(ch) })
	<-ch
	return nil
}

// waitCQ polls c until it returns at least one completion into wc.
func (s *side) waitCQ(c *rvt.CQ, w *cqWaiter, wc []rvt.WC, stopAt time.Time) (int, error) {
	for idle := 0; ; idle++ {
		if n := c.Poll(wc); n > 0 {
			return n, nil
		}
		if err := s.idleWait(idle, c, w, stopAt); err != nil {
			return 0, err
		}
	}
}

// wcError is perftest's report of a failed completion.
func wcError(where string, c rvt.WC, scnt, ccnt uint64) error {
	return fmt.Errorf(" Completion with error at %s:\n Failed status %d: wr_id %d syndrom 0x%x\n scnt=%d, ccnt=%d (%v)",
		where, c.Status, c.WRID, c.VendorErr, scnt, ccnt, c.Status)
}

func (s *side) where() string {
	if s.client {
		return "client"
	}
	return "server"
}

// window is a timed run's (-D) measured window, as perftest's catch_alarm
// keeps it: the run's first margin warms up, what completes between the
// margins is counted, over the time between them, and the run goes on
// through the last margin. The margin is -f seconds, or a quarter of -D
// in whole seconds (none below -D 4: then the whole run counts).
type window struct {
	from, to, stop time.Time
	open, shut     bool
	c0, c1         uint64 // the run's count when the window opened, shut
	t0, t1         Cycles
}

// newWindow starts a timed run's window now; nil for an iteration run.
func (s *side) newWindow() *window {
	if s.p.Duration == 0 {
		return nil
	}
	now := s.clk.Now()
	m, d := time.Duration(s.p.Margin)*time.Second, time.Duration(s.p.Duration)*time.Second
	return &window{from: now.Add(m), to: now.Add(d - m), stop: now.Add(d)}
}

// stopAt is when the run ends: the zero Time for an iteration run.
func (w *window) stopAt() time.Time {
	if w == nil {
		return time.Time{}
	}
	return w.stop
}

// tick notes the run's count (what perftest counts in its sample state)
// at this moment, opening and shutting the window as their times pass,
// and reports whether the run is over.
func (w *window) tick(s *side, count uint64) bool {
	now := s.clk.Now()
	if !w.open && !now.Before(w.from) {
		w.open, w.c0, w.t0 = true, count, s.now()
	}
	if w.open && !w.shut && !now.Before(w.to) {
		w.shut, w.c1, w.t1 = true, count, s.now()
	}
	return !now.Before(w.stop)
}

// result returns what the window counted and when it opened and shut; a
// run that ended before shutting it (its peer gone) shuts it at count.
func (w *window) result(s *side, count uint64) (n uint64, t0, t1 Cycles) {
	w.tick(s, count)
	if !w.open {
		w.open, w.c0, w.t0 = true, count, s.now()
	}
	if !w.shut {
		w.shut, w.c1, w.t1 = true, count, s.now()
	}
	return w.c1 - w.c0, w.t0, w.t1
}

// sge returns the one-entry SGL of n bytes at offset off of the buffer.
func (s *side) sge(off, n int) []rvt.SGE {
	return []rvt.SGE{{Addr: s.mr.IOVA + uint64(off), Length: uint32(n), Lkey: s.mr.Lkey}}
}

// sendWR is QP q's work request of the test's verb and size: from QP q's
// half of the buffer, to the peer's buffer of QP q.
func (s *side) sendWR(q, size int) rvt.SendWR {
	rem := s.rem[q]
	wr := rvt.SendWR{SGL: s.sge(q*s.bufSize, size), RemoteAddr: rem.VAddr, Rkey: rem.RKey}
	switch s.p.Test.Verb() {
	case Write:
		wr.Opcode = qp.OpRDMAWrite
	case Read:
		wr.Opcode = qp.OpRDMARead
	case Atomic:
		wr.SGL = s.sge(q*s.bufSize, defSizeAtomic)
		if s.p.Atomic == CmpAndSwap {
			wr.Opcode, wr.CompareAdd, wr.Swap = qp.OpAtomicCmpSwp, 0, 1
		} else {
			wr.Opcode, wr.CompareAdd = qp.OpAtomicFetchAdd, 1
		}
	default:
		wr.Opcode = qp.OpSend
		if s.ahs != nil {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ahs[q], rem.QPN, defQKey
		}
	}
	return wr
}

// recvLen is a receive's length for size-byte messages (UD: with the GRH).
func (s *side) recvLen(size int) int {
	if s.p.Conn == "UD" {
		return size + udAddition
	}
	return size
}

// postRecvs is ctx_set_recv_wqes: rx_depth receives on every QP, into
// the QP's half of the buffer that the peer targets; the WR ID is the QP's
// index.
func (s *side) postRecvs(size int) error {
	for q, x := range s.qps {
		wr := rvt.RecvWR{WRID: uint64(q), SGL: s.sge((len(s.qps)+q)*s.bufSize, s.recvLen(size))}
		for range s.p.RxDepth {
			if err := x.PostRecv(wr); err != nil {
				return fmt.Errorf("Couldn't post recv Qp = %d: %w", q, err)
			}
		}
	}
	return nil
}

// wrIDBits splits a send WR ID into the QP index and the WR's count.
const wrIDBits = 40

// bwLoop is run_iter_bw (and, with recv, run_iter_bi): keep up to
// tx_depth WRs outstanding on every QP, posting post_list at a time and
// signalling one in cq_mod, until iters WRs a QP have completed (or the
// time is up), stamping each post and each moderated completion. With
// recv it also consumes the peer's SENDs, reposting receives.
func (s *side) bwLoop(size int, recv bool) (BWReport, error) {
	p := s.p
	nq := len(s.qps)
	n := uint64(p.Iters)
	tot := n * uint64(nq)
	win := s.newWindow()
	timed := win != nil
	// Without a peak (-N, or past 20,000 iterations, as perftest) only
	// the first post and the end of the run are stamped, each in entry 0
	// (perftest's tarr_size of 1): Bandwidth reads nothing else then.
	noPeak := p.NoPeak || p.Iters > 20000
	var tposted, tcompleted []Cycles
	if !timed {
		stamps := tot
		if noPeak {
			stamps = 1
		}
		tposted, tcompleted = make([]Cycles, stamps), make([]Cycles, stamps)
	}
	wrs := make([]rvt.SendWR, nq)
	for q := range wrs {
		wrs[q] = s.sendWR(q, size)
	}
	scnt, ccnt, rcnt := make([]uint64, nq), make([]uint64, nq), make([]uint64, nq)
	var totS, totC, totR uint64
	list := make([]rvt.SendWR, p.PostList)
	wc := make([]rvt.WC, 16)
	mod, pl, depth := uint64(p.CQMod), uint64(p.PostList), uint64(p.TxDepth)
	stopping := false
	for idle := 0; ; {
		if timed {
			stopping = win.tick(s, totC) || stopping
			if stopping && (!recv || totC >= totS) {
				break
			}
		} else if totS >= tot && totC >= tot && (!recv || totR >= tot) {
			break
		}
		progress := false
		for q := range nq {
			for !stopping && (timed || scnt[q] < n) && scnt[q]-ccnt[q]+pl <= depth {
				for k := range list {
					idx := scnt[q] + uint64(k)
					wr := wrs[q]
					if (idx+1)%mod == 0 || (!timed && idx == n-1) {
						wr.Flags = qp.Signaled
						wr.WRID = uint64(q)<<wrIDBits | (idx + 1)
					}
					list[k] = wr
				}
				if totS < uint64(len(tposted)) {
					tposted[totS] = s.now()
				}
				if err := s.qps[q].PostSend(list...); err != nil {
					return BWReport{}, fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", q, scnt[q], err)
				}
				scnt[q] += pl
				totS += pl
				progress = true
			}
		}
		if k := s.sendCQ.Poll(wc); k > 0 {
			progress = true
			for _, c := range wc[:k] {
				if c.Status != cq.Success {
					return BWReport{}, wcError(s.where(), c, totS, totC)
				}
				q, idx := int(c.WRID>>wrIDBits), c.WRID&(1<<wrIDBits-1)
				if q >= nq || idx < ccnt[q] {
					return BWReport{}, fmt.Errorf("completion for unknown wr_id %#x", c.WRID)
				}
				totC += idx - ccnt[q]
				ccnt[q] = idx
				if !noPeak && !timed && totC > 0 {
					tcompleted[totC-1] = s.now()
				}
			}
		}
		if recv {
			k := s.recvCQ.Poll(wc)
			for _, c := range wc[:k] {
				progress = true
				if c.Status != cq.Success {
					return BWReport{}, wcError(s.where(), c, totS, totC)
				}
				q := int(c.WRID)
				rcnt[q]++
				totR++
				if timed || rcnt[q]+uint64(p.RxDepth) <= n {
					if err := s.qps[q].PostRecv(rvt.RecvWR{WRID: uint64(q), SGL: s.sge((nq+q)*s.bufSize, s.recvLen(size))}); err != nil {
						return BWReport{}, fmt.Errorf("Couldn't post recv: rcnt=%d: %w", rcnt[q], err)
					}
				}
			}
		}
		if progress {
			idle = 0
			continue
		}
		var c *rvt.CQ
		var w *cqWaiter
		if totC < totS {
			c, w = s.sendCQ, s.sendWait
		} else if recv {
			c, w = s.recvCQ, s.recvWait
		}
		if err := s.idleWait(idle, c, w, time.Time{}); err != nil {
			return BWReport{}, err
		}
		idle++
	}
	if noPeak && !timed {
		tcompleted[0] = s.now()
	}
	run := BWRun{TPosted: tposted, TCompleted: tcompleted, Size: uint64(size), Iters: n, QPs: nq,
		CQMod: p.CQMod, PostList: p.PostList, NoPeak: noPeak, Gbits: p.Gbits, CyclesPerSec: CyclesPerSec}
	if timed {
		k, t0, t1 := win.result(s, totC)
		run = BWRun{TPosted: []Cycles{t0}, TCompleted: []Cycles{t1}, Size: uint64(size), Iters: k, Timed: true,
			QPs: nq, NoPeak: true, Gbits: p.Gbits, CyclesPerSec: CyclesPerSec}
	}
	return Bandwidth(run), nil
}

// bwServer is run_iter_bw_server: consume iters SENDs a QP (or until the
// time is up), reposting receives while more are to come; the time runs
// from the first arrival to the last, and there is no peak.
func (s *side) bwServer(size int) (BWReport, error) {
	p := s.p
	nq := len(s.qps)
	n := uint64(p.Iters)
	timed := p.Duration > 0
	var win *window // a timed run's, from the first arrival (set_on_first_rx_packet)
	rcnt := make([]uint64, nq)
	var tot uint64
	wc := make([]rvt.WC, 16)
	var start Cycles
	for timed || tot < n*uint64(nq) {
		if win != nil && win.tick(s, tot) {
			break
		}
		k, err := s.waitCQ(s.recvCQ, s.recvWait, wc, win.stopAt())
		if errors.Is(err, errStop) {
			break
		}
		if err != nil {
			return BWReport{}, fmt.Errorf("%w: received %d of %d", err, tot, n*uint64(nq))
		}
		if tot == 0 {
			start = s.now()
			if timed {
				win = s.newWindow()
				win.tick(s, 0) // with no margin, this arrival counts
			}
		}
		for _, c := range wc[:k] {
			if c.Status != cq.Success {
				return BWReport{}, wcError(s.where(), c, 0, tot)
			}
			q := int(c.WRID)
			rcnt[q]++
			tot++
			if timed || rcnt[q]+uint64(p.RxDepth) <= n {
				if err := s.qps[q].PostRecv(rvt.RecvWR{WRID: uint64(q), SGL: s.sge((nq+q)*s.bufSize, s.recvLen(size))}); err != nil {
					return BWReport{}, fmt.Errorf("Couldn't post recv: rcnt=%d: %w", rcnt[q], err)
				}
			}
		}
	}
	iters, end := n, s.now()
	if win != nil {
		iters, start, end = win.result(s, tot)
	}
	return Bandwidth(BWRun{TPosted: []Cycles{start}, TCompleted: []Cycles{end}, Size: uint64(size), Iters: iters,
		QPs: nq, Timed: timed, NoPeak: true, Gbits: s.p.Gbits, CyclesPerSec: CyclesPerSec}), nil
}

// connectAll exchanges the QPs' addresses, connects them and prints ours, with
// the barrier handshakes where the tool has them (perftest's tools differ):
// one before the first exchange (lead), one between connecting and
// printing our address (mid), one after the second exchange (tail).
func (s *side) connectAll(lead, mid, tail bool) error {
	if lead {
		if err := s.hs(); err != nil {
			return err
		}
	}
	if err := s.hsEach(false); err != nil {
		return err
	}
	if err := s.connect(); err != nil {
		return fmt.Errorf(" Unable to Connect the HCA's through the link: %w", err)
	}
	if mid {
		if err := s.hs(); err != nil {
			return err
		}
	}
	s.printMy()
	if err := s.hsEach(true); err != nil {
		return err
	}
	if tail {
		return s.hs()
	}
	return nil
}

// runRDMABW is ib_write_bw, ib_read_bw and ib_atomic_bw after the header.
func (s *side) runRDMABW() error {
	p := s.p
	if err := s.connectAll(false, false, true); err != nil {
		return err
	}
	if s.full() {
		WriteBWTitle(s.out, p.Gbits)
	}
	if !s.client && !p.Duplex {
		// The server waits for the client's run and prints its report.
		if err := s.hs(); err != nil {
			return err
		}
		rem, err := s.conn.Reports(BWReport{})
		if err != nil {
			return err
		}
		s.bwRow(rem)
		if err := s.finish(); err != nil {
			return err
		}
		s.resultLine()
		return nil
	}
	var rep BWReport
	for _, size := range s.sizes() {
		if p.Duplex {
			if err := s.hs(); err != nil {
				return err
			}
		}
		var err error
		if rep, err = s.bwLoop(size, false); err != nil {
			return fmt.Errorf(" Failed to complete run_iter_bw function successfully: %w", err)
		}
		if !p.Duplex {
			s.bwRow(rep)
			continue
		}
		if p.All {
			if err := s.hs(); err != nil {
				return err
			}
		}
		rem, err := s.conn.Reports(rep)
		if err != nil {
			return err
		}
		s.bwRow(rep.Sum(rem))
	}
	s.resultLine()
	if s.client && !p.Duplex {
		if err := s.hs(); err != nil {
			return err
		}
		if _, err := s.conn.Reports(rep); err != nil {
			return err
		}
	}
	return s.finish()
}

// runSendBW is ib_send_bw after the header.
func (s *side) runSendBW() error {
	p := s.p
	if err := s.connectAll(false, true, false); err != nil {
		return err
	}
	if s.full() {
		WriteBWTitle(s.out, p.Gbits)
	}
	for _, size := range s.sizes() {
		if !s.client || p.Duplex {
			if err := s.postRecvs(size); err != nil {
				return err
			}
		}
		// The client must not send before the server's receives are up.
		if err := s.hs(); err != nil {
			return err
		}
		var rep BWReport
		var err error
		switch {
		case p.Duplex:
			rep, err = s.bwLoop(size, true)
		case s.client:
			rep, err = s.bwLoop(size, false)
		default:
			rep, err = s.bwServer(size)
		}
		if err != nil {
			return fmt.Errorf(" Failed to complete run_iter_bw function successfully: %w", err)
		}
		if p.Duplex {
			rem, err := s.conn.Reports(rep)
			if err != nil {
				return err
			}
			rep = rep.Sum(rem)
		}
		s.bwRow(rep)
		if p.All {
			if err := s.hs(); err != nil {
				return err
			}
		}
	}
	s.resultLine()
	return s.finish()
}

// writeLatRow prints a latency result of a run.
func (s *side) writeLatRow(size int, tposted []Cycles, timed *LatDurResult) error {
	if timed != nil {
		WriteLatDurRow(s.out, uint64(size), *timed, s.p.Output)
		return nil
	}
	r, err := Latency(tposted, CyclesPerUsec, s.p.rtt)
	if err != nil {
		return err
	}
	WriteLatRow(s.out, uint64(size), uint64(len(tposted)), r, s.p.Output)
	if s.env.Results != nil {
		s.env.Results.Lat = append(s.env.Results.Lat, LatRow{Size: size, Iters: len(tposted), LatResult: r})
	}
	return nil
}

// bwRow prints a bandwidth row and records it.
func (s *side) bwRow(r BWReport) {
	WriteBWRow(s.out, r, s.p.Output, s.p.Gbits)
	if s.env.Results != nil {
		s.env.Results.BW = append(s.env.Results.BW, r)
	}
}

// latDone turns a timed run's count into its row (nil for an iteration
// run; none counted if its window never opened).
func (s *side) latDone(win *window, count uint64) *LatDurResult {
	if s.p.Duration == 0 {
		return nil
	}
	var r LatDurResult
	if win != nil {
		n, t0, t1 := win.result(s, count)
		r = LatencyTimed(t0, t1, n, CyclesPerUsec, s.p.rtt)
	}
	return &r
}

// runSendLat is ib_send_lat after the header.
func (s *side) runSendLat() error {
	p := s.p
	if err := s.connectAll(false, true, false); err != nil {
		return err
	}
	if s.full() {
		WriteLatTitle(s.out, p.Duration > 0)
	}
	for _, size := range s.sizes() {
		if err := s.postRecvs(size); err != nil {
			return err
		}
		if err := s.hs(); err != nil {
			return err
		}
		if err := s.latSend(size); err != nil {
			return err
		}
	}
	s.resultLine()
	return s.finish()
}

// latSend is run_iter_lat_send: the client sends first; each side waits
// for the peer's message before sending its next, so every post time is
// one round trip after the previous one.
func (s *side) latSend(size int) error {
	p := s.p
	n := uint64(p.Iters)
	timed := p.Duration > 0
	var win *window // a timed run's, from the first arrival (set_on_first_rx_packet)
	var tposted []Cycles
	if !timed {
		tposted = make([]Cycles, n)
	}
	wr := s.sendWR(0, size)
	recv := rvt.RecvWR{WRID: 0, SGL: s.sge(len(s.qps)*s.bufSize, s.recvLen(size))}
	wc := make([]rvt.WC, 1)
	var scnt, rcnt uint64
	for timed || scnt < n || rcnt < n {
		if (timed || rcnt < n) && !(scnt < 1 && s.client) {
			_, err := s.waitCQ(s.recvCQ, s.recvWait, wc, win.stopAt())
			if errors.Is(err, errStop) {
				break
			}
			if err != nil {
				return fmt.Errorf("%w: sent %d, received %d", err, scnt, rcnt)
			}
			if wc[0].Status != cq.Success {
				return wcError(s.where(), wc[0], scnt, rcnt)
			}
			if timed && win == nil {
				win = s.newWindow()
				win.tick(s, rcnt) // with no margin, this arrival counts
			}
			rcnt++
			if timed || rcnt+uint64(p.RxDepth) <= n {
				if err := s.qps[0].PostRecv(recv); err != nil {
					return fmt.Errorf("Couldn't post recv: rcnt=%d: %w", rcnt, err)
				}
			}
		}
		if win != nil && win.tick(s, rcnt) {
			break
		}
		if timed || scnt < n {
			if !timed {
				tposted[scnt] = s.now()
			}
			scnt++
			w := wr
			if scnt%uint64(p.CQMod) == 0 || (!timed && scnt == n) {
				w.Flags = qp.Signaled
			}
			if err := s.qps[0].PostSend(w); err != nil {
				return fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
			if w.Flags&qp.Signaled != 0 {
				if _, err := s.waitCQ(s.sendCQ, s.sendWait, wc, time.Time{}); err != nil {
					return err
				}
				if wc[0].Status != cq.Success {
					return wcError(s.where(), wc[0], scnt, rcnt)
				}
			}
		}
	}
	return s.writeLatRow(size, tposted, s.latDone(win, rcnt))
}

// runWriteLat is ib_write_lat after the header (it has no closing
// exchange).
func (s *side) runWriteLat() error {
	p := s.p
	if err := s.connectAll(true, false, true); err != nil {
		return err
	}
	if s.full() {
		WriteLatTitle(s.out, p.Duration > 0)
	}
	for _, size := range s.sizes() {
		if err := s.latWrite(size); err != nil {
			return fmt.Errorf("Test exited with Error: %w", err)
		}
	}
	s.resultLine()
	return nil
}

// latWrite is run_iter_lat_write: the server writes first; each side
// waits until the last byte of the peer's WRITE in its buffer holds the
// count it expects, then writes its own count to the peer.
func (s *side) latWrite(size int) error {
	p := s.p
	n := uint64(p.Iters)
	win := s.newWindow()
	timed, stopAt := win != nil, win.stopAt()
	var tposted []Cycles
	if !timed {
		tposted = make([]Cycles, n)
	}
	wr := s.sendWR(0, size)
	wr.Flags = qp.Signaled
	postOff := size - 1
	pollOff := len(s.qps)*s.bufSize + size - 1
	wc := make([]rvt.WC, 1)
	var scnt, ccnt, rcnt uint64
loop:
	for timed || scnt < n || ccnt < n || rcnt < n {
		if (timed || rcnt < n) && !(scnt < 1 && !s.client) {
			rcnt++
			for idle := 0; loadByte(s.buf, pollOff) != byte(rcnt); idle++ {
				err := s.idleWait(idle, nil, nil, stopAt)
				if errors.Is(err, errStop) {
					break loop
				}
				if err != nil {
					return fmt.Errorf("%w: sent %d, received %d", err, scnt, rcnt-1)
				}
			}
		}
		if timed && win.tick(s, ccnt) {
			break
		}
		if timed || scnt < n {
			if !timed {
				tposted[scnt] = s.now()
			}
			scnt++
			s.buf[postOff] = byte(scnt)
			if err := s.qps[0].PostSend(wr); err != nil {
				return fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		if timed || ccnt < n {
			if _, err := s.waitCQ(s.sendCQ, s.sendWait, wc, time.Time{}); err != nil {
				return err
			}
			if wc[0].Status != cq.Success {
				return wcError(s.where(), wc[0], scnt, ccnt)
			}
			ccnt++
		}
	}
	return s.writeLatRow(size, tposted, s.latDone(win, ccnt))
}

// runReadLat is ib_read_lat after the header: only the client measures;
// the server waits in the closing exchange.
func (s *side) runReadLat() error {
	p := s.p
	if err := s.connectAll(true, false, true); err != nil {
		return err
	}
	if !s.client {
		if err := s.finish(); err != nil {
			return err
		}
		s.resultLine()
		return nil
	}
	if s.full() {
		WriteLatTitle(s.out, p.Duration > 0)
	}
	for _, size := range s.sizes() {
		if err := s.latRead(size); err != nil {
			return err
		}
	}
	if err := s.finish(); err != nil {
		return err
	}
	s.resultLine()
	return nil
}

// latRead is run_iter_lat for READ: one signalled READ at a time.
func (s *side) latRead(size int) error {
	n := uint64(s.p.Iters)
	win := s.newWindow()
	timed := win != nil
	var tposted []Cycles
	if !timed {
		tposted = make([]Cycles, n)
	}
	wr := s.sendWR(0, size)
	wr.Flags = qp.Signaled
	wc := make([]rvt.WC, 1)
	var scnt uint64
	for ; timed || scnt < n; scnt++ {
		if timed && win.tick(s, scnt) {
			break
		}
		if !timed {
			tposted[scnt] = s.now()
		}
		if err := s.qps[0].PostSend(wr); err != nil {
			return fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
		}
		if _, err := s.waitCQ(s.sendCQ, s.sendWait, wc, time.Time{}); err != nil {
			return err
		}
		if wc[0].Status != cq.Success {
			return wcError(s.where(), wc[0], scnt, scnt)
		}
	}
	return s.writeLatRow(size, tposted, s.latDone(win, scnt))
}
