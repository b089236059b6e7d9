package main

// rvt pingpong: rdma-core's ibv_rc_pingpong, ibv_uc_pingpong and
// ibv_ud_pingpong on a softverbs device. The out-of-band exchange is in
// pingpong_oob.go, the links in pingpong_link.go and pingpong_netdev.go.
// Error texts that the tools print keep the tools' wording (and
// capitals), so scripts that grep for them work with either.
//
// The sequence is the tools' own, so that either side can be the rdma-core
// tool: both sides post rx_depth receives and move their QP to INIT; the
// client sends its address; the server connects (RTR/RTS, or for UD creates
// the AH) and replies with its address; the client connects and posts the
// first SEND. From then on each side posts its next SEND once its previous
// SEND has completed and a message has arrived, until both counts reach the
// iteration count. Every message is size bytes out of one buffer that also
// receives (UD: the receive has the 40-byte GRH in front).

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Work request IDs and pending bits, as in the tools.
const (
	ppRecvWRID = 1
	ppSendWRID = 2
)

// udQKey is ibv_ud_pingpong's Q_Key.
const udQKey = 0x11111111

// grhLen is the room a UD receive keeps for the GRH.
const grhLen = 40

// pingpongConfig are the flags of `rvt pingpong`.
type pingpongConfig struct {
	Mode     string // "rc", "uc" or "ud"
	Server   string // the server to connect to; empty: be the server
	Port     int    // TCP port of the out-of-band exchange
	Device   string // device name (-d)
	IBPort   int    // port number (-i); softverbs devices have port 1
	Size     int    // message size; 0: the mode's default (4096, UD 2048)
	MTU      int    // path MTU in bytes (RC, UC)
	RxDepth  int
	Iters    int
	SL       int
	Events   bool // wait for CQ events instead of busy polling
	GIDIndex int  // -1: no GID (LID addressing, which RoCE cannot do)
	Check    bool // -c: the client marks each page, the server checks

	// Flags of rc_pingpong that a software device has no use for: ODP,
	// implicit ODP and device memory are refused as rxe refuses them,
	// timestamps too; prefetch (with ODP only) and the new post-send API
	// are accepted.
	ODP, IODP, Prefetch, TS, DM, NewSend bool

	TOS int // traffic class of the address vector

	// Link selection: exactly one of TAP, XDP and UDP (none: UDP on IP).
	TAP     string // TAP device to create and own
	XDP     string // interface to attach AF_XDP to
	UDP     string // local UDP address (IP or IP:port) of the UDP link
	IP      string // our address (ADDR/PFX) on a TAP or XDP link
	MAC     string // our MAC on a TAP or XDP link (default: random, locally administered)
	LinkMTU int    // Ethernet MTU of the link (0: a TAP gets enough for -m; others keep the interface's)
	PCAP    string // write our frames to this pcap file

	// Fault profile on the link's send side.
	Loss, Dup, Reorder float64
	Delay              time.Duration
	Seed               int64

	// Timeout bounds the whole run once the device is up: waiting for a
	// client (or connecting to the server), the exchange and the
	// ping-pong (0: wait forever, as the tools do).
	Timeout time.Duration

	// modes are the mode flags given (--rc, --uc, --ud), in order.
	modes []string

	// For tests: link replaces the link flags, onListen learns the
	// server's TCP address, pageSize replaces the system page size.
	link     func() (*ppLink, error)
	onListen func(addr net.Addr)
	pageSize int
}

func defaultPingpongConfig() pingpongConfig {
	return pingpongConfig{
		Mode: "rc", Port: 18515, Device: "rvt0", IBPort: 1, MTU: 1024, RxDepth: 500,
		Iters: 1000, GIDIndex: -1, Seed: 1,
	}
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
	if cfg.Device != ppDevice {
		return 0, usagef("-d %s: IB device %s not found (rvt pingpong opens one device, %s)", cfg.Device, cfg.Device, ppDevice)
	}
	if cfg.Size == 0 {
		cfg.Size = 4096
		if cfg.Mode == "ud" {
			cfg.Size = 2048
		}
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

// tapMTU is the MTU of a TAP we create: --link-mtu, or enough for the
// path MTU (RoCEv2 over IPv6 adds 80 bytes), and at least 1500.
func (cfg *pingpongConfig) tapMTU() int {
	if cfg.LinkMTU > 0 {
		return cfg.LinkMTU
	}
	return max(1500, cfg.MTU+128)
}

// ppCtx is pingpong_context: the device objects and the loop's state.
type ppCtx struct {
	cfg    *pingpongConfig
	dev    *rvt.Device
	pd     *rvt.PD
	mr     *rvt.MR
	buf    []byte
	cq     *rvt.CQ
	qp     *rvt.QP
	ah     *rvt.AH
	events *cqWaiter // CQ events (-e); nil when polling
	link   *ppLink

	// The SGLs of every receive and every SEND, made once: the QP copies
	// the SGL it is given.
	recvSGL, sendSGL []rvt.SGE

	size    int
	routs   int
	pending int
	remQPN  uint32

	// deadline is when cfg.Timeout runs out (zero: never).
	deadline time.Time
}

// runPingpong runs one side of the ping-pong and prints what the rdma-core
// tool prints.
func runPingpong(w io.Writer, cfg pingpongConfig) error {
	mtu, err := cfg.check()
	if err != nil {
		return err
	}
	open := cfg.link
	if open == nil {
		open = func() (*ppLink, error) { return openPingpongLink(&cfg) }
	}
	l, err := open()
	if err != nil {
		return fmt.Errorf("link: %w", err)
	}
	defer l.close()

	ctx, err := newPPCtx(&cfg, l)
	if err != nil {
		return err
	}
	defer ctx.close()
	return ctx.run(w, mtu)
}

func newPPCtx(cfg *pingpongConfig, l *ppLink) (_ *ppCtx, err error) {
	ctx := &ppCtx{cfg: cfg, link: l, size: cfg.Size}
	defer func() {
		if err != nil {
			ctx.close()
		}
	}()
	// Not openNode: the two steps fail with rdma-core's words for each.
	// ctx.close closes the device if the PD fails.
	ctx.dev, err = rvt.Open(rvt.Options{
		Name: cfg.Device, Link: l.link, MAC: l.mac, Addrs: l.addrs, Resolve: l.resolve,
	})
	if err != nil {
		return nil, fmt.Errorf("couldn't get context for %s: %w", cfg.Device, err)
	}
	if ctx.pd, err = ctx.dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("couldn't allocate PD: %w", err)
	}
	pa, err := ctx.dev.QueryPort(uint8(cfg.IBPort))
	if err != nil {
		return nil, fmt.Errorf("unable to query port info for port %d: %w", cfg.IBPort, err)
	}
	bufLen, sendOff := cfg.Size, uint64(0)
	if cfg.Mode == "ud" {
		if m := pa.ActiveMTU.Bytes(); cfg.Size > m {
			return nil, fmt.Errorf("Requested size larger than port MTU (%d)", m)
		}
		bufLen += grhLen
		sendOff = grhLen // the message goes after the GRH room
	}
	ctx.buf = make([]byte, bufLen)
	for i := range ctx.buf {
		ctx.buf[i] = 0x7b
	}
	ctx.mr, err = ctx.pd.Reg(ctx.buf, keys.LocalWrite)
	if err != nil {
		return nil, fmt.Errorf("couldn't register MR: %w", err)
	}
	ctx.recvSGL = sge(ctx.mr, 0, len(ctx.buf))
	ctx.sendSGL = sge(ctx.mr, sendOff, ctx.size)
	var onComp func(*rvt.CQ)
	if cfg.Events {
		ctx.events = newCQWaiter()
		onComp = ctx.events.notify
	}
	ctx.cq, err = ctx.dev.CreateCQ(cfg.RxDepth+1, onComp)
	if err != nil {
		return nil, fmt.Errorf("couldn't create CQ: %w", err)
	}
	typ := map[string]rvt.QPType{"rc": qp.RC, "uc": qp.UC, "ud": qp.UD}[cfg.Mode]
	ctx.qp, err = ctx.pd.CreateQP(rvt.QPInitAttr{Type: typ, SendCQ: ctx.cq, RecvCQ: ctx.cq,
		Cap: rvt.QPCap{MaxSendWR: 1, MaxRecvWR: uint32(cfg.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, fmt.Errorf("couldn't create QP: %w", err)
	}
	init := rvt.QPAttr{State: qp.Init, PkeyIndex: 0, Port: uint8(cfg.IBPort), QKey: udQKey}
	if err := ctx.qp.Modify(&init, qp.RequiredAttrs(typ, qp.Reset, qp.Init)); err != nil {
		return nil, fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	return ctx, nil
}

func (ctx *ppCtx) close() {
	if ctx.qp != nil {
		_ = ctx.qp.Destroy()
	}
	if ctx.ah != nil {
		_ = ctx.dev.DestroyAH(ctx.ah)
	}
	if ctx.dev != nil {
		_ = ctx.dev.Close()
	}
}

// postRecv posts up to n receives of the whole buffer and returns how many
// it posted.
func (ctx *ppCtx) postRecv(n int) int {
	for i := 0; i < n; i++ {
		if err := ctx.qp.PostRecv(rvt.RecvWR{WRID: ppRecvWRID, SGL: ctx.recvSGL}); err != nil {
			return i
		}
	}
	return n
}

// postSend posts one signalled SEND of size bytes (UD: after the GRH room).
func (ctx *ppCtx) postSend() error {
	wr := rvt.SendWR{WRID: ppSendWRID, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: ctx.sendSGL}
	if ctx.ah != nil {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = ctx.ah, ctx.remQPN, udQKey
	}
	return ctx.qp.PostSend(wr)
}

// av is the address vector to rem: RoCE addresses are always global, so
// the remote GID must carry an interface ID (the tools fall back to LID
// addressing otherwise, which a RoCE device refuses).
func (ctx *ppCtx) av(rem ppDest) (rvt.AddressVector, error) {
	var zero [8]byte
	if [8]byte(rem.GID[8:]) == zero {
		return rvt.AddressVector{}, fmt.Errorf("remote GID %s: RoCE needs GIDs on both sides (-g)", gidString(rem.GID))
	}
	if ctx.cfg.GIDIndex < 0 {
		return rvt.AddressVector{}, errors.New("no local GID index: RoCE needs GIDs on both sides (-g)")
	}
	return rvt.AddressVector{DGID: rem.GID, SGIDIndex: uint8(ctx.cfg.GIDIndex), HopLimit: 1,
		TrafficClass: uint8(ctx.cfg.TOS), SL: uint8(ctx.cfg.SL), DLID: rem.LID, Port: uint8(ctx.cfg.IBPort)}, nil
}

// connect is pp_connect_ctx: RTR and RTS with the remote QPN and PSN, the
// tools' attributes, and for UD the address handle.
func (ctx *ppCtx) connect(myPSN uint32, mtu qp.MTU, rem ppDest) error {
	av, err := ctx.av(rem)
	if err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	typ := ctx.qp.Type()
	// The tools' attributes; the mask takes the ones typ's transition needs.
	rtr := rvt.QPAttr{State: qp.RTR, PathMTU: mtu, DestQPN: rem.QPN, RQPSN: rem.PSN, AV: av,
		MaxDestRdAtomic: 1, MinRNRTimer: 12}
	if err := ctx.qp.Modify(&rtr, qp.RequiredAttrs(typ, qp.Init, qp.RTR)); err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	rts := rvt.QPAttr{State: qp.RTS, SQPSN: myPSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}
	if err := ctx.qp.Modify(&rts, qp.RequiredAttrs(typ, qp.RTR, qp.RTS)); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	if typ == qp.UD {
		ah, err := ctx.pd.CreateAH(av)
		if err != nil {
			return fmt.Errorf("Failed to create AH: %w", err)
		}
		ctx.ah, ctx.remQPN = ah, rem.QPN
	}
	// Learn the peer's MAC now, so the first packet does not wait for a
	// neighbour lookup (and for UD is not lost to one).
	ctx.link.warm(rem.GID)
	return nil
}

func (ctx *ppCtx) run(w io.Writer, mtu qp.MTU) error {
	cfg := ctx.cfg
	if ctx.routs = ctx.postRecv(cfg.RxDepth); ctx.routs < cfg.RxDepth {
		return fmt.Errorf("Couldn't post receive (%d)", ctx.routs)
	}
	if cfg.Events {
		if err := ctx.cq.Arm(false); err != nil {
			return fmt.Errorf("Couldn't request CQ notification: %w", err)
		}
	}
	pa, err := ctx.dev.QueryPort(uint8(cfg.IBPort))
	if err != nil {
		return fmt.Errorf("Couldn't get port info: %w", err)
	}
	my := ppDest{LID: pa.LID, QPN: ctx.qp.Num(), PSN: rand.Uint32() & 0xffffff}
	if cfg.GIDIndex >= 0 {
		if my.GID, err = ctx.dev.QueryGID(uint8(cfg.IBPort), cfg.GIDIndex); err != nil {
			return fmt.Errorf("can't read sgid of index %d: %w", cfg.GIDIndex, err)
		}
	}
	sep := ", "
	if cfg.Mode == "ud" {
		sep = ": " // ibv_ud_pingpong's local line says "PSN 0x...: GID"
	}
	fmt.Fprint(w, addressLine("local address: ", my, sep))

	if cfg.Timeout > 0 {
		ctx.deadline = time.Now().Add(cfg.Timeout)
	}
	var rem ppDest
	if cfg.Server != "" {
		rem, err = ctx.clientExch(my)
	} else {
		rem, err = ctx.serverExch(my, mtu)
	}
	if err != nil {
		return err
	}
	fmt.Fprint(w, addressLine("remote address:", rem, ", "))
	if cfg.Server != "" {
		if err := ctx.connect(my.PSN, mtu, rem); err != nil {
			return err
		}
	}

	ctx.pending = ppRecvWRID
	if cfg.Server != "" {
		if cfg.Check {
			ctx.markPages()
		}
		if err := ctx.postSend(); err != nil {
			return fmt.Errorf("Couldn't post send: %w", err)
		}
		ctx.pending |= ppSendWRID
	}
	start := time.Now()
	if err := ctx.loop(); err != nil {
		return err
	}
	// The tools keep microseconds in a float.
	usec := float32(time.Since(start).Microseconds())
	bytes := int64(cfg.Size) * int64(cfg.Iters) * 2
	fmt.Fprintf(w, "%d bytes in %.2f seconds = %.2f Mbit/sec\n",
		bytes, float64(usec)/1e6, float64(bytes)*8/float64(usec))
	fmt.Fprintf(w, "%d iters in %.2f seconds = %.2f usec/iter\n",
		cfg.Iters, float64(usec)/1e6, float64(usec/float32(cfg.Iters)))
	if cfg.Server == "" && cfg.Check {
		for _, p := range ctx.badPages() {
			fmt.Fprintf(w, "invalid data in page %d\n", p)
		}
	}
	return nil
}

func (ctx *ppCtx) clientExch(my ppDest) (ppDest, error) {
	addr := net.JoinHostPort(ctx.cfg.Server, strconv.Itoa(ctx.cfg.Port))
	d := net.Dialer{Timeout: 30 * time.Second, Deadline: ctx.deadline}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return ppDest{}, fmt.Errorf("Couldn't connect to %s: %w", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(ctx.deadline)
	return clientExchange(c, my)
}

func (ctx *ppCtx) serverExch(my ppDest, mtu qp.MTU) (ppDest, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(ctx.cfg.Port)))
	if err != nil {
		return ppDest{}, fmt.Errorf("Couldn't listen to port %d: %w", ctx.cfg.Port, err)
	}
	if ctx.cfg.onListen != nil {
		ctx.cfg.onListen(ln.Addr())
	}
	_ = ln.(*net.TCPListener).SetDeadline(ctx.deadline)
	c, err := ln.Accept()
	ln.Close()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return ppDest{}, fmt.Errorf("timed out after %v waiting for a client on %v", ctx.cfg.Timeout, ln.Addr())
	}
	if err != nil {
		return ppDest{}, fmt.Errorf("accept() failed: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(ctx.deadline)
	return serverExchange(c, my, func(rem ppDest) error { return ctx.connect(my.PSN, mtu, rem) })
}

// pageSize is the page the -c marks are spaced by.
func (ctx *ppCtx) pageSize() int {
	if ctx.cfg.pageSize > 0 {
		return ctx.cfg.pageSize
	}
	return os.Getpagesize()
}

// payload is the part of the buffer a message occupies.
func (ctx *ppCtx) payload() []byte {
	if ctx.cfg.Mode == "ud" {
		return ctx.buf[grhLen : grhLen+ctx.size]
	}
	return ctx.buf[:ctx.size]
}

// markPages is the client side of -c: the first byte of every page of the
// message is set to the page number modulo sizeof(char), that is to 0 (the
// rest keeps the 0x7b fill); rdma-core's server checks exactly that.
func (ctx *ppCtx) markPages() {
	p := ctx.payload()
	for i := 0; i < len(p); i += ctx.pageSize() {
		p[i] = 0
	}
}

// badPages is the server side of -c: the pages whose first byte is not what
// markPages writes. The buffer starts as 0x7b, so a message that did not
// arrive, or arrived short or misplaced, shows up here.
func (ctx *ppCtx) badPages() []int {
	var bad []int
	p := ctx.payload()
	for i := 0; i < len(p); i += ctx.pageSize() {
		if p[i] != 0 {
			bad = append(bad, i/ctx.pageSize())
		}
	}
	return bad
}

// loop runs the ping-pong until iters messages went each way.
func (ctx *ppCtx) loop() error {
	cfg := ctx.cfg
	deadline := ctx.deadline
	wc := make([]rvt.WC, 2)
	scnt, rcnt := 0, 0
	for idle := 0; rcnt < cfg.Iters || scnt < cfg.Iters; {
		ne := ctx.cq.Poll(wc)
		if ne == 0 {
			if !deadline.IsZero() && time.Now().After(deadline) {
				return fmt.Errorf("timed out after %v: sent %d, received %d of %d", cfg.Timeout, scnt, rcnt, cfg.Iters)
			}
			if !cfg.Events {
				idle++
				backoff(idle)
				continue
			}
			// Re-arm, and sleep only if nothing slipped in before the arm
			// (ibv_req_notify_cq, then ibv_get_cq_event).
			queued, err := ctx.cq.ArmAndCheck(false)
			if err != nil {
				return fmt.Errorf("Couldn't request CQ notification: %w", err)
			}
			if !queued {
				if err := ctx.events.wait(deadline, nil); err != nil {
					return fmt.Errorf("Failed to get cq_event: %w (sent %d, received %d of %d)", err, scnt, rcnt, cfg.Iters)
				}
			}
			continue
		}
		idle = 0
		for _, c := range wc[:ne] {
			if c.Status != cq.Success {
				return fmt.Errorf("Failed status %s (%d) for wr_id %d", c.Status, c.Status, c.WRID)
			}
			switch c.WRID {
			case ppSendWRID:
				scnt++
			case ppRecvWRID:
				if ctx.routs--; ctx.routs <= 1 {
					ctx.routs += ctx.postRecv(cfg.RxDepth - ctx.routs)
					if ctx.routs < cfg.RxDepth {
						return fmt.Errorf("Couldn't post receive (%d)", ctx.routs)
					}
				}
				rcnt++
			default:
				return fmt.Errorf("Completion for unknown wr_id %d", c.WRID)
			}
			ctx.pending &^= int(c.WRID)
			if scnt < cfg.Iters && ctx.pending == 0 {
				if err := ctx.postSend(); err != nil {
					return fmt.Errorf("Couldn't post send: %w", err)
				}
				ctx.pending = ppRecvWRID | ppSendWRID
			}
		}
	}
	return nil
}
