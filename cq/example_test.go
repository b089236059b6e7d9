package cq_test

import (
	"context"
	"fmt"

	"github.com/softverbs/softverbs/cq"
)

// A consumer waits on a completion channel, re-arms, and drains the CQ; a
// producer (here inline, normally a transport worker) pushes completions.
func Example() {
	c, err := cq.New(16)
	if err != nil {
		panic(err)
	}
	ch := cq.NewChannel(4)
	c.Attach(ch)
	if err := c.Arm(false); err != nil {
		panic(err)
	}

	c.Push(&cq.WC{WRID: 1, Opcode: cq.Send, Status: cq.Success})
	c.Push(&cq.WC{WRID: 2, Opcode: cq.Recv, Status: cq.WRFlushErr})

	got, err := ch.Get(context.Background())
	if err != nil {
		panic(err)
	}
	got.AckEvents(1)
	_ = got.Arm(false) // re-arm before draining, so no completion is missed
	wcs := make([]cq.WC, 8)
	n := got.Poll(wcs)
	for _, wc := range wcs[:n] {
		fmt.Printf("wr %d %v: %v\n", wc.WRID, wc.Opcode, wc.Status)
	}
	fmt.Println(c.Destroy())
	// Output:
	// wr 1 SEND: success
	// wr 2 RECV: Work Request Flushed Error
	// <nil>
}
