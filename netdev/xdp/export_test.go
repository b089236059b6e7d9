//go:build linux

package xdp

// MaxAhead is maxAhead, for the link tests.
const MaxAhead = maxAhead

// SetPolled says whether the application busy-polls l (PollReceive took
// its last frames), as if it had.
func (l *Link) SetPolled(on bool) { l.polled.Store(on) }
