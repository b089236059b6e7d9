package transport

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// ibtaOpcodes is IBTA vol. 1 table 38 (plus the RoCEv2 CNP), written out
// independently of opDefs: name, extension headers in wire order, and the
// total header length the spec gives.
var ibtaOpcodes = []struct {
	op     Opcode
	name   string
	hdrs   []Hdr
	hdrLen int
}{
	{0x00, "RC SEND_FIRST", nil, 12},
	{0x01, "RC SEND_MIDDLE", nil, 12},
	{0x02, "RC SEND_LAST", nil, 12},
	{0x03, "RC SEND_LAST_WITH_IMMEDIATE", []Hdr{HdrImmDt}, 16},
	{0x04, "RC SEND_ONLY", nil, 12},
	{0x05, "RC SEND_ONLY_WITH_IMMEDIATE", []Hdr{HdrImmDt}, 16},
	{0x06, "RC RDMA_WRITE_FIRST", []Hdr{HdrRETH}, 28},
	{0x07, "RC RDMA_WRITE_MIDDLE", nil, 12},
	{0x08, "RC RDMA_WRITE_LAST", nil, 12},
	{0x09, "RC RDMA_WRITE_LAST_WITH_IMMEDIATE", []Hdr{HdrImmDt}, 16},
	{0x0A, "RC RDMA_WRITE_ONLY", []Hdr{HdrRETH}, 28},
	{0x0B, "RC RDMA_WRITE_ONLY_WITH_IMMEDIATE", []Hdr{HdrRETH, HdrImmDt}, 32},
	{0x0C, "RC RDMA_READ_REQUEST", []Hdr{HdrRETH}, 28},
	{0x0D, "RC RDMA_READ_RESPONSE_FIRST", []Hdr{HdrAETH}, 16},
	{0x0E, "RC RDMA_READ_RESPONSE_MIDDLE", nil, 12},
	{0x0F, "RC RDMA_READ_RESPONSE_LAST", []Hdr{HdrAETH}, 16},
	{0x10, "RC RDMA_READ_RESPONSE_ONLY", []Hdr{HdrAETH}, 16},
	{0x11, "RC ACKNOWLEDGE", []Hdr{HdrAETH}, 16},
	{0x12, "RC ATOMIC_ACKNOWLEDGE", []Hdr{HdrAETH, HdrAtomicAckETH}, 24},
	{0x13, "RC COMPARE_SWAP", []Hdr{HdrAtomicETH}, 40},
	{0x14, "RC FETCH_ADD", []Hdr{HdrAtomicETH}, 40},
	{0x16, "RC SEND_LAST_WITH_INVALIDATE", []Hdr{HdrIETH}, 16},
	{0x17, "RC SEND_ONLY_WITH_INVALIDATE", []Hdr{HdrIETH}, 16},
	{0x20, "UC SEND_FIRST", nil, 12},
	{0x21, "UC SEND_MIDDLE", nil, 12},
	{0x22, "UC SEND_LAST", nil, 12},
	{0x23, "UC SEND_LAST_WITH_IMMEDIATE", []Hdr{HdrImmDt}, 16},
	{0x24, "UC SEND_ONLY", nil, 12},
	{0x25, "UC SEND_ONLY_WITH_IMMEDIATE", []Hdr{HdrImmDt}, 16},
	{0x26, "UC RDMA_WRITE_FIRST", []Hdr{HdrRETH}, 28},
	{0x27, "UC RDMA_WRITE_MIDDLE", nil, 12},
	{0x28, "UC RDMA_WRITE_LAST", nil, 12},
	{0x29, "UC RDMA_WRITE_LAST_WITH_IMMEDIATE", []Hdr{HdrImmDt}, 16},
	{0x2A, "UC RDMA_WRITE_ONLY", []Hdr{HdrRETH}, 28},
	{0x2B, "UC RDMA_WRITE_ONLY_WITH_IMMEDIATE", []Hdr{HdrRETH, HdrImmDt}, 32},
	{0x64, "UD SEND_ONLY", []Hdr{HdrDETH}, 20},
	{0x65, "UD SEND_ONLY_WITH_IMMEDIATE", []Hdr{HdrDETH, HdrImmDt}, 24},
	{0x81, "CNP", []Hdr{HdrCNPResv}, 28},
}

func TestOpTable(t *testing.T) {
	want := map[Opcode]bool{}
	for _, tc := range ibtaOpcodes {
		want[tc.op] = true
		t.Run(tc.name, func(t *testing.T) {
			info := tc.op.Info()
			require.True(t, info.Valid())
			require.True(t, tc.op.Valid())
			require.Equal(t, tc.name, info.Name)
			require.Equal(t, tc.name, tc.op.String())
			require.Equal(t, tc.op, info.Op)
			if tc.hdrs == nil {
				tc.hdrs = []Hdr{}
			}
			require.Equal(t, tc.hdrs, info.Headers())
			require.Equal(t, tc.hdrLen, info.HdrLen)
			// Offsets follow the header list, starting right after the BTH.
			off := BTHLen
			for _, h := range tc.hdrs {
				require.True(t, info.HasHdr(h))
				require.Equal(t, off, info.Offset(h), h.String())
				off += h.Len()
			}
			require.Equal(t, tc.hdrLen, off)
			for h := Hdr(0); h < numHdrs; h++ {
				if !info.HasHdr(h) {
					require.Zero(t, info.Offset(h))
				}
			}
			// The name's class prefix matches the opcode's class bits.
			if tc.op != CNP {
				require.Equal(t, tc.op.Class().String(), tc.name[:2])
			}
		})
	}
	for op := 0; op < 256; op++ {
		if !want[Opcode(op)] {
			require.False(t, Opcode(op).Valid(), "opcode 0x%02x", op)
			require.False(t, Opcode(op).Info().Valid())
		}
	}
	require.Equal(t, "opcode 0x15", Opcode(0x15).String())
}

func TestOpFlags(t *testing.T) {
	tests := []struct {
		op   Opcode
		want []OpFlags
		not  []OpFlags
	}{
		{RCSendFirst, []OpFlags{FlagRequest, FlagSend, FlagFirst, FlagStart, FlagPayload, FlagRecvWQE},
			[]OpFlags{FlagEnd, FlagCompletesRecv, FlagResponse, FlagImm}},
		{RCSendMiddle, []OpFlags{FlagRequest, FlagSend, FlagMiddle, FlagPayload},
			[]OpFlags{FlagStart, FlagEnd, FlagRecvWQE, FlagCompletesRecv}},
		{RCSendLastImm, []OpFlags{FlagSend, FlagLast, FlagEnd, FlagImm, FlagCompletesRecv},
			[]OpFlags{FlagStart, FlagRecvWQE}},
		{RCSendOnlyInv, []OpFlags{FlagSend, FlagOnly, FlagStart, FlagEnd, FlagInv, FlagRecvWQE, FlagCompletesRecv}, nil},
		{RCWriteFirst, []OpFlags{FlagWrite, FlagFirst, FlagPayload}, []OpFlags{FlagRecvWQE, FlagCompletesRecv}},
		{RCWriteLast, []OpFlags{FlagWrite, FlagLast}, []OpFlags{FlagRecvWQE, FlagCompletesRecv}},
		{RCWriteLastImm, []OpFlags{FlagWrite, FlagLast, FlagImm, FlagRecvWQE, FlagCompletesRecv}, nil},
		{UCWriteOnlyImm, []OpFlags{FlagWrite, FlagOnly, FlagImm, FlagRecvWQE, FlagCompletesRecv}, nil},
		{RCReadRequest, []OpFlags{FlagRequest, FlagRead, FlagOnly}, []OpFlags{FlagPayload, FlagRecvWQE}},
		{RCReadResponseMiddle, []OpFlags{FlagResponse, FlagRead, FlagMiddle, FlagPayload}, []OpFlags{FlagRequest}},
		{RCReadResponseOnly, []OpFlags{FlagResponse, FlagRead, FlagOnly, FlagPayload}, nil},
		{RCAck, []OpFlags{FlagResponse}, []OpFlags{FlagPayload, FlagRequest, FlagRead, FlagAtomic}},
		{RCAtomicAck, []OpFlags{FlagResponse, FlagAtomic}, []OpFlags{FlagPayload}},
		{RCCompareSwap, []OpFlags{FlagRequest, FlagAtomic, FlagOnly}, []OpFlags{FlagPayload, FlagRecvWQE}},
		{RCFetchAdd, []OpFlags{FlagRequest, FlagAtomic}, []OpFlags{FlagPayload}},
		{UDSendOnly, []OpFlags{FlagRequest, FlagSend, FlagOnly, FlagPayload, FlagRecvWQE, FlagCompletesRecv}, []OpFlags{FlagImm}},
		{UDSendOnlyImm, []OpFlags{FlagSend, FlagImm}, nil},
		{CNP, []OpFlags{FlagCNP}, []OpFlags{FlagRequest, FlagResponse, FlagPayload}},
	}
	for _, tc := range tests {
		t.Run(tc.op.String(), func(t *testing.T) {
			info := tc.op.Info()
			for _, f := range tc.want {
				require.True(t, info.Has(f), "flag %#x", f)
			}
			for _, f := range tc.not {
				require.False(t, info.Has(f), "flag %#x", f)
			}
		})
	}
	// Invariants over the whole table.
	for op := 0; op < 256; op++ {
		info := Opcode(op).Info()
		if !info.Valid() {
			continue
		}
		pos := 0
		for _, f := range []OpFlags{FlagFirst, FlagMiddle, FlagLast, FlagOnly} {
			if info.Has(f) {
				pos++
			}
		}
		if info.Has(FlagCNP) {
			require.Zero(t, pos)
			continue
		}
		require.Equal(t, 1, pos, info.Name)
		require.NotEqual(t, info.Has(FlagRequest), info.Has(FlagResponse), info.Name)
		require.Equal(t, info.Has(FlagImm), info.HasHdr(HdrImmDt), info.Name)
		require.Equal(t, info.Has(FlagInv), info.HasHdr(HdrIETH), info.Name)
		require.Equal(t, Opcode(op).Class() == ClassUD, info.HasHdr(HdrDETH), info.Name)
		require.True(t, info.HasAny(FlagFirst|FlagOnly) == info.Has(FlagStart), info.Name)
		require.True(t, info.HasAny(FlagLast|FlagOnly) == info.Has(FlagEnd), info.Name)
	}
}

func TestOpClass(t *testing.T) {
	require.Equal(t, ClassRC, RCFetchAdd.Class())
	require.Equal(t, ClassUC, UCSendOnly.Class())
	require.Equal(t, ClassRD, Opcode(0x44).Class())
	require.Equal(t, ClassUD, UDSendOnly.Class())
	require.Equal(t, ClassCNP, CNP.Class())
	require.Equal(t, "RD", ClassRD.String())
}
