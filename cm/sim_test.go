package cm

// Deterministic simulation: 2-3 devices on the in-memory fabric under one
// manual clock, Inline executors, a seeded fault profile (loss up to 20%,
// duplication, reordering) on every link. Each seed runs many connections
// at once: connect, then accept (at once or late, so MRAs flow), reject
// with private data, or drop the request; established connections are
// disconnected by either side or both at once; listeners close and come
// back mid-handshake. Invariants: both ends agree (both established, or
// both learn it failed), private data arrives exactly, TIMEWAIT lasts its
// time, and in the end no comm ID, port, QP or timer is left behind.
//
//	CM_SIM_SEED=17 go test ./cm -count=1 -run '^TestCMSim$' -v
//
// replays one seed; CM_SIM_SEEDS sets how many run (default 40).

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softverbs/softverbs/netdev/faults"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

var simProfiles = []struct {
	name string
	p    *faults.Profile
}{
	{"clean", nil},
	{"loss5", &faults.Profile{Loss: 0.05}},
	{"loss20", &faults.Profile{Loss: 0.20}},
	{"dup10", &faults.Profile{Duplicate: 0.10}},
	{"reorder20", &faults.Profile{Reorder: 0.20}},
	{"mixed", &faults.Profile{Loss: 0.10, Duplicate: 0.05, Reorder: 0.10}},
}

func TestCMSim(t *testing.T) {
	first, n := uint64(1), uint64(40)
	if v := os.Getenv("CM_SIM_SEEDS"); v != "" {
		n, _ = strconv.ParseUint(v, 10, 64)
	}
	if v := os.Getenv("CM_SIM_SEED"); v != "" {
		first, _ = strconv.ParseUint(v, 10, 64)
		n = 1
	}
	// Each seed is a subtest, so that its world is closed (t.Cleanup) when
	// it ends: memory stays flat however many seeds run. The seeds run on
	// GOMAXPROCS workers.
	seeds := make(chan uint64)
	var wg sync.WaitGroup
	for range min(uint64(runtime.GOMAXPROCS(0)), n) {
		wg.Go(func() {
			for seed := range seeds {
				t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
					errs, summary := runCMSim(t, seed)
					if len(errs) > 0 {
						t.Fatalf("seed %d (%s) failed:\n  %s\nreplay: CM_SIM_SEED=%d go test ./cm -count=1 -run '^TestCMSim$' -v",
							seed, summary, strings.Join(errs, "\n  "), seed)
					}
					if testing.Verbose() {
						t.Logf("seed %d: %s", seed, summary)
					}
				})
			}
		})
	}
	for seed := first; seed < first+n; seed++ {
		seeds <- seed
	}
	close(seeds)
	wg.Wait()
}

// simSide is one end of a simulated connection.
type simSide struct {
	id          *ID
	q           *rvt.QP
	established bool
	failed      error
	disc        bool
	discAt      time.Time
	exitAt      time.Time
	gotPriv     []byte
	initiated   bool
}

type simConn struct {
	idx          int
	from, to     int
	plan         int // 0 accept, 1 late accept, 2 reject, 3 destroy request
	cpriv, spriv []byte
	rpriv        []byte
	c, s         simSide
	sPresent     bool
	discBy       int // 0 client, 1 server, 2 both
	done         bool
}

func runCMSim(t *testing.T, seed uint64) (errs []string, summary string) {
	rng := rand.New(rand.NewPCG(seed, 0xC0FFEE))
	prof := simProfiles[rng.IntN(len(simProfiles))]
	nNodes := 2 + rng.IntN(2)
	w := newWorld(t, worldOpts{n: nNodes, manual: true, faults: prof.p, seed: int64(seed), agent: FastOptions()})
	clk := w.manual
	tw := w.nodes[0].agent.timeWait()
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }

	// Events are stamped with the virtual time they happen at.
	type stamped struct {
		node int
		ev   Event
		at   time.Time
	}
	var queue []stamped
	sinks := make([]func(Event), nNodes)
	listeners := make([]*ID, nNodes)
	const port = 4000
	listen := func(i int) {
		listeners[i] = w.nodes[i].agent.newID(PSTCP, "listener", sinks[i])
		if err := listeners[i].BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), port)); err != nil {
			fail("bind: %v", err)
		}
		if err := listeners[i].Listen(); err != nil {
			fail("listen: %v", err)
		}
	}
	for i := range nNodes {
		sinks[i] = func(ev Event) { queue = append(queue, stamped{i, ev, clk.Now()}) }
		listen(i)
	}
	byID := map[*ID]*simConn{}
	nConns := 10 + rng.IntN(20)
	conns := make([]*simConn, nConns)
	closedListener := 0
	for i := range conns {
		c := &simConn{idx: i, from: rng.IntN(nNodes), plan: rng.IntN(4), discBy: rng.IntN(3)}
		c.to = (c.from + 1 + rng.IntN(nNodes-1)) % nNodes
		c.cpriv = []byte(fmt.Sprintf("conn %d from %d %x", i, c.from, rng.Uint32()))
		c.spriv = []byte(fmt.Sprintf("accept %d %x", i, rng.Uint32()))
		c.rpriv = []byte(fmt.Sprintf("reject %d", i))
		conns[i] = c
		start := time.Duration(rng.IntN(20)) * time.Millisecond
		clk.AfterFunc(start, func() {
			n := w.nodes[c.from]
			c.c.id = n.agent.newID(PSTCP, c, sinks[c.from])
			byID[c.c.id] = c
			c.c.q = n.newQP(t, qp.RC)
			_ = c.c.id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(w.nodes[c.to].ip, port))
		})
	}
	// A listener closes mid-handshake and comes back a little later.
	if rng.IntN(3) == 0 {
		i := rng.IntN(nNodes)
		clk.AfterFunc(time.Duration(rng.IntN(15))*time.Millisecond, func() {
			closedListener++
			listeners[i].Destroy()
			clk.AfterFunc(5*time.Millisecond, func() { listen(i) })
		})
	}

	disconnect := func(s *simSide) {
		s.initiated = true
		if err := s.id.Disconnect(); err != nil && s.id.State() != StateTimeWait {
			fail("disconnect: %v", err)
		}
	}
	handle := func(node int, ev Event, now time.Time) {
		var c *simConn
		if ev.Type == EventConnectRequest {
			p := ev.Param.PrivateData
			var idx int
			if _, err := fmt.Sscanf(string(p), "conn %d", &idx); err != nil || idx >= len(conns) {
				fail("request with private data %q", p)
				return
			}
			c = conns[idx]
			if !bytes.HasPrefix(p, c.cpriv) || len(bytes.Trim(p[len(c.cpriv):], "\x00")) != 0 {
				fail("conn %d: REQ private data %q", idx, p)
			}
			c.sPresent = true
			c.s.id = ev.ID
			byID[ev.ID] = c
			c.s.q = w.nodes[node].newQP(t, qp.RC)
			switch c.plan {
			case 0:
				if err := ev.ID.Accept(c.s.q, &ConnParam{PrivateData: c.spriv, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
					fail("conn %d: accept: %v", idx, err)
				}
			case 1:
				clk.AfterFunc(time.Duration(5+rng.IntN(25))*time.Millisecond, func() {
					if err := ev.ID.Accept(c.s.q, &ConnParam{PrivateData: c.spriv, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
						c.s.failed = err // the client gave up meanwhile
						ev.ID.Destroy()
					}
				})
			case 2:
				_ = ev.ID.Reject(c.rpriv)
				ev.ID.Destroy()
				c.s.failed = ErrRejected
			case 3:
				ev.ID.Destroy()
				c.s.failed = ErrClosed
			}
			return
		}
		c = byID[ev.ID]
		if c == nil {
			fail("event %v for an unknown ID", ev.Type)
			return
		}
		s, peer := &c.c, &c.s
		if ev.ID != c.c.id {
			s, peer = &c.s, &c.c
		}
		switch ev.Type {
		case EventAddrResolved:
			if err := ev.ID.Connect(s.q, &ConnParam{PrivateData: c.cpriv, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
				fail("conn %d: connect: %v", c.idx, err)
			}
		case EventEstablished:
			if s.established {
				fail("conn %d: ESTABLISHED twice", c.idx)
			}
			s.established = true
			if s == &c.c {
				s.gotPriv = ev.Param.PrivateData
				if !bytes.HasPrefix(s.gotPriv, c.spriv) {
					fail("conn %d: REP private data %q", c.idx, s.gotPriv)
				}
			}
			if c.c.established && c.s.established {
				d := time.Duration(rng.IntN(10)) * time.Millisecond
				clk.AfterFunc(d, func() {
					switch c.discBy {
					case 0:
						disconnect(&c.c)
					case 1:
						disconnect(&c.s)
					case 2:
						disconnect(&c.c)
						disconnect(&c.s)
					}
				})
			}
		case EventRejected, EventUnreachable, EventConnectError:
			s.failed = ev.Err
			if s == &c.c {
				var re *RejectError
				if asRej(ev.Err, &re) && re.Reason == RejConsumerDefined && c.plan == 2 {
					if !bytes.HasPrefix(re.PrivateData, c.rpriv) {
						fail("conn %d: REJ private data %q", c.idx, re.PrivateData)
					}
				}
			}
			ev.ID.Destroy()
		case EventDisconnected:
			s.disc, s.discAt = true, now
			if !s.initiated {
				_ = ev.ID.Disconnect()
			}
		case EventTimewaitExit:
			s.exitAt = now
			if s.disc && now.Sub(s.discAt) < tw && s.initiated {
				fail("conn %d: TIMEWAIT of %v, less than %v", c.idx, now.Sub(s.discAt), tw)
			}
			ev.ID.Destroy()
		}
		_ = peer
	}

	budget := 3 * time.Second
	for el := time.Duration(0); el < budget; el += time.Millisecond {
		for len(queue) > 0 {
			q := queue
			queue = nil
			for _, e := range q {
				handle(e.node, e.ev, e.at)
			}
		}
		clk.Advance(time.Millisecond)
	}
	for _, l := range listeners {
		l.Destroy()
	}

	// Invariants.
	est, rej, unreach := 0, 0, 0
	for _, c := range conns {
		cs, ss := &c.c, &c.s
		switch {
		case cs.established:
			est++
			if !ss.established {
				fail("conn %d: client established, server not (plan %d, server err %v)", c.idx, c.plan, ss.failed)
			}
			if !cs.disc || !ss.disc {
				fail("conn %d: disconnection not seen by both (client %v, server %v)", c.idx, cs.disc, ss.disc)
			}
			if cs.exitAt.IsZero() || ss.exitAt.IsZero() {
				fail("conn %d: no TIMEWAIT_EXIT", c.idx)
			}
			for _, q := range []*rvt.QP{cs.q, ss.q} {
				if q.State() != qp.Err {
					fail("conn %d: QP %#x in %v after the disconnection", c.idx, q.Num(), q.State())
				}
			}
		case cs.failed != nil:
			var re *RejectError
			if asRej(cs.failed, &re) {
				rej++
				if re.Reason == RejInvalidServiceID && closedListener == 0 {
					fail("conn %d: REJ 8 with every listener up", c.idx)
				}
			} else {
				unreach++
				if os.Getenv("CM_SIM_DEBUG") != "" {
					t.Logf("conn %d unreachable: plan %d, server present %v, server err %v, server state %v", c.idx, c.plan, c.sPresent, ss.failed, stateOf(ss.id))
					t.Logf("client counters %v", w.nodes[c.from].agent.Counters())
					t.Logf("server counters %v", w.nodes[c.to].agent.Counters())
				}
			}
			if ss.established {
				fail("conn %d: client failed (%v), server established", c.idx, cs.failed)
			}
		default:
			fail("conn %d: no outcome (client state %v)", c.idx, stateOf(cs.id))
		}
	}
	for i, n := range w.nodes {
		if s := n.agent.Stats(); s != (Stats{}) {
			fail("node %d leaks: %+v", i, s)
		}
	}
	summary = fmt.Sprintf("profile %s, %d nodes, %d conns: %d established, %d rejected, %d unreachable",
		prof.name, nNodes, nConns, est, rej, unreach)
	return errs, summary
}

func stateOf(id *ID) State {
	if id == nil {
		return StateIdle
	}
	return id.State()
}

func asRej(err error, re **RejectError) bool {
	r, ok := err.(*RejectError)
	if ok {
		*re = r
	}
	return ok
}
