package rvtd_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// The IPv6 fabric of TestCMIPv6: rvt0 and rvt1 with one IPv6 address each.
var (
	ip6a = netip.MustParseAddr("fd00:5e::1")
	ip6b = netip.MustParseAddr("fd00:5e::2")
)

// startDaemonIPv6 serves rvt0 (fd00:5e::1) and rvt1 (fd00:5e::2) on one
// in-memory fabric.
func startDaemonIPv6(t *testing.T) (*rvtd.Server, string) {
	t.Helper()
	cfg := &rvtd.Config{Devices: []rvtd.DeviceConfig{
		{Name: "rvt0", Fabric: "fabric0", IP: ip6a.String() + "/64", MAC: "02:00:5e:00:00:01"},
		{Name: "rvt1", Fabric: "fabric0", IP: ip6b.String() + "/64", MAC: "02:00:5e:00:00:02"},
	}}
	return startDaemonConfig(t, cfg)
}

// TestCMIPv6: rdma_cm with IPv6 addresses through the daemon: a listener
// on [fd00:5e::1], a client bound to fd00:5e::2 resolves it (the GIDs are
// the addresses), connects an RC QP, and a SEND arrives; the records and
// cm_query carry AF_INET6 addresses.
func TestCMIPv6(t *testing.T) {
	srv, sock := startDaemonIPv6(t)
	s, err := newCMNode(sock, "rvt0", 2)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newCMNode(sock, "rvt1", 2)
	if err != nil {
		t.Fatal(err)
	}
	lid, port, err := listen(s.ch, 1, proto.PSTCP, 2, netip.AddrPortFrom(ip6a, 0))
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.ch.CreateID(2, proto.PSTCP, 2)
	if err != nil {
		t.Fatal(err)
	}
	dst := netip.AddrPortFrom(ip6a, port)
	if err := resolve(c.ch, id, ip6b, dst); err != nil {
		t.Fatal(err)
	}
	q, err := id.Query()
	if err != nil {
		t.Fatal(err)
	}
	if q.Src.Family != proto.AFInet6 || q.Dst.Family != proto.AFInet6 || client.AddrPort(q.Dst) != dst ||
		client.AddrPort(q.Src).Addr() != ip6b || q.SGID != ip6b.As16() || q.DGID != ip6a.As16() || q.NumPaths != 1 || q.DeviceName != "rvt1" {
		t.Fatalf("query after resolution: %+v", q)
	}
	if err := id.Connect(proto.CMConnParam{QP: c.qp.Handle, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, PrivateData: helloB}); err != nil {
		t.Fatal(err)
	}
	ev, err := waitEvent(s.ch, evConnectRequest)
	if err != nil {
		t.Fatal(err)
	}
	if from := client.AddrPort(ev.Dst); ev.Dst.Family != proto.AFInet6 || from.Addr() != ip6b || client.AddrPort(ev.Src) != dst {
		t.Fatalf("request %v -> %v", client.AddrPort(ev.Dst), client.AddrPort(ev.Src))
	}
	cid := s.c.EventID(ev)
	if err := cid.ModifyQP(s.qp, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.qp.PostRecv(1, client.SGE{Addr: s.mr.Addr, Length: 4096, LKey: s.mr.LKey}); err != nil {
		t.Fatal(err)
	}
	if err := cid.Accept(proto.CMConnParam{QP: s.qp.Handle, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7, PrivateData: welcome}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitEvent(c.ch, evEstablished); err != nil {
		t.Fatal(err)
	}
	if _, err := waitEvent(s.ch, evEstablished); err != nil {
		t.Fatal(err)
	}
	msg := []byte("over IPv6 GIDs")
	copy(c.shm.Mem, msg)
	if err := c.qp.PostSend(client.SendWR{WRID: 1, Opcode: 2, Flags: 2, SGL: []client.SGE{{Addr: c.mr.Addr, Length: uint32(len(msg)), LKey: c.mr.LKey}}}); err != nil {
		t.Fatal(err)
	}
	if wcs, err := c.poll(1); err != nil || wcs[0].Status != 0 {
		t.Fatalf("send: %+v %v", wcs, err)
	}
	wcs, err := s.poll(1)
	if err != nil || wcs[0].Status != 0 || wcs[0].ByteLen != uint32(len(msg)) || !bytes.Equal(s.shm.Mem[:len(msg)], msg) {
		t.Fatalf("receive: %+v %v %q", wcs, err, s.shm.Mem[:len(msg)])
	}
	if err := id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if _, err := waitEvent(s.ch, evDisconnected); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*client.CMID{id, cid, lid} {
		if _, err := x.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	s.c.Close()
	c.c.Close()
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 })
	cmClean(t, srv)
}
