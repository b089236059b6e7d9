package cq

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStatusString(t *testing.T) {
	// Values and texts of libibverbs' ibv_wc_status and ibv_wc_status_str.
	tests := []struct {
		s    Status
		v    uint8
		text string
	}{
		{Success, 0, "success"},
		{LocLenErr, 1, "local length error"},
		{LocQPOpErr, 2, "local QP operation error"},
		{LocEECOpErr, 3, "local EE context operation error"},
		{LocProtErr, 4, "local protection error"},
		{WRFlushErr, 5, "Work Request Flushed Error"},
		{MWBindErr, 6, "memory management operation error"},
		{BadRespErr, 7, "bad response error"},
		{LocAccessErr, 8, "local access error"},
		{RemInvReqErr, 9, "remote invalid request error"},
		{RemAccessErr, 10, "remote access error"},
		{RemOpErr, 11, "remote operation error"},
		{RetryExcErr, 12, "transport retry counter exceeded"},
		{RNRRetryExcErr, 13, "RNR retry counter exceeded"},
		{LocRDDViolErr, 14, "local RDD violation error"},
		{RemInvRdReqErr, 15, "remote invalid RD request"},
		{RemAbortErr, 16, "aborted error"},
		{InvEECNErr, 17, "invalid EE context number"},
		{InvEECStateErr, 18, "invalid EE context state"},
		{FatalErr, 19, "fatal error"},
		{RespTimeoutErr, 20, "response timeout error"},
		{GeneralErr, 21, "general error"},
	}
	require.Len(t, statusText, len(tests))
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			require.Equal(t, tc.v, uint8(tc.s))
			require.Equal(t, tc.text, tc.s.String())
			require.True(t, tc.s.Valid())
		})
	}
	require.Equal(t, "unknown", Status(22).String())
	require.False(t, Status(22).Valid())
	require.Equal(t, "unknown", Status(255).String())
}

func TestOpcodeString(t *testing.T) {
	tests := []struct {
		o    Opcode
		v    uint8
		text string
		recv bool
	}{
		{Send, 0, "SEND", false},
		{RDMAWrite, 1, "RDMA_WRITE", false},
		{RDMARead, 2, "RDMA_READ", false},
		{CompSwap, 3, "COMP_SWAP", false},
		{FetchAdd, 4, "FETCH_ADD", false},
		{BindMW, 5, "BIND_MW", false},
		{LocalInv, 6, "LOCAL_INV", false},
		{TSO, 7, "TSO", false},
		{RegMR, 8, "REG_MR", false},
		{Recv, 128, "RECV", true},
		{RecvRDMAWithImm, 129, "RECV_RDMA_WITH_IMM", true},
	}
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			require.Equal(t, tc.v, uint8(tc.o))
			require.Equal(t, tc.text, tc.o.String())
			require.Equal(t, tc.recv, tc.o.IsRecv())
		})
	}
	require.Equal(t, "Opcode(9)", Opcode(9).String())
	require.Equal(t, "Opcode(130)", Opcode(130).String())
}

func TestFlagsString(t *testing.T) {
	tests := []struct {
		f    Flags
		text string
	}{
		{0, "0"},
		{GRH, "GRH"},
		{WithImm, "WITH_IMM"},
		{IPCsumOK, "IP_CSUM_OK"},
		{WithInv, "WITH_INV"},
		{GRH | WithImm, "GRH|WITH_IMM"},
		{GRH | WithImm | IPCsumOK | WithInv, "GRH|WITH_IMM|IP_CSUM_OK|WITH_INV"},
		{WithInv | 0x30, "WITH_INV|0x30"},
		{0x100, "0x100"},
	}
	require.Equal(t, Flags(1), GRH)
	require.Equal(t, Flags(2), WithImm)
	require.Equal(t, Flags(4), IPCsumOK)
	require.Equal(t, Flags(8), WithInv)
	for _, tc := range tests {
		require.Equal(t, tc.text, tc.f.String())
	}
}
