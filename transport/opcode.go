package transport

import "strconv"

// Opcode is the BTH opcode. Its top three bits name the transport (RC, UC,
// RD, UD, CNP, ...) and the low five bits the operation.
type Opcode uint8

// RC opcodes (IBTA table 38).
const (
	RCSendFirst          Opcode = 0x00
	RCSendMiddle         Opcode = 0x01
	RCSendLast           Opcode = 0x02
	RCSendLastImm        Opcode = 0x03
	RCSendOnly           Opcode = 0x04
	RCSendOnlyImm        Opcode = 0x05
	RCWriteFirst         Opcode = 0x06
	RCWriteMiddle        Opcode = 0x07
	RCWriteLast          Opcode = 0x08
	RCWriteLastImm       Opcode = 0x09
	RCWriteOnly          Opcode = 0x0A
	RCWriteOnlyImm       Opcode = 0x0B
	RCReadRequest        Opcode = 0x0C
	RCReadResponseFirst  Opcode = 0x0D
	RCReadResponseMiddle Opcode = 0x0E
	RCReadResponseLast   Opcode = 0x0F
	RCReadResponseOnly   Opcode = 0x10
	RCAck                Opcode = 0x11
	RCAtomicAck          Opcode = 0x12
	RCCompareSwap        Opcode = 0x13
	RCFetchAdd           Opcode = 0x14
	RCSendLastInv        Opcode = 0x16
	RCSendOnlyInv        Opcode = 0x17
)

// UC opcodes: sends and RDMA writes only.
const (
	UCSendFirst    Opcode = 0x20
	UCSendMiddle   Opcode = 0x21
	UCSendLast     Opcode = 0x22
	UCSendLastImm  Opcode = 0x23
	UCSendOnly     Opcode = 0x24
	UCSendOnlyImm  Opcode = 0x25
	UCWriteFirst   Opcode = 0x26
	UCWriteMiddle  Opcode = 0x27
	UCWriteLast    Opcode = 0x28
	UCWriteLastImm Opcode = 0x29
	UCWriteOnly    Opcode = 0x2A
	UCWriteOnlyImm Opcode = 0x2B
)

// UD opcodes.
const (
	UDSendOnly    Opcode = 0x64
	UDSendOnlyImm Opcode = 0x65
)

// CNP is the RoCEv2 congestion notification packet (annex A17): a BTH and 16
// reserved bytes, sent by a notification point to the sender of ECN-marked
// traffic.
const CNP Opcode = 0x81

const opcodeClassMask = 0xE0

// QPClass is the transport an opcode belongs to: its top three bits.
type QPClass uint8

// Opcode classes. Only RC, UC and UD carry data here; RD and XRC are not
// supported, CNP is recognised so that it can be counted and dropped.
const (
	ClassRC  QPClass = 0x00
	ClassUC  QPClass = 0x20
	ClassRD  QPClass = 0x40
	ClassUD  QPClass = 0x60
	ClassCNP QPClass = 0x80
	ClassXRC QPClass = 0xA0
)

// String returns "RC", "UC", "RD", "UD", "CNP", "XRC" or "vendor".
func (c QPClass) String() string {
	switch c {
	case ClassRC:
		return "RC"
	case ClassUC:
		return "UC"
	case ClassRD:
		return "RD"
	case ClassUD:
		return "UD"
	case ClassCNP:
		return "CNP"
	case ClassXRC:
		return "XRC"
	}
	return "vendor"
}

// Class returns the transport class of the opcode.
func (o Opcode) Class() QPClass { return QPClass(o & opcodeClassMask) }

// Info returns the opcode's table entry. It is never nil; for an opcode this
// package does not support, Info().Valid() is false. The entry is shared
// and must not be modified.
func (o Opcode) Info() *OpInfo { return &opTable[o] }

// Valid reports whether the opcode is one this package handles.
func (o Opcode) Valid() bool { return opTable[o].valid }

// String returns the IBTA-style name, e.g. "RC SEND_FIRST", or
// "opcode 0x15" for an unsupported one.
func (o Opcode) String() string {
	if opTable[o].valid {
		return opTable[o].Name
	}
	s := strconv.FormatUint(uint64(o), 16)
	if len(s) < 2 {
		s = "0" + s
	}
	return "opcode 0x" + s
}

// Hdr names an extension header that may follow the BTH.
type Hdr uint8

// Extension headers.
const (
	HdrRETH Hdr = iota
	HdrAETH
	HdrAtomicETH
	HdrAtomicAckETH
	HdrDETH
	HdrImmDt
	HdrIETH
	HdrCNPResv // 16 reserved bytes of a RoCEv2 CNP
	numHdrs
)

// Len returns the header's length in bytes.
func (h Hdr) Len() int {
	switch h {
	case HdrRETH:
		return RETHLen
	case HdrAETH:
		return AETHLen
	case HdrAtomicETH:
		return AtomicETHLen
	case HdrAtomicAckETH:
		return AtomicAckETHLen
	case HdrDETH:
		return DETHLen
	case HdrImmDt:
		return ImmDtLen
	case HdrIETH:
		return IETHLen
	case HdrCNPResv:
		return CNPResvLen
	}
	return 0
}

// String returns the IBTA name of the header.
func (h Hdr) String() string {
	switch h {
	case HdrRETH:
		return "RETH"
	case HdrAETH:
		return "AETH"
	case HdrAtomicETH:
		return "AtomicETH"
	case HdrAtomicAckETH:
		return "AtomicAckETH"
	case HdrDETH:
		return "DETH"
	case HdrImmDt:
		return "ImmDt"
	case HdrIETH:
		return "IETH"
	case HdrCNPResv:
		return "CNPResv"
	}
	return "Hdr(" + strconv.Itoa(int(h)) + ")"
}

// OpFlags says what an opcode means. Engines ask info.Has(FlagLast) rather
// than switching on opcodes.
type OpFlags uint32

// Opcode meaning flags. Start, End, Payload, RecvWQE and CompletesRecv are
// derived from the others when the table is built.
const (
	FlagRequest       OpFlags = 1 << iota // requester to responder
	FlagResponse                          // responder to requester: ACK, atomic ACK, read response
	FlagFirst                             // first packet of a multi-packet message
	FlagMiddle                            // middle packet
	FlagLast                              // last packet of a multi-packet message
	FlagOnly                              // the message's only packet
	FlagStart                             // First or Only: the packet starts a message
	FlagEnd                               // Last or Only: the packet ends a message
	FlagSend                              // part of a SEND
	FlagWrite                             // part of an RDMA WRITE
	FlagRead                              // RDMA READ request or response
	FlagAtomic                            // atomic request or atomic ACK
	FlagImm                               // carries immediate data
	FlagInv                               // carries an R_Key to invalidate
	FlagPayload                           // may carry payload after its headers
	FlagRecvWQE                           // the responder takes a receive WQE at this packet
	FlagCompletesRecv                     // the responder completes the receive WQE at this packet
	FlagCNP                               // congestion notification
)

// maxOpHdrs is the most extension headers any opcode carries.
const maxOpHdrs = 2

// OpInfo is one entry of the opcode table. Entries are shared; treat them
// as read-only.
type OpInfo struct {
	Name   string  // IBTA-style name, "RC RDMA_WRITE_ONLY_WITH_IMMEDIATE"
	Op     Opcode  // the opcode itself
	Flags  OpFlags // meaning
	HdrLen int     // BTH plus extension headers, in bytes

	valid bool
	nhdrs uint8
	hdrs  [maxOpHdrs]Hdr
	off   [numHdrs]uint8 // offset from the BTH start; 0 = absent
}

// Valid reports whether the entry describes a supported opcode.
func (i *OpInfo) Valid() bool { return i.valid }

// Has reports whether every flag in f is set.
func (i *OpInfo) Has(f OpFlags) bool { return i.Flags&f == f }

// HasAny reports whether at least one flag in f is set.
func (i *OpInfo) HasAny(f OpFlags) bool { return i.Flags&f != 0 }

// HasHdr reports whether the opcode carries extension header h.
func (i *OpInfo) HasHdr(h Hdr) bool { return h < numHdrs && i.off[h] != 0 }

// Offset returns the offset of extension header h from the start of the
// BTH, or 0 if the opcode does not carry it.
func (i *OpInfo) Offset(h Hdr) int {
	if h >= numHdrs {
		return 0
	}
	return int(i.off[h])
}

// Headers returns the extension headers in wire order. The slice aliases
// the table; do not modify it.
func (i *OpInfo) Headers() []Hdr { return i.hdrs[:i.nhdrs] }
