package main

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
	cfg := defaultDemoConfig()
	cfg.Seconds = 0.2
	err := runDemo(&out, cfg)
	t.Log(out.String())
	require.NoError(t, err)
	requireAllOK(t, out.String())
}

// With RC frame loss and a small MTU the demo still passes, the counters
// show retransmissions, and the capture holds the functional phase.
func TestDemoLossCapture(t *testing.T) {
	var out bytes.Buffer
	cfg := defaultDemoConfig()
	cfg.Seconds, cfg.Size, cfg.MTU, cfg.Loss = 0.1, 16<<10, 1024, 0.02
	cfg.PCAP = filepath.Join(t.TempDir(), "demo.pcap")
	err := runDemo(&out, cfg)
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

func TestDevinfo(t *testing.T) {
	for _, loopback := range []bool{false, true} {
		var out bytes.Buffer
		cfg := defaultDevinfoConfig()
		cfg.Loopback = loopback
		require.NoError(t, runDevinfo(&out, cfg))
		s := out.String()
		for _, want := range []string{
			"hca_id:\trvt0\n",
			"\ttransport:\t\t\tInfiniBand (0)\n",
			"\tnode_guid:\t\t\t0000:5eff:fe00:0001\n",
			"\tphys_port_cnt:\t\t\t1\n",
			"\tatomic_cap:\t\t\tATOMIC_HCA (1)\n",
			"\t\tport:\t1\n",
			"\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n",
			"\t\t\tmax_mtu:\t\t4096 (5)\n",
			"\t\t\tactive_mtu:\t\t4096 (5)\n",
			"\t\t\tlink_layer:\t\tEthernet\n",
			"\t\t\tGID[  0]:\t\tfe80::5eff:fe00:1, RoCE v2\n",
			"\t\t\tGID[  1]:\t\t::ffff:198.18.0.1, RoCE v2\n",
			"\t\t\tPKey[  0]:\t\t0xffff\n",
		} {
			require.Contains(t, s, want)
		}
	}
}

func TestStat(t *testing.T) {
	var out bytes.Buffer
	cfg := defaultStatConfig()
	cfg.Messages = 10
	require.NoError(t, runStat(&out, cfg))
	s := out.String()
	require.Regexp(t, `(?m)^link rvt0/1 lqpn 17 type RC state RTS `, s)
	require.Regexp(t, `(?m)^link rvt0/1 lqpn 18 type UD state RTS `, s)
	require.Regexp(t, `(?m)^link rvt1/1 lqpn 17 type RC state RTS .* msn 20 .* rq-posted 4$`, s)
	require.Regexp(t, `(?m)^link rvt1/1 .*rcvd_pkts 20 `, s)
	require.Regexp(t, `(?m)^link rvt1/1 lqpn 17 .*rdma_recvs 10`, s)
}

// The banner says which commands need root, rather than that none does.
func TestUsageRoot(t *testing.T) {
	var out bytes.Buffer
	usage(&out, commands())
	require.NotContains(t, out.String(), "no root needed")
	require.Regexp(t, `(?m)^  perf .*\(root\)$`, out.String())
	require.Regexp(t, `(?m)^  pingpong .*\(root for --tap and --xdp\)$`, out.String())
	require.Contains(t, out.String(), "demo, devinfo and stat need no root")
}

func TestRun(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		out  string // in stdout
		err  string // in stderr
	}{
		{nil, 2, "", "usage: rvt <command>"},
		{[]string{"help"}, 0, "commands:", ""},
		{[]string{"help", "help"}, 0, "usage: rvt help [command]\n", ""},
		{[]string{"help", "demo", "stat"}, 2, "", `unexpected arguments ["stat"]`},
		{[]string{"help", "nope"}, 2, "", `unknown command "nope"`},
		{[]string{"help", "demo"}, 0, "--seconds", ""},
		{[]string{"demo", "-h"}, 0, "", "--pcap file"},
		{[]string{"demo", "--help"}, 0, "", "--pcap file"},
		{[]string{"nope"}, 2, "", `unknown command "nope"`},
		{[]string{"demo", "--bogus"}, 2, "", "rvt demo: unknown flag: --bogus\nrun 'rvt help demo' for its flags\n"},
		{[]string{"demo", "--mtu"}, 2, "", "flag needs an argument: --mtu"},
		{[]string{"demo", "--mtu=x"}, 2, "", `invalid argument "x" for "--mtu"`},
		// One dash starts short flags, as with getopt_long: -loopback is
		// -l -o -o -p ... and devinfo has no -l.
		{[]string{"devinfo", "-loopback"}, 2, "", "unknown shorthand flag: 'l' in -loopback"},
		{[]string{"demo", "extra"}, 2, "", "unexpected arguments"},
		// Flag values out of range are usage errors.
		{[]string{"demo", "--mtu", "3000"}, 2, "", "rvt demo: --mtu 3000: want 256, 512, 1024, 2048 or 4096\nrun 'rvt help demo' for its flags\n"},
		{[]string{"demo", "--loss", "1.5"}, 2, "", "--loss 1.5: want [0, 1)"},
		{[]string{"demo", "--loss=-0.1"}, 2, "", "--loss -0.1: want [0, 1)"},
		{[]string{"demo", "--seconds", "-1"}, 2, "", "--seconds -1: want more than 0 and at most 600"},
		{[]string{"demo", "--seconds=0"}, 2, "", "--seconds 0: want more than 0"},
		{[]string{"demo", "--seconds=NaN"}, 2, "", "--seconds NaN: want more than 0"},
		{[]string{"demo", "--seconds=601"}, 2, "", "--seconds 601: want more than 0 and at most 600"},
		{[]string{"demo", "--size", "0"}, 2, "", "--size 0: want 1 B to 64 MiB"},
		{[]string{"demo", "--size", "1073741824"}, 2, "", "--size 1073741824: want 1 B to 64 MiB (16 WRITEs of it are in flight)"},
		{[]string{"devinfo", "--loopback"}, 0, "PORT_ACTIVE", ""},
		// Every command takes both forms of a long flag's value.
		{[]string{"demo", "--mtu=3000"}, 2, "", "--mtu 3000"},
		{[]string{"stat", "--messages", "0"}, 2, "", "--messages 0"},
		{[]string{"stat", "--messages=0"}, 2, "", "--messages 0"},
		{[]string{"perf", "--link=bogus"}, 2, "", `--link "bogus"`},
		{[]string{"perf", "--seconds", "0", "--link", "udp"}, 2, "", "--seconds 0"},
		{[]string{"perf", "--size=67108865"}, 2, "", "--size 67108865: want 1 byte to 64 MiB"},
		{[]string{"devinfo", "-v=false", "--loopback=true", "--link-mtu=1500"}, 0, "PORT_ACTIVE", ""},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		require.Equal(t, c.code, code, "%q: stderr %s", c.args, stderr.String())
		require.Contains(t, stdout.String(), c.out, "%q", c.args)
		require.Contains(t, stderr.String(), c.err, "%q", c.args)
	}
}

// A result line's data verdict comes from the comparison: "data ok" only
// when it ran and matched.
func TestDataCheck(t *testing.T) {
	var ran, differs dataCheck
	require.NoError(t, ran.check(equalBytes([]byte("abc"), []byte("abc"))))
	require.EqualError(t, differs.check(equalBytes([]byte("abd"), []byte("abc"))), "data differs at byte 2 of 3")
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
	d.line("RC", "RDMA_WRITE", fmt.Sprintf("%6d B  rkey=%#x  %v", 64, 0x40000, dataCheck{}), errTimeout)
	require.Equal(t, "FAIL RC  RDMA_WRITE                 64 B  rkey=0x40000  data not checked\n"+
		"     error: timed out waiting for completions\n", out.String())
}

// A throughput run that did not complete reports no rate and no "in 0s".
func TestThroughputDetail(t *testing.T) {
	done := runResult{ops: 100, bytes: 100 << 16, elapsed: time.Second}
	cut := runResult{ops: 3, elapsed: 6 * time.Second}
	for _, tc := range []struct {
		name string
		got  string
		want string
	}{
		{"write", writeDetail(65536, done, nil), " 65536 B x 16 in flight: 100 WRs in 1s, 0.007 GB/s (0.05 Gbit/s)"},
		{"write timeout", writeDetail(1<<26, cut, errTimeout), "67108864 B x 16 in flight: did not complete: 3 WRs done in 6s"},
		{"write before start", writeDetail(1<<26, runResult{}, errTimeout), "67108864 B x 16 in flight: did not start"},
		{"send before start", sendDetail(runResult{}, errTimeout), "     8 B x 64 in flight: did not start"},
		{"send", sendDetail(done, nil), "     8 B x 64 in flight: 100 messages in 1s, 100 msgs/s"},
		{"send timeout", sendDetail(cut, errTimeout), "     8 B x 64 in flight: did not complete: 3 messages received in 6s"},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, tc.got) })
	}
}
