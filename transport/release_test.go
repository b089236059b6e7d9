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
