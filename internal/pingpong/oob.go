package pingpong

// The out-of-band exchange of rdma-core's ibv_{rc,uc,ud}_pingpong, spoken
// byte for byte so that either side may be the rdma-core tool:
//
//   - The server listens on TCP (port 18515 by default) and accepts one
//     connection; the client connects to the server's name.
//   - The client writes its address as one 52-byte message: the 51
//     characters "%04x:%06x:%06x:%s" (LID, QPN, PSN, wire GID) and a NUL.
//   - The server reads it, moves its QP to RTR and RTS (UD: creates its
//     address handle) and only then writes its own 52-byte message, so the
//     client's first SEND cannot arrive before the server is ready.
//   - The client reads it and writes the 5 bytes "done\x00"; the server reads
//     them. Both close the connection and the ping-pong runs on the RDMA
//     transport alone.
//
// The wire GID is 32 hex digits: libibverbs' gid_to_wire_gid prints each of
// the GID's four 32-bit words with %08x after htobe32 of the word read in host
// order, which on every host comes out as the 16 GID bytes in memory order.

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/softverbs/softverbs/netdev"
)

// MsgLen is the size of an address message: sizeof
// "0000:000000:000000:00000000000000000000000000000000" in C, the NUL
// included.
const MsgLen = 52

// doneMsg is what the client sends once it has the server's address,
// sizeof "done" bytes (the NUL included).
var doneMsg = []byte("done\x00")

// Dest is one side's address as the pingpong tools exchange it.
type Dest struct {
	LID uint16
	QPN uint32
	PSN uint32
	GID netdev.GID
}

// ErrMalformed is returned (wrapped) for a malformed address message.
var ErrMalformed = errors.New("malformed address message")

// WireGID formats g as the 32 hex digits of gid_to_wire_gid.
func WireGID(g netdev.GID) string { return hex.EncodeToString(g[:]) }

// ParseWireGID is wire_gid_to_gid: 32 hex digits, in memory order.
func ParseWireGID(s string) (netdev.GID, error) {
	var g netdev.GID
	if len(s) != 2*len(g) {
		return g, fmt.Errorf("%w: wire GID %q is not 32 hex digits", ErrMalformed, s)
	}
	if _, err := hex.Decode(g[:], []byte(s)); err != nil {
		return g, fmt.Errorf("%w: wire GID %q: %v", ErrMalformed, s, err)
	}
	return g, nil
}

// Marshal returns the 52-byte message for d.
func (d Dest) Marshal() []byte {
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN&0xffffff, d.PSN&0xffffff, WireGID(d.GID))
	b := make([]byte, MsgLen)
	copy(b, s) // 51 characters, then the NUL
	return b
}

// ParseDest reads a message the way the tools' sscanf("%x:%x:%x:%s") does:
// three hex numbers and the wire GID, separated by colons, up to the NUL.
func ParseDest(msg []byte) (Dest, error) {
	var d Dest
	s := string(msg)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	f := strings.SplitN(s, ":", 4)
	if len(f) != 4 {
		return d, fmt.Errorf("%w: %q", ErrMalformed, s)
	}
	var n [3]uint64
	for i := range n {
		v, err := strconv.ParseUint(f[i], 16, 32)
		if err != nil {
			return d, fmt.Errorf("%w: field %d of %q", ErrMalformed, i+1, s)
		}
		n[i] = v
	}
	if n[0] > 0xffff || n[1] > 0xffffff || n[2] > 0xffffff {
		return d, fmt.Errorf("%w: LID, QPN or PSN out of range in %q", ErrMalformed, s)
	}
	g, err := ParseWireGID(f[3])
	if err != nil {
		return d, err
	}
	return Dest{LID: uint16(n[0]), QPN: uint32(n[1]), PSN: uint32(n[2]), GID: g}, nil
}

// GIDString prints a GID as inet_ntop(AF_INET6) does (glibc): like
// netip.Addr.String, except that an IPv4-compatible address (96 zero bits,
// then a non-zero second-to-last word) keeps its dotted quad.
func GIDString(g netdev.GID) string {
	a := netip.AddrFrom16(g)
	var zero [12]byte
	if [12]byte(g[:12]) == zero && (g[12] != 0 || g[13] != 0) {
		return "::" + netip.AddrFrom4([4]byte(g[12:])).String()
	}
	return a.String()
}

// AddressLine is the line the tools print for an address: label is
// "local address: " or "remote address:", sep is ", " (or ": " in
// ibv_ud_pingpong's local line, a quirk kept for fidelity).
func AddressLine(label string, d Dest, sep string) string {
	return fmt.Sprintf("  %s LID 0x%04x, QPN 0x%06x, PSN 0x%06x%sGID %s\n",
		label, d.LID, d.QPN, d.PSN, sep, GIDString(d.GID))
}

// ClientExchange is pp_client_exch_dest on an established connection:
// send ours, read theirs, send "done".
func ClientExchange(c io.ReadWriter, mine Dest) (Dest, error) {
	if _, err := c.Write(mine.Marshal()); err != nil {
		return Dest{}, fmt.Errorf("couldn't send local address: %w", err)
	}
	msg := make([]byte, MsgLen)
	if _, err := io.ReadFull(c, msg); err != nil {
		return Dest{}, fmt.Errorf("couldn't read remote address: %w", err)
	}
	if _, err := c.Write(doneMsg); err != nil {
		return Dest{}, fmt.Errorf("couldn't write done: %w", err)
	}
	return ParseDest(msg)
}

// ServerExchange is pp_server_exch_dest on an accepted connection: read the
// client's address, let connect bring the QP up (RTR/RTS, or the AH for UD),
// then send ours and wait for "done".
func ServerExchange(c io.ReadWriter, mine Dest, connect func(Dest) error) (Dest, error) {
	msg := make([]byte, MsgLen)
	if n, err := io.ReadFull(c, msg); err != nil {
		return Dest{}, fmt.Errorf("%d/%d: couldn't read remote address: %w", n, MsgLen, err)
	}
	rem, err := ParseDest(msg)
	if err != nil {
		return Dest{}, err
	}
	if err := connect(rem); err != nil {
		return Dest{}, fmt.Errorf("couldn't connect to remote QP: %w", err)
	}
	if _, err := c.Write(mine.Marshal()); err != nil {
		return Dest{}, fmt.Errorf("couldn't send local address: %w", err)
	}
	done := make([]byte, len(doneMsg))
	if _, err := io.ReadFull(c, done); err != nil {
		return Dest{}, fmt.Errorf("couldn't receive done: %w", err)
	}
	return rem, nil
}
