package vethperf

// The throw-away network for `rvt perf`: two network namespaces joined by
// a veth pair, with an IPv4 address on each end, and (for the TAP link) a
// bridge per namespace. Every name starts with "svp", the pid in hex and a
// sequence number, so concurrent runs never collide; close removes all of
// it. Nothing is configured outside the two namespaces: the veth is
// created inside the first one and its peer moved into the second.
//
// Code enters a namespace with netdev.InNetns: on an OS thread of its own
// that never returns to the scheduler (its goroutine exits locked), so no
// other goroutine ever runs there by accident. File descriptors opened on it (sockets, TAPs,
// AF_XDP sockets) stay in the namespace and are usable from any goroutine.

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"

	"github.com/softverbs/softverbs/netdev"
)

// perfSeq numbers the networks of one process.
var perfSeq atomic.Uint32

// perfNetns is a network namespace made by newPerfNet.
type perfNetns string

// ip runs the ip command inside the namespace.
func (n perfNetns) ip(args ...string) error {
	return runIP(append([]string{"-n", string(n)}, args...)...)
}

// do runs f on a fresh OS thread inside the namespace and returns its
// error.
func (n perfNetns) do(f func() error) error {
	return netdev.InNetns("/run/netns/"+string(n), f)
}

func runIP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// perfNet is two namespaces joined by a veth pair.
type perfNet struct {
	prefix string
	ns     [2]perfNetns
	veth   [2]string     // the veth end in ns[i]
	ip     [2]netip.Addr // the kernel's address on veth[i]
	mtu    int
}

// perfNetAddrs are the veth ends' addresses (a /24 that exists only in the
// two namespaces); perfTAPAddrs are the softverbs hosts behind the TAPs on
// the same segment.
var (
	perfNetAddrs = [2]netip.Addr{netip.MustParseAddr("10.203.0.1"), netip.MustParseAddr("10.203.0.2")}
	perfTAPAddrs = [2]netip.Addr{netip.MustParseAddr("10.203.0.11"), netip.MustParseAddr("10.203.0.12")}
)

// name returns a unique interface or namespace name (at most 15 bytes).
func (p *perfNet) name(tag string) string { return p.prefix + tag }

// newPerfNet creates the namespaces and the veth pair with Ethernet MTU
// mtu, both ends up and addressed. On error it removes what it made.
func newPerfNet(mtu int) (p *perfNet, err error) {
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("needs the ip command (iproute2)")
	}
	p = &perfNet{prefix: fmt.Sprintf("svp%x%02x", os.Getpid(), perfSeq.Add(1)&0xff), ip: perfNetAddrs, mtu: mtu}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	for i, tag := range []string{"na", "nb"} {
		name := perfNetns(p.name(tag))
		if err := runIP("netns", "add", string(name)); err != nil {
			return nil, err
		}
		p.ns[i] = name
		if err := name.ip("link", "set", "lo", "up"); err != nil {
			return nil, err
		}
	}
	p.veth = [2]string{p.name("va"), p.name("vb")}
	m := fmt.Sprint(mtu)
	if err := p.ns[0].ip("link", "add", p.veth[0], "mtu", m, "type", "veth",
		"peer", "name", p.veth[1], "mtu", m, "netns", string(p.ns[1])); err != nil {
		return nil, err
	}
	for i := range p.ns {
		if err := p.ns[i].ip("addr", "add", p.ip[i].String()+"/24", "dev", p.veth[i]); err != nil {
			return nil, err
		}
		if err := p.ns[i].ip("link", "set", p.veth[i], "up"); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// setMTU changes the Ethernet MTU of both veth ends.
func (p *perfNet) setMTU(mtu int) error {
	for i := range p.ns {
		if err := p.ns[i].ip("link", "set", p.veth[i], "mtu", fmt.Sprint(mtu)); err != nil {
			return err
		}
	}
	p.mtu = mtu
	return nil
}

// bridge puts the veth end of namespace i and the interface port into a
// new bridge there (multicast snooping off, MTU p.mtu) and returns a
// function that deletes the bridge again, which releases both ports.
func (p *perfNet) bridge(i int, port string) (func(), error) {
	ns := p.ns[i]
	br := p.name(fmt.Sprintf("b%d", i))
	if err := ns.ip("link", "add", br, "mtu", fmt.Sprint(p.mtu), "type", "bridge", "mcast_snooping", "0"); err != nil {
		return nil, err
	}
	del := func() { _ = ns.ip("link", "del", br) }
	for _, dev := range []string{p.veth[i], port} {
		if err := ns.ip("link", "set", dev, "master", br); err != nil {
			del()
			return nil, err
		}
	}
	if err := ns.ip("link", "set", br, "up"); err != nil {
		del()
		return nil, err
	}
	return del, nil
}

// close deletes the namespaces, and with them the veth pair and any
// bridge. Links and devices opened in them must be closed first.
func (p *perfNet) close() error {
	var errs []error
	for i := range p.ns {
		if p.ns[i] != "" {
			errs = append(errs, runIP("netns", "del", string(p.ns[i])))
			p.ns[i] = ""
		}
	}
	return errors.Join(errs...)
}
