package cm

import "fmt"

// NewIDHandler creates an ID in port space ps whose events are passed to
// f instead of an EventChannel (rdma_create_id for a server of many
// clients: rvtd writes each event to the owning client's socket). f runs
// on the agent's task, in order per ID, never under the agent's lock; it
// must not block. The passive IDs of a listener made this way inherit f,
// as they inherit a listener's channel.
func (a *Agent) NewIDHandler(ps PortSpace, ctx any, f func(Event)) *ID {
	return a.newID(ps, ctx, f)
}

// Options returns the agent's options, defaults filled in.
func (a *Agent) Options() Options { return a.opts }

// NotifyCommEst tells a passive ID that data arrived on its QP before the
// RTU (ib_cm_notify with IB_EVENT_COMM_EST, what rdma_notify passes on):
// an ID in REP_SENT is established. The agent notices this by itself for
// a QP given to Accept; this is for a caller that accepted with a QP
// number only. An established ID is left as it is.
func (id *ID) NotifyCommEst() error {
	if id.r != nil {
		return id.remoteCall("notify", func() error { return id.r.cid.Notify(4) }) // IBV_EVENT_COMM_EST
	}
	a := id.a
	a.mu.Lock()
	if err := a.removedErrLocked("notify"); err != nil {
		a.mu.Unlock()
		return err
	}
	switch id.state {
	case StateREPSent, StateMRAREPRcvd:
		a.establishPassiveLocked(id, nil)
		a.mu.Unlock()
		a.kick()
		return nil
	case StateEstablished:
		a.mu.Unlock()
		return nil
	}
	s := id.state
	a.mu.Unlock()
	return fmt.Errorf("notify: %w: %v", ErrInvalidState, s)
}
