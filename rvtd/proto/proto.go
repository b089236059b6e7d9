// Package proto is rvtd's client protocol: the message header, the table of
// messages, their encoder and decoder, and the unix-socket transport with
// file-descriptor passing. docs/rvtd-protocol.md is its specification;
// the message layouts in that document are generated from the table here
// (go test ./rvtd/proto -run TestDocLayouts -update).
//
// Every message is one SOCK_SEQPACKET datagram: a 24-byte header, then a
// body whose layout the message table gives for the opcode and direction
// (request, reply or event). One Walk method per body drives encoding,
// decoding and the document, as Wayland's protocol XML drives its
// marshalling.
package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
)

// Protocol version. A client and the daemon must agree on Major; they use
// the lower of their Minor versions.
const (
	Major = 1
	Minor = 2
	// Magic is "RVTD" read as a little-endian u32, the first field of hello.
	Magic = 0x44545652
)

// Sizes.
const (
	HeaderSize = 24
	// MaxMessage is the largest message, header included, either side sends
	// or accepts.
	MaxMessage = 65536
	// MaxFDs is the most file descriptors one message carries.
	MaxFDs = 4
)

// Op is a message opcode.
type Op uint16

// Flags say what a message is.
type Flags uint8

// Header flags: a request has neither.
const (
	FlagReply Flags = 1 << 0 // an answer to the request with the same request ID
	FlagEvent Flags = 1 << 1 // sent by the daemon unasked; request ID 0
)

// Header is the fixed start of every message, little-endian:
//
//	0  u32 length     the whole message, header included
//	4  u16 opcode
//	6  u8  flags      FlagReply, FlagEvent
//	7  u8  nfds       file descriptors passed with this message
//	8  u32 request_id chosen by the client, echoed in the reply
//	12 u32 handle     the object the request acts on (0: none)
//	16 u32 status     replies: 0, or the errno of a failed request
//	20 u32 reserved   0
type Header struct {
	Length uint32
	Op     Op
	Flags  Flags
	NFDs   uint8
	ReqID  uint32
	Handle uint32
	Status Errno
}

// PutHeader writes h into b[:HeaderSize].
func PutHeader(b []byte, h Header) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], h.Length)
	le.PutUint16(b[4:], uint16(h.Op))
	b[6] = byte(h.Flags)
	b[7] = h.NFDs
	le.PutUint32(b[8:], h.ReqID)
	le.PutUint32(b[12:], h.Handle)
	le.PutUint32(b[16:], uint32(h.Status))
	le.PutUint32(b[20:], 0)
}

// Body is a message body: Walk visits its fields in wire order.
type Body interface {
	Walk(c *Codec)
}

// Empty is the body of a message that carries nothing but its header.
type Empty struct{}

// Walk implements Body.
func (*Empty) Walk(*Codec) {}

// Spec is one row of the message table.
type Spec struct {
	Op      Op
	Name    string
	Handle  string      // what the request's header handle names ("" for none)
	Request func() Body // nil for an event
	Reply   func() Body // nil: an empty reply; for an event, its body
	Event   bool        // sent only by the daemon, with FlagEvent
	Doc     string      // one line for the document
}

// Lookup returns the table row of op.
func Lookup(op Op) (*Spec, bool) {
	i, ok := byOp[op]
	if !ok {
		return nil, false
	}
	return &table[i], true
}

// Specs returns the message table in opcode order.
func Specs() []Spec { return table[:] }

var byOp = func() map[Op]int {
	m := make(map[Op]int, len(table))
	for i := range table {
		m[table[i].Op] = i
	}
	return m
}()

// body returns a fresh body of op for the direction flags says.
func (s *Spec) body(f Flags) Body {
	var mk func() Body
	if f&(FlagReply|FlagEvent) != 0 {
		mk = s.Reply
	} else {
		mk = s.Request
	}
	if mk == nil {
		return &Empty{}
	}
	return mk()
}

// Sentinel errors. Decode errors are *Error values wrapping one of them.
var (
	// ErrFraming: the header cannot be trusted (length, flags, reserved
	// bytes, descriptor count). The daemon closes the connection.
	ErrFraming = errors.New("framing error")
	// ErrUnknownOp: no message has this opcode (or not in this direction);
	// answered with EOPNOTSUPP.
	ErrUnknownOp = errors.New("unknown opcode")
	// ErrMalformed: the body does not match its layout; answered with EPROTO.
	ErrMalformed = errors.New("malformed message")
)

// Error is a message that could not be encoded or decoded.
type Error struct {
	Msg    string // message name, or "header"
	Field  string
	Err    error
	Detail string
}

func (e *Error) Error() string {
	s := e.Err.Error() + ": " + e.Msg
	if e.Field != "" {
		s += "." + e.Field
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Errno returns the status a daemon answers a request with when decoding it
// failed with err: EOPNOTSUPP for an unknown opcode, EPROTO otherwise.
func DecodeErrno(err error) Errno {
	if errors.Is(err, ErrUnknownOp) {
		return EOPNOTSUPP
	}
	return EPROTO
}

func framing(format string, args ...any) error {
	return &Error{Msg: "header", Err: ErrFraming, Detail: fmt.Sprintf(format, args...)}
}

// Msg is a decoded message. File descriptors named by the body are in the
// body's fields.
type Msg struct {
	Header
	Body Body
}

// Encode appends the message (header and body) to dst and returns it with
// the descriptors to pass alongside. It fills h.Length and h.NFDs. A reply
// with a non-zero Status must have an empty body. body may be nil for an
// empty body.
func Encode(dst []byte, h Header, body Body) ([]byte, []int, error) {
	spec, ok := Lookup(h.Op)
	if !ok {
		return dst, nil, &Error{Msg: fmt.Sprintf("op %#04x", uint16(h.Op)), Err: ErrUnknownOp}
	}
	if err := checkFlags(spec, h); err != nil {
		return dst, nil, err
	}
	if body == nil {
		body = &Empty{}
	}
	if h.Status != 0 {
		if _, empty := body.(*Empty); !empty {
			return dst, nil, &Error{Msg: spec.Name, Err: ErrMalformed, Detail: "an error reply has no body"}
		}
	} else if reflect.TypeOf(body) != reflect.TypeOf(spec.body(h.Flags)) {
		return dst, nil, &Error{Msg: spec.Name, Err: ErrMalformed, Detail: fmt.Sprintf("body %T is not this message's", body)}
	}
	start := len(dst)
	dst = append(dst, zeros[:HeaderSize]...)
	c := Codec{mode: modeEncode, b: dst, off: HeaderSize, name: spec.Name}
	body.Walk(&c)
	dst = c.b
	if c.err != nil {
		return dst[:start], nil, c.err
	}
	n := len(dst) - start
	if n > MaxMessage {
		return dst[:start], nil, &Error{Msg: spec.Name, Err: ErrMalformed, Detail: fmt.Sprintf("%d bytes exceed the %d-byte limit", n, MaxMessage)}
	}
	if len(c.fds) > MaxFDs {
		return dst[:start], nil, &Error{Msg: spec.Name, Err: ErrMalformed, Detail: "too many file descriptors"}
	}
	h.Length = uint32(n)
	h.NFDs = uint8(len(c.fds))
	PutHeader(dst[start:], h)
	return dst, c.fds, nil
}

func checkFlags(spec *Spec, h Header) error {
	switch {
	case h.Flags&^(FlagReply|FlagEvent) != 0 || h.Flags == FlagReply|FlagEvent:
		return framing("flags %#x", uint8(h.Flags))
	case spec.Event != (h.Flags == FlagEvent):
		return &Error{Msg: spec.Name, Err: ErrUnknownOp, Detail: "wrong direction"}
	case h.Flags != FlagReply && h.Status != 0:
		return framing("status %d outside a reply", h.Status)
	case h.Flags == FlagEvent && h.ReqID != 0:
		return framing("event with request id %d", h.ReqID)
	}
	return nil
}

// ParseHeader reads and checks the header of one received message of
// len(b) bytes that came with nfds descriptors. Errors wrap ErrFraming.
func ParseHeader(b []byte, nfds int) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, framing("%d bytes, shorter than the header", len(b))
	}
	le := binary.LittleEndian
	h := Header{
		Length: le.Uint32(b[0:]),
		Op:     Op(le.Uint16(b[4:])),
		Flags:  Flags(b[6]),
		NFDs:   b[7],
		ReqID:  le.Uint32(b[8:]),
		Handle: le.Uint32(b[12:]),
		Status: Errno(le.Uint32(b[16:])),
	}
	switch {
	case int(h.Length) != len(b):
		return h, framing("length field %d, message %d bytes", h.Length, len(b))
	case len(b) > MaxMessage:
		return h, framing("%d bytes exceed the limit", len(b))
	case le.Uint32(b[20:]) != 0:
		return h, framing("reserved header bytes are not zero")
	case int(h.NFDs) != nfds:
		return h, framing("header says %d descriptors, %d came", h.NFDs, nfds)
	case h.Flags&^(FlagReply|FlagEvent) != 0 || h.Flags == FlagReply|FlagEvent:
		return h, framing("flags %#x", uint8(h.Flags))
	}
	return h, nil
}

// Decode decodes one message b that came with the descriptors fds. On an
// error the returned header is filled as far as it could be read (a daemon
// answers a bad body with the request ID it carried). Decode never keeps b.
func Decode(b []byte, fds []int) (Msg, error) {
	h, err := ParseHeader(b, len(fds))
	if err != nil {
		return Msg{Header: h}, err
	}
	spec, ok := Lookup(h.Op)
	if !ok {
		return Msg{Header: h}, &Error{Msg: fmt.Sprintf("op %#04x", uint16(h.Op)), Err: ErrUnknownOp}
	}
	if err := checkFlags(spec, h); err != nil {
		return Msg{Header: h}, err
	}
	var body Body = &Empty{}
	if h.Status == 0 {
		body = spec.body(h.Flags)
	}
	c := Codec{mode: modeDecode, b: b, off: HeaderSize, fds: fds, name: spec.Name}
	body.Walk(&c)
	switch {
	case c.err != nil:
		return Msg{Header: h}, c.err
	case c.off != len(b):
		return Msg{Header: h}, &Error{Msg: spec.Name, Err: ErrMalformed, Detail: fmt.Sprintf("%d bytes past the body", len(b)-c.off)}
	case c.nfd != len(fds):
		return Msg{Header: h}, &Error{Msg: spec.Name, Err: ErrMalformed, Detail: fmt.Sprintf("%d descriptors, the body names %d", len(fds), c.nfd)}
	}
	return Msg{Header: h, Body: body}, nil
}
