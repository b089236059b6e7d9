package rvt

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/mcast"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/qp"
)

// writeOnce runs one signaled RDMA WRITE from a to b and waits for it.
func writeOnce(t *testing.T, n *node, a *QP) {
	t.Helper()
	src, dst := n.mr(t, 4096), n.mr(t, 4096)
	require.NoError(t, a.PostSend(SendWR{WRID: 1, Opcode: qp.OpRDMAWrite, Flags: qp.Signaled,
		SGL: sge(src, 0, 64), RemoteAddr: dst.IOVA, Rkey: dst.Rkey}))
	wcs := poll(t, n.cq, 1, nil)
	require.Equal(t, cq.Success, wcs[0].Status, "%+v", wcs[0])
}

// The device's counters never go down while QPs are destroyed: a
// Counters call that races with a Destroy counts the destroyed QP's
// packets exactly once (before, during or after its removal).
func TestCountersMonotonicAcrossDestroy(t *testing.T) {
	n := newNode(t, Options{})
	const pairs = 40
	qps := make([]*QP, 0, 2*pairs)
	for range pairs {
		a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
		connect(t, a, n.d, b, n.d, defaultAttrs())
		writeOnce(t, n, a)
		qps = append(qps, a, b)
	}
	total := n.d.Counters()["sent_pkts"]
	require.Equal(t, uint64(2*pairs), total, "a WRITE and its ACK per pair")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if got := n.d.Counters()["sent_pkts"]; got != total {
				t.Errorf("sent_pkts %d while destroying QPs, want %d throughout", got, total)
				return
			}
		}
	})
	for _, q := range qps {
		require.NoError(t, q.Destroy())
	}
	close(stop)
	wg.Wait()
	require.Equal(t, total, n.d.Counters()["sent_pkts"])
}

// A destroyed QP's counts stay in the device totals once: destroying it
// again fails and adds nothing, and neither does destroying a QP after
// the device closed.
func TestDestroyQPCountsOnce(t *testing.T) {
	n := newNode(t, Options{})
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	connect(t, a, n.d, b, n.d, defaultAttrs())
	writeOnce(t, n, a)
	before := n.d.Counters()
	require.NotZero(t, before["sent_pkts"])
	refs := n.pd.Refs()

	require.NoError(t, a.Destroy())
	require.Equal(t, before, n.d.Counters(), "destroying moves the QP's counts, adds none")
	require.Equal(t, refs-1, n.pd.Refs())
	require.ErrorIs(t, a.Destroy(), ErrInvalidArgument)
	require.Equal(t, before, n.d.Counters(), "a second destroy adds nothing")
	require.Equal(t, refs-1, n.pd.Refs(), "a second destroy releases nothing")

	require.NoError(t, n.d.Close())
	require.Equal(t, before, n.d.Counters())
	require.Empty(t, n.d.QPs())
	require.NoError(t, b.Destroy(), "destroy after close releases the QP")
	require.Equal(t, before, n.d.Counters(), "destroy after close adds nothing")
	require.Equal(t, refs-2, n.pd.Refs())
	require.ErrorIs(t, b.Destroy(), ErrInvalidArgument)

	// A closed device makes no QP, and says what was refused.
	_, err := n.pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.ErrorIs(t, err, ErrClosed)
	require.Contains(t, err.Error(), "create QP")
	require.Equal(t, refs-2, n.pd.Refs(), "a refused creation takes no reference")
	_, err = n.d.AllocPD()
	require.ErrorIs(t, err, ErrClosed)
	require.Contains(t, err.Error(), "alloc PD")
}

// Deallocating a PD twice fails and frees one PD's worth of the device's
// PD limit, not two.
func TestDeallocPDTwice(t *testing.T) {
	n := newNode(t, Options{})
	var pds []*PD
	for {
		pd, err := n.d.AllocPD()
		if err != nil {
			require.ErrorIs(t, err, ErrNoResources)
			break
		}
		pds = append(pds, pd)
	}
	require.Len(t, pds, maxPD-1, "newNode allocated one")
	require.NoError(t, pds[0].Dealloc())
	require.ErrorIs(t, pds[0].Dealloc(), ErrInvalidArgument)
	_, err := n.d.AllocPD()
	require.NoError(t, err)
	_, err = n.d.AllocPD()
	require.ErrorIs(t, err, ErrNoResources, "the second dealloc freed nothing")
}

// A deallocated PD makes nothing new: every verb that creates an object
// in it fails with ErrInvalidArgument, names the PD, and takes no
// reference (libibverbs' handle is gone; the kernel's lookup fails).
func TestFreedPDCreatesNothing(t *testing.T) {
	n := newNode(t, Options{})
	pd, err := n.d.AllocPD()
	require.NoError(t, err)
	srqPD, err := n.d.AllocPD()
	require.NoError(t, err)
	srq, err := srqPD.CreateSRQ(4, 1)
	require.NoError(t, err)
	require.NoError(t, pd.Dealloc())

	creators := map[string]func() error{
		"RegMR":   func() error { _, err := pd.RegMR(make([]byte, 64), 0x1000, keys.LocalWrite); return err },
		"Reg":     func() error { _, err := pd.Reg(make([]byte, 64), keys.LocalWrite); return err },
		"AllocMR": func() error { _, err := pd.AllocMR(4); return err },
		"AllocMW": func() error { _, err := pd.AllocMW(keys.MWType2); return err },
		"CreateAH": func() error {
			_, err := pd.CreateAH(AddressVector{DGID: n.d.eng.GIDs()[0]})
			return err
		},
		"CreateSRQ": func() error { _, err := pd.CreateSRQ(4, 1); return err },
		"CreateQP": func() error {
			_, err := pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: n.cq, RecvCQ: n.cq,
				Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			return err
		},
		"CreateQP with SRQ": func() error {
			_, err := pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: n.cq, RecvCQ: n.cq, SRQ: srq,
				Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
			return err
		},
	}
	// QPs() skips reserved (nil) entries; count the table itself, so that a
	// reservation a refused creation leaves behind is seen.
	qpTable := func() int {
		n.d.mu.Lock()
		defer n.d.mu.Unlock()
		return len(n.d.qps)
	}
	qps := qpTable()
	for name, create := range creators {
		t.Run(name, func(t *testing.T) {
			err := create()
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.Contains(t, err.Error(), fmt.Sprintf("PD %d", pd.Handle))
			// Refs reads 0 on a freed PD whatever happened: Dealloc tells
			// a freed PD (still refused) from one a stray reference
			// turned live again (freed now, or busy).
			require.ErrorContains(t, pd.Dealloc(), "deallocated already", "%s took a reference", name)
		})
	}
	require.Equal(t, qps, qpTable(), "no QP number stays reserved")
	require.Equal(t, 1, srqPD.Refs(), "the SRQ's PD lends no reference to a refused QP")
	require.NoError(t, srq.Destroy())
	require.ErrorIs(t, pd.Dealloc(), ErrInvalidArgument, "still freed")
}

// A source GID index with no GID behind it is refused the same way by
// CreateAH and by Modify (as the kernel's GID attribute lookup refuses
// both), and a populated one is accepted by both.
func TestSourceGIDIndexChecked(t *testing.T) {
	n := newNode(t, Options{})
	gids := len(n.d.eng.GIDs())
	require.Less(t, gids, gidTableLen, "the test needs an empty slot in the table")
	gid, err := n.d.QueryGID(1, 1)
	require.NoError(t, err)

	_, err = n.pd.CreateAH(AddressVector{DGID: gid, SGIDIndex: uint8(gids)})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), fmt.Sprintf("source GID index %d", gids))
	_, err = n.pd.CreateAH(AddressVector{DGID: gid, SGIDIndex: uint8(gids - 1)})
	require.NoError(t, err)
	// The port, as Modify checks it: 1 (or 0, unset), never another.
	_, err = n.pd.CreateAH(AddressVector{DGID: gid, SGIDIndex: 1, Port: 7})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), "port 7")
	_, err = n.pd.CreateAH(AddressVector{DGID: gid, SGIDIndex: 1, Port: 1})
	require.NoError(t, err)

	q := n.qp(t, qp.RC)
	init := QPAttr{State: qp.Init, Port: 1, AccessFlags: keys.RemoteWrite}
	require.NoError(t, q.Modify(&init, qp.RequiredAttrs(qp.RC, qp.Reset, qp.Init)))
	rtr := QPAttr{State: qp.RTR, PathMTU: qp.MTU1024, DestQPN: q.Num(), MaxDestRdAtomic: 1,
		AV: AddressVector{DGID: gid, SGIDIndex: uint8(gids), HopLimit: 64, Port: 1}}
	err = q.Modify(&rtr, qp.RequiredAttrs(qp.RC, qp.Init, qp.RTR))
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.Contains(t, err.Error(), fmt.Sprintf("source GID index %d", gids))
	require.Equal(t, qp.Init, q.Query().State, "a refused modify changes nothing")
	rtr.AV.SGIDIndex = uint8(gids - 1)
	require.NoError(t, q.Modify(&rtr, qp.RequiredAttrs(qp.RC, qp.Init, qp.RTR)))
}

// groupLink is a fabric port that records the multicast groups the device
// joins and leaves on it (netdev.GroupJoiner).
type groupLink struct {
	*fabric.Port
	mu  sync.Mutex
	log []string // "join <group>" or "leave <group>"
	// onLeave, if set, runs inside LeaveGroup after the leave is logged
	// (set it before the call that leaves).
	onLeave func()
}

var _ netdev.GroupJoiner = (*groupLink)(nil)

func (l *groupLink) JoinGroup(g netip.Addr) error { return l.record("join " + g.String()) }

func (l *groupLink) LeaveGroup(g netip.Addr) error {
	err := l.record("leave " + g.String())
	if l.onLeave != nil {
		l.onLeave()
	}
	return err
}

func (l *groupLink) record(s string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.log = append(l.log, s)
	return nil
}

func (l *groupLink) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.log
	l.log = nil
	return r
}

// netJoins takes the log and returns its joins minus its leaves.
func (l *groupLink) netJoins() int {
	k := 0
	for _, s := range l.take() {
		if strings.HasPrefix(s, "join") {
			k++
		} else {
			k--
		}
	}
	return k
}

// groupNode is a device on a fabric port that records its group joins.
func groupNode(t *testing.T) (*node, *groupLink) {
	fab := fabric.New(nil, 1)
	mac := netdev.MAC{0x02, 0, 0, 0, 0, 0x51}
	link := &groupLink{Port: fab.NewPort(mac, 4096)}
	t.Cleanup(func() { link.Close() })
	return newNode(t, Options{Link: link, MAC: mac, Resolve: fab.Resolve}), link
}

// Destroying a QP leaves its multicast groups as DetachMcast does: the
// link leaves a group once its last member is gone.
func TestDestroyQPLeavesGroups(t *testing.T) {
	n, link := groupNode(t)
	a, b := n.qp(t, qp.UD), n.qp(t, qp.UD)
	g1, g2 := GID(netip.MustParseAddr("ff0e::101").As16()), GID(netip.MustParseAddr("ff0e::102").As16())
	require.NoError(t, n.d.AttachMcast(a, g1, 0))
	require.NoError(t, n.d.AttachMcast(b, g1, 0))
	require.NoError(t, n.d.AttachMcast(a, g2, 0))
	require.Equal(t, []string{"join ff0e::101", "join ff0e::102"}, link.take())

	require.NoError(t, a.Destroy())
	require.Equal(t, []string{"leave ff0e::102"}, link.take(), "b is still in ff0e::101")
	require.NoError(t, b.Destroy())
	require.Equal(t, []string{"leave ff0e::101"}, link.take())
	require.Zero(t, n.d.mc.Groups())
}

// A destroyed QP cannot be attached to a multicast group: the attach fails,
// naming the QP, and neither the group nor the link changes.
func TestAttachDestroyedQP(t *testing.T) {
	n, link := groupNode(t)
	a, b := n.qp(t, qp.UD), n.qp(t, qp.UD)
	g := GID(netip.MustParseAddr("ff0e::104").As16())
	require.NoError(t, n.d.AttachMcast(b, g, 0))
	require.NoError(t, a.Destroy())
	link.take()

	err := n.d.AttachMcast(a, g, 0)
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, fmt.Sprintf("QP %#x", a.Num()))
	_, members, _ := n.d.mc.Lookup(mcast.GID(g))
	require.Len(t, members, 1, "the group gained the destroyed QP")
	require.Equal(t, b.Num(), members[0].QPN())
	g2 := GID(netip.MustParseAddr("ff0e::105").As16())
	require.ErrorIs(t, n.d.AttachMcast(a, g2, 0), ErrInvalidArgument)
	require.Equal(t, 1, n.d.mc.Groups(), "a group was made for the destroyed QP")
	require.Empty(t, link.take(), "the link joined a group for the destroyed QP")
}

// Destroy racing AttachMcast: either the attach fails or Destroy detaches
// the QP again; the QP never stays in a group, and the link is in no group
// without members.
func TestAttachRacesDestroy(t *testing.T) {
	n, link := groupNode(t)
	g := GID(netip.MustParseAddr("ff0e::106").As16())
	for i := range 300 {
		q := n.qp(t, qp.UD)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var attachErr, destroyErr error
		wg.Go(func() {
			<-start
			attachErr = n.d.AttachMcast(q, g, 0)
		})
		wg.Go(func() {
			<-start
			destroyErr = q.Destroy()
		})
		close(start)
		wg.Wait()
		require.NoError(t, destroyErr)
		if attachErr != nil {
			require.ErrorIs(t, attachErr, ErrInvalidArgument, "round %d", i)
		}
		require.Zero(t, n.d.mc.Groups(), "round %d: destroyed QP %#x left in a group (attach error %v)", i, q.Num(), attachErr)
		require.Zero(t, link.netJoins(), "round %d: the link stays in an empty group", i)
	}
}

// TestDestroyLeaveHoldsAttach: while Destroy leaves on the link a group
// its QP emptied, another QP cannot attach (and join) in between: the link
// would be left while the group has a member.
func TestDestroyLeaveHoldsAttach(t *testing.T) {
	n, link := groupNode(t)
	g := GID(netip.MustParseAddr("ff0e::107").As16())
	q, other := n.qp(t, qp.UD), n.qp(t, qp.UD)
	require.NoError(t, n.d.AttachMcast(q, g, 0))
	attached := make(chan error, 1)
	var during bool
	link.onLeave = func() {
		link.onLeave = nil
		go func() { attached <- n.d.AttachMcast(other, g, 0) }()
		select {
		case err := <-attached:
			during = true
			attached <- err
		case <-time.After(50 * time.Millisecond): // blocked, as it should be
		}
	}
	require.NoError(t, q.Destroy())
	require.False(t, during, "an attach ran inside Destroy's leave")
	require.NoError(t, <-attached)
	require.Equal(t, []string{"join ff0e::107", "leave ff0e::107", "join ff0e::107"}, link.take(),
		"the link must be in the group its new member joined")
}

// QPs attaching to and detaching from one group at once leave the link
// in the group exactly while it has members: each attach that finds the
// group empty joins it, each detach that empties it leaves.
func TestMcastJoinLeaveConcurrently(t *testing.T) {
	n, link := groupNode(t)
	const racers = 4
	var qps [racers]*QP
	for i := range qps {
		qps[i] = n.qp(t, qp.UD)
	}
	g := GID(netip.MustParseAddr("ff0e::103").As16())
	in := 0
	for range 200 {
		for _, op := range []func(*QP) error{
			func(q *QP) error { return n.d.AttachMcast(q, g, 0) },
			func(q *QP) error { return n.d.DetachMcast(q, g, 0) },
		} {
			var (
				wg   sync.WaitGroup
				errs [racers]error
			)
			start := make(chan struct{})
			for i, q := range qps {
				wg.Go(func() {
					<-start
					errs[i] = op(q)
				})
			}
			close(start)
			wg.Wait()
			for _, err := range errs {
				require.NoError(t, err)
			}
			in += link.netJoins()
			_, members, _ := n.d.mc.Lookup(mcast.GID(g))
			require.Equal(t, min(len(members), 1), in, "link in the group %d times with %d members", in, len(members))
		}
	}
}

// Of QPs created as the GSI QP at once, one is QP 1 and the others fail
// with ErrBusy.
func TestCreateGSIConcurrently(t *testing.T) {
	n := newNode(t, Options{})
	const racers = 4
	for range 200 {
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			qps   [racers]*QP
			errs  [racers]error
		)
		for i := range racers {
			wg.Go(func() {
				<-start
				qps[i], errs[i] = n.pd.CreateQP(QPInitAttr{Type: qp.GSI, SendCQ: n.cq, RecvCQ: n.cq,
					Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			})
		}
		close(start)
		wg.Wait()
		var made *QP
		for i := range racers {
			if errs[i] == nil {
				require.Nil(t, made, "two GSI QPs")
				made = qps[i]
				continue
			}
			require.ErrorIs(t, errs[i], ErrBusy)
		}
		require.NotNil(t, made)
		require.Equal(t, uint32(1), made.Num())
		require.NoError(t, made.Destroy())
	}
}

// TestDestroyAHOnce checks that an AH releases its PD once: a second
// DestroyAH, or one of an AH from another device, fails and leaves the
// PD's references alone.
func TestDestroyAHOnce(t *testing.T) {
	n := newNode(t, Options{})
	other := newNode(t, Options{})
	refs := n.pd.Refs()
	ah, err := n.pd.CreateAH(AddressVector{SGIDIndex: 0})
	require.NoError(t, err)
	require.Equal(t, refs+1, n.pd.Refs())
	require.ErrorIs(t, other.d.DestroyAH(ah), ErrInvalidArgument, "another device's AH")
	require.NoError(t, n.d.DestroyAH(ah))
	require.ErrorIs(t, n.d.DestroyAH(ah), ErrInvalidArgument, "destroyed already")
	require.Equal(t, refs, n.pd.Refs(), "the PD is released once")
}
