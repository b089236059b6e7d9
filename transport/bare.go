package transport

// Loopback requests without a BTH (issue 19).
//
// On the loopback fast path (route.fast: both QPs on this device) a
// request never leaves the process: the responder reads the packet's
// descriptor (Packet), which the requester filled by parsing the BTH it
// had just written (fillBuilt). The requester fills the descriptor
// directly instead, from what it would have written (fillBare): the
// opcode, the PSN, the destination QP, the AckReq and SE bits and the pad;
// the BTH's bytes stay unwritten. The extension headers the responder
// reads from the packet's bytes (RETH, AtomicETH, ImmDt, IETH) are
// written as before, and the payload travels as before (in place, or
// copied behind the headers). What the responder does with the request
// is the packet path itself: every check, NAK, counter and completion
// stays what it was, for the descriptor is the one the parse made.
// SetLoopbackRequestHeaders(true) writes and parses the BTH again, for
// tests that compare the two (rvt's TestLoopbackACKHandOff*).

// SetLoopbackRequestHeaders makes requests to QPs on this device carry a
// BTH that the packet's descriptor is parsed from, as over a link, instead
// of a descriptor filled directly (bare.go); false, the default, fills it.
// For tests and measurements that compare the two.
func (e *Engine) SetLoopbackRequestHeaders(on bool) { e.reqHeaders.Store(on) }

// bareBTH is what a loopback request's BTH would say (see fillBare).
type bareBTH struct {
	info   *OpInfo
	psn    PSN
	destQP uint32
	ackReq bool
	se     bool
	pad    uint8
}

// fillBare is fillBuilt for a request whose BTH is h, not written in b:
// the same descriptor, field for field (the P_Key is the default one;
// MigReq, FECN and BECN are clear, as BTH.Init leaves them).
func fillBare(p *Packet, b, ext []byte, span uint32, h *bareBTH) {
	info := h.info
	payload := builtPayload(b, ext, info, h.pad)
	p.Buf = b
	p.Info = info
	p.Opcode = info.Op
	p.PSN = h.psn & PSNMask
	p.DestQP = h.destQP & 0xFFFFFF
	p.PKey = DefaultPKey
	p.AckReq = h.ackReq
	p.SE = h.se
	p.MigReq = false
	p.FECN = false
	p.BECN = false
	p.PadCount = h.pad & 3
	p.HdrLen = uint16(info.HdrLen)
	p.PayloadLen = payload
	p.setBurst(ext, span)
}

// xmitBare is xmitSpan for a loopback request built in pb without its
// BTH: ib bytes from the BTH's place through the pad, ext and span as for
// xmitSpan.
func (e *Engine) xmitBare(c *Conn, r *route, pb *pktBuf, ib int, ext []byte, span uint32, h *bareBTH) {
	pb.own = pb.own[:ib]
	fillBare(&pb.pkt, pb.own, ext, span, h)
	e.loop(c, r, pb, span)
}
