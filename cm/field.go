package cm

import "encoding/binary"

// Field is one field of a MAD: Bits bits starting at bit Bit (0 = the most
// significant bit) of byte Off, counted from the start of the 256-byte MAD.
// Every accessor of every view is derived from a Field; the layouts in
// layout.go are the only place offsets are written.
type Field struct {
	Name string
	Off  uint16 // byte offset from the start of the MAD
	Bit  uint8  // first bit within byte Off, 0 = MSB
	Bits uint16 // width in bits; a multiple of 8 with Bit 0 for byte ranges
}

// f makes a field at an offset into the MAD data (after the 24-byte header).
func f(name string, off uint16, bit uint8, bits uint16) Field {
	return Field{Name: name, Off: MADHeaderLen + off, Bit: bit, Bits: bits}
}

// bytesField makes a byte-range field (GIDs, private data) in the data.
func bytesField(name string, off, n uint16) Field { return f(name, off, 0, n*8) }

// End returns the offset of the byte after the field's last bit.
func (fd Field) End() int { return int(fd.Off) + (int(fd.Bit)+int(fd.Bits)+7)/8 }

// IsBytes reports whether the field is a byte range read with Bytes rather
// than a number read with Get (wider than 64 bits).
func (fd Field) IsBytes() bool { return fd.Bits > 64 }

// Get returns the field's value. The slice must be at least End() bytes.
func (fd Field) Get(b []byte) uint64 {
	if fd.Bit == 0 {
		switch fd.Bits {
		case 8:
			return uint64(b[fd.Off])
		case 16:
			return uint64(binary.BigEndian.Uint16(b[fd.Off:]))
		case 32:
			return uint64(binary.BigEndian.Uint32(b[fd.Off:]))
		case 64:
			return binary.BigEndian.Uint64(b[fd.Off:])
		}
	}
	n := (int(fd.Bit) + int(fd.Bits) + 7) / 8
	var v uint64
	for _, x := range b[fd.Off : int(fd.Off)+n] {
		v = v<<8 | uint64(x)
	}
	v >>= uint(n*8 - int(fd.Bit) - int(fd.Bits))
	return v & fd.mask()
}

func (fd Field) mask() uint64 {
	if fd.Bits >= 64 {
		return ^uint64(0)
	}
	return 1<<fd.Bits - 1
}

// Set stores v (truncated to the field's width) without touching the other
// bits of the bytes it shares.
func (fd Field) Set(b []byte, v uint64) {
	v &= fd.mask()
	if fd.Bit == 0 {
		switch fd.Bits {
		case 8:
			b[fd.Off] = byte(v)
			return
		case 16:
			binary.BigEndian.PutUint16(b[fd.Off:], uint16(v))
			return
		case 32:
			binary.BigEndian.PutUint32(b[fd.Off:], uint32(v))
			return
		case 64:
			binary.BigEndian.PutUint64(b[fd.Off:], v)
			return
		}
	}
	n := (int(fd.Bit) + int(fd.Bits) + 7) / 8
	shift := uint(n*8 - int(fd.Bit) - int(fd.Bits))
	m := fd.mask() << shift
	v <<= shift
	for i := n - 1; i >= 0; i-- {
		p := &b[int(fd.Off)+i]
		*p = *p&^byte(m) | byte(v)
		m >>= 8
		v >>= 8
	}
}

// Bytes returns the field's bytes (a sub-slice, not a copy).
func (fd Field) Bytes(b []byte) []byte { return b[fd.Off:fd.End()] }
