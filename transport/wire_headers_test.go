package transport

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBTHFields(t *testing.T) {
	b := BTH(make([]byte, BTHLen))
	b.Init(RCWriteOnlyImm, 0x8123, 0xABCDEF, 0x123456)
	require.Equal(t, []byte{0x0B, 0, 0x81, 0x23, 0, 0xAB, 0xCD, 0xEF, 0, 0x12, 0x34, 0x56}, []byte(b))
	b.SetSE(true)
	b.SetMigReq(true)
	b.SetPadCount(3)
	b.SetTVer(0xF)
	b.SetFECN(true)
	b.SetBECN(true)
	b.SetAckReq(true)
	require.Equal(t, []byte{0x0B, 0xFF, 0x81, 0x23, 0xC0, 0xAB, 0xCD, 0xEF, 0x80, 0x12, 0x34, 0x56}, []byte(b))
	require.True(t, b.SE())
	require.True(t, b.MigReq())
	require.Equal(t, uint8(3), b.PadCount())
	require.Equal(t, uint8(0xF), b.TVer())
	require.True(t, b.FECN())
	require.True(t, b.BECN())
	require.True(t, b.AckReq())
	require.Equal(t, uint16(0x8123), b.PKey())
	require.Equal(t, uint32(0xABCDEF), b.DestQP())
	require.Equal(t, PSN(0x123456), b.PSN())
	require.Equal(t, RCWriteOnlyImm, b.Opcode())

	b.SetPadCount(1)
	b.SetSE(false)
	b.SetTVer(0)
	b.SetFECN(false)
	b.SetAckReq(false)
	b.SetDestQP(0x1000001) // high bits dropped
	b.SetPSN(0xFFFFFF)
	b.SetPKey(DefaultPKey)
	b.SetOpcode(UDSendOnly)
	require.Equal(t, []byte{0x64, 0x50, 0xFF, 0xFF, 0x40, 0x00, 0x00, 0x01, 0x00, 0xFF, 0xFF, 0xFF}, []byte(b))
	require.False(t, b.SE())
	require.True(t, b.MigReq())
	require.Equal(t, uint8(1), b.PadCount())
}

func TestExtHeaders(t *testing.T) {
	r := RETH(make([]byte, RETHLen))
	r.SetVA(0x0102030405060708)
	r.SetRKey(0x11223344)
	r.SetDMALen(0x55667788)
	require.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}, []byte(r))
	require.Equal(t, uint64(0x0102030405060708), r.VA())
	require.Equal(t, uint32(0x11223344), r.RKey())
	require.Equal(t, uint32(0x55667788), r.DMALen())

	a := AETH(make([]byte, AETHLen))
	a.SetSyndrome(NAKSyndrome(NAKRemoteAccessError))
	a.SetMSN(0xFEDCBA)
	require.Equal(t, []byte{0x62, 0xFE, 0xDC, 0xBA}, []byte(a))
	require.Equal(t, Syndrome(0x62), a.Syndrome())
	require.Equal(t, uint32(0xFEDCBA), a.MSN())

	at := AtomicETH(make([]byte, AtomicETHLen))
	at.SetVA(0x1000)
	at.SetRKey(7)
	at.SetSwapAdd(0xAAAAAAAABBBBBBBB)
	at.SetCompare(0xCCCCCCCCDDDDDDDD)
	require.Equal(t, uint64(0x1000), at.VA())
	require.Equal(t, uint32(7), at.RKey())
	require.Equal(t, uint64(0xAAAAAAAABBBBBBBB), at.SwapAdd())
	require.Equal(t, uint64(0xCCCCCCCCDDDDDDDD), at.Compare())
	require.Equal(t, byte(0xAA), at[12])
	require.Equal(t, byte(0xDD), at[27])

	aa := AtomicAckETH(make([]byte, AtomicAckETHLen))
	aa.SetOrigData(0x0102030405060708)
	require.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8}, []byte(aa))
	require.Equal(t, uint64(0x0102030405060708), aa.OrigData())

	d := DETH([]byte{0, 0, 0, 0, 0xFF, 0, 0, 0})
	d.SetQKey(GSIQKey)
	d.SetSrcQP(0x123456)
	require.Equal(t, []byte{0x80, 0x01, 0x00, 0x00, 0, 0x12, 0x34, 0x56}, []byte(d))
	require.Equal(t, uint32(GSIQKey), d.QKey())
	require.Equal(t, uint32(0x123456), d.SrcQP())

	im := ImmDt(make([]byte, ImmDtLen))
	im.SetImm(0xDEADBEEF)
	require.Equal(t, []byte{0xDE, 0xAD, 0xBE, 0xEF}, []byte(im))
	require.Equal(t, uint32(0xDEADBEEF), im.Imm())

	ie := IETH(make([]byte, IETHLen))
	ie.SetRKey(0x01020304)
	require.Equal(t, []byte{1, 2, 3, 4}, []byte(ie))
	require.Equal(t, uint32(0x01020304), ie.RKey())
}

func TestSyndrome(t *testing.T) {
	tests := []struct {
		s     Syndrome
		typ   AckType
		val   uint8
		valid bool
		str   string
	}{
		{ACKSyndrome(CreditInvalid), AckTypeACK, 31, true, "ACK credits=31"},
		{ACKSyndrome(0), AckTypeACK, 0, true, "ACK credits=0"},
		{RNRNAKSyndrome(0x19), AckTypeRNRNAK, 0x19, true, "RNR NAK timer=25"},
		{NAKSyndrome(NAKPSNSeqError), AckTypeNAK, 0, true, "NAK (PSN sequence error)"},
		{NAKSyndrome(NAKInvalidRequest), AckTypeNAK, 1, true, "NAK (invalid request)"},
		{NAKSyndrome(NAKRemoteAccessError), AckTypeNAK, 2, true, "NAK (remote access error)"},
		{NAKSyndrome(NAKRemoteOperationalError), AckTypeNAK, 3, true, "NAK (remote operational error)"},
		{NAKSyndrome(NAKInvalidRDRequest), AckTypeNAK, 4, true, "NAK (invalid RD request)"},
		{NAKSyndrome(5), AckTypeNAK, 5, false, "NAK (reserved NAK code 5)"},
		{Syndrome(0x40), AckTypeReserved, 0, false, "reserved syndrome 0x40"},
		{Syndrome(0x80), AckTypeACK, 0, false, "invalid syndrome 0x80"},
	}
	for _, tc := range tests {
		t.Run(tc.str, func(t *testing.T) {
			require.Equal(t, tc.typ, tc.s.Type())
			require.Equal(t, tc.val, tc.s.Value())
			require.Equal(t, tc.valid, tc.s.Valid())
			require.Equal(t, tc.str, tc.s.String())
		})
	}
	require.Equal(t, Syndrome(0x1F), ACKSyndrome(CreditInvalid))
	require.Equal(t, Syndrome(0x39), RNRNAKSyndrome(0x19))
	require.Equal(t, Syndrome(0x60), NAKSyndrome(NAKPSNSeqError))
	require.Equal(t, CreditCode(31), ACKSyndrome(31).Credits())
	require.Equal(t, RNRTimerCode(25), RNRNAKSyndrome(25).RNRTimer())
	require.Equal(t, NAKRemoteOperationalError, NAKSyndrome(3).NAKCode())
}

func TestCreditTable(t *testing.T) {
	want := []uint32{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384,
		512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}
	for c, n := range want {
		got, ok := CreditCode(c).Credits()
		require.True(t, ok)
		require.Equal(t, n, got, "code %d", c)
		require.Equal(t, CreditCode(c), CreditCodeFor(n), "exact count %d", n)
		if n > 0 && c > 0 && n-1 > want[c-1] {
			require.Equal(t, CreditCode(c-1), CreditCodeFor(n-1), "count %d", n-1)
		}
	}
	_, ok := CreditInvalid.Credits()
	require.False(t, ok)
	tests := []struct {
		free uint32
		want CreditCode
	}{
		{0, 0}, {1, 1}, {5, 4}, {7, 5}, {100, 13}, {32767, 29}, {32768, 30}, {1 << 31, 30},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, CreditCodeFor(tc.free), "free %d", tc.free)
	}
}

func TestRNRTimerTable(t *testing.T) {
	ms := []float64{655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48,
		0.64, 0.96, 1.28, 1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96,
		61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52}
	require.Len(t, ms, 32)
	for c, m := range ms {
		want := time.Duration(m*1000+0.5) * time.Microsecond
		require.Equal(t, want, RNRTimerCode(c).Duration(), "code %d", c)
	}
	require.Equal(t, 61440*time.Microsecond, RNRTimerCode(0x19).Duration())
}
