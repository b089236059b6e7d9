package perftest

import (
	"bytes"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/qp"
)

// The messages perftest 4.5 writes for the client of testdata/ib_write_bw.txt,
// spelled out from KEY_PRINT_FMT_GID and KEY_PRINT_FMT.
var (
	writeBWClient = Dest{QPN: 0x16, PSN: 0xb5931f, RKey: 0x786, VAddr: 0x561cbeb2d000, GID: gid("10.50.0.2")}
	writeBWMsgGID = "0000:0000:000016:b5931f:00000786:0000561cbeb2d000:" +
		"00:00:00:00:00:00:00:00:00:00:ff:ff:0a:32:00:02:00000000:\x00"
	writeBWMsg = "0000:0000:000016:b5931f:00000786:0000561cbeb2d000:00000000\x00"
)

func TestDestEncodeExact(t *testing.T) {
	require.Len(t, writeBWMsgGID, KeyMsgSizeGID)
	require.Len(t, writeBWMsg, KeyMsgSize)
	require.Equal(t, writeBWMsgGID, string(writeBWClient.Encode(true)))
	require.Equal(t, writeBWMsg, string(writeBWClient.Encode(false)))

	d := Dest{LID: 0xffff, OutReads: 0x80, QPN: 0xffffff, PSN: 0x282f8, RKey: 0xdeadbeef, VAddr: 0xffffffffffffffff, SRQN: 7}
	require.Equal(t, "ffff:0080:ffffff:0282f8:deadbeef:ffffffffffffffff:00000007\x00", string(d.Encode(false)))
}

func TestDestRoundTrip(t *testing.T) {
	for _, d := range []Dest{
		{},
		writeBWClient,
		{LID: 0xffff, OutReads: 0xffff, QPN: 0xffffff, PSN: 0xffffff, RKey: 0xffffffff, VAddr: ^uint64(0), SRQN: 0xffffffff,
			GID: [16]byte{0xfe, 0x80, 15: 0xff}},
	} {
		for _, withGID := range []bool{false, true} {
			got, err := DecodeDest(d.Encode(withGID), withGID)
			require.NoError(t, err)
			want := d
			if !withGID {
				want.GID = [16]byte{}
			}
			require.Equal(t, want, got)
		}
	}
}

func TestDecodeDestRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		msg     string
		withGID bool
	}{
		"short":          {writeBWMsg[:KeyMsgSize-1], false},
		"GID form as no": {writeBWMsgGID, false},
		"no NUL":         {"0000:0000:000016:b5931f:00000786:0000561cbeb2d000:000000001", false},
		"bad hex":        {"0000:0000:00001g:b5931f:00000786:0000561cbeb2d000:00000000\x00", false},
		"QPN too wide":   {"000:0000:1000016:b5931f:00000786:0000561cbeb2d000:00000000\x00", false},
		"missing colon":  {writeBWMsgGID[:KeyMsgSizeGID-2] + "\x00\x00", true},
		"empty field":    {"0000::000016:b5931f:00000786:0000561cbeb2d000:000000000\x00", false},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeDest([]byte(tc.msg), tc.withGID)
			require.ErrorIs(t, err, ErrMalformed)
		})
	}
}

func FuzzDecodeExchange(f *testing.F) {
	f.Add([]byte(writeBWMsgGID), true)
	f.Add([]byte(writeBWMsg), false)
	f.Add(EncodeVersion(Version), false)
	f.Fuzz(func(t *testing.T, msg []byte, withGID bool) {
		d, err := DecodeDest(msg, withGID)
		if err == nil {
			// What parses re-encodes to a message that parses the same.
			d2, err := DecodeDest(d.Encode(withGID), withGID)
			require.NoError(t, err)
			require.Equal(t, d, d2)
		}
		_ = ParseVersion(msg)
		_ = DecodeMTU(msg)
	})
}

func TestVersionAndMTUMessages(t *testing.T) {
	require.Equal(t, []byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), EncodeVersion(Version))
	require.InDelta(t, 6.06, ParseVersion(EncodeVersion(Version)), 1e-9)
	require.InDelta(t, 5.7, ParseVersion([]byte("5.70 beta\x00")), 1e-9)
	require.Zero(t, ParseVersion([]byte("x")))
	require.Equal(t, []byte("3\x00"), EncodeMTU(qp.MTU1024, 6.06))
	require.Equal(t, []byte("5\x00\x00\x00"), EncodeMTU(qp.MTU4096, 5.2))
	require.Equal(t, qp.MTU1024, DecodeMTU([]byte("3\x00")))
	require.Equal(t, qp.MTU(0), DecodeMTU([]byte("\x00\x00")))
}

func TestReportFields(t *testing.T) {
	r := BWReport{Size: 4096, Iters: 20, Peak: 4.18, Avg: 4.12, MsgRate: 0.001055}
	f := encodeReportFields(r, 6.06)
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0x10, 0}, f[0])
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 20}, f[1])
	// 4.18 is 0x4010b851eb851eb8 in IEEE 754, sent big-endian.
	require.Equal(t, []byte{0x40, 0x10, 0xb8, 0x51, 0xeb, 0x85, 0x1e, 0xb8}, f[2])
	require.Equal(t, r, decodeReportFields(f))
	old := encodeReportFields(r, 5.32)
	require.Equal(t, []byte{0, 0, 0, 20}, old[1])
	require.Equal(t, r, decodeReportFields(old))
}

// recorder keeps what one side wrote.
type recorder struct {
	net.Conn
	mu  sync.Mutex
	out bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	r.out.Write(b)
	r.mu.Unlock()
	return r.Conn.Write(b)
}

// TestSession runs a whole ib_write_bw exchange between two Conns and
// checks the client's bytes against the sequence perftest writes.
func TestSession(t *testing.T) {
	a, b := tcpPair(t)
	rec := &recorder{Conn: a}
	cl, sv := NewConn(rec, true), NewConn(b, false)
	cDest, sDest := writeBWClient, Dest{QPN: 0x1b, PSN: 0xc5546e, GID: gid("10.50.0.1")}
	rep := BWReport{Size: 4096, Iters: 20, Peak: 4.18, Avg: 4.12, MsgRate: 0.001055}
	script := func(c *Conn, my, peer Dest, mtu qp.MTU, report bool) error {
		if err := c.Versions(); err != nil {
			return err
		}
		cb, cl, err := c.SysData(4096, 64)
		if err != nil || cb != 4096 || cl != 64 {
			return err
		}
		m, err := c.MTU(mtu)
		if err != nil || m != qp.MTU1024 {
			return err
		}
		for range 3 {
			got, err := c.HandShake(my)
			if err != nil {
				return err
			}
			if got != peer {
				t.Errorf("handshake: got %+v, want %+v", got, peer)
			}
		}
		got, err := c.Reports(rep)
		if err != nil {
			return err
		}
		if got != rep {
			t.Errorf("report: got %+v", got)
		}
		return c.Close(my)
	}
	done := make(chan error, 1)
	go func() { done <- script(sv, sDest, cDest, qp.MTU4096, false) }()
	require.NoError(t, script(cl, cDest, sDest, qp.MTU1024, true))
	require.NoError(t, <-done)

	var want bytes.Buffer
	want.Write(EncodeVersion("6.06"))
	want.Write([]byte{0, 0, 0x10, 0, 0, 0, 0, 64})
	want.WriteString("3\x00")
	for range 3 {
		want.WriteString(writeBWMsgGID)
	}
	for _, f := range encodeReportFields(rep, 6.06) {
		want.Write(f)
	}
	want.WriteString(writeBWMsgGID)
	want.WriteString("done\x00")
	require.Equal(t, want.Bytes(), rec.out.Bytes())
}

// tcpPair returns both ends of a TCP connection on 127.0.0.1, buffered by
// the kernel as perftest's sockets are.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	b, err := ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestVersionRefused(t *testing.T) {
	a, b := net.Pipe()
	go func() {
		c := NewConn(b, false)
		_, _ = c.Swap(EncodeVersion("5.60"), VersionMsgSize)
	}()
	err := NewConn(a, true).Versions()
	require.ErrorContains(t, err, "not compatible with versions older than 5.70")
}
