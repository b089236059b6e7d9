package rvtd

import (
	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/rvtd/ring"
)

// resizeSRQ serves resize_srq (ibv_modify_srq with IBV_SRQ_MAX_WR, as
// rxe resizes its queue): a new ring of at least m.MaxWR entries replaces
// the old. The WQEs the daemon has not taken yet are copied into it, in
// order, from index 0; the client, which stopped posting before asking,
// goes on from the new ring's producer index. As rxe: EINVAL for 0, more
// than the device's max_srq_wr, fewer than the armed limit, or fewer than
// the WQEs the ring holds; WQEs the engine already took stay there.
func (ss *session) resizeSRQ(h uint32, m *proto.ResizeSRQ) (proto.Body, []int, error) {
	s := lookup[srqObj](ss, h)
	if s == nil || m.MaxWR == 0 || m.MaxWR > maxWR {
		return nil, nil, proto.EINVAL
	}
	entries := pow2(m.MaxWR)
	if err := ss.takeFDs(1, proto.ENOMEM); err != nil { // the new memfd, until the reply
		return nil, nil, err
	}
	passed := false
	defer func() {
		if !passed {
			ss.putFDs(1)
		}
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead || s.failed || (s.limit != 0 && m.MaxWR < s.limit) {
		return nil, nil, proto.EINVAL
	}
	used, err := s.c.Available()
	if err != nil {
		s.faultLocked(err)
		return nil, nil, proto.EINVAL
	}
	if used > int(entries) {
		return nil, nil, proto.EINVAL // the new ring cannot hold what is posted
	}
	l := ring.Layout{Offset: 0, Entries: entries, Stride: ring.RecvStride(s.maxSGE)}
	reg, err := ring.Create("rvtd-srq", int(l.Size()))
	if err != nil {
		return nil, nil, proto.ENOMEM
	}
	var c *ring.Consumer
	err = ring.Init(reg.Bytes(), ring.KindSRQ, l)
	if err == nil {
		var p *ring.Producer
		if p, err = ring.NewProducer(reg.Bytes(), ring.KindSRQ, l, nil, false); err == nil {
			for k := 0; k < used; k++ {
				copy(p.Slot(k), s.c.Slot(k))
			}
			_, err = p.Publish(used)
		}
	}
	if err == nil {
		c, err = ring.NewConsumer(reg.Bytes(), ring.KindSRQ, l, nil, false)
	}
	if err != nil {
		reg.Close()
		return nil, nil, err
	}
	s.c.Release(used)
	_ = s.reg.Close()
	s.reg, s.c, s.maxWR = reg, c, entries
	s.buf = make([]byte, l.Stride)
	fd := reg.TakeFD() // passed, then closed: the daemon keeps its mapping
	passed = true
	return &proto.SRQReply{SRQ: s.handle, MaxWR: entries, MaxSGE: s.maxSGE, MapSize: uint64(len(reg.Bytes())),
		Ring: proto.RingLayout{Offset: 0, Entries: entries, Stride: l.Stride}, FD: fd}, []int{fd}, nil
}
