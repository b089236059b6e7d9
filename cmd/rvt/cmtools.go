package main

// What `rvt rping`, `rvt ucmatose` and `rvt udaddy` share: the link flags
// of `rvt pingpong` (--tap, --xdp, --udp with --ip, --mac, --link-mtu,
// --pcap and the fault profile), --timeout, --rvtd with --ib-dev (a device
// of rvtd, whose connection manager then runs in the daemon), and running
// one side on the chosen link, or, with no link flag, both sides in this
// process on the demo's in-memory pair.

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/softverbs/softverbs/internal/cmtool"
	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/rvt"
)

// cmLinkConfig are the link flags of the rdma_cm tools.
type cmLinkConfig struct {
	devopen.Config
	Timeout time.Duration
	Device  string // with --rvtd: the daemon's device
}

func defaultCMLinkConfig() cmLinkConfig {
	return cmLinkConfig{Config: devopen.Config{Seed: 1}, Device: "rvt0"}
}

// cmLinkFlags registers the long-only link flags (as rvt pingpong's).
func cmLinkFlags(fs *pflag.FlagSet, c *cmLinkConfig) {
	fs.StringVar(&c.TAP, "tap", c.TAP, "create TAP device `name` and be a host on it (needs --ip)")
	fs.StringVar(&c.XDP, "xdp", c.XDP, "attach AF_XDP to interface `iface` (needs --ip)")
	fs.StringVar(&c.UDP, "udp", c.UDP, "UDP socket link on `addr` (IP or IP:port; port 4791 by default)")
	fs.StringVar(&c.IP, "ip", c.IP, "our `addr/prefix` on a TAP or XDP link")
	fs.StringVar(&c.Gateway, "gateway", c.Gateway, "default gateway `addr` on a TAP link (off the --ip subnet, without one: unreachable)")
	fs.StringVar(&c.MAC, "mac", c.MAC, "our `MAC` on a TAP or XDP link (default random)")
	fs.IntVar(&c.LinkMTU, "link-mtu", c.LinkMTU, "Ethernet `MTU` of the link (default: a TAP 1500, other links keep the interface's)")
	fs.StringVar(&c.PCAP, "pcap", c.PCAP, "write the frames we send and receive to pcap `file` (in-memory pair: rvt0's)")
	fs.Float64Var(&c.Loss, "loss", c.Loss, "`probability` that a frame we send is lost (in-memory pair: RC frames)")
	fs.Float64Var(&c.Dup, "dup", c.Dup, "`probability` that a frame we send is duplicated")
	fs.Float64Var(&c.Reorder, "reorder", c.Reorder, "`probability` that a frame we send is reordered")
	fs.DurationVar(&c.Delay, "delay", c.Delay, "`delay` added to every frame we send")
	fs.Int64Var(&c.Seed, "seed", c.Seed, "seed of the fault profile")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "give up after `duration` (0: never)")
	rvtdFlag(fs, &c.RVTD)
	fs.StringVar(&c.Device, "ib-dev", c.Device, "with --rvtd: the daemon's `device` (its connection manager runs in the daemon)")
}

// pair reports whether no link was chosen: both sides run in this process.
func (c *cmLinkConfig) pair() bool {
	return c.TAP == "" && c.XDP == "" && c.UDP == "" && c.IP == "" && c.RVTD == ""
}

func (c *cmLinkConfig) check() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"--loss", c.Loss}, {"--dup", c.Dup}, {"--reorder", c.Reorder}} {
		if !(p.v >= 0 && p.v < 1) {
			return usagef("%s %v: want [0, 1)", p.name, p.v)
		}
	}
	if c.Timeout < 0 {
		return usagef("--timeout %v: want 0 (no timeout) or more", c.Timeout)
	}
	if c.pair() && (c.Dup != 0 || c.Reorder != 0 || c.Delay != 0) {
		return usagef("--dup, --reorder and --delay need a link (--tap, --xdp or --udp); the in-memory pair takes --loss")
	}
	return nil
}

// cmContext is the run's context: --timeout, and SIGINT or SIGTERM end it
// (so a TAP is removed and the peer gets what Close sends).
func (c *cmLinkConfig) context() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	tctx, cancel := cmtool.Context(ctx, c.Timeout)
	return tctx, func() { cancel(); stop() }
}

// runCMTool runs a tool: side on the chosen link (warming the neighbour
// entry of warm first, when valid), or server and client on the in-memory
// pair when no link was chosen.
func runCMTool(w io.Writer, lc cmLinkConfig, warm netip.Addr, side func(context.Context, *rvt.Device, cmtool.Out) error,
	server cmtool.Side, client func(context.Context, *rvt.Device, cmtool.Out) error) error {
	if err := lc.check(); err != nil {
		return err
	}
	ctx, cancel := lc.context()
	defer cancel()
	out := cmtool.Out{Stdout: w, Stderr: os.Stderr}
	if lc.pair() {
		pc := devopen.PairConfig{LinkMTU: lc.LinkMTU, Loss: lc.Loss, Seed: lc.Seed}
		if lc.PCAP != "" {
			f, err := os.Create(lc.PCAP)
			if err != nil {
				return err
			}
			defer f.Close()
			pc.Capture = f
		}
		p, err := devopen.OpenPair(pc)
		if err != nil {
			return err
		}
		defer p.Close()
		return cmtool.RunPair(ctx, p, out, server, func(ctx context.Context, dev *rvt.Device, out cmtool.Out, _ func()) error {
			return client(ctx, dev, out)
		})
	}
	l, err := devopen.Open(lc.Config)
	if err != nil {
		return fmt.Errorf("link: %w", err)
	}
	defer l.Close()
	name := "rvt0"
	if l.RVTD != "" {
		name = lc.Device
	}
	dev, err := l.OpenDevice(name)
	if err != nil {
		return fmt.Errorf("couldn't get context for %s: %w", name, err)
	}
	defer dev.Close()
	if warm.IsValid() && l.Resolve != nil {
		l.AwaitNeighbour(warm)
	}
	return side(ctx, dev, out)
}

// parseUint8 parses a number as strtoul(s, NULL, 0) does (0x.., 0.., decimal).
func parseUint8(flag, s string) (int, error) {
	v, err := strconv.ParseUint(s, 0, 8)
	if err != nil {
		return 0, usagef("%s %q: want a number from 0 to 255", flag, s)
	}
	return int(v), nil
}

// parseHost resolves an address flag (a numeric IP, or a name).
func parseHost(flag, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	a, err := cmtool.ParseAddr(context.Background(), s)
	if err != nil {
		return netip.Addr{}, usageError{fmt.Errorf("%s: %w", flag, err)}
	}
	return a, nil
}
