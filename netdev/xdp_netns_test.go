//go:build linux

package netdev_test

// Network-namespace plumbing for the AF_XDP tests: two namespaces with
// unique names joined by a veth pair, addresses from private ranges inside
// them only, and a way to run code on a thread inside one of them.

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// xdpRequireRoot skips the test unless it runs as root. As root (CI) it
// runs, and a missing kernel feature fails it.
func xdpRequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces and veth pairs, loads and attaches XDP programs")
	}
	_, err := exec.LookPath("ip")
	require.NoError(t, err, "iproute2's ip is needed to set up namespaces")
}

// xdpNetns is one end of the test topology.
type xdpNetns struct {
	name   string
	ifname string
	v4     netip.Addr
	v6     netip.Addr // a ULA address
}

// xdpPair is two namespaces joined by a veth pair.
type xdpPair struct{ a, b xdpNetns }

func xdpRun(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
}

// xdpNewPair creates the namespaces and the veth pair with the given MTU.
// Both are removed by t.Cleanup, also when the test fails.
func xdpNewPair(t testing.TB, mtu int) *xdpPair {
	t.Helper()
	tag := fmt.Sprintf("%d-%06x", os.Getpid()%100000, rand.Uint32()&0xffffff)
	net := rand.IntN(200) + 1
	p := &xdpPair{
		a: xdpNetns{name: "svx-a-" + tag, ifname: "svxa0",
			v4: netip.AddrFrom4([4]byte{10, 199, byte(net), 1}), v6: netip.MustParseAddr(fmt.Sprintf("fd00:199:%x::1", net))},
		b: xdpNetns{name: "svx-b-" + tag, ifname: "svxb0",
			v4: netip.AddrFrom4([4]byte{10, 199, byte(net), 2}), v6: netip.MustParseAddr(fmt.Sprintf("fd00:199:%x::2", net))},
	}
	for _, ns := range []xdpNetns{p.a, p.b} {
		xdpRun(t, "netns", "add", ns.name)
		name := ns.name
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	}
	xdpRun(t, "-n", p.a.name, "link", "add", p.a.ifname, "mtu", fmt.Sprint(mtu), "type", "veth",
		"peer", "name", p.b.ifname, "mtu", fmt.Sprint(mtu), "netns", p.b.name)
	for _, ns := range []xdpNetns{p.a, p.b} {
		// No duplicate address detection: the addresses are usable at once.
		xdpInNetns(t, ns.name, func() error {
			for _, f := range []string{"all", "default", ns.ifname} {
				if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+f+"/accept_dad", []byte("0"), 0); err != nil {
					return err
				}
			}
			return nil
		})
		xdpRun(t, "-n", ns.name, "addr", "add", ns.v4.String()+"/24", "dev", ns.ifname)
		xdpRun(t, "-n", ns.name, "addr", "add", ns.v6.String()+"/64", "dev", ns.ifname, "nodad")
		xdpRun(t, "-n", ns.name, "link", "set", "lo", "up")
		xdpRun(t, "-n", ns.name, "link", "set", ns.ifname, "up")
	}
	// Wait for the kernel to give each end its link-local address.
	for _, ns := range []xdpNetns{p.a, p.b} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			out, err := exec.Command("ip", "-n", ns.name, "-6", "addr", "show", "dev", ns.ifname, "scope", "link").CombinedOutput()
			require.NoError(t, err, "%s", out)
			if strings.Contains(string(out), "fe80::") && !strings.Contains(string(out), "tentative") {
				break
			}
			require.True(t, time.Now().Before(deadline), "no link-local address on %s: %s", ns.ifname, out)
			time.Sleep(10 * time.Millisecond)
		}
	}
	return p
}

// xdpInNetns runs fn on a fresh OS thread inside namespace name and waits
// for it. The thread is never given back to the scheduler (the goroutine
// exits locked), so no other goroutine runs in the namespace by accident.
func xdpInNetns(t testing.TB, name string, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread ends with the goroutine.
		f, err := os.Open("/var/run/netns/" + name)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", name, err)
			return
		}
		errc <- fn()
	}()
	require.NoError(t, <-errc)
}

// xdpPing sends ICMP echo requests from namespace ns to dst with a raw
// socket (no ping binary needed) and returns once a matching reply came,
// or an error after timeout.
func xdpPing(ns string, dst netip.Addr, id uint16, timeout time.Duration) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open("/var/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- xdpPingHere(dst, id, timeout)
	}()
	return <-errc
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
