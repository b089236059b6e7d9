package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// netPair dials from node 0 to a listener on node 1 and returns both ends.
func netPair(t *testing.T, w *world, port uint16, clientPriv, serverPriv []byte) (*Conn, *Conn, *Listener) {
	t.Helper()
	ctx := ctxT(t)
	a, b := w.nodes[0], w.nodes[1]
	l, err := Listen(b.dev, netip.AddrPortFrom(b.ip, port), nil)
	require.NoError(t, err)
	qa, qb := a.newQP(t, qp.RC), b.newQP(t, qp.RC)
	var server *Conn
	var serr error
	var wg sync.WaitGroup
	wg.Go(func() {
		r, err := l.Accept(ctx)
		if err != nil {
			serr = err
			return
		}
		if !bytes.HasPrefix(r.PrivateData, clientPriv) {
			serr = errors.New("client private data differs")
		}
		server, serr = r.Accept(ctx, qb, serverPriv)
	})
	client, err := Dial(ctx, a.dev, netip.AddrPortFrom(b.ip, port), qa, &DialOptions{PrivateData: clientPriv})
	require.NoError(t, err)
	wg.Wait()
	require.NoError(t, serr)
	require.True(t, bytes.HasPrefix(client.PeerPrivateData(), serverPriv))
	return client, server, l
}

func TestNetDialAcceptData(t *testing.T) {
	w := newWorld(t, worldOpts{agent: FastOptions(), seed: 11})
	client, server, l := netPair(t, w, 7174, []byte("client hello"), []byte("server hello"))
	defer l.Close()
	require.Equal(t, l.Addr(), client.RemoteAddr())
	require.Equal(t, client.LocalAddr(), server.RemoteAddr())

	// Data over the connection arrives byte-exact: a SEND from each side.
	a, b := w.nodes[0], w.nodes[1]
	for i, dir := range []struct {
		from, to *node
		fc, tc   *Conn
	}{{a, b, client, server}, {b, a, server, client}} {
		msg := bytes.Repeat([]byte{byte(i + 1), 0xA5, byte(i)}, 3000)
		dst := make([]byte, len(msg))
		rmr, err := dir.to.pd.Reg(dst, keys.LocalWrite)
		require.NoError(t, err)
		smr, err := dir.from.pd.Reg(msg, 0)
		require.NoError(t, err)
		require.NoError(t, dir.tc.QP().PostRecv(rvt.RecvWR{WRID: 7, SGL: []rvt.SGE{{Addr: rmr.IOVA, Length: uint32(len(dst)), Lkey: rmr.Lkey}}}))
		require.NoError(t, dir.fc.QP().PostSend(rvt.SendWR{WRID: 8, Opcode: qp.OpSend, Flags: qp.Signaled,
			SGL: []rvt.SGE{{Addr: smr.IOVA, Length: uint32(len(msg)), Lkey: smr.Lkey}}}))
		got := 0
		wc := make([]rvt.WC, 4)
		deadline := time.Now().Add(5 * time.Second)
		for got < 2 && time.Now().Before(deadline) {
			for _, c := range []*rvt.CQ{dir.from.cq, dir.to.cq} {
				n := c.Poll(wc)
				for _, x := range wc[:n] {
					require.Equal(t, rvt.WC{}.Status, x.Status, "%+v", x)
					got++
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
		require.Equal(t, 2, got)
		require.Equal(t, msg, dst)
	}

	// The client disconnects; the server learns it.
	require.NoError(t, client.Disconnect(ctxT(t)))
	select {
	case <-server.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server never saw the disconnection")
	}
	require.ErrorIs(t, server.Err(), ErrPeerDisconnected)
	require.ErrorIs(t, client.Err(), ErrClosed)
	waitClean(t, w, 1)
}

// waitClean waits (real clock) until the agents hold only the listeners.
func waitClean(t *testing.T, w *world, listeners int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok := true
		for i, n := range w.nodes {
			want := Stats{}
			if i == 1 && listeners > 0 {
				want = Stats{IDs: listeners, Ports: listeners, Listeners: listeners}
			}
			if n.agent.Stats() != want {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			requireClean(t, w, listeners)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNetRejectAndNoListener(t *testing.T) {
	w := newWorld(t, worldOpts{agent: FastOptions(), seed: 12})
	a, b := w.nodes[0], w.nodes[1]
	ctx := ctxT(t)
	l, err := Listen(b.dev, netip.AddrPortFrom(netip.IPv4Unspecified(), 99), nil)
	require.NoError(t, err)
	go func() {
		r, err := l.Accept(ctx)
		if err == nil {
			_ = r.Reject([]byte("full"))
		}
	}()
	_, err = Dial(ctx, a.dev, netip.AddrPortFrom(b.ip, 99), a.newQP(t, qp.RC), nil)
	var re *RejectError
	require.ErrorAs(t, err, &re)
	require.Equal(t, RejConsumerDefined, re.Reason)
	require.Equal(t, "full", string(re.PrivateData[:4]))

	_, err = Dial(ctx, a.dev, netip.AddrPortFrom(b.ip, 100), a.newQP(t, qp.RC), nil)
	require.ErrorIs(t, err, RejInvalidServiceID)
	require.ErrorIs(t, err, ErrRejected)
	l.Close()
	_, err = l.Accept(ctx)
	require.ErrorIs(t, err, ErrClosed)
	_, err = Listen(b.dev, netip.AddrPortFrom(b.ip, 7), nil)
	require.NoError(t, err)
	_, err = Listen(b.dev, netip.AddrPortFrom(netip.IPv4Unspecified(), 7), nil)
	require.ErrorIs(t, err, ErrAddrInUse)
}

func TestNetDisconnectBothRacing(t *testing.T) {
	w := newWorld(t, worldOpts{agent: FastOptions(), seed: 13})
	client, server, l := netPair(t, w, 1234, nil, nil)
	defer l.Close()
	var wg sync.WaitGroup
	for _, c := range []*Conn{client, server} {
		wg.Go(func() { require.NoError(t, c.Disconnect(ctxT(t))) })
	}
	wg.Wait()
	<-client.Done()
	<-server.Done()
	require.Equal(t, qp.Err, client.QP().State())
	require.Equal(t, qp.Err, server.QP().State())
	waitClean(t, w, 1)
}

func TestNetSIDR(t *testing.T) {
	w := newWorld(t, worldOpts{agent: FastOptions(), seed: 14})
	a, b := w.nodes[0], w.nodes[1]
	ctx := ctxT(t)
	l, err := Listen(b.dev, netip.AddrPortFrom(b.ip, 7174), &ListenOptions{PortSpace: PSUDP})
	require.NoError(t, err)
	defer l.Close()
	ub := b.newQP(t, qp.UD)
	require.NoError(t, PrepareUD(ub, PSUDP))
	go func() {
		r, err := l.Accept(ctx)
		if err == nil {
			_ = r.AcceptUD(ub, []byte("ud here"))
		}
	}()
	peer, err := ResolveUD(ctx, a.dev, a.pd, netip.AddrPortFrom(b.ip, 7174), nil)
	require.NoError(t, err)
	require.Equal(t, ub.Num(), peer.QPN)
	require.Equal(t, uint32(UDPQKey), peer.QKey)
	require.Equal(t, "ud here", string(peer.PrivateData[:7]))

	// A datagram to the resolved QP arrives byte-exact.
	ua := a.newQP(t, qp.UD)
	require.NoError(t, PrepareUD(ua, PSUDP))
	msg := []byte("datagram over SIDR")
	dst := make([]byte, 40+len(msg))
	rmr, err := b.pd.Reg(dst, keys.LocalWrite)
	require.NoError(t, err)
	require.NoError(t, ub.PostRecv(rvt.RecvWR{WRID: 1, SGL: []rvt.SGE{{Addr: rmr.IOVA, Length: uint32(len(dst)), Lkey: rmr.Lkey}}}))
	require.NoError(t, ua.PostSend(rvt.SendWR{Opcode: qp.OpSend, Flags: qp.Inline, InlineData: msg,
		AH: peer.AH, RemoteQPN: peer.QPN, RemoteQKey: peer.QKey}))
	wc := make([]rvt.WC, 1)
	deadline := time.Now().Add(5 * time.Second)
	for b.cq.Poll(wc) == 0 {
		require.True(t, time.Now().Before(deadline))
		time.Sleep(100 * time.Microsecond)
	}
	require.Equal(t, msg, dst[40:])
}

// PrepareConn puts the QPs in INIT with the CM's attributes, so both sides
// post receives before the connection exists; Dial and Accept take the QPs
// on from INIT, and a SEND right after ESTABLISHED finds its receive.
func TestPrepareConnRecvBeforeConnect(t *testing.T) {
	w := newWorld(t, worldOpts{agent: FastOptions(), seed: 13})
	a, b := w.nodes[0], w.nodes[1]
	ctx := ctxT(t)
	qa, qb := a.newQP(t, qp.RC), b.newQP(t, qp.RC)
	for _, q := range []*rvt.QP{qa, qb} {
		require.NoError(t, PrepareConn(q))
		require.Equal(t, qp.Init, q.State())
	}
	dst := make([]byte, 64)
	rmr, err := a.pd.Reg(dst, keys.LocalWrite)
	require.NoError(t, err)
	require.NoError(t, qa.PostRecv(rvt.RecvWR{WRID: 1, SGL: []rvt.SGE{{Addr: rmr.IOVA, Length: 64, Lkey: rmr.Lkey}}}))

	l, err := Listen(b.dev, netip.AddrPortFrom(b.ip, 7174), nil)
	require.NoError(t, err)
	defer l.Close()
	errc := make(chan error, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			errc <- err
			return
		}
		if _, err = r.Accept(ctx, qb, nil); err != nil {
			errc <- err
			return
		}
		// The server SENDs at once: the client's receive is there.
		msg := []byte("first")
		smr, err := b.pd.Reg(msg, 0)
		if err == nil {
			err = qb.PostSend(rvt.SendWR{Opcode: qp.OpSend, Flags: qp.Signaled,
				SGL: []rvt.SGE{{Addr: smr.IOVA, Length: uint32(len(msg)), Lkey: smr.Lkey}}})
		}
		errc <- err
	}()
	c, err := Dial(ctx, a.dev, netip.AddrPortFrom(b.ip, 7174), qa, nil)
	require.NoError(t, err)
	require.NoError(t, <-errc)
	wc := make([]rvt.WC, 1)
	deadline := time.Now().Add(5 * time.Second)
	for a.cq.Poll(wc) == 0 {
		require.True(t, time.Now().Before(deadline), "no receive completion")
		time.Sleep(100 * time.Microsecond)
	}
	require.Equal(t, rvt.WC{}.Status, wc[0].Status)
	require.Equal(t, "first", string(dst[:5]))
	require.NoError(t, c.Disconnect(ctx))

	ud := a.newQP(t, qp.UD)
	require.ErrorIs(t, PrepareConn(ud), ErrInvalidArgument)
}

// DialOptions.AckTimeout sets our QP's local ACK timeout (rdma_set_option
// ACK_TIMEOUT); the passive side keeps the one the REQ carries.
func TestDialAckTimeout(t *testing.T) {
	w := newWorld(t, worldOpts{agent: FastOptions(), seed: 14})
	a, b := w.nodes[0], w.nodes[1]
	ctx := ctxT(t)
	qa, qb := a.newQP(t, qp.RC), b.newQP(t, qp.RC)
	l, err := Listen(b.dev, netip.AddrPortFrom(b.ip, 7471), nil)
	require.NoError(t, err)
	defer l.Close()
	errc := make(chan error, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err == nil {
			_, err = r.Accept(ctx, qb, nil)
		}
		errc <- err
	}()
	c, err := Dial(ctx, a.dev, netip.AddrPortFrom(b.ip, 7471), qa, &DialOptions{AckTimeout: 14})
	require.NoError(t, err)
	require.NoError(t, <-errc)
	require.Equal(t, uint8(14), qa.Query().Timeout)
	require.Equal(t, FastOptions().PacketLifetime+1, qb.Query().Timeout)
	require.NoError(t, c.Disconnect(ctx))
}

// The PSNs as Linux sets them (cm.c): each side receives from the
// Starting PSN of the message it sent (REQ, REP) and sends from the
// peer's. rping.pcap shows it: the active side's first SEND carries the
// REP's Starting PSN, the passive side's first READ the REQ's.
func TestPSNsAsLinux(t *testing.T) {
	ms := loadCMMADs(t, "rping.pcap")
	reqPSN, repPSN := REQ(ms[0].mad).StartingPSN(), REP(ms[1].mad).StartingPSN()
	fh, err := os.Open(filepath.Join(capturesDir, "rping.pcap"))
	require.NoError(t, err)
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	require.NoError(t, err)
	first := map[[4]byte]uint32{} // first RC request PSN by source
	for {
		data, _, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		udp, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		v4, ok4 := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if !ok || !ok4 || udp.DstPort != 4791 || udp.Payload[0]>>5 != 0 || udp.Payload[0] == 0x11 {
			continue // not an RC request (ACKs are opcode 0x11)
		}
		if _, seen := first[[4]byte(v4.SrcIP.To4())]; !seen {
			first[[4]byte(v4.SrcIP.To4())] = binary.BigEndian.Uint32(udp.Payload[8:]) & 0xFFFFFF
		}
	}
	require.Equal(t, repPSN, first[[4]byte{10, 50, 0, 2}], "the active side sends from the REP's PSN")
	require.Equal(t, reqPSN, first[[4]byte{10, 50, 0, 1}], "the passive side sends from the REQ's PSN")

	w := newWorld(t, worldOpts{agent: FastOptions(), seed: 15})
	client, server, l := netPair(t, w, 7174, nil, nil)
	defer l.Close()
	ca, sa := client.QP().Query(), server.QP().Query()
	require.Equal(t, client.ID().localPSN, ca.RQPSN, "active: receives from its REQ's PSN")
	require.Equal(t, server.ID().localPSN, ca.SQPSN, "active: sends from the REP's PSN")
	require.Equal(t, server.ID().localPSN, sa.RQPSN, "passive: receives from its REP's PSN")
	require.Equal(t, client.ID().localPSN, sa.SQPSN, "passive: sends from the REQ's PSN")
	require.NoError(t, client.Disconnect(ctxT(t)))
}
