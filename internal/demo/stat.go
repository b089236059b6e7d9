package demo

import (
	"fmt"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// OpenStat opens the demo pair and runs the traffic of `rvt stat`: an RC
// QP on each device, connected, carrying messages 1 KiB SENDs and as many
// 4 KiB WRITEs from rvt0 to rvt1, which then keeps four receives posted;
// and a UD QP on rvt0 in RTS. The caller reads the QPs and counters
// (Device.QPs, Device.Counters) and closes the pair.
func OpenStat(messages int) (_ *devopen.Pair, err error) {
	if messages < 1 {
		return nil, fmt.Errorf("messages %d: want at least 1", messages)
	}
	p, err := devopen.OpenPair(devopen.PairConfig{Seed: 1})
	if err != nil {
		return nil, fmt.Errorf("open devices: %w", err)
	}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	a, err := traffic.NewEndpoint(p.N[0], qp.RC, traffic.QPOpts{})
	if err != nil {
		return nil, err
	}
	b, err := traffic.NewEndpoint(p.N[1], qp.RC, traffic.QPOpts{})
	if err != nil {
		return nil, err
	}
	if err := traffic.Connect(a, b, qp.MTU4096); err != nil {
		return nil, err
	}
	u, err := traffic.NewEndpoint(p.N[0], qp.UD, traffic.QPOpts{})
	if err != nil {
		return nil, err
	}
	if err := traffic.BringUp(u, nil, qp.MTU4096); err != nil {
		return nil, err
	}
	if err := statTraffic(a, b, messages); err != nil {
		return nil, err
	}
	return p, nil
}

// statTraffic sends n 1 KiB SENDs and n 4 KiB WRITEs from a to b, then
// leaves a few receives posted on b so the RQ column shows them.
func statTraffic(a, b *traffic.Endpoint, n int) error {
	src, _, err := traffic.Buffer(a.N, 4096, 1)
	if err != nil {
		return err
	}
	dst, _, err := traffic.Buffer(b.N, 4096, 0)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if err := b.PostRecv(rvt.RecvWR{WRID: uint64(i), SGL: traffic.SGE(dst, 0, 1024)}); err != nil {
			return err
		}
		if err := a.PostSend(
			rvt.SendWR{WRID: uint64(2 * i), Opcode: qp.OpSend, Flags: qp.Signaled, SGL: traffic.SGE(src, 0, 1024)},
			rvt.SendWR{WRID: uint64(2*i + 1), Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: traffic.SGE(src, 0, 4096),
				RemoteAddr: dst.IOVA, Rkey: dst.Rkey}); err != nil {
			return err
		}
		if err := traffic.WaitOK(a.CQ, 2); err != nil {
			return err
		}
		if err := traffic.WaitOK(b.CQ, 1); err != nil {
			return err
		}
	}
	for i := 0; i < 4; i++ {
		if err := b.PostRecv(rvt.RecvWR{WRID: uint64(n + i), SGL: traffic.SGE(dst, 0, 1024)}); err != nil {
			return err
		}
	}
	return nil
}
