package cm

import (
	"fmt"
	"time"
)

// State is the IB CM state of an ID (Linux enum ib_cm_state, plus LISTEN).
type State uint8

// CM states.
const (
	StateIdle State = iota
	StateListen
	StateREQSent
	StateREQRcvd
	StateMRAREQSent
	StateMRAREQRcvd
	StateREPSent
	StateREPRcvd
	StateMRAREPSent
	StateMRAREPRcvd
	StateEstablished
	StateDREQSent
	StateDREQRcvd
	StateTimeWait
	StateSIDRREQSent
	StateSIDRREQRcvd
	numStates
)

// attrSet is a set of received attributes, by bit (attribute ID - 0x10).
type attrSet uint16

func attrs(ids ...AttrID) attrSet {
	var s attrSet
	for _, id := range ids {
		s |= 1 << (id - AttrREQ)
	}
	return s
}

func (s attrSet) has(id AttrID) bool {
	return id >= AttrREQ && id <= AttrSIDRREP && s&(1<<(id-AttrREQ)) != 0
}

// stateInfo is one row of the state table: the name, which received
// attributes the state handles (every other one is counted and dropped),
// and what its timer does when it fires.
type stateInfo struct {
	name  string
	rx    attrSet
	timer timerKind
}

// timerKind says what a state's timer means.
type timerKind uint8

const (
	timerNone     timerKind = iota
	timerResend             // resend the last MAD; after the retries, fail
	timerTimeWait           // leave TIMEWAIT: the comm ID, port and QP are free
	timerMRA                // the peer's MRA time ran out: resend as timerResend
)

// states is the CM's per-state table (cm.c's handlers, as data). The
// handler for each attribute (onREQ, onREP, ...) then does what the state
// calls for; state.go's comments there say which Linux case it mirrors.
var states = [numStates]stateInfo{
	StateIdle:        {name: "IDLE"},
	StateListen:      {name: "LISTEN"},
	StateREQSent:     {name: "REQ_SENT", rx: attrs(AttrMRA, AttrREJ, AttrREP), timer: timerResend},
	StateREQRcvd:     {name: "REQ_RCVD", rx: attrs(AttrREQ, AttrREJ)},
	StateMRAREQSent:  {name: "MRA_REQ_SENT", rx: attrs(AttrREQ, AttrREJ)},
	StateMRAREQRcvd:  {name: "MRA_REQ_RCVD", rx: attrs(AttrREJ, AttrREP), timer: timerMRA},
	StateREPSent:     {name: "REP_SENT", rx: attrs(AttrREQ, AttrMRA, AttrREJ, AttrRTU, AttrDREQ), timer: timerResend},
	StateREPRcvd:     {name: "REP_RCVD", rx: attrs(AttrREP, AttrREJ, AttrDREQ)},
	StateMRAREPSent:  {name: "MRA_REP_SENT", rx: attrs(AttrREP, AttrREJ, AttrDREQ)},
	StateMRAREPRcvd:  {name: "MRA_REP_RCVD", rx: attrs(AttrREJ, AttrRTU, AttrDREQ), timer: timerMRA},
	StateEstablished: {name: "ESTABLISHED", rx: attrs(AttrREQ, AttrREP, AttrRTU, AttrDREQ)},
	StateDREQSent:    {name: "DREQ_SENT", rx: attrs(AttrDREQ, AttrDREP), timer: timerResend},
	StateDREQRcvd:    {name: "DREQ_RCVD", rx: attrs(AttrDREQ, AttrDREP)},
	StateTimeWait:    {name: "TIMEWAIT", rx: attrs(AttrREQ, AttrREP, AttrDREQ, AttrSIDRREQ), timer: timerTimeWait},
	StateSIDRREQSent: {name: "SIDR_REQ_SENT", rx: attrs(AttrSIDRREP), timer: timerResend},
	StateSIDRREQRcvd: {name: "SIDR_REQ_RCVD", rx: attrs(AttrSIDRREQ)},
}

func (s State) String() string {
	if s < numStates {
		return states[s].name
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Handles reports whether a MAD of attribute id is acted on in state s.
func (s State) Handles(id AttrID) bool { return s < numStates && states[s].rx.has(id) }

// connected reports whether the state holds a connection whose remote
// QPN is known to the peer (the stale-connection check).
func (s State) connected() bool {
	switch s {
	case StateREPSent, StateMRAREPRcvd, StateREPRcvd, StateMRAREPSent, StateEstablished,
		StateDREQSent, StateDREQRcvd:
		return true
	}
	return false
}

// convTime is Linux's cm_convert_to_ms: 4.096 µs × 2^x, approximated
// as 2^(x-8) ms (x >= 8), 1 ms below.
func convTime(x uint8) time.Duration {
	if x < 8 {
		return time.Millisecond
	}
	if x > 31 {
		x = 31
	}
	return time.Millisecond << (x - 8)
}
