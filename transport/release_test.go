package transport

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/internal/task"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/mcast"
	"github.com/softverbs/softverbs/netdev"
)

type countReleaser struct{ n int }

func (r *countReleaser) Release([]byte) { r.n++ }

// Every frame handed to the receive path goes back to the link that lent
// it, also when it is dropped before it becomes a packet: other traffic,
// a truncated packet, a bad ICRC.
func TestReceiveFrameReleasesDrops(t *testing.T) {
	e, err := NewEngine(Config{Exec: task.NewInline(), Keys: keys.NewTable(8), Mcast: mcast.NewTable(4, 4)})
	require.NoError(t, err)
	src := netdev.Endpoint{MAC: netdev.MAC{2, 0, 0, 0, 0, 1}, IP: netip.MustParseAddr("198.18.0.1"), Port: 0xc000}
	dst := netdev.Endpoint{MAC: netdev.MAC{2, 0, 0, 0, 0, 2}, IP: netip.MustParseAddr("198.18.0.2"), Port: RoCEv2Port}
	frame := func(port uint16, payload int) []byte {
		d := dst
		d.Port = port
		b := make([]byte, 128)
		n := netdev.EncodeRoCEv2(b, src, d, 64, 0, payload)
		require.NotZero(t, n)
		return b[:n+payload]
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		drop  DropReason
	}{
		{"not RoCE", frame(4792, 40), 0},
		{"truncated", frame(RoCEv2Port, BTHLen), DropTruncated},
		{"bad ICRC", frame(RoCEv2Port, 40), DropBadICRC},
		{"not a frame", []byte{1, 2, 3}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rel countReleaser
			before := e.counters.Drops(tc.drop)
			e.receiveFrame(tc.frame, &rel, wakeSchedule, false)
			require.Equal(t, 1, rel.n, "the frame was not given back")
			if tc.drop != 0 {
				require.Equal(t, before+1, e.counters.Drops(tc.drop))
			}
		})
	}
}

// A frame is taken only if its destination IP is one of the port's GIDs
// (rxe's rxe_chk_dgid): otherwise it is dropped as not local. Here every
// frame that gets past that check is a SEND to a QP that does not exist,
// dropped as such: which of the two counters moves says what the check
// decided. IPv4 and IPv6 destinations, an IPv4-mapped one in an IPv6
// header (the GID of an IPv4 address), and a GID table that SetAddrs
// changed.
func TestReceiveFrameDestination(t *testing.T) {
	e, err := NewEngine(Config{Exec: task.NewInline(), Keys: keys.NewTable(8), Mcast: mcast.NewTable(4, 4)})
	require.NoError(t, err)
	e.SetAddrs([]netip.Addr{netip.MustParseAddr("fe80::2"), netip.MustParseAddr("198.18.0.2")})
	frame := func(src, dst string) []byte {
		s := netdev.Endpoint{MAC: netdev.MAC{2, 0, 0, 0, 0, 1}, IP: netip.MustParseAddr(src), Port: 0xc000}
		d := netdev.Endpoint{MAC: netdev.MAC{2, 0, 0, 0, 0, 2}, IP: netip.MustParseAddr(dst), Port: RoCEv2Port}
		mapped := d.IP.Is4In6()
		if mapped { // the encoder sends those in an IPv4 header
			s.IP, d.IP = netip.MustParseAddr("fe80::1"), netip.MustParseAddr("fe80::2")
		}
		b := make([]byte, 128)
		payload := BTHLen + ICRCLen
		n := netdev.EncodeRoCEv2Headers(b, s, d, 64, 0, payload)
		require.NotZero(t, n)
		if mapped { // IPv6's destination address
			a := netip.MustParseAddr(dst).As16()
			copy(b[netdev.EthernetHeaderLen+24:], a[:])
		}
		// RC SEND_ONLY, P_Key 0xFFFF, to QP 0x123456, PSN 0.
		copy(b[n:], []byte{0x04, 0, 0xff, 0xff, 0, 0x12, 0x34, 0x56, 0, 0, 0, 0})
		b = b[:n+payload]
		require.NoError(t, PutICRC(b[netdev.EthernetHeaderLen:]))
		return b
	}
	for _, tc := range []struct {
		src, dst string
		local    bool
	}{
		{"198.18.0.1", "198.18.0.2", true},
		{"198.18.0.1", "198.18.0.9", false},
		{"fe80::1", "fe80::2", true},
		{"fe80::1", "fe80::9", false},
		{"fe80::1", "::ffff:198.18.0.2", true},
		{"fe80::1", "::ffff:198.18.0.9", false},
		{"198.18.0.1", "224.0.0.1", false}, // multicast: no group, so an unknown QP
	} {
		t.Run(tc.dst, func(t *testing.T) {
			f := frame(tc.src, tc.dst)
			if netip.MustParseAddr(tc.dst).Is4In6() {
				require.Equal(t, uint8(6), f[netdev.EthernetHeaderLen]>>4, "an IPv6 header")
			}
			notLocal, unknown := e.counters.Drops(DropNotLocal), e.counters.Drops(DropUnknownQP)
			e.receiveFrame(f, nil, wakeSchedule, false)
			if tc.local || netip.MustParseAddr(tc.dst).IsMulticast() {
				require.Equal(t, notLocal, e.counters.Drops(DropNotLocal), "dropped as not local")
				require.Equal(t, unknown+1, e.counters.Drops(DropUnknownQP), "not taken to its QP")
			} else {
				require.Equal(t, notLocal+1, e.counters.Drops(DropNotLocal), "taken, though not local")
				require.Equal(t, unknown, e.counters.Drops(DropUnknownQP))
			}
		})
	}
	e.SetAddrs([]netip.Addr{netip.MustParseAddr("198.18.0.9")})
	notLocal := e.counters.Drops(DropNotLocal)
	e.receiveFrame(frame("198.18.0.1", "198.18.0.2"), nil, wakeSchedule, false)
	require.Equal(t, notLocal+1, e.counters.Drops(DropNotLocal), "the old address is no longer local")
	unknown := e.counters.Drops(DropUnknownQP)
	e.receiveFrame(frame("198.18.0.1", "198.18.0.9"), nil, wakeSchedule, false)
	require.Equal(t, unknown+1, e.counters.Drops(DropUnknownQP), "the new one is")
}
