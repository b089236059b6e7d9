package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/nettest"
)

// From ../shared/captures/host_ud_probe.txt: the message a real
// ibv_ud_pingpong server (rdma-core 44 on rxe) sent, as the probe decoded
// it, and the lines that server printed.
const (
	captureServerMsg   = "0000:000024:8ee9f0:00000000000000000000ffff0a320001"
	captureServerLocal = "  local address:  LID 0x0000, QPN 0x000024, PSN 0x8ee9f0: GID ::ffff:10.50.0.1\n"
	captureServerRem   = "  remote address: LID 0x0000, QPN 0x004242, PSN 0x000000, GID ::ffff:10.50.0.254\n"
	// ../shared/captures/ibv_rc_pingpong.txt, the client in guest 2.
	captureRCLocal = "  local address:  LID 0x0000, QPN 0x000013, PSN 0x814221, GID ::ffff:10.50.0.2\n"
)

func TestOOBMessageFromCapture(t *testing.T) {
	// The server's message as it is on the wire: 51 characters and a NUL.
	wire := append([]byte(captureServerMsg), 0)
	require.Len(t, wire, oobMsgLen)
	d, err := parseDest(wire)
	require.NoError(t, err)
	want := ppDest{LID: 0, QPN: 0x24, PSN: 0x8ee9f0, GID: netdev.GIDFromIP(netip.MustParseAddr("10.50.0.1"))}
	require.Equal(t, want, d)
	require.Equal(t, wire, d.marshal(), "marshal gives back the bytes rdma-core sent")
	require.Equal(t, captureServerLocal, addressLine("local address: ", d, ": "))

	probe := ppDest{QPN: 0x4242, GID: netdev.GIDFromIP(netip.MustParseAddr("10.50.0.254"))}
	require.Equal(t, captureServerRem, addressLine("remote address:", probe, ", "))
	// host_ud_probe.py builds the same wire GID by hand.
	require.Equal(t, "00000000000000000000ffff0a3200fe", wireGID(probe.GID))

	// ::ffff:10.50.0.2, as ibv_rc_pingpong printed it and would send it.
	rc := ppDest{QPN: 0x13, PSN: 0x814221, GID: netdev.GIDFromIP(netip.MustParseAddr("10.50.0.2"))}
	require.Equal(t, captureRCLocal, addressLine("local address: ", rc, ", "))
	require.Equal(t, "0000:000013:814221:00000000000000000000ffff0a320002\x00", string(rc.marshal()))
}

func TestWireGID(t *testing.T) {
	for _, tc := range []struct{ ip, wire, text string }{
		{"10.50.0.2", "00000000000000000000ffff0a320002", "::ffff:10.50.0.2"},
		{"fe80::5054:ff:fe52:5801", "fe80000000000000505400fffe525801", "fe80::5054:ff:fe52:5801"},
		{"::", "00000000000000000000000000000000", "::"},
		{"::1", "00000000000000000000000000000001", "::1"},
		// IPv4-compatible: glibc's inet_ntop keeps the dotted quad.
		{"::a32:1", "0000000000000000000000000a320001", "::10.50.0.1"},
		{"2001:db8::1", "20010db8000000000000000000000001", "2001:db8::1"},
	} {
		t.Run(tc.ip, func(t *testing.T) {
			g := netdev.GID(netip.MustParseAddr(tc.ip).As16())
			require.Equal(t, tc.wire, wireGID(g))
			back, err := parseWireGID(tc.wire)
			require.NoError(t, err)
			require.Equal(t, g, back)
			require.Equal(t, tc.text, gidString(g))
		})
	}
}

func TestParseDestErrors(t *testing.T) {
	for _, s := range []string{
		"",
		"0000:000024:8ee9f0",
		"zzzz:000024:8ee9f0:00000000000000000000ffff0a320001",
		"0000:1000000:8ee9f0:00000000000000000000ffff0a320001",
		"0000:000024:8ee9f0:00000000000000000000ffff0a3200",
		"0000:000024:8ee9f0:00000000000000000000ffff0a3200zz",
		"10000:000024:8ee9f0:00000000000000000000ffff0a320001",
	} {
		_, err := parseDest([]byte(s))
		require.ErrorIs(t, err, errBadOOB, "%q", s)
	}
}

// The exchange, byte for byte: the client sends 52 bytes first; the
// server connects before it answers with 52 bytes; the client ends with
// the 5 bytes "done\0".
func TestOOBExchangeBytes(t *testing.T) {
	cli, srv := net.Pipe()
	defer cli.Close()
	defer srv.Close()
	mine := ppDest{QPN: 0x11, PSN: 0xabcdef, GID: netdev.GIDFromIP(netip.MustParseAddr("10.50.0.200"))}
	theirs := ppDest{QPN: 0x24, PSN: 0x8ee9f0, GID: netdev.GIDFromIP(netip.MustParseAddr("10.50.0.1"))}

	var got ppDest
	var cerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		got, cerr = clientExchange(cli, mine)
	}()
	// Play rdma-core's server by hand.
	msg := make([]byte, oobMsgLen)
	_, err := io.ReadFull(srv, msg)
	require.NoError(t, err)
	require.Equal(t, "0000:000011:abcdef:00000000000000000000ffff0a3200c8\x00", string(msg))
	_, err = srv.Write(append([]byte(captureServerMsg), 0))
	require.NoError(t, err)
	fin := make([]byte, 5)
	_, err = io.ReadFull(srv, fin)
	require.NoError(t, err)
	require.Equal(t, "done\x00", string(fin))
	<-done
	require.NoError(t, cerr)
	require.Equal(t, theirs, got)

	// And the server side against a hand-played client.
	cli2, srv2 := net.Pipe()
	defer cli2.Close()
	defer srv2.Close()
	var connected ppDest
	var srem ppDest
	var serr error
	done = make(chan struct{})
	go func() {
		defer close(done)
		srem, serr = serverExchange(srv2, theirs, func(d ppDest) error { connected = d; return nil })
	}()
	_, err = cli2.Write(mine.marshal())
	require.NoError(t, err)
	_, err = io.ReadFull(cli2, msg)
	require.NoError(t, err)
	require.Equal(t, captureServerMsg+"\x00", string(msg))
	require.Equal(t, mine, connected, "the server connects before it answers")
	_, err = cli2.Write([]byte("done\x00"))
	require.NoError(t, err)
	<-done
	require.NoError(t, serr)
	require.Equal(t, mine, srem)
}

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

// fabricLinks returns two link makers on one in-memory fabric: device i
// gets the demo's addresses, so GID index 1 is ::ffff:198.18.0.(i+1).
func fabricLinks(t *testing.T, linkMTU int) [2]func() (*ppLink, error) {
	fab := fabric.New(clock.Real(), 1)
	var out [2]func() (*ppLink, error)
	for i := range out {
		mac, addrs := nodeAddrs(i)
		for _, a := range addrs {
			fab.AddAddr(a, mac)
		}
		out[i] = func() (*ppLink, error) {
			port := fab.NewPort(mac, linkMTU)
			return &ppLink{link: port, mac: mac, addrs: addrs, resolve: fab.Resolve,
				closers: []func(){func() { _ = port.Close() }}}, nil
		}
	}
	return out
}

type ppResult struct {
	server, client string
	serr, cerr     error
}

// runPair runs a server and a client in this process over the fabric.
func runPair(t *testing.T, linkMTU int, server, client func(*pingpongConfig)) ppResult {
	t.Helper()
	links := fabricLinks(t, linkMTU)
	listening := make(chan net.Addr, 1)
	scfg := defaultPingpongConfig()
	scfg.Port, scfg.GIDIndex, scfg.Iters, scfg.Timeout = 0, 1, 50, 30*time.Second
	scfg.link, scfg.onListen = links[0], func(a net.Addr) { listening <- a }
	ccfg := scfg
	ccfg.link, ccfg.onListen = links[1], nil
	server(&scfg)
	client(&ccfg)

	var r ppResult
	var sout, cout bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.serr = runPingpong(&sout, scfg)
		if r.serr != nil {
			close(listening)
		}
	}()
	a, ok := <-listening
	if ok {
		ccfg.Server = "127.0.0.1"
		ccfg.Port = a.(*net.TCPAddr).Port
		r.cerr = runPingpong(&cout, ccfg)
		if r.cerr != nil {
			// The client may have failed before it dialled (opening
			// its link): connect and hang up, so that the server's
			// Accept returns and its run fails instead of waiting for
			// the package timeout.
			if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ccfg.Port), 5*time.Second); err == nil {
				c.Close()
			}
		}
	}
	wg.Wait()
	r.server, r.client = sout.String(), cout.String()
	t.Logf("server:\n%s(err %v)\nclient:\n%s(err %v)", r.server, r.serr, r.client, r.cerr)
	return r
}

var (
	addrLineRE = regexp.MustCompile(`^  (local address: |remote address:) LID 0x([0-9a-f]{4}), QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})(, |: )GID (\S+)$`)
	bytesRE    = regexp.MustCompile(`^(\d+) bytes in (\d+\.\d\d) seconds = (\d+\.\d\d|inf) Mbit/sec$`)
	itersRE    = regexp.MustCompile(`^(\d+) iters in (\d+\.\d\d) seconds = (\d+\.\d\d|inf) usec/iter$`)
)

// checkOutput checks one side's lines and returns its local and remote
// (QPN, PSN) pairs.
func checkOutput(t *testing.T, out, mode string, size, iters int, gid, remGID string) (local, remote [2]string, extra []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.GreaterOrEqual(t, len(lines), 4, out)
	for i, want := range []string{"local address: ", "remote address:"} {
		m := addrLineRE.FindStringSubmatch(lines[i])
		require.NotNil(t, m, "line %d: %q", i, lines[i])
		require.Equal(t, want, m[1])
		require.Equal(t, "0000", m[2], "LID")
		sep := ", "
		if mode == "ud" && i == 0 {
			sep = ": "
		}
		require.Equal(t, sep, m[5], "separator before GID in %q", lines[i])
		g := gid
		if i == 1 {
			g = remGID
		}
		require.Equal(t, g, m[6])
		if i == 0 {
			local = [2]string{m[3], m[4]}
		} else {
			remote = [2]string{m[3], m[4]}
		}
	}
	m := bytesRE.FindStringSubmatch(lines[2])
	require.NotNil(t, m, "%q", lines[2])
	require.Equal(t, strconv.Itoa(size*iters*2), m[1])
	m = itersRE.FindStringSubmatch(lines[3])
	require.NotNil(t, m, "%q", lines[3])
	require.Equal(t, strconv.Itoa(iters), m[1])
	return local, remote, lines[4:]
}

func TestPingpongFabric(t *testing.T) {
	for _, tc := range []struct {
		name          string
		mode          string
		size, mtu     int
		linkMTU       int
		events, check bool
	}{
		{name: "rc", mode: "rc", linkMTU: 1500},
		{name: "rc-1B", mode: "rc", size: 1, linkMTU: 1500},
		{name: "rc-64KiB-mtu4096", mode: "rc", size: 64 << 10, mtu: 4096, linkMTU: 9000},
		{name: "rc-events-chk", mode: "rc", size: 10000, linkMTU: 1500, events: true, check: true},
		{name: "uc", mode: "uc", linkMTU: 1500},
		{name: "uc-events-chk", mode: "uc", size: 8192, mtu: 2048, linkMTU: 9000, events: true, check: true},
		{name: "ud", mode: "ud", size: 1024, linkMTU: 1500},
		{name: "ud-default-size", mode: "ud", linkMTU: 9000},
		{name: "ud-events-chk", mode: "ud", size: 4096, linkMTU: 9000, events: true, check: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := func(c *pingpongConfig) {
				c.Mode, c.Size, c.Events, c.Check, c.pageSize = tc.mode, tc.size, tc.events, tc.check, 1024
				if tc.mtu != 0 {
					c.MTU = tc.mtu
				}
			}
			r := runPair(t, tc.linkMTU, set, set)
			require.NoError(t, r.serr)
			require.NoError(t, r.cerr)
			size := tc.size
			if size == 0 {
				size = map[bool]int{false: 4096, true: 2048}[tc.mode == "ud"]
			}
			sl, sr, sx := checkOutput(t, r.server, tc.mode, size, 50, "::ffff:198.18.0.1", "::ffff:198.18.0.2")
			cl, cr, cx := checkOutput(t, r.client, tc.mode, size, 50, "::ffff:198.18.0.2", "::ffff:198.18.0.1")
			require.Equal(t, sl, cr, "the client learned the server's QPN and PSN")
			require.Equal(t, cl, sr, "the server learned the client's QPN and PSN")
			require.Empty(t, sx, "no invalid pages")
			require.Empty(t, cx)
		})
	}
}

// -c on the server alone: the client does not mark its pages, so every
// page of what arrived still holds the 0x7b fill and the server reports
// each one, as rdma-core's server does. This shows the check looks at the
// received data.
func TestPingpongCheckDetects(t *testing.T) {
	for _, mode := range []string{"rc", "ud"} {
		t.Run(mode, func(t *testing.T) {
			r := runPair(t, 9000, func(c *pingpongConfig) {
				c.Mode, c.Size, c.Check, c.pageSize, c.Iters = mode, 3000, true, 1024, 5
			}, func(c *pingpongConfig) {
				c.Mode, c.Size, c.Iters = mode, 3000, 5
			})
			require.NoError(t, r.serr)
			require.NoError(t, r.cerr)
			_, _, extra := checkOutput(t, r.server, mode, 3000, 5, "::ffff:198.18.0.1", "::ffff:198.18.0.2")
			require.Equal(t, []string{"invalid data in page 0", "invalid data in page 1", "invalid data in page 2"}, extra)
		})
	}
}

// A client that fails before it dials (here at its GID) fails the pair
// promptly: the server's accept is released and its run reports the
// closed exchange, rather than both waiting for the package timeout. The
// release is runPair's (the test harness connects and hangs up for the
// failed client); what the product code shows is the server's report of a
// peer that hung up ("couldn't read remote address").
func TestPingpongClientFailsEarly(t *testing.T) {
	r := runPair(t, 1500, func(*pingpongConfig) {}, func(c *pingpongConfig) { c.GIDIndex = 99 })
	require.ErrorContains(t, r.cerr, "index 99")
	require.ErrorContains(t, r.serr, "remote address")
}

// --timeout also bounds the wait for a client: a server nobody connects
// to gives up and says so, and a client whose server accepts but never
// answers gives up too.
func TestPingpongTimeout(t *testing.T) {
	links := fabricLinks(t, 1500)
	cfg := defaultPingpongConfig()
	cfg.Port, cfg.GIDIndex, cfg.Timeout, cfg.link = 0, 1, 200*time.Millisecond, links[0]
	start := time.Now()
	var out bytes.Buffer
	err := runPingpong(&out, cfg)
	require.ErrorContains(t, err, "timed out after 200ms waiting for a client on ")
	require.Less(t, time.Since(start), 10*time.Second)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c) // read the client's address, never answer
		}
	}()
	cfg.link, cfg.Server, cfg.Port = links[1], "127.0.0.1", ln.Addr().(*net.TCPAddr).Port
	start = time.Now()
	err = runPingpong(&out, cfg)
	require.Error(t, err)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestPingpongErrors(t *testing.T) {
	// UD messages must fit the port's active MTU (1500-byte link: 1024).
	r := runPair(t, 1500, func(c *pingpongConfig) { c.Mode = "ud" }, func(c *pingpongConfig) { c.Mode = "ud" })
	require.ErrorContains(t, r.serr, "Requested size larger than port MTU (1024)")

	// RoCE cannot do without GIDs: a client with -g -1 sends a zero GID and
	// the server refuses it; the client then sees the connection close.
	r = runPair(t, 1500, func(c *pingpongConfig) {}, func(c *pingpongConfig) { c.GIDIndex = -1 })
	require.ErrorContains(t, r.serr, "RoCE needs GIDs")
	require.Error(t, r.cerr)
	require.Contains(t, r.client, "GID ::\n")
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

// openUDPLink's errors name the flag the address came from (--udp wins
// over --ip) and quote its whole value.
func TestOpenUDPLinkErrors(t *testing.T) {
	for _, tc := range []struct {
		udp, ip string
		err     string
		reason  bool // err is followed by the parser's reason
	}{
		{udp: "1.2.3", err: `--udp "1.2.3": want IP or IP:port`},
		{udp: "10.0.0.1:x", ip: "10.0.0.1/24", err: `--udp "10.0.0.1:x": want IP or IP:port`},
		// --ip is parsed by parsePrefix, as for the other links; after
		// the value comes net/netip's text, which Go may reword.
		{ip: "1.2.3/24", err: `--ip "1.2.3/24": netip.ParsePrefix("1.2.3/24"): `, reason: true},
		{ip: "1.2.3", err: `--ip "1.2.3": ParseAddr("1.2.3"): `, reason: true},
		{ip: "/24", err: `--ip "/24": netip.ParsePrefix("/24"): `, reason: true},
		{ip: "10.0.0.1:5000", err: `--ip "10.0.0.1:5000": ParseAddr("10.0.0.1:5000"): `, reason: true},
		{ip: "10.0.0.1/99", err: `--ip "10.0.0.1/99": netip.ParsePrefix("10.0.0.1/99"): `, reason: true},
	} {
		l, err := openUDPLink(&pingpongConfig{UDP: tc.udp, IP: tc.ip})
		require.Nil(t, l, "--udp %q --ip %q", tc.udp, tc.ip)
		require.Error(t, err, "--udp %q --ip %q", tc.udp, tc.ip)
		if tc.reason {
			require.True(t, strings.HasPrefix(err.Error(), tc.err) && len(err.Error()) > len(tc.err),
				"--udp %q --ip %q: %q, want %q and the parser's reason", tc.udp, tc.ip, err, tc.err)
		} else {
			require.EqualError(t, err, tc.err, "--udp %q --ip %q", tc.udp, tc.ip)
		}
	}
}

// TestPingpongLinks runs the RC ping-pong over links the flags select, the
// two sides in namespaces joined by a veth: the openers that the fabric
// tests replace, which `rvt perf` shares. Over --xdp the client closes its
// link right after its last ACK went on the TX ring: the ACK must still
// reach the server, or the server's last SEND fails with retry exceeded.
func TestPingpongLinks(t *testing.T) {
	nettest.RequireRoot(t)
	for _, kind := range []string{"udp", "tap", "xdp"} {
		t.Run(kind, func(t *testing.T) {
			ns := [2]*nettest.Netns{nettest.New(t), nettest.New(t)}
			var veth [2]string
			veth[0], veth[1] = nettest.Veth(t, ns[0], ns[1])
			var side [2]func(*pingpongConfig)
			var gid [2]string
			for i := range ns {
				ip := fmt.Sprintf("10.204.0.%d", i+1)
				var br string
				if kind == "tap" {
					// The kernel has no address here: softverbs is the
					// host behind the TAP, bridged with the veth end.
					ip = fmt.Sprintf("10.204.0.%d", i+11)
					br = ns[i].Bridge(veth[i])
				} else {
					ns[i].Run("ip", "addr", "add", ip+"/24", "dev", veth[i])
				}
				gid[i] = "::ffff:" + ip
				side[i] = func(c *pingpongConfig) {
					switch kind {
					case "udp":
						c.UDP = ip
					case "xdp":
						c.XDP, c.IP = veth[i], ip+"/24"
					case "tap":
						c.TAP, c.IP = nettest.Name("t"), ip+"/24"
					}
					cfg := *c
					c.link = func() (*ppLink, error) {
						var l *ppLink
						if err := ns[i].Do(func() (err error) {
							l, err = openPingpongLink(&cfg)
							return err
						}); err != nil {
							return nil, err
						}
						if br != "" {
							if out, err := exec.Command("ip", "-n", ns[i].Name, "link", "set", cfg.TAP, "master", br).CombinedOutput(); err != nil {
								l.close()
								return nil, fmt.Errorf("%v: %s", err, out)
							}
						}
						return l, nil
					}
				}
			}
			r := runPair(t, 1500, side[0], side[1])
			require.NoError(t, r.serr)
			require.NoError(t, r.cerr)
			checkOutput(t, r.server, "rc", 4096, 50, gid[0], gid[1])
			checkOutput(t, r.client, "rc", 4096, 50, gid[1], gid[0])
		})
	}
}
