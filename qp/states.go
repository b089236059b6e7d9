package qp

// Ops are what a QP state allows, as rdmavt's ib_rvt_state_ops.
type Ops uint8

// Per-state operation bits.
const (
	PostRecvOK Ops = 1 << iota
	PostSendOK
	ProcessRecvOK // the responder accepts requests
	ProcessSendOK // the requester sends WQEs already started
	ProcessNextSendOK
	FlushSend
	FlushRecv
)

// stateOps is the per-state table (rdmavt's ib_rvt_state_ops).
var stateOps = [numStates]Ops{
	Reset: 0,
	Init:  PostRecvOK,
	RTR:   PostRecvOK | ProcessRecvOK,
	RTS:   PostRecvOK | PostSendOK | ProcessRecvOK | ProcessSendOK | ProcessNextSendOK,
	SQD:   PostRecvOK | PostSendOK | ProcessRecvOK | ProcessSendOK,
	SQE:   PostRecvOK | PostSendOK | ProcessRecvOK | FlushSend,
	Err:   PostRecvOK | PostSendOK | FlushSend | FlushRecv,
}

// Allows reports whether state s allows all of ops.
func (s State) Allows(ops Ops) bool {
	return s < numStates && stateOps[s]&ops == ops
}
