// Package udaddy is rdma-core's udaddy (librdmacm/examples/udaddy.c) on a
// softverbs device: UD service resolution by SIDR (port space UDP, port
// 7174; the server answers with its QP number and Q_Key 0x01234567), then
// -C datagrams of -S bytes from the client to the server and back. Every
// datagram is a SEND with immediate whose immediate is the sender's QP
// number; the server answers to the QP in the immediate, through an
// address handle made from the first datagram's GRH
// (ibv_create_ah_from_wc). Each side prints the tool's lines and ends
// with "test complete" and "return status N".
package udaddy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/internal/cmtool"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Defaults of udaddy.
const (
	DefaultPort  = 7174
	DefaultCount = 10
	DefaultSize  = 100
	grhLen       = 40
)

// Config is one side's run: udaddy's flags.
type Config struct {
	Dst         netip.Addr   // -s: the server (set: be the client)
	Src         netip.Addr   // -b: the address to bind (server) or send from (client)
	PortSpace   cm.PortSpace // -P udp / -p 0x111 (IPoIB is refused)
	Connections int          // -c
	Count       int          // -C: datagrams each way per connection
	Size        int          // -S: datagram size (at most the active MTU)
	TOS         int          // -t (-1: not set)
	Port        uint16       // udaddy's port (7174; the tool has no flag for it)

	// OnListen, if set, learns the listener's address once it listens.
	OnListen func(netip.AddrPort)
}

// DefaultConfig is udaddy's defaults.
func DefaultConfig() Config {
	return Config{PortSpace: cm.PSUDP, Connections: 1, Count: DefaultCount, Size: DefaultSize, TOS: -1, Port: DefaultPort}
}

// node is cmatest_node: one UD QP and where its replies go.
type node struct {
	pd         *rvt.PD
	cq         *cmtool.CQ
	qp         *rvt.QP
	mem        []byte
	mr         *rvt.MR
	ah         *rvt.AH
	remoteQPN  uint32
	remoteQKey uint32
	connected  bool
}

type test struct {
	cfg   *Config
	out   cmtool.Out
	nodes []*node
}

// verify is verify_test_params: a datagram fits the active MTU.
func (t *test) verify(dev *rvt.Device) error {
	pa, err := dev.QueryPort(1)
	if err != nil {
		return err
	}
	if m := pa.ActiveMTU.Bytes(); t.cfg.Count > 0 && t.cfg.Size > m {
		t.out.Printf("udaddy: message_size %d is larger than active mtu %d\n", t.cfg.Size, m)
		return errors.New("message size larger than the active MTU")
	}
	return nil
}

func (t *test) newNode(dev *rvt.Device) (_ *node, err error) {
	n := &node{}
	defer func() {
		if err != nil {
			n.destroy()
		}
	}()
	if n.pd, err = dev.AllocPD(); err != nil {
		return nil, errors.New("udaddy: unable to allocate PD")
	}
	cqe := 2
	if t.cfg.Count > 0 {
		cqe = t.cfg.Count * 2
	}
	if n.cq, err = cmtool.NewCQ(dev, cqe); err != nil {
		return nil, errors.New("udaddy: unable to create CQ")
	}
	wr := uint32(max(t.cfg.Count, 1))
	if n.qp, err = n.pd.CreateQP(rvt.QPInitAttr{Type: qp.UD, SendCQ: n.cq.CQ, RecvCQ: n.cq.CQ,
		Cap: rvt.QPCap{MaxSendWR: wr, MaxRecvWR: wr, MaxSendSGE: 1, MaxRecvSGE: 1}}); err == nil {
		err = cm.PrepareUD(n.qp, t.cfg.PortSpace)
	}
	if err != nil {
		return nil, fmt.Errorf("udaddy: unable to create QP: %w", err)
	}
	if t.cfg.Count > 0 {
		if n.mem, err = dev.AllocBuf(t.cfg.Size + grhLen); err != nil {
			return nil, fmt.Errorf("udaddy: buffer: %w", err)
		}
		if n.mr, err = n.pd.Reg(n.mem, keys.LocalWrite); err != nil {
			return nil, errors.New("failed to reg MR")
		}
		for range t.cfg.Count {
			if err = n.qp.PostRecv(rvt.RecvWR{SGL: []rvt.SGE{{Addr: n.mr.IOVA, Length: uint32(len(n.mem)), Lkey: n.mr.Lkey}}}); err != nil {
				return nil, fmt.Errorf("failed to post receives: %w", err)
			}
		}
	}
	return n, nil
}

func (n *node) destroy() {
	if n.qp != nil {
		_ = n.qp.Destroy()
	}
	if n.cq != nil {
		_ = n.cq.Destroy()
	}
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
		n.destroy()
	}
	out.Printf("return status %d\n", status)
	if err == nil && status != 0 {
		err = fmt.Errorf("return status %d", status)
	}
	return err
}

func (t *test) check() error {
	switch {
	case t.cfg.Connections < 1:
		return fmt.Errorf("invalid connection count %d", t.cfg.Connections)
	case t.cfg.Count < 0:
		return fmt.Errorf("invalid message count %d", t.cfg.Count)
	case t.cfg.Size < 0:
		return fmt.Errorf("invalid message size %d", t.cfg.Size)
	case t.cfg.PortSpace != cm.PSUDP:
		return fmt.Errorf("port space %v: softverbs has no IPoIB; udaddy here uses udp (%#x)", t.cfg.PortSpace, uint16(cm.PSUDP))
	}
	if t.cfg.Size == 0 {
		t.cfg.Count = 0
	}
	return nil
}

func (t *test) runServer(ctx context.Context, dev *rvt.Device) (int, error) {
	t.out.Printf("udaddy: starting server\n")
	if err := t.check(); err != nil {
		return -22, err
	}
	l, err := cmtool.Listen(dev, t.cfg.Src, t.cfg.Port, t.cfg.PortSpace, t.cfg.OnListen)
	if err != nil {
		t.out.Printf("udaddy: bind address failed: %v\n", err)
		return -98, err
	}
	defer l.Close()
	for left := t.cfg.Connections; left > 0; left-- {
		req, err := l.Accept(ctx)
		if err != nil {
			return -1, err
		}
		var n *node
		if err = t.verify(dev); err == nil {
			n, err = t.newNode(dev)
		}
		if err == nil {
			t.nodes = append(t.nodes, n)
			err = req.AcceptUD(n.qp, nil)
		}
		if err != nil {
			t.out.Printf("udaddy: failing connection request\n")
			_ = req.Reject(nil)
			continue
		}
		n.connected = true
	}
	if t.cfg.Count > 0 {
		t.out.Printf("receiving data transfers\n")
		if err := t.pollCQs(ctx, dev); err != nil {
			return -1, err
		}
		t.out.Printf("sending replies\n")
		for _, n := range t.nodes {
			if err := t.postSends(n, qp.Signaled); err != nil {
				return -1, err
			}
		}
		if err := t.pollCQs(ctx, dev); err != nil {
			return -1, err
		}
		t.out.Printf("data transfers complete\n")
	}
	return 0, nil
}

func (t *test) runClient(ctx context.Context, dev *rvt.Device) (int, error) {
	t.out.Printf("udaddy: starting client\n")
	if err := t.check(); err != nil {
		return -22, err
	}
	t.out.Printf("udaddy: connecting\n")
	for range t.cfg.Connections {
		if err := t.verify(dev); err != nil {
			return -22, nil
		}
		n, err := t.newNode(dev)
		if err != nil {
			t.out.Printf("%v\n", err)
			return -1, err
		}
		t.nodes = append(t.nodes, n)
		o := &cm.DialOptions{PortSpace: t.cfg.PortSpace, Src: t.cfg.Src}
		if t.cfg.TOS >= 0 {
			o.TOS = uint8(t.cfg.TOS)
		}
		peer, err := cm.ResolveUD(ctx, dev, n.pd, netip.AddrPortFrom(t.cfg.Dst, t.cfg.Port), o)
		if err != nil {
			if ctx.Err() != nil {
				return -1, ctx.Err()
			}
			if typ, st, ok := cmtool.EventOf(err); ok {
				t.out.Printf("udaddy: event: RDMA_CM_EVENT_%s, error: %d\n", typ, st)
				return st, nil
			}
			t.out.Printf("udaddy: %v\n", err)
			return -1, err
		}
		n.ah, n.remoteQPN, n.remoteQKey, n.connected = peer.AH, peer.QPN, peer.QKey, true
	}
	if t.cfg.Count > 0 {
		t.out.Printf("initiating data transfers\n")
		for _, n := range t.nodes {
			if err := t.postSends(n, 0); err != nil {
				return -1, err
			}
		}
		t.out.Printf("receiving data transfers\n")
		if err := t.pollCQs(ctx, dev); err != nil {
			return -1, err
		}
		t.out.Printf("data transfers complete\n")
	}
	return 0, nil
}

// postSends sends the node's datagrams: SEND with immediate = our QPN.
func (t *test) postSends(n *node, flags qp.SendFlags) error {
	if !n.connected || t.cfg.Count == 0 {
		return nil
	}
	for range t.cfg.Count {
		if err := n.qp.PostSend(rvt.SendWR{Opcode: qp.OpSendWithImm, Flags: flags, ImmData: n.qp.Num(),
			AH: n.ah, RemoteQPN: n.remoteQPN, RemoteQKey: n.remoteQKey,
			SGL: []rvt.SGE{{Addr: n.mr.IOVA, Length: uint32(t.cfg.Size), Lkey: n.mr.Lkey}}}); err != nil {
			t.out.Printf("failed to post sends: %d\n", -1)
			return err
		}
	}
	return nil
}

// pollCQs waits for Count completions on every connected node's CQ; the
// first one of a node without an address handle makes the reply's, from
// the GRH and the immediate (the sender's QPN), with our own Q_Key.
func (t *test) pollCQs(ctx context.Context, dev *rvt.Device) error {
	var wc [8]rvt.WC
	for _, n := range t.nodes {
		if !n.connected {
			continue
		}
		for done := 0; done < t.cfg.Count; {
			k, err := n.cq.Poll(ctx, wc[:], nil)
			if err != nil {
				t.out.Printf("udaddy: failed polling CQ: %v\n", err)
				return err
			}
			done += k
			if n.ah == nil {
				av, err := cmtool.ReplyAV(dev, n.mem[:grhLen])
				if err == nil {
					n.ah, err = n.pd.CreateAH(av)
				}
				if err != nil {
					return fmt.Errorf("udaddy: reply address handle: %w", err)
				}
				n.remoteQPN, n.remoteQKey = wc[0].ImmData, n.qp.Query().QKey
			}
		}
	}
	return nil
}
