package rvt

import (
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/transport"
)

// Conversions between the verbs' types and the protocol's (rvtd/convert.go
// has the daemon's side; rvt cannot import rvtd).

func toAV(a proto.AV) qp.AddressVector {
	return qp.AddressVector{DGID: a.DGID, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
		TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel, SL: a.SL, DLID: a.DLID,
		StaticRate: a.StaticRate, Port: a.Port}
}

func fromAV(a qp.AddressVector) proto.AV {
	return proto.AV{DGID: a.DGID, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
		TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel, SL: a.SL, DLID: a.DLID,
		StaticRate: a.StaticRate, Port: a.Port, IsGlobal: true}
}

func toQPAttr(a *proto.QPAttr) qp.Attr {
	return qp.Attr{
		State: qp.State(a.State), CurState: qp.State(a.CurState), EnSQDAsyncNotify: a.EnSQDAsync,
		AccessFlags: keys.Access(a.AccessFlags), PkeyIndex: a.PKeyIndex, Port: a.Port, QKey: a.QKey,
		AV: toAV(a.AV), PathMTU: qp.MTU(a.PathMTU), Timeout: a.Timeout, RetryCnt: a.RetryCnt,
		RNRRetry: a.RNRRetry, RQPSN: a.RQPSN, SQPSN: a.SQPSN, MaxRdAtomic: a.MaxRdAtomic,
		MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer, DestQPN: a.DestQPN,
		Cap: qp.Cap{MaxSendWR: a.Cap.MaxSendWR, MaxRecvWR: a.Cap.MaxRecvWR, MaxSendSGE: a.Cap.MaxSendSGE,
			MaxRecvSGE: a.Cap.MaxRecvSGE, MaxInlineData: a.Cap.MaxInlineData},
	}
}

func fromQPAttr(a qp.Attr) proto.QPAttr {
	return proto.QPAttr{
		State: uint8(a.State), CurState: uint8(a.CurState), EnSQDAsync: a.EnSQDAsyncNotify,
		AccessFlags: uint32(a.AccessFlags), PKeyIndex: a.PkeyIndex, Port: a.Port, QKey: a.QKey,
		AV: fromAV(a.AV), PathMTU: uint8(a.PathMTU), Timeout: a.Timeout, RetryCnt: a.RetryCnt,
		RNRRetry: a.RNRRetry, RQPSN: a.RQPSN, SQPSN: a.SQPSN, MaxRdAtomic: a.MaxRdAtomic,
		MaxDestRdAtomic: a.MaxDestRdAtomic, MinRNRTimer: a.MinRNRTimer, DestQPN: a.DestQPN,
		Cap: proto.Cap{MaxSendWR: a.Cap.MaxSendWR, MaxRecvWR: a.Cap.MaxRecvWR, MaxSendSGE: a.Cap.MaxSendSGE,
			MaxRecvSGE: a.Cap.MaxRecvSGE, MaxInlineData: a.Cap.MaxInlineData},
	}
}

func transportSnapshot(e proto.QPEntry) transport.Snapshot {
	return transport.Snapshot{NextPSN: transport.PSN(e.NextPSN), UnackedPSN: transport.PSN(e.UnackedPSN),
		ExpectedPSN: transport.PSN(e.ExpectedPSN), MSN: e.MSN, SQPosted: int(e.SQPosted), RQPosted: int(e.RQPosted)}
}
