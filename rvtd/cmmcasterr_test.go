package rvtd_test

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/rvtd/client"
)

const evMulticastError = 13

// TestCMMulticastError: members of 239.1.2.5 on rvt0 and rvt1 joined; a
// GID change of rvt0 that keeps the member's address loses nothing; one
// that takes it away loses rvt0's join: MULTICAST_ERROR (status
// -ENETRESET, the group as dst_addr, the ID's context) on its channel
// only, and nothing for rvt1's; once, whatever changes follow. The join
// stays listed until left.
func TestCMMulticastError(t *testing.T) {
	srv, sock := startDaemon(t)
	group := netip.AddrPortFrom(netip.MustParseAddr("239.1.2.5"), 0)
	rx, rid := mcMember(t, sock, "rvt0", ip0, group, 0x61)
	defer rx.c.Close()
	tx, tid := mcMember(t, sock, "rvt1", ip1, group, 0x62)
	defer tx.c.Close()
	for _, m := range []struct {
		n  *cmNode
		id *client.CMID
	}{{rx, rid}, {tx, tid}} {
		if err := m.id.JoinMulticast(group, 0, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := waitEvent(m.n.ch, evMulticastJoin); err != nil {
			t.Fatal(err)
		}
	}
	mac, _ := devopen.NodeAddrs(0)
	dev := srv.Device("rvt0")
	if err := dev.SetAddrs(netdev.GIDOrder(mac, []netip.Addr{ip0, netip.MustParseAddr("2001:db8::5")})); err != nil {
		t.Fatal(err)
	}
	if err := dev.SetAddrs(netdev.GIDOrder(mac, []netip.Addr{netip.MustParseAddr("198.18.0.9")})); err != nil {
		t.Fatal(err)
	}
	// The first event after the join is the second change's error.
	ev, err := waitEvent(rx.ch, evMulticastError)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != rid.Handle || ev.Context != 0x61 || ev.Status != -int32(syscall.ENETRESET) || !ev.UD ||
		client.AddrPort(ev.Dst) != group || client.AddrPort(ev.Src).Addr() != ip0 {
		t.Fatalf("MULTICAST_ERROR record %+v", ev)
	}
	if ev, err := tx.ch.GetEvent(300 * time.Millisecond); err == nil {
		t.Errorf("rvt1's member got an event: %+v", ev)
	}
	// A later change, the address still gone: the lost join is not
	// reported again.
	if err := dev.SetAddrs(netdev.GIDOrder(mac, []netip.Addr{netip.MustParseAddr("198.18.0.10")})); err != nil {
		t.Fatal(err)
	}
	if ev, err := rx.ch.GetEvent(300 * time.Millisecond); err == nil {
		t.Errorf("a second event: %+v", ev)
	}
	if err := rid.LeaveMulticast(group); err != nil {
		t.Fatalf("leave after the error: %v", err)
	}
	if err := rid.LeaveMulticast(group); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("second leave: %v", err)
	}
}
