// Package qp holds queue pairs: their types, states and attributes, the IBTA
// modify-transition table, the per-state table of allowed operations, the
// send, receive and shared receive queues with their work queue entries, and
// the validation of posted work requests.
//
// The protocol engines that consume the queues live in package transport;
// this package owns the objects and the rules a verbs consumer sees.
package qp

import (
	"errors"
	"fmt"

	"github.com/softverbs/softverbs/internal/verr"
	"github.com/softverbs/softverbs/keys"
)

// Sentinel errors. Every error returned by this package wraps one of them.
var (
	ErrInvalidArgument = verr.ErrInvalidArgument
	ErrInvalidState    = verr.ErrInvalidState
	ErrNotSupported    = verr.ErrNotSupported
	ErrQueueFull       = errors.New("queue full")
	ErrBusy            = verr.ErrBusy
)

// Type is the QP transport service type, with the kernel's ib_qp_type values.
type Type uint8

// QP types.
const (
	GSI Type = 1 // the general services QP, QP 1 (UD semantics)
	RC  Type = 2
	UC  Type = 3
	UD  Type = 4
)

func (t Type) String() string {
	switch t {
	case GSI:
		return "GSI"
	case RC:
		return "RC"
	case UC:
		return "UC"
	case UD:
		return "UD"
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Datagram reports whether the type is datagram (UD or GSI).
func (t Type) Datagram() bool { return t == UD || t == GSI }

// State is a QP state, with the ibv_qp_state values.
type State uint8

// QP states.
const (
	Reset State = iota
	Init
	RTR
	RTS
	SQD
	SQE
	Err
	numStates
)

var stateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// AttrMask selects attributes in Modify, with the ibv_qp_attr_mask values.
type AttrMask uint32

// Attribute mask bits.
const (
	AttrState           AttrMask = 1 << 0
	AttrCurState        AttrMask = 1 << 1
	AttrEnSQDAsync      AttrMask = 1 << 2
	AttrAccessFlags     AttrMask = 1 << 3
	AttrPkeyIndex       AttrMask = 1 << 4
	AttrPort            AttrMask = 1 << 5
	AttrQKey            AttrMask = 1 << 6
	AttrAV              AttrMask = 1 << 7
	AttrPathMTU         AttrMask = 1 << 8
	AttrTimeout         AttrMask = 1 << 9
	AttrRetryCnt        AttrMask = 1 << 10
	AttrRNRRetry        AttrMask = 1 << 11
	AttrRQPSN           AttrMask = 1 << 12
	AttrMaxQPRdAtomic   AttrMask = 1 << 13
	AttrAltPath         AttrMask = 1 << 14
	AttrMinRNRTimer     AttrMask = 1 << 15
	AttrSQPSN           AttrMask = 1 << 16
	AttrMaxDestRdAtomic AttrMask = 1 << 17
	AttrPathMigState    AttrMask = 1 << 18
	AttrCap             AttrMask = 1 << 19
	AttrDestQPN         AttrMask = 1 << 20
	AttrRateLimit       AttrMask = 1 << 25

	attrAll = AttrRateLimit<<1 - 1
)

var maskNames = [...]string{
	"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX",
	"PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY",
	"RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN",
	"MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN", "bit21",
	"bit22", "bit23", "bit24", "RATE_LIMIT",
}

func (m AttrMask) String() string {
	if m == 0 {
		return "0"
	}
	s := ""
	for i := 0; i < 32; i++ {
		if m&(1<<i) == 0 {
			continue
		}
		if s != "" {
			s += "|"
		}
		if i < len(maskNames) {
			s += maskNames[i]
		} else {
			s += fmt.Sprintf("bit%d", i)
		}
	}
	return s
}

// MTU is the IBTA path MTU enumeration (1 = 256 bytes ... 5 = 4096 bytes).
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Valid reports whether m is one of the five defined MTUs.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// Bytes returns the MTU in bytes (0 if invalid).
func (m MTU) Bytes() int {
	if !m.Valid() {
		return 0
	}
	return 128 << m
}

// MTUFromBytes returns the largest MTU enum not above n bytes (0 if n < 256).
func MTUFromBytes(n int) MTU {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m
		}
	}
	return 0
}

func (m MTU) String() string {
	if !m.Valid() {
		return fmt.Sprintf("MTU(%d)", uint8(m))
	}
	return fmt.Sprintf("%d", m.Bytes())
}

// AddressVector says where a QP's packets go: the RoCEv2 fields of
// ibv_ah_attr. For RoCE every address is global: DGID is the peer's GID
// (an IPv6 address or an IPv4-mapped one).
type AddressVector struct {
	DGID         [16]byte
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	SL           uint8
	DLID         uint16 // unused on RoCE; kept for ibv_ah_attr fidelity
	StaticRate   uint8
	Port         uint8
}

// AH is an address handle: an address vector in a PD.
type AH struct {
	PD *keys.PD
	AV AddressVector
}

// Cap are a QP's queue capacities.
type Cap struct {
	MaxSendWR, MaxRecvWR   uint32
	MaxSendSGE, MaxRecvSGE uint32
	MaxInlineData          uint32
}

// Attr are a QP's attributes, as ibv_qp_attr.
type Attr struct {
	State            State
	CurState         State
	EnSQDAsyncNotify bool
	AccessFlags      keys.Access // remote access the responder allows
	PkeyIndex        uint16
	Port             uint8
	QKey             uint32
	AV               AddressVector
	PathMTU          MTU
	Timeout          uint8 // 4.096 us * 2^Timeout; 0 = infinite
	RetryCnt         uint8
	RNRRetry         uint8 // 7 = infinite
	RQPSN            uint32
	SQPSN            uint32
	MaxRdAtomic      uint8 // outstanding READ/atomic as requester
	MaxDestRdAtomic  uint8 // READ/atomic resources as responder
	MinRNRTimer      uint8
	DestQPN          uint32
	Cap              Cap
}

// Opcode is a send work request opcode, with the ibv_wr_opcode values (and
// the kernel's REG_MR).
type Opcode uint8

// Send work request opcodes.
const (
	OpRDMAWrite        Opcode = 0
	OpRDMAWriteWithImm Opcode = 1
	OpSend             Opcode = 2
	OpSendWithImm      Opcode = 3
	OpRDMARead         Opcode = 4
	OpAtomicCmpSwp     Opcode = 5
	OpAtomicFetchAdd   Opcode = 6
	OpLocalInv         Opcode = 7
	OpBindMW           Opcode = 8
	OpSendWithInv      Opcode = 9
	OpRegMR            Opcode = 12
)

var opNames = map[Opcode]string{
	OpRDMAWrite: "RDMA_WRITE", OpRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM",
	OpSend: "SEND", OpSendWithImm: "SEND_WITH_IMM", OpRDMARead: "RDMA_READ",
	OpAtomicCmpSwp: "ATOMIC_CMP_AND_SWP", OpAtomicFetchAdd: "ATOMIC_FETCH_AND_ADD",
	OpLocalInv: "LOCAL_INV", OpBindMW: "BIND_MW", OpSendWithInv: "SEND_WITH_INV",
	OpRegMR: "REG_MR",
}

func (o Opcode) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// Local reports whether the opcode is executed locally without packets.
func (o Opcode) Local() bool { return o == OpLocalInv || o == OpBindMW || o == OpRegMR }

// Atomic reports whether the opcode is an atomic.
func (o Opcode) Atomic() bool { return o == OpAtomicCmpSwp || o == OpAtomicFetchAdd }

// ReadOrAtomic reports whether the opcode needs a responder resource.
func (o Opcode) ReadOrAtomic() bool { return o == OpRDMARead || o.Atomic() }

// Send reports whether the opcode consumes a receive WQE at the responder
// by being a SEND.
func (o Opcode) Send() bool { return o == OpSend || o == OpSendWithImm || o == OpSendWithInv }

// HasImm reports whether the opcode carries immediate data.
func (o Opcode) HasImm() bool { return o == OpSendWithImm || o == OpRDMAWriteWithImm }

// SendFlags are ibv_send_flags.
type SendFlags uint32

// Send flags.
const (
	Fence     SendFlags = 1 << 0
	Signaled  SendFlags = 1 << 1
	Solicited SendFlags = 1 << 2
	Inline    SendFlags = 1 << 3
)

// SGE is a scatter/gather element: Length bytes at Addr in the MR of Lkey.
type SGE struct {
	Addr   uint64
	Length uint32
	Lkey   uint32
}

// SendWR is a send work request, as ibv_send_wr.
type SendWR struct {
	WRID   uint64
	Opcode Opcode
	Flags  SendFlags
	SGL    []SGE
	// InlineData carries the payload of an Inline request (instead of SGL).
	InlineData []byte
	ImmData    uint32 // host-order immediate value
	// InvalidateRkey is the key SEND_WITH_INV invalidates at the responder,
	// and the key LOCAL_INV invalidates locally.
	InvalidateRkey uint32
	// RDMA and atomic
	RemoteAddr uint64
	Rkey       uint32
	CompareAdd uint64
	Swap       uint64
	// UD
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
	// BIND_MW
	Bind *BindWR
	// REG_MR
	Reg *RegWR
}

// BindWR describes a type-2 memory window bind work request.
type BindWR struct {
	MW     *keys.MW
	MR     *keys.MR
	Addr   uint64
	Length uint64
	Access keys.Access
	Key    uint8 // new key byte of the window's rkey
}

// RegWR describes a fast-register work request (the kernel's IB_WR_REG_MR).
type RegWR struct {
	MR     *keys.MR
	Key    uint8
	Access keys.Access
	// Map, if set, is the page list the WR maps before registering (the
	// MR's MapPages or MapAccessorPages when the WR executes, in order with
	// the send queue's LOCAL_INVs); nil registers what the MR has.
	Map *PageMap
}

// PageMap is a fast-register page list: Pages (slices), or Addrs of
// memory reached through Acc; the region is Length bytes at IOVA.
type PageMap struct {
	Pages    [][]byte
	Acc      keys.Accessor
	Addrs    []uint64
	PageSize int
	IOVA     uint64
	Length   uint64
}

// RecvWR is a receive work request, as ibv_recv_wr.
type RecvWR struct {
	WRID uint64
	SGL  []SGE
}
