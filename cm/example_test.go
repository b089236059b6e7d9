package cm_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// openPair opens two devices on an in-memory fabric, with an RC QP each.
func openPair(clk clock.Clock, inline bool) (devs [2]*rvt.Device, qps [2]*rvt.QP) {
	fab := fabric.New(clk, 1)
	for i := range 2 {
		mac := netdev.MAC{2, 0, 0, 0, 0, byte(i + 1)}
		ip := netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})
		fab.AddAddr(ip, mac)
		dev, err := rvt.Open(rvt.Options{Name: fmt.Sprintf("rvt%d", i), Link: fab.NewPort(mac, 1500),
			MAC: mac, Addrs: []netip.Addr{ip}, Resolve: fab.Resolve, Clock: clk, Inline: inline})
		if err != nil {
			panic(err)
		}
		pd, _ := dev.AllocPD()
		cq, _ := dev.CreateCQ(64, nil)
		q, err := pd.CreateQP(rvt.QPInitAttr{Type: qp.RC, SendCQ: cq, RecvCQ: cq,
			Cap: rvt.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			panic(err)
		}
		devs[i], qps[i] = dev, q
	}
	return devs, qps
}

// The net-like form: a server listens on port 7174 (rping's), a client
// dials with private data, the server accepts with its own; both QPs end
// in RTS, connected to each other. Then the client disconnects and the
// server learns it from Done.
func Example() {
	devs, qps := openPair(clock.Real(), false)
	defer devs[0].Close()
	defer devs[1].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	l, err := cm.Listen(devs[1], netip.MustParseAddrPort("198.18.0.2:7174"), nil)
	if err != nil {
		panic(err)
	}
	defer l.Close()
	accepted := make(chan *cm.Conn)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Printf("server: request from %v: %q\n", req.RemoteAddr.Addr(), bytes.TrimRight(req.PrivateData, "\x00"))
		c, err := req.Accept(ctx, qps[1], []byte("welcome"))
		if err != nil {
			panic(err)
		}
		accepted <- c
	}()

	c, err := cm.Dial(ctx, devs[0], netip.MustParseAddrPort("198.18.0.2:7174"), qps[0],
		&cm.DialOptions{PrivateData: []byte("hello")})
	if err != nil {
		panic(err)
	}
	s := <-accepted
	fmt.Printf("client: connected, server said %q\n", bytes.TrimRight(c.PeerPrivateData(), "\x00"))
	fmt.Println("client QP:", c.QP().State(), "server QP:", s.QP().State())

	if err := c.Disconnect(ctx); err != nil {
		panic(err)
	}
	<-s.Done()
	fmt.Println("server:", s.Err())
	// Output:
	// server: request from 198.18.0.1: "hello"
	// client: connected, server said "welcome"
	// client QP: RTS server QP: RTS
	// server: cm: peer disconnected
}

// The event form, as librdmacm's: IDs and an event channel, never
// blocking, here under a manual clock on Inline devices (deterministic);
// every event is printed with rdma_cm's name.
func ExampleID() {
	clk := clock.NewManual()
	devs, qps := openPair(clk, true)
	var agents [2]*cm.Agent
	for i, d := range devs {
		agents[i], _ = cm.NewAgent(d, cm.FastOptions())
		defer agents[i].Close()
	}
	ch := cm.NewEventChannel()
	next := func() cm.Event {
		for {
			if ev, ok := ch.Poll(); ok {
				fmt.Printf("%-7v %v\n", ev.ID.Context(), ev.Type)
				return ev
			}
			clk.Advance(time.Millisecond)
		}
	}

	listen := agents[1].NewID(ch, cm.PSTCP, "server")
	_ = listen.BindAddr(netip.MustParseAddrPort("0.0.0.0:7471"))
	_ = listen.Listen()

	client := agents[0].NewID(ch, cm.PSTCP, "client")
	_ = client.ResolveAddr(netip.Addr{}, netip.MustParseAddrPort("198.18.0.2:7471"))
	next() // ADDR_RESOLVED
	_ = client.ResolveRoute()
	next() // ROUTE_RESOLVED
	_ = client.Connect(qps[0], nil)
	req := next() // CONNECT_REQUEST, on a new ID
	_ = req.ID.Accept(qps[1], nil)
	next() // ESTABLISHED (client, after the REP)
	next() // ESTABLISHED (server, after the RTU)
	_ = client.Disconnect()
	next() // DISCONNECTED (server: the DREQ)
	_ = req.ID.Disconnect()
	next() // DISCONNECTED (client: the DREP)
	next() // TIMEWAIT_EXIT
	next() // TIMEWAIT_EXIT
	// Output:
	// client  ADDR_RESOLVED
	// client  ROUTE_RESOLVED
	// server  CONNECT_REQUEST
	// client  ESTABLISHED
	// server  ESTABLISHED
	// server  DISCONNECTED
	// client  DISCONNECTED
	// server  TIMEWAIT_EXIT
	// client  TIMEWAIT_EXIT
}
