package main

// rvt mckey: the flags of rdma-core's mckey (getopt "m:M:sb:c:C:S:p:ol")
// and the link's; the run and its lines are internal/mckey's.

import (
	"context"
	"io"
	"net/netip"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/internal/cmtool"
	"github.com/softverbs/softverbs/internal/mckey"
	"github.com/softverbs/softverbs/rvt"
)

type mckeyConfig struct {
	group, unmapped, src, ps string
	conns                    int
	noLoop                   bool
	cfg                      mckey.Config
	link                     cmLinkConfig
}

func mckeyCommand() command {
	return command{"mckey", "rdma_cm multicast like rdma-core's mckey: join an IPv4 group, the sender (-s) sends -C datagrams " +
		"to it, the receiver waits for them; with no link flag, a receiver and a sender in this process on an in-memory pair",
		func(fs *pflag.FlagSet) func(io.Writer) error {
			c := mckeyConfig{cfg: mckey.DefaultConfig(), link: defaultCMLinkConfig(), conns: 1}
			fs.StringVarP(&c.group, "mcast", "m", "", "multicast `address` (IPv4)")
			fs.StringVarP(&c.unmapped, "unmapped", "M", "", "unmapped multicast `address` (AF_IB: not supported)")
			fs.BoolVarP(&c.cfg.Sender, "sender", "s", false, "be the sender")
			fs.StringVarP(&c.src, "bind", "b", "", "bind `address`")
			fs.IntVarP(&c.conns, "connections", "c", 1, "`connections` (1 only)")
			fs.IntVarP(&c.cfg.Count, "count", "C", c.cfg.Count, "message `count`")
			fs.IntVarP(&c.cfg.Size, "size", "S", c.cfg.Size, "message `size` (at most the active MTU)")
			fs.StringVarP(&c.ps, "ps", "p", "", "port `space`: 0x111 for UDP (the default); 0x2, IPoIB, fails on these RoCE devices as over Linux (EINVAL)")
			fs.BoolVarP(&c.cfg.SendOnly, "send-only", "o", false, "join as a send-only full member")
			fs.BoolVarP(&c.noLoop, "no-loopback", "l", false, "join without multicast loopback (not supported)")
			cmLinkFlags(fs, &c.link)
			return func(w io.Writer) error { return runMckey(w, c) }
		}, ""}
}

func runMckey(w io.Writer, c mckeyConfig) error {
	cfg := c.cfg
	var err error
	switch {
	case c.unmapped != "":
		return usagef("-M: softverbs has no AF_IB addresses; use -m with an IPv4 group")
	case c.noLoop:
		return usagef("-l: joining without multicast loopback is not supported")
	case c.conns != 1:
		return usagef("-c %d: one connection only", c.conns)
	case cfg.Count < 0 || cfg.Size < 0:
		return usagef("-C and -S: want 0 or more")
	}
	if c.ps != "" {
		v, err := strconv.ParseUint(c.ps, 0, 16)
		if err != nil || (cm.PortSpace(v) != cm.PSUDP && cm.PortSpace(v) != cm.PSIPoIB) {
			return usagef("-p %q: want %#x (UDP) or %#x (IPoIB)", c.ps, uint16(cm.PSUDP), uint16(cm.PSIPoIB))
		}
		cfg.PortSpace = cm.PortSpace(v)
	}
	if c.link.pair() && c.group == "" {
		c.group = "239.1.2.3"
	}
	if cfg.Group, err = parseHost("-m", c.group); err != nil {
		return err
	}
	if !cfg.Group.IsValid() {
		return usagef("-m: a multicast address is required")
	}
	if _, err := cm.MulticastMGID(cfg.Group); err != nil {
		return usagef("-m %s: %v", c.group, err)
	}
	if cfg.Src, err = parseHost("-b", c.src); err != nil {
		return err
	}
	side := func(ctx context.Context, dev *rvt.Device, out cmtool.Out) error {
		return mckey.Run(ctx, dev, cfg, out)
	}
	// The pair: the receiver on rvt1 (it posts its receives and attaches
	// before it lets the sender start; -o is the sender's), the sender on
	// rvt0; no pause.
	receiver := func(ctx context.Context, dev *rvt.Device, out cmtool.Out, joined func()) error {
		s := cfg
		s.Sender, s.SendOnly, s.Src, s.Pause, s.OnJoined = false, false, pairServer(), 0, joined
		return mckey.Run(ctx, dev, s, out)
	}
	sender := func(ctx context.Context, dev *rvt.Device, out cmtool.Out) error {
		s := cfg
		s.Sender, s.Src, s.Pause = true, netip.Addr{}, 0
		return mckey.Run(ctx, dev, s, out)
	}
	return runCMTool(w, c.link, netip.Addr{}, side, receiver, sender)
}
