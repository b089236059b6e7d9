package client

import (
	"errors"

	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/rvtd/ring"
)

// SRQ is a shared receive queue: its ring of receive records. It has no
// doorbell: the daemon takes a WQE when a message for one of its QPs
// arrives.
type SRQ struct {
	d      *Device
	Handle uint32
	MaxWR  uint32
	MaxSGE uint32
	ring   *ring.Producer
	reg    *ring.Region
	Raw    []byte // the ring, for tests that corrupt it
}

// CreateSRQ is ibv_create_srq; limit arms the SRQ limit at once (0: not).
func (d *Device) CreateSRQ(pd, maxWR, maxSGE, limit uint32, cookie uint64) (*SRQ, error) {
	r, err := d.c.Call(proto.OpCreateSRQ, pd, &proto.CreateSRQ{MaxWR: maxWR, MaxSGE: maxSGE, SRQLimit: limit, Cookie: cookie})
	if err != nil {
		return nil, err
	}
	o := r.(*proto.SRQReply)
	reg, err := ring.Map(o.FD, int(o.MapSize), false)
	if err != nil {
		return nil, err
	}
	l := ring.Layout{Offset: o.Ring.Offset, Entries: o.Ring.Entries, Stride: o.Ring.Stride}
	p, err := ring.NewProducer(reg.Bytes(), ring.KindSRQ, l, nil, true)
	if err != nil {
		reg.Close()
		return nil, err
	}
	s := &SRQ{d: d, Handle: o.SRQ, MaxWR: o.MaxWR, MaxSGE: o.MaxSGE, ring: p, reg: reg, Raw: reg.Bytes()[l.Offset : l.Offset+l.Size()]}
	d.c.own(s.close)
	return s, nil
}

// Ring is the SRQ's receive ring (one producer at a time).
func (s *SRQ) Ring() *ring.Producer { return s.ring }

func (s *SRQ) close() {
	if s.reg != nil {
		s.reg.Close()
		s.reg = nil
	}
}

// PostRecv writes one receive record to the SRQ's ring.
func (s *SRQ) PostRecv(wrid uint64, sgl ...SGE) error {
	free, err := s.ring.Free()
	if err != nil {
		return err
	}
	if free == 0 {
		return ErrFull
	}
	w := ring.RecvWQE(s.ring.Slot(0))
	clear(w)
	if len(sgl) > w.MaxSGEs() {
		return errors.New("too many SGEs")
	}
	w.SetWRID(wrid)
	w.SetNumSGE(uint8(len(sgl)))
	for i, g := range sgl {
		w.SGE(i).Set(g.Addr, g.Length, g.LKey)
	}
	_, err = s.ring.Publish(1)
	return err
}

// Modify is ibv_modify_srq with IBV_SRQ_LIMIT: arm the limit (0 disarms).
func (s *SRQ) Modify(limit uint32) error {
	_, err := s.d.c.Call(proto.OpModifySRQ, s.Handle, &proto.SRQAttr{Mask: 2, SRQLimit: limit})
	return err
}

// Query is ibv_query_srq.
func (s *SRQ) Query() (proto.SRQAttr, error) {
	r, err := s.d.c.Call(proto.OpQuerySRQ, s.Handle, nil)
	if err != nil {
		return proto.SRQAttr{}, err
	}
	return *r.(*proto.SRQAttr), nil
}

// Destroy is ibv_destroy_srq; the ring is unmapped.
func (s *SRQ) Destroy() error {
	_, err := s.d.c.Call(proto.OpDestroySRQ, s.Handle, nil)
	s.close()
	return err
}

// CreateQPOnSRQ creates a QP whose receives come from srq: it has a send
// ring only.
func (d *Device) CreateQPOnSRQ(pd uint32, typ uint8, scq, rcq *CQ, srq *SRQ, cap proto.Cap) (*QP, error) {
	cap.MaxRecvWR, cap.MaxRecvSGE = 0, 0
	return d.createQP(pd, &proto.CreateQP{Type: typ, SendCQ: scq.Handle, RecvCQ: rcq.Handle, SRQ: srq.Handle, Cap: cap})
}

// AttachMcast is ibv_attach_mcast (UD QPs).
func (q *QP) AttachMcast(gid [16]byte, lid uint16) error {
	_, err := q.d.c.Call(proto.OpAttachMcast, q.Handle, &proto.Mcast{GID: gid, LID: lid})
	return err
}

// DetachMcast is ibv_detach_mcast.
func (q *QP) DetachMcast(gid [16]byte, lid uint16) error {
	_, err := q.d.c.Call(proto.OpDetachMcast, q.Handle, &proto.Mcast{GID: gid, LID: lid})
	return err
}
