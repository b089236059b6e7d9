package transport

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSendWindow(t *testing.T) {
	tests := []struct {
		name   string
		window int
		steps  func(c *Conn)
		want   int32 // windowLocked afterwards
	}{
		{"whole at the start", 128, func(c *Conn) {}, 128},
		{"a loss halves it", 128, func(c *Conn) { c.shrinkWindowLocked() }, 64},
		{"losses stop at minWindow", 128, func(c *Conn) {
			for range 10 {
				c.shrinkWindowLocked()
			}
		}, minWindow},
		{"a window smaller than minWindow stays", 16, func(c *Conn) { c.shrinkWindowLocked() }, 16},
		{"one PSN more per window acknowledged", 128, func(c *Conn) {
			c.shrinkWindowLocked()     // 64
			c.growWindowLocked(63)     // not yet
			c.growWindowLocked(1 + 65) // 65, and 65 towards 66
		}, 66},
		{"grows back to whole", 128, func(c *Conn) {
			c.shrinkWindowLocked()
			c.growWindowLocked(1 << 20)
		}, 128},
		{"nothing acknowledged changes nothing", 128, func(c *Conn) {
			c.shrinkWindowLocked()
			c.growWindowLocked(0)
			c.growWindowLocked(-5)
		}, 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Conn{e: &Engine{cfg: Config{Window: tt.window}}}
			tt.steps(c)
			require.Equal(t, tt.want, c.windowLocked())
			if tt.want == int32(tt.window) {
				require.Zero(t, c.req.cwnd, "a whole window is kept as 0")
			}
		})
	}
}

func TestWindowEdgeAsksForAck(t *testing.T) {
	c := &Conn{e: &Engine{cfg: Config{Window: 128}}}
	c.comp.psn = 0xFFFFF0 // wraps
	require.False(t, c.windowEdgeLocked(c.comp.psn.Add(128)), "a whole window adds no AckReq")
	c.shrinkWindowLocked() // 64
	require.False(t, c.windowEdgeLocked(c.comp.psn.Add(63)))
	require.True(t, c.windowEdgeLocked(c.comp.psn.Add(64)))
}
