package rvtd

import (
	"net/netip"
	"sort"

	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd/proto"
	"github.com/softverbs/softverbs/transport"
)

// MULTICAST_ERROR: a join is lost when its port goes down (PORT_ERR) or
// the address it was made from leaves the device's GID table
// (GID_CHANGE). As Linux's multicast module reports a join lost to a port
// event (ENETRESET) and cma passes it on as RDMA_CM_EVENT_MULTICAST_ERROR,
// the daemon sends one record per lost join, with status -ENETRESET,
// dst_addr the group (the library matches it to the join's context) and
// ud 1, once per join. The join stays listed on the ID: the program
// leaves it (and detaches its QP), as it must over the kernel.

// mcErrStatus is -ENETRESET, the status of MULTICAST_ERROR.
const mcErrStatus = -102

// cmMcastPortEvent sends MULTICAST_ERROR for the joins of the session's
// IDs on d that a port event of type typ loses.
func (ss *session) cmMcastPortEvent(d *device, typ rvt.EventType) {
	if typ != transport.EventPortErr && typ != transport.EventGIDChange {
		return
	}
	type out struct {
		ch  *cmChanObj
		rec []byte
	}
	var l []out
	ss.mu.Lock()
	for _, o := range ss.objs {
		o, ok := o.(*cmIDObj)
		if !ok || o.dead || len(o.mc) == 0 || o.b.id == nil || o.b.d != d {
			continue
		}
		src := o.b.id.LocalAddr() // the agent's lock comes after session.mu
		if typ == transport.EventGIDChange {
			if _, ok := ss.gidIndex(d, src.Addr()); ok {
				continue // the address is still the device's
			}
		}
		groups := make([]netip.Addr, 0, len(o.mc))
		for g := range o.mc {
			if !o.mcLost[g] { // reported once, as the kernel's
				groups = append(groups, g)
			}
		}
		sort.Slice(groups, func(i, j int) bool { return groups[i].Less(groups[j]) })
		for _, g := range groups {
			r := proto.CMEvent{Context: o.ctx, ID: o.handle, Event: uint32(cm.EventMulticastError),
				Status: mcErrStatus, UD: true, Src: toCMAddr(src), Dst: toCMAddr(netip.AddrPortFrom(g, 0))}
			b := make([]byte, proto.CMEventRecordSize)
			if err := proto.PutRecord(b, &r); err != nil {
				panic(err) // a fixed layout: cannot fail
			}
			o.reported++
			if o.mcLost == nil {
				o.mcLost = make(map[netip.Addr]bool)
			}
			o.mcLost[g] = true
			l = append(l, out{o.ch, b})
		}
	}
	ss.mu.Unlock()
	for _, x := range l {
		x.ch.send(ss, x.rec)
	}
}
