//go:build linux

// Package xdp is the AF_XDP link on an existing interface: an eBPF/XDP
// program steers RoCEv2 (UDP 4791) into an AF_XDP socket and passes
// everything else to the kernel, which keeps the interface's addresses.
package xdp

// The AF_XDP link: RoCEv2 frames of an existing interface (a veth end, a
// NIC) are steered by an XDP program (prog.go) into an AF_XDP socket;
// everything else on the interface stays with the kernel, which keeps the
// interface's addresses and answers ARP and neighbour discovery for them.
//
// Design:
//
//   - UMEM: one anonymous mapping of NumFrames chunks of FrameSize bytes
//     (default 4096 x 4096 = 16 MiB, aligned chunks). The first half of the
//     chunks belong to receive (they cycle through the fill ring, the kernel
//     and the RX ring), the other half to transmit (a free list, the TX ring,
//     the kernel and the completion ring). Received frames are copied out of
//     their chunks into buffers from a FramePool, which the handler owns and
//     may give back with Release, and each RX chunk goes straight back to
//     the fill ring.
//   - Path MTU 4096 needs Ethernet frames of about 4200 bytes, more than a
//     chunk can hold (a chunk is at most a page, and in copy mode the kernel
//     keeps 256 bytes of headroom in each RX chunk). The link uses AF_XDP
//     multi-buffer (XDP_USE_SG, Linux 6.6+): the kernel spreads a long frame
//     over several chunks and marks all but the last descriptor with
//     XDP_PKT_CONTD, and a long frame is sent as several descriptors the
//     same way. The program is loaded with BPF_F_XDP_HAS_FRAGS to match. If
//     the kernel refuses XDP_USE_SG the link falls back to one chunk per
//     frame and MTU() reports the largest payload a chunk holds.
//   - Copy mode (XDP_COPY): veth has no zero-copy, and copy mode works on
//     every driver. The program is attached through a bpf_link
//     (BPF_LINK_CREATE), in driver mode when the driver has native XDP (veth
//     does) and generic (SKB) mode otherwise, so it is detached when the link
//     is closed or the process dies.
//   - need_wakeup (XDP_USE_NEED_WAKEUP): TX is kicked with sendto only when
//     the TX ring's flag asks for it (in copy mode it always does: the kernel
//     transmits from inside sendto); the fill ring is kicked with recvfrom
//     when its flag is set (zero-copy drivers set it; copy mode does not).
//   - Receive blocks in the Go netpoller: the socket is wrapped in an
//     os.File in non-blocking mode, and the receive goroutine, finding the
//     RX ring empty, parks in RawConn.Read until epoll reports the socket
//     readable (the kernel wakes the socket's wait queue whenever it
//     publishes RX descriptors). It never spins.
//   - One queue: the link binds one socket to one receive queue (default 0,
//     which is all a veth in a namespace has). RoCEv2 packets arriving on
//     other queues find no socket in the XSKMAP and go to the kernel.
//     Multi-queue NICs need one socket per queue (future work).
//   - Multicast (GroupJoiner): the program redirects RoCEv2 to a group
//     address like any other, but a NIC only hands the program frames whose
//     destination MAC passes its filter, and IGMP/MLD-snooping switches only
//     forward a group to ports that reported membership. JoinGroup therefore
//     makes the kernel a member of the group on the interface: it joins
//     (IP_ADD_MEMBERSHIP / IPV6_JOIN_GROUP with the interface's index) on an
//     unbound UDP socket, one per family, opened with the link in the
//     interface's namespace. The kernel then adds the group MAC
//     (01:00:5e:.. / 33:33:..) to the interface's filter (ip maddr shows it),
//     sends IGMP/MLD reports and answers queries. The socket is never bound
//     and receives nothing; the group's RoCEv2 frames still go to the XDP
//     socket. Joins are counted (rvt joins once per group, a caller may too);
//     the last LeaveGroup drops the membership, and Close (or the process
//     dying) drops them all. An IPv4 socket holds at most
//     net.ipv4.igmp_max_memberships groups (default 20). A veth has no MAC
//     filter (its XDP program sees every frame), so there the join only
//     matters to the kernel's own bookkeeping and to bridges beyond it.
//
// Send copies the frame into free TX chunks, posts descriptors and kicks.
// When the TX ring or the TX chunks are exhausted it reaps completions and
// kicks again, yielding the processor in between, for a bounded number of
// rounds; if still full the frame is dropped and counted (TxDropped), as
// the Link contract asks: the reliable transports retransmit.
//
// Lock order: closeMu (read side, held while the socket's fd is used from
// Send, kick or Stats) before txMu. The RX and fill rings belong to
// whichever goroutine holds rxBusy, the receive goroutine or a caller of
// PollReceive, and take no lock.

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/internal/rearm"
)

// AttachMode chooses how the XDP program is attached.
type AttachMode int

// Attach modes.
const (
	// ModeAuto tries driver (native) mode and falls back to generic.
	ModeAuto AttachMode = iota
	// ModeDriver attaches in the driver's receive path (veth, most NICs).
	ModeDriver
	// ModeGeneric attaches at the generic (SKB) hook: any interface, slower.
	ModeGeneric
)

func (m AttachMode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeDriver:
		return "driver"
	case ModeGeneric:
		return "generic"
	}
	return fmt.Sprintf("XDPAttachMode(%d)", int(m))
}

// Options configures Open. The zero value is a good default.
type Options struct {
	// Queue is the receive queue the socket binds to (default 0).
	Queue int
	// Mode chooses the attach mode (default ModeAuto).
	Mode AttachMode
	// FrameSize is the UMEM chunk size: 2048 or 4096 (default 4096).
	FrameSize int
	// NumFrames is the number of UMEM chunks, half for receive and half for
	// transmit (default 4096).
	NumFrames int
	// RingSize is the number of entries of each of the four rings, a power
	// of two (default 2048).
	RingSize int
	// NoMultiBuffer disables XDP_USE_SG: every frame must then fit in one
	// chunk, and MTU() is reduced to what a chunk holds.
	NoMultiBuffer bool
	// Clock drives the neighbour cache (nil: real time).
	Clock clock.Clock
	// Logger receives setup messages (nil: discard).
	Logger *slog.Logger
}

// Stats are the link's counters. The Kernel* fields come from the
// socket's XDP_STATISTICS; Program counts the XDP program's outcomes on
// this interface (all queues) by name.
type Stats struct {
	RxFrames, RxBytes uint64
	TxFrames, TxBytes uint64
	// RxDropped counts received frames the link dropped: longer than its
	// buffers, a descriptor outside the UMEM, or no handler set.
	RxDropped uint64
	// TxDropped counts frames Send dropped: too short, too long, or TX still
	// full after waiting.
	TxDropped uint64
	// TxFullWaits counts the rounds Send spent waiting for a TX slot.
	TxFullWaits uint64
	// TxKicks counts sendto calls; TxKickBusy those that returned EAGAIN
	// (kernel budget used up or the device busy); TxKickErrors other errors.
	TxKicks, TxKickBusy, TxKickErrors uint64
	// TxFlushTimers counts kicks that gave up on a busy device and left
	// the rest to a timer.
	TxFlushTimers uint64
	// TxLazyFlushes counts FlushLazy timers armed (acknowledgements left
	// to ride with the next transmit).
	TxLazyFlushes uint64
	// FillWakeups counts recvfrom calls made because the fill ring asked.
	FillWakeups uint64

	KernelRxDropped        uint64 // dropped by the kernel (no room, too long)
	KernelRxInvalidDescs   uint64
	KernelTxInvalidDescs   uint64
	KernelRxRingFull       uint64
	KernelRxFillRingEmpty  uint64 // the fill ring was empty when a frame came
	KernelTxRingEmptyDescs uint64

	Program map[string]uint64
}

// Link is a Link over an AF_XDP socket on an existing interface.
type Link struct {
	ifname    string
	ifindex   int
	mac       netdev.MAC
	mtu       int
	queue     int
	sg        bool
	mode      AttachMode
	frameSize uint64
	log       *slog.Logger

	fd   int      // the socket; only used under closeMu.RLock (or by rx)
	file *os.File // the same fd, registered with the netpoller
	rc   syscall.RawConn
	umem []byte
	objs *xdpObjects
	blnk link.Link
	nbr  *netdev.KernelNeighbours

	maxFrame int               // longest frame received (MaxFrameLen(mtu))
	pool     *netdev.FramePool // received frames' buffers, back through Release
	netdev.Receiver

	// Receive side: owned by whoever holds rxBusy (rxLoop or PollReceive).
	rx        descRing
	fill      addrRing
	rxDone    chan struct{}
	rxStarted bool
	frames    [][]byte // batch of received frames handed out after the rings are updated

	// closeMu guards the fd against Close: Send, kick and Stats hold the
	// read side; Close takes the write side once. closing is the one
	// closed state. Close sets it, without the lock, once it has kicked
	// out the TX ring's last frames and before teardown, so that a Send
	// waiting for TX room gives up at once instead of holding teardown
	// off for its remaining rounds; teardown sets it again under the
	// write lock before it closes the fd, so a holder of the read side
	// that saw it false may use the fd until it unlocks.
	closeMu sync.RWMutex
	closing atomic.Bool

	txMu    sync.Mutex
	tx      descRing
	comp    addrRing
	txFree  []uint64 // free TX chunk offsets
	kickers atomic.Int32
	holders atomic.Int32 // Hold calls not yet flushed: Send leaves publishing and the kick to Flush
	eager   atomic.Bool  // a holder ended with Flush while others held: the last kicks, even with FlushLazy
	// lazy counts the descriptors at the start of the TX ring's unpublished
	// part that FlushLazy left there (acknowledgements): published behind
	// what is sent next (publishLocked), or by lazyTimer. Under txMu.
	lazy       uint32
	rxBusy     atomic.Bool // a goroutine (rxLoop or PollReceive) is consuming the RX ring
	polled     atomic.Bool // PollReceive, not rxLoop, took the last frames: the application busy-polls
	clk        clock.Clock
	lazyTimer  rearm.Timer // FlushLazy's kick
	flushTimer rearm.Timer // armFlush's kick
	txCount    netdev.FrameCount

	txDropped, txFullWaits                      atomic.Uint64
	txKicks, txKickBusy, txKickErrs, fillWakeup atomic.Uint64
	flushTimers                                 atomic.Uint64
	lazyFlushes                                 atomic.Uint64

	// Multicast membership (see JoinGroup): one UDP socket per family,
	// opened in the interface's namespace (-1: closed or the family is
	// missing), and the join count of each group.
	mcMu   sync.Mutex
	mcFD4  int
	mcFD6  int
	groups netdev.GroupRefs

	closeOnce sync.Once
	closeErr  error
}

var (
	_ netdev.Holder      = (*Link)(nil)
	_ netdev.Poller      = (*Link)(nil)
	_ netdev.Releaser    = (*Link)(nil)
	_ netdev.Link        = (*Link)(nil)
	_ netdev.GroupJoiner = (*Link)(nil)
)

// Errors Open may return (wrapped).
var (
	ErrXDPOptions = errors.New("netdev: bad xdp options")
)

const (
	rxBatchFrames = 64
	txMaxRounds   = 256                    // rounds of reap+kick+yield before Send drops a frame
	kickRetries   = 16                     // sendto calls without progress before a kick gives up
	flushDelay    = 100 * time.Microsecond // retry after a kick gave up
	txSkbBudget   = 256                    // XDP_MAX_TX_SKB_BUDGET: descriptors per sendto (kernel default 32)
	bindRetries   = 100000                 // binds that may find the queue still busy (see bind)

	// Close waits for the kernel to take what the TX ring holds for at
	// most closeDrainWait on the link's clock and closeDrainPolls polls
	// (a manual clock does not move on its own).
	closeDrainWait  = 10 * time.Millisecond
	closeDrainPolls = 1000
)

// Open opens an AF_XDP link on interface ifname, in the network
// namespace of the calling thread: it loads and attaches the steering
// program, creates the socket, its UMEM and rings, binds to opts.Queue, and
// starts the receive goroutine. It needs CAP_NET_ADMIN and CAP_BPF (root).
// Close undoes all of it.
func Open(ifname string, opts Options) (*Link, error) {
	// Interface lookups, the bind and the attach resolve the interface in
	// the namespace of the current thread: stay on it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	if opts.FrameSize == 0 {
		opts.FrameSize = 4096
	}
	if opts.NumFrames == 0 {
		opts.NumFrames = 4096
	}
	if opts.RingSize == 0 {
		opts.RingSize = 2048
	}
	if opts.FrameSize != 2048 && opts.FrameSize != 4096 {
		return nil, fmt.Errorf("open xdp %s: %w: frame size %d is not 2048 or 4096", ifname, ErrXDPOptions, opts.FrameSize)
	}
	if opts.RingSize < 64 || opts.RingSize&(opts.RingSize-1) != 0 {
		return nil, fmt.Errorf("open xdp %s: %w: ring size %d is not a power of two >= 64", ifname, ErrXDPOptions, opts.RingSize)
	}
	if opts.NumFrames < 2*64 {
		return nil, fmt.Errorf("open xdp %s: %w: %d frames is too few", ifname, ErrXDPOptions, opts.NumFrames)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("open xdp %s: %w", ifname, err)
	}
	mac, ok := netdev.MACFrom(ifi.HardwareAddr)
	if !ok {
		return nil, fmt.Errorf("open xdp %s: %w: not an ethernet interface", ifname, ErrXDPOptions)
	}
	l := &Link{
		ifname: ifname, ifindex: ifi.Index, mac: mac, mtu: ifi.MTU, queue: opts.Queue,
		frameSize: uint64(opts.FrameSize), log: log, fd: -1, rxDone: make(chan struct{}),
		clk: clock.OrReal(opts.Clock), mcFD4: -1, mcFD6: -1,
	}
	l.lazyTimer.Init(l.clk, l.lazyKick)
	l.flushTimer.Init(l.clk, l.kickIfOpen)
	ok = false
	defer func() {
		if !ok {
			_ = l.teardown()
		}
	}()

	if l.nbr, err = netdev.OpenKernelNeighboursIndex(ifi.Index, opts.Clock); err != nil {
		return nil, fmt.Errorf("open xdp %s: %w", ifname, err)
	}
	if err = l.openGroupSockets(); err != nil {
		return nil, fmt.Errorf("open xdp %s: %w", ifname, err)
	}
	if err = l.setupSocket(opts); err != nil {
		return nil, fmt.Errorf("open xdp %s: %w", ifname, err)
	}
	if err = l.setupProgram(opts.Mode); err != nil {
		return nil, fmt.Errorf("open xdp %s: %w", ifname, err)
	}
	if !l.sg {
		// One chunk per frame: in copy mode the kernel keeps 256 bytes of
		// headroom in each RX chunk.
		max := opts.FrameSize - unix.XDP_PACKET_HEADROOM - netdev.EthernetHeaderLen - netdev.VLANTagLen
		if l.mtu > max {
			l.mtu = max
		}
	}
	l.maxFrame = netdev.MaxFrameLen(l.mtu)
	l.pool = netdev.NewFramePool(l.maxFrame)
	l.frames = make([][]byte, 0, rxBatchFrames)

	f := os.NewFile(uintptr(l.fd), "xsk:"+ifname)
	if f == nil {
		return nil, fmt.Errorf("open xdp %s: wrapping the socket failed", ifname)
	}
	l.file = f
	if l.rc, err = f.SyscallConn(); err != nil {
		return nil, fmt.Errorf("open xdp %s: %w", ifname, err)
	}
	l.rxStarted = true
	go l.rxLoop()
	ok = true
	log.Info("xdp link open", "if", ifname, "ifindex", l.ifindex, "queue", l.queue, "mode", l.mode,
		"multibuffer", l.sg, "mtu", l.mtu, "frame", opts.FrameSize, "frames", opts.NumFrames)
	return l, nil
}

// setupSocket creates the socket, the UMEM and the rings, fills the fill
// ring and binds.
func (l *Link) setupSocket(opts Options) error {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("socket(AF_XDP): %w", err)
	}
	l.fd = fd
	l.umem, err = unix.Mmap(-1, 0, opts.NumFrames*opts.FrameSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("mmap umem: %w", err)
	}
	reg := unix.XDPUmemReg{
		Addr: uint64(uintptr(unsafe.Pointer(unsafe.SliceData(l.umem)))),
		Len:  uint64(len(l.umem)), Size: uint32(opts.FrameSize),
	}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return fmt.Errorf("register umem: %w", err)
	}
	n := opts.RingSize
	for _, o := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING, unix.XDP_TX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o, n); err != nil {
			return fmt.Errorf("set ring size (opt %d): %w", o, err)
		}
	}
	var off unix.XDPMmapOffsets
	if err := getsockopt(fd, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return fmt.Errorf("get mmap offsets: %w", err)
	}
	e := uint32(n)
	if l.rx, err = mapDescRing(fd, unix.XDP_PGOFF_RX_RING, off.Rx, e); err != nil {
		return err
	}
	if l.tx, err = mapDescRing(fd, unix.XDP_PGOFF_TX_RING, off.Tx, e); err != nil {
		return err
	}
	if l.fill, err = mapAddrRing(fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, e); err != nil {
		return err
	}
	if l.comp, err = mapAddrRing(fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, e); err != nil {
		return err
	}

	// Split the chunks: receive gets up to a fill ring's worth.
	nrx := min(opts.NumFrames/2, n)
	for i := range nrx {
		l.fill.put(uint64(i) * l.frameSize)
	}
	l.fill.submit()
	l.txFree = make([]uint64, 0, opts.NumFrames-nrx)
	for i := nrx; i < opts.NumFrames; i++ {
		l.txFree = append(l.txFree, uint64(i)*l.frameSize)
	}

	// More descriptors per sendto than the default 32 (Linux 6.17+; older
	// kernels refuse the option, which is harmless).
	_ = unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, txSkbBudget)

	flags := uint16(unix.XDP_COPY | unix.XDP_USE_NEED_WAKEUP)
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(l.ifindex), QueueID: uint32(l.queue)}
	if !opts.NoMultiBuffer {
		sa.Flags |= unix.XDP_USE_SG
		err = l.bind(sa)
		if err == nil {
			l.sg = true
			return nil
		}
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("bind to queue %d with multi-buffer: %w", l.queue, err)
		}
		l.log.Warn("xdp: kernel has no AF_XDP multi-buffer; frames limited to one chunk", "if", l.ifname)
		sa.Flags = flags
	}
	if err := l.bind(sa); err != nil {
		return fmt.Errorf("bind to queue %d: %w", l.queue, err)
	}
	return nil
}

// bind binds the socket. The kernel frees the queue of a closed socket
// asynchronously (in a work item), so a socket opened right after another
// one on the same queue was closed may see EBUSY for a moment: retry,
// yielding, for a bounded number of attempts.
func (l *Link) bind(sa *unix.SockaddrXDP) error {
	var err error
	for try := 0; try < bindRetries; try++ {
		if err = unix.Bind(l.fd, sa); !errors.Is(err, unix.EBUSY) {
			if try > 0 {
				l.log.Debug("xdp: bind succeeded after retries", "tries", try)
			}
			return err
		}
		runtime.Gosched()
	}
	return err
}

// setupProgram loads the program, puts the socket in the XSKMAP and
// attaches the program through a bpf_link.
func (l *Link) setupProgram(mode AttachMode) error {
	objs, err := loadXDPObjects()
	if err != nil {
		return err
	}
	l.objs = objs
	if err := objs.xsks.Put(uint32(l.queue), uint32(l.fd)); err != nil {
		return fmt.Errorf("insert socket into xskmap: %w", err)
	}
	attach := func(m AttachMode) error {
		flags := link.XDPDriverMode
		if m == ModeGeneric {
			flags = link.XDPGenericMode
		}
		bl, err := link.AttachXDP(link.XDPOptions{Program: objs.prog, Interface: l.ifindex, Flags: flags})
		if err != nil {
			return fmt.Errorf("attach xdp (%s mode): %w", m, err)
		}
		l.blnk, l.mode = bl, m
		return nil
	}
	if mode != ModeAuto {
		return attach(mode)
	}
	if err := attach(ModeDriver); err != nil {
		l.log.Info("xdp: driver mode unavailable, using generic", "if", l.ifname, "err", err)
		return attach(ModeGeneric)
	}
	return nil
}

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	l := uint32(n)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p),
		uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// Name returns the interface name.
func (l *Link) Name() string { return l.ifname }

// Index returns the interface index (in its namespace).
func (l *Link) Index() int { return l.ifindex }

// HardwareAddr returns the interface's MAC.
func (l *Link) HardwareAddr() netdev.MAC { return l.mac }

// MTU returns the interface's MTU (reduced to a chunk's capacity without
// multi-buffer).
func (l *Link) MTU() int { return l.mtu }

// Mode returns the attach mode in use.
func (l *Link) Mode() AttachMode { return l.mode }

// MultiBuffer reports whether the socket uses XDP_USE_SG.
func (l *Link) MultiBuffer() bool { return l.sg }

// Neighbours returns the kernel neighbour table reader bound to the
// interface's namespace (its Resolve fits rvt.Options.Resolve).
func (l *Link) Neighbours() *netdev.KernelNeighbours { return l.nbr }

// Release takes back a frame the handler is done with.
func (l *Link) Release(frame []byte) { l.pool.Put(frame) }

// ReceivesOnOwnGoroutine reports true: the handler runs on the link's
// receive goroutine.
func (l *Link) ReceivesOnOwnGoroutine() bool { return true }

// rxLoop is the receive goroutine.
func (l *Link) rxLoop() {
	defer close(l.rxDone)
	// pending, not available: a busy poller may be consuming meanwhile,
	// and only the shared indexes may be read without owning the ring.
	ready := func(uintptr) bool { return l.rx.pending() > 0 || l.closing.Load() }
	for !l.closing.Load() {
		if !l.rxBusy.CompareAndSwap(false, true) {
			// A busy poller has the ring (PollReceive): let it work.
			runtime.Gosched()
			continue
		}
		got := l.rxBatch()
		l.rxBusy.Store(false)
		if got {
			if l.polled.Load() {
				l.polled.Store(false)
			}
			continue
		}
		// The RX ring is empty: park in the netpoller until the kernel
		// publishes descriptors and wakes the socket.
		if err := l.rc.Read(ready); err != nil {
			return // the file was closed
		}
	}
}

// PollReceive consumes received frames on the calling goroutine, handing
// them to the handler there, if no other goroutine is consuming the RX
// ring; it reports whether it handled any. A goroutine that spins waiting
// for traffic (a busy-polling latency loop, like SO_BUSY_POLL for
// sockets) calls it to take frames straight from the ring instead of
// waiting for the receive goroutine's wake-up.
func (l *Link) PollReceive() bool {
	if l.closing.Load() || !l.rxBusy.CompareAndSwap(false, true) {
		return false
	}
	got := l.rxBatch()
	l.rxBusy.Store(false)
	if got && !l.polled.Load() {
		l.polled.Store(true)
	}
	return got
}

// rxBatch consumes up to rxBatchFrames whole frames from the RX ring,
// recycles their chunks into the fill ring and hands the frames to the
// handler. It reports whether it consumed anything.
func (l *Link) rxBatch() bool {
	avail := l.rx.available()
	if avail == 0 {
		return false
	}
	umemLen := uint64(len(l.umem))
	var used uint32
	frames := l.frames[:0]
	for used < avail && len(frames) < rxBatchFrames {
		// A frame is a run of descriptors ending with one without
		// XDP_PKT_CONTD. The kernel publishes frames whole; stop before a
		// partial one all the same.
		end := used
		for end < avail && l.rx.at(end).Options&unix.XDP_PKT_CONTD != 0 {
			end++
		}
		if end == avail {
			break
		}
		total, ok := 0, true
		for i := used; i <= end; i++ {
			d := l.rx.at(i)
			total += int(d.Len)
			ok = ok && d.Addr+uint64(d.Len) <= umemLen
		}
		ok = ok && total <= l.maxFrame
		var buf []byte
		if ok {
			// The handler owns the frame: it gets a pool buffer of its
			// own, which it may hand back through Release.
			buf = l.pool.Get()[:total]
		}
		n := 0
		for i := used; i <= end; i++ {
			d := l.rx.at(i)
			if ok {
				n += copy(buf[n:], l.umem[d.Addr:d.Addr+uint64(d.Len)])
			}
			if l.fill.free() > 0 {
				l.fill.put(d.Addr &^ (l.frameSize - 1))
			}
		}
		used = end + 1
		if !ok {
			l.CountDropped()
			continue
		}
		frames = append(frames, buf)
	}
	if used == 0 {
		return false
	}
	l.rx.release(used)
	l.fill.submit()
	if l.fill.needWakeup() {
		l.fillWakeup.Add(1)
		_, _, _ = unix.Recvfrom(l.fd, nil, unix.MSG_DONTWAIT)
	}
	for i, f := range frames {
		l.Deliver(f, len(f), l)
		frames[i] = nil
	}
	l.frames = frames[:0]
	return true
}

// Send transmits frame: it copies it into free TX chunks (several, marked
// XDP_PKT_CONTD, if it is longer than a chunk), posts the descriptors and
// kicks the kernel if the TX ring asks for it. If TX is full it waits a
// bounded number of rounds for completions, then drops the frame and
// counts it. Errors: ErrClosed, ErrTruncated (shorter than an Ethernet
// header), ErrFrameTooLong (longer than the MTU allows).
func (l *Link) Send(frame []byte) error {
	if len(frame) < netdev.EthernetHeaderLen {
		l.txDropped.Add(1)
		return netdev.ErrTruncated
	}
	if netdev.FrameTooLong(frame, l.mtu) {
		l.txDropped.Add(1)
		return netdev.ErrFrameTooLong
	}
	nd := uint32((uint64(len(frame)) + l.frameSize - 1) / l.frameSize)
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	l.txMu.Lock()
	for round := 0; ; round++ {
		if l.closing.Load() {
			l.txMu.Unlock()
			return netdev.ErrClosed
		}
		l.reapLocked()
		if uint32(len(l.txFree)) >= nd && l.tx.free() >= nd {
			break
		}
		if round == txMaxRounds {
			l.txMu.Unlock()
			l.txDropped.Add(1)
			return nil
		}
		l.txFullWaits.Add(1)
		l.publishLocked() // a hold's frames too: the kernel takes only what is published
		l.txMu.Unlock()
		l.kickRLocked()
		runtime.Gosched()
		l.txMu.Lock()
	}
	for off := 0; off < len(frame); {
		chunk := l.txFree[len(l.txFree)-1]
		l.txFree = l.txFree[:len(l.txFree)-1]
		n := copy(l.umem[chunk:chunk+l.frameSize], frame[off:])
		off += n
		var opt uint32
		if off < len(frame) {
			opt = unix.XDP_PKT_CONTD
		}
		l.tx.put(unix.XDPDesc{Addr: chunk, Len: uint32(n), Options: opt})
	}
	// While a holder is active its Flush publishes and kicks for every
	// frame queued before it: the load is under txMu, which the last
	// Flush takes after its decrement.
	kick := false
	if l.holders.Load() == 0 {
		l.publishLocked()
		kick = l.tx.needWakeup()
	}
	l.txMu.Unlock()
	l.txCount.Add(1, uint64(len(frame)))
	if kick {
		l.kickRLocked()
	}
	return nil
}

// maxAhead bounds how many descriptors publishLocked puts ahead of the
// frames FlushLazy left: a reply goes before the acknowledgement queued
// just before it, a burst of data does not hold acknowledgements back.
const maxAhead = 16

// publishLocked hands the kernel what Send put on the TX ring. While the
// application busy-polls the link (polled), the frames FlushLazy left
// there (acknowledgements) go behind those queued since, if these are
// few: in copy mode the kernel takes the ring in order and delivers each
// frame to the peer before it takes the next, so the reply to a SEND,
// which goes out with the SEND's ACK, reaches a busy-polling peer a
// frame's kernel work sooner (RC SEND ping-pong over a veth, busy
// polling: 4.9-5.8 us a half round trip against 6.6-14.2, docs/performance.md).
// Event-driven peers lost 1-4 us with the same order in the same
// measurement (not traced further: both frames are there when their
// receive goroutine wakes), and both sides of the tools that measure
// latency poll or both wait, so the order changes only while this side
// polls. The
// two are of different flows (the ACK the responder's, the reply the
// requester's), whose order nothing depends on; within the responder's
// flow an ACK overtaken by a later response is one that response
// acknowledged already. Called under txMu and closeMu.RLock.
func (l *Link) publishLocked() {
	if l.lazy != 0 {
		if n := l.tx.unpublished(); n > l.lazy && n-l.lazy <= maxAhead && l.polled.Load() {
			l.tx.rotate(l.lazy, n)
		}
		l.lazy = 0
	}
	l.tx.submit()
}

// Hold makes Send leave the transmit kick to Flush, so that a burst of
// frames costs one sendto instead of one each. In copy mode the kernel
// transmits up to 32 descriptors per sendto.
func (l *Link) Hold() { l.holders.Add(1) }

// FlushLazy ends a Hold; if it is the last, the queued frames go out with
// the next kick, behind what is sent next (publishLocked), or from a
// timer after LazyFlushDelay at the latest.
func (l *Link) FlushLazy() {
	if l.holders.Add(-1) != 0 {
		return
	}
	if l.eager.Swap(false) {
		// Another holder flushed while this one held: what it queued
		// is not to wait (an application's reply posted while the
		// receive goroutine ended its batch with an ACK).
		l.publishAndKick()
		return
	}
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closing.Load() {
		return
	}
	l.txMu.Lock()
	l.lazy = l.tx.unpublished()
	left := l.lazy != 0 || l.tx.pending() > 0
	l.txMu.Unlock()
	if left && l.lazyTimer.ArmOnce(netdev.LazyFlushDelay) {
		l.lazyFlushes.Add(1)
	}
}

// lazyKick is FlushLazy's timer callback: it publishes and kicks unless
// a hold is open again (its Flush will).
func (l *Link) lazyKick() {
	if l.holders.Load() == 0 {
		l.publishAndKick()
	}
}

// Flush ends a Hold; the last one publishes the queued frames and kicks
// the kernel for them.
func (l *Link) Flush() {
	if l.holders.Add(-1) == 0 {
		if l.eager.Load() { // what it asked for goes now
			l.eager.Store(false)
		}
		l.publishAndKick()
		return
	}
	// Another holder is last: its FlushLazy sends at once if it sees
	// eager. If it was done before the store (holders back at 0), it
	// may not have: then whoever takes eager back sends (this Flush, or
	// a later last holder). Only here, so that a lone holder's Flush,
	// the common case, costs no second locked instruction.
	l.eager.Store(true)
	if l.holders.Load() == 0 && l.eager.Swap(false) {
		l.publishAndKick()
	}
}

// publishAndKick publishes what the TX ring holds and kicks the kernel
// for it, unless the link is closing.
func (l *Link) publishAndKick() {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closing.Load() {
		return
	}
	l.txMu.Lock()
	l.publishLocked()
	l.txMu.Unlock()
	if l.tx.pending() > 0 && l.tx.needWakeup() {
		l.kickRLocked()
	}
}

// kickIfOpen kicks the kernel for what the TX ring holds, if anything,
// unless the link is closing. With nothing pending, or a kernel that
// needs no wake-up, it skips kickRLocked's counter: drainRLocked would
// find the same and do nothing, and a kick already under way drains
// for as long as both hold.
func (l *Link) kickIfOpen() {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if !l.closing.Load() && l.tx.pending() > 0 && l.tx.needWakeup() {
		l.kickRLocked()
	}
}

// reapLocked moves completed TX chunks back to the free list.
func (l *Link) reapLocked() {
	n := l.comp.available()
	if n == 0 {
		return
	}
	limit := uint64(len(l.umem))
	for i := range n {
		a := l.comp.at(i) &^ (l.frameSize - 1)
		if a < limit && len(l.txFree) < cap(l.txFree) {
			l.txFree = append(l.txFree, a)
		}
	}
	l.comp.release(n)
}

// kickRLocked makes the kernel transmit what the TX ring holds (sendto).
// Concurrent callers coalesce: while one goroutine is in sendto, others
// only record that another round is needed, and the kicking goroutine
// loops until no request is left. The caller holds closeMu.RLock.
func (l *Link) kickRLocked() {
	if l.kickers.Add(1) > 1 {
		return
	}
	for {
		n := l.kickers.Load()
		l.drainRLocked()
		if l.kickers.Add(-n) == 0 {
			return
		}
	}
}

// drainRLocked calls sendto until the kernel has taken every descriptor
// of the TX ring. In copy mode the kernel transmits inside sendto, a
// bounded number of descriptors per call, and answers EAGAIN when its
// budget ran out or the device is busy (a veth whose peer's ring is full).
// As long as the kernel makes progress it keeps going; after kickRetries
// calls without progress it gives up and arms a timer to try again, so a
// tail of descriptors is never stranded until the next Send.
func (l *Link) drainRLocked() {
	stalls := 0
	for l.tx.pending() > 0 && l.tx.needWakeup() {
		before := atomic.LoadUint32(l.tx.cons)
		l.txKicks.Add(1)
		err := unix.Sendto(l.fd, nil, unix.MSG_DONTWAIT, nil)
		if err != nil {
			if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOBUFS) {
				l.txKickErrs.Add(1)
				return
			}
			l.txKickBusy.Add(1)
		}
		if atomic.LoadUint32(l.tx.cons) != before {
			stalls = 0
			continue
		}
		if stalls++; stalls >= kickRetries {
			l.armFlush()
			return
		}
		runtime.Gosched()
	}
}

// armFlush schedules one more kick on the clock, unless one is pending.
func (l *Link) armFlush() {
	if l.flushTimer.ArmOnce(flushDelay) {
		l.flushTimers.Add(1)
	}
}

// Stats returns the link's counters, the socket's kernel statistics and the
// program's counters.
func (l *Link) Stats() Stats {
	rxFrames, rxBytes, rxDropped := l.RxCounts()
	txFrames, txBytes := l.txCount.Load()
	s := Stats{
		RxFrames: rxFrames, RxBytes: rxBytes,
		TxFrames: txFrames, TxBytes: txBytes,
		RxDropped: rxDropped, TxDropped: l.txDropped.Load(),
		TxFullWaits: l.txFullWaits.Load(), TxKicks: l.txKicks.Load(),
		TxKickBusy: l.txKickBusy.Load(), TxKickErrors: l.txKickErrs.Load(),
		FillWakeups: l.fillWakeup.Load(), TxFlushTimers: l.flushTimers.Load(),
		TxLazyFlushes: l.lazyFlushes.Load(),
	}
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	if l.closing.Load() {
		return s
	}
	var ks unix.XDPStatistics
	if getsockopt(l.fd, unix.XDP_STATISTICS, unsafe.Pointer(&ks), unsafe.Sizeof(ks)) == nil {
		s.KernelRxDropped = ks.Rx_dropped
		s.KernelRxInvalidDescs = ks.Rx_invalid_descs
		s.KernelTxInvalidDescs = ks.Tx_invalid_descs
		s.KernelRxRingFull = ks.Rx_ring_full
		s.KernelRxFillRingEmpty = ks.Rx_fill_ring_empty_descs
		s.KernelTxRingEmptyDescs = ks.Tx_ring_empty_descs
	}
	if c, err := l.objs.readCounters(); err == nil {
		s.Program = make(map[string]uint64, len(c))
		for i, v := range c {
			s.Program[xdpCounter(i).String()] = v
		}
	}
	return s
}

// Close sends what is queued, detaches the program (closing its
// bpf_link), stops the receive goroutine, closes the socket and unmaps its
// memory. Later Sends return ErrClosed.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		// Hand the kernel the frames still on the TX ring. FlushLazy
		// leaves acknowledgements there for up to LazyFlushDelay, and a
		// program that closes its device right after its last receive
		// completion (as ibv_rc_pingpong does) would otherwise take its
		// last ACK with it: the peer then retries until its retry count
		// runs out. In copy mode (the only one this link binds) the
		// kernel sends a bounded batch per sendto and answers EAGAIN
		// while busy; a kick that stalls leaves the rest to a timer
		// that closing disarms, so kick again (bounded) until the ring
		// is empty.
		l.drainTXForClose()
		l.closing.Store(true)
		l.closeErr = l.teardown()
	})
	return l.closeErr
}

// drainTXForClose kicks the kernel until it has consumed every
// descriptor of the TX ring, for at most closeDrainWait and
// closeDrainPolls kicks; what is left then is dropped by teardown. Only
// Close calls it, once and before anything sets closing.
func (l *Link) drainTXForClose() {
	l.closeMu.RLock()
	defer l.closeMu.RUnlock()
	l.txMu.Lock()
	l.publishLocked() // what FlushLazy or an open hold left
	l.txMu.Unlock()
	deadline := l.clk.Now().Add(closeDrainWait)
	for i := 0; ; i++ {
		l.kickRLocked()
		if l.tx.pending() == 0 || i+1 >= closeDrainPolls || !l.clk.Now().Before(deadline) {
			return
		}
		runtime.Gosched()
	}
}

// teardown releases whatever has been set up; it also serves Open's
// error path.
func (l *Link) teardown() error {
	var errs []error
	if l.blnk != nil {
		errs = append(errs, l.blnk.Close())
	}
	l.closeMu.Lock()
	l.closing.Store(true)
	if l.file != nil {
		// Wakes the receive goroutine out of the netpoller; the fd is
		// closed once it has left RawConn.Read.
		errs = append(errs, l.file.Close())
		l.closeMu.Unlock()
		if l.rxStarted {
			<-l.rxDone
		}
		// Wait out a PollReceive in progress and keep others out.
		for !l.rxBusy.CompareAndSwap(false, true) {
			runtime.Gosched()
		}
	} else {
		if l.fd >= 0 {
			errs = append(errs, unix.Close(l.fd))
		}
		l.closeMu.Unlock()
	}
	if l.objs != nil {
		errs = append(errs, l.objs.Close())
	}
	for _, r := range []*xskRing{&l.rx.xskRing, &l.tx.xskRing, &l.fill.xskRing, &l.comp.xskRing} {
		errs = append(errs, r.unmap())
	}
	if l.umem != nil {
		errs = append(errs, unix.Munmap(l.umem))
		l.umem = nil
	}
	if l.nbr != nil {
		errs = append(errs, l.nbr.Close())
	}
	l.mcMu.Lock()
	for _, fd := range []*int{&l.mcFD4, &l.mcFD6} {
		if *fd >= 0 {
			errs = append(errs, unix.Close(*fd))
			*fd = -1
		}
	}
	l.groups.Reset()
	l.mcMu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close xdp %s: %w", l.ifname, err)
	}
	return nil
}

// openGroupSockets opens the UDP sockets JoinGroup uses, in the namespace
// of the calling thread. A family the namespace does not have (IPv6
// disabled) leaves its socket at -1; JoinGroup then refuses its groups.
func (l *Link) openGroupSockets() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return fmt.Errorf("multicast socket: %w", err)
	}
	l.mcFD4 = fd
	if fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP); err == nil {
		l.mcFD6 = fd
	} else if !errors.Is(err, unix.EAFNOSUPPORT) {
		return fmt.Errorf("multicast socket (ipv6): %w", err)
	}
	return nil
}

// JoinGroup makes the interface a member of IP multicast group (IPv4,
// IPv6, or IPv4-mapped), so that its RoCEv2 traffic reaches the interface
// and thus the XDP program: the kernel adds the group MAC to the
// interface's filter and reports membership with IGMP or MLD. Joins are
// counted; each needs a LeaveGroup.
func (l *Link) JoinGroup(group netip.Addr) error {
	group = group.Unmap()
	if !group.IsMulticast() {
		return fmt.Errorf("xdp %s: join group %v: not a multicast address", l.ifname, group)
	}
	l.mcMu.Lock()
	defer l.mcMu.Unlock()
	_, err := l.groups.Join(group, func() error { return l.membershipLocked(group, true) })
	if err != nil {
		return fmt.Errorf("xdp %s: join group %v: %w", l.ifname, group, err)
	}
	return nil
}

// LeaveGroup undoes one JoinGroup; the last one drops the membership.
func (l *Link) LeaveGroup(group netip.Addr) error {
	group = group.Unmap()
	l.mcMu.Lock()
	defer l.mcMu.Unlock()
	_, err := l.groups.Leave(group, func() error {
		if err := l.membershipLocked(group, false); err != nil {
			return fmt.Errorf("leave group %v: %w", group, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("xdp %s: %w", l.ifname, err)
	}
	return nil
}

// membershipLocked adds or drops the kernel's membership of group on the
// interface. The caller holds mcMu.
func (l *Link) membershipLocked(group netip.Addr, join bool) error {
	if group.Is4() {
		if l.mcFD4 < 0 {
			return netdev.ErrClosed
		}
		opt := unix.IP_ADD_MEMBERSHIP
		if !join {
			opt = unix.IP_DROP_MEMBERSHIP
		}
		mreq := &unix.IPMreqn{Multiaddr: group.As4(), Ifindex: int32(l.ifindex)}
		return unix.SetsockoptIPMreqn(l.mcFD4, unix.IPPROTO_IP, opt, mreq)
	}
	if l.mcFD6 < 0 {
		if l.closing.Load() {
			return netdev.ErrClosed
		}
		return fmt.Errorf("no IPv6 in the interface's namespace: %w", unix.EAFNOSUPPORT)
	}
	opt := unix.IPV6_JOIN_GROUP
	if !join {
		opt = unix.IPV6_LEAVE_GROUP
	}
	mreq := &unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(l.ifindex)}
	return unix.SetsockoptIPv6Mreq(l.mcFD6, unix.IPPROTO_IPV6, opt, mreq)
}
