package cm

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLayouts: every layout's fields lie inside the MAD data, in order,
// without overlapping; numbers are at most 64 bits and byte fields are
// byte-aligned; Set then Get returns the value and touches no other bit.
func TestLayouts(t *testing.T) {
	all := append([]Layout{{Attr: 0, Fields: headerLayout}}, layouts...)
	for _, l := range all {
		t.Run(l.Attr.String(), func(t *testing.T) {
			prevEnd := 0
			if l.Attr != 0 {
				prevEnd = MADHeaderLen * 8
			}
			for _, fd := range l.Fields {
				start := int(fd.Off)*8 + int(fd.Bit)
				require.GreaterOrEqual(t, start, prevEnd, "%s overlaps the field before it", fd.Name)
				prevEnd = start + int(fd.Bits)
				require.LessOrEqual(t, fd.End(), MADLen, fd.Name)
				require.Less(t, fd.Bit, uint8(8), fd.Name)
				if fd.IsBytes() {
					require.Zero(t, fd.Bit, fd.Name)
					require.Zero(t, fd.Bits%8, fd.Name)
					continue
				}
				require.LessOrEqual(t, int(fd.Bit)+int(fd.Bits), 64, fd.Name)
				r := rand.New(rand.NewPCG(1, uint64(fd.Off)))
				for range 20 {
					m := make([]byte, MADLen)
					for i := range m {
						m[i] = byte(r.Uint32())
					}
					before := append([]byte(nil), m...)
					v := r.Uint64() & fd.mask()
					fd.Set(m, v)
					require.Equal(t, v, fd.Get(m), fd.Name)
					fd.Set(m, fd.Get(before))
					require.Equal(t, before, m, "%s: Set touched other bits", fd.Name)
				}
			}
		})
	}
}

func TestParseMADErrors(t *testing.T) {
	m := make(MAD, MADLen)
	m.InitHeader(MethodSend, AttrREQ, 7)
	_, err := ParseMAD(m)
	require.NoError(t, err)
	_, err = ParseMAD(m[:100])
	require.ErrorIs(t, err, ErrShortMAD)
	m2 := append(MAD(nil), m...)
	m2[1] = 0x04
	_, err = ParseMAD(m2)
	require.ErrorIs(t, err, ErrNotCM)
	m3 := append(MAD(nil), m...)
	hdrAttrID.Set(m3, 0x0042)
	_, err = ParseMAD(m3)
	require.ErrorIs(t, err, ErrUnknownID)
	for id := range attrNames {
		if id == AttrAPR {
			continue // not described
		}
		_, ok := LayoutOf(id)
		require.True(t, ok, id.String())
	}
}

func TestRejectReasons(t *testing.T) {
	for r := RejectReason(0); r < 40; r++ {
		name := r.String()
		if r.Known() {
			require.NotContains(t, name, "REJ_REASON_")
		}
		e := &RejectError{Reason: r, PrivateData: []byte("x")}
		var err error = fmt.Errorf("dial: %w", e)
		require.ErrorIs(t, err, ErrRejected)
		require.ErrorIs(t, err, r)
		require.NotErrorIs(t, err, r+1)
		var re *RejectError
		require.True(t, errors.As(err, &re))
		require.Equal(t, []byte("x"), re.PrivateData)
	}
	require.Equal(t, "CONSUMER_DEFINED", RejConsumerDefined.String())
	require.Equal(t, "INVALID_SERVICE_ID", RejInvalidServiceID.String())
	require.Equal(t, "STALE_CONN", RejStaleConn.String())
	require.Equal(t, "VENDOR_OPTION_NOT_SUPPORTED", RejVendorOptionNotSupported.String())
	require.Equal(t, "REJ_REASON_34", RejectReason(34).String())
}

func TestServiceID(t *testing.T) {
	tests := []struct {
		ps   PortSpace
		port uint16
		want ServiceID
	}{
		{PSTCP, 7174, 0x0000000001061C06},
		{PSTCP, 7471, 0x0000000001061D2F},
		{PSUDP, 7174, 0x0000000001111C06},
		{PSIB, 1, 0x00000000013F0001},
	}
	for _, tt := range tests {
		s := MakeServiceID(tt.ps, tt.port)
		require.Equal(t, tt.want, s)
		require.Equal(t, tt.ps, s.PortSpace())
		require.Equal(t, tt.port, s.Port())
		require.True(t, s.IsRDMACM())
	}
}

func TestCMAHeader(t *testing.T) {
	for _, tt := range []struct{ src, dst string }{
		{"10.0.0.1:4000", "10.0.0.2"},
		{"[fd00::1]:5", "fd00::2"},
		{"[::ffff:10.0.0.1]:4000", "::ffff:10.0.0.2"},
	} {
		h := make(CMAHeader, CMAHeaderLen)
		src := netip.MustParseAddrPort(tt.src)
		h.Set(src, netip.MustParseAddr(tt.dst))
		require.NoError(t, h.Check())
		require.Equal(t, src.Addr().Unmap(), h.SrcAddr())
		require.Equal(t, src.Port(), h.SrcPort())
		require.Equal(t, netip.MustParseAddr(tt.dst).Unmap(), h.DstAddr())
	}
	h := make(CMAHeader, CMAHeaderLen)
	h[1] = 5 << 4
	require.ErrorIs(t, h.Check(), ErrBadCMAHeader)
	h[1], h[0] = 4<<4, 1
	require.ErrorIs(t, h.Check(), ErrBadCMAHeader)
}
