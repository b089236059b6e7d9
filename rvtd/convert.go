package rvtd

import (
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// clamp lowers the device's maxima to what one session may hold, so that
// a program sizing itself by ibv_query_device gets what it asks for (an
// SRQ counts as a QP; every CQ needs an entry).
func (l *Limits) clamp(a *proto.DeviceAttr) {
	lower := func(v *uint32, limit int) { *v = min(*v, u32(limit)) }
	lower(&a.MaxQP, l.QPs)
	lower(&a.MaxSRQ, l.QPs)
	lower(&a.MaxMR, l.MRs)
	lower(&a.MaxCQE, l.CQEntries)
	lower(&a.MaxCQ, l.CQEntries)
	a.MaxResRdAtom = a.MaxQPRdAtom * a.MaxQP // as rvt derives it, for the QPs left
}

// What the devices do, in ibv_device_attr.device_cap_flags and
// ibv_port_attr.port_cap_flags (rdma-core's IBV_DEVICE_* and IBV_PORT_*
// values): RNR NAKs, SRQ resize (ibv_modify_srq max_wr), the system image
// GUID, memory windows of types 1 and 2B, and fast registration with local
// invalidation (MEM_MGT_EXTENSIONS), as rxe reports them; on the port, a
// connection manager (rdma_cm, served by the daemon), as rxe's CM_SUP.
const (
	deviceCapFlags = 1<<11 | // SYS_IMAGE_GUID
		1<<12 | // RC_RNR_NAK_GEN
		1<<13 | // SRQ_RESIZE
		1<<17 | // MEM_WINDOW
		1<<21 | // MEM_MGT_EXTENSIONS
		1<<24 // MEM_WINDOW_TYPE_2B
	portCapFlags = 1 << 16 // CM_SUP
)

// query serves the device, port, GID and P_Key queries.
func query(d *rvt.Device, m proto.Msg) (proto.Body, error) {
	switch m.Op {
	case proto.OpQueryDevice:
		a := d.QueryDevice()
		r := &proto.DeviceAttr{
			FWVer: a.FWVer, NodeGUID: a.NodeGUID, SysImageGUID: a.SysImageGUID,
			MaxMRSize: a.MaxMRSize, PageSizeCap: a.PageSizeCap, MaxMsgSize: a.MaxMsgSize,
			VendorID: a.VendorID, VendorPartID: a.VendorPartID, HWVer: a.HWVer,
			MaxQP: u32(a.MaxQP), MaxQPWR: u32(a.MaxQPWR), MaxSGE: u32(a.MaxSGE), MaxSGERd: u32(a.MaxSGERd),
			MaxCQ: u32(a.MaxCQ), MaxCQE: u32(a.MaxCQE), MaxMR: u32(a.MaxMR), MaxPD: u32(a.MaxPD),
			MaxQPRdAtom: u32(a.MaxQPRdAtom), MaxResRdAtom: u32(a.MaxResRdAtom), MaxQPInitRdAtom: u32(a.MaxQPInitRdAtom),
			MaxMW: u32(a.MaxMW), MaxAH: u32(a.MaxAH), MaxSRQ: u32(a.MaxSRQ), MaxSRQWR: u32(a.MaxSRQWR),
			MaxSRQSGE: u32(a.MaxSRQSGE), MaxMcastGrp: u32(a.MaxMcastGrp), MaxMcastQPAttach: u32(a.MaxMcastQPAttach),
			MaxTotalMcastQPAttach: u32(a.MaxTotalMcastQPAttach), MaxInlineData: u32(a.MaxInlineData),
			MaxPKeys: uint16(a.MaxPkeys), PhysPortCnt: uint8(a.PhysPortCnt), DeviceCapFlags: deviceCapFlags,
		}
		if a.AtomicCap == "HCA" {
			r.AtomicCap = 1 // IBV_ATOMIC_HCA
		}
		return r, nil
	case proto.OpQueryPort:
		p, err := d.QueryPort(m.Body.(*proto.PortReq).Port)
		if err != nil {
			return nil, err
		}
		return &proto.PortAttr{
			State: 4, MaxMTU: uint8(p.MaxMTU), ActiveMTU: uint8(p.ActiveMTU), LinkLayer: 2,
			ActiveWidth: 1, ActiveSpeed: 1, PhysState: 5, GIDTblLen: u32(p.GIDTblLen),
			PortCapFlags: portCapFlags, MaxMsgSize: 1 << 31, PKeyTblLen: uint16(p.PkeyTblLen), LID: p.LID, SMLID: p.SMLID,
		}, nil
	case proto.OpQueryGID:
		t := m.Body.(*proto.TableReq)
		if t.Index > 1<<16 {
			return nil, proto.EINVAL
		}
		g, err := d.QueryGID(t.Port, int(t.Index))
		if err != nil {
			return nil, err
		}
		return &proto.GIDReply{GID: g, Type: 2}, nil
	case proto.OpQueryPKey:
		t := m.Body.(*proto.TableReq)
		if t.Index > 1<<16 {
			return nil, proto.EINVAL
		}
		k, err := d.QueryPKey(t.Port, int(t.Index))
		if err != nil {
			return nil, err
		}
		return &proto.PKeyReply{PKey: k}, nil
	}
	return nil, proto.EOPNOTSUPP
}

func u32(n int) uint32 {
	if n < 0 {
		return 0
	}
	if uint64(n) > 0xFFFFFFFF {
		return 0xFFFFFFFF
	}
	return uint32(n)
}
