package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

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
