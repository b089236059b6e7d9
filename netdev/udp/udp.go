//go:build linux

// Package udp is the link over a kernel UDP socket, unprivileged: the
// kernel does IP and UDP, and the link rebuilds the headers the RoCEv2
// ICRC covers.
package udp

// Lock order: Link.mu only; no lock is held while a socket is read or
// written or the handler runs.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/internal/netns"
)

// RcvBuf is the receive buffer, in bytes, a Link asks for on the
// sockets it receives on: with SO_RCVBUFFORCE, which goes beyond
// net.core.rmem_max when privileged, or else with SO_RCVBUF, which the
// limit caps.
const RcvBuf = 8 << 20

// ErrPort is wrapped by the error of Open and OpenConfig for a local port
// other than 4791. RoCEv2 fixes the destination port at 4791 and a GID
// carries no port, so every peer sends there: a link listening on another
// port would never receive. (The source port is per QP and the link picks
// it per frame; it is not this port.)
var ErrPort = errors.New("netdev: a RoCEv2 link listens on UDP port 4791")

// Config configures a UDP-socket link.
type Config struct {
	// Addr is the local address and port. The port must be 0 or 4791
	// (ErrPort otherwise). The address must be a single unicast address:
	// it is the only source address the link can send from.
	Addr netip.AddrPort
	// MTU is the IP MTU reported to the transport; 0: the MTU of the
	// interface that owns Addr (has it, or has a prefix holding it, as lo
	// holds 127.0.0.0/8), or 1500.
	MTU int
	// StrictICRC turns off recovering a sender's IPv4 ID from the ICRC
	// (see icrc_id.go): then only senders that use ID 0 (softverbs) pass
	// the ICRC check, and the ICRC keeps its full 32 bits.
	StrictICRC bool
	// Clock runs FlushLazy's timer; nil: the real clock.
	Clock clock.Clock
}

// Stats counts a UDP link's traffic.
type Stats struct {
	TxPackets, TxBytes, TxErrors uint64
	// RxErrors counts failed reads and datagrams dropped because they were
	// truncated (longer than the link's buffers) or could not be framed.
	RxPackets, RxBytes, RxErrors uint64
	RxDropped                    uint64 // received with no handler set
	// RxIDRecovered counts IPv4 packets whose sender used a non-zero ID
	// (rxe) that was recovered from the ICRC; RxIDFailed those for which
	// no ID explains the ICRC (passed on, and dropped by the transport as
	// bad ICRC).
	RxIDRecovered, RxIDFailed uint64
	TxSockets                 uint64 // source-port sockets opened
	TxBatches                 uint64 // sendmmsg calls for datagrams queued under Hold
}

// Link adapts a kernel UDP socket to the Link contract, unprivileged:
// the kernel does IP and UDP, the link synthesises the Ethernet, IP and UDP
// headers around each received datagram (with the real addresses, ports,
// TOS and TTL, and fake MACs) and strips them from each frame it sends.
//
// The ICRC covers the IPv4 total length, ID and flags, so the synthesised
// header must be the sender's. Sending, the link uses unconnected sockets
// with IP_PMTUDISC_DO: Linux then sets DF and, because the socket has no
// destination, ID 0 (ip_select_ident), which is what the transport's
// framing put in the header it computed the ICRC over. Receiving, it
// rebuilds ID 0 and DF; for senders with other IDs (Linux rxe) it recovers
// the ID from the ICRC (unless StrictICRC). IPv6 has no such field.
//
// Each RoCEv2 source port (the transport picks one per QP in
// 0xC000-0xFFFF) gets its own sending socket bound to that port, so the
// ports on the wire are the ones the ICRC covers. Datagrams arrive on the
// socket bound to Addr (and on one socket per joined multicast group).
// TTL and TOS on the wire are the sockets' (64 and 0; multicast TTL 1),
// not the frame's; both are masked in the ICRC. IPv4 datagrams go out
// with UDP checksum 0 (SO_NO_CHECK), as rxe sends them, so the header on
// the wire equals the one the transport framed, byte for byte.
type Link struct {
	cfg   Config
	local netip.AddrPort
	v6    bool
	mac   netdev.MAC
	mtu   int
	pool  *netdev.FramePool
	ns    *os.File // the network namespace the link was opened in
	nsIno uint64
	main  *net.UDPConn

	netdev.Receiver // RxPackets are its frames, RxBytes count UDP payload bytes
	closed          atomic.Bool
	wg              sync.WaitGroup

	mu     sync.RWMutex
	tx     map[uint16]*net.UDPConn
	groups map[netip.Addr]*net.UDPConn // a socket per joined group
	joins  netdev.GroupRefs            // JoinGroup calls per group

	txCount                                  netdev.FrameCount
	txErrors                                 atomic.Uint64
	rxErrors                                 atomic.Uint64
	rxIDRecovered, rxIDFailed, txSocketsMade atomic.Uint64
	txBatches                                atomic.Uint64

	batch udpBatch // transmit batching under Hold
}

var (
	_ netdev.Link        = (*Link)(nil)
	_ netdev.Releaser    = (*Link)(nil)
	_ netdev.GroupJoiner = (*Link)(nil)
)

// CheckAddr reports why OpenConfig would refuse addr, if it would: a port
// other than RoCEv2's (0 stands for it), or an address that is not a
// single unicast one.
func CheckAddr(addr netip.AddrPort) error {
	if port := addr.Port(); port != 0 && port != netdev.RoCEv2Port {
		return fmt.Errorf("open udp link %v: port %d: peers send RoCEv2 to port %d only (a GID has no port), so nothing would arrive: %w",
			addr, port, netdev.RoCEv2Port, ErrPort)
	}
	if ip := addr.Addr().Unmap(); !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() {
		return fmt.Errorf("open udp link %v: need a unicast local address", addr)
	}
	return nil
}

// Open opens a UDP link on addr with defaults. Port 0 means 4791; any
// other port is refused with an error wrapping ErrPort.
func Open(addr netip.AddrPort) (*Link, error) {
	return OpenConfig(Config{Addr: addr})
}

// OpenConfig opens a UDP link. The sockets live in the network
// namespace of the calling thread; sockets the link opens later (per
// source port, per group) are opened there too.
func OpenConfig(cfg Config) (*Link, error) {
	if err := CheckAddr(cfg.Addr); err != nil {
		return nil, err
	}
	ip, port := cfg.Addr.Addr().Unmap(), uint16(netdev.RoCEv2Port)
	l := &Link{cfg: cfg, local: netip.AddrPortFrom(ip, port), v6: ip.Is6(), mtu: cfg.MTU,
		tx: make(map[uint16]*net.UDPConn), groups: make(map[netip.Addr]*net.UDPConn)}
	l.mac = udpFakeMAC(ip)
	ns, err := os.Open("/proc/thread-self/ns/net")
	if err == nil {
		var st unix.Stat_t
		if unix.Fstat(int(ns.Fd()), &st) == nil {
			l.ns, l.nsIno = ns, st.Ino
		} else {
			ns.Close()
		}
	}
	if l.mtu == 0 {
		l.mtu = interfaceMTU(ip)
	}
	l.pool = netdev.NewFramePool(netdev.MaxFrameLen(l.mtu) + netdev.IPv6HeaderLen)
	c, err := l.listen(l.local, false)
	if err != nil {
		l.closeNS()
		return nil, fmt.Errorf("open udp link %v: %w", l.local, err)
	}
	l.main = c
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real()
	}
	l.batch.lazyTimer.Init(clk, l.lazyFlush)
	l.start(c)
	return l, nil
}

// udpFakeMAC derives a locally administered MAC from an IP, so that the
// synthesised frames carry stable, distinct MACs per peer.
func udpFakeMAC(ip netip.Addr) netdev.MAC {
	a := ip.Unmap().As16()
	return netdev.MAC{0x02, 0x75, a[12], a[13], a[14], a[15]}
}

// interfaceMTU returns the MTU of the interface that owns ip, or 1500.
func interfaceMTU(ip netip.Addr) int {
	ifs, err := net.Interfaces()
	if err != nil {
		return 1500
	}
	var all []ifaceAddrs
	for _, ifi := range ifs {
		as, _ := ifi.Addrs()
		ia := ifaceAddrs{mtu: ifi.MTU}
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if p, ok := prefixOf(n); ok {
					ia.prefixes = append(ia.prefixes, p)
				}
			}
		}
		all = append(all, ia)
	}
	return ownerMTU(ip, all)
}

// ifaceAddrs is an interface's MTU and its addresses with their prefixes.
type ifaceAddrs struct {
	mtu      int
	prefixes []netip.Prefix
}

// prefixOf converts an interface address, unmapping IPv4 (whose mask may
// come in 16 bytes).
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits == 0 {
		return netip.Prefix{}, false // a non-canonical mask
	}
	if a.Is4In6() {
		if bits == 128 {
			ones -= 96
		}
		a = a.Unmap()
	}
	if ones < 0 || ones > a.BitLen() {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, ones), true
}

// ownerMTU returns the MTU of the interface that owns ip, or 1500 if none
// does: the interface that has ip itself, or else the one whose address's
// prefix holds ip most narrowly. The prefix matters: Linux owns all of
// 127.0.0.0/8 on lo (lo has 127.0.0.1/8), so a link on 127.0.0.2 runs
// over lo and gets its MTU, not Ethernet's.
func ownerMTU(ip netip.Addr, ifs []ifaceAddrs) int {
	ip = ip.Unmap().WithZone("")
	mtu, best := 1500, -1
	for _, ifi := range ifs {
		for _, p := range ifi.prefixes {
			switch {
			case p.Addr().WithZone("") == ip:
				return ifi.mtu
			case p.Contains(ip) && p.Bits() > best:
				mtu, best = ifi.mtu, p.Bits()
			}
		}
	}
	return mtu
}

func (l *Link) closeNS() {
	if l.ns != nil {
		l.ns.Close()
	}
}

// inNetns runs f on a thread in the link's network namespace. When the
// calling thread is elsewhere (a transport worker), f runs on a new
// goroutine locked to a thread that enters the namespace; that thread is
// never unlocked, so the runtime ends it with the goroutine instead of
// reusing a thread in the wrong namespace.
func (l *Link) inNetns(f func() error) error {
	runtime.LockOSThread()
	if l.ns == nil || l.currentNS() == l.nsIno {
		defer runtime.UnlockOSThread()
		return f()
	}
	runtime.UnlockOSThread()
	if err := netns.DoFD(int(l.ns.Fd()), f); err != nil {
		return fmt.Errorf("in the link's network namespace: %w", err)
	}
	return nil
}

// currentNS returns the inode of the calling thread's network namespace
// (0 if unknown); the caller has locked its goroutine to the thread.
func (l *Link) currentNS() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/net", &st) != nil {
		return 0
	}
	return st.Ino
}

// listen opens a socket bound to ap with the options the link needs. A
// group socket shares its address with other listeners (SO_REUSEADDR).
func (l *Link) listen(ap netip.AddrPort, group bool) (*net.UDPConn, error) {
	network := "udp4"
	if l.v6 {
		network = "udp6"
	}
	var c *net.UDPConn
	err := l.inNetns(func() error {
		if group {
			var err error
			c, err = l.listenGroup(ap)
			return err
		}
		lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) { serr = l.sockopts(int(fd), group) })
			if err != nil {
				return err
			}
			return serr
		}}
		pc, err := lc.ListenPacket(context.Background(), network, ap.String())
		if err != nil {
			return err
		}
		c = pc.(*net.UDPConn)
		return nil
	})
	return c, err
}

// listenGroup opens a socket bound to the group address itself. Package
// net would bind a multicast listener to the wildcard address, which
// collides with the link's own socket on the same port and would receive
// every group anyone in the namespace joined.
func (l *Link) listenGroup(ap netip.AddrPort) (*net.UDPConn, error) {
	family := unix.AF_INET
	var sa unix.Sockaddr = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	if l.v6 {
		family = unix.AF_INET6
		sa6 := &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
		if z := ap.Addr().Zone(); z != "" {
			if ifi, err := net.InterfaceByName(z); err == nil {
				sa6.ZoneId = uint32(ifi.Index)
			}
		}
		sa = sa6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := l.sockopts(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %v: %w", ap, err)
	}
	f := os.NewFile(uintptr(fd), "udp-group")
	pc, err := net.FilePacketConn(f)
	f.Close() // FilePacketConn dups the descriptor
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// udpSockopts4 and udpSockopts6 are the integer options (level, option,
// value) of every socket of an IPv4 or an IPv6 link: path MTU discovery on
// (DF), the destination address, TOS and TTL of each datagram as control
// messages, and no multicast loopback.
var (
	udpSockopts4 = [][3]int{
		{unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO},
		{unix.IPPROTO_IP, unix.IP_PKTINFO, 1},
		{unix.IPPROTO_IP, unix.IP_RECVTOS, 1},
		{unix.IPPROTO_IP, unix.IP_RECVTTL, 1},
		{unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, 0},
		// UDP checksum 0 over IPv4, as RoCEv2 and rxe send (the ICRC
		// protects the payload).
		{unix.SOL_SOCKET, unix.SO_NO_CHECK, 1},
	}
	udpSockopts6 = [][3]int{
		{unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO},
		{unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1},
		{unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1},
		{unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1},
		{unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1},
		{unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_LOOP, 0},
	}
)

func (l *Link) sockopts(fd int, group bool) error {
	set := func(level, opt, v int) error { return unix.SetsockoptInt(fd, level, opt, v) }
	// A requester bursts up to its window: give the receive queue room
	// (beyond net.core.rmem_max when privileged), or the kernel drops
	// datagrams and RC falls back on retransmission.
	if set(unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, RcvBuf) != nil {
		_ = set(unix.SOL_SOCKET, unix.SO_RCVBUF, RcvBuf)
	}
	if group {
		if err := set(unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
			return err
		}
	}
	opts := udpSockopts4
	if l.v6 {
		opts = udpSockopts6
	}
	for _, o := range opts {
		if err := set(o[0], o[1], o[2]); err != nil {
			return err
		}
	}
	// Group sends leave from the link's interface.
	if !l.v6 {
		return unix.SetsockoptInet4Addr(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, l.local.Addr().As4())
	}
	if idx := l.ifindex(); idx > 0 {
		return set(unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, idx)
	}
	return nil
}

// ifindex returns the index of the interface holding the local address
// (from the zone, or by search), or 0.
func (l *Link) ifindex() int {
	if z := l.local.Addr().Zone(); z != "" {
		if ifi, err := net.InterfaceByName(z); err == nil {
			return ifi.Index
		}
	}
	ifs, _ := net.Interfaces()
	for _, ifi := range ifs {
		as, _ := ifi.Addrs()
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if x, ok := netip.AddrFromSlice(n.IP); ok && x == l.local.Addr().WithZone("") {
					return ifi.Index
				}
			}
		}
	}
	return 0
}

func (l *Link) start(c *net.UDPConn) {
	l.wg.Add(1)
	go l.readLoop(c)
}

func (l *Link) readLoop(c *net.UDPConn) {
	defer l.wg.Done()
	hl := netdev.HeaderLen(l.v6)
	var oob [256]byte
	for {
		b := l.pool.Get()
		n, oobn, flags, from, err := c.ReadMsgUDPAddrPort(b[hl:], oob[:])
		if err != nil {
			l.pool.Put(b)
			if l.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			l.rxErrors.Add(1)
			continue
		}
		if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
			// The datagram was longer than the buffer (a peer with a
			// larger MTU), or its addresses, TOS or TTL did not fit:
			// the frame cannot be rebuilt.
			l.rxErrors.Add(1)
			l.pool.Put(b)
			continue
		}
		dst, tos, ttl := parseCmsgs(oob[:oobn], l.v6)
		if !dst.IsValid() {
			dst = l.local.Addr()
		}
		src := from.Addr().Unmap()
		if !l.v6 {
			dst = dst.Unmap()
		}
		frame := b[:hl+n]
		// EncodeRoCEv2, not EncodeRoCEv2Headers: over IPv6 the UDP
		// checksum is summed again over the whole datagram (about 1 µs
		// per 4 KiB, several times the ICRC), although nothing here
		// needs it: the ICRC masks it, ParseFrame and the engine do not
		// check it, and the kernel has already verified the wire's. It
		// buys a frame equal to the one the peer framed and sent, byte
		// for byte, which TestUDPLinkIPv6 checks and a capture
		// (capture.Link) shows; a 0 there is invalid for IPv6 (RFC 8200
		// section 8.1) and decoders flag it. Over IPv4 it is 0 either way.
		if netdev.EncodeRoCEv2(frame,
			netdev.Endpoint{MAC: udpFakeMAC(src), IP: src, Port: from.Port()},
			netdev.Endpoint{MAC: l.mac, IP: dst, Port: l.local.Port()}, ttl, tos, n) == 0 {
			l.rxErrors.Add(1)
			l.pool.Put(b)
			continue
		}
		if !l.v6 && !l.cfg.StrictICRC {
			switch fixIPv4ID(frame[netdev.EthernetHeaderLen:]) {
			case idRecovered:
				l.rxIDRecovered.Add(1)
			case idFailed:
				l.rxIDFailed.Add(1)
			}
		}
		l.Deliver(frame, n, l)
	}
}

// parseCmsgs reads the destination address (IP_PKTINFO / IPV6_PKTINFO),
// TOS / traffic class and TTL / hop limit from control messages, without
// allocating.
func parseCmsgs(oob []byte, v6 bool) (dst netip.Addr, tos, ttl uint8) {
	hdr := unix.CmsgLen(0)
	ttl = 64
	for len(oob) >= hdr {
		var n int
		if unix.SizeofCmsghdr == 16 {
			n = int(binary.NativeEndian.Uint64(oob))
		} else {
			n = int(binary.NativeEndian.Uint32(oob))
		}
		level := int32(binary.NativeEndian.Uint32(oob[unix.SizeofCmsghdr-8:]))
		typ := int32(binary.NativeEndian.Uint32(oob[unix.SizeofCmsghdr-4:]))
		if n < hdr || n > len(oob) {
			return
		}
		data := oob[hdr:n]
		switch {
		case level == unix.IPPROTO_IP && typ == unix.IP_PKTINFO && len(data) >= 12:
			dst = netip.AddrFrom4([4]byte(data[8:12]))
		case level == unix.IPPROTO_IP && typ == unix.IP_TOS && len(data) >= 1:
			tos = data[0]
		case level == unix.IPPROTO_IP && typ == unix.IP_TTL && len(data) >= 4:
			ttl = uint8(binary.NativeEndian.Uint32(data))
		case level == unix.IPPROTO_IPV6 && typ == unix.IPV6_PKTINFO && len(data) >= 16:
			dst = netip.AddrFrom16([16]byte(data[:16]))
		case level == unix.IPPROTO_IPV6 && typ == unix.IPV6_TCLASS && len(data) >= 4:
			tos = uint8(binary.NativeEndian.Uint32(data))
		case level == unix.IPPROTO_IPV6 && typ == unix.IPV6_HOPLIMIT && len(data) >= 4:
			ttl = uint8(binary.NativeEndian.Uint32(data))
		}
		next := unix.CmsgSpace(n - hdr)
		if next >= len(oob) {
			return
		}
		oob = oob[next:]
	}
	return
}

// Send strips the Ethernet, IP and UDP headers of a RoCEv2 frame and sends
// its UDP payload to the frame's destination IP and port, from a socket
// bound to the frame's source port. The frame's source IP must be the
// link's address (else the ICRC, which covers it, could not match).
func (l *Link) Send(frame []byte) error {
	if l.closed.Load() {
		return netdev.ErrClosed
	}
	fi, err := netdev.ParseFrame(frame)
	if err != nil {
		l.txErrors.Add(1)
		return err
	}
	if fi.IsIPv6() != l.v6 || fi.Src.WithZone("") != l.local.Addr().WithZone("") {
		l.txErrors.Add(1)
		return fmt.Errorf("udp link %v: cannot send from %v", l.local, fi.Src)
	}
	c, err := l.socketFor(fi.SrcPort)
	if err != nil {
		l.txErrors.Add(1)
		return err
	}
	dst := fi.Dst
	if l.v6 && (dst.IsLinkLocalUnicast() || dst.IsLinkLocalMulticast()) {
		dst = dst.WithZone(l.local.Addr().Zone())
	}
	payload := frame[fi.PayloadOff:fi.End()]
	to := netip.AddrPortFrom(dst, fi.DstPort)
	if (l.batch.holders.Load() > 0 || l.batch.lazy.Load()) && dst.Zone() == "" && l.queue(c, to, payload) {
		return nil
	}
	if _, err := c.WriteToUDPAddrPort(payload, to); err != nil {
		l.txErrors.Add(1)
		if l.closed.Load() {
			return netdev.ErrClosed
		}
		return fmt.Errorf("udp link %v: send to %v: %w", l.local, dst, err)
	}
	l.txCount.Add(1, uint64(len(payload)))
	return nil
}

// socketFor returns the sending socket for a source port, opening it on
// first use.
func (l *Link) socketFor(port uint16) (*net.UDPConn, error) {
	if port == l.local.Port() || port == 0 {
		return l.main, nil
	}
	l.mu.RLock()
	c := l.tx[port]
	l.mu.RUnlock()
	if c != nil {
		return c, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.tx[port]; c != nil {
		return c, nil
	}
	if l.closed.Load() {
		return nil, netdev.ErrClosed
	}
	c, err := l.listen(netip.AddrPortFrom(l.local.Addr(), port), false)
	if err != nil {
		return nil, fmt.Errorf("udp link %v: source port %d: %w", l.local, port, err)
	}
	// Nothing is read from sending sockets (RoCEv2 always sends to 4791);
	// keep their receive queues from holding memory.
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1) })
	}
	l.tx[port] = c
	l.txSocketsMade.Add(1)
	return c, nil
}

// JoinGroup receives RoCEv2 datagrams sent to the multicast group on the
// link's port: a socket bound to group:port joins it on the interface of
// the link's address. Multicast loopback is off, so the link does not hear
// its own group sends (the transport delivers those locally). Joins are
// counted; each needs a LeaveGroup.
func (l *Link) JoinGroup(group netip.Addr) error {
	group = group.Unmap()
	if !group.IsMulticast() || group.Is4() == l.v6 {
		return fmt.Errorf("udp link %v: join %v: not a multicast group of the link's family", l.local, group)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.joins.Join(group, func() error { return l.joinLocked(group) }); err != nil {
		return fmt.Errorf("udp link %v: join %v: %w", l.local, group, err)
	}
	return nil
}

// joinLocked opens the socket of group, a group not joined yet, and joins
// it in the kernel. The caller holds mu.
func (l *Link) joinLocked(group netip.Addr) error {
	ap := netip.AddrPortFrom(group, l.local.Port())
	if l.v6 && group.IsLinkLocalMulticast() {
		ap = netip.AddrPortFrom(group.WithZone(l.local.Addr().Zone()), l.local.Port())
	}
	c, err := l.listen(ap, true)
	if err != nil {
		return err
	}
	rc, err := c.SyscallConn()
	if err == nil {
		var jerr error
		err = rc.Control(func(fd uintptr) {
			if l.v6 {
				mreq := &unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(l.ifindex())}
				jerr = unix.SetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, mreq)
				return
			}
			mreq := &unix.IPMreqn{Multiaddr: group.As4(), Address: l.local.Addr().As4()}
			jerr = unix.SetsockoptIPMreqn(int(fd), unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, mreq)
		})
		if err == nil {
			err = jerr
		}
	}
	if err != nil {
		c.Close()
		return err
	}
	l.groups[group] = c
	l.start(c)
	return nil
}

// LeaveGroup undoes one JoinGroup; the last one closes the group's
// socket. Leaving a group not joined is an error.
func (l *Link) LeaveGroup(group netip.Addr) error {
	group = group.Unmap()
	var c *net.UDPConn // the group's socket, closed unlocked
	l.mu.Lock()
	_, err := l.joins.Leave(group, func() error {
		c = l.groups[group]
		delete(l.groups, group)
		return nil
	})
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("udp link %v: %w", l.local, err)
	}
	if c == nil {
		return nil
	}
	return c.Close()
}

// ReceivesOnOwnGoroutine reports true: the handler runs on the link's
// receive goroutine.
func (l *Link) ReceivesOnOwnGoroutine() bool { return true }

// HardwareAddr returns the link's fake MAC (derived from its address).
func (l *Link) HardwareAddr() netdev.MAC { return l.mac }

// MTU returns the IP MTU.
func (l *Link) MTU() int { return l.mtu }

// Addr returns the local address and port.
func (l *Link) Addr() netip.AddrPort { return l.local }

// Resolve is the transport's Resolve for a UDP link: the kernel resolves
// neighbours, so every address maps to a fake MAC (its group MAC for a
// multicast address), which Send ignores.
func (l *Link) Resolve(ip netip.Addr) (netdev.MAC, bool) {
	if m, ok := netdev.MulticastMAC(ip); ok {
		return m, true
	}
	return udpFakeMAC(ip), true
}

// Release returns a received frame's buffer to the pool.
func (l *Link) Release(frame []byte) { l.pool.Put(frame) }

// Close closes every socket and waits for the readers. Idempotent.
func (l *Link) Close() error {
	if l.closed.Load() {
		return nil
	}
	// What FlushLazy left (a last ACK) goes before the sockets close: a
	// program that closes right after its last receive completion would
	// otherwise take its last ACK with it, and its peer would retry.
	l.lazyFlush()
	if l.closed.Swap(true) {
		return nil
	}
	err := l.main.Close()
	l.mu.Lock()
	for _, c := range l.tx {
		c.Close()
	}
	for _, c := range l.groups {
		c.Close()
	}
	l.tx, l.groups = map[uint16]*net.UDPConn{}, map[netip.Addr]*net.UDPConn{}
	l.joins.Reset()
	l.mu.Unlock()
	l.wg.Wait()
	l.closeNS()
	return err
}

// Stats returns a snapshot of the counters.
func (l *Link) Stats() Stats {
	rxFrames, rxBytes, rxDropped := l.RxCounts()
	txPackets, txBytes := l.txCount.Load()
	return Stats{
		TxPackets: txPackets, TxBytes: txBytes, TxErrors: l.txErrors.Load(),
		RxPackets: rxFrames, RxBytes: rxBytes, RxErrors: l.rxErrors.Load(),
		RxDropped: rxDropped, RxIDRecovered: l.rxIDRecovered.Load(), RxIDFailed: l.rxIDFailed.Load(),
		TxSockets: l.txSocketsMade.Load(), TxBatches: l.txBatches.Load(),
	}
}
