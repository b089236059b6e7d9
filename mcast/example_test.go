package mcast_test

import (
	"errors"
	"fmt"

	"github.com/softverbs/softverbs/mcast"
)

type qp uint32

func (q qp) QPN() uint32 { return uint32(q) }

func Example() {
	t := mcast.NewTable(64, 16)
	mgid, _ := mcast.ParseGID("ff0e::1:2")

	_ = t.Attach(mgid, 0xc001, qp(0x11))
	_ = t.Attach(mgid, 0xc001, qp(0x12))
	err := t.Attach(mgid, 0xc001, qp(0x11))
	fmt.Println(errors.Is(err, mcast.ErrExists))

	// The receive path: one lookup per packet, deliver to each member.
	if mlid, members, ok := t.Lookup(mgid); ok {
		for _, m := range members {
			fmt.Printf("%v mlid %#x -> qp %#x\n", mgid, mlid, m.QPN())
		}
	}

	_ = t.Detach(mgid, 0xc001, qp(0x11))
	_ = t.Detach(mgid, 0xc001, qp(0x12))
	fmt.Println(t.Groups())
	// Output:
	// true
	// ff0e::1:2 mlid 0xc001 -> qp 0x11
	// ff0e::1:2 mlid 0xc001 -> qp 0x12
	// 0
}
