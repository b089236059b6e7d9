package cm

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/qp"
)

// TestDeviceRemoval: when the device under an agent closes (or the agent
// itself), every ID of the agent is told once, as Linux's cma_remove_id_dev
// tells every ID bound to a removed device: DEVICE_REMOVAL in the event
// form, ErrDeviceRemoved from a blocked Listener.Accept, a Conn's Done
// closed with Err ErrDeviceRemoved and its QP in ERR; later calls on the
// IDs fail with ErrDeviceRemoved, and the agent holds nothing.
func TestDeviceRemoval(t *testing.T) {
	tests := []struct {
		name   string
		remove func(n *node) error
	}{
		{"Device.Close", func(n *node) error { return n.dev.Close() }},
		{"Agent.Close", func(n *node) error { return n.agent.Close() }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, worldOpts{agent: FastOptions(), seed: int64(40 + i)})
			a, b := w.nodes[0], w.nodes[1]
			client, server, l := netPair(t, w, 7174, nil, nil)
			_ = client

			// Event form on b: a wildcard listener, an ID bound to b's
			// address, an ID with nothing yet, and a passive ID whose
			// CONNECT_REQUEST is not answered.
			ch := NewEventChannel()
			el := b.agent.NewID(ch, PSTCP, "listener")
			require.NoError(t, el.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 7000)))
			require.NoError(t, el.Listen())
			eb := b.agent.NewID(ch, PSTCP, "bound")
			require.NoError(t, eb.BindAddr(netip.AddrPortFrom(b.ip, 7001)))
			eu := b.agent.NewID(ch, PSUDP, "new")
			cch := NewEventChannel()
			cid := a.agent.NewID(cch, PSTCP, nil)
			require.NoError(t, cid.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.ip, 7000)))
			w.expect(t, cch, EventAddrResolved)
			require.NoError(t, cid.Connect(a.newQP(t, qp.RC), nil))
			req := w.expect(t, ch, EventConnectRequest)

			// A server loop's Accept, with no deadline.
			accepted := make(chan error, 1)
			go func() {
				_, err := l.Accept(context.Background())
				accepted <- err
			}()

			require.NoError(t, tt.remove(b))

			select {
			case err := <-accepted:
				require.ErrorIs(t, err, ErrDeviceRemoved)
			case <-time.After(5 * time.Second):
				t.Fatal("Listener.Accept still blocked after the device went")
			}
			select {
			case <-server.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the server's Conn.Done not closed")
			}
			require.ErrorIs(t, server.Err(), ErrDeviceRemoved)
			require.Equal(t, qp.Err, server.QP().State())

			// One DEVICE_REMOVAL per ID, nothing else.
			told := map[*ID]int{}
			for {
				ev, ok := ch.Poll()
				if !ok {
					break
				}
				require.Equal(t, EventDeviceRemoval, ev.Type, "event %v of %v", ev.Type, ev.ID.Context())
				require.ErrorIs(t, ev.Err, ErrDeviceRemoved)
				told[ev.ID]++
			}
			require.Equal(t, map[*ID]int{el: 1, eb: 1, eu: 1, req.ID: 1}, told)

			// Closing again (the device after its agent, or twice) tells
			// nobody twice.
			require.NoError(t, b.agent.Close())
			require.NoError(t, b.dev.Close())
			_, more := ch.Poll()
			require.False(t, more, "a second DEVICE_REMOVAL")

			// Later calls fail with ErrDeviceRemoved.
			late := b.agent.NewID(ch, PSTCP, nil)
			for _, c := range []struct {
				name string
				call func() error
			}{
				{"BindAddr", func() error { return late.BindAddr(netip.AddrPortFrom(b.ip, 7002)) }},
				{"Listen", late.Listen},
				{"ResolveAddr", func() error { return eu.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(a.ip, 1)) }},
				{"Connect", func() error { return eb.Connect(nil, nil) }},
				{"listener Listen", el.Listen},
				{"Accept", func() error { return req.ID.Accept(nil, nil) }},
				{"Reject", func() error { return req.ID.Reject(nil) }},
				{"Disconnect", server.ID().Disconnect},
				{"Agent.Listen", func() error {
					_, err := b.agent.Listen(netip.AddrPortFrom(b.ip, 7003), nil)
					return err
				}},
				{"Agent.Dial", func() error {
					_, err := b.agent.Dial(ctxT(t), netip.AddrPortFrom(a.ip, 1), nil, nil)
					return err
				}},
			} {
				require.ErrorIs(t, c.call(), ErrDeviceRemoved, c.name)
			}
			for _, id := range []*ID{el, eb, eu, req.ID, late} {
				id.Destroy()
			}
			require.NoError(t, server.Close())
			require.NoError(t, l.Close())
			_, more = ch.Poll()
			require.False(t, more)
			require.Equal(t, Stats{}, b.agent.Stats())
		})
	}
}

// TestDeviceRemovalDial: a Dial waiting for its REP returns
// ErrDeviceRemoved when its device goes.
func TestDeviceRemovalDial(t *testing.T) {
	w := newWorld(t, worldOpts{seed: 43}) // Linux timings: the REQ is resent after 6 s
	a, b := w.nodes[0], w.nodes[1]
	a.agent.testDropTx = func(m MAD) bool { return m.AttrID() == AttrREQ }
	q := a.newQP(t, qp.RC)
	done := make(chan error, 1)
	go func() {
		_, err := Dial(context.Background(), a.dev, netip.AddrPortFrom(b.ip, 7174), q, nil)
		done <- err
	}()
	require.Eventually(t, func() bool { return a.agent.Stats().CommIDs == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, a.dev.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, ErrDeviceRemoved)
	case <-time.After(5 * time.Second):
		t.Fatal("Dial still blocked after its device went")
	}
}
