package rvt_test

import (
	"fmt"

	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// A program moves between an embedded device and one served by rvtd by
// the line that opens it; everything after is the same code. Buffers from
// AllocBuf are reached without copying either way (through rvtd: shared
// memory the daemon maps too).
func ExampleDial() {
	dev, err := rvt.Dial("", "rvt0") // or: rvt.Open(rvt.Options{Name: "rvt0"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	pd, _ := dev.AllocPD()
	buf, _ := dev.AllocBuf(4096)
	mr, _ := pd.Reg(buf, keys.LocalWrite)
	cq, _ := dev.CreateCQ(16, nil)
	q, _ := pd.CreateQP(rvt.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq,
		Cap: rvt.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	_ = q.PostRecv(rvt.RecvWR{WRID: 1, SGL: []rvt.SGE{{Addr: mr.IOVA, Length: 4096, Lkey: mr.Lkey}}})
	wcs := make([]rvt.WC, 16)
	_ = cq.Poll(wcs) // through rvtd: reads the shared-memory completion ring
}
