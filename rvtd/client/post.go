package client

import "github.com/softverbs/softverbs/rvtd/ring"

// PostSendList writes the send WQE records of wrs and publishes them
// together, as ibv_post_send with a linked list: one index store and at
// most one doorbell for the list. On an error nothing is published.
func (q *QP) PostSendList(wrs []SendWR) error {
	free, err := q.sq.Free()
	if err != nil {
		return err
	}
	if free < len(wrs) {
		return ErrFull
	}
	for k := range wrs {
		wr := &wrs[k]
		w := ring.SendWQE(q.sq.Slot(k))
		if len(wr.SGL) > w.MaxSGEs() {
			return errTooManySGEs
		}
		clear(w[:ring.SendHeaderSize])
		w.SetWRID(wr.WRID)
		w.SetOpcode(wr.Opcode)
		w.SetSendFlags(wr.Flags)
		w.SetNumSGE(uint8(len(wr.SGL)))
		w.SetImmData(wr.ImmData)
		w.SetRemoteAddr(wr.RemoteAddr)
		w.SetRKey(wr.RKey)
		w.SetCompareAdd(wr.CompareAdd)
		w.SetSwap(wr.Swap)
		w.SetAH(wr.AH)
		w.SetRemoteQPN(wr.RemoteQPN)
		w.SetRemoteQKey(wr.RemoteQKey)
		for i, s := range wr.SGL {
			w.SGE(i).Set(s.Addr, s.Length, s.LKey)
		}
		if err := putInline(w, wr); err != nil {
			return err
		}
	}
	_, err = q.sq.Publish(len(wrs))
	return err
}

// PostRecvList writes one receive record per SGE of sges (wr_ids from
// wrids) and publishes them together.
func (q *QP) PostRecvList(wrids []uint64, sges []SGE) error {
	if q.rq == nil {
		return errNoRecvRing
	}
	free, err := q.rq.Free()
	if err != nil {
		return err
	}
	if free < len(wrids) {
		return ErrFull
	}
	for k := range wrids {
		w := ring.RecvWQE(q.rq.Slot(k))
		clear(w[:ring.RecvHeaderSize])
		w.SetWRID(wrids[k])
		w.SetNumSGE(1)
		s := sges[k]
		w.SGE(0).Set(s.Addr, s.Length, s.LKey)
	}
	_, err = q.rq.Publish(len(wrids))
	return err
}
