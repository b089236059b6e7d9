package rvt_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Two devices on an in-memory fabric: connect an RC QP on each, RDMA WRITE
// from one to the other, and poll for the completion.
func Example() {
	fab := fabric.New(clock.Real(), 1)
	open := func(name string, mac netdev.MAC, ip string) *rvt.Device {
		addr := netip.MustParseAddr(ip)
		fab.AddAddr(addr, mac)
		dev, err := rvt.Open(rvt.Options{Name: name, Link: fab.NewPort(mac, 9000), MAC: mac,
			Addrs: []netip.Addr{addr}, Resolve: fab.Resolve})
		if err != nil {
			panic(err)
		}
		return dev
	}
	devA := open("rvt0", netdev.MAC{2, 0, 0, 0, 0, 1}, "198.18.0.1")
	devB := open("rvt1", netdev.MAC{2, 0, 0, 0, 0, 2}, "198.18.0.2")
	defer devA.Close()
	defer devB.Close()

	// A PD, a CQ and an RC QP on each device.
	type side struct {
		dev *rvt.Device
		pd  *rvt.PD
		cq  *rvt.CQ
		qp  *rvt.QP
	}
	mk := func(dev *rvt.Device) *side {
		s := &side{dev: dev}
		s.pd, _ = dev.AllocPD()
		s.cq, _ = dev.CreateCQ(64, nil)
		s.qp, _ = s.pd.CreateQP(rvt.QPInitAttr{Type: qp.RC, SendCQ: s.cq, RecvCQ: s.cq,
			Cap: rvt.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		return s
	}
	a, b := mk(devA), mk(devB)

	// RESET -> INIT -> RTR -> RTS, each QP addressed to the other's GID 0.
	connect := func(s, peer *side) error {
		gid, _ := peer.dev.QueryGID(1, 0)
		steps := []struct {
			attr rvt.QPAttr
			mask rvt.QPAttrMask
		}{
			{rvt.QPAttr{State: qp.Init, Port: 1, AccessFlags: keys.RemoteWrite},
				qp.AttrState | qp.AttrPkeyIndex | qp.AttrPort | qp.AttrAccessFlags},
			{rvt.QPAttr{State: qp.RTR, PathMTU: qp.MTU4096, DestQPN: peer.qp.Num(), RQPSN: 0,
				MaxDestRdAtomic: 1, MinRNRTimer: 12, AV: rvt.AddressVector{DGID: gid, HopLimit: 64, Port: 1}},
				qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN |
					qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer},
			{rvt.QPAttr{State: qp.RTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				qp.AttrState | qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry |
					qp.AttrMaxQPRdAtomic},
		}
		for _, st := range steps {
			if err := s.qp.Modify(&st.attr, st.mask); err != nil {
				return err
			}
		}
		return nil
	}
	if err := connect(a, b); err != nil {
		panic(err)
	}
	if err := connect(b, a); err != nil {
		panic(err)
	}

	// Register a source buffer on A and a target buffer on B.
	src, _ := a.pd.Reg([]byte("hello, RDMA"), 0)
	dst, _ := b.pd.Reg(make([]byte, 11), keys.LocalWrite|keys.RemoteWrite)

	// WRITE A's buffer into B's, then poll A's CQ.
	err := a.qp.PostSend(rvt.SendWR{WRID: 1, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
		SGL:        []rvt.SGE{{Addr: src.IOVA, Length: uint32(src.Length), Lkey: src.Lkey}},
		RemoteAddr: dst.IOVA, Rkey: dst.Rkey})
	if err != nil {
		panic(err)
	}
	wc := make([]rvt.WC, 1)
	for a.cq.Poll(wc) == 0 {
		time.Sleep(10 * time.Microsecond)
	}
	got := make([]byte, dst.Length)
	dst.ReadAt(got, dst.IOVA)
	fmt.Printf("wr_id %d: %v, %v\n", wc[0].WRID, wc[0].Opcode, wc[0].Status)
	fmt.Printf("%s now holds %q\n", devB.Name(), got)
	// Output:
	// wr_id 1: RDMA_WRITE, success
	// rvt1 now holds "hello, RDMA"
}
