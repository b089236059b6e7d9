package proto

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Field is one field of a message body or record, as the layout walk
// reports it: docs/rvtd-protocol.md is generated from these.
type Field struct {
	Name   string
	Type   string // u8, u16, u32, u64, bool, u8[N], char[N], reserved[N], fd, or "T[]" for a tail
	Offset int    // byte offset in the body; -1 for a file descriptor
	Size   int    // bytes; for a tail, the size of one element
	Elem   []Field
}

type mode uint8

const (
	modeEncode mode = iota
	modeDecode
	modeLayout
)

// Codec walks a body's fields in order. The same Walk method encodes,
// decodes and describes a body, so the encoder, the decoder and the
// document cannot disagree. Every field is little-endian at the offset its
// predecessors leave, with no implicit padding: bodies spell out their
// reserved bytes, which must be zero.
type Codec struct {
	mode   mode
	b      []byte
	off    int
	err    error
	fds    []int
	nfd    int
	fields []Field
	name   string // the body's name, for errors
}

var zeros [64]byte

func (c *Codec) fail(field, format string, args ...any) {
	if c.err == nil {
		c.err = &Error{Msg: c.name, Field: field, Err: ErrMalformed, Detail: fmt.Sprintf(format, args...)}
	}
}

// take reserves n bytes for a field: appends zeros when encoding, returns
// the field's bytes when decoding, records the field when describing.
func (c *Codec) take(name, typ string, n int) []byte {
	switch c.mode {
	case modeLayout:
		c.fields = append(c.fields, Field{Name: name, Type: typ, Offset: c.off, Size: n})
		c.off += n
		return nil
	case modeEncode:
		for k := n; k > 0; {
			m := min(k, len(zeros))
			c.b = append(c.b, zeros[:m]...)
			k -= m
		}
		c.off += n
		return c.b[len(c.b)-n:]
	default:
		if c.err != nil {
			return nil
		}
		if len(c.b)-c.off < n {
			c.fail(name, "body too short")
			return nil
		}
		p := c.b[c.off : c.off+n]
		c.off += n
		return p
	}
}

// U8 is an unsigned byte.
func (c *Codec) U8(name string, v *uint8) {
	if p := c.take(name, "u8", 1); p != nil {
		if c.mode == modeEncode {
			p[0] = *v
		} else {
			*v = p[0]
		}
	}
}

// U16 is a little-endian 16-bit unsigned integer.
func (c *Codec) U16(name string, v *uint16) {
	if p := c.take(name, "u16", 2); p != nil {
		if c.mode == modeEncode {
			binary.LittleEndian.PutUint16(p, *v)
		} else {
			*v = binary.LittleEndian.Uint16(p)
		}
	}
}

// U32 is a little-endian 32-bit unsigned integer.
func (c *Codec) U32(name string, v *uint32) {
	if p := c.take(name, "u32", 4); p != nil {
		if c.mode == modeEncode {
			binary.LittleEndian.PutUint32(p, *v)
		} else {
			*v = binary.LittleEndian.Uint32(p)
		}
	}
}

// U64 is a little-endian 64-bit unsigned integer.
func (c *Codec) U64(name string, v *uint64) {
	if p := c.take(name, "u64", 8); p != nil {
		if c.mode == modeEncode {
			binary.LittleEndian.PutUint64(p, *v)
		} else {
			*v = binary.LittleEndian.Uint64(p)
		}
	}
}

// Bool is one byte, 0 or 1; any other value is malformed.
func (c *Codec) Bool(name string, v *bool) {
	if p := c.take(name, "bool", 1); p != nil {
		switch {
		case c.mode == modeEncode:
			if *v {
				p[0] = 1
			}
		case p[0] > 1:
			c.fail(name, "bool is %d", p[0])
		default:
			*v = p[0] == 1
		}
	}
}

// GID is 16 bytes, in network order (as in ibv_gid).
func (c *Codec) GID(name string, v *[16]byte) {
	if p := c.take(name, "u8[16]", 16); p != nil {
		if c.mode == modeEncode {
			copy(p, v[:])
		} else {
			copy(v[:], p)
		}
	}
}

// Str is a NUL-terminated string in n bytes: at most n-1 bytes of text,
// then NUL bytes to the end of the field (anything else after the first NUL
// is malformed, so a decoded body re-encodes to the same bytes).
func (c *Codec) Str(name string, v *string, n int) {
	p := c.take(name, fmt.Sprintf("char[%d]", n), n)
	if p == nil {
		return
	}
	if c.mode == modeEncode {
		if len(*v) >= n {
			c.fail(name, "string of %d bytes does not fit %d", len(*v), n)
			return
		}
		if bytes.IndexByte([]byte(*v), 0) >= 0 {
			c.fail(name, "string holds a NUL")
			return
		}
		copy(p, *v)
		return
	}
	i := bytes.IndexByte(p, 0)
	if i < 0 {
		c.fail(name, "string not NUL-terminated")
		return
	}
	if !isZero(p[i:]) {
		c.fail(name, "bytes after the string's NUL are not zero")
		return
	}
	*v = string(p[:i])
}

// Pad is n reserved bytes: zero when sent, refused unless zero.
func (c *Codec) Pad(n int) {
	p := c.take("reserved", fmt.Sprintf("reserved[%d]", n), n)
	if p != nil && c.mode == modeDecode && !isZero(p) {
		c.fail("reserved", "reserved bytes are not zero")
	}
}

// FD is a file descriptor passed with the message (SCM_RIGHTS). It takes no
// bytes in the body: descriptors travel in the order the body names them.
func (c *Codec) FD(name string, v *int) {
	switch c.mode {
	case modeLayout:
		c.fields = append(c.fields, Field{Name: name, Type: "fd", Offset: -1})
	case modeEncode:
		c.fds = append(c.fds, *v)
	default:
		if c.err != nil {
			return
		}
		if c.nfd >= len(c.fds) {
			c.fail(name, "file descriptor missing")
			return
		}
		*v = c.fds[c.nfd]
		c.nfd++
	}
}

// Tail is the variable part that ends a body: as many elements of one fixed
// size as the bytes left hold (the message length gives the count). A tail
// must be the body's last field.
func Tail[T any](c *Codec, name string, s *[]T, walk func(*Codec, *T)) {
	var zero T
	lc := Codec{mode: modeLayout}
	walk(&lc, &zero)
	size := lc.off
	switch c.mode {
	case modeLayout:
		c.fields = append(c.fields, Field{Name: name, Type: "[]", Offset: c.off, Size: size, Elem: lc.fields})
	case modeEncode:
		for i := range *s {
			walk(c, &(*s)[i])
		}
	default:
		if c.err != nil {
			return
		}
		left := len(c.b) - c.off
		if size == 0 || left%size != 0 {
			c.fail(name, "%d bytes left are not a whole number of %d-byte elements", left, size)
			return
		}
		n := left / size
		if n == 0 {
			*s = nil
			return
		}
		*s = make([]T, n)
		for i := range *s {
			walk(c, &(*s)[i])
		}
	}
}

func isZero(p []byte) bool {
	for _, x := range p {
		if x != 0 {
			return false
		}
	}
	return true
}

// Layout describes a body: its fields in order and its fixed size (without
// a tail).
func Layout(b Body) (fields []Field, size int) {
	c := Codec{mode: modeLayout}
	b.Walk(&c)
	return c.fields, c.off
}
