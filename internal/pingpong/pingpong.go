// Package pingpong is rdma-core's ibv_rc_pingpong, ibv_uc_pingpong and
// ibv_ud_pingpong on a softverbs device: the out-of-band TCP exchange of
// the tools' "LID:QPN:PSN:GID" messages, byte for byte (Dest, ParseDest,
// ClientExchange, ServerExchange), the run (Run: device objects, the
// exchange, the ping-pong loop) and its result, with formatters for the
// exact lines the tools print (LocalLine, RemoteLine, Result.Lines), so
// that a script cannot tell `rvt pingpong` from the rdma-core tool.
// Error texts keep the tools' wording (and capitals) too.
//
// The sequence is the tools' own, so that either side can be the rdma-core
// tool: both sides post rx_depth receives and move their QP to INIT; the
// client sends its address; the server connects (RTR/RTS, or for UD creates
// the AH) and replies with its address; the client connects and posts the
// first SEND. From then on each side posts its next SEND once its previous
// SEND has completed and a message has arrived, until both counts reach the
// iteration count. Every message is size bytes out of one buffer that also
// receives (UD: the receive has the 40-byte GRH in front).
package pingpong

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Work request IDs and pending bits, as in the tools.
const (
	recvWRID = 1
	sendWRID = 2
)

// udQKey is ibv_ud_pingpong's Q_Key.
const udQKey = 0x11111111

// grhLen is the room a UD receive keeps for the GRH.
const grhLen = 40

// DefaultPort is the tools' TCP port for the out-of-band exchange.
const DefaultPort = 18515

// Config is one side's run: the tools' settings.
type Config struct {
	Mode     string // "rc", "uc" or "ud"
	Server   string // the server to connect to; empty: be the server
	Port     int    // TCP port of the out-of-band exchange
	Device   string // device name (-d)
	IBPort   int    // port number (-i); softverbs devices have port 1
	Size     int    // message size; 0: the mode's default (DefaultSize)
	MTU      int    // path MTU in bytes (RC, UC)
	RxDepth  int
	Iters    int
	SL       int
	Events   bool // wait for CQ events instead of busy polling
	GIDIndex int  // -1: no GID (LID addressing, which RoCE cannot do)
	Check    bool // -c: the client marks each page, the server checks
	TOS      int  // traffic class of the address vector

	// Timeout bounds the whole run once the device is up: waiting for a
	// client (or connecting to the server), the exchange and the
	// ping-pong (0: wait forever, as the tools do).
	Timeout time.Duration

	// OnListen, if set, learns the server's TCP address once it listens.
	OnListen func(addr net.Addr)
	// PageSize spaces the -c marks (0: the system page size).
	PageSize int
}

// DefaultConfig is the tools' defaults: RC, port 18515, path MTU 1024,
// rx depth 500, 1000 iterations, no GID.
func DefaultConfig() Config {
	return Config{
		Mode: "rc", Port: DefaultPort, Device: "rvt0", IBPort: 1, MTU: 1024, RxDepth: 500,
		Iters: 1000, GIDIndex: -1,
	}
}

// DefaultSize is the tools' message size for mode: 4096, UD 2048.
func DefaultSize(mode string) int {
	if mode == "ud" {
		return 2048
	}
	return 4096
}

// Result is what a run measured: the figures of the tools' last lines.
type Result struct {
	Bytes int64   // bytes moved both ways: size * iters * 2
	Iters int     // iterations
	Usec  float32 // microseconds the ping-pong took (the tools keep a float)
	// BadPages are the pages the server's -c check found wrong, in order
	// (nil on the client, or without -c).
	BadPages []int
}

// runCtx is pingpong_context: the device objects and the loop's state.
type runCtx struct {
	cfg    *Config
	dev    *rvt.Device
	pd     *rvt.PD
	mr     *rvt.MR
	buf    []byte
	cq     *rvt.CQ
	qp     *rvt.QP
	ah     *rvt.AH
	events *traffic.CQWaiter // CQ events (-e); nil when polling
	link   *devopen.Link

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

// Run runs one side of the ping-pong on a device opened on l. addr, if
// not nil, learns each side's address as soon as it is known: the local
// one (local true) before the exchange, as the tools print it before they
// wait for the peer, then the remote one. A Size of 0 is the mode's
// default.
func Run(cfg Config, l *devopen.Link, addr func(local bool, d Dest)) (Result, error) {
	if cfg.Size == 0 {
		cfg.Size = DefaultSize(cfg.Mode)
	}
	mtu := qp.MTUFromBytes(cfg.MTU)
	if mtu == 0 || mtu.Bytes() != cfg.MTU {
		return Result{}, fmt.Errorf("path MTU %d: want 256, 512, 1024, 2048 or 4096", cfg.MTU)
	}
	if _, ok := qpTypes[cfg.Mode]; !ok {
		return Result{}, fmt.Errorf("unknown mode %q", cfg.Mode)
	}
	if addr == nil {
		addr = func(bool, Dest) {}
	}
	ctx, err := newRunCtx(&cfg, l)
	if err != nil {
		return Result{}, err
	}
	defer ctx.close()
	return ctx.run(mtu, addr)
}

// qpTypes are the QP types of the modes.
var qpTypes = map[string]rvt.QPType{"rc": qp.RC, "uc": qp.UC, "ud": qp.UD}

func newRunCtx(cfg *Config, l *devopen.Link) (_ *runCtx, err error) {
	ctx := &runCtx{cfg: cfg, link: l, size: cfg.Size}
	defer func() {
		if err != nil {
			ctx.close()
		}
	}()
	// Not devopen.OpenNode: the two steps fail with rdma-core's words for
	// each. ctx.close closes the device if the PD fails.
	ctx.dev, err = l.OpenDevice(cfg.Device) // embedded, or rvtd's (--rvtd)
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
	// Memory the device reaches without copying (rvtd: shared memory).
	if ctx.buf, err = ctx.dev.AllocBuf(bufLen); err != nil {
		return nil, fmt.Errorf("couldn't allocate work buf: %w", err)
	}
	for i := range ctx.buf {
		ctx.buf[i] = 0x7b
	}
	ctx.mr, err = ctx.pd.Reg(ctx.buf, keys.LocalWrite)
	if err != nil {
		return nil, fmt.Errorf("couldn't register MR: %w", err)
	}
	ctx.recvSGL = traffic.SGE(ctx.mr, 0, len(ctx.buf))
	ctx.sendSGL = traffic.SGE(ctx.mr, sendOff, ctx.size)
	var onComp func(*rvt.CQ)
	if cfg.Events {
		ctx.events = traffic.NewCQWaiter()
		onComp = ctx.events.Notify
	}
	ctx.cq, err = ctx.dev.CreateCQ(cfg.RxDepth+1, onComp)
	if err != nil {
		return nil, fmt.Errorf("couldn't create CQ: %w", err)
	}
	typ := qpTypes[cfg.Mode]
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

func (ctx *runCtx) close() {
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
func (ctx *runCtx) postRecv(n int) int {
	for i := 0; i < n; i++ {
		if err := ctx.qp.PostRecv(rvt.RecvWR{WRID: recvWRID, SGL: ctx.recvSGL}); err != nil {
			return i
		}
	}
	return n
}

// postSend posts one signalled SEND of size bytes (UD: after the GRH room).
func (ctx *runCtx) postSend() error {
	wr := rvt.SendWR{WRID: sendWRID, Opcode: qp.OpSend, Flags: qp.Signaled, SGL: ctx.sendSGL}
	if ctx.ah != nil {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = ctx.ah, ctx.remQPN, udQKey
	}
	return ctx.qp.PostSend(wr)
}

// av is the address vector to rem: RoCE addresses are always global, so
// the remote GID must carry an interface ID (the tools fall back to LID
// addressing otherwise, which a RoCE device refuses).
func (ctx *runCtx) av(rem Dest) (rvt.AddressVector, error) {
	var zero [8]byte
	if [8]byte(rem.GID[8:]) == zero {
		return rvt.AddressVector{}, fmt.Errorf("remote GID %s: RoCE needs GIDs on both sides (-g)", GIDString(rem.GID))
	}
	if ctx.cfg.GIDIndex < 0 {
		return rvt.AddressVector{}, errors.New("no local GID index: RoCE needs GIDs on both sides (-g)")
	}
	return rvt.AddressVector{DGID: rem.GID, SGIDIndex: uint8(ctx.cfg.GIDIndex), HopLimit: 1,
		TrafficClass: uint8(ctx.cfg.TOS), SL: uint8(ctx.cfg.SL), DLID: rem.LID, Port: uint8(ctx.cfg.IBPort)}, nil
}

// connect is pp_connect_ctx: RTR and RTS with the remote QPN and PSN, the
// tools' attributes, and for UD the address handle.
func (ctx *runCtx) connect(myPSN uint32, mtu qp.MTU, rem Dest) error {
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
	ctx.link.Warm(rem.GID)
	return nil
}

func (ctx *runCtx) run(mtu qp.MTU, addr func(local bool, d Dest)) (Result, error) {
	cfg := ctx.cfg
	if ctx.routs = ctx.postRecv(cfg.RxDepth); ctx.routs < cfg.RxDepth {
		return Result{}, fmt.Errorf("Couldn't post receive (%d)", ctx.routs)
	}
	if cfg.Events {
		if err := ctx.cq.Arm(false); err != nil {
			return Result{}, fmt.Errorf("Couldn't request CQ notification: %w", err)
		}
	}
	pa, err := ctx.dev.QueryPort(uint8(cfg.IBPort))
	if err != nil {
		return Result{}, fmt.Errorf("Couldn't get port info: %w", err)
	}
	my := Dest{LID: pa.LID, QPN: ctx.qp.Num(), PSN: rand.Uint32() & 0xffffff}
	if cfg.GIDIndex >= 0 {
		if my.GID, err = ctx.dev.QueryGID(uint8(cfg.IBPort), cfg.GIDIndex); err != nil {
			return Result{}, fmt.Errorf("can't read sgid of index %d: %w", cfg.GIDIndex, err)
		}
	}
	addr(true, my)

	if cfg.Timeout > 0 {
		ctx.deadline = time.Now().Add(cfg.Timeout)
	}
	var rem Dest
	if cfg.Server != "" {
		rem, err = ctx.clientExch(my)
	} else {
		rem, err = ctx.serverExch(my, mtu)
	}
	if err != nil {
		return Result{}, err
	}
	addr(false, rem)
	if cfg.Server != "" {
		if err := ctx.connect(my.PSN, mtu, rem); err != nil {
			return Result{}, err
		}
	}

	ctx.pending = recvWRID
	if cfg.Server != "" {
		if cfg.Check {
			ctx.markPages()
		}
		if err := ctx.postSend(); err != nil {
			return Result{}, fmt.Errorf("Couldn't post send: %w", err)
		}
		ctx.pending |= sendWRID
	}
	start := time.Now()
	if err := ctx.loop(); err != nil {
		return Result{}, err
	}
	// The tools keep microseconds in a float.
	res := Result{
		Bytes: int64(cfg.Size) * int64(cfg.Iters) * 2,
		Iters: cfg.Iters,
		Usec:  float32(time.Since(start).Microseconds()),
	}
	if cfg.Server == "" && cfg.Check {
		res.BadPages = ctx.badPages()
	}
	return res, nil
}

func (ctx *runCtx) clientExch(my Dest) (Dest, error) {
	addr := net.JoinHostPort(ctx.cfg.Server, strconv.Itoa(ctx.cfg.Port))
	d := net.Dialer{Timeout: 30 * time.Second, Deadline: ctx.deadline}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return Dest{}, fmt.Errorf("Couldn't connect to %s: %w", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(ctx.deadline)
	return ClientExchange(c, my)
}

func (ctx *runCtx) serverExch(my Dest, mtu qp.MTU) (Dest, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(ctx.cfg.Port)))
	if err != nil {
		return Dest{}, fmt.Errorf("Couldn't listen to port %d: %w", ctx.cfg.Port, err)
	}
	if ctx.cfg.OnListen != nil {
		ctx.cfg.OnListen(ln.Addr())
	}
	_ = ln.(*net.TCPListener).SetDeadline(ctx.deadline)
	c, err := ln.Accept()
	ln.Close()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return Dest{}, fmt.Errorf("timed out after %v waiting for a client on %v", ctx.cfg.Timeout, ln.Addr())
	}
	if err != nil {
		return Dest{}, fmt.Errorf("accept() failed: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(ctx.deadline)
	return ServerExchange(c, my, func(rem Dest) error { return ctx.connect(my.PSN, mtu, rem) })
}

// pageSize is the page the -c marks are spaced by.
func (ctx *runCtx) pageSize() int {
	if ctx.cfg.PageSize > 0 {
		return ctx.cfg.PageSize
	}
	return os.Getpagesize()
}

// payload is the part of the buffer a message occupies.
func (ctx *runCtx) payload() []byte {
	if ctx.cfg.Mode == "ud" {
		return ctx.buf[grhLen : grhLen+ctx.size]
	}
	return ctx.buf[:ctx.size]
}

// markPages is the client side of -c: the first byte of every page of the
// message is set to the page number modulo sizeof(char), that is to 0 (the
// rest keeps the 0x7b fill); rdma-core's server checks exactly that.
func (ctx *runCtx) markPages() {
	p := ctx.payload()
	for i := 0; i < len(p); i += ctx.pageSize() {
		p[i] = 0
	}
}

// badPages is the server side of -c: the pages whose first byte is not what
// markPages writes. The buffer starts as 0x7b, so a message that did not
// arrive, or arrived short or misplaced, shows up here.
func (ctx *runCtx) badPages() []int {
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
func (ctx *runCtx) loop() error {
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
				traffic.Backoff(idle)
				continue
			}
			// Re-arm, and sleep only if nothing slipped in before the arm
			// (ibv_req_notify_cq, then ibv_get_cq_event).
			queued, err := ctx.cq.ArmAndCheck(false)
			if err != nil {
				return fmt.Errorf("Couldn't request CQ notification: %w", err)
			}
			if !queued {
				if err := ctx.events.Wait(deadline, nil); err != nil {
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
			case sendWRID:
				scnt++
			case recvWRID:
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
				ctx.pending = recvWRID | sendWRID
			}
		}
	}
	return nil
}
