package fabric_test

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/faults"
)

// Two ports on an in-memory fabric under a manual clock; the sender's link
// delays every frame by 5 µs.
func ExampleFabric() {
	clk := clock.NewManual()
	fab := fabric.New(clk, 1)
	a := fab.NewPort(netdev.MAC{2, 0, 0, 0, 0, 1}, 1500)
	b := fab.NewPort(netdev.MAC{2, 0, 0, 0, 0, 2}, 1500)
	fab.AddAddr(netip.MustParseAddr("10.0.0.2"), b.HardwareAddr())

	b.SetHandler(func(frame []byte) {
		fi, err := netdev.ParseFrame(frame)
		if err != nil {
			return
		}
		fmt.Printf("%v: %v:%d -> %v:%d, %q\n", clk.Now().Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)),
			fi.Src, fi.SrcPort, fi.Dst, fi.DstPort, frame[fi.PayloadOff:fi.End()])
		b.Release(frame)
	})
	link := faults.Wrap(a, clk, 7, faults.Profile{Delay: 5 * time.Microsecond})

	dstMAC, _ := fab.Resolve(netip.MustParseAddr("10.0.0.2"))
	src := netdev.Endpoint{MAC: a.HardwareAddr(), IP: netip.MustParseAddr("10.0.0.1"), Port: 0xc000}
	dst := netdev.Endpoint{MAC: dstMAC, IP: netip.MustParseAddr("10.0.0.2"), Port: netdev.RoCEv2Port}
	payload := "hello"
	buf := make([]byte, netdev.HeaderLen(false)+len(payload))
	copy(buf[netdev.HeaderLen(false):], payload)
	netdev.EncodeRoCEv2(buf, src, dst, 64, 0, len(payload))
	_ = link.Send(buf)

	clk.AdvanceToNext()
	// Output: 5µs: 10.0.0.1:49152 -> 10.0.0.2:4791, "hello"
}
