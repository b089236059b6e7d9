// Package rvt is the public face of softverbs: a software RDMA device with
// the verbs of libibverbs (protection domains, memory regions and windows,
// completion queues, RC/UC/UD queue pairs, shared receive queues, address
// handles, multicast), asynchronous events, QP iteration and counters.
//
// A Device runs the IBTA transport over RoCEv2 on one port. With no link it
// is a loopback-only device; on the in-memory fabric (fabric.Fabric) many
// devices form a network in one process; on a TAP, AF_XDP or UDP link it
// speaks to real peers.
//
// Simulations pass a manual clock and Inline: every task then runs on the
// caller's goroutine, so a seed reproduces a run exactly.
package rvt

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/internal/task"
	"github.com/softverbs/softverbs/internal/verr"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/mcast"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/transport"
)

// Sentinel errors. Errors from the verbs wrap these, or errors of packages
// keys, cq, qp and mcast: the first five are the same values in every one of
// them, so errors.Is(err, ErrBusy) holds for keys.ErrBusy too.
var (
	ErrInvalidArgument = verr.ErrInvalidArgument
	ErrInvalidState    = verr.ErrInvalidState
	ErrNotSupported    = verr.ErrNotSupported
	ErrBusy            = verr.ErrBusy
	ErrNoResources     = verr.ErrNoResources
	ErrClosed          = verr.ErrClosed
)

// Re-exported types, so most programs import only rvt.
type (
	Access        = keys.Access
	MR            = keys.MR
	MW            = keys.MW
	WC            = cq.WC
	CQ            = cq.CQ
	QPType        = qp.Type
	QPState       = qp.State
	QPAttr        = qp.Attr
	QPAttrMask    = qp.AttrMask
	QPCap         = qp.Cap
	SendWR        = qp.SendWR
	RecvWR        = qp.RecvWR
	SGE           = qp.SGE
	AddressVector = qp.AddressVector
	AH            = qp.AH
	MTU           = qp.MTU
	Event         = transport.Event
	EventType     = transport.EventType
	GID           = netdev.GID
)

// Options configure a device.
type Options struct {
	Name   string
	Clock  clock.Clock  // nil: real time
	Logger *slog.Logger // nil: discard
	// Inline runs every task on the goroutine that wakes it (deterministic
	// simulation); otherwise Workers goroutines (default 2) run what the
	// goroutines that post and receive do not run themselves (see
	// QP.PostSend).
	Inline  bool
	Workers int

	// The port. With no Link the device is loopback only.
	Link    netdev.Link
	MAC     netdev.MAC
	Addrs   []netip.Addr // GID table sources, in GID index order
	Resolve func(netip.Addr) (netdev.MAC, bool)
	// Route, when set, is the port's routing table (Device.Route): the
	// next hop of a destination, or netdev.ErrNetUnreachable. Resolve is
	// expected to resolve a destination through its next hop. nil: every
	// destination is on-link.
	Route netdev.RouteFunc
	MTU   int // Ethernet MTU; default: the link's, or 4096-byte IB MTU for loopback

	// Interface, when set and Addrs is empty, is a kernel interface (in
	// the network namespace of the thread calling Open) whose addresses
	// make the GID table, in netdev.WatchAddrs order; the device follows
	// them as they change (SetAddrs, EventGIDChange) until Close. With no
	// usable address the table holds the EUI-64 link-local GID of MAC.
	// The link is independent of it. Event handlers must not call Close
	// (it waits for the watcher, which may be raising the event).
	Interface string

	// Credits makes RC requesters obey end-to-end credits.
	Credits bool
	// RetransmitProbe, when not zero, lets an RC requester without an ACK
	// for that long go back N early, backing off, before its local ACK
	// timeout counts a retry (transport.Config.Probe). For links with a
	// round trip well below it; docs/choices.md says how it was chosen.
	RetransmitProbe time.Duration
	// RetransmitProbeRTT, with RetransmitProbe zero, sets each RC QP's
	// first early-retry interval from its measured round trip (SRTT + 4
	// RTTVAR, as TCP's RTO) within [RetransmitProbeMin,
	// RetransmitProbeMax] (0: transport.DefaultProbeMin, DefaultProbeMax);
	// transport.Config.ProbeRTT. For links whose round trip is well below
	// the local ACK timeout; docs/choices.md.
	RetransmitProbeRTT                     bool
	RetransmitProbeMin, RetransmitProbeMax time.Duration
	// KeyBits sizes the lkey/rkey table (2^KeyBits entries, default 16).
	KeyBits int
	// ReceiveHere (in-memory fabric, with workers): a packet from another
	// device with it, whose run sent only that packet, is handled on that
	// run's goroutine when it ends, not handed to a worker of this device
	// (transport.Config.ReceiveHere). It shortens a request-response
	// exchange by a worker's wake-up; it slows one goroutine posting on
	// many QPs, which then does their receivers' work as well
	// (docs/performance.md, "Delivery at Flush").
	ReceiveHere bool
}

// Device limits (ibv_query_device). Queue sizes are limits, not
// preallocations.
const (
	maxQP            = 1 << 16
	maxQPWR          = 1 << 14
	maxSGE           = 32
	maxCQE           = cq.MaxDepth
	maxPD            = 1 << 15
	maxSRQ           = 1 << 14
	maxSRQWR         = 1 << 14
	maxAH            = 1 << 15
	maxInline        = 256
	maxRdAtom        = 16
	maxMcastGroups   = 8192
	maxMcastQPAttach = 56
	maxMsgSize       = 1 << 31
	// gidTableLen is the GID table's capacity (ibv_query_port's
	// gid_tbl_len). CreateAH and Modify refuse an index with no GID behind
	// it (qp.Limits.CheckSGID).
	gidTableLen = 16
)

// Device is one software RDMA device with one port.
type Device struct {
	name string
	opts Options
	clk  clock.Clock
	log  *slog.Logger
	exec task.Executor
	pool *task.Pool
	keys *keys.Table
	mc   *mcast.Table
	// mcMu makes a multicast attach or detach and the link join or leave
	// it implies one step, so racing calls cannot leave the link out of
	// a group that has members (or in one that has none). Lock order:
	// mcMu before mu (QP.Destroy holds both).
	mcMu   sync.Mutex
	eng    *transport.Engine
	limits qp.Limits

	mu      sync.Mutex
	closed  bool
	nextQPN uint32
	qps     map[uint32]*QP // nil: the number is reserved by a CreateQP under way
	ahs     map[*AH]struct{}
	nextPD  uint32
	nextVA  uint64
	subs    map[int]func(Event)
	nextSub int
	nPD     atomic.Int32

	stopWatch func() // stops following Options.Interface; nil if not

	svc services // the services of higher layers (Service)

	remote *client.Device // the rvtd device behind a Dial'd device; nil when embedded
	rd     *remoteDev     // a Dial'd device's session (remote.go); nil when embedded
}

// Open creates a device.
func Open(o Options) (*Device, error) {
	if o.Name == "" {
		o.Name = "rvt0"
	}
	if o.KeyBits == 0 {
		o.KeyBits = 16
	}
	d := &Device{
		name: o.Name, opts: o, clk: clock.OrReal(o.Clock), log: o.Logger,
		keys: keys.NewTable(o.KeyBits), mc: mcast.NewTable(maxMcastGroups, maxMcastQPAttach),
		nextQPN: 0x11, qps: make(map[uint32]*QP), ahs: make(map[*AH]struct{}), nextVA: 0x10000000, subs: make(map[int]func(Event)),
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	if o.Inline {
		d.exec = task.NewInline()
	} else {
		w := o.Workers
		if w <= 0 {
			w = 2
		}
		d.pool = task.NewPool(w)
		d.exec = d.pool
	}
	eng, err := transport.NewEngine(transport.Config{
		Clock: d.clk, Exec: d.exec, Logger: d.log, Keys: d.keys, Mcast: d.mc,
		Events: d.dispatch, Credits: o.Credits, Probe: o.RetransmitProbe,
		ProbeRTT: o.RetransmitProbeRTT, ProbeMin: o.RetransmitProbeMin, ProbeMax: o.RetransmitProbeMax,
		ReceiveHere: o.ReceiveHere,
	})
	if err != nil {
		d.closePool()
		return nil, fmt.Errorf("open %s: %w", o.Name, err)
	}
	d.eng = eng
	// Following an interface: the watcher's first call (inside WatchAddrs)
	// gives the initial table; later ones wait for the port to be set up.
	var watch struct {
		sync.Mutex
		live bool
	}
	if o.Interface != "" && len(o.Addrs) == 0 {
		stop, err := netdev.WatchAddrs(o.Interface, func(addrs []netip.Addr) {
			if len(addrs) == 0 {
				addrs = []netip.Addr{netdev.LinkLocalFromMAC(o.MAC)}
			}
			watch.Lock()
			defer watch.Unlock()
			if !watch.live {
				o.Addrs = addrs
				return
			}
			_ = d.SetAddrs(addrs)
		})
		if err != nil {
			d.closePool()
			return nil, fmt.Errorf("open %s: %w", o.Name, err)
		}
		d.stopWatch = stop
	}
	watch.Lock()
	if len(o.Addrs) == 0 {
		o.Addrs = []netip.Addr{netip.MustParseAddr("fe80::1"), netip.MustParseAddr("127.0.0.1")}
	}
	err = eng.SetPort(transport.PortConfig{
		Link: o.Link, MAC: o.MAC, Addrs: o.Addrs, Resolve: o.Resolve, MTU: o.MTU,
	})
	watch.live = err == nil
	watch.Unlock()
	if err != nil {
		if d.stopWatch != nil {
			d.stopWatch()
		}
		d.closePool()
		return nil, fmt.Errorf("open %s: %w", o.Name, err)
	}
	d.limits = qp.Limits{
		MaxMTU: eng.ActiveMTU(), MaxRdAtomic: maxRdAtom, MaxDestRdAtomic: maxRdAtom,
		PkeyTableLen: 1, GIDTableLen: gidTableLen, GIDs: eng.NumGIDs, Ports: 1,
	}
	return d, nil
}

// SetAddrs replaces the port's GID table (addresses in GID index order, see
// netdev.GIDOrder), as when the interface's addresses change, and raises
// EventGIDChange. A link that answers for the addresses (host.Host),
// also behind wrappers (netdev.As), is updated too and announces the new
// ones.
func (d *Device) SetAddrs(addrs []netip.Addr) error {
	if len(addrs) == 0 {
		return fmt.Errorf("set addresses: %w: the GID table needs at least one address", ErrInvalidArgument)
	}
	if d.rd != nil {
		return fmt.Errorf("set addresses: %w: the daemon owns the port of %s", ErrNotSupported, d.name)
	}
	if h, ok := netdev.As[interface{ SetAddrs([]netip.Addr) }](d.opts.Link); ok {
		h.SetAddrs(addrs)
	}
	d.eng.SetAddrs(addrs)
	d.dispatch(Event{Type: transport.EventGIDChange, Port: 1})
	return nil
}

// Close stops the device: its services close (Service), then its QPs go
// to ERR, what was posted on them completes with WR_FLUSH_ERR, and its
// worker pool ends. The link is not closed (the caller owns it). Later
// posts, modifies and creates fail with ErrClosed; destroys still release
// what they held. Closing again does nothing.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	d.closeServices()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		if q != nil {
			qps = append(qps, q)
		}
	}
	clear(d.qps)
	d.mu.Unlock()
	if d.rd != nil {
		d.rd.close() // the daemon tears down what the session owned
		return nil
	}
	if d.stopWatch != nil {
		d.stopWatch()
	}
	// As a device taken away: every QP goes to ERR and what was posted on
	// it completes flushed before the engine stops (mlx5_ib's reset flow;
	// the drop-in libibverbs's fatal state), so that no one waits for
	// ever on a completion. Its posts and modifies fail with ErrClosed
	// from before the flush, so that a completion handler reposting what
	// was flushed is refused rather than flushed again.
	// A QP in RESET has nothing to flush (and RESET->ERR is no
	// transition): only those that went to ERR are waited for.
	flushing := make([]bool, len(qps))
	for i, q := range qps {
		flushing[i] = q.conn.Modify(&QPAttr{State: qp.Err}, qp.AttrState) == nil
		q.QP.Retire(qp.GoneClosed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeFlushWait)
	for i, q := range qps {
		if flushing[i] {
			_ = q.conn.WaitFlushed(ctx) // a bound, not a clock: the flush takes no time
		}
		d.eng.RemoveConn(q.conn)
	}
	cancel()
	d.closePool()
	return nil
}

// closeFlushWait bounds how long Close waits for the flush of its QPs'
// work requests (their tasks run them at once, unless a completion
// handler holds a worker).
const closeFlushWait = time.Second

func (d *Device) closePool() {
	if d.pool != nil {
		d.pool.Close()
	}
}

// Name returns the device name.
func (d *Device) Name() string { return d.name }

// PollLink processes packets waiting on the device's link on the calling
// goroutine, if the link has a ring to drain (AF_XDP), and reports whether
// there were any: busy polling, for a program that spins on a CQ instead of
// waiting for a completion event (ib_send_lat's way). Each packet's QP work
// runs right here, saving the wake-up of the link's receive goroutine. On
// other links, and with nothing waiting, it returns false at once.
// A Dial'd device has no link here: false.
func (d *Device) PollLink() bool { return d.eng != nil && d.eng.PollLink() }

// Engine returns the device's transport engine (for tools and tests); nil
// for a Dial'd device, whose engine runs in rvtd.
func (d *Device) Engine() *transport.Engine { return d.eng }

// Clock returns the device's clock (a Dial'd device's: the real clock).
func (d *Device) Clock() clock.Clock { return d.clk }

// Subscribe registers f for asynchronous events (ibv_get_async_event). f
// runs on the goroutine that raised the event and must not block. The
// returned function unsubscribes.
func (d *Device) Subscribe(f func(Event)) (cancel func()) {
	d.mu.Lock()
	id := d.nextSub
	d.nextSub++
	d.subs[id] = f
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		delete(d.subs, id)
		d.mu.Unlock()
	}
}

func (d *Device) dispatch(ev Event) {
	d.mu.Lock()
	fs := make([]func(Event), 0, len(d.subs))
	for _, f := range d.subs {
		fs = append(fs, f)
	}
	d.mu.Unlock()
	for _, f := range fs {
		f(ev)
	}
}

// Counters returns the device's counters by name (rxe's hw_counters names,
// plus drop_<reason>).
// A Dial'd device asks the daemon (query_counters); nil if that fails.
func (d *Device) Counters() map[string]uint64 {
	if d.rd != nil {
		cs, err := d.rd.dev.Counters(0)
		if err != nil {
			return nil
		}
		return counterMap(cs)
	}
	return d.eng.Snapshot()
}

// DeviceAttr are the device attributes (ibv_device_attr).
type DeviceAttr struct {
	FWVer                  string
	NodeGUID               uint64
	SysImageGUID           uint64
	MaxMRSize              uint64
	PageSizeCap            uint64
	VendorID, VendorPartID uint32
	HWVer                  uint32
	MaxQP, MaxQPWR         int
	MaxSGE, MaxSGERd       int
	MaxCQ, MaxCQE          int
	MaxMR, MaxPD           int
	MaxQPRdAtom            int
	MaxQPInitRdAtom        int
	MaxResRdAtom           int
	AtomicCap              string // "HCA": atomics are atomic within the device
	MaxMW                  int
	MaxAH                  int
	MaxSRQ, MaxSRQWR       int
	MaxSRQSGE              int
	MaxMcastGrp            int
	MaxMcastQPAttach       int
	MaxTotalMcastQPAttach  int
	MaxInlineData          int
	MaxMsgSize             uint64
	MaxPkeys               int
	PhysPortCnt            int
}

// QueryDevice returns the device attributes.
func (d *Device) QueryDevice() DeviceAttr {
	if d.rd != nil {
		return d.rd.attr // asked at Dial
	}
	keysLen := 1 << d.keys.Bits()
	return DeviceAttr{
		FWVer: "0.1.0", NodeGUID: d.guid(), SysImageGUID: d.guid(),
		MaxMRSize: 1 << 48, PageSizeCap: 0xFFFFF000, VendorID: 0xFFFFFF,
		MaxQP: maxQP, MaxQPWR: maxQPWR, MaxSGE: maxSGE, MaxSGERd: maxSGE,
		MaxCQ: maxQP, MaxCQE: maxCQE, MaxMR: keysLen - 1, MaxPD: maxPD,
		MaxQPRdAtom: maxRdAtom, MaxQPInitRdAtom: maxRdAtom, MaxResRdAtom: maxRdAtom * maxQP,
		AtomicCap: "HCA", MaxMW: keysLen - 1, MaxAH: maxAH,
		MaxSRQ: maxSRQ, MaxSRQWR: maxSRQWR, MaxSRQSGE: maxSGE,
		MaxMcastGrp: maxMcastGroups, MaxMcastQPAttach: maxMcastQPAttach,
		MaxTotalMcastQPAttach: maxMcastGroups * maxMcastQPAttach,
		MaxInlineData:         maxInline, MaxMsgSize: maxMsgSize, MaxPkeys: 1, PhysPortCnt: 1,
	}
}

// guid derives the node GUID from the MAC as EUI-64, as rxe does.
func (d *Device) guid() uint64 {
	m := d.opts.MAC
	return uint64(m[0]^2)<<56 | uint64(m[1])<<48 | uint64(m[2])<<40 | 0xFF<<32 | 0xFE<<24 |
		uint64(m[3])<<16 | uint64(m[4])<<8 | uint64(m[5])
}

// PortAttr are the port attributes (ibv_port_attr).
type PortAttr struct {
	State       string // "ACTIVE"
	MaxMTU      MTU
	ActiveMTU   MTU
	GIDTblLen   int
	PkeyTblLen  int
	LinkLayer   string // "Ethernet"
	LID, SMLID  uint16
	ActiveSpeed string
	ActiveWidth string
}

// QueryPort returns the attributes of port 1.
func (d *Device) QueryPort(port uint8) (PortAttr, error) {
	if port != 1 {
		return PortAttr{}, fmt.Errorf("query port %d: %w: the device has one port", port, ErrInvalidArgument)
	}
	if d.rd != nil {
		return d.rd.queryPort(port)
	}
	m := d.eng.ActiveMTU()
	return PortAttr{
		State: "ACTIVE", MaxMTU: m, ActiveMTU: m, GIDTblLen: len(d.eng.GIDs()), PkeyTblLen: 1,
		LinkLayer: "Ethernet", ActiveSpeed: "software", ActiveWidth: "1X",
	}, nil
}

// QueryGID returns GID index of port 1.
func (d *Device) QueryGID(port uint8, index int) (GID, error) {
	if d.rd != nil {
		if index < 0 || index > 1<<16 {
			return GID{}, fmt.Errorf("query GID %d/%d: %w", port, index, ErrInvalidArgument)
		}
		g, err := d.rd.dev.QueryGIDPort(port, uint32(index))
		if err != nil {
			return GID{}, remoteErr(fmt.Sprintf("query GID %d/%d", port, index), err)
		}
		return GID(g), nil
	}
	gids := d.eng.GIDs()
	if port != 1 || index < 0 || index >= len(gids) {
		return GID{}, fmt.Errorf("query GID %d/%d: %w", port, index, ErrInvalidArgument)
	}
	return gids[index], nil
}

// QueryPKey returns P_Key index of port 1: only the default 0xFFFF.
func (d *Device) QueryPKey(port uint8, index int) (uint16, error) {
	if port != 1 || index != 0 {
		return 0, fmt.Errorf("query P_Key %d/%d: %w", port, index, ErrInvalidArgument)
	}
	if d.rd != nil {
		k, err := d.rd.dev.QueryPKey(port, uint32(index))
		if err != nil {
			return 0, remoteErr(fmt.Sprintf("query P_Key %d/%d", port, index), err)
		}
		return k, nil
	}
	return transport.DefaultPKey, nil
}
