package cq

import (
	"strconv"
	"strings"
)

// Status is the completion status of a work request. The values are those of
// libibverbs' enum ibv_wc_status, so they can be passed through unchanged.
type Status uint8

// Completion statuses (ibv_wc_status).
const (
	Success        Status = 0  // IBV_WC_SUCCESS
	LocLenErr      Status = 1  // IBV_WC_LOC_LEN_ERR
	LocQPOpErr     Status = 2  // IBV_WC_LOC_QP_OP_ERR
	LocEECOpErr    Status = 3  // IBV_WC_LOC_EEC_OP_ERR
	LocProtErr     Status = 4  // IBV_WC_LOC_PROT_ERR
	WRFlushErr     Status = 5  // IBV_WC_WR_FLUSH_ERR
	MWBindErr      Status = 6  // IBV_WC_MW_BIND_ERR
	BadRespErr     Status = 7  // IBV_WC_BAD_RESP_ERR
	LocAccessErr   Status = 8  // IBV_WC_LOC_ACCESS_ERR
	RemInvReqErr   Status = 9  // IBV_WC_REM_INV_REQ_ERR
	RemAccessErr   Status = 10 // IBV_WC_REM_ACCESS_ERR
	RemOpErr       Status = 11 // IBV_WC_REM_OP_ERR
	RetryExcErr    Status = 12 // IBV_WC_RETRY_EXC_ERR
	RNRRetryExcErr Status = 13 // IBV_WC_RNR_RETRY_EXC_ERR
	LocRDDViolErr  Status = 14 // IBV_WC_LOC_RDD_VIOL_ERR
	RemInvRdReqErr Status = 15 // IBV_WC_REM_INV_RD_REQ_ERR
	RemAbortErr    Status = 16 // IBV_WC_REM_ABORT_ERR
	InvEECNErr     Status = 17 // IBV_WC_INV_EECN_ERR
	InvEECStateErr Status = 18 // IBV_WC_INV_EEC_STATE_ERR
	FatalErr       Status = 19 // IBV_WC_FATAL_ERR
	RespTimeoutErr Status = 20 // IBV_WC_RESP_TIMEOUT_ERR
	GeneralErr     Status = 21 // IBV_WC_GENERAL_ERR
)

// statusText holds the texts libibverbs' ibv_wc_status_str returns, indexed
// by status value.
var statusText = [...]string{
	Success:        "success",
	LocLenErr:      "local length error",
	LocQPOpErr:     "local QP operation error",
	LocEECOpErr:    "local EE context operation error",
	LocProtErr:     "local protection error",
	WRFlushErr:     "Work Request Flushed Error",
	MWBindErr:      "memory management operation error",
	BadRespErr:     "bad response error",
	LocAccessErr:   "local access error",
	RemInvReqErr:   "remote invalid request error",
	RemAccessErr:   "remote access error",
	RemOpErr:       "remote operation error",
	RetryExcErr:    "transport retry counter exceeded",
	RNRRetryExcErr: "RNR retry counter exceeded",
	LocRDDViolErr:  "local RDD violation error",
	RemInvRdReqErr: "remote invalid RD request",
	RemAbortErr:    "aborted error",
	InvEECNErr:     "invalid EE context number",
	InvEECStateErr: "invalid EE context state",
	FatalErr:       "fatal error",
	RespTimeoutErr: "response timeout error",
	GeneralErr:     "general error",
}

// String returns the text ibv_wc_status_str gives for s, and "unknown" (as
// libibverbs does) for a value outside the enumeration.
func (s Status) String() string {
	if int(s) < len(statusText) {
		return statusText[s]
	}
	return "unknown"
}

// Valid reports whether s is one of the defined statuses.
func (s Status) Valid() bool { return int(s) < len(statusText) }

// Opcode says which operation a completion is for. The values are those of
// libibverbs' enum ibv_wc_opcode; receive-side opcodes have bit 7 set.
type Opcode uint8

// Completion opcodes (ibv_wc_opcode).
const (
	Send      Opcode = 0 // IBV_WC_SEND
	RDMAWrite Opcode = 1 // IBV_WC_RDMA_WRITE
	RDMARead  Opcode = 2 // IBV_WC_RDMA_READ
	CompSwap  Opcode = 3 // IBV_WC_COMP_SWAP
	FetchAdd  Opcode = 4 // IBV_WC_FETCH_ADD
	BindMW    Opcode = 5 // IBV_WC_BIND_MW
	LocalInv  Opcode = 6 // IBV_WC_LOCAL_INV
	TSO       Opcode = 7 // IBV_WC_TSO
	// RegMR completes a fast-register work request. libibverbs has no such
	// opcode; 8 is the kernel's IB_WC_REG_MR.
	RegMR Opcode = 8

	// Recv is set on every receive-side completion (IBV_WC_RECV, 1<<7).
	Recv            Opcode = 1 << 7
	RecvRDMAWithImm Opcode = Recv + 1 // IBV_WC_RECV_RDMA_WITH_IMM
)

var opcodeText = [...]string{
	Send:      "SEND",
	RDMAWrite: "RDMA_WRITE",
	RDMARead:  "RDMA_READ",
	CompSwap:  "COMP_SWAP",
	FetchAdd:  "FETCH_ADD",
	BindMW:    "BIND_MW",
	LocalInv:  "LOCAL_INV",
	TSO:       "TSO",
	RegMR:     "REG_MR",
}

// String returns the libibverbs enumerator name without its IBV_WC_ prefix
// ("SEND", "RDMA_WRITE", "RECV", "RECV_RDMA_WITH_IMM", ...), or "Opcode(n)"
// for an undefined value.
func (o Opcode) String() string {
	switch {
	case int(o) < len(opcodeText):
		return opcodeText[o]
	case o == Recv:
		return "RECV"
	case o == RecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "Opcode(" + strconv.Itoa(int(o)) + ")"
}

// IsRecv reports whether o is a receive-side opcode.
func (o Opcode) IsRecv() bool { return o&Recv != 0 }

// Flags are the ibv_wc_flags of a completion.
type Flags uint32

// Completion flags (ibv_wc_flags).
const (
	GRH      Flags = 1 << 0 // IBV_WC_GRH: the first 40 bytes of the buffer hold a GRH
	WithImm  Flags = 1 << 1 // IBV_WC_WITH_IMM: ImmData is valid
	IPCsumOK Flags = 1 << 2 // IBV_WC_IP_CSUM_OK
	WithInv  Flags = 1 << 3 // IBV_WC_WITH_INV: InvalidatedRkey is valid
)

var flagText = [...]string{"GRH", "WITH_IMM", "IP_CSUM_OK", "WITH_INV"}

// String returns the set flags joined by "|" ("GRH|WITH_IMM"), "0" when none
// is set, with any undefined bits appended in hex.
func (f Flags) String() string {
	if f == 0 {
		return "0"
	}
	var b strings.Builder
	for i, name := range flagText {
		if f&(1<<i) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString(name)
	}
	if rest := f &^ (1<<len(flagText) - 1); rest != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString("0x")
		b.WriteString(strconv.FormatUint(uint64(rest), 16))
	}
	return b.String()
}

// WC is a work completion, field for field libibverbs' struct ibv_wc.
type WC struct {
	WRID      uint64 // wr_id of the work request
	Status    Status
	Opcode    Opcode
	VendorErr uint32
	ByteLen   uint32 // bytes transferred (receives, RDMA read, atomics)
	// ImmData is the host-order value of the 32-bit immediate; valid when
	// Flags&WithImm.
	ImmData uint32
	// InvalidatedRkey is the rkey a Send with Invalidate invalidated; valid
	// when Flags&WithInv.
	InvalidatedRkey uint32
	QPNum           uint32 // local QP number
	SrcQP           uint32 // remote QP number (UD)
	Flags           Flags
	PkeyIndex       uint16
	SLID            uint16
	SL              uint8
	DLIDPathBits    uint8
	// Solicited is set by the producer when the completion is for a message
	// with the solicited-event bit; it satisfies solicited-only arming. It is
	// not part of ibv_wc.
	Solicited bool
}
