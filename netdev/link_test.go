package netdev

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// releaseRecorder is a Releaser that keeps what it is given back.
type releaseRecorder struct{ got [][]byte }

func (r *releaseRecorder) Release(b []byte) { r.got = append(r.got, b) }

// TestReceiverDeliverOrDrop checks the rule every link follows for a
// received frame: with a handler it is counted and handed over, without
// one it is counted as dropped and goes back to the pool.
func TestReceiverDeliverOrDrop(t *testing.T) {
	var r Receiver
	var rel releaseRecorder
	f := []byte{1, 2, 3}

	r.Deliver(f, len(f), &rel) // no handler yet
	require.Len(t, rel.got, 1, "the frame goes back to the pool")
	require.Same(t, &f[0], &rel.got[0][0])
	frames, bytes, dropped := r.RxCounts()
	require.EqualValues(t, 1, dropped)
	require.Zero(t, frames)
	require.Zero(t, bytes)

	var got [][]byte
	r.SetHandler(func(b []byte) { got = append(got, b) })
	r.Deliver(f, 100, &rel)
	require.Len(t, got, 1)
	require.Same(t, &f[0], &got[0][0], "the handler owns the frame")
	require.Len(t, rel.got, 1, "not released for the handler")
	frames, bytes, dropped = r.RxCounts()
	require.EqualValues(t, 1, frames)
	require.EqualValues(t, 100, bytes, "the link's byte count")
	require.EqualValues(t, 1, dropped)

	r.SetHandler(nil)
	r.Deliver(f, len(f), &rel)
	require.Len(t, got, 1, "no longer handed over")
	require.Len(t, rel.got, 2)
	require.Same(t, &f[0], &rel.got[1][0], "back to the pool")
	frames, _, dropped = r.RxCounts()
	require.EqualValues(t, 2, dropped)
	require.EqualValues(t, 1, frames)
}
