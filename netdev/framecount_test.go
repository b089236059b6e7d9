package netdev

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFrameCount(t *testing.T) {
	var c FrameCount
	f, b := c.Load()
	require.Zero(t, f)
	require.Zero(t, b)
	c.Add(1, 60)
	c.Add(3, 9000*3)
	f, b = c.Load()
	require.Equal(t, uint64(4), f)
	require.Equal(t, uint64(60+27000), b)
	require.Panics(t, func() { c.Add(1<<16+1, 0) })
	require.Panics(t, func() { c.Add(1, 1<<32+1) })
}

// TestFrameCountCarry starts each field just below its carry point and
// crosses it from several goroutines at once: nothing is lost, and the
// word is back to a small value once carried.
func TestFrameCountCarry(t *testing.T) {
	for _, tc := range []struct {
		name          string
		frames, bytes uint64 // already counted, in the word
	}{
		{"frames", 1<<23 - 5, 100},
		{"bytes", 7, 1<<39 - 9000},
		{"both", 1<<23 - 1, 1<<39 - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c FrameCount
			c.packed.Store(tc.frames<<frameCountShift | tc.bytes)
			const workers, each = 4, 1000
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						c.Add(1, 1500)
					}
				}()
			}
			// Loads meanwhile never go backwards.
			var lastF, lastB uint64
			for range 100 {
				f, b := c.Load()
				require.GreaterOrEqual(t, f, lastF)
				require.GreaterOrEqual(t, b, lastB)
				lastF, lastB = f, b
			}
			wg.Wait()
			f, b := c.Load()
			require.Equal(t, tc.frames+workers*each, f)
			require.Equal(t, tc.bytes+workers*each*1500, b)
			require.Zero(t, c.packed.Load()&frameCountFull, "carried")
		})
	}
}

func BenchmarkFrameCount(b *testing.B) {
	var c FrameCount
	for range b.N {
		c.Add(1, 4150)
	}
}
