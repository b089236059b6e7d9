package proto

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCMEventRecord pins the offsets a C librdmacm reads and round-trips
// random records.
func TestCMEventRecord(t *testing.T) {
	fields, size := Layout(&CMEvent{})
	require.Equal(t, CMEventRecordSize, size)
	off := map[string]int{}
	for _, f := range fields {
		off[f.Name] = f.Offset
	}
	for name, want := range map[string]int{"context": 0, "id": 8, "listen_id": 12, "event": 16, "status": 20,
		"qp_num": 24, "qkey": 28, "private_data_len": 38, "ud": 39, "src_addr.family": 40, "dst_addr.addr": 72,
		"ah_attr.dgid": 88, "private_data": 128} {
		require.Equal(t, want, off[name], name)
	}
	r := rand.New(rand.NewPCG(5, 6))
	for range 100 {
		ev := CMEvent{Context: r.Uint64(), ID: r.Uint32(), ListenID: r.Uint32(), Event: r.Uint32N(16),
			Status: int32(r.Uint32()), QPNum: r.Uint32(), SRQ: r.IntN(2) == 1, UD: r.IntN(2) == 1,
			PrivateDataLen: uint8(r.IntN(256)), Src: CMAddr{Family: AFInet, Port: uint16(r.Uint32())}}
		for i := range ev.PrivateData {
			ev.PrivateData[i] = byte(r.Uint32())
		}
		ev.AH.DGID[15] = byte(r.Uint32())
		ev.AH.IsGlobal = true
		b := make([]byte, CMEventRecordSize)
		require.NoError(t, PutRecord(b, &ev))
		require.Equal(t, ev.Event, binary.LittleEndian.Uint32(b[16:]))
		require.Equal(t, uint32(ev.Status), binary.LittleEndian.Uint32(b[20:]))
		require.Equal(t, ev.PrivateData[:], b[128:])
		var got CMEvent
		require.NoError(t, ParseRecord(b, &got))
		require.Equal(t, ev, got)
	}
	require.Error(t, PutRecord(make([]byte, CMEventRecordSize-1), &CMEvent{}))
	require.Error(t, ParseRecord(make([]byte, CMEventRecordSize+1), &CMEvent{}))
}

// FuzzCMEventRecord: any bytes parse without panicking, and a record that
// parses lays out to the same bytes.
func FuzzCMEventRecord(f *testing.F) {
	b := make([]byte, CMEventRecordSize)
	_ = PutRecord(b, &CMEvent{Event: 4, ID: 2, ListenID: 1, PrivateDataLen: 56})
	f.Add(b)
	f.Add(b[:100])
	f.Fuzz(func(t *testing.T, in []byte) {
		var ev CMEvent
		if ParseRecord(in, &ev) != nil {
			return
		}
		out := make([]byte, len(in))
		if err := PutRecord(out, &ev); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("round trip differs:\n in %x\nout %x", in, out)
		}
	})
}
