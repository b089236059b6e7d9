package transport

import (
	"math/bits"
	"strconv"
	"time"
)

// Well-known RoCEv2 and IBTA values.
const (
	RoCEv2Port  = 4791       // UDP destination port of RoCEv2
	DefaultPKey = 0xFFFF     // full-membership default partition key
	GSIQKey     = 0x80010000 // Q_Key of the general services interface (QP1)
	GSIQPN      = 1          // QP number of the GSI
	// PKeyFullMember is the membership bit of a P_Key; two keys match when
	// their low 15 bits are equal and at least one is a full member.
	PKeyFullMember = 0x8000
)

// Syndrome is the AETH syndrome byte:
//
//	bit 7      reserved (0)
//	bits 6-5   00 ACK, 01 RNR NAK, 10 reserved, 11 NAK
//	bits 4-0   ACK: credit code; RNR NAK: RNR timer code; NAK: NAK code
type Syndrome uint8

// AckType is the kind of acknowledgement a syndrome carries (bits 6-5).
type AckType uint8

// Acknowledgement kinds.
const (
	AckTypeACK      AckType = 0
	AckTypeRNRNAK   AckType = 1
	AckTypeReserved AckType = 2
	AckTypeNAK      AckType = 3
)

const (
	syndromeTypeShift = 5
	syndromeTypeMask  = 0x60
	syndromeValueMask = 0x1F
	syndromeResvMask  = 0x80
)

// String returns "ACK", "RNR NAK", "NAK" or "reserved".
func (t AckType) String() string {
	switch t {
	case AckTypeACK:
		return "ACK"
	case AckTypeRNRNAK:
		return "RNR NAK"
	case AckTypeNAK:
		return "NAK"
	}
	return "reserved"
}

// NAKCode is the low five bits of a NAK syndrome.
type NAKCode uint8

// NAK codes (IBTA table 44).
const (
	NAKPSNSeqError            NAKCode = 0
	NAKInvalidRequest         NAKCode = 1
	NAKRemoteAccessError      NAKCode = 2
	NAKRemoteOperationalError NAKCode = 3
	NAKInvalidRDRequest       NAKCode = 4
)

// String names the NAK code.
func (c NAKCode) String() string {
	switch c {
	case NAKPSNSeqError:
		return "PSN sequence error"
	case NAKInvalidRequest:
		return "invalid request"
	case NAKRemoteAccessError:
		return "remote access error"
	case NAKRemoteOperationalError:
		return "remote operational error"
	case NAKInvalidRDRequest:
		return "invalid RD request"
	}
	return "reserved NAK code " + strconv.Itoa(int(c))
}

// ACKSyndrome returns the syndrome of a positive ACK carrying credit code c.
func ACKSyndrome(c CreditCode) Syndrome {
	return Syndrome(AckTypeACK)<<syndromeTypeShift | Syndrome(c)&syndromeValueMask
}

// RNRNAKSyndrome returns the syndrome of an RNR NAK with timer code t.
func RNRNAKSyndrome(t RNRTimerCode) Syndrome {
	return Syndrome(AckTypeRNRNAK)<<syndromeTypeShift | Syndrome(t)&syndromeValueMask
}

// NAKSyndrome returns the syndrome of a NAK with code c.
func NAKSyndrome(c NAKCode) Syndrome {
	return Syndrome(AckTypeNAK)<<syndromeTypeShift | Syndrome(c)&syndromeValueMask
}

// Type returns the acknowledgement kind.
func (s Syndrome) Type() AckType { return AckType(s&syndromeTypeMask) >> syndromeTypeShift }

// Value returns the low five bits (credit, timer or NAK code).
func (s Syndrome) Value() uint8 { return uint8(s & syndromeValueMask) }

// Credits returns the credit code of an ACK syndrome.
func (s Syndrome) Credits() CreditCode { return CreditCode(s.Value()) }

// RNRTimer returns the timer code of an RNR NAK syndrome.
func (s Syndrome) RNRTimer() RNRTimerCode { return RNRTimerCode(s.Value()) }

// NAKCode returns the code of a NAK syndrome.
func (s Syndrome) NAKCode() NAKCode { return NAKCode(s.Value()) }

// Valid reports whether the syndrome is one a responder may send: reserved
// bit clear, kind not reserved, and for a NAK a defined code.
func (s Syndrome) Valid() bool {
	if s&syndromeResvMask != 0 {
		return false
	}
	switch s.Type() {
	case AckTypeACK, AckTypeRNRNAK:
		return true
	case AckTypeNAK:
		return s.NAKCode() <= NAKInvalidRDRequest
	}
	return false
}

// String describes the syndrome, e.g. "ACK credits=31" or "NAK (PSN sequence error)".
func (s Syndrome) String() string {
	if s&syndromeResvMask != 0 {
		return "invalid syndrome 0x" + strconv.FormatUint(uint64(s), 16)
	}
	switch s.Type() {
	case AckTypeACK:
		return "ACK credits=" + strconv.Itoa(int(s.Value()))
	case AckTypeRNRNAK:
		return "RNR NAK timer=" + strconv.Itoa(int(s.Value()))
	case AckTypeNAK:
		return "NAK (" + s.NAKCode().String() + ")"
	}
	return "reserved syndrome 0x" + strconv.FormatUint(uint64(s), 16)
}

// CreditCode is the 5-bit end-to-end flow-control credit count of an ACK
// (IBTA table 46). Codes 0-30 advertise a number of receive WQEs; 31 means
// the credit count is invalid, which requesters treat as unlimited.
type CreditCode uint8

// CreditInvalid is the credit code meaning "no credit information"
// (unlimited), as Linux rxe always sends.
const CreditInvalid CreditCode = 31

// creditCounts is IBTA table 46: the number of credits of codes 0-30.
var creditCounts = [CreditInvalid]uint32{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// Credits returns the number of credits code c stands for; ok is false for
// CreditInvalid (unlimited) and for codes above 31 that cannot be encoded.
func (c CreditCode) Credits() (n uint32, ok bool) {
	if c >= CreditInvalid {
		return 0, false
	}
	return creditCounts[c], true
}

// CreditCodeFor returns the largest credit code whose count does not exceed
// free, the number of receive WQEs available.
//
// The table is 0-3, then 2^k (code 2k) and 3*2^(k-1) (code 2k+1) up to
// 32768 (code 30), so the code follows from the top two bits of free: a
// responder works it out for every ACK, and a search of the table cost a
// loop of up to 31 compares.
func CreditCodeFor(free uint32) CreditCode {
	if free < 4 {
		return CreditCode(free)
	}
	if free >= 32768 {
		return 30
	}
	k := bits.Len32(free) - 1 // 2^k <= free < 2^(k+1), 2 <= k <= 14
	c := CreditCode(2 * k)
	if free>>(k-1)&1 != 0 { // free >= 3*2^(k-1)
		c++
	}
	return c
}

// RNRTimerCode is the 5-bit minimum RNR NAK timer field (IBTA table 45).
type RNRTimerCode uint8

// rnrTimerMicros is IBTA table 45 in microseconds; code 0 is the longest.
var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// Duration returns how long a requester waits after an RNR NAK with this
// code; only the low five bits of c are used.
func (c RNRTimerCode) Duration() time.Duration {
	return time.Duration(rnrTimerMicros[c&syndromeValueMask]) * time.Microsecond
}
