package rvtd_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"

	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

const (
	evMulticastJoin = 12
	mcGroupQPN      = 0xFFFFFF
	rdmaUDPQKey     = 0x01234567
)

// mcMember is a session with a UD QP and a UDP-port-space ID bound to ip
// and resolved to the group, its QP taken to RTS the librdmacm way.
func mcMember(t *testing.T, sock, dev string, ip netip.Addr, group netip.AddrPort, ctx uint64) (*cmNode, *client.CMID) {
	t.Helper()
	n, err := newCMNode(sock, dev, 4)
	if err != nil {
		t.Fatal(err)
	}
	id, err := n.ch.CreateID(ctx, proto.PSUDP, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.BindAddr(netip.AddrPortFrom(ip, 0)); err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveAddr(ip, group, 2000); err != nil {
		t.Fatal(err)
	}
	if _, err := waitEvent(n.ch, evAddrResolved); err != nil {
		t.Fatal(err)
	}
	for st := uint8(1); st <= 3; st++ {
		if err := id.ModifyQP(n.qp, st); err != nil {
			t.Fatalf("UD QP to %d: %v", st, err)
		}
	}
	return n, id
}

// checkJoin checks a MULTICAST_JOIN record as Linux's cma makes it on
// RoCE v2 for an IPv4 group.
func checkJoin(ev proto.CMEvent, id *client.CMID, ctx uint64, src netip.Addr, group netip.AddrPort) error {
	mgid := netip.AddrFrom16(netip.AddrFrom4(group.Addr().As4()).As16()) // ::ffff:a.b.c.d
	if ev.ID != id.Handle || ev.Context != ctx || ev.Status != 0 || !ev.UD ||
		ev.QPNum != mcGroupQPN || ev.QKey != rdmaUDPQKey ||
		ev.AH.DGID != mgid.As16() || !ev.AH.IsGlobal || ev.AH.HopLimit != 64 || ev.AH.Port != 1 || ev.AH.DLID != 0 ||
		client.AddrPort(ev.Dst) != group || client.AddrPort(ev.Src).Addr() != src {
		return fmt.Errorf("MULTICAST_JOIN record %+v", ev)
	}
	return nil
}

// TestCMMulticast: two sessions on two devices join 239.1.2.3 through the
// daemon's CM; the receiver attaches its QP with the event's MGID and
// gets the sender's datagrams sent to QP 0xFFFFFF with the event's Q_Key;
// after leaving and detaching it gets none. Errors as the kernel's.
func TestCMMulticast(t *testing.T) {
	srv, sock := startDaemon(t)
	group := netip.AddrPortFrom(netip.MustParseAddr("239.1.2.3"), 0)
	rx, rid := mcMember(t, sock, "rvt0", ip0, group, 0x51)
	tx, tid := mcMember(t, sock, "rvt1", ip1, group, 0x52)

	for i := 0; i < 4; i++ {
		if err := rx.qp.PostRecv(uint64(i), client.SGE{Addr: rx.mr.Addr + uint64(i)*4096, Length: 40 + 256, LKey: rx.mr.LKey}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rid.JoinMulticast(group, 0x77, 0); err != nil {
		t.Fatal(err)
	}
	ev, err := waitEvent(rx.ch, evMulticastJoin)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkJoin(ev, rid, 0x51, ip0, group); err != nil {
		t.Fatal(err)
	}
	if err := rx.qp.AttachMcast(ev.AH.DGID, ev.AH.DLID); err != nil {
		t.Fatal(err)
	}
	if err := rid.JoinMulticast(group, 0x77, 0); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("second join of the group on the ID: %v", err)
	}

	// The sender joins send-only: the same record.
	if err := tid.JoinMulticast(group, 0x78, 1); err != nil {
		t.Fatal(err)
	}
	tev, err := waitEvent(tx.ch, evMulticastJoin)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkJoin(tev, tid, 0x52, ip1, group); err != nil {
		t.Fatal(err)
	}
	ah, err := tx.dev.CreateAH(tx.pd, tev.AH)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("to the group 239.1.2.3")
	copy(tx.shm.Mem, msg)
	send := func() {
		t.Helper()
		if err := tx.qp.PostSend(client.SendWR{WRID: 1, Opcode: 2, Flags: 2, SGL: []client.SGE{{Addr: tx.mr.Addr, Length: uint32(len(msg)), LKey: tx.mr.LKey}},
			AH: ah, RemoteQPN: tev.QPNum, RemoteQKey: tev.QKey}); err != nil {
			t.Fatal(err)
		}
		if wcs, err := tx.poll(1); err != nil || wcs[0].Status != 0 {
			t.Fatalf("multicast send: %+v %v", wcs, err)
		}
	}
	send()
	wcs, err := rx.poll(1)
	if err != nil {
		t.Fatal(err)
	}
	wc := wcs[0]
	got := rx.shm.Mem[wc.WRID*4096+40 : wc.WRID*4096+40+uint64(len(msg))]
	if wc.Status != 0 || wc.ByteLen != uint32(40+len(msg)) || !bytes.Equal(got, msg) || wc.SrcQP != tx.qp.QPN {
		t.Fatalf("datagram: %+v %q", wc, got)
	}

	// Leave: detach first (librdmacm's order), then the CM.
	if err := rx.qp.DetachMcast(ev.AH.DGID, ev.AH.DLID); err != nil {
		t.Fatal(err)
	}
	if err := rid.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	if err := rid.LeaveMulticast(group); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("second leave: %v", err)
	}
	send()
	if wcs, err := rx.poll(1); err == nil {
		t.Errorf("a datagram after leaving: %+v", wcs)
	}

	// Errors: an IPv6 group (RoCE v2: the kernel's ENOTSUPP), a unicast
	// address, an ID without a device, join flags past send-only.
	for _, c := range []struct {
		name  string
		addr  string
		flags uint32
		want  error
	}{
		{"ipv6 group", "ff0e::1", 0, syscall.EOPNOTSUPP},
		{"unicast", "198.18.0.9", 0, syscall.EINVAL},
		{"unspecified", "0.0.0.0", 0, syscall.EINVAL},
		{"flags", "239.1.2.4", 2, syscall.EINVAL},
	} {
		if err := rid.JoinMulticast(netip.AddrPortFrom(netip.MustParseAddr(c.addr), 0), 0, c.flags); !errors.Is(err, c.want) {
			t.Errorf("%s: join gave %v, want %v", c.name, err, c.want)
		}
	}
	unbound, err := rx.ch.CreateID(1, proto.PSUDP, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := unbound.JoinMulticast(group, 0, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("join without a device: %v", err)
	}
	for _, id := range []*client.CMID{unbound, rid, tid} {
		if _, err := id.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	rx.c.Close()
	tx.c.Close()
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 })
	cmClean(t, srv)
}
