package main

// rvt ucmatose: the flags of rdma-core's ucmatose (getopt
// "s:b:f:P:c:C:S:t:p:ma:") and the link's; the run and its lines are
// internal/ucmatose's.

import (
	"context"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/internal/cmtool"
	"github.com/softverbs/softverbs/internal/ucmatose"
	"github.com/softverbs/softverbs/rvt"
)

type ucmatoseConfig struct {
	dst, src, format, ps, tos, port string
	ack                             int
	cfg                             ucmatose.Config
	link                            cmLinkConfig
}

func ucmatoseCommand() command {
	return command{"ucmatose", "RC connections and SENDs both ways over rdma_cm like rdma-core's ucmatose (port 7471); " +
		"with no link flag, both sides in this process on an in-memory pair (root for --tap and --xdp)",
		func(fs *pflag.FlagSet) func(io.Writer) error {
			c := ucmatoseConfig{cfg: ucmatose.DefaultConfig(), link: defaultCMLinkConfig(), ack: -1}
			c.port = strconv.Itoa(int(c.cfg.Port))
			fs.StringVarP(&c.dst, "server", "s", "", "server `address` (given: be the client)")
			fs.StringVarP(&c.src, "bind", "b", "", "bind `address`")
			fs.StringVarP(&c.format, "format", "f", "", "address `format`: name, ip or ipv6 (gid is not supported)")
			fs.StringVarP(&c.ps, "port-space", "P", "tcp", "port `space`: tcp or ib")
			fs.IntVarP(&c.cfg.Connections, "connections", "c", c.cfg.Connections, "`connections`")
			fs.IntVarP(&c.cfg.Count, "count", "C", c.cfg.Count, "message `count`")
			fs.IntVarP(&c.cfg.Size, "size", "S", c.cfg.Size, "message `size`")
			fs.StringVarP(&c.tos, "tos", "t", "", "type of `service`")
			fs.StringVarP(&c.port, "port", "p", c.port, "port `number`")
			fs.BoolVarP(&c.cfg.Migrate, "migrate", "m", false, "migrate to a new event channel (one channel here: the line only)")
			fs.IntVarP(&c.ack, "ack-timeout", "a", c.ack, "local ACK `timeout` exponent of the client's QPs (4.096 us x 2^t)")
			cmLinkFlags(fs, &c.link)
			return func(w io.Writer) error { return runUcmatose(w, c) }
		}, ""}
}

func runUcmatose(w io.Writer, c ucmatoseConfig) error {
	cfg := c.cfg
	var err error
	if c.tos != "" {
		if cfg.TOS, err = parseUint8("-t", c.tos); err != nil {
			return err
		}
	}
	if c.ack >= 0 {
		if c.ack > 31 {
			return usagef("-a %d: want 0 to 31", c.ack)
		}
		cfg.AckTimeout = c.ack
	}
	port, err := strconv.ParseUint(c.port, 10, 16)
	if err != nil {
		return usagef("-p %q: not a port", c.port)
	}
	cfg.Port = uint16(port)
	switch ps := strings.ToLower(c.ps); {
	case strings.HasPrefix(ps, "ib"):
		cfg.PortSpace = cm.PSIB
	case strings.HasPrefix(ps, "tcp"):
		cfg.PortSpace = cm.PSTCP
	default:
		return usagef("-P %q: unknown port space (tcp or ib)", c.ps)
	}
	if f := strings.ToLower(c.format); strings.HasPrefix(f, "gid") {
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
		return ucmatose.Run(ctx, dev, cfg, out)
	}
	server := func(ctx context.Context, dev *rvt.Device, out cmtool.Out, listening func()) error {
		s := cfg
		s.Dst, s.Src = netip.Addr{}, netip.Addr{}
		s.OnListen = func(netip.AddrPort) { listening() }
		return ucmatose.Run(ctx, dev, s, out)
	}
	client := func(ctx context.Context, dev *rvt.Device, out cmtool.Out) error {
		s := cfg
		s.Dst, s.Src = pairServer(), netip.Addr{}
		return ucmatose.Run(ctx, dev, s, out)
	}
	return runCMTool(w, c.link, cfg.Dst, side, server, client)
}
