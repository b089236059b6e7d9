package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// parsePingpong parses args as `rvt pingpong` does.
func parsePingpong(args ...string) (pingpongConfig, []string, error) {
	fs := pflag.NewFlagSet("rvt pingpong", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := defaultPingpongConfig()
	pingpongFlags(fs, &cfg)
	err := fs.Parse(args)
	return cfg, fs.Args(), err
}

func TestPingpongFlags(t *testing.T) {
	parse := func(args ...string) (pingpongConfig, []string) {
		cfg, rest, err := parsePingpong(args...)
		require.NoError(t, err, "%q", args)
		return cfg, rest
	}
	cfg, rest := parse()
	require.Equal(t, defaultPingpongConfig(), cfg)
	require.Empty(t, rest)
	require.Equal(t, 18515, cfg.Port)
	require.Equal(t, 1024, cfg.MTU)
	require.Equal(t, 500, cfg.RxDepth)
	require.Equal(t, 1000, cfg.Iters)
	require.Equal(t, -1, cfg.GIDIndex)

	cfg, rest = parse("10.50.0.1", "-g", "1", "--ud", "-n", "10", "--size=64", "-c", "-e")
	require.Equal(t, []string{"10.50.0.1"}, rest)
	require.Equal(t, "ud", cfg.Mode)
	require.Equal(t, 1, cfg.GIDIndex)
	require.Equal(t, 10, cfg.Iters)
	require.Equal(t, 64, cfg.Size)
	require.True(t, cfg.Check)
	require.True(t, cfg.Events)

	// Positional arguments keep the order they were typed in.
	cfg, rest = parse("-n", "7", "x", "-c", "y", "--", "-z")
	require.Equal(t, []string{"x", "y", "-z"}, rest)
	require.Equal(t, 7, cfg.Iters)
	require.True(t, cfg.Check)

	// A "--" that is a flag's value is no separator; one after a flag
	// that took "-n" as its value is.
	cfg, rest = parse("-d", "--", "x", "-n", "5")
	require.Equal(t, []string{"x"}, rest)
	require.Equal(t, "--", cfg.Device)
	require.Equal(t, 5, cfg.Iters)
	cfg, rest = parse("-d", "-n", "--", "x", "-c")
	require.Equal(t, []string{"x", "-c"}, rest)
	require.Equal(t, "-n", cfg.Device)
	require.False(t, cfg.Check)

	cfg, rest = parse("-d", "rxe0", "--uc", "-m", "4096", "--tap", "svtap0", "--ip", "10.50.0.200/24")
	require.Empty(t, rest)
	require.Equal(t, "uc", cfg.Mode)
	require.Equal(t, "rxe0", cfg.Device)
	require.Equal(t, 4096, cfg.MTU)
	require.Equal(t, "svtap0", cfg.TAP)

	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"-m", "1000"}, "path MTU"},
		{[]string{"-o"}, "ODP"},
		{[]string{"-P"}, "prefetch is valid only"},
		{[]string{"-t"}, "timestamp"},
		{[]string{"-i", "2"}, "port 1 only"},
		{[]string{"-n", "0"}, "iteration"},
		{[]string{"--timeout", "-1s"}, "--timeout -1s"},
	} {
		cfg, _ := parse(tc.args...)
		_, err := cfg.check()
		require.ErrorContains(t, err, tc.err, "%v", tc.args)
	}
}

// One transport: --rc, --uc or --ud, or none (RC); naming one twice is
// fine, two different ones are a usage error rather than the last winning.
func TestPingpongModes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		mode string // "" when check refuses
		err  string
	}{
		{nil, "rc", ""},
		{[]string{"--rc"}, "rc", ""},
		{[]string{"--uc"}, "uc", ""},
		{[]string{"--ud", "--ud"}, "ud", ""},
		{[]string{"--ud=true"}, "ud", ""},
		{[]string{"--ud=false"}, "rc", ""},
		{[]string{"--rc", "--ud"}, "", "--rc and --ud: give one of --rc, --uc and --ud"},
		{[]string{"--ud", "-n5", "--uc"}, "", "--ud and --uc: give one of"},
		{[]string{"--uc", "--rc", "--uc"}, "", "--uc and --rc: give one of"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cfg, _, err := parsePingpong(tc.args...)
			require.NoError(t, err)
			_, err = cfg.check()
			if tc.mode == "" {
				require.ErrorContains(t, err, tc.err)
				require.ErrorAs(t, err, new(usageError))
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.mode, cfg.Mode)
		})
	}
}

// The getopt_long syntax scripts pass to rdma-core's tools: values glued
// to short flags, clustered booleans, "--long=value" and "--long value",
// the server before, between or after the flags, "--" ending the flags.
func TestPingpongGetopt(t *testing.T) {
	def := defaultPingpongConfig()
	for _, tc := range []struct {
		args []string
		set  func(c *pingpongConfig)
		rest []string
	}{
		{[]string{"-s1024"}, func(c *pingpongConfig) { c.Size = 1024 }, nil},
		{[]string{"-n5"}, func(c *pingpongConfig) { c.Iters = 5 }, nil},
		{[]string{"-ce"}, func(c *pingpongConfig) { c.Check, c.Events = true, true }, nil},
		{[]string{"-cen5"}, func(c *pingpongConfig) { c.Check, c.Events, c.Iters = true, true, 5 }, nil},
		{[]string{"-s", "1024"}, func(c *pingpongConfig) { c.Size = 1024 }, nil},
		{[]string{"--size=1024"}, func(c *pingpongConfig) { c.Size = 1024 }, nil},
		{[]string{"--size", "1024"}, func(c *pingpongConfig) { c.Size = 1024 }, nil},
		{[]string{"-g0", "-m", "4096", "-r10"}, func(c *pingpongConfig) { c.GIDIndex, c.MTU, c.RxDepth = 0, 4096, 10 }, nil},
		{[]string{"--gid-idx=1", "--mtu", "2048", "--rx-depth=9", "--iters", "3", "--sl=2", "--port", "4000"},
			func(c *pingpongConfig) { c.GIDIndex, c.MTU, c.RxDepth, c.Iters, c.SL, c.Port = 1, 2048, 9, 3, 2, 4000 }, nil},
		{[]string{"-d", "rvt0", "--ib-dev=rvt0", "-i1", "--ib-port", "1"}, func(*pingpongConfig) {}, nil},
		{[]string{"--events", "--chk"}, func(c *pingpongConfig) { c.Check, c.Events = true, true }, nil},
		{[]string{"-N", "--new_send"}, func(c *pingpongConfig) { c.NewSend = true }, nil},
		{[]string{"10.0.0.1", "-s1024"}, func(c *pingpongConfig) { c.Size = 1024 }, []string{"10.0.0.1"}},
		{[]string{"-s1024", "10.0.0.1"}, func(c *pingpongConfig) { c.Size = 1024 }, []string{"10.0.0.1"}},
		{[]string{"-s", "1024", "10.0.0.1", "-n5"}, func(c *pingpongConfig) { c.Size, c.Iters = 1024, 5 }, []string{"10.0.0.1"}},
		{[]string{"-n5", "--", "-s1024"}, func(c *pingpongConfig) { c.Iters = 5 }, []string{"-s1024"}},
		{[]string{"--", "10.0.0.1"}, func(*pingpongConfig) {}, []string{"10.0.0.1"}},
		// scripts/interop.sh's command lines.
		{[]string{"--tap", "svtap0", "--ip", "10.50.0.200/24", "--link-mtu", "9000", "--uc", "-g", "1", "-s", "4096",
			"-n", "100", "-c", "--timeout", "60s", "--pcap", "x.pcap", "-m", "4096"},
			func(c *pingpongConfig) {
				c.TAP, c.IP, c.LinkMTU, c.Mode, c.GIDIndex, c.Size = "svtap0", "10.50.0.200/24", 9000, "uc", 1, 4096
				c.Iters, c.Check, c.Timeout, c.PCAP, c.MTU = 100, true, time.Minute, "x.pcap", 4096
			}, nil},
		{[]string{"--udp", "10.50.0.254", "--ud", "-g", "1", "10.50.0.1"},
			func(c *pingpongConfig) { c.UDP, c.Mode, c.GIDIndex = "10.50.0.254", "ud", 1 }, []string{"10.50.0.1"}},
		{[]string{"--xdp=svx0", "--rc", "--loss=0.01", "--delay", "1ms", "--seed=7"},
			func(c *pingpongConfig) { c.XDP, c.Loss, c.Delay, c.Seed = "svx0", 0.01, time.Millisecond, 7 }, nil},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cfg, rest, err := parsePingpong(tc.args...)
			require.NoError(t, err)
			cfg.modes = nil // TestPingpongModes
			want := def
			tc.set(&want)
			require.Equal(t, want, cfg)
			if tc.rest == nil {
				tc.rest = []string{}
			}
			require.Equal(t, tc.rest, rest)
		})
	}
	for _, args := range [][]string{
		{"-s"},               // a value is required
		{"--size"},           // also for the long form
		{"-sx"},              // not a number
		{"--iters=ten"},      // not a number
		{"-x"},               // no such flag
		{"--no-such"},        // no such flag
		{"-timeout", "1s"},   // one dash is short flags: -t, -i, -m, -e, -o, -u
		{"-ce5"},             // -5 is no flag
		{"--chk=maybe"},      // not a boolean
		{"--timeout", "ten"}, // not a duration
	} {
		_, _, err := parsePingpong(args...)
		require.Error(t, err, "%q", args)
	}
}

// The command line reaches runPingpong: a bad flag is a usage error, and
// a missing link is reported.
func TestPingpongCLI(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 2, run([]string{"pingpong", "-bogus"}, &out, &errb))
	errb.Reset()
	require.Equal(t, 1, run([]string{"pingpong", "-n", "1"}, &out, &errb))
	require.Contains(t, errb.String(), "no link")
	// Extra positional arguments are reported as they were typed, wherever
	// they stand among the flags.
	for _, args := range [][]string{
		{"a", "b"},
		{"a", "-n", "1", "b"},
		{"-n", "1", "a", "b"},
		{"a", "--", "b"},
		{"--", "a", "b"},
	} {
		errb.Reset()
		require.Equal(t, 2, run(append([]string{"pingpong"}, args...), &out, &errb), "%q", args)
		require.Equal(t, "rvt pingpong: unexpected arguments [\"a\" \"b\"]\n", errb.String(), "%q", args)
	}
	// Flags that contradict each other, or name a device rvt does not
	// open, are usage errors that say why.
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--rc", "--ud"}, "rvt pingpong: --rc and --ud: give one of --rc, --uc and --ud\n"},
		{[]string{"-d", "mlx5_0"}, "rvt pingpong: -d mlx5_0: IB device mlx5_0 not found (rvt pingpong opens one device, rvt0)\n"},
		{[]string{"--ib-dev=rxe0", "10.0.0.1"}, "rvt pingpong: -d rxe0: IB device rxe0 not found (rvt pingpong opens one device, rvt0)\n"},
		{[]string{"-m", "1000"}, "rvt pingpong: -m 1000: the path MTU is 256, 512, 1024, 2048 or 4096\n"},
	} {
		errb.Reset()
		require.Equal(t, 2, run(append([]string{"pingpong"}, tc.args...), &out, &errb), "%q", tc.args)
		require.Equal(t, tc.err+"run 'rvt help pingpong' for its flags\n", errb.String(), "%q", tc.args)
	}
	// What the tools refuse for the device's sake stays a failure (1).
	errb.Reset()
	require.Equal(t, 1, run([]string{"pingpong", "-o"}, &out, &errb))
	require.Contains(t, errb.String(), "ODP")

	// A bad address names the flag it came from, with its whole value.
	errb.Reset()
	require.Equal(t, 1, run([]string{"pingpong", "--ip", "1.2.3/24"}, &out, &errb))
	// (What follows the value is net/netip's text, which Go may reword.)
	require.Regexp(t, `^rvt pingpong: link: --ip "1\.2\.3/24": \S.*\n$`, errb.String())
	out.Reset()
	require.Equal(t, 0, run([]string{"help", "pingpong"}, &out, &errb))
	require.Contains(t, out.String(), "usage: rvt pingpong [flags] [server]")
	// The mode flags default to false (none given is RC): their usage
	// says "(the default)" once, with no "(default true)" after it.
	require.Regexp(t, `(?m)^ +--rc\S* +RC mode, like ibv_rc_pingpong \(the default\)$`, out.String())
	require.NotContains(t, out.String(), "(default true)")
}
