//go:build linux

package netdev

// Addressing for links on an interface the kernel keeps (netdev/xdp; the
// address watcher lists addresses with it): with AF_XDP the
// kernel still owns the interface's addresses, answers ARP and neighbour
// solicitations for them (the XDP program passes those), and resolves
// peers. KernelNeighbours reads the kernel's neighbour table and the
// interface's addresses over rtnetlink, through a socket opened once in the
// interface's network namespace, so it keeps working from any goroutine.
//
// Resolution: Resolve asks the kernel for the neighbour entry (RTM_GETNEIGH
// for one address). A usable entry (REACHABLE, STALE, DELAY, PROBE,
// PERMANENT, NOARP) gives the MAC. With no entry, or an INCOMPLETE or FAILED
// one, it asks the kernel to resolve (RTM_NEWNEIGH with NTF_USE, which is
// what the kernel does itself when it has a packet to send: it sends an ARP
// request or a neighbour solicitation) and reports failure for now; the
// caller's packet is lost and the transport's retry finds the entry once the
// peer has answered. A STALE entry is used and also poked with NTF_USE, so
// the kernel re-confirms it (our traffic bypasses the kernel, which would
// otherwise never refresh it). Answers are cached for a second (failures for
// 20 ms), measured on the injected clock, so the data path does not make a
// netlink round trip per packet.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/clock"
)

// Offsets in struct ndmsg: family, pad, pad, ifindex, state, flags, type.
const (
	ndmFamily  = 0
	ndmIfindex = 4
	ndmState   = 8
	ndmFlags   = 10
)

const (
	nbrHitTTL  = time.Second
	nbrMissTTL = 20 * time.Millisecond
)

// KernelNeighbours resolves peers through the kernel's neighbour table and
// lists an interface's addresses. Safe for concurrent use.
type KernelNeighbours struct {
	ifindex int
	clk     clock.Clock

	mu     sync.Mutex // guards everything below
	fd     int
	seq    uint32
	buf    []byte
	cache  map[netip.Addr]nbrEntry
	routes map[netip.Addr]routeEntry // Route's answers
}

type nbrEntry struct {
	mac   MAC
	ok    bool
	until time.Time
}

// OpenKernelNeighbours opens a neighbour reader for interface ifname in the
// network namespace of the calling thread. clk may be nil (real time).
func OpenKernelNeighbours(ifname string, clk clock.Clock) (*KernelNeighbours, error) {
	idx, err := ifIndex(ifname)
	if err != nil {
		return nil, fmt.Errorf("open neighbours %s: %w", ifname, err)
	}
	return OpenKernelNeighboursIndex(idx, clk)
}

func ifIndex(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("interface %q: %w", name, err)
	}
	return int(ifr.Uint32()), nil
}

// OpenKernelNeighboursIndex is OpenKernelNeighbours for the interface of
// index ifindex, for a link that has looked the interface up already.
func OpenKernelNeighboursIndex(ifindex int, clk clock.Clock) (*KernelNeighbours, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	// A lost reply must not hang the data path.
	tv := unix.NsecToTimeval(int64(time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink timeout: %w", err)
	}
	return &KernelNeighbours{
		ifindex: ifindex, clk: clock.OrReal(clk), fd: fd,
		buf: make([]byte, 1<<16), cache: make(map[netip.Addr]nbrEntry),
	}, nil
}

// Close closes the netlink socket.
func (k *KernelNeighbours) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fd < 0 {
		return nil
	}
	err := unix.Close(k.fd)
	k.fd = -1
	return err
}

// Resolve returns the MAC of ip on the interface (IPv4-mapped addresses are
// looked up as IPv4). It fits rvt.Options.Resolve.
func (k *KernelNeighbours) Resolve(ip netip.Addr) (MAC, bool) {
	ip = ip.Unmap()
	if m, ok := MulticastMAC(ip); ok {
		return m, true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.clk.Now()
	if e, ok := k.cache[ip]; ok && now.Before(e.until) {
		return e.mac, e.ok
	}
	mac, state, err := k.getNeighLocked(ip)
	usable := err == nil && state&(unix.NUD_INCOMPLETE|unix.NUD_FAILED) == 0 && state != unix.NUD_NONE
	if !usable || state&unix.NUD_STALE != 0 {
		_ = k.triggerLocked(ip)
	}
	e := nbrEntry{mac: mac, ok: usable, until: now.Add(nbrHitTTL)}
	if !usable {
		e.until = now.Add(nbrMissTTL)
	}
	k.cache[ip] = e
	return e.mac, e.ok
}

// Lookup returns the kernel's current entry for ip without caching or
// triggering resolution: the MAC and the NUD_* state. ok is false if the
// kernel has no entry.
func (k *KernelNeighbours) Lookup(ip netip.Addr) (mac MAC, state uint16, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	mac, state, err := k.getNeighLocked(ip.Unmap())
	return mac, state, err == nil
}

// Trigger asks the kernel to resolve ip (an ARP request or neighbour
// solicitation), as it would before sending a packet there.
func (k *KernelNeighbours) Trigger(ip netip.Addr) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.triggerLocked(ip.Unmap())
}

// Addrs returns the interface's addresses in GID index order: the IPv6
// link-local addresses first, then the IPv4 addresses, then the other IPv6
// addresses. IPv4 addresses are returned plain (Is4), as GIDOrder returns
// them; their GIDs are IPv4-mapped, which GIDFromIP does. Tentative (DAD
// in progress) and DAD-failed IPv6 addresses are left out.
func (k *KernelNeighbours) Addrs() ([]netip.Addr, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	req := make([]byte, unix.SizeofNlMsghdr+unix.SizeofIfAddrmsg)
	var ll, v4, v6 []netip.Addr
	err := k.roundTripLocked(req, unix.RTM_GETADDR, unix.NLM_F_REQUEST|unix.NLM_F_DUMP, func(m syscall.NetlinkMessage) error {
		if m.Header.Type != unix.RTM_NEWADDR || len(m.Data) < unix.SizeofIfAddrmsg {
			return nil
		}
		// struct ifaddrmsg: family, prefixlen, flags, scope, index.
		if int(binary.NativeEndian.Uint32(m.Data[4:])) != k.ifindex {
			return nil
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			return err
		}
		flags := uint32(m.Data[2])
		var addr, local []byte
		for _, a := range attrs {
			switch a.Attr.Type {
			case unix.IFA_ADDRESS:
				addr = a.Value
			case unix.IFA_LOCAL:
				local = a.Value
			case unix.IFA_FLAGS:
				if len(a.Value) >= 4 {
					flags = binary.NativeEndian.Uint32(a.Value)
				}
			}
		}
		if local != nil {
			addr = local
		}
		ip, ok := netip.AddrFromSlice(addr)
		if !ok || flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
			return nil
		}
		switch {
		case ip.Is4():
			v4 = append(v4, ip)
		case ip.IsLinkLocalUnicast():
			ll = append(ll, ip)
		default:
			v6 = append(v6, ip)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	return append(append(ll, v4...), v6...), nil
}

// getNeighLocked asks the kernel for one neighbour entry.
func (k *KernelNeighbours) getNeighLocked(ip netip.Addr) (MAC, uint16, error) {
	req := k.neighReq(ip)
	var mac MAC
	var state uint16
	found := false
	err := k.roundTripLocked(req, unix.RTM_GETNEIGH, unix.NLM_F_REQUEST, func(m syscall.NetlinkMessage) error {
		if m.Header.Type != unix.RTM_NEWNEIGH || len(m.Data) < unix.SizeofNdMsg {
			return nil
		}
		forEachAttr(m.Data[unix.SizeofNdMsg:], func(typ uint16, v []byte) {
			if typ == unix.NDA_LLADDR && len(v) == 6 {
				mac = MAC(v)
			}
		})
		state = binary.NativeEndian.Uint16(m.Data[ndmState:])
		found = true
		return nil
	})
	if err == nil && !found {
		err = unix.ENOENT
	}
	return mac, state, err
}

// triggerLocked sends RTM_NEWNEIGH with NTF_USE: the kernel creates the
// entry if needed and starts (or re-confirms) resolution.
func (k *KernelNeighbours) triggerLocked(ip netip.Addr) error {
	req := k.neighReq(ip)
	req[unix.SizeofNlMsghdr+ndmFlags] = unix.NTF_USE
	return k.roundTripLocked(req, unix.RTM_NEWNEIGH,
		unix.NLM_F_REQUEST|unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK, nil)
}

// neighReq builds an ndmsg request for ip on the interface (the header is
// filled by roundTripLocked).
func (k *KernelNeighbours) neighReq(ip netip.Addr) []byte {
	a := ip.AsSlice()
	alen := unix.SizeofRtAttr + len(a)
	req := make([]byte, unix.SizeofNlMsghdr+unix.SizeofNdMsg+nlAlign(alen))
	nd := req[unix.SizeofNlMsghdr:]
	nd[ndmFamily] = unix.AF_INET
	if ip.Is6() {
		nd[ndmFamily] = unix.AF_INET6
	}
	binary.NativeEndian.PutUint32(nd[ndmIfindex:], uint32(k.ifindex))
	at := req[unix.SizeofNlMsghdr+unix.SizeofNdMsg:]
	binary.NativeEndian.PutUint16(at[0:], uint16(alen))
	binary.NativeEndian.PutUint16(at[2:], unix.NDA_DST)
	copy(at[unix.SizeofRtAttr:], a)
	return req
}

// forEachAttr walks the rtattrs in b (syscall.ParseNetlinkRouteAttr does
// not know neighbour messages).
func forEachAttr(b []byte, fn func(typ uint16, v []byte)) {
	for len(b) >= unix.SizeofRtAttr {
		l := int(binary.NativeEndian.Uint16(b))
		if l < unix.SizeofRtAttr || l > len(b) {
			return
		}
		fn(binary.NativeEndian.Uint16(b[2:])&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER), b[unix.SizeofRtAttr:l])
		b = b[min(nlAlign(l), len(b)):]
	}
}

func nlAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// roundTripLocked sends req (whose first SizeofNlMsghdr bytes it fills) and
// reads replies until the request is answered: the single reply, an ACK or
// error, or NLMSG_DONE for a dump. each sees every reply message.
func (k *KernelNeighbours) roundTripLocked(req []byte, typ uint16, flags int, each func(syscall.NetlinkMessage) error) error {
	if k.fd < 0 {
		return ErrClosed
	}
	k.seq++
	seq := k.seq
	// struct nlmsghdr: len, type, flags, seq, pid.
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], typ)
	binary.NativeEndian.PutUint16(req[6:], uint16(flags))
	binary.NativeEndian.PutUint32(req[8:], seq)
	binary.NativeEndian.PutUint32(req[12:], 0)
	if err := unix.Sendto(k.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	dump := flags&unix.NLM_F_DUMP != 0
	for {
		n, _, err := unix.Recvfrom(k.fd, k.buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(k.buf[:n])
		if err != nil {
			return err
		}
		done := false
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue // a stale reply to an earlier, timed-out request
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return errors.New("short netlink error")
				}
				if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
					return unix.Errno(-e)
				}
				return nil // an ACK
			}
			if each != nil {
				if err := each(m); err != nil {
					return err
				}
			}
			if !dump && flags&unix.NLM_F_ACK == 0 {
				done = true
			}
		}
		if done {
			return nil
		}
	}
}

type routeEntry struct {
	next  netip.Addr
	err   error
	until time.Time
}

// Route asks the kernel's routing table for dst (RTM_GETROUTE, what
// `ip route get DST` asks, and what Linux's rdma_resolve_addr asks before
// it resolves a neighbour): the next hop (a gateway, or dst itself on a
// directly attached subnet), or ErrNetUnreachable when no route covers dst
// or the route leaves by another interface than this one's (ifindex 0: any
// interface). Answers are cached for a second. It fits RouteFunc.
func (k *KernelNeighbours) Route(dst netip.Addr) (netip.Addr, error) {
	dst = dst.Unmap()
	if dst.IsMulticast() {
		return dst, nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.clk.Now()
	if e, ok := k.routes[dst]; ok && now.Before(e.until) {
		return e.next, e.err
	}
	next, err := k.getRouteLocked(dst)
	if k.routes == nil {
		k.routes = make(map[netip.Addr]routeEntry)
	}
	if len(k.routes) > 4096 {
		clear(k.routes)
	}
	k.routes[dst] = routeEntry{next, err, now.Add(nbrHitTTL)}
	return next, err
}

// getRouteLocked makes one RTM_GETROUTE round trip. The request names no
// output interface: given one, the kernel takes a destination it has no
// route for as on-link.
func (k *KernelNeighbours) getRouteLocked(dst netip.Addr) (netip.Addr, error) {
	a := dst.AsSlice()
	alen := unix.SizeofRtAttr + len(a)
	req := make([]byte, unix.SizeofNlMsghdr+unix.SizeofRtMsg+nlAlign(alen))
	rt := req[unix.SizeofNlMsghdr:]
	rt[0] = unix.AF_INET // rtm_family
	if dst.Is6() {
		rt[0] = unix.AF_INET6
	}
	rt[1] = byte(len(a) * 8) // rtm_dst_len
	at := req[unix.SizeofNlMsghdr+unix.SizeofRtMsg:]
	binary.NativeEndian.PutUint16(at[0:], uint16(alen))
	binary.NativeEndian.PutUint16(at[2:], unix.RTA_DST)
	copy(at[unix.SizeofRtAttr:], a)
	var gw netip.Addr
	oif, typ, found := 0, byte(0), false
	err := k.roundTripLocked(req, unix.RTM_GETROUTE, unix.NLM_F_REQUEST, func(m syscall.NetlinkMessage) error {
		if m.Header.Type != unix.RTM_NEWROUTE || len(m.Data) < unix.SizeofRtMsg {
			return nil
		}
		typ = m.Data[7] // rtm_type
		forEachAttr(m.Data[unix.SizeofRtMsg:], func(t uint16, v []byte) {
			switch t {
			case unix.RTA_GATEWAY:
				gw, _ = netip.AddrFromSlice(v)
			case unix.RTA_OIF:
				if len(v) >= 4 {
					oif = int(binary.NativeEndian.Uint32(v))
				}
			}
		})
		found = true
		return nil
	})
	switch {
	case errors.Is(err, unix.ENETUNREACH), errors.Is(err, unix.EHOSTUNREACH):
		return netip.Addr{}, fmt.Errorf("route %v: %w", dst, ErrNetUnreachable)
	case err != nil:
		return netip.Addr{}, fmt.Errorf("route %v: %w", dst, err)
	case !found:
		return netip.Addr{}, fmt.Errorf("route %v: %w", dst, ErrNetUnreachable)
	case typ == unix.RTN_LOCAL:
		return dst, nil // one of the host's addresses
	case k.ifindex != 0 && oif != k.ifindex:
		return netip.Addr{}, fmt.Errorf("route %v: %w (its route leaves by interface %d)", dst, ErrNetUnreachable, oif)
	case gw.IsValid():
		return gw.Unmap(), nil
	}
	return dst, nil
}
