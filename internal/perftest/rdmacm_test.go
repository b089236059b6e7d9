package perftest

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/rvt"
)

// TestToolsRDMACM runs every tool with -R (and two with -z alone) on the
// in-memory pair: the exchange over rdma_cm SENDs, the test QPs connected
// through rdma_cm.
func TestToolsRDMACM(t *testing.T) {
	cli, srv := openPair(t, 9000)
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
	}{
		{"ib_write_bw -R", func(c *Config) { c.Test = WriteBW }},
		{"ib_write_bw -R -q 3 -b", func(c *Config) { c.Test, c.QPs, c.Duplex = WriteBW, 3, true }},
		{"ib_read_bw -R", func(c *Config) { c.Test = ReadBW }},
		{"ib_send_bw -R", func(c *Config) { c.Test = SendBW }},
		{"ib_atomic_bw -R", func(c *Config) { c.Test, c.Size = AtomicBW, 0 }},
		{"ib_write_lat -R", func(c *Config) { c.Test = WriteLat }},
		{"ib_read_lat -R", func(c *Config) { c.Test = ReadLat }},
		{"ib_send_lat -R", func(c *Config) { c.Test = SendLat }},
		{"ib_send_bw -z -c UD", func(c *Config) { c.Test, c.RDMACM, c.CommRDMACM, c.Conn = SendBW, false, true, "UD" }},
		{"ib_write_lat -z", func(c *Config) { c.Test, c.RDMACM, c.CommRDMACM = WriteLat, false, true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(WriteBW)
			cfg.Iters, cfg.Size, cfg.Timeout, cfg.RDMACM = 20, 4096, 20*time.Second, true
			tc.cfg(&cfg)
			var cout, cerr, sout bytes.Buffer
			require.NoError(t, RunPair(cfg, cli, srv, 0, &cout, &cerr, &sout), "client:\n%s\nserver:\n%s", cout.String(), sout.String())
			tb := parseTable(t, cout.String())
			require.Len(t, tb.rows, 1, cout.String())
			require.Equal(t, strconv.Itoa(cfg.Iters*cfg.QPs), tb.rows[0][1])
			on := "OFF"
			if cfg.RDMACM {
				on = "ON"
			}
			require.Contains(t, cout.String(), " rdma_cm QPs\t : "+on+"\n")
			require.Contains(t, cout.String(), " Data ex. method : rdma_cm\n")
			if cfg.RDMACM {
				require.Contains(t, sout.String(), " Waiting for client rdma_cm QP to connect\n")
			}
			// perftest 4.5 prints the addresses with the rdma_cm
			// exchange's verb, SEND: no OUT, RKey or VAddr even for READ
			// and WRITE tests, as ib_write_bw -z on the rxe guest prints
			// " local address: LID 0000 QPN 0x00e6 PSN 0xce9ac1".
			for _, out := range []string{cout.String(), sout.String()} {
				n := 0
				for _, l := range strings.Split(out, "\n") {
					if strings.HasPrefix(l, " local address: ") || strings.HasPrefix(l, " remote address: ") {
						n++
						require.Regexp(t, `^ (local|remote) address: LID 0000 QPN 0x[0-9a-f]{4,6} PSN 0x[0-9a-f]{4,6}$`, l)
					}
				}
				require.Equal(t, 2*cfg.QPs, n, out)
			}
		})
	}
	// Every connection is over and nothing is left but the agents' own.
	for _, d := range []*rvt.Device{cli, srv} {
		ag, err := cm.AgentFor(d)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			st := ag.Stats()
			return st.IDs == 0 && st.Listeners == 0 && st.QPs == 0
		}, 10*time.Second, 50*time.Millisecond, "%s: %+v", d.Name(), ag.Stats())
	}
}

// TestDestBinary checks the handshake's rdma_cm form: struct pingpong_dest
// with big-endian integers, as rdma_write_keys sends it.
func TestDestBinary(t *testing.T) {
	d := Dest{LID: 0x12, OutReads: 16, QPN: 0xabcdef, PSN: 0x123456, RKey: 0xdeadbeef, VAddr: 0x0102030405060708,
		GID: [16]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1}, SRQN: 7}
	b := d.EncodeBinary()
	want := []byte{
		0, 0, 0, 0x12, 0, 0, 0, 16, 0, 0xab, 0xcd, 0xef, 0, 0x12, 0x34, 0x56, 0xde, 0xad, 0xbe, 0xef,
		0, 0, 0, 0, // padding before the 8-byte vaddr
		1, 2, 3, 4, 5, 6, 7, 8,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1,
		0, 0, 0, 7, // srqn
		0, 0, 0, 0, // gid_index
	}
	require.Equal(t, want, b)
	got, err := DecodeDestBinary(b)
	require.NoError(t, err)
	d.SRQN = 0 // rdma_read_keys leaves it
	require.Equal(t, d, got)
	_, err = DecodeDestBinary(b[:55])
	require.ErrorIs(t, err, ErrMalformed)
}
