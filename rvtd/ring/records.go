package ring

import "encoding/binary"

var le = binary.LittleEndian

// Record sizes (docs/rvtd-protocol.md, section 7).
const (
	SendHeaderSize = 64
	RecvHeaderSize = 16
	SGESize        = 16
	CQESize        = 64
)

// SendStride is the send ring's stride for a QP's capacities.
func SendStride(maxSGE, maxInline uint32) uint32 {
	n := max(maxSGE, (maxInline+SGESize-1)/SGESize)
	return RoundStride(SendHeaderSize+SGESize*n, 128)
}

// RecvStride is a receive ring's (or SRQ's) stride.
func RecvStride(maxSGE uint32) uint32 {
	return RoundStride(RecvHeaderSize+SGESize*maxSGE, 32)
}

// SGE is one scatter/gather element in a record: struct ibv_sge.
type SGE []byte

func (s SGE) Addr() uint64       { return le.Uint64(s[0:]) }
func (s SGE) Length() uint32     { return le.Uint32(s[8:]) }
func (s SGE) LKey() uint32       { return le.Uint32(s[12:]) }
func (s SGE) SetAddr(v uint64)   { le.PutUint64(s[0:], v) }
func (s SGE) SetLength(v uint32) { le.PutUint32(s[8:], v) }
func (s SGE) SetLKey(v uint32)   { le.PutUint32(s[12:], v) }
func (s SGE) Set(addr uint64, length, lkey uint32) {
	s.SetAddr(addr)
	s.SetLength(length)
	s.SetLKey(lkey)
}

// SendWQE is a view of a send record (a ring slot, or the daemon's copy of
// one). Accessors do not check: a reader validates NumSGE and InlineLen
// against the record's length before SGE or Inline.
type SendWQE []byte

func (w SendWQE) WRID() uint64           { return le.Uint64(w[0:]) }
func (w SendWQE) SendFlags() uint32      { return le.Uint32(w[8:]) }
func (w SendWQE) Opcode() uint8          { return w[12] }
func (w SendWQE) NumSGE() uint8          { return w[13] }
func (w SendWQE) InlineLen() uint16      { return le.Uint16(w[14:]) }
func (w SendWQE) ImmData() uint32        { return binary.BigEndian.Uint32(w[16:]) } // the immediate's value
func (w SendWQE) InvalidateRKey() uint32 { return le.Uint32(w[16:]) }
func (w SendWQE) RKey() uint32           { return le.Uint32(w[20:]) }
func (w SendWQE) RemoteAddr() uint64     { return le.Uint64(w[24:]) }
func (w SendWQE) CompareAdd() uint64     { return le.Uint64(w[32:]) }
func (w SendWQE) Swap() uint64           { return le.Uint64(w[40:]) }
func (w SendWQE) AH() uint32             { return le.Uint32(w[48:]) }
func (w SendWQE) RemoteQPN() uint32      { return le.Uint32(w[52:]) }
func (w SendWQE) RemoteQKey() uint32     { return le.Uint32(w[56:]) }
func (w SendWQE) Reserved() uint32       { return le.Uint32(w[60:]) }

func (w SendWQE) SetWRID(v uint64)           { le.PutUint64(w[0:], v) }
func (w SendWQE) SetSendFlags(v uint32)      { le.PutUint32(w[8:], v) }
func (w SendWQE) SetOpcode(v uint8)          { w[12] = v }
func (w SendWQE) SetNumSGE(v uint8)          { w[13] = v }
func (w SendWQE) SetInlineLen(v uint16)      { le.PutUint16(w[14:], v) }
func (w SendWQE) SetImmData(v uint32)        { binary.BigEndian.PutUint32(w[16:], v) }
func (w SendWQE) SetInvalidateRKey(v uint32) { le.PutUint32(w[16:], v) }
func (w SendWQE) SetRKey(v uint32)           { le.PutUint32(w[20:], v) }
func (w SendWQE) SetRemoteAddr(v uint64)     { le.PutUint64(w[24:], v) }
func (w SendWQE) SetCompareAdd(v uint64)     { le.PutUint64(w[32:], v) }
func (w SendWQE) SetSwap(v uint64)           { le.PutUint64(w[40:], v) }
func (w SendWQE) SetAH(v uint32)             { le.PutUint32(w[48:], v) }
func (w SendWQE) SetRemoteQPN(v uint32)      { le.PutUint32(w[52:], v) }
func (w SendWQE) SetRemoteQKey(v uint32)     { le.PutUint32(w[56:], v) }

// MaxSGEs is how many SGEs (or inline bytes / 16) the record has room for.
func (w SendWQE) MaxSGEs() int { return (len(w) - SendHeaderSize) / SGESize }

// SGE returns the i-th SGE.
func (w SendWQE) SGE(i int) SGE {
	o := SendHeaderSize + i*SGESize
	return SGE(w[o : o+SGESize])
}

// Inline returns the record's room for inline data.
func (w SendWQE) Inline() []byte { return w[SendHeaderSize:] }

// RecvWQE is a view of a receive record.
type RecvWQE []byte

func (w RecvWQE) WRID() uint64     { return le.Uint64(w[0:]) }
func (w RecvWQE) NumSGE() uint8    { return w[8] }
func (w RecvWQE) SetWRID(v uint64) { le.PutUint64(w[0:], v) }
func (w RecvWQE) SetNumSGE(v uint8) {
	w[8] = v
	clear(w[9:RecvHeaderSize])
}

// MaxSGEs is how many SGEs the record has room for.
func (w RecvWQE) MaxSGEs() int { return (len(w) - RecvHeaderSize) / SGESize }

// SGE returns the i-th SGE.
func (w RecvWQE) SGE(i int) SGE {
	o := RecvHeaderSize + i*SGESize
	return SGE(w[o : o+SGESize])
}

// CQE is a view of a completion record: struct ibv_wc.
type CQE []byte

func (e CQE) WRID() uint64            { return le.Uint64(e[0:]) }
func (e CQE) Status() uint8           { return e[8] }
func (e CQE) Opcode() uint8           { return e[9] }
func (e CQE) SL() uint8               { return e[10] }
func (e CQE) DLIDPathBits() uint8     { return e[11] }
func (e CQE) VendorErr() uint32       { return le.Uint32(e[12:]) }
func (e CQE) ByteLen() uint32         { return le.Uint32(e[16:]) }
func (e CQE) ImmData() uint32         { return binary.BigEndian.Uint32(e[20:]) }
func (e CQE) InvalidatedRKey() uint32 { return le.Uint32(e[20:]) }
func (e CQE) QPNum() uint32           { return le.Uint32(e[24:]) }
func (e CQE) SrcQP() uint32           { return le.Uint32(e[28:]) }
func (e CQE) WCFlags() uint32         { return le.Uint32(e[32:]) }
func (e CQE) PKeyIndex() uint16       { return le.Uint16(e[36:]) }
func (e CQE) SLID() uint16            { return le.Uint16(e[38:]) }
func (e CQE) Solicited() bool         { return e[40]&1 != 0 }

func (e CQE) SetWRID(v uint64)            { le.PutUint64(e[0:], v) }
func (e CQE) SetStatus(v uint8)           { e[8] = v }
func (e CQE) SetOpcode(v uint8)           { e[9] = v }
func (e CQE) SetSL(v uint8)               { e[10] = v }
func (e CQE) SetDLIDPathBits(v uint8)     { e[11] = v }
func (e CQE) SetVendorErr(v uint32)       { le.PutUint32(e[12:], v) }
func (e CQE) SetByteLen(v uint32)         { le.PutUint32(e[16:], v) }
func (e CQE) SetImmData(v uint32)         { binary.BigEndian.PutUint32(e[20:], v) }
func (e CQE) SetInvalidatedRKey(v uint32) { le.PutUint32(e[20:], v) }
func (e CQE) SetQPNum(v uint32)           { le.PutUint32(e[24:], v) }
func (e CQE) SetSrcQP(v uint32)           { le.PutUint32(e[28:], v) }
func (e CQE) SetWCFlags(v uint32)         { le.PutUint32(e[32:], v) }
func (e CQE) SetPKeyIndex(v uint16)       { le.PutUint16(e[36:], v) }
func (e CQE) SetSLID(v uint16)            { le.PutUint16(e[38:], v) }

// SetSolicited sets cqe_flags (and clears the reserved bytes after it).
func (e CQE) SetSolicited(v bool) {
	clear(e[40:CQESize])
	if v {
		e[40] = 1
	}
}
