package main

// rvt pingpong: the flags of rdma-core's ibv_rc_pingpong,
// ibv_uc_pingpong and ibv_ud_pingpong and the link's, checked the way the
// tools check them, and the tools' lines. The exchange and the run are
// internal/pingpong's; the link is internal/devopen's.

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/internal/pingpong"
	"github.com/softverbs/softverbs/qp"
)

// pingpongConfig are the flags of `rvt pingpong`: the run's settings,
// the link's, and the flags of rc_pingpong that a software device has no
// use for: ODP, implicit ODP and device memory are refused as rxe refuses
// them, timestamps too; prefetch (with ODP only) and the new post-send
// API are accepted.
type pingpongConfig struct {
	pingpong.Config
	linkConfig // exactly one of TAP, XDP and UDP (none: UDP on IP)

	ODP, IODP, Prefetch, TS, DM, NewSend bool

	// modes are the mode flags given (--rc, --uc, --ud), in order.
	modes []string
}

// linkConfig is devopen.Config under a name of its own, so that its
// fields and pingpong.Config's are both promoted in pingpongConfig.
type linkConfig = devopen.Config

func defaultPingpongConfig() pingpongConfig {
	return pingpongConfig{Config: pingpong.DefaultConfig(), linkConfig: linkConfig{Seed: 1}}
}

// modeFlag is a boolean flag (--rc, --uc, --ud) that selects a mode. It
// records the modes given, so that check refuses two different ones, and
// its default is false: no mode flag is --rc.
type modeFlag struct {
	cfg *pingpongConfig
	val string
}

func (m modeFlag) String() string {
	if m.cfg == nil {
		return "false"
	}
	return strconv.FormatBool(slices.Contains(m.cfg.modes, m.val))
}

func (m modeFlag) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	if v && !slices.Contains(m.cfg.modes, m.val) {
		m.cfg.Mode = m.val
		m.cfg.modes = append(m.cfg.modes, m.val)
	}
	return nil
}

func (m modeFlag) IsBoolFlag() bool { return true }

func (m modeFlag) Type() string { return "bool" }

// pingpongFlags registers the flags of `rvt pingpong`: the tools' short
// and long names (getopt_long's "p:d:i:s:m:r:n:l:eg:oOPtcjN"), then the
// long-only flags of the link and the fault profile.
func pingpongFlags(fs *pflag.FlagSet, cfg *pingpongConfig) {
	for _, m := range []struct{ mode, usage string }{
		{"rc", "RC mode, like ibv_rc_pingpong (the default)"},
		{"uc", "UC mode, like ibv_uc_pingpong"},
		{"ud", "UD mode, like ibv_ud_pingpong"},
	} {
		fs.VarPF(modeFlag{cfg, m.mode}, m.mode, "", m.usage).NoOptDefVal = "true"
	}
	fs.IntVarP(&cfg.Port, "port", "p", cfg.Port, "listen on/connect to TCP `port`")
	fs.StringVarP(&cfg.Device, "ib-dev", "d", cfg.Device, "name of the softverbs `device`")
	fs.IntVarP(&cfg.IBPort, "ib-port", "i", cfg.IBPort, "`port` of the device (softverbs devices have port 1)")
	fs.IntVarP(&cfg.Size, "size", "s", cfg.Size, "`size` of message to exchange (default 4096; UD 2048)")
	fs.IntVarP(&cfg.MTU, "mtu", "m", cfg.MTU, "path MTU in `bytes` (RC and UC; UD uses the port's active MTU)")
	fs.IntVarP(&cfg.RxDepth, "rx-depth", "r", cfg.RxDepth, "`number` of receives to post at a time")
	fs.IntVarP(&cfg.Iters, "iters", "n", cfg.Iters, "`number` of exchanges")
	fs.IntVarP(&cfg.SL, "sl", "l", cfg.SL, "service level `value`")
	fs.BoolVarP(&cfg.Events, "events", "e", cfg.Events, "sleep on CQ events (default poll)")
	fs.IntVarP(&cfg.GIDIndex, "gid-idx", "g", cfg.GIDIndex, "local port GID `index` (RoCE needs one: 1 is the IPv4 GID)")
	fs.BoolVarP(&cfg.ODP, "odp", "o", cfg.ODP, "use on demand paging (not supported)")
	fs.BoolVarP(&cfg.IODP, "iodp", "O", cfg.IODP, "use implicit on demand paging (not supported)")
	fs.BoolVarP(&cfg.Prefetch, "prefetch", "P", cfg.Prefetch, "prefetch an ODP MR (needs -o)")
	fs.BoolVarP(&cfg.TS, "ts", "t", cfg.TS, "get CQE with timestamp (not supported)")
	fs.BoolVarP(&cfg.Check, "chk", "c", cfg.Check, "validate received buffer")
	fs.BoolVarP(&cfg.DM, "dm", "j", cfg.DM, "use device memory (not supported)")
	fs.BoolVarP(&cfg.NewSend, "new_send", "N", cfg.NewSend, "use new post send WR API (same path here)")
	fs.IntVar(&cfg.TOS, "tos", cfg.TOS, "traffic class (IP TOS) of our packets")

	rvtdFlag(fs, &cfg.RVTD)
	fs.StringVar(&cfg.TAP, "tap", cfg.TAP, "create TAP device `name` and be a host on it (needs --ip)")
	fs.StringVar(&cfg.XDP, "xdp", cfg.XDP, "attach AF_XDP to interface `iface` (needs --ip)")
	fs.StringVar(&cfg.UDP, "udp", cfg.UDP, "UDP socket link on `addr` (IP or IP:port; port 4791 by default)")
	fs.StringVar(&cfg.IP, "ip", cfg.IP, "our `addr/prefix` on a TAP or XDP link")
	fs.StringVar(&cfg.MAC, "mac", cfg.MAC, "our `MAC` on a TAP or XDP link (default random)")
	fs.IntVar(&cfg.LinkMTU, "link-mtu", cfg.LinkMTU, "Ethernet `MTU` of the link (default: a TAP gets enough for -m and at least 1500, other links keep the interface's)")
	fs.StringVar(&cfg.PCAP, "pcap", cfg.PCAP, "write the frames we send and receive to pcap `file`")
	fs.Float64Var(&cfg.Loss, "loss", cfg.Loss, "`probability` that a frame we send is lost")
	fs.Float64Var(&cfg.Dup, "dup", cfg.Dup, "`probability` that a frame we send is duplicated")
	fs.Float64Var(&cfg.Reorder, "reorder", cfg.Reorder, "`probability` that a frame we send is reordered")
	fs.DurationVar(&cfg.Delay, "delay", cfg.Delay, "`delay` added to every frame we send")
	fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the fault profile")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up when waiting for the peer, the exchange and the ping-pong take longer than `duration` (0: never)")
}

// ppDevice is the one device rvt pingpong opens: -d must name it.
const ppDevice = "rvt0"

// check validates the flags the way the tools do, and fills in defaults.
// A flag out of range, or flags that exclude each other, are a usageError;
// what the tools refuse for their device's sake (ODP, timestamps, device
// memory) keeps the tools' words.
func (cfg *pingpongConfig) check() (qp.MTU, error) {
	switch cfg.Mode {
	case "rc", "uc", "ud":
	default:
		return 0, usagef("unknown mode %q", cfg.Mode)
	}
	if len(cfg.modes) > 1 {
		return 0, usagef("--%s and --%s: give one of --rc, --uc and --ud", cfg.modes[0], cfg.modes[1])
	}
	if cfg.Device != ppDevice && cfg.RVTD == "" {
		return 0, usagef("-d %s: IB device %s not found (rvt pingpong opens one device, %s)", cfg.Device, cfg.Device, ppDevice)
	}
	if cfg.Size == 0 {
		cfg.Size = pingpong.DefaultSize(cfg.Mode)
	}
	mtu, ok := exactMTU(cfg.MTU)
	if !ok {
		return 0, usagef("-m %d: the path MTU is 256, 512, 1024, 2048 or 4096", cfg.MTU)
	}
	switch {
	case cfg.Port < 0 || cfg.Port > 65535:
		return 0, usagef("-p %d: not a TCP port", cfg.Port)
	case cfg.IBPort != 1:
		return 0, usagef("-i %d: a softverbs device has port 1 only", cfg.IBPort)
	case cfg.Size < 1 || cfg.Size > 1<<30:
		return 0, usagef("-s %d: size out of range", cfg.Size)
	case cfg.RxDepth < 1 || cfg.RxDepth > 1<<14:
		return 0, usagef("-r %d: rx depth out of range [1, %d]", cfg.RxDepth, 1<<14)
	case cfg.Iters < 1:
		return 0, usagef("-n %d: want at least one iteration", cfg.Iters)
	case cfg.SL < 0 || cfg.SL > 15:
		return 0, usagef("-l %d: service level out of range", cfg.SL)
	case cfg.GIDIndex > 255:
		return 0, usagef("-g %d: GID index out of range", cfg.GIDIndex)
	case cfg.TOS < 0 || cfg.TOS > 255:
		return 0, usagef("--tos %d: out of range", cfg.TOS)
	case cfg.Timeout < 0:
		return 0, usagef("--timeout %v: want 0 (no timeout) or more", cfg.Timeout)
	case cfg.ODP && cfg.DM:
		return 0, usagef("DM memory region can't be on demand")
	case cfg.Prefetch && !cfg.ODP && !cfg.IODP:
		return 0, usagef("prefetch is valid only with on-demand memory region")
	case cfg.ODP || cfg.IODP:
		return 0, errors.New("The device isn't ODP capable or does not support RC send and receive with ODP")
	case cfg.TS:
		return 0, errors.New("The device isn't completion timestamp capable")
	case cfg.DM:
		return 0, errors.New("device memory is not supported by softverbs devices")
	}
	return mtu, nil
}

// runPingpong runs one side of the ping-pong and prints what the rdma-core
// tool prints.
func runPingpong(w io.Writer, cfg pingpongConfig) error {
	if _, err := cfg.check(); err != nil {
		return err
	}
	lc := cfg.linkConfig
	lc.PathMTU = cfg.MTU // a TAP we create carries it
	l, err := devopen.Open(lc)
	if err != nil {
		return fmt.Errorf("link: %w", err)
	}
	defer l.Close()
	res, err := pingpong.Run(cfg.Config, l, pingpong.AddressPrinter(w, cfg.Mode))
	if err != nil {
		return err
	}
	fmt.Fprint(w, res.Lines())
	return nil
}
