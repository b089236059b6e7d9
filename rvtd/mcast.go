package rvtd

import (
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// Multicast: a client's UD QP joins and leaves groups of its device. The
// engine keeps the groups (device-wide, as on an HCA) and leaves a QP's
// groups when the QP is destroyed, so a session's teardown leaves them
// too. A QP of another type is EINVAL; attaching twice EEXIST, detaching
// a group not attached EINVAL (the engine's errors, mapped in proto).

func (ss *session) attachMcast(h uint32, m *proto.Mcast) error {
	q := lookup[qpObj](ss, h)
	if q == nil {
		return proto.EINVAL
	}
	return q.ctx.d.dev.AttachMcast(q.qp, rvt.GID(m.GID), m.LID)
}

func (ss *session) detachMcast(h uint32, m *proto.Mcast) error {
	q := lookup[qpObj](ss, h)
	if q == nil {
		return proto.EINVAL
	}
	return q.ctx.d.dev.DetachMcast(q.qp, rvt.GID(m.GID), m.LID)
}
