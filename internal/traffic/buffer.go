package traffic

import (
	"bytes"
	"fmt"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/rvt"
)

// Buffer registers a fresh buffer of size bytes on n with AllAccess,
// filled with a pattern derived from seed (seed 0: zeros).
func Buffer(n *devopen.Node, size int, seed byte) (*rvt.MR, []byte, error) {
	b := make([]byte, size)
	Fill(b, seed)
	mr, err := n.PD.Reg(b, AllAccess)
	if err != nil {
		return nil, nil, err
	}
	return mr, b, nil
}

// Fill writes a recognisable pattern (zeros for seed 0).
func Fill(b []byte, seed byte) {
	if seed == 0 {
		clear(b)
		return
	}
	x := uint32(seed) * 2654435761
	for i := range b {
		x = x*1103515245 + 12345
		b[i] = byte(x >> 16)
	}
}

// SameBytes compares what a region holds at iova with what it should hold.
func SameBytes(mr *rvt.MR, iova uint64, want []byte) error {
	got := make([]byte, len(want))
	mr.ReadAt(got, iova)
	return EqualBytes(got, want)
}

// EqualBytes reports where got first differs from want.
func EqualBytes(got, want []byte) error {
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		return fmt.Errorf("data differs at byte %d of %d", i, len(want))
	}
	return nil
}

// SGEAt is the SGE of n bytes of mr at offset off, without allocating.
func SGEAt(mr *rvt.MR, off uint64, n int) rvt.SGE {
	return rvt.SGE{Addr: mr.IOVA + off, Length: uint32(n), Lkey: mr.Lkey}
}

// SGE returns a new one-entry SGL: n bytes of mr at offset off.
func SGE(mr *rvt.MR, off uint64, n int) []rvt.SGE { return []rvt.SGE{SGEAt(mr, off, n)} }

// SlotSGEs returns one SGE for each of n consecutive size-byte slots of
// mr, for loops that repost receives: a QP copies the SGL it is given, so
// one slice made up front serves every post (see SlotSGL).
func SlotSGEs(mr *rvt.MR, n, size int) []rvt.SGE {
	s := make([]rvt.SGE, n)
	for i := range s {
		s[i] = SGEAt(mr, uint64(i*size), size)
	}
	return s
}

// SlotSGL is the one-entry SGL of slot i of s, without allocating.
func SlotSGL(s []rvt.SGE, i uint64) []rvt.SGE { return s[i : i+1 : i+1] }
