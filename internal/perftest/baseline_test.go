package perftest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBaselines(t *testing.T) {
	r := MemcpyBW(nil, 4096, time.Millisecond, false)
	require.Equal(t, uint64(4096), r.Size)
	require.GreaterOrEqual(t, r.Iters, uint64(5))
	require.Positive(t, r.Avg)
	require.InDelta(t, r.MsgRate*1e6*4096/(1<<20), r.Avg, r.Avg*1e-9, "MB/s and Mpps agree")

	l, err := ChanPingPong(nil, 64, 100, 2)
	require.NoError(t, err)
	require.Positive(t, l.Typical)
	require.LessOrEqual(t, l.Min, l.Typical)
	require.LessOrEqual(t, l.Typical, l.P99)
	_, err = ChanPingPong(nil, 64, 2, 2)
	require.ErrorIs(t, err, ErrTooFewSamples)
}
