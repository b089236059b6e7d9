package rvt

import (
	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/transport"
)

// Conversions between the verbs' types and the protocol's; the QP ones
// are package qpconv's, shared with the daemon.

func transportSnapshot(e proto.QPEntry) transport.Snapshot {
	return transport.Snapshot{NextPSN: transport.PSN(e.NextPSN), UnackedPSN: transport.PSN(e.UnackedPSN),
		ExpectedPSN: transport.PSN(e.ExpectedPSN), MSN: e.MSN, SQPosted: int(e.SQPosted), RQPosted: int(e.RQPosted)}
}
