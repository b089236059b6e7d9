// Package ucmatose is rdma-core's ucmatose (librdmacm/examples/cmatose.c)
// on a softverbs device: -c RC connections made by the connection manager
// (port space TCP, port 7471; the client offers responder resources and
// initiator depth 1, retry 5, RNR retry 0, no private data; the server
// accepts with rdma_accept's defaults), then -C SENDs of -S bytes each way:
// the server sends first, the client receives them all and replies, and
// the server disconnects every connection. Each side prints the tool's
// lines and ends with "test complete" and "return status N".
package ucmatose

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/internal/cmtool"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Defaults of cmatose.
const (
	DefaultPort  = 7471
	DefaultCount = 10
	DefaultSize  = 100
)

// Config is one side's run: cmatose's flags.
type Config struct {
	Dst         netip.Addr   // -s: the server (set: be the client)
	Src         netip.Addr   // -b: the address to bind (server) or send from (client)
	PortSpace   cm.PortSpace // -P: tcp (default) or ib
	Connections int          // -c
	Count       int          // -C: messages each way per connection
	Size        int          // -S: message size
	TOS         int          // -t (-1: not set)
	Port        uint16       // -p
	Migrate     bool         // -m: print the migration line (one event channel here)
	AckTimeout  int          // -a: the QP's local ACK timeout exponent (-1: the CM's)

	// OnListen, if set, learns the listener's address once it listens.
	OnListen func(netip.AddrPort)
}

// DefaultConfig is cmatose's defaults: one connection, 10 messages of 100
// bytes, port 7471, port space TCP.
func DefaultConfig() Config {
	return Config{PortSpace: cm.PSTCP, Connections: 1, Count: DefaultCount, Size: DefaultSize, TOS: -1,
		Port: DefaultPort, AckTimeout: -1}
}

// node is cmatest_node: one connection's objects.
type node struct {
	pd         *rvt.PD
	sendCQ     *cmtool.CQ
	recvCQ     *cmtool.CQ
	qp         *rvt.QP
	mr         *rvt.MR
	conn       *cm.Conn
	connected  bool
	disconnect <-chan struct{}
}

func (t *test) newNode(dev *rvt.Device) (_ *node, err error) {
	n := &node{}
	defer func() {
		if err != nil {
			n.destroy()
		}
	}()
	if n.pd, err = dev.AllocPD(); err != nil {
		return nil, errors.New("cmatose: unable to allocate PD")
	}
	cqe := max(t.cfg.Count, 1)
	if n.sendCQ, err = cmtool.NewCQ(dev, cqe); err == nil {
		n.recvCQ, err = cmtool.NewCQ(dev, cqe)
	}
	if err != nil {
		return nil, errors.New("cmatose: unable to create CQ")
	}
	if n.qp, err = n.pd.CreateQP(rvt.QPInitAttr{Type: qp.RC, SendCQ: n.sendCQ.CQ, RecvCQ: n.recvCQ.CQ, SigAll: true,
		Cap: rvt.QPCap{MaxSendWR: uint32(cqe), MaxRecvWR: uint32(cqe), MaxSendSGE: 1, MaxRecvSGE: 1}}); err == nil {
		err = cm.PrepareConn(n.qp)
	}
	if err != nil {
		return nil, fmt.Errorf("cmatose: unable to create QP: %w", err)
	}
	if t.cfg.Count > 0 {
		buf, err := dev.AllocBuf(t.cfg.Size)
		if err != nil {
			return nil, fmt.Errorf("cmatose: buffer: %w", err)
		}
		if n.mr, err = n.pd.Reg(buf, keys.LocalWrite); err != nil {
			return nil, errors.New("failed to reg MR")
		}
		for range t.cfg.Count {
			if err = n.qp.PostRecv(rvt.RecvWR{SGL: n.sgl(t.cfg.Size)}); err != nil {
				return nil, fmt.Errorf("failed to post receives: %w", err)
			}
		}
	}
	return n, nil
}

func (n *node) sgl(size int) []rvt.SGE {
	return []rvt.SGE{{Addr: n.mr.IOVA, Length: uint32(size), Lkey: n.mr.Lkey}}
}

func (n *node) destroy() {
	if n.conn != nil {
		_ = n.conn.Close()
	}
	if n.qp != nil {
		_ = n.qp.Destroy()
	}
	for _, c := range []*cmtool.CQ{n.sendCQ, n.recvCQ} {
		if c != nil {
			_ = c.Destroy()
		}
	}
}

// test is struct cmatest.
type test struct {
	cfg   *Config
	out   cmtool.Out
	nodes []*node
}

// Run runs one side and prints its lines, "test complete" and "return
// status N" last; the error is nil exactly when N is 0.
func Run(ctx context.Context, dev *rvt.Device, cfg Config, out cmtool.Out) error {
	t := &test{cfg: &cfg, out: out}
	var status int
	var err error
	if cfg.Dst.IsValid() {
		status, err = t.runClient(ctx, dev)
	} else {
		status, err = t.runServer(ctx, dev)
	}
	out.Printf("test complete\n")
	for _, n := range t.nodes {
		if n != nil { // a connection whose resources could not be made
			n.destroy()
		}
	}
	out.Printf("return status %d\n", status)
	if err == nil && status != 0 {
		err = fmt.Errorf("return status %d", status)
	}
	return err
}

// eventStatus prints cmatose's line for a connection error and returns
// the status the tool returns.
func (t *test) eventStatus(err error) int {
	if typ, st, ok := cmtool.EventOf(err); ok {
		t.out.Printf("cmatose: event: RDMA_CM_EVENT_%s, error: %d\n", typ, st)
		return st
	}
	t.out.Printf("cmatose: %v\n", err)
	return -1
}

func (t *test) check() error {
	switch {
	case t.cfg.Connections < 1:
		return fmt.Errorf("invalid connection count %d", t.cfg.Connections)
	case t.cfg.Count < 0:
		return fmt.Errorf("invalid message count %d", t.cfg.Count)
	case t.cfg.Size < 0:
		return fmt.Errorf("invalid message size %d", t.cfg.Size)
	case t.cfg.PortSpace != cm.PSTCP && t.cfg.PortSpace != cm.PSIB:
		return fmt.Errorf("port space %v: ucmatose uses tcp or ib", t.cfg.PortSpace)
	}
	if t.cfg.Size == 0 {
		t.cfg.Count = 0
	}
	return nil
}

func (t *test) runServer(ctx context.Context, dev *rvt.Device) (int, error) {
	t.out.Printf("cmatose: starting server\n")
	if err := t.check(); err != nil {
		return -22, err
	}
	l, err := cmtool.Listen(dev, t.cfg.Src, t.cfg.Port, t.cfg.PortSpace, t.cfg.OnListen)
	if err != nil {
		t.out.Printf("cmatose: bind address failed: %v\n", err)
		return -98, err
	}
	defer l.Close()
	// connect_events: each request gets a node and is accepted, until
	// every connection is established or failed.
	for left := t.cfg.Connections; left > 0; left-- {
		req, err := l.Accept(ctx)
		if err != nil {
			return -1, err
		}
		n, err := t.newNode(dev)
		if err != nil {
			t.out.Printf("%v\n", err)
			t.out.Printf("cmatose: failing connection request\n")
			_ = req.Reject(nil)
			// connect_events stops at the handler's error, and the
			// server returns it (-1, rdma_create_qp's).
			return -1, nil
		}
		t.nodes = append(t.nodes, n)
		if n.conn, err = req.Accept(ctx, n.qp, nil); err != nil {
			if ctx.Err() != nil {
				return -1, ctx.Err()
			}
			return t.eventStatus(err), nil
		}
		n.connected, n.disconnect = true, n.conn.Done()
	}
	if t.cfg.Count > 0 {
		t.out.Printf("initiating data transfers\n")
		for _, n := range t.nodes {
			if err := t.postSends(n); err != nil {
				return -1, err
			}
		}
		t.out.Printf("completing sends\n")
		if err := t.pollCQs(ctx, true); err != nil {
			return -1, err
		}
		t.out.Printf("receiving data transfers\n")
		if err := t.pollCQs(ctx, false); err != nil {
			return -1, err
		}
		t.out.Printf("data transfers complete\n")
	}
	if t.cfg.Migrate {
		t.out.Printf("migrating to new event channel\n")
	}
	t.out.Printf("cmatose: disconnecting\n")
	for _, n := range t.nodes {
		if n.connected {
			n.connected = false
			_ = n.conn.Close()
		}
	}
	err = t.disconnectEvents(ctx)
	t.out.Printf("disconnected\n")
	if err != nil {
		return -1, err
	}
	return 0, nil
}

func (t *test) runClient(ctx context.Context, dev *rvt.Device) (int, error) {
	t.out.Printf("cmatose: starting client\n")
	if err := t.check(); err != nil {
		return -22, err
	}
	t.out.Printf("cmatose: connecting\n")
	t.nodes = make([]*node, t.cfg.Connections)
	errs := make([]error, t.cfg.Connections)
	var wg sync.WaitGroup
	for i := range t.nodes {
		n, err := t.newNode(dev)
		if err != nil {
			t.out.Printf("%v\n", err)
			return -1, err
		}
		t.nodes[i] = n
		wg.Go(func() {
			o := &cm.DialOptions{PortSpace: t.cfg.PortSpace, Src: t.cfg.Src,
				Param: &cm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5}}
			if t.cfg.TOS >= 0 {
				o.TOS = uint8(t.cfg.TOS)
			}
			if t.cfg.AckTimeout >= 0 {
				o.AckTimeout = uint8(t.cfg.AckTimeout)
			}
			n.conn, errs[i] = cm.Dial(ctx, dev, netip.AddrPortFrom(t.cfg.Dst, t.cfg.Port), n.qp, o)
		})
	}
	wg.Wait()
	status := 0
	for i, n := range t.nodes {
		if errs[i] != nil {
			if st := t.eventStatus(errs[i]); status == 0 {
				status = st
			}
			continue
		}
		n.connected, n.disconnect = true, n.conn.Done()
	}
	if status == 0 && t.cfg.Count > 0 {
		t.out.Printf("receiving data transfers\n")
		if err := t.pollCQs(ctx, false); err != nil {
			return -1, err
		}
		t.out.Printf("sending replies\n")
		for _, n := range t.nodes {
			if err := t.postSends(n); err != nil {
				return -1, err
			}
		}
		t.out.Printf("data transfers complete\n")
		if t.cfg.Migrate {
			t.out.Printf("migrating to new event channel\n")
		}
	}
	// disconnect_events: the server disconnects; the DREP is sent for us.
	if err := t.disconnectEvents(ctx); err != nil {
		return -1, err
	}
	return status, nil
}

// postSends posts the node's messages (cmatose sends its buffer as it is).
func (t *test) postSends(n *node) error {
	if !n.connected || t.cfg.Count == 0 {
		return nil
	}
	for range t.cfg.Count {
		if err := n.qp.PostSend(rvt.SendWR{Opcode: qp.OpSend, SGL: n.sgl(t.cfg.Size)}); err != nil {
			t.out.Printf("failed to post sends: %d\n", -1)
			return err
		}
	}
	return nil
}

// pollCQs waits for Count completions (of any status, as cmatose counts
// them) on the send or receive CQ of every connected node.
func (t *test) pollCQs(ctx context.Context, send bool) error {
	var wc [8]rvt.WC
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		c := n.recvCQ
		if send {
			c = n.sendCQ
		}
		for done := 0; done < t.cfg.Count; {
			k, err := c.Poll(ctx, wc[:], nil)
			if err != nil {
				t.out.Printf("cmatose: failed polling CQ: %v\n", err)
				return err
			}
			done += k
		}
	}
	return nil
}

// disconnectEvents waits until every established connection is over.
func (t *test) disconnectEvents(ctx context.Context) error {
	for _, n := range t.nodes {
		if n.disconnect == nil {
			continue
		}
		select {
		case <-n.disconnect:
		case <-ctx.Done():
			t.out.Printf("cmatose: failure in rdma_get_cm_event in disconnect events: %v\n", ctx.Err())
			return ctx.Err()
		}
	}
	return nil
}
