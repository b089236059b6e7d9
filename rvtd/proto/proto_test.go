package proto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/rvtd/ring"
)

// directions lists the bodies of a spec: request and reply, or the event.
func directions(s *Spec) []Flags {
	if s.Event {
		return []Flags{FlagEvent}
	}
	return []Flags{0, FlagReply}
}

// randomBody returns valid body bytes for the layout fields (tails with
// 0-3 elements) and the number of descriptors the body names.
func randomBody(r *rand.Rand, fields []Field) (b []byte, nfds int) {
	for _, f := range fields {
		switch {
		case f.Type == "fd":
			nfds++
		case f.Type == "[]":
			for range r.IntN(4) {
				e, n := randomBody(r, f.Elem)
				b = append(b, e...)
				nfds += n
			}
		case f.Type == "bool":
			b = append(b, byte(r.IntN(2)))
		case strings.HasPrefix(f.Type, "reserved"):
			b = append(b, make([]byte, f.Size)...)
		case strings.HasPrefix(f.Type, "char"):
			s := make([]byte, f.Size)
			for i := range r.IntN(f.Size) {
				s[i] = byte('a' + r.IntN(26))
			}
			b = append(b, s...)
		default:
			for range f.Size {
				b = append(b, byte(r.Uint32()))
			}
		}
	}
	return b, nfds
}

func message(h Header, body []byte, nfds int) ([]byte, []int) {
	h.Length = uint32(HeaderSize + len(body))
	h.NFDs = uint8(nfds)
	b := make([]byte, HeaderSize, h.Length)
	PutHeader(b, h)
	fds := make([]int, nfds)
	for i := range fds {
		fds[i] = 100 + i
	}
	return append(b, body...), fds
}

// TestRoundTrip decodes random valid bodies of every message in every
// direction and checks that encoding gives back the same bytes and
// descriptors.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range Specs() {
		for _, f := range directions(&s) {
			t.Run(s.Name+"/"+dirName(f), func(t *testing.T) {
				fields, _ := Layout(s.body(f))
				for i := range 50 {
					body, nfds := randomBody(r, fields)
					h := Header{Op: s.Op, Flags: f, Handle: r.Uint32()}
					if f != FlagEvent {
						h.ReqID = uint32(i)
					}
					in, fds := message(h, body, nfds)
					m, err := Decode(in, fds)
					require.NoError(t, err)
					out, outFDs, err := Encode(nil, m.Header, m.Body)
					require.NoError(t, err)
					require.Equal(t, in, out)
					require.Equal(t, fds, append(make([]int, 0), outFDs...))
				}
			})
		}
	}
}

func dirName(f Flags) string {
	switch f {
	case FlagReply:
		return "reply"
	case FlagEvent:
		return "event"
	}
	return "request"
}

// TestLayoutRules checks what the document promises a C implementer: every
// field naturally aligned, fixed parts a multiple of 8 bytes, tail
// elements too (or bytes), and unique field names per body.
func TestLayoutRules(t *testing.T) {
	check := func(t *testing.T, fields []Field, size int) {
		seen := map[string]bool{}
		for _, f := range fields {
			if f.Type == "fd" {
				continue
			}
			if !strings.HasPrefix(f.Type, "reserved") {
				require.False(t, seen[f.Name], "field %s twice", f.Name)
				seen[f.Name] = true
			}
			align := 1
			switch f.Type {
			case "u16":
				align = 2
			case "u32":
				align = 4
			case "u64":
				align = 8
			}
			require.Zero(t, f.Offset%align, "%s at %d is not %d-aligned", f.Name, f.Offset, align)
			if f.Type == "[]" {
				require.Equal(t, size, f.Offset, "a tail ends the body")
				if f.Size > 1 {
					require.Zero(t, f.Size%8, "%s elements of %d bytes", f.Name, f.Size)
				}
			}
		}
		require.Zero(t, size%8, "fixed part of %d bytes", size)
	}
	for _, s := range Specs() {
		for _, f := range directions(&s) {
			t.Run(s.Name+"/"+dirName(f), func(t *testing.T) {
				fields, size := Layout(s.body(f))
				check(t, fields, size)
			})
		}
	}
	for _, r := range Records() {
		fields, size := Layout(r.Body)
		check(t, fields, size)
		want := 16
		if r.Name == "cm_event" {
			want = CMEventRecordSize
		}
		require.Equal(t, want, size, r.Name)
	}
}

func TestTableUnique(t *testing.T) {
	names := map[string]bool{}
	for i, s := range Specs() {
		require.False(t, names[s.Name], s.Name)
		names[s.Name] = true
		if i > 0 {
			require.Less(t, Specs()[i-1].Op, s.Op, "table in opcode order")
		}
		// The CM range holds the rdma_cm messages (cm_*) and nothing else.
		require.Equal(t, strings.HasPrefix(s.Name, "cm_"), s.Op >= OpCMFirst && s.Op <= OpCMLast, "%s and the CM range", s.Name)
		require.Less(t, s.Op, OpFirstUnassigned)
		require.NotEmpty(t, s.Doc, s.Name)
	}
}

func hello() []byte {
	b, _, err := Encode(nil, Header{Op: OpHello, ReqID: 7},
		&Hello{Magic: Magic, Major: Major, Minor: Minor, PID: 42, Client: "test"})
	if err != nil {
		panic(err)
	}
	return b
}

// TestDecodeErrors is a table of broken messages and the error class each
// must give.
func TestDecodeErrors(t *testing.T) {
	le := binary.LittleEndian
	edit := func(f func(b []byte) []byte) []byte { return f(hello()) }
	for _, tc := range []struct {
		name string
		b    []byte
		nfds int
		want error
	}{
		{"short header", make([]byte, 10), 0, ErrFraming},
		{"length too big", edit(func(b []byte) []byte { le.PutUint32(b, uint32(len(b)+1)); return b }), 0, ErrFraming},
		{"length too small", edit(func(b []byte) []byte { le.PutUint32(b, 24); return b }), 0, ErrFraming},
		{"reserved header", edit(func(b []byte) []byte { b[21] = 1; return b }), 0, ErrFraming},
		{"fd count", hello(), 1, ErrFraming},
		{"both flags", edit(func(b []byte) []byte { b[6] = 3; return b }), 0, ErrFraming},
		{"unknown flag", edit(func(b []byte) []byte { b[6] = 4; return b }), 0, ErrFraming},
		{"status in request", edit(func(b []byte) []byte { b[16] = 22; return b }), 0, ErrFraming},
		{"unknown op", edit(func(b []byte) []byte { le.PutUint16(b[4:], 0x7fff); return b }), 0, ErrUnknownOp},
		{"cm op unassigned", edit(func(b []byte) []byte { le.PutUint16(b[4:], uint16(OpCMLast)); return b }), 0, ErrUnknownOp},
		{"event sent as request", edit(func(b []byte) []byte { le.PutUint16(b[4:], uint16(OpProtocolError)); return b }), 0, ErrUnknownOp},
		{"request sent as event", edit(func(b []byte) []byte { b[6] = 2; le.PutUint32(b[8:], 0); return b }), 0, ErrUnknownOp},
		{"body too long", edit(func(b []byte) []byte {
			b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
			le.PutUint32(b, uint32(len(b)))
			return b
		}), 0, ErrMalformed},
		{"body too short", edit(func(b []byte) []byte { b = b[:len(b)-8]; le.PutUint32(b, uint32(len(b))); return b }), 0, ErrMalformed},
		{"string without NUL", edit(func(b []byte) []byte { copy(b[HeaderSize+16:], bytes.Repeat([]byte{'x'}, 32)); return b }), 0, ErrMalformed},
		{"garbage after NUL", edit(func(b []byte) []byte { b[len(b)-1] = 'x'; return b }), 0, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fds := make([]int, tc.nfds)
			_, err := Decode(tc.b, fds)
			require.ErrorIs(t, err, tc.want)
		})
	}
}

func TestDecodeBodyChecks(t *testing.T) {
	// A bool other than 0/1 and non-zero reserved bytes are refused, so
	// decoded messages re-encode identically.
	b, _, err := Encode(nil, Header{Op: OpCreateQP, ReqID: 1, Handle: 3}, &CreateQP{Type: 2, SigAll: true})
	require.NoError(t, err)
	bad := append([]byte{}, b...)
	bad[HeaderSize+1] = 2 // sq_sig_all
	_, err = Decode(bad, nil)
	require.ErrorIs(t, err, ErrMalformed)
	require.ErrorContains(t, err, "sq_sig_all")
	bad = append([]byte{}, b...)
	bad[HeaderSize+2] = 1 // reserved
	m, err := Decode(bad, nil)
	require.ErrorIs(t, err, ErrMalformed)
	require.Equal(t, uint32(1), m.ReqID, "the header is returned for the error reply")
	require.Equal(t, EPROTO, DecodeErrno(err))

	// An error reply has no body.
	b, _, err = Encode(nil, Header{Op: OpCreateQP, Flags: FlagReply, ReqID: 1, Status: EINVAL}, nil)
	require.NoError(t, err)
	require.Len(t, b, HeaderSize)
	m, err = Decode(b, nil)
	require.NoError(t, err)
	require.Equal(t, EINVAL, m.Status)
	_, _, err = Encode(nil, Header{Op: OpCreateQP, Flags: FlagReply, Status: EINVAL}, &QPReply{})
	require.ErrorIs(t, err, ErrMalformed)

	// A tail that is not a whole number of elements.
	b, _, err = Encode(nil, Header{Op: OpListDevices, Flags: FlagReply, ReqID: 2},
		&ListDevicesReply{Devices: []DeviceEntry{{Name: "rvt0"}, {Name: "rvt1"}}})
	require.NoError(t, err)
	m, err = Decode(b, nil)
	require.NoError(t, err)
	require.Equal(t, "rvt1", m.Body.(*ListDevicesReply).Devices[1].Name)
	b = append(b, 1, 2, 3)
	binary.LittleEndian.PutUint32(b, uint32(len(b)))
	_, err = Decode(b, nil)
	require.ErrorIs(t, err, ErrMalformed)
}

func TestEncodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    Header
		body Body
		want error
	}{
		{"wrong body", Header{Op: OpHello}, &OpenDevice{}, ErrMalformed},
		{"unknown op", Header{Op: 0x7777}, nil, ErrUnknownOp},
		{"long string", Header{Op: OpOpenDevice}, &OpenDevice{Name: strings.Repeat("x", 64)}, ErrMalformed},
		{"NUL in string", Header{Op: OpOpenDevice}, &OpenDevice{Name: "a\x00b"}, ErrMalformed},
		{"too long", Header{Op: OpQueryCounters, Flags: FlagReply}, &CountersReply{Counters: make([]Counter, 2000)}, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := []byte("keep")
			out, _, err := Encode(dst, tc.h, tc.body)
			require.ErrorIs(t, err, tc.want)
			require.Equal(t, "keep", string(out), "dst is left as it was")
		})
	}
}

func TestErrnoOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Errno
	}{
		{nil, 0},
		{EADDRINUSE, EADDRINUSE},
		{errors.New("other"), EINVAL},
		{fmt.Errorf("shm_attach: %w", ring.ErrNotSealed), EBADF}, // docs/rvtd-protocol.md section 4
		{unix.EFAULT, EFAULT},
		{unix.EPERM, EPERM},
	} {
		require.Equal(t, tc.want, ErrnoOf(tc.err), "%v", tc.err)
	}
	for _, m := range errnos {
		require.Equal(t, m.errno, ErrnoOf(wrap(m.err)), "%v", m.err)
	}
}

func wrap(err error) error { return &Error{Msg: "x", Err: err} }

// FuzzDecode: any bytes with any number of descriptors decode without
// panicking, and whatever decodes re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range Specs() {
		for _, fl := range directions(&s) {
			fields, _ := Layout(s.body(fl))
			body, nfds := randomBody(r, fields)
			b, _ := message(Header{Op: s.Op, Flags: fl}, body, nfds)
			f.Add(b, uint8(nfds))
		}
	}
	f.Add(hello()[:20], uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, nfds uint8) {
		fds := make([]int, nfds%8)
		for i := range fds {
			fds[i] = 1000 + i
		}
		m, err := Decode(b, fds)
		if err != nil {
			if !errors.Is(err, ErrFraming) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnknownOp) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		out, outFDs, err := Encode(nil, m.Header, m.Body)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("round trip differs:\n in %x\nout %x", b, out)
		}
		if len(outFDs) != len(fds) {
			t.Fatalf("%d descriptors in, %d out", len(fds), len(outFDs))
		}
	})
}
