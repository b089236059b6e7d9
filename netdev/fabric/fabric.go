// Package fabric is the in-memory link: an Ethernet learning switch inside
// the process whose ports are netdev.Links, with synchronous delivery
// under an injected clock, for tests and deterministic simulation.
package fabric

// Lock order: Fabric.mu, then Port.mu. Neither is held while a handler
// runs, so a handler may Send on any port (delivery may recurse).

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/faults"
)

// Fabric is an in-memory Ethernet switch. Each port has a static MAC (its
// own, entered when the port is made) and the switch also learns source MACs
// from the frames ports send. A frame to a known unicast MAC goes to that
// port, a frame to a broadcast or multicast MAC or to an unknown unicast MAC
// goes to every other port; nothing goes back to the port it came from.
//
// Delivery is synchronous: Send copies the frame into a buffer from each
// receiving port's pool and calls that port's handler before it returns;
// SendOwned hands a frame built in a buffer from TxFrame to its one
// receiving port without a copy (netdev.FrameLender). A
// handler only queues work, so a simulation on one goroutine is
// deterministic. Put a faults.Link (faults.Wrap, NewFaultyPort) in front of a
// port for loss, delay and the rest. One exception: a frame sent between
// Hold and Flush to a port with a here handler waits for the Flush
// (netdev.HereReceiver; hold.go).
//
// The fabric also keeps an IP-to-MAC table (AddAddr, Resolve) so devices
// find each other without ARP or neighbour discovery.
type Fabric struct {
	clk  clock.Clock
	seed int64

	mu    sync.RWMutex
	fdb   atomic.Pointer[map[netdev.MAC]*Port] // forwarding database (static and learned), copy-on-write
	addrs map[netip.Addr]netdev.MAC            // Resolve table, keys unmapped
	rng   *rand.Rand                           // MAC assignment and per-port fault seeds
	ports atomic.Pointer[[]*Port]              // copy-on-write snapshot for flooding
	count int                                  // ports ever made

	// pools holds the frame buffers of all ports, one pool per buffer
	// size (int -> *bufPool): a frame sent with SendOwned is
	// received in the sender's buffer, and the receiver gives it back to
	// the pool the sender took it from, so neither side allocates.
	pools sync.Map
	small *bufPool // pools' entry for smallFrame
}

// smallFrame is the size of the fabric's buffers for short frames: ACKs,
// small SENDs, READ requests and atomics (a RoCEv2 frame over IPv6 with
// the longest header, an atomic request's, is 106 bytes). With many QPs
// each having a packet or two in flight, tens of thousands of frames are
// out at once; in MTU-sized buffers (9 KB at MTU 9000) the pool runs dry
// and every short packet allocated, zeroed and later collected 9 KB.
const smallFrame = 256

// New returns an empty fabric. clk (nil: the real clock) is the clock
// of faulty ports made by NewFaultyPort; seed drives MACs NewPort assigns
// and the fault seeds of NewFaultyPort, so one seed makes one fabric.
func New(clk clock.Clock, seed int64) *Fabric {
	f := &Fabric{
		clk:   clock.OrReal(clk),
		seed:  seed,
		addrs: make(map[netip.Addr]netdev.MAC),
		rng:   rand.New(rand.NewPCG(uint64(seed), 0x6e65746465766661)),
	}
	f.ports.Store(new([]*Port))
	f.fdb.Store(&map[netdev.MAC]*Port{})
	f.small = f.poolFor(smallFrame)
	return f
}

// Clock returns the fabric's clock.
func (f *Fabric) Clock() clock.Clock { return f.clk }

// NewPort attaches a port with the given MAC and MTU (the Ethernet payload
// size, e.g. 1500). A zero MAC is replaced by a locally administered unicast
// MAC drawn from the fabric's seed. A MAC already owned by another open port
// is taken over by the new one.
func (f *Fabric) NewPort(mac netdev.MAC, mtu int) *Port {
	f.mu.Lock()
	defer f.mu.Unlock()
	if mac.IsZero() {
		for {
			var m netdev.MAC
			v := f.rng.Uint64()
			for i := range m {
				m[i] = byte(v >> (8 * i))
			}
			m[0] = m[0]&^1 | 2 // unicast, locally administered
			if _, used := (*f.fdb.Load())[m]; !used && !m.IsZero() {
				mac = m
				break
			}
		}
	}
	p := &Port{
		fabric: f,
		mac:    mac,
		mtu:    mtu,
		pool:   f.poolFor(netdev.MaxFrameLen(mtu)),
		index:  f.count,
	}
	f.count++
	f.editFDBLocked(func(fdb map[netdev.MAC]*Port) { fdb[mac] = p })
	old := *f.ports.Load()
	ports := make([]*Port, len(old), len(old)+1)
	copy(ports, old)
	ports = append(ports, p)
	f.ports.Store(&ports)
	return p
}

// NewFaultyPort attaches a port and wraps it with faults.Wrap, using the
// fabric's clock and a fault seed derived from the fabric's seed and the
// order in which ports were made. It returns the port (for Stats and
// Release) and the faulty link to use for sending.
func (f *Fabric) NewFaultyPort(mac netdev.MAC, mtu int, fl faults.Profile) (*Port, *faults.Link, error) {
	if err := fl.Validate(); err != nil {
		return nil, nil, fmt.Errorf("new faulty port: %w", err)
	}
	p := f.NewPort(mac, mtu)
	seed := f.seed ^ int64(p.index+1)*0x5851f42d4c957f2d
	l, err := faults.New(p, f.clk, seed, fl)
	if err != nil {
		_ = p.Close()
		return nil, nil, err
	}
	return p, l, nil
}

// poolFor returns the fabric's pool of buffers of size bytes.
func (f *Fabric) poolFor(size int) *bufPool {
	if v, ok := f.pools.Load(size); ok {
		return v.(*bufPool)
	}
	v, _ := f.pools.LoadOrStore(size, newBufPool(size))
	return v.(*bufPool)
}

// AddAddr records that ip lives at mac, for Resolve. IPv4 and IPv4-mapped
// forms of one address are the same entry.
func (f *Fabric) AddAddr(ip netip.Addr, mac netdev.MAC) {
	f.mu.Lock()
	f.addrs[ip.Unmap()] = mac
	f.mu.Unlock()
}

// RemoveAddr forgets ip.
func (f *Fabric) RemoveAddr(ip netip.Addr) {
	f.mu.Lock()
	delete(f.addrs, ip.Unmap())
	f.mu.Unlock()
}

// Resolve returns the MAC recorded for ip by AddAddr. Multicast addresses
// resolve to their Ethernet group MAC without an entry.
func (f *Fabric) Resolve(ip netip.Addr) (netdev.MAC, bool) {
	if m, ok := netdev.MulticastMAC(ip); ok {
		return m, true
	}
	f.mu.RLock()
	m, ok := f.addrs[ip.Unmap()]
	f.mu.RUnlock()
	return m, ok
}

// lookup returns the port for dst, or nil to flood. It learns src on from.
func (f *Fabric) lookup(from *Port, src, dst netdev.MAC) *Port {
	fp := f.fdb.Load()
	if c := from.fwd.Load(); c != nil && c.fdb == fp && c.src == src && c.dst == dst {
		return c.to
	}
	fdb := *fp
	known := fdb[src]
	var to *Port
	if !dst.IsMulticast() {
		to = fdb[dst]
	}
	if known != from && !src.IsMulticast() {
		f.mu.Lock()
		// A port's own MAC is static: never move it by learning. Nor learn a
		// port closed since Send checked: Close marks it closed before
		// detach takes f.mu, so checking under f.mu means detach either
		// already removed it (and it must not come back) or will.
		if cur := (*f.fdb.Load())[src]; cur != from && (cur == nil || cur.mac != src) && !from.closed.Load() {
			f.editFDBLocked(func(fdb map[netdev.MAC]*Port) { fdb[src] = from })
		}
		f.mu.Unlock()
	} else {
		from.fwd.Store(&fwdEntry{fdb: fp, src: src, dst: dst, to: to})
	}
	return to
}

// fwdEntry is a port's last forwarding decision: frames from src to dst
// go to to (nil: flood) while the forwarding database is fdb, and src
// needs no learning. The database is replaced on every change, so a
// decision made for an older one is never used.
type fwdEntry struct {
	fdb      *map[netdev.MAC]*Port
	src, dst netdev.MAC
	to       *Port
}

// editFDBLocked publishes a copy of the forwarding database changed by
// edit. Send reads the published map without a lock, so it is replaced,
// never changed; that happens only when a port comes, goes or moves.
func (f *Fabric) editFDBLocked(edit func(fdb map[netdev.MAC]*Port)) {
	fdb := maps.Clone(*f.fdb.Load())
	edit(fdb)
	f.fdb.Store(&fdb)
}

func (f *Fabric) detach(p *Port) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.editFDBLocked(func(fdb map[netdev.MAC]*Port) {
		maps.DeleteFunc(fdb, func(_ netdev.MAC, q *Port) bool { return q == p })
	})
	old := *f.ports.Load()
	ports := make([]*Port, 0, len(old))
	for _, q := range old {
		if q != p {
			ports = append(ports, q)
		}
	}
	f.ports.Store(&ports)
}

// PortStats counts one port's traffic. Tx counts frames the port's user
// sent into the fabric, Rx frames the fabric delivered to the handler.
type PortStats struct {
	TxFrames, TxBytes uint64
	TxDropped         uint64 // too long or too short to send
	RxFrames, RxBytes uint64
	RxDropped         uint64 // longer than this port's MTU, no handler, or closed
}

// Port is one port of a Fabric; it implements Link, Releaser and
// FrameLender.
type Port struct {
	fabric *Fabric
	mac    netdev.MAC
	mtu    int
	index  int
	pool   *bufPool

	netdev.Receiver
	closed atomic.Bool
	fwd    atomic.Pointer[fwdEntry] // the last lookup's answer

	tx        netdev.FrameCount
	txDropped atomic.Uint64

	// Frames sent inside a hold to ports with a here handler wait in
	// kept for a Flush (netdev.HereReceiver; hold.go).
	holders atomic.Int32
	here    atomic.Pointer[netdev.Handler]
	held    atomic.Int32 // len(kept), read without keptMu
	keptMu  sync.Mutex   // guards the fields below
	kept    []keptFrame
	spare   []keptFrame // kept's other backing array
	drainer bool        // a goroutine is delivering kept frames
}

var (
	_ netdev.Link     = (*Port)(nil)
	_ netdev.Releaser = (*Port)(nil)

	_ netdev.FrameLender  = (*Port)(nil)
	_ netdev.Holder       = (*Port)(nil)
	_ netdev.HereReceiver = (*Port)(nil)
)

// Send forwards frame through the fabric, delivering it to the receiving
// ports' handlers before it returns. It returns ErrClosed after Close and
// ErrFrameTooLong or ErrTruncated (counted as TxDropped) for a frame longer
// than the MTU allows or shorter than an Ethernet header.
func (p *Port) Send(frame []byte) error {
	if err := p.checkTx(frame); err != nil {
		return err
	}
	eth := netdev.Ethernet(frame)
	f := p.fabric
	if to := f.lookup(p, eth.Src(), eth.Dst()); to != nil {
		switch {
		case to == p:
		case p.keeps(to):
			if b := to.copyIn(frame); b != nil {
				p.keep(to, b)
			}
		default:
			to.arrive(frame)
		}
		return nil
	}
	p.flood(frame)
	return nil
}

// checkTx checks and counts a frame p's user sends.
func (p *Port) checkTx(frame []byte) error {
	if p.closed.Load() {
		return netdev.ErrClosed
	}
	if len(frame) < netdev.EthernetHeaderLen {
		p.txDropped.Add(1)
		return netdev.ErrTruncated
	}
	if netdev.FrameTooLong(frame, p.mtu) {
		p.txDropped.Add(1)
		return netdev.ErrFrameTooLong
	}
	p.tx.Add(1, uint64(len(frame)))
	return nil
}

// flood delivers a copy of frame to every port but p.
func (p *Port) flood(frame []byte) {
	for _, q := range *p.fabric.ports.Load() {
		if q != p {
			q.arrive(frame)
		}
	}
}

// Lender returns p (netdev.FrameLender).
func (p *Port) Lender() netdev.Link { return p }

// TxFrame returns a buffer of at least n bytes from the fabric's pools
// (netdev.FrameLender).
func (p *Port) TxFrame(n int) []byte {
	if n <= smallFrame {
		return p.fabric.small.Get()
	}
	if n <= p.pool.Size() {
		return p.pool.Get()
	}
	if n > 1<<16 {
		return nil
	}
	return p.fabric.poolFor((n + 1023) &^ 1023).Get()
}

// RecyclesFrames reports true: a frame delivered to p is in a buffer of
// the fabric's pools, which p's user may send again (netdev.FrameRecycler).
func (p *Port) RecyclesFrames() bool { return true }

// SendOwned is Send for a frame built in a buffer from TxFrame
// (netdev.FrameLender): a frame to one port is delivered in that buffer,
// without a copy; one flooded is copied to each port as Send does. The
// buffer is the fabric's again whatever happens.
func (p *Port) SendOwned(frame []byte) error {
	if err := p.checkTx(frame); err != nil {
		p.Release(frame)
		return err
	}
	eth := netdev.Ethernet(frame)
	if to := p.fabric.lookup(p, eth.Src(), eth.Dst()); to != nil {
		switch {
		case to == p:
			p.Release(frame)
		case p.keeps(to):
			p.keep(to, frame)
		default:
			to.take(frame)
		}
		return nil
	}
	p.flood(frame)
	p.Release(frame)
	return nil
}

// arrive delivers a frame the fabric forwards to p. With no handler set,
// deliver counts the frame as dropped and puts its buffer back.
func (p *Port) arrive(frame []byte) {
	if b := p.copyIn(frame); b != nil {
		p.Deliver(b, len(b), p)
	}
}

// copyIn returns a copy of frame in a buffer of p's, or nil if p drops
// it (closed, or too long for p: counted).
func (p *Port) copyIn(frame []byte) []byte {
	if p.closed.Load() || netdev.FrameTooLong(frame, p.mtu) {
		p.CountDropped()
		return nil
	}
	pool := p.pool
	if len(frame) <= smallFrame {
		pool = p.fabric.small
	}
	b := pool.Get()[:len(frame)]
	copy(b, frame)
	return b
}

// take delivers a frame the fabric forwards to p in the sender's buffer.
func (p *Port) take(frame []byte) { p.takeWith(nil, frame) }

// takeWith is take with handler h (nil: the one set; see
// netdev.Receiver.DeliverWith).
func (p *Port) takeWith(h *netdev.Handler, frame []byte) {
	if p.closed.Load() || netdev.FrameTooLong(frame, p.mtu) {
		p.CountDropped()
		p.Release(frame)
		return
	}
	p.DeliverWith(h, frame, len(frame), p)
}

// HardwareAddr returns the port's MAC.
func (p *Port) HardwareAddr() netdev.MAC { return p.mac }

// MTU returns the port's MTU.
func (p *Port) MTU() int { return p.mtu }

// Release returns a frame's buffer (received, or from TxFrame) to the
// fabric's pool of its size, or else to the port's own pool.
func (p *Port) Release(frame []byte) {
	if c := cap(frame); c != p.pool.Size() {
		if c == smallFrame { // an ACK's: no map lookup for the commonest
			p.fabric.small.Put(frame)
			return
		}
		if v, ok := p.fabric.pools.Load(c); ok {
			v.(*bufPool).Put(frame)
			return
		}
	}
	p.pool.Put(frame)
}

// Close detaches the port from the fabric. It is idempotent.
func (p *Port) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.fabric.detach(p)
	return nil
}

// Stats returns a snapshot of the port's counters.
func (p *Port) Stats() PortStats {
	rxFrames, rxBytes, rxDropped := p.RxCounts()
	txFrames, txBytes := p.tx.Load()
	return PortStats{
		TxFrames:  txFrames,
		TxBytes:   txBytes,
		TxDropped: p.txDropped.Load(),
		RxFrames:  rxFrames,
		RxBytes:   rxBytes,
		RxDropped: rxDropped,
	}
}
