// Package qpconv converts between the verbs' QP types (package qp) and
// rvtd's protocol records (package proto): the daemon and rvt's Dial'd
// devices both need them.
package qpconv

import (
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// ToAV is the address vector of a protocol AV.
func ToAV(a proto.AV) qp.AddressVector {
	return qp.AddressVector{DGID: a.DGID, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
		TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel, SL: a.SL, DLID: a.DLID,
		StaticRate: a.StaticRate, Port: a.Port}
}

// FromAV is the protocol AV of an address vector (always global: RoCE).
func FromAV(a qp.AddressVector) proto.AV {
	return proto.AV{DGID: a.DGID, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
		TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel, SL: a.SL, DLID: a.DLID,
		StaticRate: a.StaticRate, Port: a.Port, IsGlobal: true}
}

// ToQPAttr is the QP attributes of a protocol QPAttr.
func ToQPAttr(a *proto.QPAttr) qp.Attr {
	return qp.Attr{
		State: qp.State(a.State), CurState: qp.State(a.CurState), EnSQDAsyncNotify: a.EnSQDAsync,
		AccessFlags: keys.Access(a.AccessFlags), PkeyIndex: a.PKeyIndex, Port: a.Port, QKey: a.QKey,
		AV: ToAV(a.AV), PathMTU: qp.MTU(a.PathMTU), Timeout: a.Timeout, RetryCnt: a.RetryCnt,
		RNRRetry: a.RNRRetry, RQPSN: a.RQPSN, SQPSN: a.SQPSN, MaxRdAtomic: a.MaxRdAtomic,
		MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer, DestQPN: a.DestQPN,
		Cap: qp.Cap{MaxSendWR: a.Cap.MaxSendWR, MaxRecvWR: a.Cap.MaxRecvWR, MaxSendSGE: a.Cap.MaxSendSGE,
			MaxRecvSGE: a.Cap.MaxRecvSGE, MaxInlineData: a.Cap.MaxInlineData},
	}
}

// FromQPAttr is the protocol QPAttr of QP attributes.
func FromQPAttr(a qp.Attr) proto.QPAttr {
	return proto.QPAttr{
		State: uint8(a.State), CurState: uint8(a.CurState), EnSQDAsync: a.EnSQDAsyncNotify,
		AccessFlags: uint32(a.AccessFlags), PKeyIndex: a.PkeyIndex, Port: a.Port, QKey: a.QKey,
		AV: FromAV(a.AV), PathMTU: uint8(a.PathMTU), Timeout: a.Timeout, RetryCnt: a.RetryCnt,
		RNRRetry: a.RNRRetry, RQPSN: a.RQPSN, SQPSN: a.SQPSN, MaxRdAtomic: a.MaxRdAtomic,
		MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer, DestQPN: a.DestQPN,
		Cap: proto.Cap{MaxSendWR: a.Cap.MaxSendWR, MaxRecvWR: a.Cap.MaxRecvWR, MaxSendSGE: a.Cap.MaxSendSGE,
			MaxRecvSGE: a.Cap.MaxRecvSGE, MaxInlineData: a.Cap.MaxInlineData},
	}
}
