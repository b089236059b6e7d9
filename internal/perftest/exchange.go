// Package perftest stands in for linux-rdma's perftest 4.5 (ib_write_bw,
// ib_read_bw, ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat,
// ib_send_lat) on softverbs devices: the out-of-band exchange over TCP
// (port 18515) byte for byte, the statistics as perftest computes them,
// and its terminal output line for line, so that either side of a test
// may be perftest on Linux rxe and a script that parses perftest's tables
// works unchanged.
//
// # The exchange
//
// perftest's "Ethernet" data exchange (no rdma_cm) is a TCP connection
// from the client to the server on which both sides swap fixed-size
// messages. Every swap is symmetric: the client writes its message and
// then reads the server's, the server reads first and writes second. A
// run swaps, in this order (the version figures are the remote's):
//
//  1. the version: 16 bytes, the NUL-padded string "6.06" (perftest 4.5's
//     VERSION); a peer older than 5.70 is refused.
//  2. if the remote version is at least 5.32: the cycle buffer (the page
//     size) and then the cache line size, each a 4-byte big-endian int;
//     each side keeps the larger.
//  3. if at least 5.1: the active path MTU as the decimal string of its
//     enum value (1 for 256 bytes .. 5 for 4096) with a NUL, 2 bytes (4
//     before 5.31); each side uses the smaller.
//  4. handshakes: a QP's address (struct pingpong_dest) in text, 59 bytes
//     "%04x:%04x:%06x:%06x:%08x:%016x:%08x" (LID, outstanding reads, QPN,
//     PSN, rkey, address, SRQ number) and a NUL when neither side uses a
//     GID, or 108 bytes with the 16 GID bytes ("%02x:" each) before the
//     SRQ number and a ':' after it, which is the only form RoCE uses.
//     The tools also use handshakes as barriers; how many, and where,
//     depends on the tool (see Script).
//  5. bandwidth reports (struct bw_report_data), field by field: the
//     message size (8 bytes), the iteration count (8 bytes from 5.33, 4
//     before) and three doubles (peak, average, message rate), all
//     big-endian.
//  6. closing: one more handshake, then each side writes "done" and its
//     NUL (5 bytes) that nobody reads, and closes.
//
// With -z or -R the same messages, in the same order, travel as SENDs on
// an RC QP connected through rdma_cm (package cm) to the same port in port
// space TCP; handshakes then carry struct pingpong_dest in binary
// (DestBinarySize bytes, big-endian) and closing sends no "done". -R also
// connects the test's QPs through rdma_cm. See rdmacm.go.
//
// Facts and constants are taken from perftest's sources
// (perftest_communication.c, perftest_parameters.c); no code or text is.
package perftest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/softverbs/softverbs/qp"
)

// DefaultPort is perftest's TCP port of the exchange.
const DefaultPort = 18515

// Version is the version perftest 4.5 announces (its autoconf VERSION).
const Version = "6.06"

// Sizes of the exchange's messages.
const (
	VersionMsgSize = 16  // MAX_VERSION
	KeyMsgSize     = 59  // an address without a GID, NUL included
	KeyMsgSizeGID  = 108 // an address with a GID, NUL included
	doneMsg        = "done\x00"
)

// Version thresholds at which perftest's exchange changes.
const (
	minRemoteVersion   = 5.70 // older peers are refused
	sysDataVersion     = 5.32 // cycle buffer and cache line exchanged
	iters64Version     = 5.33 // iterations exchanged in 8 bytes
	mtuXchgVersion     = 5.1  // MTU exchanged
	mtuShortMsgVersion = 5.31 // MTU message shrinks from 4 to 2 bytes
)

// ErrMalformed is returned (wrapped) for a message that does not parse.
var ErrMalformed = errors.New("malformed perftest exchange message")

// Dest is one QP's address as perftest exchanges it (struct pingpong_dest).
type Dest struct {
	LID      uint16
	OutReads uint16 // outstanding RDMA reads/atomics the side allows
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
}

// Encode returns d's message: KeyMsgSize bytes without the GID,
// KeyMsgSizeGID with it.
func (d Dest) Encode(withGID bool) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN&0xffffff, d.PSN&0xffffff, d.RKey, d.VAddr)
	size := KeyMsgSize
	if withGID {
		size = KeyMsgSizeGID
		for _, g := range d.GID {
			fmt.Fprintf(&b, "%02x:", g)
		}
		fmt.Fprintf(&b, "%08x:", d.SRQN)
	} else {
		fmt.Fprintf(&b, "%08x", d.SRQN)
	}
	msg := make([]byte, size)
	copy(msg, b.String()) // the rest, at least the NUL, stays zero
	return msg
}

// DecodeDest parses a message of KeyMsgSize (withGID false) or
// KeyMsgSizeGID bytes. It reads what perftest writes: hexadecimal fields
// separated by colons up to the NUL.
func DecodeDest(msg []byte, withGID bool) (Dest, error) {
	var d Dest
	want, nf := KeyMsgSize, 7
	if withGID {
		want, nf = KeyMsgSizeGID, 6+16+1
	}
	if len(msg) != want {
		return d, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(msg), want)
	}
	s := string(msg)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	} else {
		return d, fmt.Errorf("%w: no NUL", ErrMalformed)
	}
	if withGID {
		// The GID form ends in a ':' after the SRQ number.
		var ok bool
		if s, ok = strings.CutSuffix(s, ":"); !ok {
			return d, fmt.Errorf("%w: %q does not end in ':'", ErrMalformed, s)
		}
	}
	f := strings.Split(s, ":")
	if len(f) != nf {
		return d, fmt.Errorf("%w: %d fields in %q, want %d", ErrMalformed, len(f), s, nf)
	}
	num := func(i, bits int) (uint64, error) {
		if f[i] == "" {
			return 0, fmt.Errorf("%w: empty field %d in %q", ErrMalformed, i+1, s)
		}
		v, err := strconv.ParseUint(f[i], 16, bits)
		if err != nil {
			return 0, fmt.Errorf("%w: field %d of %q", ErrMalformed, i+1, s)
		}
		return v, nil
	}
	var v [7]uint64
	bits := [7]int{16, 16, 24, 24, 32, 64, 32}
	idx := [7]int{0, 1, 2, 3, 4, 5, nf - 1}
	for k := range v {
		x, err := num(idx[k], bits[k])
		if err != nil {
			return d, err
		}
		v[k] = x
	}
	d = Dest{LID: uint16(v[0]), OutReads: uint16(v[1]), QPN: uint32(v[2]), PSN: uint32(v[3]),
		RKey: uint32(v[4]), VAddr: v[5], SRQN: uint32(v[6])}
	if withGID {
		for i := range d.GID {
			x, err := num(6+i, 8)
			if err != nil {
				return d, err
			}
			d.GID[i] = byte(x)
		}
	}
	return d, nil
}

// DestBinarySize is the size of struct pingpong_dest on x86-64 (and every
// LP64 ABI): what a handshake carries over rdma_cm.
const DestBinarySize = 56

// EncodeBinary returns d as perftest sends it over rdma_cm (rdma_write_keys
// built with HAVE_ENDIAN, as Debian's is): struct pingpong_dest with each
// integer big-endian: lid, out_reads, qpn, psn and rkey as 4-byte ints at
// 0-19, 4 bytes of padding, vaddr (8 bytes) at 24, the GID at 32, srqn at 48
// and gid_index at 52 (left 0 here: the receiver keeps its own).
func (d Dest) EncodeBinary() []byte {
	b := make([]byte, DestBinarySize)
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(d.LID))
	be.PutUint32(b[4:], uint32(d.OutReads))
	be.PutUint32(b[8:], d.QPN)
	be.PutUint32(b[12:], d.PSN)
	be.PutUint32(b[16:], d.RKey)
	be.PutUint64(b[24:], d.VAddr)
	copy(b[32:48], d.GID[:])
	be.PutUint32(b[48:], d.SRQN)
	return b
}

// DecodeDestBinary parses a handshake received over rdma_cm. Like
// rdma_read_keys it reads every field but srqn and gid_index.
func DecodeDestBinary(msg []byte) (Dest, error) {
	if len(msg) != DestBinarySize {
		return Dest{}, fmt.Errorf("%w: %d bytes, want %d", ErrMalformed, len(msg), DestBinarySize)
	}
	be := binary.BigEndian
	d := Dest{LID: uint16(be.Uint32(msg[0:])), OutReads: uint16(be.Uint32(msg[4:])), QPN: be.Uint32(msg[8:]) & 0xffffff,
		PSN: be.Uint32(msg[12:]) & 0xffffff, RKey: be.Uint32(msg[16:]), VAddr: be.Uint64(msg[24:])}
	copy(d.GID[:], msg[32:48])
	return d, nil
}

// EncodeVersion returns the version message for v: v's bytes, NUL-padded
// to VersionMsgSize (at most VersionMsgSize-1 of them are kept).
func EncodeVersion(v string) []byte {
	msg := make([]byte, VersionMsgSize)
	copy(msg[:VersionMsgSize-1], v)
	return msg
}

// ParseVersion reads a version message as perftest's atof does: the
// leading decimal number (0 if there is none).
func ParseVersion(msg []byte) float64 {
	s := string(msg)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimLeft(s, " \t\n")
	end, dot := 0, false
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' && !dot) {
		dot = dot || s[end] == '.'
		end++
	}
	f, err := strconv.ParseFloat(strings.TrimSuffix(s[:end], "."), 64)
	if err != nil {
		return 0
	}
	return f
}

// EncodeMTU returns the MTU message for the remote version rem: the enum
// value's decimal digit and a NUL, padded to 4 bytes for peers older than
// 5.31.
func EncodeMTU(m qp.MTU, rem float64) []byte {
	n := 2
	if rem < mtuShortMsgVersion {
		n = 4
	}
	msg := make([]byte, n)
	copy(msg, strconv.Itoa(int(m)))
	return msg
}

// DecodeMTU reads an MTU message as strtol does; 0 if it holds no number.
func DecodeMTU(msg []byte) qp.MTU {
	v := 0
	for _, c := range msg {
		if c < '0' || c > '9' || v > 1000 {
			break
		}
		v = v*10 + int(c-'0')
	}
	if v > 255 {
		return 0
	}
	return qp.MTU(v)
}

// BWReport is struct bw_report_data: one bandwidth result.
type BWReport struct {
	Size    uint64
	Iters   uint64
	Peak    float64 // MB/s (2^20 bytes) or Gb/s
	Avg     float64
	MsgRate float64 // Mpps
}

// encodeReportFields returns the report's fields as perftest sends them,
// one message each, for a peer of version rem.
func encodeReportFields(r BWReport, rem float64) [][]byte {
	u64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	iters := u64(r.Iters)
	if rem < iters64Version {
		iters = binary.BigEndian.AppendUint32(nil, uint32(r.Iters))
	}
	return [][]byte{u64(r.Size), iters, u64(math.Float64bits(r.Peak)),
		u64(math.Float64bits(r.Avg)), u64(math.Float64bits(r.MsgRate))}
}

// decodeReportFields is encodeReportFields' inverse.
func decodeReportFields(f [][]byte) BWReport {
	var it uint64
	if len(f[1]) == 4 {
		it = uint64(binary.BigEndian.Uint32(f[1]))
	} else {
		it = binary.BigEndian.Uint64(f[1])
	}
	d := func(b []byte) float64 { return math.Float64frombits(binary.BigEndian.Uint64(b)) }
	return BWReport{Size: binary.BigEndian.Uint64(f[0]), Iters: it, Peak: d(f[2]), Avg: d(f[3]), MsgRate: d(f[4])}
}

// Transport carries the exchange's messages. Over TCP a message is its
// bytes on the stream; over rdma_cm (-R, -z) it is one SEND on an RC QP.
type Transport interface {
	// Send sends one message.
	Send(msg []byte) error
	// Recv returns the next message, n bytes long.
	Recv(n int) ([]byte, error)
}

// stream is the TCP transport.
type stream struct{ rw io.ReadWriter }

func (s stream) Send(msg []byte) error {
	_, err := s.rw.Write(msg)
	return err
}

func (s stream) Recv(n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(s.rw, b); err != nil {
		return nil, err
	}
	return b, nil
}

// Conn is one side of the exchange on an established connection.
type Conn struct {
	t      Transport
	client bool
	// RDMACM is set when the exchange runs over rdma_cm: handshakes then
	// carry struct pingpong_dest in binary (DestBinarySize bytes) instead
	// of text, and closing sends no "done".
	RDMACM bool
	// WithGID says which address format handshakes use: true when the
	// sides address each other by GID, as RoCE always does.
	WithGID bool
	// RemoteVersion is the peer's version once Versions has run.
	RemoteVersion float64
}

// NewConn returns the exchange on rw; client says which side this is.
func NewConn(rw io.ReadWriter, client bool) *Conn {
	return &Conn{t: stream{rw}, client: client, WithGID: true}
}

// NewRDMACMConn returns the exchange over rdma_cm SENDs on t.
func NewRDMACMConn(t Transport, client bool) *Conn {
	return &Conn{t: t, client: client, WithGID: true, RDMACM: true}
}

// Swap is ctx_xchg_data: it sends mine and returns the peer's message of
// n bytes, the client writing first and the server reading first.
func (c *Conn) Swap(mine []byte, n int) ([]byte, error) {
	if c.client {
		if err := c.t.Send(mine); err != nil {
			return nil, fmt.Errorf("couldn't send to the server: %w", err)
		}
		theirs, err := c.t.Recv(n)
		if err != nil {
			return nil, fmt.Errorf("couldn't read from the server: %w", err)
		}
		return theirs, nil
	}
	theirs, err := c.t.Recv(n)
	if err != nil {
		return nil, fmt.Errorf("couldn't read from the client: %w", err)
	}
	if err := c.t.Send(mine); err != nil {
		return nil, fmt.Errorf("couldn't send to the client: %w", err)
	}
	return theirs, nil
}

// Versions swaps versions and refuses a peer older than 5.70.
func (c *Conn) Versions() error {
	msg, err := c.Swap(EncodeVersion(Version), VersionMsgSize)
	if err != nil {
		return err
	}
	c.RemoteVersion = ParseVersion(msg)
	if c.RemoteVersion < minRemoteVersion {
		return errors.New("Current implementation is not compatible with versions older than 5.70")
	}
	return nil
}

// SysData swaps the cycle buffer and the cache line size (from 5.32) and
// returns the larger of each side's.
func (c *Conn) SysData(cycleBuffer, cacheLine int) (int, int, error) {
	if c.RemoteVersion < sysDataVersion {
		return cycleBuffer, cacheLine, nil
	}
	out := [2]int{cycleBuffer, cacheLine}
	for i, v := range out {
		msg, err := c.Swap(binary.BigEndian.AppendUint32(nil, uint32(int32(v))), 4)
		if err != nil {
			return 0, 0, err
		}
		out[i] = max(v, int(int32(binary.BigEndian.Uint32(msg))))
	}
	return out[0], out[1], nil
}

// MTU swaps the active MTUs (from 5.1) and returns the one to use: the
// smaller, or ours if the peer's is not a valid MTU.
func (c *Conn) MTU(mine qp.MTU) (qp.MTU, error) {
	if c.RemoteVersion < mtuXchgVersion {
		return mine, nil
	}
	m := EncodeMTU(mine, c.RemoteVersion)
	msg, err := c.Swap(m, len(m))
	if err != nil {
		return 0, err
	}
	if rem := DecodeMTU(msg); rem.Valid() && rem < mine {
		return rem, nil
	}
	return mine, nil
}

// HandShake is ctx_hand_shake: it swaps addresses and returns the peer's.
func (c *Conn) HandShake(my Dest) (Dest, error) {
	if c.RDMACM {
		msg, err := c.Swap(my.EncodeBinary(), DestBinarySize)
		if err != nil {
			return Dest{}, err
		}
		return DecodeDestBinary(msg)
	}
	n := KeyMsgSize
	if c.WithGID {
		n = KeyMsgSizeGID
	}
	msg, err := c.Swap(my.Encode(c.WithGID), n)
	if err != nil {
		return Dest{}, err
	}
	return DecodeDest(msg, c.WithGID)
}

// Reports is xchg_bw_reports: it swaps bandwidth reports field by field.
func (c *Conn) Reports(my BWReport) (BWReport, error) {
	mine := encodeReportFields(my, c.RemoteVersion)
	theirs := make([][]byte, len(mine))
	for i, m := range mine {
		msg, err := c.Swap(m, len(m))
		if err != nil {
			return BWReport{}, fmt.Errorf("Failed to exchange data between server and clients: %w", err)
		}
		theirs[i] = msg
	}
	return decodeReportFields(theirs), nil
}

// Close is ctx_close_connection without the socket's close: a handshake,
// then "done" (over TCP only).
func (c *Conn) Close(my Dest) error {
	if _, err := c.HandShake(my); err != nil {
		return err
	}
	if c.RDMACM {
		return nil
	}
	if err := c.t.Send([]byte(doneMsg)); err != nil {
		return fmt.Errorf("Couldn't write to socket: %w", err)
	}
	return nil
}
