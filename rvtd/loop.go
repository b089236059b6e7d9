package rvtd

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/qp"
)

// The loop's schedule. Kicks from the engine (a CQ to drain, a QP to look
// at) ring the loop's eventfd only when it sleeps. With Options.Spin
// (DefaultSpin), a loop that has just done work keeps polling the rings of
// the QPs it served (its active set) and its queued CQs for that long
// before it sleeps, with NEED_WAKEUP clear on those rings: a busy client
// then posts with no system call, and the loop does not sleep and wake
// for every message. Going to sleep, it sets NEED_WAKEUP on every ring of
// its active set and looks once more (store-then-load,
// docs/rvtd-protocol.md section 7), so nothing posted meanwhile is
// missed; the set then empties.

// spinBudget bounds the polls of one spin whatever the clock says (a
// manual clock does not move).
const spinBudget = 1 << 16

// epollEvery is how often (in polls) a spinning loop also looks at its
// epoll, for doorbells of QPs outside its active set.
const epollEvery = 16

func (l *loop) run() {
	defer close(l.done)
	events := make([]unix.EpollEvent, 64)
	var qs, active []*qpObj
	var cs []*cqObj
	var b [8]byte
	var spinEnd time.Time
	polls := 0 // polls left in this spin
	for iter := 0; !l.quit.Load(); iter++ {
		n := 0
		spinning := polls > 0 && l.srv.clk.Now().Before(spinEnd)
		switch {
		case spinning:
			polls--
			if iter%epollEvery == 0 {
				n, _ = unix.EpollWait(l.epfd, events, 0)
			}
			// Give way to other threads on the CPU (the clients, which
			// poll their CQs the same way): a spinning thread that never
			// yields keeps its CPU for a whole time slice. Not
			// runtime.Gosched: a goroutine forever back in the run queue
			// keeps every processor from Go's netpoller, so goroutines
			// parked there (a sleeping loop, the links) would wait for
			// the runtime's monitor, up to 10 ms. One loop spins at a
			// time (spinFor), so the other processors stay free for the
			// engine's goroutines and the netpoller.
			_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		default:
			// Going to sleep: every active ring asks for its doorbell,
			// and is looked at once more.
			l.srv.spinner.CompareAndSwap(l.id, 0)
			work := false
			for _, q := range active {
				if q.service(false) {
					work = true
				}
				q.active = false
			}
			active = active[:0]
			if work {
				polls, spinEnd = l.spinFor()
				continue
			}
			polls = 0
			l.mu.Lock()
			l.sleeping = len(l.dirtyQ) == 0 && len(l.dirtyC) == 0
			sleep := l.sleeping
			l.mu.Unlock()
			if sleep {
				var err error
				n, err = l.wait(events, -1)
				l.mu.Lock()
				l.sleeping = false
				l.mu.Unlock()
				if err != nil {
					if !l.quit.Load() {
						l.srv.log.Error("epoll_wait", "err", err)
					}
					return
				}
			}
		}
		qs, cs = qs[:0], cs[:0]
		l.mu.Lock()
		for _, ev := range events[:max(n, 0)] {
			_, _ = unix.Read(int(ev.Fd), b[:]) // reset the eventfd
			if q := l.byFD[ev.Fd]; q != nil {
				qs = append(qs, q)
			}
		}
		for _, q := range l.dirtyQ {
			q.queued.Store(false)
			qs = append(qs, q)
		}
		for _, c := range l.dirtyC {
			c.queued.Store(false)
			cs = append(cs, c)
		}
		l.dirtyQ, l.dirtyC = l.dirtyQ[:0], l.dirtyC[:0]
		l.mu.Unlock()
		work := false
		for _, q := range qs {
			if !q.active && l.spin > 0 {
				q.active = true
				active = append(active, q)
			}
			if q.service(l.spin > 0) {
				work = true
			}
		}
		if spinning {
			// The active rings, for WQEs posted with no doorbell.
			k := 0
			for _, q := range active {
				live, did := q.poll()
				if did {
					work = true
				}
				if live {
					active[k] = q
					k++
				} else {
					q.active = false
				}
			}
			clear(active[k:])
			active = active[:k]
		}
		for _, c := range cs {
			if h := l.srv.drainHold.Load(); h != nil {
				(*h)(c) // a test's (Server.HoldDrainsForTest)
			}
			if c.drain() {
				work = true
			}
		}
		if work && l.spin > 0 {
			polls, spinEnd = l.spinFor()
		}
	}
}

// spinFor starts or extends a spin, if no other loop spins: one spinning
// loop at a time leaves the other processors to the engine's goroutines
// and to Go's netpoller, which parked goroutines (a sleeping loop among
// them) wait on; with every processor busy spinning, the netpoller is
// looked at only by the runtime's monitor, and those wake-ups come late.
func (l *loop) spinFor() (int, time.Time) {
	if !l.srv.spinner.CompareAndSwap(0, l.id) && l.srv.spinner.Load() != l.id {
		return 0, time.Time{}
	}
	return spinBudget, l.srv.clk.Now().Add(l.spin)
}

// poll is service for a QP of the active set while the loop spins: it
// serves the rings only if the client published something since. live
// is false for a QP destroyed meanwhile.
func (q *qpObj) poll() (live, did bool) {
	q.mu.Lock()
	if q.dead {
		q.mu.Unlock()
		return false, false
	}
	news := q.sq.Producer() != q.sqCons+q.sqTaken
	if !news && q.rr != nil {
		news = q.rr.c.Producer() != q.rr.seen.Load()
	}
	q.mu.Unlock()
	if !news && !q.errPending.Load() && !q.srqBad.Load() {
		return true, false
	}
	return true, q.service(true)
}

// service moves new WQE records from q's rings to the engine and reports
// whether it took any. spin: the loop goes on polling the rings, so they
// are left with NEED_WAKEUP clear; otherwise the loop will sleep, and a
// ring found empty asks for its doorbell.
func (q *qpObj) service(spin bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.dead {
		return false
	}
	if q.errPending.Swap(false) && q.rr != nil {
		q.recvTroubleLocked()
	} else if q.srqBad.Swap(false) {
		q.toErrLocked()
	}
	st := q.qp.State()
	did := false
	if st != qp.Reset && q.rr != nil {
		did = q.serviceRecvLocked(st, spin)
	}
	if st.Allows(qp.PostSendOK) && !q.sqFailed {
		if q.serviceSendLocked(spin) {
			did = true
		}
	}
	return did
}
