// Package traffic is RC, UC and UD traffic between softverbs devices
// for the tools and their tests: endpoints (a QP with its own CQ) brought
// up to RTS against each other, registered buffers with recognisable
// patterns, waits for completions, and the measurements the demo, `rvt
// perf` and the perftest-style tools share: RDMA WRITE goodput
// (WriteRun), SEND message rate (SendRun) and SEND ping-pong latency
// (SendPingpong, by events or by busy polling).
package traffic

import (
	"fmt"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// AllAccess is the access a buffer gets: everything a peer may do.
const AllAccess = keys.LocalWrite | keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic | keys.MWBind

// QKey is the Q_Key every UD QP of BringUp uses.
const QKey = 0x11111111

// Endpoint is a QP with its own CQ (send and receive completions both).
type Endpoint struct {
	*rvt.QP
	CQ *rvt.CQ
	N  *devopen.Node
}

// QPOpts tune NewEndpoint.
type QPOpts struct {
	SendWR, RecvWR uint32        // queue depths (0: 256)
	OnComp         func(*rvt.CQ) // the CQ's completion handler, or nil
}

// NewEndpoint creates a QP of type typ on n's PD with a CQ of its own.
func NewEndpoint(n *devopen.Node, typ rvt.QPType, o QPOpts) (*Endpoint, error) {
	if o.SendWR == 0 {
		o.SendWR = 256
	}
	if o.RecvWR == 0 {
		o.RecvWR = 256
	}
	c, err := n.Dev.CreateCQ(int(2*(o.SendWR+o.RecvWR)), o.OnComp)
	if err != nil {
		return nil, err
	}
	q, err := n.PD.CreateQP(rvt.QPInitAttr{Type: typ, SendCQ: c, RecvCQ: c,
		Cap: rvt.QPCap{MaxSendWR: o.SendWR, MaxRecvWR: o.RecvWR, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
	if err != nil {
		return nil, err
	}
	return &Endpoint{QP: q, CQ: c, N: n}, nil
}

// Connect moves a and b to RTS, each addressed to the other through GID
// index 1 (the IPv4 address). UD QPs get QKey and no peer.
func Connect(a, b *Endpoint, mtu rvt.MTU) error {
	if err := BringUp(a, b, mtu); err != nil {
		return fmt.Errorf("QP %#x: %w", a.Num(), err)
	}
	if err := BringUp(b, a, mtu); err != nil {
		return fmt.Errorf("QP %#x: %w", b.Num(), err)
	}
	return nil
}

// BringUp moves q from RESET to RTS, addressed to peer (nil for a UD QP).
func BringUp(q, peer *Endpoint, mtu rvt.MTU) error {
	typ := q.Type()
	init := rvt.QPAttr{State: qp.Init, Port: 1, QKey: QKey,
		AccessFlags: keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic}
	if err := q.Modify(&init, qp.RequiredAttrs(typ, qp.Reset, qp.Init)); err != nil {
		return err
	}
	rtr := rvt.QPAttr{State: qp.RTR, MaxDestRdAtomic: 16, MinRNRTimer: 1}
	if !typ.Datagram() {
		gid, err := peer.N.Dev.QueryGID(1, 1)
		if err != nil {
			return err
		}
		rtr.PathMTU, rtr.DestQPN, rtr.RQPSN = mtu, peer.Num(), 0x100
		rtr.AV = rvt.AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, Port: 1}
	}
	if err := q.Modify(&rtr, qp.RequiredAttrs(typ, qp.Init, qp.RTR)); err != nil {
		return err
	}
	// Timeout 12 is 4.096 µs * 2^12 = 16.8 ms; RNR retry 7 is infinite.
	rts := rvt.QPAttr{State: qp.RTS, SQPSN: 0x100, Timeout: 12, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}
	return q.Modify(&rts, qp.RequiredAttrs(typ, qp.RTR, qp.RTS))
}
