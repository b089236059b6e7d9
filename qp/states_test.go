package qp

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStateOps(t *testing.T) {
	// rdmavt's ib_rvt_state_ops, written out per state.
	want := map[State]Ops{
		Reset: 0,
		Init:  PostRecvOK,
		RTR:   PostRecvOK | ProcessRecvOK,
		RTS:   PostRecvOK | ProcessRecvOK | PostSendOK | ProcessSendOK | ProcessNextSendOK,
		SQD:   PostRecvOK | ProcessRecvOK | PostSendOK | ProcessSendOK,
		SQE:   PostRecvOK | ProcessRecvOK | PostSendOK | FlushSend,
		Err:   PostRecvOK | FlushRecv | PostSendOK | FlushSend,
	}
	ops := []Ops{PostRecvOK, PostSendOK, ProcessRecvOK, ProcessSendOK, ProcessNextSendOK, FlushSend, FlushRecv}
	for s := Reset; s <= Err; s++ {
		t.Run(s.String(), func(t *testing.T) {
			for _, op := range ops {
				require.Equal(t, want[s]&op != 0, s.Allows(op), "op %#x", op)
			}
			require.True(t, s.Allows(want[s]), "all its ops together")
			require.True(t, s.Allows(0))
			if missing := (FlushRecv<<1 - 1) &^ want[s]; missing != 0 {
				require.False(t, s.Allows(want[s]|missing))
			}
		})
	}
	require.False(t, State(7).Allows(0), "unknown state allows nothing")
	require.False(t, State(255).Allows(PostRecvOK))
}
