package rvt

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/qp"
)

// node is a device with a PD and a CQ, for tests.
type node struct {
	d  *Device
	pd *PD
	cq *CQ
}

// fabricOptions adds device i (1, 2, ...) to fab, MAC 02:00:00:00:00:i
// and GID source 198.18.0.i on a jumbo port, and returns the Options that
// open it there (the caller may wrap Link).
func fabricOptions(fab *fabric.Fabric, i byte) Options {
	mac := netdev.MAC{0x02, 0, 0, 0, 0, i}
	ip := netip.AddrFrom4([4]byte{198, 18, 0, i})
	fab.AddAddr(ip, mac)
	return Options{Link: fab.NewPort(mac, 9000), MAC: mac,
		Addrs: []netip.Addr{netip.MustParseAddr("fe80::1"), ip}, Resolve: fab.Resolve}
}

// fabricNodes opens two inline devices on a fresh fabric under clk
// (fabricOptions 1 and 2).
func fabricNodes(t *testing.T, clk clock.Clock) (na, nb *node) {
	t.Helper()
	f := fabric.New(clk, 1)
	open := func(i byte) *node {
		o := fabricOptions(f, i)
		o.Inline, o.Clock = true, clk
		return newNode(t, o)
	}
	return open(1), open(2)
}

func newNode(t *testing.T, o Options) *node {
	t.Helper()
	if o.Workers == 0 && !o.Inline {
		o.Inline = true
	}
	d, err := Open(o)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	pd, err := d.AllocPD()
	require.NoError(t, err)
	c, err := d.CreateCQ(4096, nil)
	require.NoError(t, err)
	return &node{d: d, pd: pd, cq: c}
}

func (n *node) qp(t *testing.T, typ QPType) *QP {
	t.Helper()
	q, err := n.pd.CreateQP(QPInitAttr{Type: typ, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}})
	require.NoError(t, err)
	return q
}

func (n *node) mr(t *testing.T, size int) *MR {
	t.Helper()
	mr, err := n.pd.Reg(make([]byte, size), keys.LocalWrite|keys.RemoteWrite|keys.RemoteRead|keys.RemoteAtomic)
	require.NoError(t, err)
	return mr
}

// rcAttrs are the attributes connect uses.
type rcAttrs struct {
	mtu        MTU
	timeout    uint8
	retry, rnr uint8
	minRNR     uint8
	access     keys.Access
}

func defaultAttrs() rcAttrs {
	return rcAttrs{mtu: qp.MTU1024, timeout: 14, retry: 7, rnr: 7, minRNR: 1,
		access: keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic}
}

// connect moves a and b (on devices da and db) to RTS, connected to each
// other through GID index 1 of each device.
func connect(t testing.TB, a *QP, da *Device, b *QP, db *Device, at rcAttrs) {
	t.Helper()
	bringUp(t, a, b, db, at)
	bringUp(t, b, a, da, at)
}

// bringUp moves q to RTS with peer (on device pd) as its destination.
func bringUp(t testing.TB, q *QP, peer *QP, pd *Device, at rcAttrs) {
	t.Helper()
	{
		gid, err := pd.QueryGID(1, 1)
		require.NoError(t, err)
		typ := q.Type()
		init := QPAttr{State: qp.Init, PkeyIndex: 0, Port: 1, AccessFlags: at.access, QKey: 0x1111}
		require.NoError(t, q.Modify(&init, qp.RequiredAttrs(typ, qp.Reset, qp.Init)))
		rtr := QPAttr{State: qp.RTR, PathMTU: at.mtu, DestQPN: peer.Num(), RQPSN: 0x123456,
			MaxDestRdAtomic: 16, MinRNRTimer: at.minRNR,
			AV: AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, Port: 1}}
		require.NoError(t, q.Modify(&rtr, qp.RequiredAttrs(typ, qp.Init, qp.RTR)))
		rts := QPAttr{State: qp.RTS, SQPSN: 0x123456, Timeout: at.timeout, RetryCnt: at.retry,
			RNRRetry: at.rnr, MaxRdAtomic: 16}
		require.NoError(t, q.Modify(&rts, qp.RequiredAttrs(typ, qp.RTR, qp.RTS)))
	}
}

// poll waits (up to 10 s of real time, or by advancing a manual clock
// through step) until n completions arrived on c.
func poll(t *testing.T, c *CQ, n int, step func()) []WC {
	t.Helper()
	var out []WC
	buf := make([]WC, 64)
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		k := c.Poll(buf)
		out = append(out, buf[:k]...)
		if k == 0 {
			if step != nil {
				step()
			}
			if time.Now().After(deadline) {
				require.Failf(t, "timeout", "got %d of %d completions: %+v", len(out), n, out)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return out
}
