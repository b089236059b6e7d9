package pingpong

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/nettest"
)

// fabricLinks returns two link makers on one in-memory fabric: device i
// gets the demo's addresses, so GID index 1 is ::ffff:198.18.0.(i+1).
func fabricLinks(t *testing.T, linkMTU int) [2]func() (*devopen.Link, error) {
	fab := fabric.New(clock.Real(), 1)
	var out [2]func() (*devopen.Link, error)
	for i := range out {
		mac, addrs := devopen.NodeAddrs(i)
		out[i] = func() (*devopen.Link, error) {
			return devopen.Open(devopen.Config{Fabric: fab, MAC: mac.String(), IP: addrs[1].Unmap().String(), LinkMTU: linkMTU})
		}
	}
	return out
}

// side is one side of a test run: the run's settings and its link.
type side struct {
	Config
	link func() (*devopen.Link, error)
}

// runSide runs one side as rvt pingpong does, printing the tools' lines.
func runSide(w io.Writer, s side) error {
	l, err := s.link()
	if err != nil {
		return fmt.Errorf("link: %w", err)
	}
	defer l.Close()
	res, err := Run(s.Config, l, AddressPrinter(w, s.Mode))
	if err != nil {
		return err
	}
	fmt.Fprint(w, res.Lines())
	return nil
}

type ppResult struct {
	server, client string
	serr, cerr     error
}

// runPair runs a server and a client in this process over the fabric.
func runPair(t *testing.T, linkMTU int, server, client func(*side)) ppResult {
	t.Helper()
	return runPairOn(t, fabricLinks(t, linkMTU), server, client)
}

// runPairOn runs a server on links[0] and a client on links[1] in this
// process.
func runPairOn(t *testing.T, links [2]func() (*devopen.Link, error), server, client func(*side)) ppResult {
	t.Helper()
	listening := make(chan net.Addr, 1)
	scfg := side{Config: DefaultConfig()}
	scfg.Port, scfg.GIDIndex, scfg.Iters, scfg.Timeout = 0, 1, 50, 30*time.Second
	scfg.link, scfg.OnListen = links[0], func(a net.Addr) { listening <- a }
	ccfg := scfg
	ccfg.link, ccfg.OnListen = links[1], nil
	server(&scfg)
	client(&ccfg)

	var r ppResult
	var sout, cout bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.serr = runSide(&sout, scfg)
		if r.serr != nil {
			close(listening)
		}
	}()
	a, ok := <-listening
	if ok {
		ccfg.Server = "127.0.0.1"
		ccfg.Port = a.(*net.TCPAddr).Port
		r.cerr = runSide(&cout, ccfg)
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
			set := func(c *side) {
				c.Mode, c.Size, c.Events, c.Check, c.PageSize = tc.mode, tc.size, tc.events, tc.check, 1024
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
			r := runPair(t, 9000, func(c *side) {
				c.Mode, c.Size, c.Check, c.PageSize, c.Iters = mode, 3000, true, 1024, 5
			}, func(c *side) {
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
	r := runPair(t, 1500, func(*side) {}, func(c *side) { c.GIDIndex = 99 })
	require.ErrorContains(t, r.cerr, "index 99")
	require.ErrorContains(t, r.serr, "remote address")
}

// --timeout also bounds the wait for a client: a server nobody connects
// to gives up and says so, and a client whose server accepts but never
// answers gives up too.
func TestPingpongTimeout(t *testing.T) {
	links := fabricLinks(t, 1500)
	cfg := side{Config: DefaultConfig()}
	cfg.Port, cfg.GIDIndex, cfg.Timeout, cfg.link = 0, 1, 200*time.Millisecond, links[0]
	start := time.Now()
	var out bytes.Buffer
	err := runSide(&out, cfg)
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
	err = runSide(&out, cfg)
	require.Error(t, err)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestPingpongErrors(t *testing.T) {
	// UD messages must fit the port's active MTU (1500-byte link: 1024).
	r := runPair(t, 1500, func(c *side) { c.Mode = "ud" }, func(c *side) { c.Mode = "ud" })
	require.ErrorContains(t, r.serr, "Requested size larger than port MTU (1024)")

	// RoCE cannot do without GIDs: a client with -g -1 sends a zero GID and
	// the server refuses it; the client then sees the connection close.
	r = runPair(t, 1500, func(c *side) {}, func(c *side) { c.GIDIndex = -1 })
	require.ErrorContains(t, r.serr, "RoCE needs GIDs")
	require.Error(t, r.cerr)
	require.Contains(t, r.client, "GID ::\n")
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
			var links [2]func() (*devopen.Link, error)
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
				// What rvt pingpong opens for --udp, --xdp or --tap.
				lc := devopen.Config{PathMTU: DefaultConfig().MTU, Seed: 1}
				switch kind {
				case "udp":
					lc.UDP = ip
				case "xdp":
					lc.XDP, lc.IP = veth[i], ip+"/24"
				case "tap":
					lc.TAP, lc.IP = nettest.Name("t"), ip+"/24"
				}
				links[i] = func() (*devopen.Link, error) {
					var l *devopen.Link
					if err := ns[i].Do(func() (err error) {
						l, err = devopen.Open(lc)
						return err
					}); err != nil {
						return nil, err
					}
					if br != "" {
						if out, err := exec.Command("ip", "-n", ns[i].Name, "link", "set", lc.TAP, "master", br).CombinedOutput(); err != nil {
							l.Close()
							return nil, fmt.Errorf("%v: %s", err, out)
						}
					}
					return l, nil
				}
			}
			r := runPairOn(t, links, func(*side) {}, func(*side) {})
			require.NoError(t, r.serr)
			require.NoError(t, r.cerr)
			checkOutput(t, r.server, "rc", 4096, 50, gid[0], gid[1])
			checkOutput(t, r.client, "rc", 4096, 50, gid[1], gid[0])
		})
	}
}
