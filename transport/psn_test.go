package transport

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPSNArithmetic(t *testing.T) {
	tests := []struct {
		name string
		got  PSN
		want PSN
	}{
		{"add", PSN(5).Add(3), 8},
		{"add wraps", PSN(PSNMask).Add(1), 0},
		{"add wraps far", PSN(0xFFFFF0).Add(0x20), 0x10},
		{"sub", PSN(8).Sub(3), 5},
		{"sub wraps", PSN(0).Sub(1), PSNMask},
		{"sub wraps far", PSN(0x10).Sub(0x20), 0xFFFFF0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.got)
			require.True(t, tc.got.Valid())
		})
	}
}

func TestPSNCompare(t *testing.T) {
	tests := []struct {
		a, b PSN
		diff int32
	}{
		{0, 0, 0},
		{1, 0, 1},
		{0, 1, -1},
		{0, PSNMask, 1},
		{PSNMask, 0, -1},
		{0x7FFFFF, 0, 0x7FFFFF},
		{0x800000, 0, -0x800000},
		{0x10, 0xFFFFF0, 0x20},
		{0xFFFFF0, 0x10, -0x20},
	}
	for _, tc := range tests {
		t.Run(tc.a.String()+"-"+tc.b.String(), func(t *testing.T) {
			require.Equal(t, tc.diff, tc.a.Diff(tc.b))
			require.Equal(t, tc.diff < 0, tc.a.Less(tc.b))
			require.Equal(t, tc.diff <= 0, tc.a.LessEq(tc.b))
			if tc.diff != -0x800000 {
				require.Equal(t, tc.a.Add(uint32(-tc.diff)), tc.b, "a + (b-a) == b")
			}
		})
	}
	require.False(t, PSN(0x1000000).Valid())
	require.Equal(t, "0x00abcd", PSN(0xabcd).String())
}
