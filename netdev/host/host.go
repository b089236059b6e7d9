// Package host makes softverbs a host of its own on an Ethernet segment:
// Host wraps any netdev.Link (a TAP, a fabric port), answers ARP and IPv6
// neighbour discovery for its addresses, resolves peers, and announces
// multicast membership with IGMP and MLD.
package host

// Lock order: Host.mu only. It is never held while the host calls the
// wrapped link, the upper handler or a clock method that runs timers, so a
// synchronous link (the fabric) may deliver a reply inside Send.

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
)

// Neighbour-cache timing. The names follow Linux's neigh parameters.
const (
	// ReachableTime is how long a confirmed neighbour is used without
	// asking again.
	ReachableTime = 30 * time.Second
	// StaleTime is how long after ReachableTime a neighbour is still used
	// while it is being re-resolved; an entry not confirmed by then is
	// forgotten and Resolve fails until a reply arrives.
	StaleTime = 5 * time.Second
	// ProbeInterval is the least time between two requests (ARP request or
	// neighbour solicitation) for one address, however often Resolve is
	// asked: Linux's retrans_time (1 s; measured against Linux 6.1 in the
	// rxe guest: rdma_resolve_addr to an absent neighbour sends its ARP
	// requests 1.0 s apart, three in its 2 s).
	ProbeInterval = RetransTime
	// MaxNeighbours bounds the cache; when it is full, expired entries are
	// dropped first and new unresolved addresses are not tracked.
	MaxNeighbours = 4096
)

// The queue of frames waiting for a neighbour being resolved (Linux's
// arp_queue; see NeighbourQueuer in netdev).
const (
	// UnresQLen bounds the frames held for one unresolved neighbour
	// (Linux's unres_qlen as it was before it became a byte count: 3).
	// The oldest is dropped to make room, as Linux does.
	UnresQLen = 3
	// UnresQLenBytes bounds the bytes held for one unresolved neighbour.
	UnresQLenBytes = 64 << 10
	// RetransTime is the time between requests for a neighbour that has
	// frames waiting (Linux's retrans_time).
	RetransTime = time.Second
	// MaxSolicit is how many requests (one each RetransTime) a neighbour
	// with frames waiting gets: MaxSolicit×RetransTime after the first
	// frame was queued with no answer, resolution has failed and the
	// frames are dropped (Linux's mcast_solicit).
	MaxSolicit = 3
)

// Announcements of a new address are repeated: RFC 5227's ANNOUNCE_NUM
// and ANNOUNCE_INTERVAL for a gratuitous ARP, RFC 4861's
// MAX_NEIGHBOR_ADVERTISEMENT and RetransTimer for an unsolicited
// neighbour advertisement. A peer that missed the first (the TAP was put
// in a bridge after the host started, the bridge was still learning)
// still replaces the MAC it held for the address.
const (
	AnnounceNum        = 2
	AnnounceInterval   = 2 * time.Second
	AnnounceNumV6      = 3
	AnnounceIntervalV6 = time.Second
)

// ARP (RFC 826) over Ethernet for IPv4: the 28-byte packet after the
// Ethernet header.
const (
	arpLen     = 28
	arpHType   = 0 // 1: Ethernet
	arpPType   = 2 // 0x0800
	arpHLen    = 4 // 6
	arpPLen    = 5 // 4
	arpOp      = 6 // 1 request, 2 reply
	arpSHA     = 8
	arpSPA     = 14
	arpTHA     = 18
	arpTPA     = 24
	arpRequest = 1
	arpReply   = 2
)

// ICMPv6 neighbour discovery (RFC 4861).
const (
	icmp6Type     = 0
	icmp6Code     = 1
	icmp6Checksum = 2
	ndFlags       = 4 // NA: R S O in the top bits
	ndTarget      = 8
	ndOptions     = 24 // first option after the target
	ndLen         = 32 // NS/NA with one link-layer address option

	icmp6NS           = 135
	icmp6NA           = 136
	icmp6MLDv2Report  = 143
	ndOptSourceLLAddr = 1
	ndOptTargetLLAddr = 2

	naRouter    = 0x80
	naSolicited = 0x40
	naOverride  = 0x20
)

// Stats counts what a Host did.
type Stats struct {
	ARPRequestsSent, ARPRepliesSent uint64
	NSSent, NASent                  uint64
	Learned                         uint64 // neighbour entries created or updated
	Consumed                        uint64 // ARP/ND frames handled and not passed up
	Filtered                        uint64 // unicast frames for another MAC, dropped
	Malformed                       uint64 // ARP/ND frames too short or with a bad checksum
	RxFrames, RxBytes               uint64 // frames passed to the handler
	RxDropped                       uint64 // frames to pass up that found no handler set

	// Frames sent for a neighbour not resolved yet (NeighbourQueuer).
	UnresQueued   uint64 // queued to wait for the neighbour's MAC
	UnresSent     uint64 // sent once the neighbour answered
	UnresOverflow uint64 // dropped to make room (UnresQLen, UnresQLenBytes)
	UnresFailed   uint64 // dropped: no answer in time, no IP destination, cache full, host closed
}

type neighState uint8

const (
	neighIncomplete neighState = iota // asked, no answer yet
	neighReachable                    // confirmed at confirmed
)

type neighbour struct {
	mac       netdev.MAC
	state     neighState
	confirmed time.Time // last confirmation (reachable)
	probed    time.Time // last request sent

	// Frames waiting for the MAC (copies, destination MAC zero); while
	// there are any, the neighbour is in Host.waiting.
	queue  [][]byte
	qbytes int
	qsince time.Time // when the first of them was queued
}

// dueLocked returns when the host's timer must next look at a neighbour
// with frames waiting: its next request, or the end of its resolution.
func (n *neighbour) dueLocked() time.Time {
	next := n.probed.Add(RetransTime)
	if fail := n.qsince.Add(MaxSolicit * RetransTime); fail.Before(next) {
		return fail
	}
	return next
}

// Host makes softverbs a host on an Ethernet segment: it wraps a Link,
// answers ARP requests and IPv6 neighbour solicitations for its addresses,
// learns neighbours from ARP and neighbour advertisements, resolves peer
// addresses for the transport (Resolve) and passes every other frame
// addressed to its MAC (or to a group) to the upper handler. Unicast frames
// for other MACs, which a TAP on a bridge sees while the bridge floods, are
// dropped.
//
// Host is itself a Link (sending through the wrapped one, reporting its own
// MAC) and a Releaser when the wrapped link is one. Time comes only from
// the clock: entries age by clock.Now; Resolve sends requests as it is
// asked, at most one per ProbeInterval per address. Unwrap returns the
// wrapped link, so As finds its Holder and Poller: Send goes straight to
// the wrapped link, and a poll runs the host's receive path. Host answers
// GroupJoiner and OwnReceiver itself.
//
// Host is a NeighbourQueuer: a frame sent with a zero destination MAC goes
// to the neighbour of its IP destination, at once if it is resolved, else
// after the neighbour answers (see Send). One clock timer per host, armed
// only while frames wait or announcements are due, repeats the requests
// for waiting frames (RetransTime), drops them when resolution fails
// (MaxSolicit) and repeats announcements (AnnounceNum); nothing else runs
// on timers.
type Host struct {
	l   netdev.Link
	mac netdev.MAC
	clk clock.Clock
	rel netdev.Releaser // the wrapped link's, or nil

	netdev.Receiver // frames passed up (or dropped with no handler set)

	mu      sync.RWMutex
	closed  bool
	addrs   []netip.Addr // unmapped, in the caller's order
	route   netdev.RouteFunc
	groups  netdev.GroupRefs
	neigh   map[netip.Addr]*neighbour
	waiting map[netip.Addr]*neighbour // the neighbours with frames queued
	// announcing holds the addresses with announcements still to repeat.
	announcing map[netip.Addr]*announcement
	timer      clock.Timer // armed while waiting or announcing is not empty
	timerAt    time.Time   // when timer fires
	timerID    uint64      // the armed timer's; a superseded one does nothing

	arpReqSent, arpRepSent, nsSent, naSent         atomic.Uint64
	learned, consumed, filtered, malformed         atomic.Uint64
	unresQueued, unresSent, unresOver, unresFailed atomic.Uint64
}

var (
	_ netdev.Link            = (*Host)(nil)
	_ netdev.Releaser        = (*Host)(nil)
	_ netdev.Wrapper         = (*Host)(nil)
	_ netdev.NeighbourQueuer = (*Host)(nil)
)

// New wraps l as a host with the given MAC and IP addresses (IPv4,
// IPv4-mapped or IPv6; link-local IPv6 addresses answer neighbour
// solicitations too). clk (nil: the real clock) ages the neighbour cache.
// The host takes over l's handler.
func New(l netdev.Link, mac netdev.MAC, addrs []netip.Addr, clk clock.Clock) *Host {
	h := &Host{l: l, mac: mac, clk: clock.OrReal(clk), neigh: make(map[netip.Addr]*neighbour),
		waiting: make(map[netip.Addr]*neighbour), announcing: make(map[netip.Addr]*announcement)}
	h.rel, _ = l.(netdev.Releaser)
	h.addrs = unmapAll(addrs)
	l.SetHandler(h.receive)
	return h
}

func unmapAll(addrs []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if a.IsValid() {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// Send transmits frame on the wrapped link. A frame whose destination MAC
// is zero goes to the neighbour of its IP destination (NeighbourQueuer):
// Send resolves it as Resolve does and writes its MAC into the frame, or,
// while the neighbour is unresolved, keeps a copy in the neighbour's queue
// (at most UnresQLen frames and UnresQLenBytes bytes, the oldest dropped to
// make room). The queue goes out, in order, as soon as an ARP reply or a
// neighbour advertisement gives the MAC; with no answer after MaxSolicit
// requests RetransTime apart, it is dropped. Each outcome is counted
// (Stats.Unres*); none is an error.
func (h *Host) Send(frame []byte) error {
	if len(frame) >= netdev.EthernetHeaderLen && netdev.Ethernet(frame).Dst().IsZero() {
		return h.sendResolving(frame)
	}
	return h.l.Send(frame)
}

// SetRoute gives the host a routing table: the neighbour of a destination
// is its next hop (a gateway for a destination off the host's subnets),
// and a destination with no route is never resolved (Resolve fails, and a
// frame Send holds for it is dropped). nil (the default): every
// destination is on-link.
func (h *Host) SetRoute(r netdev.RouteFunc) {
	h.mu.Lock()
	h.route = r
	h.mu.Unlock()
}

// Route returns the next hop of dst by the routing table (SetRoute); dst
// itself when the host has none.
func (h *Host) Route(dst netip.Addr) (netip.Addr, error) {
	dst = dst.Unmap()
	h.mu.RLock()
	r := h.route
	h.mu.RUnlock()
	if r == nil {
		return dst, nil
	}
	return r(dst)
}

// QueuesUnresolved reports true: Send holds frames for a neighbour being
// resolved (netdev.NeighbourQueuer).
func (h *Host) QueuesUnresolved() bool { return true }

// nextHop returns the IP destination of an IPv4 or IPv6 frame (unmapped).
func nextHop(frame []byte) (netip.Addr, bool) {
	p := frame[netdev.EthernetHeaderLen:]
	switch netdev.Ethernet(frame).EtherType() {
	case netdev.EtherTypeIPv4:
		if len(p) >= netdev.IPv4HeaderLen {
			return netdev.IPv4(p).Dst(), true
		}
	case netdev.EtherTypeIPv6:
		if len(p) >= netdev.IPv6HeaderLen {
			return netdev.IPv6(p).Dst().Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// sendResolving sends a frame with no destination MAC to the neighbour of
// its IP destination, or queues it until the neighbour is resolved.
func (h *Host) sendResolving(frame []byte) error {
	ip, ok := nextHop(frame)
	if !ok || !ip.IsValid() || ip.IsUnspecified() {
		h.unresFailed.Add(1)
		return nil
	}
	if m, ok := groupMAC(ip); ok {
		netdev.Ethernet(frame).SetDst(m)
		return h.l.Send(frame)
	}
	ip, err := h.Route(ip)
	if err != nil {
		h.unresFailed.Add(1)
		return nil
	}
	if mac, ok := h.resolveNext(ip); ok {
		netdev.Ethernet(frame).SetDst(mac)
		return h.l.Send(frame)
	}
	now := h.clk.Now()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.unresFailed.Add(1)
		return netdev.ErrClosed
	}
	n := h.neigh[ip]
	if n == nil {
		// Resolve could not track it: the cache is full of live entries.
		h.mu.Unlock()
		h.unresFailed.Add(1)
		return nil
	}
	if n.state == neighReachable && now.Sub(n.confirmed) < ReachableTime+StaleTime {
		// The answer came in since Resolve asked.
		mac := n.mac
		h.mu.Unlock()
		netdev.Ethernet(frame).SetDst(mac)
		return h.l.Send(frame)
	}
	if len(n.queue) == 0 {
		n.qsince = now
		h.waiting[ip] = n
	}
	for len(n.queue) > 0 && (len(n.queue) >= UnresQLen || n.qbytes+len(frame) > UnresQLenBytes) {
		n.qbytes -= len(n.queue[0])
		n.queue[0] = nil
		n.queue = n.queue[1:]
		h.unresOver.Add(1)
	}
	n.queue = append(n.queue, slices.Clone(frame))
	n.qbytes += len(frame)
	h.unresQueued.Add(1)
	h.armLocked(now)
	h.mu.Unlock()
	return nil
}

// armLocked makes the host's timer fire when the earliest waiting
// neighbour (dueLocked) or repeated announcement is due, and stops it when
// nothing is.
func (h *Host) armLocked(now time.Time) {
	var due time.Time
	for _, n := range h.waiting {
		if d := n.dueLocked(); due.IsZero() || d.Before(due) {
			due = d
		}
	}
	for _, a := range h.announcing {
		if due.IsZero() || a.next.Before(due) {
			due = a.next
		}
	}
	if h.timer != nil && !due.IsZero() && !h.timerAt.After(due) {
		return // fires in time; it re-arms for what is left
	}
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	h.timerID++
	if due.IsZero() {
		return
	}
	id := h.timerID
	h.timerAt = due
	h.timer = h.clk.AfterFunc(due.Sub(now), func() { h.onTimer(id) })
}

// onTimer repeats the request for each waiting neighbour whose
// RetransTime has passed, drops the frames of those whose resolution has
// failed, and repeats the announcements that are due for addresses the
// host still has.
func (h *Host) onTimer(id uint64) {
	now := h.clk.Now()
	var ask, announce []netip.Addr
	h.mu.Lock()
	if h.closed || id != h.timerID {
		h.mu.Unlock()
		return
	}
	h.timer = nil
	for ip, n := range h.waiting {
		switch {
		case !now.Before(n.qsince.Add(MaxSolicit * RetransTime)):
			h.unresFailed.Add(uint64(len(n.queue)))
			n.queue, n.qbytes = nil, 0
			delete(h.waiting, ip)
		case !now.Before(n.probed.Add(RetransTime)):
			n.probed = now
			ask = append(ask, ip)
		}
	}
	for ip, a := range h.announcing {
		switch {
		case !slices.Contains(h.addrs, ip):
			delete(h.announcing, ip)
		case !now.Before(a.next):
			announce = append(announce, ip)
			if a.left--; a.left == 0 {
				delete(h.announcing, ip)
			} else {
				a.next = a.next.Add(a.every)
			}
		}
	}
	h.armLocked(now)
	h.mu.Unlock()
	slices.SortFunc(ask, netip.Addr.Compare) // a reproducible order
	for _, ip := range ask {
		h.solicit(ip, netdev.MAC{})
	}
	slices.SortFunc(announce, netip.Addr.Compare)
	for _, ip := range announce {
		h.sendAnnouncement(ip)
	}
}

// ReceivesOnOwnGoroutine reports whether the wrapped link calls the handler
// from its own goroutine (see OwnReceiver).
func (h *Host) ReceivesOnOwnGoroutine() bool {
	o, ok := netdev.As[netdev.OwnReceiver](h.l)
	return ok && o.ReceivesOnOwnGoroutine()
}

// HardwareAddr returns the host's MAC (not necessarily the wrapped link's).
func (h *Host) HardwareAddr() netdev.MAC { return h.mac }

// MTU returns the wrapped link's MTU.
func (h *Host) MTU() int { return h.l.MTU() }

// Close drops the frames waiting for neighbours (counted as failed) and
// closes the wrapped link.
func (h *Host) Close() error {
	h.mu.Lock()
	h.closed = true
	for ip, n := range h.waiting {
		h.unresFailed.Add(uint64(len(n.queue)))
		n.queue, n.qbytes = nil, 0
		delete(h.waiting, ip)
	}
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	h.mu.Unlock()
	return h.l.Close()
}

// Release gives a received frame back to the wrapped link's pool.
func (h *Host) Release(frame []byte) {
	if h.rel != nil {
		h.rel.Release(frame)
	}
}

// Unwrap returns the wrapped link (for As).
func (h *Host) Unwrap() netdev.Link { return h.l }

// Addrs returns the host's addresses (IPv4 unmapped).
func (h *Host) Addrs() []netip.Addr {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return append([]netip.Addr(nil), h.addrs...)
}

// SetAddrs replaces the host's addresses and announces the new ones: a
// gratuitous ARP request for each new IPv4 address and an unsolicited
// neighbour advertisement (override set) for each new IPv6 address.
func (h *Host) SetAddrs(addrs []netip.Addr) {
	next := unmapAll(addrs)
	h.mu.Lock()
	old := h.addrs
	h.addrs = next
	h.mu.Unlock()
	for _, a := range next {
		if slices.Contains(old, a) {
			continue
		}
		h.Announce(a)
	}
}

// announcement is an address's announcements still to send.
type announcement struct {
	left  int           // still to send
	next  time.Time     // when the next is due
	every time.Duration // the interval between them
}

// Announce sends a gratuitous ARP (IPv4) or an unsolicited neighbour
// advertisement to all nodes (IPv6) for ip, and repeats it (AnnounceNum,
// AnnounceNumV6) while ip is one of the host's addresses.
func (h *Host) Announce(ip netip.Addr) {
	ip = ip.Unmap()
	h.sendAnnouncement(ip)
	num, every := AnnounceNum, AnnounceInterval
	if !ip.Is4() {
		num, every = AnnounceNumV6, AnnounceIntervalV6
	}
	now := h.clk.Now()
	h.mu.Lock()
	if !h.closed && num > 1 {
		h.announcing[ip] = &announcement{left: num - 1, next: now.Add(every), every: every}
		h.armLocked(now)
	}
	h.mu.Unlock()
}

// sendAnnouncement sends one gratuitous ARP or unsolicited neighbour
// advertisement for ip.
func (h *Host) sendAnnouncement(ip netip.Addr) {
	if ip.Is4() {
		h.sendARP(arpRequest, netdev.BroadcastMAC(), ip, netdev.MAC{}, ip)
		return
	}
	h.sendND(icmp6NA, naOverride, ip, netip.MustParseAddr("ff02::1"), netdev.MAC{0x33, 0x33, 0, 0, 0, 1}, ip)
}

// isOurs reports whether ip is one of the host's addresses.
func (h *Host) isOurs(ip netip.Addr) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return slices.Contains(h.addrs, ip)
}

// Resolve returns the MAC for ip, as the transport's PortConfig.Resolve
// wants. Multicast addresses map to their group MAC and the IPv4 broadcast
// address to the broadcast MAC; the host's own addresses map to its MAC.
// Any other address is resolved through its next hop (SetRoute): itself
// on a subnet of the host, the gateway off them; with no route, Resolve
// fails and asks nothing. A
// neighbour confirmed within ReachableTime is returned at once; one older
// than that is still returned (for up to StaleTime more) while a fresh
// request goes out. Otherwise Resolve sends an ARP request or a neighbour
// solicitation (at most one per ProbeInterval per address) and returns
// false: the caller sends its frame with a zero destination MAC, which
// Send holds until the answer (see Send), or drops it and retries later.
// On a synchronous link the answer may arrive inside that send, and then
// Resolve succeeds at once.
func (h *Host) Resolve(ip netip.Addr) (netdev.MAC, bool) {
	ip = ip.Unmap()
	if m, ok := groupMAC(ip); ok {
		return m, true
	}
	next, err := h.Route(ip)
	if err != nil {
		return netdev.MAC{}, false
	}
	return h.resolveNext(next)
}

// groupMAC is the MAC of a multicast address (its group's) or of the IPv4
// broadcast address, which need no resolution.
func groupMAC(ip netip.Addr) (netdev.MAC, bool) {
	if m, ok := netdev.MulticastMAC(ip); ok {
		return m, true
	}
	if ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return netdev.BroadcastMAC(), true
	}
	return netdev.MAC{}, false
}

// resolveNext is Resolve for a next hop.
func (h *Host) resolveNext(ip netip.Addr) (netdev.MAC, bool) {
	now := h.clk.Now()
	h.mu.RLock()
	n := h.neigh[ip]
	if n != nil && n.state == neighReachable && now.Sub(n.confirmed) < ReachableTime {
		m := n.mac
		h.mu.RUnlock()
		return m, true
	}
	ours := slices.Contains(h.addrs, ip)
	h.mu.RUnlock()
	if ours {
		return h.mac, true
	}

	h.mu.Lock()
	n = h.neigh[ip]
	if n == nil {
		if len(h.neigh) >= MaxNeighbours {
			h.expireLocked(now)
		}
		if len(h.neigh) >= MaxNeighbours {
			h.mu.Unlock()
			return netdev.MAC{}, false
		}
		n = &neighbour{state: neighIncomplete}
		h.neigh[ip] = n
	}
	var (
		mac    netdev.MAC
		usable bool
	)
	if n.state == neighReachable {
		age := now.Sub(n.confirmed)
		switch {
		case age < ReachableTime:
			mac, usable = n.mac, true
		case age < ReachableTime+StaleTime:
			mac, usable = n.mac, true // stale: use it while asking again
		default:
			n.state = neighIncomplete // expired: forget the MAC
		}
	}
	probe := n.probed.IsZero() || now.Sub(n.probed) >= ProbeInterval
	if probe {
		n.probed = now
	}
	h.mu.Unlock()
	if probe {
		// A stale entry is re-confirmed by a unicast request, as Linux
		// does; an unknown one by broadcast (ARP) or the solicited-node
		// group (ND).
		var dst netdev.MAC
		if usable {
			dst = mac
		}
		h.solicit(ip, dst)
		if !usable {
			h.mu.RLock()
			if n := h.neigh[ip]; n != nil && n.state == neighReachable {
				mac, usable = n.mac, true
			}
			h.mu.RUnlock()
		}
	}
	return mac, usable
}

// Neighbour returns the cached MAC of ip and whether it is confirmed and
// within ReachableTime, without sending anything.
func (h *Host) Neighbour(ip netip.Addr) (netdev.MAC, bool) {
	ip = ip.Unmap()
	h.mu.RLock()
	defer h.mu.RUnlock()
	n := h.neigh[ip]
	if n == nil || n.state != neighReachable || h.clk.Now().Sub(n.confirmed) >= ReachableTime {
		return netdev.MAC{}, false
	}
	return n.mac, true
}

// AddNeighbour enters a static-looking confirmed entry (it ages like a
// learned one).
func (h *Host) AddNeighbour(ip netip.Addr, mac netdev.MAC) { h.learn(ip.Unmap(), mac, true) }

// expireLocked forgets the entries that are neither live nor waited for,
// and returns how many are left.
func (h *Host) expireLocked(now time.Time) int {
	for ip, n := range h.neigh {
		if len(n.queue) > 0 {
			continue // resolution ends within MaxSolicit×RetransTime
		}
		if n.state != neighReachable || now.Sub(n.confirmed) >= ReachableTime+StaleTime {
			delete(h.neigh, ip)
		}
	}
	return len(h.neigh)
}

// learn records ip at mac. create says whether an entry may be created
// (a reply or a request aimed at us) or only updated (gratuitous traffic
// about others, which we do not track unless asked). Frames waiting for
// ip go out.
func (h *Host) learn(ip netip.Addr, mac netdev.MAC, create bool) {
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() || mac.IsMulticast() || mac.IsZero() {
		return
	}
	now := h.clk.Now()
	h.mu.Lock()
	n := h.neigh[ip]
	if n == nil {
		if !create || len(h.neigh) >= MaxNeighbours && h.expireLocked(now) >= MaxNeighbours {
			h.mu.Unlock()
			return
		}
		n = &neighbour{}
		h.neigh[ip] = n
	}
	n.mac, n.state, n.confirmed = mac, neighReachable, now
	h.learned.Add(1)
	q := n.queue
	if q != nil {
		n.queue, n.qbytes = nil, 0
		delete(h.waiting, ip) // the timer finds nothing to do for it
	}
	h.mu.Unlock()
	for _, f := range q {
		netdev.Ethernet(f).SetDst(mac)
		if h.l.Send(f) == nil {
			h.unresSent.Add(1)
		} else {
			h.unresFailed.Add(1)
		}
	}
}

// solicit asks for ip's MAC: an ARP request or a neighbour solicitation,
// to dst if it is a known (stale) MAC, else broadcast / solicited-node.
func (h *Host) solicit(ip netip.Addr, dst netdev.MAC) {
	src, ok := h.sourceFor(ip)
	if !ok {
		return
	}
	if ip.Is4() {
		if dst.IsZero() {
			dst = netdev.BroadcastMAC()
		}
		h.sendARP(arpRequest, dst, src, netdev.MAC{}, ip)
		return
	}
	ipDst := ip
	if dst.IsZero() {
		ipDst = netdev.SolicitedNodeAddr(ip)
		dst, _ = netdev.MulticastMAC(ipDst)
	}
	h.sendND(icmp6NS, 0, src, ipDst, dst, ip)
}

// sourceFor picks our address to ask from: for IPv4 one in the same /24 if
// any, else the first IPv4; for IPv6 a link-local one for a link-local
// target, else the first non-link-local one, else any IPv6.
func (h *Host) sourceFor(target netip.Addr) (netip.Addr, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var first netip.Addr
	for _, a := range h.addrs {
		if a.Is4() != target.Is4() {
			continue
		}
		if !first.IsValid() {
			first = a
		}
		if a.Is4() {
			if p, _ := a.Prefix(24); p.Contains(target) {
				return a, true
			}
			continue
		}
		if a.IsLinkLocalUnicast() == target.IsLinkLocalUnicast() {
			return a, true
		}
	}
	return first, first.IsValid()
}

// receive is the wrapped link's handler.
func (h *Host) receive(frame []byte) {
	if len(frame) < netdev.EthernetHeaderLen {
		h.malformed.Add(1)
		h.Release(frame)
		return
	}
	eth := netdev.Ethernet(frame)
	dst := eth.Dst()
	if !dst.IsMulticast() && dst != h.mac {
		h.filtered.Add(1)
		h.Release(frame)
		return
	}
	switch eth.EtherType() {
	case netdev.EtherTypeARP:
		h.consumed.Add(1)
		h.handleARP(eth)
		h.Release(frame)
		return
	case netdev.EtherTypeIPv6:
		if h.isND(frame) {
			h.consumed.Add(1)
			h.handleND(frame)
			h.Release(frame)
			return
		}
	}
	h.Deliver(frame, len(frame), h)
}

func (h *Host) handleARP(eth netdev.Ethernet) {
	p := eth.Payload()
	if len(p) < arpLen || binary.BigEndian.Uint16(p[arpHType:]) != 1 ||
		binary.BigEndian.Uint16(p[arpPType:]) != netdev.EtherTypeIPv4 || p[arpHLen] != 6 || p[arpPLen] != 4 {
		h.malformed.Add(1)
		return
	}
	op := binary.BigEndian.Uint16(p[arpOp:])
	sha := netdev.MAC(p[arpSHA : arpSHA+6])
	spa := netip.AddrFrom4([4]byte(p[arpSPA : arpSPA+4]))
	tpa := netip.AddrFrom4([4]byte(p[arpTPA : arpTPA+4]))
	forUs := h.isOurs(tpa)
	if spa.IsUnspecified() {
		// An ARP probe (RFC 5227): answer it if it asks for ours, learn
		// nothing.
		if op == arpRequest && forUs {
			h.sendARP(arpReply, sha, tpa, sha, spa)
		}
		return
	}
	if sha == h.mac {
		return // our own, echoed back
	}
	h.learn(spa, sha, forUs)
	if op == arpRequest && forUs && spa != tpa {
		h.sendARP(arpReply, sha, tpa, sha, spa)
	}
}

// sendARP sends an ARP packet from our MAC with sender IP spa to target
// tha/tpa, in an Ethernet frame to dst.
func (h *Host) sendARP(op uint16, dst netdev.MAC, spa netip.Addr, tha netdev.MAC, tpa netip.Addr) {
	var b [netdev.EthernetHeaderLen + arpLen]byte
	eth := netdev.Ethernet(b[:])
	eth.SetDst(dst)
	eth.SetSrc(h.mac)
	eth.SetEtherType(netdev.EtherTypeARP)
	p := b[netdev.EthernetHeaderLen:]
	binary.BigEndian.PutUint16(p[arpHType:], 1)
	binary.BigEndian.PutUint16(p[arpPType:], netdev.EtherTypeIPv4)
	p[arpHLen], p[arpPLen] = 6, 4
	binary.BigEndian.PutUint16(p[arpOp:], op)
	copy(p[arpSHA:], h.mac[:])
	s, t := spa.As4(), tpa.As4()
	copy(p[arpSPA:], s[:])
	copy(p[arpTHA:], tha[:])
	copy(p[arpTPA:], t[:])
	if h.l.Send(b[:]) == nil {
		if op == arpRequest {
			h.arpReqSent.Add(1)
		} else {
			h.arpRepSent.Add(1)
		}
	}
}

// isND reports whether an IPv6 frame is an ICMPv6 neighbour solicitation
// or advertisement (no extension headers).
func (h *Host) isND(frame []byte) bool {
	if len(frame) < netdev.EthernetHeaderLen+netdev.IPv6HeaderLen+1 {
		return false
	}
	ip := netdev.IPv6(frame[netdev.EthernetHeaderLen:])
	if ip.NextHeader() != netdev.ProtocolICMPv6 {
		return false
	}
	t := frame[netdev.EthernetHeaderLen+netdev.IPv6HeaderLen]
	return t == icmp6NS || t == icmp6NA
}

func (h *Host) handleND(frame []byte) {
	ip := netdev.IPv6(frame[netdev.EthernetHeaderLen:])
	pl := int(ip.PayloadLen())
	if ip.Version() != 6 || len(frame) < netdev.EthernetHeaderLen+netdev.IPv6HeaderLen+pl || pl < ndTarget+16 ||
		ip.HopLimit() != 255 {
		h.malformed.Add(1)
		return
	}
	src, dst := ip.Src(), ip.Dst()
	m := frame[netdev.EthernetHeaderLen+netdev.IPv6HeaderLen : netdev.EthernetHeaderLen+netdev.IPv6HeaderLen+pl]
	if m[icmp6Code] != 0 || netdev.Fold(netdev.Sum16(m, icmp6PseudoSum(src, dst, pl))) != 0xffff {
		h.malformed.Add(1)
		return
	}
	target := netip.AddrFrom16([16]byte(m[ndTarget : ndTarget+16]))
	ll, hasLL := ndLinkLayerOption(m[ndOptions:], m[icmp6Type])
	switch m[icmp6Type] {
	case icmp6NS:
		if !h.isOurs(target) {
			return
		}
		if src.IsUnspecified() {
			// Duplicate address detection by someone else: tell all nodes.
			h.sendND(icmp6NA, naOverride, target, netip.MustParseAddr("ff02::1"), netdev.MAC{0x33, 0x33, 0, 0, 0, 1}, target)
			return
		}
		if hasLL {
			h.learn(src, ll, true)
		} else {
			ll = netdev.Ethernet(frame).Src()
		}
		h.sendND(icmp6NA, naSolicited|naOverride, target, src, ll, target)
	case icmp6NA:
		if !hasLL || ll == h.mac {
			return
		}
		h.learn(target, ll, m[ndFlags]&naSolicited != 0)
	}
}

// ndLinkLayerOption finds the source (NS) or target (NA) link-layer
// address option.
func ndLinkLayerOption(opts []byte, typ uint8) (netdev.MAC, bool) {
	want := uint8(ndOptSourceLLAddr)
	if typ == icmp6NA {
		want = ndOptTargetLLAddr
	}
	for len(opts) >= 8 {
		n := int(opts[1]) * 8
		if n == 0 || n > len(opts) {
			return netdev.MAC{}, false
		}
		if opts[0] == want && n >= 8 {
			return netdev.MAC(opts[2:8]), true
		}
		opts = opts[n:]
	}
	return netdev.MAC{}, false
}

func icmp6PseudoSum(src, dst netip.Addr, length int) uint32 {
	a, d := src.As16(), dst.As16()
	s := netdev.Sum16(a[:], 0)
	s = netdev.Sum16(d[:], s)
	return s + uint32(length>>16) + uint32(length&0xffff) + netdev.ProtocolICMPv6
}

// buildICMPv6 writes Ethernet and IPv6 headers (hop limit 255) for an
// ICMPv6 message of n bytes already at b[62:], fills in its checksum and
// returns the frame.
func buildICMPv6(b []byte, srcMAC, dstMAC netdev.MAC, src, dst netip.Addr, n int) []byte {
	eth := netdev.Ethernet(b)
	eth.SetDst(dstMAC)
	eth.SetSrc(srcMAC)
	eth.SetEtherType(netdev.EtherTypeIPv6)
	ip := netdev.IPv6(b[netdev.EthernetHeaderLen:])
	ip.SetVersionClassFlow(0, 0)
	ip.SetPayloadLen(uint16(n))
	ip.SetNextHeader(netdev.ProtocolICMPv6)
	ip.SetHopLimit(255)
	ip.SetSrc(src)
	ip.SetDst(dst)
	m := b[netdev.EthernetHeaderLen+netdev.IPv6HeaderLen : netdev.EthernetHeaderLen+netdev.IPv6HeaderLen+n]
	m[icmp6Checksum], m[icmp6Checksum+1] = 0, 0
	binary.BigEndian.PutUint16(m[icmp6Checksum:], ^netdev.Fold(netdev.Sum16(m, icmp6PseudoSum(src, dst, n))))
	return b[:netdev.EthernetHeaderLen+netdev.IPv6HeaderLen+n]
}

// sendND sends a neighbour solicitation or advertisement (typ icmp6NS or
// icmp6NA, with an NA's R, S and O flags) about target from src to dst; an
// NA's target is ours and is also its source. Our MAC goes in the source
// link-layer address option of an NS, the target one of an NA.
func (h *Host) sendND(typ, flags uint8, src, dst netip.Addr, dstMAC netdev.MAC, target netip.Addr) {
	opt, sent := uint8(ndOptSourceLLAddr), &h.nsSent
	if typ == icmp6NA {
		opt, sent = ndOptTargetLLAddr, &h.naSent
	}
	var b [netdev.EthernetHeaderLen + netdev.IPv6HeaderLen + ndLen]byte
	m := b[netdev.EthernetHeaderLen+netdev.IPv6HeaderLen:]
	m[icmp6Type] = typ
	m[ndFlags] = flags
	t := target.As16()
	copy(m[ndTarget:], t[:])
	m[ndOptions], m[ndOptions+1] = opt, 1
	copy(m[ndOptions+2:], h.mac[:])
	if h.l.Send(buildICMPv6(b[:], h.mac, dstMAC, src, dst, ndLen)) == nil {
		sent.Add(1)
	}
}

// JoinGroup records membership of an IP multicast group (IPv4 or
// IPv6, IPv4-mapped allowed) and sends an unsolicited IGMPv2 membership
// report (IPv4) or MLDv2 report (IPv6). Joins are counted, so a group
// joined twice needs two leaves.
func (h *Host) JoinGroup(group netip.Addr) error {
	group = group.Unmap()
	if !group.IsMulticast() {
		return fmt.Errorf("join group %v: not a multicast address", group)
	}
	h.mu.Lock()
	first, _ := h.groups.Join(group, nil) // the report is sent unlocked
	h.mu.Unlock()
	if first {
		h.report(group, true)
	}
	return nil
}

// LeaveGroup undoes one JoinGroup; the last leave sends an IGMPv2 leave or
// an MLDv2 change-to-include report. Leaving a group not joined is an
// error.
func (h *Host) LeaveGroup(group netip.Addr) error {
	group = group.Unmap()
	h.mu.Lock()
	last, err := h.groups.Leave(group, nil)
	h.mu.Unlock()
	if last {
		h.report(group, false)
	}
	return err
}

// Groups returns the joined groups.
func (h *Host) Groups() []netip.Addr {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.groups.All()
}

// report sends an IGMPv2 report/leave (RFC 2236) or an MLDv2 report with
// one record, CHANGE_TO_EXCLUDE({}) to join or CHANGE_TO_INCLUDE({}) to
// leave (RFC 3810).
func (h *Host) report(group netip.Addr, join bool) {
	if group.Is4() {
		src, _ := h.sourceFor(group)
		if !src.IsValid() {
			src = netip.IPv4Unspecified()
		}
		dst := group
		typ := byte(0x16) // v2 membership report
		if !join {
			typ = 0x17 // leave group
			dst = netip.AddrFrom4([4]byte{224, 0, 0, 2})
		}
		// IPv4 header with the router alert option (24 bytes) + 8 IGMP.
		var b [netdev.EthernetHeaderLen + 24 + 8]byte
		eth := netdev.Ethernet(b[:])
		dmac, _ := netdev.MulticastMAC(dst)
		eth.SetDst(dmac)
		eth.SetSrc(h.mac)
		eth.SetEtherType(netdev.EtherTypeIPv4)
		ip := netdev.IPv4(b[netdev.EthernetHeaderLen:])
		ip.SetHeaderLen(24)
		ip.SetTOS(0xc0)
		ip.SetTotalLen(24 + 8)
		ip.SetFlagsFragment(netdev.IPv4FlagDontFragment, 0)
		ip.SetTTL(1)
		ip.SetProtocol(netdev.ProtocolIGMP)
		ip.SetSrc(src)
		ip.SetDst(dst)
		copy(ip[20:24], []byte{0x94, 0x04, 0, 0}) // router alert
		ip.UpdateChecksum()
		g := b[netdev.EthernetHeaderLen+24:]
		g[0] = typ
		ga := group.As4()
		copy(g[4:8], ga[:])
		binary.BigEndian.PutUint16(g[2:], ^netdev.Fold(netdev.Sum16(g, 0)))
		_ = h.l.Send(b[:])
		return
	}
	// MLDv2: IPv6 header, hop-by-hop with router alert (8), report (8 + 20).
	src, ok := h.linkLocal()
	if !ok {
		src = netip.IPv6Unspecified()
	}
	dst := netip.MustParseAddr("ff02::16")
	const hbh, rep = 8, 8 + 20
	var b [netdev.EthernetHeaderLen + netdev.IPv6HeaderLen + hbh + rep]byte
	eth := netdev.Ethernet(b[:])
	eth.SetDst(netdev.MAC{0x33, 0x33, 0, 0, 0, 0x16})
	eth.SetSrc(h.mac)
	eth.SetEtherType(netdev.EtherTypeIPv6)
	ip := netdev.IPv6(b[netdev.EthernetHeaderLen:])
	ip.SetVersionClassFlow(0, 0)
	ip.SetPayloadLen(hbh + rep)
	ip.SetNextHeader(0) // hop-by-hop options
	ip.SetHopLimit(1)
	ip.SetSrc(src)
	ip.SetDst(dst)
	o := b[netdev.EthernetHeaderLen+netdev.IPv6HeaderLen:]
	copy(o[:hbh], []byte{netdev.ProtocolICMPv6, 0, 5, 2, 0, 0, 1, 0}) // router alert (MLD), PadN
	m := o[hbh:]
	m[0] = icmp6MLDv2Report
	binary.BigEndian.PutUint16(m[6:], 1) // one record
	rec := m[8:]
	rec[0] = 3 // CHANGE_TO_INCLUDE_MODE
	if join {
		rec[0] = 4 // CHANGE_TO_EXCLUDE_MODE
	}
	ga := group.As16()
	copy(rec[4:20], ga[:])
	binary.BigEndian.PutUint16(m[2:], ^netdev.Fold(netdev.Sum16(m[:rep], icmp6PseudoSum(src, dst, rep))))
	_ = h.l.Send(b[:])
}

func (h *Host) linkLocal() (netip.Addr, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, a := range h.addrs {
		if a.Is6() && a.IsLinkLocalUnicast() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// Stats returns a snapshot of the host's counters.
func (h *Host) Stats() Stats {
	rxFrames, rxBytes, rxDropped := h.RxCounts()
	return Stats{
		ARPRequestsSent: h.arpReqSent.Load(), ARPRepliesSent: h.arpRepSent.Load(),
		NSSent: h.nsSent.Load(), NASent: h.naSent.Load(), Learned: h.learned.Load(),
		Consumed: h.consumed.Load(), Filtered: h.filtered.Load(), Malformed: h.malformed.Load(),
		RxFrames: rxFrames, RxBytes: rxBytes, RxDropped: rxDropped,
		UnresQueued: h.unresQueued.Load(), UnresSent: h.unresSent.Load(),
		UnresOverflow: h.unresOver.Load(), UnresFailed: h.unresFailed.Load(),
	}
}
