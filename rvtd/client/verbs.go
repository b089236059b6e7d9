package client

import (
	"errors"

	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/rvtd/ring"
)

// The verbs rvt.Dial needs beyond the tests' minimum in client.go: queries,
// the destroy side of every object, process_vm registration, and direct
// access to the rings for a caller that writes its own records.

// QueryDevice is ibv_query_device.
func (d *Device) QueryDevice() (*proto.DeviceAttr, error) {
	r, err := d.c.Call(proto.OpQueryDevice, d.Handle, nil)
	if err != nil {
		return nil, err
	}
	return r.(*proto.DeviceAttr), nil
}

// QueryPort is ibv_query_port.
func (d *Device) QueryPort(port uint8) (*proto.PortAttr, error) {
	r, err := d.c.Call(proto.OpQueryPort, d.Handle, &proto.PortReq{Port: port})
	if err != nil {
		return nil, err
	}
	return r.(*proto.PortAttr), nil
}

// QueryGIDPort is QueryGID of any port (the daemon refuses all but 1).
func (d *Device) QueryGIDPort(port uint8, index uint32) ([16]byte, error) {
	r, err := d.c.Call(proto.OpQueryGID, d.Handle, &proto.TableReq{Port: port, Index: index})
	if err != nil {
		return [16]byte{}, err
	}
	return r.(*proto.GIDReply).GID, nil
}

// QueryPKey is ibv_query_pkey.
func (d *Device) QueryPKey(port uint8, index uint32) (uint16, error) {
	r, err := d.c.Call(proto.OpQueryPKey, d.Handle, &proto.TableReq{Port: port, Index: index})
	if err != nil {
		return 0, err
	}
	return r.(*proto.PKeyReply).PKey, nil
}

// DeallocPD is ibv_dealloc_pd.
func (d *Device) DeallocPD(pd uint32) error {
	_, err := d.c.Call(proto.OpDeallocPD, pd, nil)
	return err
}

// ShmFree releases a segment (EBUSY while MRs use it) and unmaps it.
func (d *Device) ShmFree(s *Shm) error {
	if _, err := d.c.Call(proto.OpShmFree, s.Handle, nil); err != nil {
		return err
	}
	if s.reg != nil {
		s.reg.Close()
		s.reg = nil
	}
	s.Mem = nil
	return nil
}

// RegMRAt registers length bytes at off in s with I/O virtual address
// iova (ibv_reg_mr_iova); the MR's Addr is the bytes' address here.
func (d *Device) RegMRAt(pd uint32, s *Shm, off, length, iova uint64, access uint32) (*MR, error) {
	if off >= uint64(len(s.Mem)) {
		return nil, errors.New("offset outside the segment")
	}
	addr := s.Addr() + off
	r, err := d.c.Call(proto.OpRegMR, pd, &proto.RegMR{Kind: proto.MRShm, Access: access, Addr: addr, Length: length,
		IOVA: iova, Shm: s.Handle, ShmOffset: off})
	if err != nil {
		return nil, err
	}
	o := r.(*proto.MRReply)
	return &MR{Handle: o.MR, LKey: o.LKey, RKey: o.RKey, Addr: addr}, nil
}

// DeallocMW is ibv_dealloc_mw.
func (d *Device) DeallocMW(mw uint32) error {
	_, err := d.c.Call(proto.OpDeallocMW, mw, nil)
	return err
}

// DestroyAH is ibv_destroy_ah.
func (d *Device) DestroyAH(ah uint32) error {
	_, err := d.c.Call(proto.OpDestroyAH, ah, nil)
	return err
}

// CreateCQCookie is CreateCQ with the cookie the daemon echoes in the
// CQ's completion and async events.
func (d *Device) CreateCQCookie(cqe, channel uint32, cookie uint64) (*CQ, error) {
	return d.createCQ(&proto.CreateCQ{CQE: cqe, Channel: channel, Cookie: cookie})
}

// Destroy is ibv_destroy_cq; the ring is unmapped.
func (c *CQ) Destroy() error {
	if _, err := c.d.c.Call(proto.OpDestroyCQ, c.Handle, nil); err != nil {
		return err
	}
	c.close()
	return nil
}

// Ring is the CQ's completion ring (it changes with Resize). The caller
// serialises its use with Poll and Arm.
func (c *CQ) Ring() *ring.Consumer { return c.ring }

// SendRing and RecvRing are the QP's rings, for a caller that writes its
// own WQE records (one producer at a time each). Publish rings the
// doorbell when the daemon has set NEED_WAKEUP.
func (q *QP) SendRing() *ring.Producer { return q.sq }

// RecvRing is the QP's receive ring (see SendRing).
func (q *QP) RecvRing() *ring.Producer { return q.rq }

// CreateQPWith is CreateQP with every field of create_qp (an SRQ, sq_sig_all,
// the cookie).
func (d *Device) CreateQPWith(pd uint32, m proto.CreateQP) (*QP, error) {
	return d.createQP(pd, &m)
}

// Counters is query_counters of the device (handle 0) or of one of the
// session's QPs.
func (d *Device) Counters(qp uint32) ([]proto.Counter, error) {
	h := qp
	if h == 0 {
		h = d.Handle
	}
	r, err := d.c.Call(proto.OpQueryCounters, h, nil)
	if err != nil {
		return nil, err
	}
	return r.(*proto.CountersReply).Counters, nil
}

// ListQPs is every QP of the device with its owner (list_qps, walked to
// the end).
func (d *Device) ListQPs() ([]proto.QPEntry, error) {
	var all []proto.QPEntry
	start := uint32(0)
	for {
		r, err := d.c.Call(proto.OpListQPs, d.Handle, &proto.ListQPs{StartQPN: start})
		if err != nil {
			return nil, err
		}
		qs := r.(*proto.ListQPsReply).QPs
		if len(qs) == 0 {
			return all, nil
		}
		all = append(all, qs...)
		start = qs[len(qs)-1].QPN + 1
		if start == 0 {
			return all, nil
		}
	}
}

// CloseAsync closes the device's async event socket on this side, which
// ends a reader blocked in ReadAsyncEvent.
func (d *Device) CloseAsync() error { return d.Async.Close() }

// ListDevices is ibv_get_device_list: the daemon's devices.
func (c *Client) ListDevices() ([]proto.DeviceEntry, error) {
	r, err := c.Call(proto.OpListDevices, 0, nil)
	if err != nil {
		return nil, err
	}
	return r.(*proto.ListDevicesReply).Devices, nil
}
