package transport

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// buildPkt returns BTH .. pad for op with payload bytes of payload and a
// correct pad count.
func buildPkt(op Opcode, payload int) []byte {
	info := op.Info()
	pad := (4 - payload%4) % 4
	b := make([]byte, info.HdrLen+payload+pad)
	bth := BTH(b)
	bth.Init(op, DefaultPKey, 0x11, 0x22)
	bth.SetPadCount(uint8(pad))
	for i := range payload {
		b[info.HdrLen+i] = byte(i + 1)
	}
	return b
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		op      Opcode
		payload int
	}{
		{RCSendFirst, 256}, {RCSendMiddle, 1024}, {RCSendLast, 1}, {RCSendLast, 3},
		{RCSendOnly, 0}, {RCSendOnly, 5}, {RCSendOnlyImm, 0}, {RCSendLastInv, 2},
		{RCWriteFirst, 4096}, {RCWriteOnly, 0}, {RCWriteOnlyImm, 7}, {RCWriteLastImm, 1},
		{RCReadRequest, 0}, {RCReadResponseFirst, 256}, {RCReadResponseMiddle, 256},
		{RCReadResponseLast, 9}, {RCReadResponseOnly, 0}, {RCAck, 0}, {RCAtomicAck, 0},
		{RCCompareSwap, 0}, {RCFetchAdd, 0}, {UCSendOnly, 64}, {UCWriteLast, 1},
		{UDSendOnly, 0}, {UDSendOnlyImm, 2048}, {CNP, 0},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v/%d", tc.op, tc.payload), func(t *testing.T) {
			b := buildPkt(tc.op, tc.payload)
			BTH(b).SetAckReq(true)
			BTH(b).SetSE(true)
			BTH(b).SetBECN(true)
			var p Packet
			require.NoError(t, Parse(b, &p))
			require.Equal(t, tc.op, p.Opcode)
			require.Same(t, tc.op.Info(), p.Info)
			require.Equal(t, uint32(0x11), p.DestQP)
			require.Equal(t, PSN(0x22), p.PSN)
			require.Equal(t, uint16(DefaultPKey), p.PKey)
			require.True(t, p.AckReq)
			require.True(t, p.SE)
			require.True(t, p.BECN)
			require.False(t, p.FECN)
			require.Equal(t, tc.op.Info().HdrLen, int(p.HdrLen))
			require.Equal(t, int(p.HdrLen), p.PayloadOffset())
			require.Equal(t, tc.payload, int(p.PayloadLen))
			require.Len(t, p.Payload(), tc.payload)
			if tc.payload > 0 {
				require.Equal(t, byte(1), p.Payload()[0])
			}
			require.Equal(t, BTH(b[:BTHLen]), p.BTH())
			views := map[Hdr][]byte{
				HdrRETH: p.RETH(), HdrAETH: p.AETH(), HdrAtomicETH: p.AtomicETH(),
				HdrAtomicAckETH: p.AtomicAckETH(), HdrDETH: p.DETH(), HdrImmDt: p.ImmDt(), HdrIETH: p.IETH(),
			}
			for h, v := range views {
				if p.Info.HasHdr(h) {
					require.Len(t, v, h.Len(), h.String())
					require.Equal(t, b[p.Info.Offset(h):p.Info.Offset(h)+h.Len()], v)
				} else {
					require.Nil(t, v, h.String())
				}
			}
		})
	}
}

// Parse into a used descriptor leaves nothing of the old packet: fill
// stores field by field, so a field it forgets would survive. Every field,
// exported or not, is first set to a non-zero value.
func TestParseOverwritesEveryField(t *testing.T) {
	var used Packet
	v := reflect.ValueOf(&used).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
		switch f.Kind() {
		case reflect.Slice:
			f.Set(reflect.ValueOf([]byte{0xEE}))
		case reflect.Pointer:
			f.Set(reflect.ValueOf(RCAck.Info()))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Uint8, reflect.Uint16, reflect.Uint32:
			f.SetUint(0xEE)
		default:
			t.Fatalf("field %s: kind %v not covered", v.Type().Field(i).Name, f.Kind())
		}
		require.False(t, f.IsZero(), v.Type().Field(i).Name)
	}
	b := buildPkt(RCSendOnly, 8)
	var fresh Packet
	require.NoError(t, Parse(b, &fresh))
	require.NoError(t, Parse(b, &used))
	require.Equal(t, fresh, used)
}

func TestParseDrops(t *testing.T) {
	mod := func(op Opcode, payload int, f func(b []byte) []byte) []byte {
		return f(buildPkt(op, payload))
	}
	tests := []struct {
		name string
		b    []byte
		want DropReason
	}{
		{"empty", nil, DropTruncated},
		{"short BTH", buildPkt(RCSendOnly, 0)[:11], DropTruncated},
		{"reserved opcode 0x15", mod(RCSendOnly, 0, func(b []byte) []byte { b[0] = 0x15; return b }), DropBadOpcode},
		{"RD opcode", mod(RCSendOnly, 0, func(b []byte) []byte { b[0] = 0x44; return b }), DropBadOpcode},
		{"UD SEND_FIRST", mod(RCSendOnly, 0, func(b []byte) []byte { b[0] = 0x60; return b }), DropBadOpcode},
		{"TVer 1", mod(RCSendOnly, 0, func(b []byte) []byte { BTH(b).SetTVer(1); return b }), DropBadVersion},
		{"RETH cut", buildPkt(RCWriteOnly, 0)[:27], DropTruncated},
		{"DETH missing", buildPkt(UDSendOnly, 0)[:12], DropTruncated},
		{"AtomicETH cut", buildPkt(RCFetchAdd, 0)[:36], DropTruncated},
		{"pad without payload", mod(RCSendOnly, 0, func(b []byte) []byte { BTH(b).SetPadCount(1); return b }), DropBadPad},
		{"pad longer than payload", mod(RCSendOnly, 0, func(b []byte) []byte {
			BTH(b).SetPadCount(3)
			return append(b, 0, 0)
		}), DropBadPad},
		{"not a multiple of 4", mod(RCSendOnly, 4, func(b []byte) []byte { return b[:len(b)-1] }), DropBadLength},
		{"payload on ACK", mod(RCAck, 0, func(b []byte) []byte { return append(b, 0, 0, 0, 0) }), DropBadLength},
		{"payload on atomic ACK", mod(RCAtomicAck, 0, func(b []byte) []byte { return append(b, 0, 0, 0, 0) }), DropBadLength},
		{"payload on READ request", mod(RCReadRequest, 0, func(b []byte) []byte { return append(b, 0, 0, 0, 0) }), DropBadLength},
		{"payload on FETCH_ADD", mod(RCFetchAdd, 0, func(b []byte) []byte { return append(b, 0, 0, 0, 0) }), DropBadLength},
		{"payload on CNP", mod(CNP, 0, func(b []byte) []byte { return append(b, 0, 0, 0, 0) }), DropBadLength},
		{"empty SEND_FIRST", buildPkt(RCSendFirst, 0), DropBadLength},
		{"empty SEND_MIDDLE", buildPkt(RCSendMiddle, 0), DropBadLength},
		{"empty SEND_LAST", buildPkt(RCSendLast, 0), DropBadLength},
		{"empty READ_RESPONSE_MIDDLE", buildPkt(RCReadResponseMiddle, 0), DropBadLength},
		{"empty UC WRITE_FIRST", buildPkt(UCWriteFirst, 0), DropBadLength},
		{"pad on SEND_FIRST", buildPkt(RCSendFirst, 255), DropBadPad},
		{"pad on WRITE_MIDDLE", buildPkt(RCWriteMiddle, 1023), DropBadPad},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p Packet
			err := Parse(tc.b, &p)
			require.Error(t, err)
			r, ok := DropReasonOf(err)
			require.True(t, ok)
			require.Equal(t, tc.want, r, err.Error())
			var de *DropError
			require.True(t, errors.As(fmt.Errorf("rx: %w", err), &de))
			require.Equal(t, tc.want, de.Reason)
		})
	}
}

func TestDropReason(t *testing.T) {
	names := map[string]bool{}
	for r := DropNone; r < NumDropReasons; r++ {
		s := r.String()
		require.NotContains(t, s, "drop reason", "reason %d has no name", r)
		require.False(t, names[s], "duplicate name %q", s)
		names[s] = true
		if r == DropNone {
			require.NoError(t, r.Err())
			continue
		}
		got, ok := DropReasonOf(r.Err())
		require.True(t, ok)
		require.Equal(t, r, got)
	}
	require.Equal(t, "packet dropped: bad ICRC", DropBadICRC.Err().Error())
	got, ok := DropReasonOf((NumDropReasons + 3).Err())
	require.True(t, ok)
	require.Equal(t, NumDropReasons+3, got)
	_, ok = DropReasonOf(errors.New("other"))
	require.False(t, ok)
	r, ok := DropReasonOf(nil)
	require.True(t, ok)
	require.Equal(t, DropNone, r)
}

func TestParseNoAlloc(t *testing.T) {
	good := buildPkt(RCWriteOnlyImm, 100)
	bad := buildPkt(RCSendFirst, 0)
	var p Packet
	allocs := testing.AllocsPerRun(100, func() {
		if Parse(good, &p) != nil {
			panic("parse failed")
		}
		if Parse(bad, &p) == nil {
			panic("parse succeeded")
		}
	})
	require.Zero(t, allocs)
}

// fillBuilt (the loopback fast path, which skips Parse's checks) describes
// every packet Parse accepts as Parse does, with the payload in the packet
// or held apart, for every opcode, payload length and pad count.
func TestFillBuiltMatchesParse(t *testing.T) {
	checked := 0
	for op := range 256 {
		info := &opTable[op]
		if !info.valid {
			continue
		}
		for payload := range 10 {
			for pad := range 4 {
				b := make([]byte, info.HdrLen+payload+pad)
				bth := BTH(b)
				bth.Init(Opcode(op), DefaultPKey, 0x11, 0x22)
				bth.SetPadCount(uint8(pad))
				bth.SetSE(true)
				for i := range payload {
					b[info.HdrLen+i] = byte(i + 1)
				}
				var want Packet
				if Parse(b, &want) != nil {
					continue // the builders make no such packet
				}
				msg := fmt.Sprintf("%v payload %d pad %d", Opcode(op), payload, pad)
				want.span = 3
				var in, apart Packet
				fillBuilt(&in, b, nil, 3)
				require.Equal(t, want, in, msg)
				ext := b[info.HdrLen : info.HdrLen+payload]
				fillBuilt(&apart, b[:info.HdrLen], ext, 3)
				require.Equal(t, want.Payload(), apart.Payload(), msg)
				require.Equal(t, b[:info.HdrLen], apart.Buf, msg)
				// Apart from where the payload lies, the same descriptor.
				apart.Buf, apart.ext = want.Buf, want.ext
				require.Equal(t, want, apart, msg)
				checked++
			}
		}
	}
	require.Greater(t, checked, 100)
}
