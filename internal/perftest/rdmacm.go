package perftest

// -R and -z: perftest's rdma_cm modes.
//
// With -z (--comm_rdma_cm) the exchange runs over rdma_cm instead of TCP:
// the client connects an RC QP of its own to the server's port (18515 by
// default) in port space TCP, with no private data, and every message of
// the exchange is one SEND on it (create_comm_struct, rdma_client_connect,
// rdma_server_connect, ctx_xchg_data_rdma). Each side keeps one receive of
// DestBinarySize bytes posted (WR ID 5, SYNC_SPEC_ID), reposted after
// each message; handshakes carry struct pingpong_dest in binary; closing
// is the last handshake with no "done".
//
// -R (--rdma_cm) implies -z and connects the test's QPs through rdma_cm
// too (create_rdma_cm_connection): after the MTU swap, a handshake; the
// client then connects each QP to the same port (port space TCP; private
// data only rdma_cm's header; responder resources and initiator depth the
// outstanding reads for READ and atomic tests, else 0; retry and RNR retry
// 7), retrying ten times 100 ms apart while the server is not yet
// listening; the server listens (backlog: the number of QPs) and accepts
// as many; another handshake. The tools then run as without -R, except
// that ctx_connect (RTR and RTS by hand) is skipped. At the end both sides
// disconnect every QP (rdma_cm_disconnect_nodes).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// syncSpecID is the WR ID of the exchange's SENDs and receives.
const syncSpecID = 5

// cmRetries and cmRetryDelay are how often, and how far apart, the client
// tries to connect the test QPs (rdma_cm_client_connection).
const (
	cmRetries    = 10
	cmRetryDelay = 100 * time.Millisecond
)

// cmComm is the exchange's QP connected through rdma_cm: a Transport.
type cmComm struct {
	s    *side
	pd   *rvt.PD
	scq  *rvt.CQ
	rcq  *rvt.CQ
	q    *rvt.QP
	buf  []byte // send half, then receive half
	mr   *rvt.MR
	conn *cm.Conn
}

const cmCommHalf = 4096

// ctx returns a context that ends at the side's deadline, if it has one.
func (s *side) ctx() (context.Context, context.CancelFunc) {
	if s.deadline.IsZero() {
		return context.WithCancel(context.Background())
	}
	return context.WithDeadline(context.Background(), s.deadline)
}

// newCMComm makes the exchange's resources: a PD, two CQs, a buffer and an
// RC QP (tx and rx depth 1) in INIT with its receive posted, as
// rdma_create_qp and post_one_recv_wqe leave it before connecting.
func (s *side) newCMComm() (*cmComm, error) {
	dev := s.env.Dev
	c := &cmComm{s: s}
	var err error
	if c.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	// Memory the device reaches without copying (shared memory on a
	// device of rvtd).
	if c.buf, err = dev.AllocBuf(2 * cmCommHalf); err != nil {
		c.close()
		return nil, err
	}
	if c.scq, err = dev.CreateCQ(2, nil); err != nil {
		c.close()
		return nil, err
	}
	if c.rcq, err = dev.CreateCQ(2, nil); err != nil {
		c.close()
		return nil, err
	}
	if c.mr, err = c.pd.Reg(c.buf, keys.LocalWrite); err != nil {
		c.close()
		return nil, err
	}
	if c.q, err = c.pd.CreateQP(rvt.QPInitAttr{Type: qp.RC, SendCQ: c.scq, RecvCQ: c.rcq,
		Cap: rvt.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		c.close()
		return nil, err
	}
	init := rvt.QPAttr{State: qp.Init, Port: uint8(s.p.IBPort), AccessFlags: keys.LocalWrite}
	if err := c.q.Modify(&init, qp.RequiredAttrs(qp.RC, qp.Reset, qp.Init)); err != nil {
		c.close()
		return nil, err
	}
	if err := c.postRecv(); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *cmComm) postRecv() error {
	return c.q.PostRecv(rvt.RecvWR{WRID: syncSpecID,
		SGL: []rvt.SGE{{Addr: c.mr.IOVA + cmCommHalf, Length: DestBinarySize, Lkey: c.mr.Lkey}}})
}

// Send is rdma_write_data: one signalled SEND, waited for.
func (c *cmComm) Send(msg []byte) error {
	if len(msg) > cmCommHalf {
		return fmt.Errorf("%w: a %d-byte message", ErrMalformed, len(msg))
	}
	copy(c.buf, msg)
	err := c.q.PostSend(rvt.SendWR{WRID: syncSpecID, Opcode: qp.OpSend, Flags: qp.Signaled,
		SGL: []rvt.SGE{{Addr: c.mr.IOVA, Length: uint32(len(msg)), Lkey: c.mr.Lkey}}})
	if err != nil {
		return err
	}
	wc := make([]rvt.WC, 1)
	if _, err := c.s.waitCQ(c.scq, nil, wc, time.Time{}); err != nil {
		return err
	}
	if wc[0].Status != cq.Success || wc[0].WRID != syncSpecID {
		return fmt.Errorf(" Bad wc status %d (%v)", wc[0].Status, wc[0].Status)
	}
	return nil
}

// Recv is rdma_read_data: the next message's first n bytes, whatever its
// length, as perftest copies them; then the receive is posted again.
func (c *cmComm) Recv(n int) ([]byte, error) {
	if n > DestBinarySize {
		return nil, fmt.Errorf("%w: a %d-byte message", ErrMalformed, n)
	}
	wc := make([]rvt.WC, 1)
	if _, err := c.s.waitCQ(c.rcq, nil, wc, time.Time{}); err != nil {
		return nil, err
	}
	if wc[0].Status != cq.Success || wc[0].WRID != syncSpecID {
		return nil, fmt.Errorf("Bad wc status -- %d -- %d (%v)", wc[0].Status, wc[0].WRID, wc[0].Status)
	}
	msg := append([]byte(nil), c.buf[cmCommHalf:cmCommHalf+n]...)
	if err := c.postRecv(); err != nil {
		return nil, err
	}
	return msg, nil
}

func (c *cmComm) close() {
	dev := c.s.env.Dev
	if c.conn != nil {
		_ = c.conn.Close()
	}
	if c.q != nil {
		_ = c.q.Destroy()
	}
	if c.mr != nil {
		_ = dev.DeregMR(c.mr)
	}
	if c.scq != nil {
		_ = dev.DestroyCQ(c.scq)
	}
	if c.rcq != nil {
		_ = dev.DestroyCQ(c.rcq)
	}
	if c.buf != nil {
		_ = dev.FreeBuf(c.buf)
	}
	if c.pd != nil {
		_ = c.pd.Dealloc()
	}
}

// serverAddr resolves the client's server argument to an IPv4 address, as
// perftest's getaddrinfo with AF_INET does.
func (s *side) serverAddr(ctx context.Context) (netip.AddrPort, error) {
	port := uint16(s.p.Port)
	if a, err := netip.ParseAddr(s.p.Server); err == nil {
		return netip.AddrPortFrom(a.Unmap(), port), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", s.p.Server)
	if err != nil || len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("Problem in resolving basic address and port: %s: %w", s.p.Server, err)
	}
	return netip.AddrPortFrom(ips[0].Unmap(), port), nil
}

// listenAddr is where the server listens: every address, perftest's port.
func (s *side) listenAddr() netip.AddrPort {
	return netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(s.p.Port))
}

// establishCM is establish_connection with use_rdma_cm: the exchange's QP
// connected to the server's port.
func (s *side) establishCM() (*cmComm, error) {
	c, err := s.newCMComm()
	if err != nil {
		return nil, fmt.Errorf(" Unable to create the resources needed by comm struct: %w", err)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	ag, err := cm.AgentFor(s.env.Dev)
	if err != nil {
		c.close()
		return nil, err
	}
	if s.client {
		raddr, err := s.serverAddr(ctx)
		if err != nil {
			c.close()
			return nil, err
		}
		c.conn, err = ag.Dial(ctx, raddr, c.q, &cm.DialOptions{PortSpace: cm.PSTCP,
			Param: &cm.ConnParam{RetryCount: 7, RNRRetryCount: 7}})
		if err != nil {
			c.close()
			return nil, fmt.Errorf(" Unable to perform rdma_client function: %w", err)
		}
		return c, nil
	}
	ln := s.env.CMListener
	if ln == nil {
		if ln, err = ag.Listen(s.listenAddr(), &cm.ListenOptions{PortSpace: cm.PSTCP, Backlog: 1}); err != nil {
			c.close()
			return nil, fmt.Errorf(" rdma_bind_addr failed: %w", err)
		}
	}
	// The listening ID goes once the client is in (rdma_destroy_id).
	defer ln.Close()
	req, err := ln.Accept(ctx)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("bad event waiting for connect request: %w", err)
	}
	if c.conn, err = req.Accept(ctx, c.q, nil); err != nil {
		c.close()
		return nil, fmt.Errorf(" Unable to perform rdma_server function: %w", err)
	}
	return c, nil
}

// connectCM is create_rdma_cm_connection: a handshake, the test QPs
// connected through rdma_cm, another handshake. The QPs are in INIT.
func (s *side) connectCM() error {
	zero := Dest{} // perftest's my_dest is still zeroed here
	if _, err := s.conn.HandShake(zero); err != nil {
		return fmt.Errorf("Failed to sync between client and server before creating RDMA CM connection: %w", err)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	ag, err := cm.AgentFor(s.env.Dev)
	if err != nil {
		return err
	}
	var depth uint8
	if v := s.p.Test.Verb(); v == Read || v == Atomic {
		depth = uint8(min(s.outReads, 255))
	}
	param := cm.ConnParam{ResponderResources: depth, InitiatorDepth: depth, RetryCount: 7, RNRRetryCount: 7}
	if s.client {
		raddr, err := s.serverAddr(ctx)
		if err != nil {
			return err
		}
		for i, q := range s.qps {
			var c *cm.Conn
			for try := 1; ; try++ {
				p := param
				c, err = ag.Dial(ctx, raddr, q, &cm.DialOptions{PortSpace: cm.PSTCP, Param: &p})
				if err == nil || try == cmRetries || !errors.Is(err, cm.RejInvalidServiceID) {
					break
				}
				// The server is not listening yet.
				if err := sleepCtx(ctx, s, cmRetryDelay); err != nil {
					return err
				}
			}
			if err != nil {
				return fmt.Errorf("Failed to create RDMA CM connection (QP %d): %w", i, err)
			}
			s.cmConns = append(s.cmConns, c)
		}
	} else {
		ln, err := ag.Listen(s.listenAddr(), &cm.ListenOptions{PortSpace: cm.PSTCP, Backlog: len(s.qps)})
		if err != nil {
			return fmt.Errorf("Failed to bind RDMA CM address on the server: %w", err)
		}
		for i, q := range s.qps {
			req, err := ln.Accept(ctx)
			if err == nil {
				var c *cm.Conn
				if c, err = req.Accept(ctx, q, nil); err == nil {
					s.cmConns = append(s.cmConns, c)
				}
			}
			if err != nil {
				ln.Close()
				return fmt.Errorf("Failed to accept RDMA CM connection (QP %d): %w", i, err)
			}
		}
		ln.Close()
	}
	if _, err := s.conn.HandShake(zero); err != nil {
		return fmt.Errorf("Failed to sync between client and server after creating RDMA CM connection: %w", err)
	}
	return nil
}

// sleepCtx waits d on the side's clock, or until ctx ends.
func sleepCtx(ctx context.Context, s *side, d time.Duration) error {
	ch := make(chan struct{})
	t := s.clk.AfterFunc(d, func() { close(ch) })
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// disconnectCM is rdma_cm_disconnect_nodes: every test QP's connection
// disconnected, waiting for each to end.
func (s *side) disconnectCM() error {
	ctx, cancel := s.ctx()
	defer cancel()
	var errs []error
	for _, c := range s.cmConns {
		err := c.Disconnect(ctx)
		if err != nil {
			select {
			case <-c.Done(): // the peer's DREQ came first: answered already
				err = nil
			default:
			}
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	s.cmConns = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("Failed to disconnect RDMA CM nodes: %w", err)
	}
	return nil
}
