package netdev

import (
	"errors"
	"net/netip"
	"testing"
)

func TestStaticRoutes(t *testing.T) {
	on := []netip.Prefix{netip.MustParsePrefix("10.50.0.200/24"), netip.MustParsePrefix("fd00::5/64")}
	for _, c := range []struct {
		name string
		r    StaticRoutes
		dst  string
		next string // "" : ErrNetUnreachable
	}{
		{"on-link", StaticRoutes{OnLink: on}, "10.50.0.2", "10.50.0.2"},
		{"mapped on-link", StaticRoutes{OnLink: on}, "::ffff:10.50.0.2", "10.50.0.2"},
		{"off-subnet, no gateway", StaticRoutes{OnLink: on}, "10.60.0.1", ""},
		{"off-subnet, gateway", StaticRoutes{OnLink: on, Gateway4: netip.MustParseAddr("10.50.0.254")}, "10.60.0.1", "10.50.0.254"},
		{"IPv6 off-subnet, only an IPv4 gateway", StaticRoutes{OnLink: on, Gateway4: netip.MustParseAddr("10.50.0.254")}, "fd01::1", ""},
		{"IPv6 gateway", StaticRoutes{OnLink: on, Gateway6: netip.MustParseAddr("fd00::1")}, "fd01::1", "fd00::1"},
		{"IPv6 on-link", StaticRoutes{OnLink: on}, "fd00::9", "fd00::9"},
		{"link-local", StaticRoutes{OnLink: on}, "fe80::1", "fe80::1"},
		{"multicast", StaticRoutes{OnLink: on}, "239.1.2.3", "239.1.2.3"},
		{"broadcast", StaticRoutes{OnLink: on}, "255.255.255.255", "255.255.255.255"},
		{"no table", StaticRoutes{}, "10.50.0.2", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			next, err := c.r.Route(netip.MustParseAddr(c.dst))
			if c.next == "" {
				if !errors.Is(err, ErrNetUnreachable) {
					t.Fatalf("Route(%s) = %v, %v; want ErrNetUnreachable", c.dst, next, err)
				}
				return
			}
			if err != nil || next != netip.MustParseAddr(c.next) {
				t.Fatalf("Route(%s) = %v, %v; want %s", c.dst, next, err, c.next)
			}
		})
	}
	if err := (StaticRoutes{OnLink: on, Gateway4: netip.MustParseAddr("10.9.9.9")}).Check(); err == nil {
		t.Fatal("a gateway off every subnet passed Check")
	}
	if err := (StaticRoutes{OnLink: on, Gateway4: netip.MustParseAddr("10.50.0.1")}).Check(); err != nil {
		t.Fatal(err)
	}
}
