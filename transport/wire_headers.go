package transport

import "encoding/binary"

// Header views over packet bytes, in the style of gVisor's tcpip/header: each
// header is a named byte slice with big-endian getters and setters at fixed
// offsets. Callers validate the length first (Parse does it for a whole
// packet); an accessor on a slice that is too short panics like any
// out-of-range slice access.

// Header lengths in bytes (IBTA vol. 1, chapter 9; RoCEv2 annex A17).
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	DETHLen         = 8
	ImmDtLen        = 4
	IETHLen         = 4
	CNPResvLen      = 16 // reserved bytes after the BTH of a RoCEv2 CNP
	ICRCLen         = 4
)

// BTH is the 12-byte base transport header.
//
//	byte 0     opcode
//	byte 1     SE(7) M(6) PadCnt(5:4) TVer(3:0)
//	bytes 2-3  P_Key
//	byte 4     FECN(7) BECN(6) reserved(5:0)   (resv8a in InfiniBand)
//	bytes 5-7  destination QP
//	byte 8     AckReq(7) reserved(6:0)
//	bytes 9-11 PSN
type BTH []byte

const (
	bthOpcode = 0
	bthFlags  = 1
	bthPKey   = 2
	bthResv8a = 4
	bthDestQP = 5
	bthAck    = 8
	bthPSN    = 9

	bthSE       = 0x80
	bthMigReq   = 0x40
	bthPadShift = 4
	bthPadMask  = 0x30
	bthTVerMask = 0x0F
	bthFECN     = 0x80
	bthBECN     = 0x40
	bthAckReq   = 0x80
)

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) {
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}

func setBit(b *byte, mask byte, on bool) {
	if on {
		*b |= mask
	} else {
		*b &^= mask
	}
}

// Opcode returns the opcode.
func (b BTH) Opcode() Opcode { return Opcode(b[bthOpcode]) }

// SE returns the solicited event bit.
func (b BTH) SE() bool { return b[bthFlags]&bthSE != 0 }

// MigReq returns the migration request bit (M).
func (b BTH) MigReq() bool { return b[bthFlags]&bthMigReq != 0 }

// PadCount returns the number of pad bytes (0-3) after the payload.
func (b BTH) PadCount() uint8 { return (b[bthFlags] & bthPadMask) >> bthPadShift }

// TVer returns the transport header version (0 is the only one defined).
func (b BTH) TVer() uint8 { return b[bthFlags] & bthTVerMask }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[bthResv8a]&bthFECN != 0 }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[bthResv8a]&bthBECN != 0 }

// DestQP returns the 24-bit destination QP number.
func (b BTH) DestQP() uint32 { return get24(b[bthDestQP:]) }

// AckReq returns the acknowledge request bit.
func (b BTH) AckReq() bool { return b[bthAck]&bthAckReq != 0 }

// PSN returns the 24-bit packet sequence number.
func (b BTH) PSN() PSN { return PSN(get24(b[bthPSN:])) }

// Init writes a BTH with the given opcode, P_Key, destination QP and PSN and
// every flag, count and reserved bit cleared.
func (b BTH) Init(op Opcode, pkey uint16, destQP uint32, psn PSN) {
	_ = b[BTHLen-1]
	b[bthOpcode] = byte(op)
	b[bthFlags] = 0
	binary.BigEndian.PutUint16(b[bthPKey:], pkey)
	b[bthResv8a] = 0
	put24(b[bthDestQP:], destQP)
	b[bthAck] = 0
	put24(b[bthPSN:], uint32(psn))
}

// SetOpcode sets the opcode.
func (b BTH) SetOpcode(op Opcode) { b[bthOpcode] = byte(op) }

// SetSE sets the solicited event bit.
func (b BTH) SetSE(v bool) { setBit(&b[bthFlags], bthSE, v) }

// SetMigReq sets the migration request bit.
func (b BTH) SetMigReq(v bool) { setBit(&b[bthFlags], bthMigReq, v) }

// SetPadCount sets the pad count; only the low two bits of n are used.
func (b BTH) SetPadCount(n uint8) {
	b[bthFlags] = b[bthFlags]&^bthPadMask | (n<<bthPadShift)&bthPadMask
}

// SetTVer sets the transport header version; only the low four bits are used.
func (b BTH) SetTVer(v uint8) { b[bthFlags] = b[bthFlags]&^bthTVerMask | v&bthTVerMask }

// SetPKey sets the partition key.
func (b BTH) SetPKey(k uint16) { binary.BigEndian.PutUint16(b[bthPKey:], k) }

// SetFECN sets the forward explicit congestion notification bit.
func (b BTH) SetFECN(v bool) { setBit(&b[bthResv8a], bthFECN, v) }

// SetBECN sets the backward explicit congestion notification bit.
func (b BTH) SetBECN(v bool) { setBit(&b[bthResv8a], bthBECN, v) }

// SetDestQP sets the destination QP number; only the low 24 bits are used.
func (b BTH) SetDestQP(qpn uint32) { put24(b[bthDestQP:], qpn) }

// SetAckReq sets the acknowledge request bit.
func (b BTH) SetAckReq(v bool) { setBit(&b[bthAck], bthAckReq, v) }

// SetPSN sets the PSN; only the low 24 bits are used.
func (b BTH) SetPSN(p PSN) { put24(b[bthPSN:], uint32(p)) }

// RETH is the 16-byte RDMA extended transport header: virtual address,
// R_Key, DMA length.
type RETH []byte

// VA returns the remote virtual address.
func (b RETH) VA() uint64 { return binary.BigEndian.Uint64(b[0:]) }

// RKey returns the remote key.
func (b RETH) RKey() uint32 { return binary.BigEndian.Uint32(b[8:]) }

// DMALen returns the length of the whole RDMA operation in bytes.
func (b RETH) DMALen() uint32 { return binary.BigEndian.Uint32(b[12:]) }

// SetVA sets the remote virtual address.
func (b RETH) SetVA(va uint64) { binary.BigEndian.PutUint64(b[0:], va) }

// SetRKey sets the remote key.
func (b RETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(b[8:], k) }

// SetDMALen sets the length of the RDMA operation.
func (b RETH) SetDMALen(n uint32) { binary.BigEndian.PutUint32(b[12:], n) }

// AETH is the 4-byte ACK extended transport header: an 8-bit syndrome and a
// 24-bit message sequence number.
type AETH []byte

// Syndrome returns the syndrome byte.
func (b AETH) Syndrome() Syndrome { return Syndrome(b[0]) }

// MSN returns the 24-bit message sequence number.
func (b AETH) MSN() uint32 { return get24(b[1:]) }

// SetSyndrome sets the syndrome byte.
func (b AETH) SetSyndrome(s Syndrome) { b[0] = byte(s) }

// SetMSN sets the message sequence number; only the low 24 bits are used.
func (b AETH) SetMSN(msn uint32) { put24(b[1:], msn) }

// AtomicETH is the 28-byte atomic extended transport header: virtual
// address, R_Key, swap (or add) data, compare data.
type AtomicETH []byte

// VA returns the remote virtual address (8-byte aligned for a valid request).
func (b AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(b[0:]) }

// RKey returns the remote key.
func (b AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(b[8:]) }

// SwapAdd returns the swap value (compare & swap) or the addend (fetch & add).
func (b AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(b[12:]) }

// Compare returns the compare value (compare & swap only).
func (b AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(b[20:]) }

// SetVA sets the remote virtual address.
func (b AtomicETH) SetVA(va uint64) { binary.BigEndian.PutUint64(b[0:], va) }

// SetRKey sets the remote key.
func (b AtomicETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(b[8:], k) }

// SetSwapAdd sets the swap value or addend.
func (b AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(b[12:], v) }

// SetCompare sets the compare value.
func (b AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(b[20:], v) }

// AtomicAckETH is the 8-byte atomic acknowledge extended transport header:
// the original contents of the target.
type AtomicAckETH []byte

// OrigData returns the value the target held before the atomic operation.
func (b AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(b[0:]) }

// SetOrigData sets the original data.
func (b AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(b[0:], v) }

// DETH is the 8-byte datagram extended transport header: Q_Key, a reserved
// byte, and the 24-bit source QP.
type DETH []byte

// QKey returns the queue key.
func (b DETH) QKey() uint32 { return binary.BigEndian.Uint32(b[0:]) }

// SrcQP returns the 24-bit source QP number.
func (b DETH) SrcQP() uint32 { return get24(b[5:]) }

// SetQKey sets the queue key.
func (b DETH) SetQKey(k uint32) { binary.BigEndian.PutUint32(b[0:], k) }

// SetSrcQP sets the source QP number and clears the reserved byte.
func (b DETH) SetSrcQP(qpn uint32) {
	b[4] = 0
	put24(b[5:], qpn)
}

// ImmDt is the 4-byte immediate data header. The value is opaque to the
// transport; it is returned as the 32-bit big-endian number on the wire (the
// verbs API hands it to applications in network byte order).
type ImmDt []byte

// Imm returns the immediate data.
func (b ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(b[0:]) }

// SetImm sets the immediate data.
func (b ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(b[0:], v) }

// IETH is the 4-byte invalidate extended transport header: the R_Key to
// invalidate at the responder.
type IETH []byte

// RKey returns the R_Key to invalidate.
func (b IETH) RKey() uint32 { return binary.BigEndian.Uint32(b[0:]) }

// SetRKey sets the R_Key to invalidate.
func (b IETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(b[0:], k) }
