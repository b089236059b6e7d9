//go:build linux

package xdp

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestDescRingRotate checks that rotate moves the first k unpublished
// descriptors behind the rest, each part in its order, wherever the
// indices are: across the slot array's end and across the uint32 wrap.
func TestDescRingRotate(t *testing.T) {
	for _, start := range []uint32{0, 5, 1<<32 - 3} {
		for n := uint32(0); n <= 8; n++ {
			for k := uint32(0); k <= n; k++ {
				var prod, cons uint32 = start, start
				r := descRing{xskRing: xskRing{prod: &prod, cons: &cons, size: 8, mask: 7, cached: start},
					descs: make([]unix.XDPDesc, 8)}
				for i := range n {
					r.put(unix.XDPDesc{Addr: uint64(i)})
				}
				require.Equal(t, n, r.unpublished())
				r.rotate(k, n)
				var got []uint64
				for i := range n {
					got = append(got, r.descs[(start+i)&r.mask].Addr)
				}
				var want []uint64
				for i := k; i < n; i++ {
					want = append(want, uint64(i))
				}
				for i := range k {
					want = append(want, uint64(i))
				}
				require.Equal(t, want, got, "start %#x, k %d of %d", start, k, n)
			}
		}
	}
}
