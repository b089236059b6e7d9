package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/capture"
	"github.com/softverbs/softverbs/netdev/faults"
)

// ppLink is the port a pingpong (or perf) device sits on: the link and
// what the device needs to know about it.
type ppLink struct {
	link    netdev.Link
	mac     netdev.MAC
	addrs   []netip.Addr // GID table sources: link-local first, then ours
	resolve func(netip.Addr) (netdev.MAC, bool)
	closers []func()
}

// close undoes the link's setup, last step first.
func (l *ppLink) close() {
	for i := len(l.closers) - 1; i >= 0; i-- {
		l.closers[i]()
	}
	l.closers = nil
}

// warmTimeout bounds how long awaitNeighbour waits.
const warmTimeout = 3 * time.Second

// awaitNeighbour asks the link's resolver for ip until it answers or
// warmTimeout passes, and reports whether it answered. Links whose
// resolver learns asynchronously (ARP, ND) answer false until the reply
// is in.
func (l *ppLink) awaitNeighbour(ip netip.Addr) bool {
	deadline := time.Now().Add(warmTimeout)
	for {
		if _, ok := l.resolve(ip); ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// warm resolves the peer's MAC ahead of the first packet; if that takes
// longer than warmTimeout, the transport is left to find out on its own.
func (l *ppLink) warm(g netdev.GID) {
	if l.resolve == nil || g.IsZero() {
		return
	}
	l.awaitNeighbour(g.IP())
}

// openPingpongLink opens the link the flags select, wrapped with the
// capture and the fault profile.
func openPingpongLink(cfg *pingpongConfig) (_ *ppLink, err error) {
	n := 0
	for _, s := range []string{cfg.TAP, cfg.XDP, cfg.UDP} {
		if s != "" {
			n++
		}
	}
	if n > 1 {
		return nil, errors.New("choose one of --tap, --xdp and --udp")
	}
	var l *ppLink
	switch {
	case cfg.TAP != "":
		l, err = openTAPLink(cfg)
	case cfg.XDP != "":
		l, err = openXDPLink(cfg)
	case cfg.UDP != "" || cfg.IP != "":
		l, err = openUDPLink(cfg)
	default:
		return nil, errors.New("no link: give --tap NAME --ip ADDR/PFX, --xdp IFACE --ip ADDR/PFX, or --udp ADDR " +
			"(an in-memory fabric cannot reach another process)")
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	if cfg.PCAP != "" {
		f, err := os.Create(cfg.PCAP)
		if err != nil {
			return nil, err
		}
		l.closers = append(l.closers, func() { _ = f.Close() })
		c, err := capture.New(l.link, clock.Real(), f)
		if err != nil {
			return nil, err
		}
		l.link = c
	}
	fl := faults.Profile{Loss: cfg.Loss, Duplicate: cfg.Dup, Reorder: cfg.Reorder, Delay: cfg.Delay}
	if fl != (faults.Profile{}) {
		f, err := faults.New(l.link, clock.Real(), cfg.Seed, fl)
		if err != nil {
			return nil, fmt.Errorf("fault profile: %w", err)
		}
		l.link = f
	}
	return l, nil
}

// parsePrefix parses --ip: an address with a prefix length, or a bare
// address (taken as a /24 for IPv4, a /64 for IPv6).
func parsePrefix(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, errors.New("--ip ADDR/PFX is required with this link")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("--ip %q: %w", s, err)
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("--ip %q: %w", s, err)
	}
	bits := 24
	if a.Is6() {
		bits = 64
	}
	return netip.PrefixFrom(a, bits), nil
}

// hostMAC is --mac, or a random locally administered unicast MAC.
func hostMAC(s string) (netdev.MAC, error) {
	if s != "" {
		m, err := netdev.ParseMAC(s)
		if err != nil {
			return m, fmt.Errorf("--mac %q: %w", s, err)
		}
		return m, nil
	}
	var m netdev.MAC
	if _, err := rand.Read(m[:]); err != nil {
		return m, err
	}
	m[0] = m[0]&^1 | 2
	return m, nil
}
