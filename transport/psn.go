package transport

import "strconv"

// PSNMask keeps the 24 bits of a packet sequence number.
const PSNMask = 0xFFFFFF

// PSN is a 24-bit IBTA packet sequence number. Arithmetic wraps modulo 2^24
// and comparisons are serial-number comparisons: a is before b when b-a,
// taken as a signed 24-bit value, is positive. Values above PSNMask are not
// valid PSNs; Add and Sub always return valid ones.
type PSN uint32

// Add returns a+n modulo 2^24.
func (a PSN) Add(n uint32) PSN { return (a + PSN(n)) & PSNMask }

// Sub returns a-n modulo 2^24.
func (a PSN) Sub(n uint32) PSN { return (a - PSN(n)) & PSNMask }

// Diff returns a-b as a signed 24-bit distance in [-2^23, 2^23).
func (a PSN) Diff(b PSN) int32 { return int32(uint32(a-b)<<8) >> 8 }

// Less reports whether a comes before b in sequence space.
func (a PSN) Less(b PSN) bool { return a.Diff(b) < 0 }

// LessEq reports whether a comes before b or equals it (in 24 bits).
func (a PSN) LessEq(b PSN) bool { return a.Diff(b) <= 0 }

// Valid reports whether a fits in 24 bits.
func (a PSN) Valid() bool { return a <= PSNMask }

// String formats the PSN as 0x followed by six hex digits.
func (a PSN) String() string {
	s := strconv.FormatUint(uint64(a), 16)
	for len(s) < 6 {
		s = "0" + s
	}
	return "0x" + s
}
