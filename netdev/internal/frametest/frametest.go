// Package frametest holds helpers for the tests of the link kinds under
// netdev: a recorder of delivered frames, raw and RoCEv2 frames, MACs, and
// whether the race detector is on.
package frametest

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
)

// Recorder collects the frames a link delivers.
type Recorder struct {
	mu     sync.Mutex
	frames [][]byte
}

// Handler is the netdev.Handler that records a frame.
func (r *Recorder) Handler(frame []byte) {
	r.mu.Lock()
	r.frames = append(r.frames, frame)
	r.mu.Unlock()
}

// Got returns the frames recorded so far.
func (r *Recorder) Got() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.frames...)
}

// Count returns how many frames were recorded.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.frames)
}

// Reset forgets the frames recorded so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.frames = nil
	r.mu.Unlock()
}

// RawFrame makes an Ethernet frame from src to dst with n payload bytes
// whose first byte is tag.
func RawFrame(src, dst netdev.MAC, tag byte, n int) []byte {
	b := make([]byte, netdev.EthernetHeaderLen+n)
	e := netdev.Ethernet(b)
	e.SetDst(dst)
	e.SetSrc(src)
	e.SetEtherType(netdev.EtherTypeIPv4)
	if n > 0 {
		b[netdev.EthernetHeaderLen] = tag
	}
	return b
}

// MACs the tests give their ports.
var (
	MACA = netdev.MAC{0x02, 0, 0, 0, 0, 0x0a}
	MACB = netdev.MAC{0x02, 0, 0, 0, 0, 0x0b}
	MACC = netdev.MAC{0x02, 0, 0, 0, 0, 0x0c}
)

// EP returns an endpoint; ip must parse.
func EP(mac netdev.MAC, ip string, port uint16) netdev.Endpoint {
	return netdev.Endpoint{MAC: mac, IP: netip.MustParseAddr(ip), Port: port}
}

// BuildFrame encodes a RoCEv2-style frame with a payload of n bytes
// (0, 1, 2, ...) and returns exactly the frame.
func BuildFrame(t testing.TB, src, dst netdev.Endpoint, ttl, tos uint8, n int) []byte {
	t.Helper()
	hl := netdev.HeaderLen(netdev.UsesIPv6(src.IP, dst.IP))
	buf := make([]byte, hl+n)
	for i := range n {
		buf[hl+i] = byte(i)
	}
	got := netdev.EncodeRoCEv2(buf, src, dst, ttl, tos, n)
	require.Equal(t, hl, got)
	return buf
}

// ReleaseRecorder is a netdev.Releaser that keeps what it is given back.
type ReleaseRecorder struct{ Released [][]byte }

// Release records b.
func (r *ReleaseRecorder) Release(b []byte) { r.Released = append(r.Released, b) }

// Chan receives copies of frames from a link on its own goroutine.
type Chan chan []byte

// Handler is the netdev.Handler that sends a copy of f.
func (c Chan) Handler(f []byte) { c <- append([]byte(nil), f...) }

// Next returns the next frame, failing t after 5 s without one.
func (c Chan) Next(t testing.TB) []byte {
	t.Helper()
	select {
	case f := <-c:
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("no frame received")
		return nil
	}
}
