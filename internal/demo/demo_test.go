package demo

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/stretchr/testify/require"
)

// wantLines are the result lines every demo prints, as "transport opcode".
var wantLines = []string{
	"RC SEND", "RC SEND_WITH_IMM", "RC RDMA_WRITE", "RC RDMA_WRITE_WITH_IMM", "RC RDMA_READ",
	"RC ATOMIC_FETCH_AND_ADD", "RC ATOMIC_CMP_AND_SWP", "RC RDMA_READ + SEND fence",
	"RC RDMA_WRITE unsignalled", "RC REG_MR", "RC RDMA_WRITE (fast-reg)", "RC SEND_WITH_INV",
	"RC LOCAL_INV", "RC BIND_MW", "RC RDMA_WRITE (window)",
	"UC SEND", "UC SEND_WITH_IMM", "UC RDMA_WRITE", "UC RDMA_WRITE_WITH_IMM",
	"UD SEND", "UD SEND_WITH_IMM", "UD SEND_WITH_IMM mcast",
	"RC RDMA_WRITE throughput", "RC SEND message rate",
}

func requireAllOK(t *testing.T, out string) {
	t.Helper()
	require.NotContains(t, out, "FAIL")
	for _, l := range wantLines {
		tr, op, _ := strings.Cut(l, " ")
		re := regexp.MustCompile(`(?m)^ok +` + tr + ` +` + regexp.QuoteMeta(op) + ` {2,}`)
		require.Regexp(t, re, out, "no ok line for %s", l)
	}
	require.Regexp(t, `RDMA_WRITE throughput .* [0-9.]+ GB/s`, out)
	require.Regexp(t, `SEND message rate .* [0-9]+ msgs/s`, out)
	require.Regexp(t, `(?m)^link rvt0/1 .*sent_pkts [0-9]+`, out)
	require.Regexp(t, `(?m)^[0-9]+ checks passed, 0 failed$`, out)
}

func TestDemo(t *testing.T) {
	var out bytes.Buffer
	cfg := DefaultConfig()
	cfg.Seconds = 0.2
	err := Run(&out, cfg)
	t.Log(out.String())
	require.NoError(t, err)
	requireAllOK(t, out.String())
}

// With RC frame loss and a small MTU the demo still passes, the counters
// show retransmissions, and the capture holds the functional phase.
func TestDemoLossCapture(t *testing.T) {
	var out bytes.Buffer
	cfg := DefaultConfig()
	cfg.Seconds, cfg.Size, cfg.MTU, cfg.Loss = 0.1, 16<<10, 1024, 0.02
	cfg.PCAP = filepath.Join(t.TempDir(), "demo.pcap")
	err := Run(&out, cfg)
	t.Log(out.String())
	require.NoError(t, err)
	requireAllOK(t, out.String())
	require.Contains(t, out.String(), "path MTU 1024, RC frame loss 2%")
	require.Regexp(t, `(?m)^link rvt0/1 .*retransmits [1-9]`, out.String())
	require.Regexp(t, `(?m)^faults rvt0: [0-9]+ RC frames, [1-9][0-9]* lost$`, out.String())

	b, err := os.ReadFile(cfg.PCAP)
	require.NoError(t, err)
	require.Greater(t, len(b), 24+16)
	require.Equal(t, uint32(0xa1b23c4d), binary.LittleEndian.Uint32(b), "pcap magic (nanosecond)")
}

// A result line's data verdict comes from the comparison: "data ok" only
// when it ran and matched.
func TestDataCheck(t *testing.T) {
	var ran, differs dataCheck
	require.NoError(t, ran.check(traffic.EqualBytes([]byte("abc"), []byte("abc"))))
	require.EqualError(t, differs.check(traffic.EqualBytes([]byte("abd"), []byte("abc"))), "data differs at byte 2 of 3")
	for _, tc := range []struct {
		name string
		dc   dataCheck
		want string
	}{
		{"not run", dataCheck{}, "data not checked"},
		{"match", ran, "data ok"},
		{"mismatch", differs, "data differs"},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, tc.dc.String()) })
	}

	// A SEND whose receive never completed: the line says so, and does
	// not claim the data.
	x := exchange{n: 64, sendOK: true}
	require.Equal(t, "    64 B  send=success recv=none len=0  data not checked", x.detail())
	x.recvOK, x.recv.ByteLen, x.data = true, 64, ran
	require.Equal(t, "    64 B  send=success recv=success len=64  data ok", x.detail())

	// The demo's FAIL line carries the verdict it was given.
	var out bytes.Buffer
	d := &demo{w: &out}
	d.line("RC", "RDMA_WRITE", fmt.Sprintf("%6d B  rkey=%#x  %v", 64, 0x40000, dataCheck{}), traffic.ErrTimeout)
	require.Equal(t, "FAIL RC  RDMA_WRITE                 64 B  rkey=0x40000  data not checked\n"+
		"     error: timed out waiting for completions\n", out.String())
}

// A throughput run that did not complete reports no rate and no "in 0s".
func TestThroughputDetail(t *testing.T) {
	done := traffic.Result{Ops: 100, Bytes: 100 << 16, Elapsed: time.Second}
	cut := traffic.Result{Ops: 3, Elapsed: 6 * time.Second}
	for _, tc := range []struct {
		name string
		got  string
		want string
	}{
		{"write", writeDetail(65536, done, nil), " 65536 B x 16 in flight: 100 WRs in 1s, 0.007 GB/s (0.05 Gbit/s)"},
		{"write timeout", writeDetail(1<<26, cut, traffic.ErrTimeout), "67108864 B x 16 in flight: did not complete: 3 WRs done in 6s"},
		{"write before start", writeDetail(1<<26, traffic.Result{}, traffic.ErrTimeout), "67108864 B x 16 in flight: did not start"},
		{"send before start", sendDetail(traffic.Result{}, traffic.ErrTimeout), "     8 B x 64 in flight: did not start"},
		{"send", sendDetail(done, nil), "     8 B x 64 in flight: 100 messages in 1s, 100 msgs/s"},
		{"send timeout", sendDetail(cut, traffic.ErrTimeout), "     8 B x 64 in flight: did not complete: 3 messages received in 6s"},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, tc.got) })
	}
}
