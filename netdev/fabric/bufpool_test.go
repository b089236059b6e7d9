package fabric

import (
	"testing"
	"unsafe"
)

// TestNewFrameBufPlacement checks the length, capacity and placement of
// new frame buffers, and that the pool gives a buffer back as it was.
func TestNewFrameBufPlacement(t *testing.T) {
	for _, size := range []int{64, 1518, 4096 + 1024, 9018} {
		b := newFrameBuf(size)
		if len(b) != size || cap(b) != size {
			t.Fatalf("size %d: len %d cap %d", size, len(b), cap(b))
		}
		if a := uintptr(unsafe.Pointer(unsafe.SliceData(b))) % frameAlign; a != frameSkew {
			t.Fatalf("size %d: address %% %d = %d, want %d", size, frameAlign, a, frameSkew)
		}
		p := newBufPool(size)
		p.Put(b)
		if g := p.Get(); unsafe.SliceData(g) != unsafe.SliceData(b) || len(g) != size {
			t.Fatalf("size %d: the pool did not give the buffer back whole", size)
		}
	}
}
