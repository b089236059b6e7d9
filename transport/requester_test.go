package transport

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResumePacket(t *testing.T) {
	const mtu = 1024
	first := PSN(0xFFFFFE) // the message's PSNs wrap
	tests := []struct {
		name   string
		retry  PSN
		length uint32
		want   uint32
	}{
		{"from the first packet", first, 4096, 0},
		{"from the third", first.Add(2), 4096, 2},
		{"from the last", first.Add(3), 4096, 3},
		{"past a multiple of the MTU: the last packet", first.Add(4), 4096, 3},
		{"past a partial last packet", first.Add(9), 4000, 3},
		{"before the message: its start", first.Sub(5), 4096, 0},
		{"zero-length message", first.Add(1), 0, 0},
		{"one short packet", first.Add(1), 10, 0},
	}
	for _, tc := range tests {
		got := resumePacket(tc.retry, first, tc.length, mtu)
		require.Equal(t, tc.want, got, "%s: retry %#x first %#x length %d", tc.name, uint32(tc.retry), uint32(first), tc.length)
	}
}
