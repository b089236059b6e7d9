package rvtd_test

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/softverbs/softverbs/rvtd/proto"
)

// TestCMIPoIBPortSpace: an ID of RDMA_PS_IPOIB can be created, but
// binding it (to an address or the wildcard) and resolving from it fail
// with EINVAL, as Linux's cma answers on a RoCE port (the IPoIB port
// space needs an InfiniBand link layer; rxe's mckey -p 0x2 prints "addr
// bind failure: Invalid argument"). A UDP ID on the same address binds.
func TestCMIPoIBPortSpace(t *testing.T) {
	_, sock := startDaemon(t)
	n, err := newCMNode(sock, "rvt0", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer n.c.Close()
	for _, c := range []struct {
		name string
		do   func() error
	}{
		{"bind", func() error {
			id, err := n.ch.CreateID(1, proto.PSIPoIB, 4)
			if err != nil {
				return err
			}
			return id.BindAddr(netip.AddrPortFrom(ip0, 0))
		}},
		{"bind wildcard", func() error {
			id, err := n.ch.CreateID(2, proto.PSIPoIB, 4)
			if err != nil {
				return err
			}
			return id.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 0))
		}},
		{"resolve", func() error {
			id, err := n.ch.CreateID(3, proto.PSIPoIB, 4)
			if err != nil {
				return err
			}
			return id.ResolveAddr(ip0, netip.AddrPortFrom(ip1, 7000), 2000)
		}},
	} {
		if err := c.do(); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s of an IPoIB ID: %v, want EINVAL", c.name, err)
		}
	}
	id, err := n.ch.CreateID(4, proto.PSUDP, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.BindAddr(netip.AddrPortFrom(ip0, 0)); err != nil {
		t.Fatalf("bind of a UDP ID: %v", err)
	}
}
