// Package mckey is rdma-core's mckey (librdmacm/examples/mckey.c) on a
// softverbs device: an ID of port space UDP resolves the multicast group
// (bound to -b when given), joins it (rdma_join_multicast_ex; -o as a
// send-only member), and after a pause the sender sends -C datagrams of
// -S bytes to the group (QP 0xFFFFFF, the join's Q_Key) while the
// receiver waits for as many. Each side prints mckey's lines, the MGID
// the join gives ("mckey: joined dgid: ::ffff:a.b.c.d mlid 0x0 sl 0"),
// and ends with "test complete" and "return status N".
package mckey

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/internal/cmtool"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Defaults of mckey.
const (
	DefaultCount = 10
	DefaultSize  = 100
	grhLen       = 40
)

// Config is one side's run: mckey's flags.
type Config struct {
	Group     netip.Addr   // -m: the IPv4 multicast group
	Src       netip.Addr   // -b: the address to bind (zero: the device's)
	Sender    bool         // -s
	SendOnly  bool         // -o: join as a send-only full member
	PortSpace cm.PortSpace // -p: UDP (0x111, the default) or IPoIB (0x2)
	Count     int          // -C
	Size      int          // -S
	// Pause is the wait after the join before data moves (mckey's 3 s,
	// "to give the SM a chance"); the in-memory pair uses less.
	Pause time.Duration
	// OnJoined, if set, is called once the group is joined (and, for a
	// receiver, its receives posted and its QP attached).
	OnJoined func()
}

// DefaultConfig is mckey's defaults.
func DefaultConfig() Config {
	return Config{PortSpace: cm.PSUDP, Count: DefaultCount, Size: DefaultSize, Pause: 3 * time.Second}
}

// Run runs one side and prints its lines, "test complete" and "return
// status N" last; the error is nil exactly when N is 0.
func Run(ctx context.Context, dev *rvt.Device, cfg Config, out cmtool.Out) error {
	err := run(ctx, dev, &cfg, out)
	out.Printf("test complete\n")
	status := 0
	if err != nil {
		status = -1
		out.Errorf("mckey: %v\n", err)
	}
	out.Printf("return status %d\n", status)
	return err
}

func run(ctx context.Context, dev *rvt.Device, cfg *Config, out cmtool.Out) error {
	role := "server"
	if cfg.Sender {
		role = "client"
	}
	out.Printf("mckey: starting %s\n", role)
	if _, err := cm.MulticastMGID(cfg.Group); err != nil {
		return err
	}
	ag, err := cm.AgentFor(dev)
	if err != nil {
		return err
	}
	ch := cm.NewEventChannel()
	defer ch.Close()
	if cfg.Size == 0 {
		cfg.Count = 0 // mckey's create_message: nothing to send or receive
	}
	id := ag.NewID(ch, cfg.PortSpace, nil)
	defer id.Destroy()
	out.Printf("mckey: joining\n")
	if cfg.Src.IsValid() {
		if err := id.BindAddr(netip.AddrPortFrom(cfg.Src, 0)); err != nil {
			return fmt.Errorf("addr bind failure: %w", err)
		}
	}
	if err := id.ResolveAddr(cfg.Src, netip.AddrPortFrom(cfg.Group, 0)); err != nil {
		return fmt.Errorf("resolve addr failure: %w", err)
	}
	if err := expect(ctx, ch, cm.EventAddrResolved); err != nil {
		return err
	}
	pa, err := dev.QueryPort(1)
	if err != nil {
		return err
	}
	if m := pa.ActiveMTU.Bytes(); cfg.Count > 0 && cfg.Size > m {
		return fmt.Errorf("message_size %d is larger than active mtu %d", cfg.Size, m)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return errors.New("unable to allocate PD")
	}
	cq, err := cmtool.NewCQ(dev, max(2*cfg.Count, 2))
	if err != nil {
		return errors.New("unable to create CQ")
	}
	defer cq.Destroy()
	wr := uint32(max(cfg.Count, 1))
	q, err := pd.CreateQP(rvt.QPInitAttr{Type: qp.UD, SendCQ: cq.CQ, RecvCQ: cq.CQ,
		Cap: rvt.QPCap{MaxSendWR: wr, MaxRecvWR: wr, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err == nil {
		defer q.Destroy()
		err = cm.PrepareUD(q, cfg.PortSpace)
	}
	if err != nil {
		return fmt.Errorf("unable to create QP: %w", err)
	}
	mem, err := dev.AllocBuf(cfg.Size + grhLen)
	if err != nil {
		return err
	}
	mr, err := pd.Reg(mem, keys.LocalWrite)
	if err != nil {
		return errors.New("failed to reg MR")
	}
	if !cfg.Sender {
		for range cfg.Count {
			if err := q.PostRecv(rvt.RecvWR{SGL: []rvt.SGE{{Addr: mr.IOVA, Length: uint32(len(mem)), Lkey: mr.Lkey}}}); err != nil {
				return fmt.Errorf("failed to post receives: %w", err)
			}
		}
	}
	if err := id.JoinMulticast(cfg.Group, q, cfg.SendOnly); err != nil {
		return fmt.Errorf("failure joining: %w", err)
	}
	ev, err := ch.Get(ctx)
	if err != nil {
		return err
	}
	if ev.Type != cm.EventMulticastJoin || ev.UD == nil {
		return fmt.Errorf("event: %v, error: %v", ev.Type, ev.Err)
	}
	out.Printf("mckey: joined dgid: %v mlid 0x%x sl %d\n", netip.AddrFrom16(ev.UD.AV.DGID), ev.UD.AV.DLID, ev.UD.AV.SL)
	ah, err := pd.CreateAH(ev.UD.AV)
	if err != nil {
		return errors.New("failure creating address handle")
	}
	if cfg.OnJoined != nil {
		cfg.OnJoined()
	}
	select {
	case <-time.After(cfg.Pause):
	case <-ctx.Done():
		return ctx.Err()
	}
	if cfg.Count > 0 {
		if cfg.Sender {
			out.Printf("initiating data transfers\n")
			for range cfg.Count {
				// Signaled (mckey's are not), so that the QP is not
				// destroyed with datagrams still queued.
				if err := q.PostSend(rvt.SendWR{Opcode: qp.OpSendWithImm, Flags: qp.Signaled, ImmData: q.Num(), AH: ah,
					RemoteQPN: ev.UD.QPN, RemoteQKey: ev.UD.QKey,
					SGL: []rvt.SGE{{Addr: mr.IOVA, Length: uint32(cfg.Size), Lkey: mr.Lkey}}}); err != nil {
					return fmt.Errorf("failed to post sends: %w", err)
				}
			}
		} else {
			out.Printf("receiving data transfers\n")
		}
		if err := poll(ctx, cq, cfg.Count); err != nil {
			return err
		}
		out.Printf("data transfers complete\n")
	}
	if err := id.LeaveMulticast(cfg.Group); err != nil {
		return fmt.Errorf("failure leaving: %w", err)
	}
	return nil
}

func expect(ctx context.Context, ch *cm.EventChannel, t cm.EventType) error {
	ev, err := ch.Get(ctx)
	if err != nil {
		return err
	}
	if ev.Type != t {
		return fmt.Errorf("event: %v, error: %v", ev.Type, ev.Err)
	}
	return nil
}

func poll(ctx context.Context, cq *cmtool.CQ, n int) error {
	buf := make([]rvt.WC, 8)
	for done := 0; done < n; {
		k, err := cq.Poll(ctx, buf, nil)
		if err != nil {
			return fmt.Errorf("failed polling CQ: %w", err)
		}
		for _, w := range buf[:k] {
			if w.Status != (rvt.WC{}).Status {
				return fmt.Errorf("completion %v", w.Status)
			}
		}
		done += k
	}
	return nil
}
