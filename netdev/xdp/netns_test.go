//go:build linux

package xdp_test

// Network-namespace plumbing for the AF_XDP tests: two namespaces with
// unique names joined by a veth pair, addresses from private ranges inside
// them only, and a way to run code on a thread inside one of them.

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/netdev/nettest"
)

// xdpNetns is one end of the test topology.
type xdpNetns struct {
	*nettest.Netns
	ifname string
	v4     netip.Addr
	v6     netip.Addr // a ULA address
}

// xdpPair is two namespaces joined by a veth pair.
type xdpPair struct{ a, b xdpNetns }

// xdpNewPair creates the namespaces and the veth pair with the given MTU.
// Both are removed by t.Cleanup, also when the test fails.
func xdpNewPair(t testing.TB, mtu int) *xdpPair {
	t.Helper()
	na, nb := nettest.New(t), nettest.New(t)
	for _, n := range []*nettest.Netns{na, nb} {
		// No duplicate address detection on the veth ends made next: the
		// addresses are usable at once.
		require.NoError(t, n.Do(func() error {
			for _, f := range []string{"all", "default"} {
				if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+f+"/accept_dad", []byte("0"), 0); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	ea, eb := nettest.Veth(t, na, nb)
	net := rand.IntN(200) + 1
	p := &xdpPair{
		a: xdpNetns{Netns: na, ifname: ea,
			v4: netip.AddrFrom4([4]byte{10, 199, byte(net), 1}), v6: netip.MustParseAddr(fmt.Sprintf("fd00:199:%x::1", net))},
		b: xdpNetns{Netns: nb, ifname: eb,
			v4: netip.AddrFrom4([4]byte{10, 199, byte(net), 2}), v6: netip.MustParseAddr(fmt.Sprintf("fd00:199:%x::2", net))},
	}
	for _, ns := range []xdpNetns{p.a, p.b} {
		ns.Run("ip", "link", "set", ns.ifname, "mtu", fmt.Sprint(mtu))
		ns.Run("ip", "addr", "add", ns.v4.String()+"/24", "dev", ns.ifname)
		ns.Run("ip", "addr", "add", ns.v6.String()+"/64", "dev", ns.ifname, "nodad")
	}
	// Wait for the kernel to give each end its link-local address.
	for _, ns := range []xdpNetns{p.a, p.b} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			out := ns.Run("ip", "-6", "addr", "show", "dev", ns.ifname, "scope", "link")
			if strings.Contains(out, "fe80::") && !strings.Contains(out, "tentative") {
				break
			}
			require.True(t, time.Now().Before(deadline), "no link-local address on %s: %s", ns.ifname, out)
			time.Sleep(10 * time.Millisecond)
		}
	}
	return p
}

// xdpInNetns runs fn on a thread inside ns (nettest.Netns.Do) and fails
// t if it fails.
func xdpInNetns(t testing.TB, ns xdpNetns, fn func() error) {
	t.Helper()
	require.NoError(t, ns.Do(fn), "in namespace %s", ns.Name)
}

// xdpPing sends ICMP echo requests from namespace ns to dst with a raw
// socket (no ping binary needed) and returns once a matching reply came,
// or an error after timeout.
func xdpPing(ns xdpNetns, dst netip.Addr, id uint16, timeout time.Duration) error {
	return ns.Do(func() error { return xdpPingHere(dst, id, timeout) })
}

func xdpPingHere(dst netip.Addr, id uint16, timeout time.Duration) error {
	fam, proto, typ, reply := unix.AF_INET, unix.IPPROTO_ICMP, byte(8), byte(0)
	if dst.Is6() {
		fam, proto, typ, reply = unix.AF_INET6, unix.IPPROTO_ICMPV6, 128, 129
	}
	fd, err := unix.Socket(fam, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return fmt.Errorf("icmp socket: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	var sa unix.Sockaddr
	if dst.Is4() {
		sa = &unix.SockaddrInet4{Addr: dst.As4()}
	} else {
		sa = &unix.SockaddrInet6{Addr: dst.As16()}
	}
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 1500)
	for seq := uint16(1); time.Now().Before(deadline); seq++ {
		msg := make([]byte, 8+32)
		msg[0] = typ
		binary.BigEndian.PutUint16(msg[4:], id)
		binary.BigEndian.PutUint16(msg[6:], seq)
		for i := 8; i < len(msg); i++ {
			msg[i] = byte(i)
		}
		if dst.Is4() { // the kernel computes the ICMPv6 checksum itself
			binary.BigEndian.PutUint16(msg[2:], icmpChecksum(msg))
		}
		if err := unix.Sendto(fd, msg, 0, sa); err != nil {
			return fmt.Errorf("icmp send: %w", err)
		}
		until := time.Now().Add(200 * time.Millisecond)
		for time.Now().Before(until) {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				break
			}
			b := buf[:n]
			if dst.Is4() { // raw IPv4 sockets see the IP header
				if n < 20 || n < int(b[0]&0x0f)*4+8 {
					continue
				}
				b = b[int(b[0]&0x0f)*4:]
			}
			if b[0] == reply && binary.BigEndian.Uint16(b[4:]) == id && binary.BigEndian.Uint16(b[6:]) == seq {
				return nil
			}
		}
	}
	return fmt.Errorf("no echo reply from %s within %v", dst, timeout)
}

func icmpChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
