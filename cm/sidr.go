package cm

// SIDRRejectError is the error of a SIDR_REP whose status is not
// SUCCESS, as the REJECTED event of an in-process ID carries it: Reason
// RejInvalidServiceID for UNSUPPORTED (no listener), RejNoQP for NO_QP,
// RejConsumerDefined otherwise. rdma_cm reports it as UNREACHABLE with
// the SIDR status as the event's status (Linux's cma_sidr_rep_handler).
func SIDRRejectError(st SIDRStatus, priv []byte) *RejectError {
	reason := RejConsumerDefined
	switch st {
	case SIDRUnsupported:
		reason = RejInvalidServiceID
	case SIDRNoQP:
		reason = RejNoQP
	}
	return &RejectError{Reason: reason, SIDR: st, PrivateData: append([]byte(nil), priv...)}
}
