package main

// rvt udaddy: the flags of rdma-core's udaddy (getopt "s:b:c:C:S:t:p:P:f:")
// and the link's; the run and its lines are internal/udaddy's.

import (
	"context"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/internal/cmtool"
	"github.com/softverbs/softverbs/internal/udaddy"
	"github.com/softverbs/softverbs/rvt"
)

type udaddyConfig struct {
	dst, src, format, psNum, ps, tos string
	cfg                              udaddy.Config
	link                             cmLinkConfig
}

func udaddyCommand() command {
	return command{"udaddy", "UD datagrams both ways after SIDR service resolution like rdma-core's udaddy (port 7174); " +
		"with no link flag, both sides in this process on an in-memory pair (root for --tap and --xdp)",
		func(fs *pflag.FlagSet) func(io.Writer) error {
			c := udaddyConfig{cfg: udaddy.DefaultConfig(), link: defaultCMLinkConfig()}
			fs.StringVarP(&c.dst, "server", "s", "", "server `address` (given: be the client)")
			fs.StringVarP(&c.src, "bind", "b", "", "bind `address`")
			fs.IntVarP(&c.cfg.Connections, "connections", "c", c.cfg.Connections, "`connections`")
			fs.IntVarP(&c.cfg.Count, "count", "C", c.cfg.Count, "message `count`")
			fs.IntVarP(&c.cfg.Size, "size", "S", c.cfg.Size, "message `size` (at most the active MTU)")
			fs.StringVarP(&c.tos, "tos", "t", "", "type of `service`")
			fs.StringVarP(&c.psNum, "ps", "p", "", "port `space` as a number: 0x111 for UDP (the default)")
			fs.StringVarP(&c.ps, "port-space", "P", "udp", "port `space`: udp (ipoib is not supported)")
			fs.StringVarP(&c.format, "format", "f", "", "address `format`: name, ip or ipv6 (gid is not supported)")
			cmLinkFlags(fs, &c.link)
			return func(w io.Writer) error { return runUdaddy(w, c) }
		}, ""}
}

func runUdaddy(w io.Writer, c udaddyConfig) error {
	cfg := c.cfg
	var err error
	if c.tos != "" {
		if cfg.TOS, err = parseUint8("-t", c.tos); err != nil {
			return err
		}
	}
	if !strings.HasPrefix(strings.ToLower(c.ps), "udp") {
		return usagef("-P %q: softverbs has port space udp only", c.ps)
	}
	if c.psNum != "" {
		v, err := strconv.ParseUint(c.psNum, 0, 16)
		if err != nil || cm.PortSpace(v) != cm.PSUDP {
			return usagef("-p %q: softverbs has port space %#x (UDP) only", c.psNum, uint16(cm.PSUDP))
		}
	}
	if strings.HasPrefix(strings.ToLower(c.format), "gid") {
		return usagef("-f gid: softverbs resolves IP addresses only")
	}
	if cfg.Dst, err = parseHost("-s", c.dst); err != nil {
		return err
	}
	if cfg.Src, err = parseHost("-b", c.src); err != nil {
		return err
	}
	switch {
	case cfg.Connections < 1:
		return usagef("-c %d: want at least one connection", cfg.Connections)
	case cfg.Count < 0 || cfg.Size < 0:
		return usagef("-C and -S: want 0 or more")
	}
	side := func(ctx context.Context, dev *rvt.Device, out cmtool.Out) error {
		return udaddy.Run(ctx, dev, cfg, out)
	}
	server := func(ctx context.Context, dev *rvt.Device, out cmtool.Out, listening func()) error {
		s := cfg
		s.Dst, s.Src = netip.Addr{}, netip.Addr{}
		s.OnListen = func(netip.AddrPort) { listening() }
		return udaddy.Run(ctx, dev, s, out)
	}
	client := func(ctx context.Context, dev *rvt.Device, out cmtool.Out) error {
		s := cfg
		s.Dst, s.Src = pairServer(), netip.Addr{}
		return udaddy.Run(ctx, dev, s, out)
	}
	return runCMTool(w, c.link, cfg.Dst, side, server, client)
}
