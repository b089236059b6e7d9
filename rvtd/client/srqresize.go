package client

import (
	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/rvtd/ring"
)

// Resize is ibv_modify_srq with IBV_SRQ_MAX_WR: the daemon passes a new
// ring of at least maxWR entries holding the WQEs it has not taken yet;
// posting goes on there. No PostRecv may run meanwhile.
func (s *SRQ) Resize(maxWR uint32) error {
	r, err := s.d.c.Call(proto.OpResizeSRQ, s.Handle, &proto.ResizeSRQ{MaxWR: maxWR})
	if err != nil {
		return err
	}
	o := r.(*proto.SRQReply)
	reg, err := ring.Map(o.FD, int(o.MapSize), false)
	if err != nil {
		return err
	}
	l := ring.Layout{Offset: o.Ring.Offset, Entries: o.Ring.Entries, Stride: o.Ring.Stride}
	p, err := ring.NewProducer(reg.Bytes(), ring.KindSRQ, l, nil, true)
	if err != nil {
		reg.Close()
		return err
	}
	s.close()
	s.ring, s.reg, s.MaxWR = p, reg, o.MaxWR
	s.Raw = reg.Bytes()[l.Offset : l.Offset+l.Size()]
	return nil
}
