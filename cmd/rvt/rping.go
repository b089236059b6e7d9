package main

// rvt rping: the flags of rdma-core's rping (getopt "a:I:Pp:C:S:t:scvVdq")
// and the link's; the ping loop and its lines are internal/rping's.

import (
	"context"
	"io"
	"net/netip"

	"github.com/spf13/pflag"

	"github.com/softverbs/softverbs/internal/cmtool"
	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/internal/rping"
	"github.com/softverbs/softverbs/rvt"
)

type rpingConfig struct {
	server, client bool
	addr, src, tos string
	port           int
	verbose, valid int
	debug          bool
	cfg            rping.Config
	link           cmLinkConfig
}

func rpingCommand() command {
	return command{"rping", "RDMA READ/WRITE ping over an rdma_cm connection like rdma-core's rping (port 7174); " +
		"with no link flag, both sides in this process on an in-memory pair (root for --tap and --xdp)",
		func(fs *pflag.FlagSet) func(io.Writer) error {
			c := rpingConfig{cfg: rping.DefaultConfig(), link: defaultCMLinkConfig()}
			c.port = int(c.cfg.Port)
			fs.BoolVarP(&c.server, "server", "s", false, "server side")
			fs.BoolVarP(&c.client, "client", "c", false, "client side")
			fs.StringVarP(&c.addr, "addr", "a", "", "`address` (server: to bind, default any; client: the server's)")
			fs.StringVarP(&c.src, "source", "I", "", "source `address` to bind to for client")
			fs.IntVarP(&c.port, "port", "p", c.port, "`port`")
			fs.IntVarP(&c.cfg.Count, "count", "C", 0, "ping `count` times (0: forever)")
			fs.IntVarP(&c.cfg.Size, "size", "S", c.cfg.Size, "ping data `size`")
			fs.CountVarP(&c.verbose, "verbose", "v", "display ping data to stdout")
			fs.CountVarP(&c.valid, "validate", "V", "validate ping data")
			fs.BoolVarP(&c.debug, "debug", "d", false, "debug printfs")
			fs.BoolVarP(&c.cfg.Persistent, "persistent", "P", false, "persistent server mode allowing multiple connections")
			fs.BoolVarP(&c.cfg.SelfQP, "self-qp", "q", false, "use self-created, self-modified QP (here the QP is always the tool's own)")
			fs.StringVarP(&c.tos, "tos", "t", "", "type of service")
			cmLinkFlags(fs, &c.link)
			return func(w io.Writer) error { return runRping(w, c) }
		}, ""}
}

func runRping(w io.Writer, c rpingConfig) error {
	cfg := c.cfg
	cfg.Verbose, cfg.Validate, cfg.Debug = c.verbose > 0, c.valid > 0, c.debug
	if c.port < 0 || c.port > 65535 {
		return usagef("-p %d: not a port", c.port)
	}
	cfg.Port = uint16(c.port)
	var err error
	if c.tos != "" {
		if cfg.TOS, err = parseUint8("-t", c.tos); err != nil {
			return err
		}
	}
	if cfg.Addr, err = parseHost("-a", c.addr); err != nil {
		return err
	}
	if cfg.Src, err = parseHost("-I", c.src); err != nil {
		return err
	}
	pair := c.link.pair()
	if !pair && c.server == c.client {
		return usagef("give -s (server) or -c (client)")
	}
	if pair && cfg.Persistent {
		// The pair's server would wait for clients that never come.
		return usagef("-P: a persistent server needs a link (--udp, --tap, --xdp or --rvtd) for clients in other processes")
	}
	cfg.Server = c.server
	check := cfg
	check.Server = true // the address is checked for a client below
	if err := check.Check(); err != nil {
		return usageError{err}
	}
	if !pair && !cfg.Server && !cfg.Addr.IsValid() {
		return usagef("a client needs the server's address (-a)")
	}
	side := func(ctx context.Context, dev *rvt.Device, out cmtool.Out) error {
		return rping.Run(ctx, dev, cfg, out)
	}
	// The in-memory pair: the server (-v, -d as given) on rvt1, the
	// client (-C, -S, -v, -V as given) connecting to it.
	server := func(ctx context.Context, dev *rvt.Device, out cmtool.Out, listening func()) error {
		s := cfg
		s.Server, s.Addr, s.Src = true, netip.Addr{}, netip.Addr{}
		s.OnListen = func(netip.AddrPort) { listening() }
		return rping.Run(ctx, dev, s, out)
	}
	client := func(ctx context.Context, dev *rvt.Device, out cmtool.Out) error {
		s := cfg
		s.Server, s.Persistent, s.Src = false, false, netip.Addr{}
		s.Addr = pairServer()
		return rping.Run(ctx, dev, s, out)
	}
	warm := netip.Addr{}
	if !cfg.Server {
		warm = cfg.Addr
	}
	return runCMTool(w, c.link, warm, side, server, client)
}

// pairServer is the in-memory pair's server address (rvt1).
func pairServer() netip.Addr {
	_, addrs := devopen.NodeAddrs(1)
	return addrs[len(addrs)-1].Unmap()
}
