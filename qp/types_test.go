package qp

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
)

func TestMTU(t *testing.T) {
	cases := []struct {
		m     MTU
		valid bool
		bytes int
		str   string
	}{
		{0, false, 0, "MTU(0)"},
		{MTU256, true, 256, "256"},
		{MTU512, true, 512, "512"},
		{MTU1024, true, 1024, "1024"},
		{MTU2048, true, 2048, "2048"},
		{MTU4096, true, 4096, "4096"},
		{6, false, 0, "MTU(6)"},
		{255, false, 0, "MTU(255)"},
	}
	for _, c := range cases {
		t.Run(c.str, func(t *testing.T) {
			require.Equal(t, c.valid, c.m.Valid())
			require.Equal(t, c.bytes, c.m.Bytes())
			require.Equal(t, c.str, c.m.String())
			if c.valid {
				require.Equal(t, c.m, MTUFromBytes(c.bytes), "round trip")
			}
		})
	}
	from := []struct {
		n int
		m MTU
	}{
		{-1, 0}, {0, 0}, {255, 0}, {256, MTU256}, {511, MTU256}, {512, MTU512},
		{1023, MTU512}, {1500, MTU1024}, {2048, MTU2048}, {4095, MTU2048},
		{4096, MTU4096}, {9000, MTU4096}, {1 << 30, MTU4096},
	}
	for _, c := range from {
		require.Equal(t, c.m, MTUFromBytes(c.n), "%d bytes", c.n)
	}
}

func TestAttrMaskString(t *testing.T) {
	cases := []struct {
		m    AttrMask
		want string
	}{
		{0, "0"},
		{AttrState, "STATE"},
		{AttrCurState, "CUR_STATE"},
		{AttrEnSQDAsync, "EN_SQD_ASYNC_NOTIFY"},
		{AttrState | AttrAV, "STATE|AV"},
		{AttrAV | AttrState, "STATE|AV"},
		{AttrPkeyIndex | AttrPort | AttrAccessFlags, "ACCESS_FLAGS|PKEY_INDEX|PORT"},
		{AttrMaxQPRdAtomic | AttrMaxDestRdAtomic, "MAX_QP_RD_ATOMIC|MAX_DEST_RD_ATOMIC"},
		{AttrPathMigState | AttrCap | AttrDestQPN, "PATH_MIG_STATE|CAP|DEST_QPN"},
		{AttrRateLimit, "RATE_LIMIT"},
		{1 << 21, "bit21"},
		{1 << 24, "bit24"},
		{1 << 26, "bit26"},
		{1<<31 | AttrQKey, "QKEY|bit31"},
	}
	for _, c := range cases {
		require.Equal(t, c.want, c.m.String(), "%#x", uint32(c.m))
	}
	// Every named bit has a distinct name.
	seen := map[string]bool{}
	for i := 0; i < 32; i++ {
		s := AttrMask(1 << i).String()
		require.False(t, seen[s], "bit %d name %q repeats", i, s)
		seen[s] = true
	}
}

func TestTypeStateOpcodeStrings(t *testing.T) {
	for typ, s := range map[Type]string{GSI: "GSI", RC: "RC", UC: "UC", UD: "UD", 0: "Type(0)", 9: "Type(9)"} {
		require.Equal(t, s, typ.String())
	}
	for st, s := range map[State]string{Reset: "RESET", Init: "INIT", RTR: "RTR", RTS: "RTS", SQD: "SQD",
		SQE: "SQE", Err: "ERR", 7: "State(7)", 200: "State(200)"} {
		require.Equal(t, s, st.String())
	}
	for op, s := range map[Opcode]string{OpRDMAWrite: "RDMA_WRITE", OpSendWithInv: "SEND_WITH_INV",
		OpRegMR: "REG_MR", OpAtomicFetchAdd: "ATOMIC_FETCH_AND_ADD", 10: "Opcode(10)"} {
		require.Equal(t, s, op.String())
	}
	require.True(t, UD.Datagram())
	require.True(t, GSI.Datagram())
	require.False(t, RC.Datagram())
	require.False(t, UC.Datagram())
}

func TestOpcodeClasses(t *testing.T) {
	type cls struct {
		local, atomic, readAtomic, send, imm bool
		wc                                   cq.Opcode
	}
	want := map[Opcode]cls{
		OpRDMAWrite:        {wc: cq.RDMAWrite},
		OpRDMAWriteWithImm: {imm: true, wc: cq.RDMAWrite},
		OpSend:             {send: true, wc: cq.Send},
		OpSendWithImm:      {send: true, imm: true, wc: cq.Send},
		OpRDMARead:         {readAtomic: true, wc: cq.RDMARead},
		OpAtomicCmpSwp:     {atomic: true, readAtomic: true, wc: cq.CompSwap},
		OpAtomicFetchAdd:   {atomic: true, readAtomic: true, wc: cq.FetchAdd},
		OpLocalInv:         {local: true, wc: cq.LocalInv},
		OpBindMW:           {local: true, wc: cq.BindMW},
		OpSendWithInv:      {send: true, wc: cq.Send},
		OpRegMR:            {local: true, wc: cq.RegMR},
	}
	for op, w := range want {
		t.Run(op.String(), func(t *testing.T) {
			require.Equal(t, w.local, op.Local())
			require.Equal(t, w.atomic, op.Atomic())
			require.Equal(t, w.readAtomic, op.ReadOrAtomic())
			require.Equal(t, w.send, op.Send())
			require.Equal(t, w.imm, op.HasImm())
			require.Equal(t, w.wc, op.WCOpcode())
		})
	}
}
