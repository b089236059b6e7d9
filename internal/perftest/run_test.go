package perftest

import (
	"bytes"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/rvt"
)

// openPair opens rvt0 and rvt1 on an in-memory fabric with the given
// Ethernet MTU.
func openPair(t *testing.T, linkMTU int) (*rvt.Device, *rvt.Device) {
	t.Helper()
	fab := fabric.New(clock.Real(), 1)
	var devs [2]*rvt.Device
	for i := range devs {
		mac := netdev.MAC{2, 0, 0, 0, 0, byte(i + 1)}
		addrs := netdev.GIDOrder(mac, []netip.Addr{netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})})
		for _, a := range addrs {
			fab.AddAddr(a, mac)
		}
		port := fab.NewPort(mac, linkMTU)
		d, err := rvt.Open(rvt.Options{Name: fmt.Sprintf("rvt%d", i), Link: port, MAC: mac, Addrs: addrs, Resolve: fab.Resolve})
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Close(); _ = port.Close() })
		devs[i] = d
	}
	return devs[0], devs[1]
}

// table is a printed result table: the title's columns and each row's
// fields.
type table struct {
	title []string
	rows  [][]string
}

// parseTable finds the result table in a tool's output the way a script
// would: the line starting with " #bytes", then the rows up to the next
// ResultLine.
func parseTable(t *testing.T, out string) table {
	t.Helper()
	var tb table
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, " #bytes") {
			continue
		}
		tb.title = strings.Fields(l)
		for _, r := range lines[i+1:] {
			if strings.HasPrefix(r, "-----") {
				return tb
			}
			tb.rows = append(tb.rows, strings.Fields(r))
		}
	}
	t.Fatalf("no result table in:\n%s", out)
	return tb
}

func TestToolsEndToEnd(t *testing.T) {
	cli, srv := openPair(t, 9000)
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		rows int
	}{
		{"ib_write_bw", func(c *Config) { c.Test = WriteBW }, 1},
		{"ib_write_bw -b -q 2 -l 2", func(c *Config) { c.Test, c.Duplex, c.QPs, c.PostList = WriteBW, true, 2, 2 }, 1},
		{"ib_send_bw -c UC -e", func(c *Config) { c.Test, c.Conn, c.Events = SendBW, "UC", true }, 1},
		{"ib_write_bw -l 4", func(c *Config) { c.Test, c.PostList = WriteBW, 4 }, 1},
		{"ib_send_bw -I 64", func(c *Config) { c.Test, c.Inline = SendBW, 64 }, 1},
		{"ib_read_bw -o 1000", func(c *Config) { c.Test, c.OutReads = ReadBW, 1000 }, 1},
		{"ib_read_bw", func(c *Config) { c.Test = ReadBW }, 1},
		{"ib_send_bw", func(c *Config) { c.Test = SendBW }, 1},
		{"ib_send_bw -c UD", func(c *Config) { c.Test, c.Conn = SendBW, "UD" }, 1},
		{"ib_send_bw -b", func(c *Config) { c.Test, c.Duplex = SendBW, true }, 1},
		// No peak: asked for (-N), or past 20,000 iterations, where
		// perftest turns it on itself. The average is from the first
		// post to the end of the run.
		{"ib_write_bw -N", func(c *Config) { c.Test, c.NoPeak = WriteBW, true }, 1},
		{"ib_write_bw -n 20001", func(c *Config) { c.Test, c.Iters = WriteBW, 20001 }, 1},
		{"ib_send_bw -b -n 20001", func(c *Config) { c.Test, c.Duplex, c.Iters = SendBW, true, 20001 }, 1},
		{"ib_atomic_bw", func(c *Config) { c.Test = AtomicBW }, 1},
		{"ib_atomic_bw -A CMP_AND_SWAP", func(c *Config) { c.Test, c.Atomic = AtomicBW, CmpAndSwap }, 1},
		{"ib_write_lat", func(c *Config) { c.Test = WriteLat }, 1},
		{"ib_read_lat", func(c *Config) { c.Test = ReadLat }, 1},
		{"ib_send_lat", func(c *Config) { c.Test = SendLat }, 1},
		{"ib_send_lat -c UD -e", func(c *Config) { c.Test, c.Conn, c.Events = SendLat, "UD", true }, 1},
		{"ib_send_lat -c UC", func(c *Config) { c.Test, c.Conn = SendLat, "UC" }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(WriteBW)
			cfg.Iters, cfg.Size, cfg.Timeout = 20, 4096, 20*time.Second
			tc.cfg(&cfg)
			if cfg.Test == AtomicBW {
				cfg.Size = 0
			}
			var cout, cerr, sout bytes.Buffer
			require.NoError(t, RunPair(cfg, cli, srv, 0, &cout, &cerr, &sout), "client:\n%s\nserver:\n%s", cout.String(), sout.String())
			for who, out := range map[string]string{"client": cout.String(), "server": sout.String()} {
				if cfg.Test == ReadLat && who == "server" {
					require.NotContains(t, out, " #bytes", "the ib_read_lat server prints no table")
					continue
				}
				tb := parseTable(t, out)
				require.Len(t, tb.rows, tc.rows, "%s:\n%s", who, out)
				row := tb.rows[0]
				size := "4096"
				if cfg.Test == AtomicBW {
					size = "8"
				}
				require.Equal(t, size, row[0], "%s: #bytes", who)
				require.Equal(t, strconv.Itoa(cfg.Iters*max(cfg.QPs, 1)), row[1], "%s: #iterations", who)
				for _, f := range row[2:] {
					v, err := strconv.ParseFloat(f, 64)
					require.NoError(t, err, "%s: %q", who, f)
					require.GreaterOrEqual(t, v, 0.0)
				}
				if cfg.Test.Latency() {
					require.Len(t, row, 9, who)
				} else {
					require.Len(t, row, 5, who)
					avg, _ := strconv.ParseFloat(row[3], 64)
					require.Positive(t, avg, "%s: BW average", who)
					rate, _ := strconv.ParseFloat(row[4], 64)
					require.Positive(t, rate, "%s: MsgRate", who)
					if cfg.NoPeak || cfg.Iters > 20000 {
						require.Equal(t, "0.00", row[2], "%s: BW peak, not measured", who)
					}
				}
				require.Contains(t, out, " GID index       : 1\n", who)
				require.Contains(t, out, " Mtu             : 4096[B]\n", who)
			}
			require.Contains(t, sout.String(), "* Waiting for client to connect... *")
			require.NotContains(t, cout.String(), "Waiting for client")
		})
	}
}

func TestToolsAllSizesAndOutput(t *testing.T) {
	cli, srv := openPair(t, 1500)
	cfg := DefaultConfig(SendBW)
	cfg.Iters, cfg.All, cfg.Conn, cfg.Timeout = 5, true, "UD", 20*time.Second
	var out, errOut bytes.Buffer
	require.NoError(t, RunPair(cfg, cli, srv, 0, &out, &errOut, nil))
	tb := parseTable(t, out.String())
	// UD: 2 bytes to the 1024-byte MTU of a 1500-byte link.
	require.Len(t, tb.rows, 10, out.String())
	require.Equal(t, "1024", tb.rows[9][0])

	cfg = DefaultConfig(WriteLat)
	cfg.Iters, cfg.Size, cfg.Output, cfg.Timeout = 10, 64, OutputLatency, 20*time.Second
	out.Reset()
	require.NoError(t, RunPair(cfg, cli, srv, 0, &out, &errOut, nil))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 1, out.String())
	_, err := strconv.ParseFloat(lines[0], 64)
	require.NoError(t, err)

	cfg = DefaultConfig(ReadBW)
	cfg.Iters, cfg.Size, cfg.Output, cfg.Gbits, cfg.Timeout = 10, 64, OutputBandwidth, true, 20*time.Second
	out.Reset()
	errOut.Reset()
	require.NoError(t, RunPair(cfg, cli, srv, 0, &out, &errOut, nil))
	require.Regexp(t, `^[0-9]+\.[0-9]{6}\n$`, out.String())
	require.Equal(t, InlineWarning, errOut.String())
}

func TestToolsTimed(t *testing.T) {
	cli, srv := openPair(t, 9000)
	for _, tst := range []Test{WriteBW, SendBW, SendLat, ReadLat} {
		t.Run(tst.String(), func(t *testing.T) {
			cfg := DefaultConfig(tst)
			cfg.Duration, cfg.Size, cfg.Timeout = 1, 64, 20*time.Second
			if tst == WriteBW {
				cfg.Duration, cfg.Margin = 3, 1 // a window between margins
			}
			var out bytes.Buffer
			require.NoError(t, RunPair(cfg, cli, srv, 0, &out, nil, nil))
			tb := parseTable(t, out.String())
			require.Len(t, tb.rows, 1, out.String())
			n, err := strconv.Atoi(tb.rows[0][1])
			require.NoError(t, err)
			require.Positive(t, n)
		})
	}
}

// TestWindow: a timed run counts between its margins, over the time
// between them, as perftest's catch_alarm does; -D below 4 has none.
func TestWindow(t *testing.T) {
	clk := clock.NewManual()
	cfg := DefaultConfig(WriteBW)
	cfg.Duration = 8
	p, err := cfg.normalize()
	require.NoError(t, err)
	require.Equal(t, 2, p.Margin, "a quarter of -D")
	s := &side{p: p, clk: clk, base: clk.Now()}
	w := s.newWindow()
	step := func(d time.Duration, count uint64) bool {
		clk.Advance(d)
		return w.tick(s, count)
	}
	require.False(t, step(time.Second, 100))
	require.False(t, step(time.Second, 200)) // 2 s: the window opens
	require.False(t, step(3*time.Second, 500))
	require.False(t, step(time.Second, 600)) // 6 s: it shuts
	require.False(t, step(time.Second, 700))
	require.True(t, step(time.Second, 800)) // 8 s: the run is over
	n, t0, t1 := w.result(s, 800)
	require.Equal(t, uint64(400), n)
	require.Equal(t, Cycles(2*time.Second), t0)
	require.Equal(t, Cycles(6*time.Second), t1)

	// -D 3: no margin, the whole run counts; a run that ends early (its
	// peer gone) shuts the window where it ends.
	cfg.Duration = 3
	p, err = cfg.normalize()
	require.NoError(t, err)
	require.Zero(t, p.Margin)
	s = &side{p: p, clk: clk, base: clk.Now()}
	w = s.newWindow()
	require.False(t, step(0, 0))
	require.False(t, step(time.Second, 50))
	n, t0, t1 = w.result(s, 60)
	require.Equal(t, uint64(60), n)
	require.Equal(t, Cycles(0), t0)
	require.Equal(t, Cycles(time.Second), t1)

	// -f sets the margin; it must leave a window.
	cfg.Duration, cfg.Margin = 3, 1
	_, err = cfg.normalize()
	require.NoError(t, err)
	cfg.Duration = 2
	_, err = cfg.normalize()
	require.ErrorContains(t, err, "please check that DURATION > 2*MARGIN")
}

func TestConfigRefuses(t *testing.T) {
	for name, c := range map[string]func(*Config){
		"UD write":    func(c *Config) { c.Test, c.Conn = WriteBW, "UD" },
		"UC read":     func(c *Config) { c.Test, c.Conn = ReadBW, "UC" },
		"few iters":   func(c *Config) { c.Iters = 4 },
		"bad MTU":     func(c *Config) { c.MTU = 1500 },
		"atomic size": func(c *Config) { c.Test, c.Size = AtomicBW, 16 },
		"lat duplex":  func(c *Config) { c.Test, c.Duplex = SendLat, true },
		"bad atomic":  func(c *Config) { c.Atomic = "SWAP" },
		"port":        func(c *Config) { c.IBPort = 2 },
		"huge size":   func(c *Config) { c.Size = maxSize + 1 },
		"post list":   func(c *Config) { c.PostList, c.TxDepth = 8, 4 },
		// What perftest's parser and force_dependecies refuse.
		"post list of iters":   func(c *Config) { c.PostList, c.Iters = 3, 100 },
		"post list of -Q":      func(c *Config) { c.PostList, c.CQMod = 4, 3 },
		"write events":         func(c *Config) { c.Events = true },
		"write lat events":     func(c *Config) { c.Test, c.Events = WriteLat, true },
		"RDMA rx depth":        func(c *Config) { c.RxDepth = 16 },
		"read rx depth":        func(c *Config) { c.Test, c.RxDepth = ReadBW, 2 },
		"lat no peak":          func(c *Config) { c.Test, c.NoPeak = SendLat, true },
		"duration events":      func(c *Config) { c.Test, c.Duration, c.Events = SendBW, 2, true },
		"bw output latency":    func(c *Config) { c.Output = OutputLatency },
		"lat output bandwidth": func(c *Config) { c.Test, c.Output = SendLat, OutputBandwidth },
		"lat output msg rate":  func(c *Config) { c.Test, c.Output = WriteLat, OutputMsgRate },
		"inline read":          func(c *Config) { c.Test, c.Inline = ReadBW, 0 },
		"inline atomic":        func(c *Config) { c.Test, c.Inline = AtomicBW, 16 },
		"inline too big":       func(c *Config) { c.Test, c.Inline = SendBW, 1025 },
		"-D with -a":           func(c *Config) { c.Duration, c.All = 2, true },
		"bad conn":             func(c *Config) { c.Conn = "XRC" },
		"GID index 65":         func(c *Config) { c.GIDIndex = 65 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig(WriteBW)
			c(&cfg)
			_, err := cfg.normalize()
			require.Error(t, err)
		})
	}
	p, err := DefaultConfig(WriteBW).normalize()
	require.NoError(t, err)
	// 64 KiB is above MSG_SIZE_CQ_MOD_LIMIT: every WR is signalled.
	require.Equal(t, []int{65536, 5000, 128, 1}, []int{p.Size, p.Iters, p.TxDepth, p.CQMod})
	c := DefaultConfig(ReadBW)
	c.Size = 4096
	p, err = c.normalize()
	require.NoError(t, err)
	require.Equal(t, []int{4096, 1000, 128, 100}, []int{p.Size, p.Iters, p.TxDepth, p.CQMod})
	c = DefaultConfig(SendLat)
	c.Iters = 20
	p, err = c.normalize()
	require.NoError(t, err)
	require.Equal(t, []int{2, 1, 20, 1}, []int{p.Size, p.TxDepth, p.RxDepth, p.CQMod})
	c = DefaultConfig(SendBW)
	c.Iters = 5
	p, _ = c.normalize()
	require.Equal(t, 6, p.RxDepth, "an odd SEND receive queue is made even")
	c = DefaultConfig(WriteBW)
	c.Size, c.CQMod = 65536, 10
	p, _ = c.normalize()
	require.Equal(t, 10, p.CQMod, "-Q is kept")
	require.Equal(t, []string{"Warning: Large message requested and CQ moderation enabled\n" +
		"Warning: It can lead to inaccurate results\n"}, p.notices)
	// A post list sets the moderation when -Q does not, after the rule
	// for large messages, as in force_dependecies.
	c = DefaultConfig(WriteBW)
	c.PostList = 4
	p, err = c.normalize()
	require.NoError(t, err)
	require.Equal(t, 4, p.CQMod)
	require.Equal(t, []string{"Post List requested - CQ moderation will be the size of the post list\n"}, p.notices)
	c.Size, c.CQMod = 4096, 2
	p, err = c.normalize()
	require.NoError(t, err)
	require.Equal(t, 2, p.CQMod)
	require.Empty(t, p.notices)
	c = DefaultConfig(SendBW)
	c.Size = 1 << 24
	p, err = c.normalize()
	require.NoError(t, err, "sizes up to UINT_MAX/2, not only -a's 8 MiB")
	require.Equal(t, 1<<24, p.Size)
}
