package transport

import (
	"errors"
	"strconv"
)

// DropReason says why a received packet was dropped. The receive path counts
// drops by reason; the zero value means "not dropped".
type DropReason uint8

// Drop reasons. Parse returns the first five kinds; the others are for the
// receive path and the engines.
const (
	DropNone         DropReason = iota
	DropTruncated               // shorter than its headers
	DropBadOpcode               // opcode not supported
	DropBadVersion              // BTH TVer is not 0
	DropBadPad                  // pad count larger than the payload, or pad on a FIRST/MIDDLE packet
	DropBadLength               // payload not allowed, missing, or not a multiple of 4 with pad
	DropBadICRC                 // invariant CRC mismatch
	DropBadPKey                 // P_Key does not match the QP's partition
	DropUnknownQP               // no QP with that number (or multicast group)
	DropBadQKey                 // UD Q_Key mismatch
	DropQPType                  // opcode class does not match the QP type
	DropQPState                 // QP not in a state that accepts the packet
	DropBadHeader               // Ethernet, IP or UDP framing is invalid
	DropNotSupported            // recognised but not handled (CNP, RD, XRC)
	DropNotLocal                // destination IP is not one of the port's GIDs
	DropBadSource               // source address is not the connected QP's peer
	NumDropReasons
)

// String names the reason, e.g. "bad ICRC".
func (r DropReason) String() string {
	switch r {
	case DropNone:
		return "none"
	case DropTruncated:
		return "truncated"
	case DropBadOpcode:
		return "bad opcode"
	case DropBadVersion:
		return "bad header version"
	case DropBadPad:
		return "bad pad count"
	case DropBadLength:
		return "bad length"
	case DropBadICRC:
		return "bad ICRC"
	case DropBadPKey:
		return "bad P_Key"
	case DropUnknownQP:
		return "unknown QP"
	case DropBadQKey:
		return "bad Q_Key"
	case DropQPType:
		return "opcode not valid for QP type"
	case DropQPState:
		return "QP state"
	case DropBadHeader:
		return "bad lower-layer header"
	case DropNotLocal:
		return "not addressed to this port"
	case DropBadSource:
		return "source is not the QP's peer"
	case DropNotSupported:
		return "not supported"
	}
	return "drop reason " + strconv.Itoa(int(r))
}

// Name is the reason in snake case ("bad ICRC" is "bad_icrc"), the form
// counters and metrics use: a name with no spaces or capitals.
func (r DropReason) Name() string {
	b := []byte(r.String())
	for i, c := range b {
		switch {
		case c >= 'A' && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// DropError is the error that carries a drop reason. Get the reason back
// with errors.As or DropReasonOf.
type DropError struct {
	Reason DropReason
}

// Error returns "packet dropped: " and the reason.
func (e *DropError) Error() string { return "packet dropped: " + e.Reason.String() }

// dropErrors holds one preallocated error per reason, so that the data path
// can return an error without allocating.
var dropErrors = func() (a [NumDropReasons]DropError) {
	for i := range a {
		a[i].Reason = DropReason(i)
	}
	return a
}()

// Err returns the (shared, preallocated) error for the reason, or nil for
// DropNone.
func (r DropReason) Err() error {
	if r == DropNone {
		return nil
	}
	if r >= NumDropReasons {
		return &DropError{Reason: r}
	}
	return &dropErrors[r]
}

// DropReasonOf returns the drop reason carried by err, DropNone if err is
// nil, and false if err carries none.
func DropReasonOf(err error) (DropReason, bool) {
	if err == nil {
		return DropNone, true
	}
	var de *DropError
	if errors.As(err, &de) {
		return de.Reason, true
	}
	return DropNone, false
}

// Packet is a received (or built) packet, parsed once. Buf runs from the BTH
// to the end of the pad; the ICRC is not part of it. The header views alias
// Buf.
type Packet struct {
	Buf    []byte  // BTH .. end of payload and pad
	Info   *OpInfo // the opcode's table entry, never nil after Parse succeeds
	Opcode Opcode
	PSN    PSN
	DestQP uint32
	PKey   uint16

	AckReq   bool
	SE       bool
	MigReq   bool
	FECN     bool
	BECN     bool
	PadCount uint8

	HdrLen     uint16 // BTH plus extension headers; the payload starts here
	PayloadLen uint32 // payload bytes, pad excluded

	// ext holds the payload when it is not in Buf: on the loopback fast
	// path the responder copies straight from the requester's memory.
	ext []byte
	// span is how many PSNs the packet stands for: on the loopback fast
	// path up to a window of a message's packets travel as one burst
	// (ONLY when it holds the whole message, else FIRST, MIDDLE or LAST),
	// and a READ's responses as one ONLY burst, covering PSN ..
	// PSN+span-1. 0 means 1.
	span uint32
	// placed says the payload is in the responder's memory already
	// (Conn.placeFused).
	placed bool
}

// PSNs returns how many PSNs the packet covers: 1, or a loopback burst's.
func (p *Packet) PSNs() uint32 { return max(p.span, 1) }

// LastPSN returns the last PSN the packet covers.
func (p *Packet) LastPSN() PSN { return p.PSN.Add(p.PSNs() - 1) }

// BTH returns the base transport header.
func (p *Packet) BTH() BTH { return BTH(p.Buf[:BTHLen]) }

// hdr returns the view of h, or nil if the opcode does not carry it.
func (p *Packet) hdr(h Hdr) []byte {
	off := p.Info.Offset(h)
	if off == 0 {
		return nil
	}
	return p.Buf[off : off+h.Len() : off+h.Len()]
}

// RETH returns the RETH, or nil if the opcode carries none.
func (p *Packet) RETH() RETH { return RETH(p.hdr(HdrRETH)) }

// AETH returns the AETH, or nil if the opcode carries none.
func (p *Packet) AETH() AETH { return AETH(p.hdr(HdrAETH)) }

// AtomicETH returns the AtomicETH, or nil if the opcode carries none.
func (p *Packet) AtomicETH() AtomicETH { return AtomicETH(p.hdr(HdrAtomicETH)) }

// AtomicAckETH returns the AtomicAckETH, or nil if the opcode carries none.
func (p *Packet) AtomicAckETH() AtomicAckETH { return AtomicAckETH(p.hdr(HdrAtomicAckETH)) }

// DETH returns the DETH, or nil if the opcode carries none.
func (p *Packet) DETH() DETH { return DETH(p.hdr(HdrDETH)) }

// ImmDt returns the immediate data header, or nil if the opcode carries none.
func (p *Packet) ImmDt() ImmDt { return ImmDt(p.hdr(HdrImmDt)) }

// IETH returns the IETH, or nil if the opcode carries none.
func (p *Packet) IETH() IETH { return IETH(p.hdr(HdrIETH)) }

// PayloadOffset returns the offset of the payload in Buf.
func (p *Packet) PayloadOffset() int { return int(p.HdrLen) }

// Payload returns the payload without the pad bytes.
func (p *Packet) Payload() []byte {
	if p.ext != nil {
		return p.ext
	}
	end := int(p.HdrLen) + int(p.PayloadLen)
	return p.Buf[p.HdrLen:end:end]
}

// Parse validates b, the bytes from the BTH to the end of the pad (ICRC
// excluded), and fills p. It checks that the opcode is supported, the
// header version is 0, b holds every header the opcode carries, the pad
// fits in the payload, and the payload obeys the opcode: none for requests
// and ACKs that carry none, at least one byte in FIRST, MIDDLE and LAST
// packets, no pad in FIRST and MIDDLE packets (whose payload is a whole
// MTU), and payload plus pad a multiple of four. It does not check the
// payload against the path MTU, nor anything that needs QP state.
//
// On failure it returns an error carrying a DropReason (see DropReasonOf)
// and leaves p unspecified. Parse does not allocate.
func Parse(b []byte, p *Packet) error {
	if len(b) < BTHLen {
		return DropTruncated.Err()
	}
	bth := BTH(b)
	info := &opTable[bth.Opcode()]
	if !info.valid {
		return DropBadOpcode.Err()
	}
	if bth.TVer() != 0 {
		return DropBadVersion.Err()
	}
	if len(b) < info.HdrLen {
		return DropTruncated.Err()
	}
	rest := len(b) - info.HdrLen // payload and pad
	pad := int(bth.PadCount())
	if pad > rest {
		return DropBadPad.Err()
	}
	payload := rest - pad
	switch {
	case rest%4 != 0:
		return DropBadLength.Err()
	case info.Flags&FlagPayload == 0 && rest != 0:
		return DropBadLength.Err()
	case info.Flags&(FlagFirst|FlagMiddle) != 0 && pad != 0:
		return DropBadPad.Err()
	case info.Flags&(FlagFirst|FlagMiddle|FlagLast) != 0 && payload == 0:
		return DropBadLength.Err()
	}
	fill(p, b, info, uint8(pad), uint32(payload))
	return nil
}

// fillBuilt writes the descriptor of a packet the engines built for the
// loopback fast path, without Parse's checks: b is the BTH through the pad,
// or the headers only when ext holds the payload in place; span is as for
// Packet.span. The builders are the ones whose packets go on the wire and
// are parsed, checks and all, at the other end; here nothing but their own
// output arrives.
func fillBuilt(p *Packet, b, ext []byte, span uint32) {
	bth := BTH(b)
	info := &opTable[bth.Opcode()]
	pad := bth.PadCount()
	fill(p, b, info, pad, builtPayload(b, ext, info, pad))
	p.setBurst(ext, span)
}

// builtPayload is the payload length of a packet built in b by this
// device's requester or responder: b through the pad, or with ext (a
// loopback burst's payload, in place) the headers only.
func builtPayload(b, ext []byte, info *OpInfo, pad uint8) uint32 {
	if ext != nil {
		return uint32(len(ext))
	}
	return uint32(len(b) - info.HdrLen - int(pad))
}

// setBurst records a built packet's payload held apart (ext, if any) and
// the PSNs it stands for (span).
func (p *Packet) setBurst(ext []byte, span uint32) {
	if len(ext) == 0 {
		ext = nil
	}
	p.ext, p.span = ext, span
}

// fill writes the descriptor of a validated packet whose headers start b.
// It stores field by field: a composite literal is built on the stack and
// copied over in 16-byte moves, which stall on the small stores just made
// (store forwarding fails), and that was most of fill's cost.
func fill(p *Packet, b []byte, info *OpInfo, pad uint8, payload uint32) {
	bth := BTH(b)
	p.Buf = b
	p.Info = info
	p.Opcode = info.Op
	p.PSN = bth.PSN()
	p.DestQP = bth.DestQP()
	p.PKey = bth.PKey()
	p.AckReq = bth.AckReq()
	p.SE = bth.SE()
	p.MigReq = bth.MigReq()
	p.FECN = bth.FECN()
	p.BECN = bth.BECN()
	p.PadCount = pad
	p.HdrLen = uint16(info.HdrLen)
	p.PayloadLen = payload
	p.ext = nil
	p.span = 0
	p.placed = false
}
