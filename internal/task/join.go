package task

// Join and Leave let a running batch do a batch of another task's work
// itself, on its own goroutine, where it would otherwise wake that task
// and let it run after: the transport's responder completes a loopback
// requester's message this way (transport: Conn.ackDirectLocked) instead
// of handing it an ACK packet and a task hop.

// Join moves t from idle to busy for the calling goroutine, which is
// running a batch of src, a task on t's executor, and reports true; the
// caller then does a batch of t's work itself (under the lock t's Func
// would take) and ends it with Leave. Until Leave, t's Func does not run
// anywhere, a Schedule of t arms it (it runs again after Leave) and a Stop
// of t waits. A task in any other state (queued, running, stopped) is
// left as it is, and Join reports false.
//
// Nothing that may wait for t (a user callback) may run on the calling
// goroutine between Join and Leave.
func (t *Task) Join(src *Task) bool {
	if t.ex != src.ex {
		panic("task: " + src.name + " joins " + t.name + ", which is on another executor")
	}
	// The load first: a failed compare-and-swap costs as much as one
	// that succeeds.
	return t.state.Load() == stateIdle && t.state.CompareAndSwap(stateIdle, stateBusy)
}

// Leave ends what Join began. t goes back to idle; if more is true, or t
// was scheduled meanwhile, it runs again: carried by src's batch (Carry)
// if more, else where an armed task goes when its batch ends. A Stop that
// waited for t returns.
func (t *Task) Leave(src *Task, more bool) {
	// Whatever the joined batch carried goes with src's batch (the
	// goroutine runs both).
	for h := t.carry.pop(); h != nil; h = t.carry.pop() {
		src.carry.add(h)
	}
	t.finish(false)
	if more {
		t.Carry(src)
	}
}
