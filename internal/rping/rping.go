// Package rping is rdma-core's rping (librdmacm/examples/rping.c) on a
// softverbs device: an RC connection made by the connection manager (port
// space TCP, port 7174; responder resources and initiator depth 1, retry
// and RNR retry 7, no private data), then the ping loop of RDMA READs and
// WRITEs, with the tool's buffer layout and data pattern and the lines it
// prints, so that either side can be the rdma-core tool.
//
// Each ping, as rping does it: the client fills its start buffer with
// "rdma-ping-N: " and rotating ASCII ('A'..'z', starting one later each
// ping), NUL-terminated, and SENDs {be64 addr, be32 rkey, be32 size} of
// it; the server RDMA READs it, prints "server ping data: ..." (-v) and
// SENDs a go-ahead (its own, unused, 16-byte info); the client SENDs the
// same info for its sink buffer; the server RDMA WRITEs the string back
// (strlen + 1 bytes) and SENDs a go-ahead; the client compares (-V) and
// prints "ping data: ..." (-v). After -C pings the client disconnects;
// the server learns it as the DISCONNECTED event and ends too.
//
// The waits follow the tool's one semaphore: a receive, a READ or WRITE
// completion, or a CM event each wake the waiting step once, which then
// checks the state it expected ("wait for RDMA_READ_ADV state 10" is what
// the server prints when the client's disconnection ends the loop).
package rping

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/cmtool"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Defaults and limits of rping.
const (
	DefaultPort = 7174
	DefaultSize = 64
	// MinSize is RPING_MIN_BUFSIZE: sizeof "2147483647" plus sizeof
	// "rdma-ping-%d: ", with their NULs.
	MinSize = 11 + 15
	// BufSize is RPING_BUFSIZE; sizes go up to BufSize-1.
	BufSize = 64 * 1024
	sqDepth = 16
	infoLen = 16 // struct rping_rdma_info
	msgFmt  = "rdma-ping-%d: "
)

// State is rping's test_state, with its numbers (the tool prints them).
type State int

// The states.
const (
	Idle State = iota + 1
	ConnectRequest
	AddrResolved
	RouteResolved
	Connected
	RDMAReadAdv
	RDMAReadComplete
	RDMAWriteAdv
	RDMAWriteComplete
	Disconnected
	Error
)

// Config is one side's run: rping's flags.
type Config struct {
	Server     bool       // -s (false: -c)
	Addr       netip.Addr // -a: the server's address (server: to bind; zero: any)
	Src        netip.Addr // -I: the client's source address (zero: from the route)
	Port       uint16     // -p
	Count      int        // -C: pings (0: forever)
	Size       int        // -S: ping data size
	Verbose    bool       // -v: print the ping data
	Validate   bool       // -V: compare what came back
	Debug      bool       // -d: debug lines
	Persistent bool       // -P: a server that keeps accepting
	SelfQP     bool       // -q: accepted; the QP is always the tool's own here
	TOS        int        // -t: type of service (-1: not set)

	// OnListen, if set, learns the listener's address once it listens.
	OnListen func(netip.AddrPort)
}

// DefaultConfig is rping's defaults: client, port 7174, 64 bytes, forever.
func DefaultConfig() Config {
	return Config{Port: DefaultPort, Size: DefaultSize, TOS: -1}
}

// Check validates the flags as rping does; the error keeps its words.
func (c Config) Check() error {
	if c.Size < MinSize || c.Size > BufSize-1 {
		return fmt.Errorf("Invalid size %d (valid range is %d to %d)", c.Size, MinSize, BufSize)
	}
	if c.Count < 0 {
		return fmt.Errorf("Invalid count %d", c.Count)
	}
	if !c.Server && !c.Addr.IsValid() {
		return errors.New("a client needs the server's address (-a)")
	}
	if c.TOS > 255 {
		return fmt.Errorf("invalid type of service %d", c.TOS)
	}
	return nil
}

// Data returns the bytes of ping n at size as the client makes them:
// "rdma-ping-n: " (cut to size-1), rotating ASCII from 'A'+n%58, and a NUL
// in the last byte.
func Data(n, size int) []byte {
	b := make([]byte, size)
	fill(b, n, 'A'+n%58)
	return b
}

func fill(b []byte, ping, start int) {
	s := fmt.Sprintf(msgFmt, ping)
	cc := copy(b[:max(len(b)-1, 0)], s) // snprintf stops at size-1
	if cc < len(b) {
		b[cc] = 0
	}
	c := start
	for i := len(s); i < len(b); i++ {
		b[i] = byte(c)
		if c++; c > 122 {
			c = 65
		}
	}
	b[len(b)-1] = 0
}

// cstr is b up to its first NUL, as printf("%s") reads it.
func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// Run runs one side of rping on dev until the pings are done (client) or
// the client disconnected (server; -P: until ctx ends).
func Run(ctx context.Context, dev *rvt.Device, cfg Config, out cmtool.Out) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	if cfg.Server {
		return runServer(ctx, dev, cfg, out)
	}
	return runClient(ctx, dev, cfg, out)
}

func (cfg *Config) debugf(out cmtool.Out, format string, a ...any) {
	if cfg.Debug {
		out.Printf(format, a...)
	}
}

// cb is rping_cb: one connection's objects and state.
type cb struct {
	cfg    *Config
	out    cmtool.Out
	server bool
	pd     *rvt.PD
	cq     *cmtool.CQ
	qp     *rvt.QP

	recvBuf, sendBuf []byte
	recvMR, sendMR   *rvt.MR
	rdmaBuf          []byte
	rdmaMR           *rvt.MR
	startBuf         []byte
	startMR          *rvt.MR

	remoteRkey uint32
	remoteAddr uint64
	remoteLen  uint32

	state State
	conn  *cm.Conn
	stop  <-chan struct{} // the connection's Done until its DISCONNECTED was seen
	wcs   []rvt.WC        // polled, not yet handled
	wcBuf [16]rvt.WC
}

func newCB(dev *rvt.Device, cfg *Config, out cmtool.Out) (_ *cb, err error) {
	c := &cb{cfg: cfg, out: out, server: cfg.Server, state: Idle}
	defer func() {
		if err != nil {
			c.free()
		}
	}()
	if c.pd, err = dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("ibv_alloc_pd failed: %w", err)
	}
	if c.cq, err = cmtool.NewCQ(dev, sqDepth*2); err != nil {
		return nil, fmt.Errorf("ibv_create_cq failed: %w", err)
	}
	if c.qp, err = c.pd.CreateQP(rvt.QPInitAttr{Type: qp.RC, SendCQ: c.cq.CQ, RecvCQ: c.cq.CQ,
		Cap: rvt.QPCap{MaxSendWR: sqDepth, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, fmt.Errorf("rdma_create_qp: %w", err)
	}
	if err = cm.PrepareConn(c.qp); err != nil { // rdma_create_qp: INIT
		return nil, fmt.Errorf("rdma_create_qp: %w", err)
	}
	// AllocBuf: memory the device reaches without copying (on a device
	// served by rvtd, shared memory; otherwise a slice).
	if c.recvBuf, err = dev.AllocBuf(infoLen); err != nil {
		return nil, fmt.Errorf("recv_buf: %w", err)
	}
	if c.sendBuf, err = dev.AllocBuf(infoLen); err != nil {
		return nil, fmt.Errorf("send_buf: %w", err)
	}
	if c.recvMR, err = c.pd.Reg(c.recvBuf, keys.LocalWrite); err != nil {
		return nil, fmt.Errorf("recv_buf reg_mr failed: %w", err)
	}
	if c.sendMR, err = c.pd.Reg(c.sendBuf, 0); err != nil {
		return nil, fmt.Errorf("send_buf reg_mr failed: %w", err)
	}
	rw := keys.LocalWrite | keys.RemoteRead | keys.RemoteWrite
	if c.rdmaBuf, err = dev.AllocBuf(cfg.Size); err != nil {
		return nil, fmt.Errorf("rdma_buf: %w", err)
	}
	if c.rdmaMR, err = c.pd.Reg(c.rdmaBuf, rw); err != nil {
		return nil, fmt.Errorf("rdma_buf reg_mr failed: %w", err)
	}
	if !c.server {
		if c.startBuf, err = dev.AllocBuf(cfg.Size); err != nil {
			return nil, fmt.Errorf("start_buf: %w", err)
		}
		if c.startMR, err = c.pd.Reg(c.startBuf, rw); err != nil {
			return nil, fmt.Errorf("start_buf reg_mr failed: %w", err)
		}
	}
	cfg.debugf(out, "allocated & registered buffers...\n")
	if err := c.postRecv(); err != nil {
		return nil, fmt.Errorf("ibv_post_recv failed: %w", err)
	}
	return c, nil
}

func (c *cb) free() {
	if c.qp != nil {
		_ = c.qp.Destroy()
	}
	if c.cq != nil {
		_ = c.cq.Destroy()
	}
}

func (c *cb) postRecv() error {
	return c.qp.PostRecv(rvt.RecvWR{SGL: []rvt.SGE{{Addr: c.recvMR.IOVA, Length: infoLen, Lkey: c.recvMR.Lkey}}})
}

// postInfo SENDs the 16-byte info (send_buf).
func (c *cb) postInfo() error {
	return c.qp.PostSend(rvt.SendWR{Opcode: qp.OpSend, Flags: qp.Signaled,
		SGL: []rvt.SGE{{Addr: c.sendMR.IOVA, Length: infoLen, Lkey: c.sendMR.Lkey}}})
}

// formatSend puts buf's {addr, rkey, size} into send_buf.
func (c *cb) formatSend(mr *rvt.MR) {
	binary.BigEndian.PutUint64(c.sendBuf[0:], mr.IOVA)
	binary.BigEndian.PutUint32(c.sendBuf[8:], mr.Rkey)
	binary.BigEndian.PutUint32(c.sendBuf[12:], uint32(c.cfg.Size))
	c.cfg.debugf(c.out, "RDMA addr %x rkey %x len %d\n", mr.IOVA, mr.Rkey, c.cfg.Size)
}

// postRDMA posts the READ or WRITE of n bytes between rdma_buf and the
// peer's advertised buffer.
func (c *cb) postRDMA(op qp.Opcode, n uint32) error {
	return c.qp.PostSend(rvt.SendWR{Opcode: op, Flags: qp.Signaled, RemoteAddr: c.remoteAddr, Rkey: c.remoteRkey,
		SGL: []rvt.SGE{{Addr: c.rdmaMR.IOVA, Length: n, Lkey: c.rdmaMR.Lkey}}})
}

// wait is sem_wait: it handles completions and the connection's end
// until one of them wakes the waiter (a receive, a READ or WRITE
// completion, an error, DISCONNECTED), and returns the state then. A
// context that ends is ERROR and its error.
func (c *cb) wait(ctx context.Context) (State, error) {
	for {
		for len(c.wcs) > 0 {
			wc := c.wcs[0]
			c.wcs = c.wcs[1:]
			if c.handle(&wc) {
				return c.state, nil
			}
		}
		n, err := c.cq.Poll(ctx, c.wcBuf[:], c.stop)
		if n > 0 {
			c.wcs = c.wcBuf[:n]
			continue
		}
		if ctx.Err() != nil {
			c.state = Error
			return c.state, ctx.Err()
		}
		if errors.Is(err, context.Canceled) && c.stop != nil { // the connection's Done
			c.stop = nil
			who := "client"
			if c.server {
				who = "server"
			}
			c.out.Errorf("%s DISCONNECT EVENT...\n", who)
			c.state = Disconnected
			return c.state, nil
		}
		if err != nil {
			c.state = Error
			return c.state, err
		}
	}
}

// handle is rping_cq_event_handler for one completion: true if it wakes
// the waiter.
func (c *cb) handle(wc *rvt.WC) bool {
	if wc.Status != cq.Success {
		if wc.Status == cq.WRFlushErr {
			return false
		}
		c.out.Errorf("cq completion failed status %d\n", wc.Status)
		c.state = Error
		return true
	}
	switch wc.Opcode {
	case cq.Send:
		c.cfg.debugf(c.out, "send completion\n")
		return false
	case cq.RDMAWrite:
		c.cfg.debugf(c.out, "rdma write completion\n")
		c.state = RDMAWriteComplete
	case cq.RDMARead:
		c.cfg.debugf(c.out, "rdma read completion\n")
		c.state = RDMAReadComplete
	case cq.Recv:
		c.cfg.debugf(c.out, "recv completion\n")
		if wc.ByteLen != infoLen {
			c.out.Errorf("Received bogus data, size %d\n", wc.ByteLen)
			c.out.Errorf("recv wc error: %d\n", -1)
			c.state = Error
			return true
		}
		if c.server {
			c.remoteRkey = binary.BigEndian.Uint32(c.recvBuf[8:])
			c.remoteAddr = binary.BigEndian.Uint64(c.recvBuf[0:])
			c.remoteLen = binary.BigEndian.Uint32(c.recvBuf[12:])
			c.cfg.debugf(c.out, "Received rkey %x addr %x len %d from peer\n", c.remoteRkey, c.remoteAddr, c.remoteLen)
			if c.state <= Connected || c.state == RDMAWriteComplete {
				c.state = RDMAReadAdv
			} else {
				c.state = RDMAWriteAdv
			}
		} else if c.state == RDMAReadAdv {
			c.state = RDMAWriteAdv
		} else {
			c.state = RDMAWriteComplete
		}
		if err := c.postRecv(); err != nil {
			c.out.Errorf("post recv error: %d\n", -1)
			c.state = Error
		}
	default:
		c.cfg.debugf(c.out, "unknown!!!!! completion\n")
		c.state = Error
	}
	return true
}

// errStep is a step of the loop that failed; its text is printed.
var errStep = errors.New("rping: step failed")

// expect waits and checks the state, printing rping's line if it is not want.
func (c *cb) expect(ctx context.Context, want State, name string) error {
	s, err := c.wait(ctx)
	if s != want {
		c.out.Errorf("wait for %s state %d\n", name, s)
		if err != nil {
			return err
		}
		return errStep
	}
	return nil
}

// testServer is rping_test_server: nil when the loop ended with the
// client's disconnection.
func (c *cb) testServer(ctx context.Context) error {
	var err error
	for {
		if err = c.expect(ctx, RDMAReadAdv, "RDMA_READ_ADV"); err != nil {
			break
		}
		c.cfg.debugf(c.out, "server received sink adv\n")
		if err = c.postRDMA(qp.OpRDMARead, c.remoteLen); err != nil {
			c.out.Errorf("post send error %d\n", -1)
			break
		}
		c.cfg.debugf(c.out, "server posted rdma read req \n")
		if err = c.expect(ctx, RDMAReadComplete, "RDMA_READ_COMPLETE"); err != nil {
			break
		}
		c.cfg.debugf(c.out, "server received read complete\n")
		if c.cfg.Verbose {
			c.out.Printf("server ping data: %s\n", cstr(c.rdmaBuf))
		}
		if err = c.postInfo(); err != nil {
			c.out.Errorf("post send error %d\n", -1)
			break
		}
		c.cfg.debugf(c.out, "server posted go ahead\n")
		if err = c.expect(ctx, RDMAWriteAdv, "RDMA_WRITE_ADV"); err != nil {
			break
		}
		c.cfg.debugf(c.out, "server received sink adv\n")
		n := uint32(len(cstr(c.rdmaBuf)) + 1)
		n = min(n, uint32(len(c.rdmaBuf)))
		c.cfg.debugf(c.out, "rdma write from lkey %x laddr %x len %d\n", c.rdmaMR.Lkey, c.rdmaMR.IOVA, n)
		if err = c.postRDMA(qp.OpRDMAWrite, n); err != nil {
			c.out.Errorf("post send error %d\n", -1)
			break
		}
		if err = c.expect(ctx, RDMAWriteComplete, "RDMA_WRITE_COMPLETE"); err != nil {
			break
		}
		c.cfg.debugf(c.out, "server rdma write complete \n")
		if err = c.postInfo(); err != nil {
			c.out.Errorf("post send error %d\n", -1)
			break
		}
		c.cfg.debugf(c.out, "server posted go ahead\n")
	}
	if c.state == Disconnected {
		return nil
	}
	return err
}

// testClient is rping_test_client.
func (c *cb) testClient(ctx context.Context) error {
	start := 65
	var err error
	for ping := 0; c.cfg.Count == 0 || ping < c.cfg.Count; ping++ {
		c.state = RDMAReadAdv
		fill(c.startBuf, ping, start)
		if start++; start > 122 {
			start = 65
		}
		c.formatSend(c.startMR)
		if err = c.postInfo(); err != nil {
			c.out.Errorf("post send error %d\n", -1)
			break
		}
		if err = c.expect(ctx, RDMAWriteAdv, "RDMA_WRITE_ADV"); err != nil {
			break
		}
		c.formatSend(c.rdmaMR)
		if err = c.postInfo(); err != nil {
			c.out.Errorf("post send error %d\n", -1)
			break
		}
		if err = c.expect(ctx, RDMAWriteComplete, "RDMA_WRITE_COMPLETE"); err != nil {
			break
		}
		if c.cfg.Validate && !bytes.Equal(c.startBuf, c.rdmaBuf) {
			c.out.Errorf("data mismatch!\n")
			err = errors.New("data mismatch")
			break
		}
		if c.cfg.Verbose {
			c.out.Printf("ping data: %s\n", cstr(c.rdmaBuf))
		}
	}
	if c.state == Disconnected {
		return nil
	}
	return err
}

func connParam() *cm.ConnParam {
	return &cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
}

// cmaError prints "cma event X, error N" for a connection error that
// librdmacm reports as an event.
func cmaError(out cmtool.Out, err error) {
	if t, st, ok := cmtool.EventOf(err); ok {
		out.Errorf("cma event RDMA_CM_EVENT_%s, error %d\n", t, st)
	}
}

func runClient(ctx context.Context, dev *rvt.Device, cfg Config, out cmtool.Out) error {
	cfg.debugf(out, "client\n")
	c, err := newCB(dev, &cfg, out)
	if err != nil {
		out.Errorf("setup_qp failed: %v\n", err)
		return err
	}
	defer c.free()
	raddr := netip.AddrPortFrom(cfg.Addr, cfg.Port)
	o := &cm.DialOptions{Src: cfg.Src, Param: connParam()}
	if cfg.TOS >= 0 {
		o.TOS = uint8(cfg.TOS)
	}
	conn, err := cm.Dial(ctx, dev, raddr, c.qp, o)
	if err != nil {
		cmaError(out, err)
		out.Errorf("connect error %d\n", -1)
		return err
	}
	c.conn, c.stop, c.state = conn, conn.Done(), Connected
	cfg.debugf(out, "rdma_connect successful\n")
	terr := c.testClient(ctx)
	if terr != nil {
		out.Errorf("rping client failed: %d\n", -1)
	}
	// rping_disconnect; the DREP (or the peer's DREQ) is the client's
	// DISCONNECTED event.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := conn.Disconnect(dctx); err == nil && c.stop != nil {
		out.Errorf("client DISCONNECT EVENT...\n")
	}
	return terr
}

func runServer(ctx context.Context, dev *rvt.Device, cfg Config, out cmtool.Out) error {
	cfg.debugf(out, "server\n")
	bind := cfg.Addr
	if !bind.IsValid() {
		bind = netip.IPv4Unspecified()
	}
	l, err := cm.Listen(dev, netip.AddrPortFrom(bind, cfg.Port), nil)
	if err != nil {
		out.Errorf("rdma_bind_addr: %v\n", err)
		return err
	}
	defer l.Close()
	cfg.debugf(out, "rdma_bind_addr successful\n")
	cfg.debugf(out, "rdma_listen\n")
	if cfg.OnListen != nil {
		cfg.OnListen(l.Addr())
	}
	if !cfg.Persistent {
		req, err := l.Accept(ctx)
		if err != nil {
			out.Errorf("wait for CONNECT_REQUEST state %d\n", Error)
			return err
		}
		return serve(ctx, dev, &cfg, out, req)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		req, err := l.Accept(ctx)
		if err != nil {
			out.Errorf("wait for CONNECT_REQUEST state %d\n", Error)
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = serve(ctx, dev, &cfg, out, req)
		}()
	}
}

// serve runs one accepted connection of the server.
func serve(ctx context.Context, dev *rvt.Device, cfg *Config, out cmtool.Out, req *cm.Request) error {
	cfg.debugf(out, "child cma %s\n", strconv.Quote(req.RemoteAddr.String()))
	c, err := newCB(dev, cfg, out)
	if err != nil {
		_ = req.Reject(nil)
		out.Errorf("setup_qp failed: %v\n", err)
		return err
	}
	defer c.free()
	cfg.debugf(out, "accepting client connection request\n")
	conn, err := req.Accept(ctx, c.qp, nil)
	if err != nil {
		cmaError(out, err)
		out.Errorf("connect error %d\n", -1)
		return err
	}
	c.conn, c.stop, c.state = conn, conn.Done(), Connected
	terr := c.testServer(ctx)
	if terr != nil {
		out.Errorf("rping server failed: %d\n", -1)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = conn.Disconnect(dctx)
	return terr
}
