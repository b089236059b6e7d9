package cm

import (
	"errors"
	"fmt"
	"github.com/softverbs/softverbs/netdev"
)

// RejectReason is a REJ reason (IBTA table 105; Linux enum ib_cm_rej_reason).
// It is an error value itself, so errors.Is(err, cm.RejInvalidServiceID)
// holds for a *RejectError with that reason.
type RejectReason uint16

// REJ reasons.
const (
	RejNoQP                      RejectReason = 1
	RejNoEEC                     RejectReason = 2
	RejNoResources               RejectReason = 3
	RejTimeout                   RejectReason = 4
	RejUnsupported               RejectReason = 5
	RejInvalidCommID             RejectReason = 6
	RejInvalidCommInstance       RejectReason = 7
	RejInvalidServiceID          RejectReason = 8
	RejInvalidTransportType      RejectReason = 9
	RejStaleConn                 RejectReason = 10
	RejRDCNotExist               RejectReason = 11
	RejInvalidGID                RejectReason = 12
	RejInvalidLID                RejectReason = 13
	RejInvalidSL                 RejectReason = 14
	RejInvalidTrafficClass       RejectReason = 15
	RejInvalidHopLimit           RejectReason = 16
	RejInvalidPacketRate         RejectReason = 17
	RejInvalidAltGID             RejectReason = 18
	RejInvalidAltLID             RejectReason = 19
	RejInvalidAltSL              RejectReason = 20
	RejInvalidAltTrafficClass    RejectReason = 21
	RejInvalidAltHopLimit        RejectReason = 22
	RejInvalidAltPacketRate      RejectReason = 23
	RejPortCMRedirect            RejectReason = 24
	RejPortRedirect              RejectReason = 25
	RejInvalidMTU                RejectReason = 26
	RejInsufficientRespResources RejectReason = 27
	RejConsumerDefined           RejectReason = 28
	RejInvalidRNRRetry           RejectReason = 29
	RejDuplicateLocalCommID      RejectReason = 30
	RejInvalidClassVersion       RejectReason = 31
	RejInvalidFlowLabel          RejectReason = 32
	RejInvalidAltFlowLabel       RejectReason = 33
	RejVendorOptionNotSupported  RejectReason = 35
)

// rejectNames is the one table of reason names (Linux's spelling).
var rejectNames = map[RejectReason]string{
	RejNoQP: "NO_QP", RejNoEEC: "NO_EEC", RejNoResources: "NO_RESOURCES", RejTimeout: "TIMEOUT",
	RejUnsupported: "UNSUPPORTED", RejInvalidCommID: "INVALID_COMM_ID",
	RejInvalidCommInstance: "INVALID_COMM_INSTANCE", RejInvalidServiceID: "INVALID_SERVICE_ID",
	RejInvalidTransportType: "INVALID_TRANSPORT_TYPE", RejStaleConn: "STALE_CONN",
	RejRDCNotExist: "RDC_NOT_EXIST", RejInvalidGID: "INVALID_GID", RejInvalidLID: "INVALID_LID",
	RejInvalidSL: "INVALID_SL", RejInvalidTrafficClass: "INVALID_TRAFFIC_CLASS",
	RejInvalidHopLimit: "INVALID_HOP_LIMIT", RejInvalidPacketRate: "INVALID_PACKET_RATE",
	RejInvalidAltGID: "INVALID_ALT_GID", RejInvalidAltLID: "INVALID_ALT_LID",
	RejInvalidAltSL: "INVALID_ALT_SL", RejInvalidAltTrafficClass: "INVALID_ALT_TRAFFIC_CLASS",
	RejInvalidAltHopLimit: "INVALID_ALT_HOP_LIMIT", RejInvalidAltPacketRate: "INVALID_ALT_PACKET_RATE",
	RejPortCMRedirect: "PORT_CM_REDIRECT", RejPortRedirect: "PORT_REDIRECT",
	RejInvalidMTU: "INVALID_MTU", RejInsufficientRespResources: "INSUFFICIENT_RESP_RESOURCES",
	RejConsumerDefined: "CONSUMER_DEFINED", RejInvalidRNRRetry: "INVALID_RNR_RETRY",
	RejDuplicateLocalCommID: "DUPLICATE_LOCAL_COMM_ID", RejInvalidClassVersion: "INVALID_CLASS_VERSION",
	RejInvalidFlowLabel: "INVALID_FLOW_LABEL", RejInvalidAltFlowLabel: "INVALID_ALT_FLOW_LABEL",
	RejVendorOptionNotSupported: "VENDOR_OPTION_NOT_SUPPORTED",
}

// Known reports whether the reason is one the IBTA (or Linux) defines.
func (r RejectReason) Known() bool { _, ok := rejectNames[r]; return ok }

func (r RejectReason) String() string {
	if s, ok := rejectNames[r]; ok {
		return s
	}
	return fmt.Sprintf("REJ_REASON_%d", uint16(r))
}

// Error makes a reason usable as an errors.Is target.
func (r RejectReason) Error() string {
	return fmt.Sprintf("cm: rejected: %s (%d)", r.String(), uint16(r))
}

// Errors of connection establishment.
var (
	// ErrRejected matches every *RejectError.
	ErrRejected = errors.New("cm: connection rejected")
	// ErrUnreachable: the peer never answered (REQ, REP, DREQ or SIDR_REQ
	// retried max CM retries times); rdma_cm's UNREACHABLE.
	ErrUnreachable = errors.New("cm: peer unreachable: no response after the CM retries")
	// ErrNoListener matches the *RejectError of a request nobody listens
	// for, the ECONNREFUSED of rdma_cm: REJ 8 (RejInvalidServiceID) for a
	// REQ, SIDR status UNSUPPORTED for a SIDR_REQ. It is never returned
	// alone: errors.As still gives the *RejectError.
	ErrNoListener = errors.New("cm: no listener for the service ID")
	// ErrClosed: the ID, listener, connection or agent was closed.
	ErrClosed = errors.New("cm: closed")
	// ErrDeviceRemoved: the device under the agent closed, or the agent
	// did (rdma_cm's DEVICE_REMOVAL): the ID, listener or connection is
	// over, and every later call on it fails with this error.
	ErrDeviceRemoved = errors.New("cm: device removed")
	// ErrAddrInUse: a listener already holds the port (EADDRINUSE).
	ErrAddrInUse = errors.New("cm: address in use")
	// ErrInvalidState: the operation does not fit the ID's state.
	ErrInvalidState = errors.New("cm: invalid state for the operation")
	// ErrInvalidArgument: a malformed argument (private data too long, ...).
	ErrInvalidArgument = errors.New("cm: invalid argument")
	// ErrNoRoute: no GID of the device reaches the destination.
	ErrNoRoute = errors.New("cm: no route to the destination")
	// ErrNetUnreachable: the device's routing table has no route to the
	// destination (off its subnets, no gateway): ResolveAddr fails with
	// it at once, as rdma_resolve_addr fails with ENETUNREACH on Linux.
	// It is netdev.ErrNetUnreachable.
	ErrNetUnreachable = netdev.ErrNetUnreachable
)

// RejectError is a rejection received from the peer (or, for Reason
// RejTimeout, a passive side that gave up): the reason and the peer's
// private data, as rdma_cm's REJECTED event carries them.
type RejectError struct {
	Reason      RejectReason
	PrivateData []byte
	// SIDR is set when the rejection is a SIDR_REP status (then Reason is
	// RejConsumerDefined for SIDR_REJECT, RejInvalidServiceID for
	// UNSUPPORTED, RejNoQP for NO_QP).
	SIDR SIDRStatus
}

func (e *RejectError) Error() string {
	if len(e.PrivateData) > 0 {
		return fmt.Sprintf("cm: rejected: %v (%d), %d bytes of private data", e.Reason.String(), uint16(e.Reason), len(e.PrivateData))
	}
	return fmt.Sprintf("cm: rejected: %s (%d)", e.Reason.String(), uint16(e.Reason))
}

// Is matches ErrRejected and the reason, so errors.Is(err, ErrRejected)
// and errors.Is(err, RejConsumerDefined) both work, and ErrNoListener
// for reason RejInvalidServiceID (REJ 8, or SIDR status UNSUPPORTED:
// nobody listens on the service ID).
func (e *RejectError) Is(target error) bool {
	switch target {
	case ErrRejected:
		return true
	case ErrNoListener:
		return e.Reason == RejInvalidServiceID
	}
	if r, ok := target.(RejectReason); ok {
		return r == e.Reason
	}
	return false
}
