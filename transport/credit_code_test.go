package transport

import "testing"

// creditCodeBySearch is CreditCodeFor as IBTA table 46 reads: the largest
// code whose count does not exceed free.
func creditCodeBySearch(free uint32) CreditCode {
	c := CreditCode(0)
	for i, n := range creditCounts {
		if n > free {
			break
		}
		c = CreditCode(i)
	}
	return c
}

// TestCreditCodeForMatchesTable checks the closed form against a search of
// the table for every count up to well past the largest code, and at the
// top of the range.
func TestCreditCodeForMatchesTable(t *testing.T) {
	check := func(free uint32) {
		if got, want := CreditCodeFor(free), creditCodeBySearch(free); got != want {
			t.Fatalf("CreditCodeFor(%d) = %d, table says %d", free, got, want)
		}
	}
	for free := uint32(0); free <= 1<<17; free++ {
		check(free)
	}
	for _, free := range []uint32{1<<31 - 1, 1 << 31, 1<<32 - 1} {
		check(free)
	}
}
