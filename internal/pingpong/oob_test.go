package pingpong

import (
	"io"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
)

// From ../shared/captures/host_ud_probe.txt: the message a real
// ibv_ud_pingpong server (rdma-core 44 on rxe) sent, as the probe decoded
// it, and the lines that server printed.
const (
	captureServerMsg   = "0000:000024:8ee9f0:00000000000000000000ffff0a320001"
	captureServerLocal = "  local address:  LID 0x0000, QPN 0x000024, PSN 0x8ee9f0: GID ::ffff:10.50.0.1\n"
	captureServerRem   = "  remote address: LID 0x0000, QPN 0x004242, PSN 0x000000, GID ::ffff:10.50.0.254\n"
	// ../shared/captures/ibv_rc_pingpong.txt, the client in guest 2.
	captureRCLocal = "  local address:  LID 0x0000, QPN 0x000013, PSN 0x814221, GID ::ffff:10.50.0.2\n"
)

func TestOOBMessageFromCapture(t *testing.T) {
	// The server's message as it is on the wire: 51 characters and a NUL.
	wire := append([]byte(captureServerMsg), 0)
	require.Len(t, wire, MsgLen)
	d, err := ParseDest(wire)
	require.NoError(t, err)
	want := Dest{LID: 0, QPN: 0x24, PSN: 0x8ee9f0, GID: netdev.GIDFromIP(netip.MustParseAddr("10.50.0.1"))}
	require.Equal(t, want, d)
	require.Equal(t, wire, d.Marshal(), "marshal gives back the bytes rdma-core sent")
	require.Equal(t, captureServerLocal, AddressLine("local address: ", d, ": "))

	probe := Dest{QPN: 0x4242, GID: netdev.GIDFromIP(netip.MustParseAddr("10.50.0.254"))}
	require.Equal(t, captureServerRem, AddressLine("remote address:", probe, ", "))
	// host_ud_probe.py builds the same wire GID by hand.
	require.Equal(t, "00000000000000000000ffff0a3200fe", WireGID(probe.GID))

	// ::ffff:10.50.0.2, as ibv_rc_pingpong printed it and would send it.
	rc := Dest{QPN: 0x13, PSN: 0x814221, GID: netdev.GIDFromIP(netip.MustParseAddr("10.50.0.2"))}
	require.Equal(t, captureRCLocal, AddressLine("local address: ", rc, ", "))
	require.Equal(t, "0000:000013:814221:00000000000000000000ffff0a320002\x00", string(rc.Marshal()))
}

func TestWireGID(t *testing.T) {
	for _, tc := range []struct{ ip, wire, text string }{
		{"10.50.0.2", "00000000000000000000ffff0a320002", "::ffff:10.50.0.2"},
		{"fe80::5054:ff:fe52:5801", "fe80000000000000505400fffe525801", "fe80::5054:ff:fe52:5801"},
		{"::", "00000000000000000000000000000000", "::"},
		{"::1", "00000000000000000000000000000001", "::1"},
		// IPv4-compatible: glibc's inet_ntop keeps the dotted quad.
		{"::a32:1", "0000000000000000000000000a320001", "::10.50.0.1"},
		{"2001:db8::1", "20010db8000000000000000000000001", "2001:db8::1"},
	} {
		t.Run(tc.ip, func(t *testing.T) {
			g := netdev.GID(netip.MustParseAddr(tc.ip).As16())
			require.Equal(t, tc.wire, WireGID(g))
			back, err := ParseWireGID(tc.wire)
			require.NoError(t, err)
			require.Equal(t, g, back)
			require.Equal(t, tc.text, GIDString(g))
		})
	}
}

func TestParseDestErrors(t *testing.T) {
	for _, s := range []string{
		"",
		"0000:000024:8ee9f0",
		"zzzz:000024:8ee9f0:00000000000000000000ffff0a320001",
		"0000:1000000:8ee9f0:00000000000000000000ffff0a320001",
		"0000:000024:8ee9f0:00000000000000000000ffff0a3200",
		"0000:000024:8ee9f0:00000000000000000000ffff0a3200zz",
		"10000:000024:8ee9f0:00000000000000000000ffff0a320001",
	} {
		_, err := ParseDest([]byte(s))
		require.ErrorIs(t, err, ErrMalformed, "%q", s)
	}
}

// The exchange, byte for byte: the client sends 52 bytes first; the
// server connects before it answers with 52 bytes; the client ends with
// the 5 bytes "done\0".
func TestOOBExchangeBytes(t *testing.T) {
	cli, srv := net.Pipe()
	defer cli.Close()
	defer srv.Close()
	mine := Dest{QPN: 0x11, PSN: 0xabcdef, GID: netdev.GIDFromIP(netip.MustParseAddr("10.50.0.200"))}
	theirs := Dest{QPN: 0x24, PSN: 0x8ee9f0, GID: netdev.GIDFromIP(netip.MustParseAddr("10.50.0.1"))}

	var got Dest
	var cerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		got, cerr = ClientExchange(cli, mine)
	}()
	// Play rdma-core's server by hand.
	msg := make([]byte, MsgLen)
	_, err := io.ReadFull(srv, msg)
	require.NoError(t, err)
	require.Equal(t, "0000:000011:abcdef:00000000000000000000ffff0a3200c8\x00", string(msg))
	_, err = srv.Write(append([]byte(captureServerMsg), 0))
	require.NoError(t, err)
	fin := make([]byte, 5)
	_, err = io.ReadFull(srv, fin)
	require.NoError(t, err)
	require.Equal(t, "done\x00", string(fin))
	<-done
	require.NoError(t, cerr)
	require.Equal(t, theirs, got)

	// And the server side against a hand-played client.
	cli2, srv2 := net.Pipe()
	defer cli2.Close()
	defer srv2.Close()
	var connected Dest
	var srem Dest
	var serr error
	done = make(chan struct{})
	go func() {
		defer close(done)
		srem, serr = ServerExchange(srv2, theirs, func(d Dest) error { connected = d; return nil })
	}()
	_, err = cli2.Write(mine.Marshal())
	require.NoError(t, err)
	_, err = io.ReadFull(cli2, msg)
	require.NoError(t, err)
	require.Equal(t, captureServerMsg+"\x00", string(msg))
	require.Equal(t, mine, connected, "the server connects before it answers")
	_, err = cli2.Write([]byte("done\x00"))
	require.NoError(t, err)
	<-done
	require.NoError(t, serr)
	require.Equal(t, mine, srem)
}
