package transport

// opTable describes every opcode. It is built once from opDefs; offsets and
// lengths are derived from the header lists, never written by hand.
var opTable = buildOpTable(opDefs())

// opDef is one line of the declarative opcode list.
type opDef struct {
	op    Opcode
	name  string // without the class prefix
	flags OpFlags
	hdrs  []Hdr // extension headers in wire order
}

// opDefs is the IBTA opcode list (vol. 1 table 38, annex A17 for CNP).
func opDefs() []opDef {
	const (
		req   = FlagRequest
		resp  = FlagResponse
		send  = FlagSend
		write = FlagWrite
		read  = FlagRead
		first = FlagFirst
		mid   = FlagMiddle
		last  = FlagLast
		only  = FlagOnly
	)
	h := func(hs ...Hdr) []Hdr { return hs }
	// Sends and writes exist on RC and UC with the same low five bits.
	sendWrite := []opDef{
		{0x00, "SEND_FIRST", req | send | first, nil},
		{0x01, "SEND_MIDDLE", req | send | mid, nil},
		{0x02, "SEND_LAST", req | send | last, nil},
		{0x03, "SEND_LAST_WITH_IMMEDIATE", req | send | last | FlagImm, h(HdrImmDt)},
		{0x04, "SEND_ONLY", req | send | only, nil},
		{0x05, "SEND_ONLY_WITH_IMMEDIATE", req | send | only | FlagImm, h(HdrImmDt)},
		{0x06, "RDMA_WRITE_FIRST", req | write | first, h(HdrRETH)},
		{0x07, "RDMA_WRITE_MIDDLE", req | write | mid, nil},
		{0x08, "RDMA_WRITE_LAST", req | write | last, nil},
		{0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", req | write | last | FlagImm, h(HdrImmDt)},
		{0x0A, "RDMA_WRITE_ONLY", req | write | only, h(HdrRETH)},
		{0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", req | write | only | FlagImm, h(HdrRETH, HdrImmDt)},
	}
	rcOnly := []opDef{
		{0x0C, "RDMA_READ_REQUEST", req | read | only, h(HdrRETH)},
		{0x0D, "RDMA_READ_RESPONSE_FIRST", resp | read | first, h(HdrAETH)},
		{0x0E, "RDMA_READ_RESPONSE_MIDDLE", resp | read | mid, nil},
		{0x0F, "RDMA_READ_RESPONSE_LAST", resp | read | last, h(HdrAETH)},
		{0x10, "RDMA_READ_RESPONSE_ONLY", resp | read | only, h(HdrAETH)},
		{0x11, "ACKNOWLEDGE", resp | only, h(HdrAETH)},
		{0x12, "ATOMIC_ACKNOWLEDGE", resp | FlagAtomic | only, h(HdrAETH, HdrAtomicAckETH)},
		{0x13, "COMPARE_SWAP", req | FlagAtomic | only, h(HdrAtomicETH)},
		{0x14, "FETCH_ADD", req | FlagAtomic | only, h(HdrAtomicETH)},
		{0x16, "SEND_LAST_WITH_INVALIDATE", req | send | last | FlagInv, h(HdrIETH)},
		{0x17, "SEND_ONLY_WITH_INVALIDATE", req | send | only | FlagInv, h(HdrIETH)},
	}
	var defs []opDef
	add := func(class QPClass, list []opDef) {
		for _, d := range list {
			d.op |= Opcode(class)
			d.name = class.String() + " " + d.name
			defs = append(defs, d)
		}
	}
	add(ClassRC, sendWrite)
	add(ClassRC, rcOnly)
	add(ClassUC, sendWrite)
	add(ClassUD, []opDef{
		{0x04, "SEND_ONLY", req | send | only, h(HdrDETH)},
		{0x05, "SEND_ONLY_WITH_IMMEDIATE", req | send | only | FlagImm, h(HdrDETH, HdrImmDt)},
	})
	defs = append(defs, opDef{CNP, "CNP", FlagCNP, h(HdrCNPResv)})
	return defs
}

// buildOpTable fills the 256 entries from defs and derives the flags and
// offsets that follow from each definition. It panics on a malformed list,
// which TestOpTable catches.
func buildOpTable(defs []opDef) (t [256]OpInfo) {
	for _, d := range defs {
		e := &t[d.op]
		if e.valid {
			panic("transport: opcode " + d.name + " defined twice")
		}
		if len(d.hdrs) > maxOpHdrs {
			panic("transport: opcode " + d.name + " has too many headers")
		}
		f := d.flags
		if f&(FlagFirst|FlagOnly) != 0 {
			f |= FlagStart
		}
		if f&(FlagLast|FlagOnly) != 0 {
			f |= FlagEnd
		}
		if f&(FlagSend|FlagWrite) != 0 && f&FlagRequest != 0 || f&(FlagRead|FlagResponse) == FlagRead|FlagResponse {
			f |= FlagPayload
		}
		// A send takes a receive WQE when it starts and completes it when it
		// ends; an RDMA WRITE with immediate takes and completes one at its
		// last (or only) packet.
		if f&(FlagSend|FlagRequest) == FlagSend|FlagRequest {
			if f&FlagStart != 0 {
				f |= FlagRecvWQE
			}
			if f&FlagEnd != 0 {
				f |= FlagCompletesRecv
			}
		}
		if f&(FlagWrite|FlagImm|FlagEnd) == FlagWrite|FlagImm|FlagEnd {
			f |= FlagRecvWQE | FlagCompletesRecv
		}
		*e = OpInfo{Name: d.name, Op: d.op, Flags: f, HdrLen: BTHLen, valid: true}
		for _, h := range d.hdrs {
			e.off[h] = uint8(e.HdrLen)
			e.hdrs[e.nhdrs] = h
			e.nhdrs++
			e.HdrLen += h.Len()
		}
	}
	return t
}
