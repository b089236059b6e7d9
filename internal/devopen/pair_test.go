package devopen

import (
	"io"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/capture"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/faults"
)

// TestRCFaultsLends: over a fabric port and a loss-only fault link the
// pair's RC fault layer lends the port's buffers, loses RC frames only
// (and only through the fault link), and takes received frames back, and
// recycles them as the port does; over a link that does not lend (a
// capture) it does not lend or recycle either.
func TestRCFaultsLends(t *testing.T) {
	clk := clock.NewManual()
	fab := fabric.New(clk, 1)
	macA, macB := netdev.MAC{2, 0, 0, 0, 0, 1}, netdev.MAC{2, 0, 0, 0, 0, 2}
	ipA, ipB := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	fab.AddAddr(ipA, macA)
	fab.AddAddr(ipB, macB)
	pa, pb := fab.NewPort(macA, 9000), fab.NewPort(macB, 9000)
	t.Cleanup(func() { pa.Close(); pb.Close() })
	var got [2]atomic.Int64 // RC, UD frames received at B
	pb.SetHandler(func(f []byte) {
		fi, err := netdev.ParseFrame(f)
		require.NoError(t, err)
		got[f[fi.PayloadOff]>>5&1].Add(1) // class 0 RC, 3 UD
		pb.Release(f)
	})
	fl, err := faults.New(pa, clk, 7, faults.Profile{Loss: 0.5})
	require.NoError(t, err)
	r := newRCFaults(pa, fl)
	require.Equal(t, netdev.Link(r), r.Lender(), "a port and a loss-only fault link lend: so does the layer")
	require.True(t, r.RecyclesFrames(), "and recycles, as the port does")

	src := netdev.Endpoint{MAC: macA, IP: ipA, Port: 0xC000}
	dst := netdev.Endpoint{MAC: macB, IP: ipB, Port: netdev.RoCEv2Port}
	frame := func(opcode byte) []byte {
		udpLen := 12 + 8 + 4
		b := r.TxFrame(netdev.HeaderLen(false) + udpLen)
		require.NotNil(t, b)
		b = b[:netdev.HeaderLen(false)+udpLen]
		require.NotZero(t, netdev.EncodeRoCEv2(b, src, dst, 64, 0, udpLen))
		b[netdev.HeaderLen(false)] = opcode
		return b
	}
	const n = 400
	for range n {
		require.NoError(t, r.SendOwned(frame(0x04))) // RC SEND_ONLY
		require.NoError(t, r.SendOwned(frame(0x64))) // UD SEND_ONLY
	}
	st := fl.Stats()
	require.EqualValues(t, n, st.Frames, "only RC frames go through the fault link")
	require.NotZero(t, st.Lost)
	require.EqualValues(t, n-st.Lost, got[0].Load())
	require.EqualValues(t, n, got[1].Load(), "UD frames are never lost")

	// Below a link that does not lend, the layer does not lend.
	c, err := capture.New(pa, clk, io.Discard)
	require.NoError(t, err)
	fl2, err := faults.New(c, clk, 7, faults.Profile{Loss: 0.5})
	require.NoError(t, err)
	require.Nil(t, newRCFaults(c, fl2).Lender())
	require.False(t, newRCFaults(c, fl2).RecyclesFrames())
}

// TestOpenPairError: a pair that cannot open (a link MTU too small for
// RoCEv2) returns the error, closing what it had opened, and does not
// panic (the deferred Close once ran on a nil result).
func TestOpenPairError(t *testing.T) {
	p, err := OpenPair(PairConfig{LinkMTU: 100})
	require.Error(t, err)
	require.Nil(t, p)
}
