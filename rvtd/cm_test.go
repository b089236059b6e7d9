package rvtd_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// rdma_cm event numbers (enum rdma_cm_event_type).
const (
	evAddrResolved   = 0
	evAddrError      = 1
	evRouteResolved  = 2
	evConnectRequest = 4
	evUnreachable    = 7
	evRejected       = 8
	evEstablished    = 9
	evDisconnected   = 10
)

// The default devices' addresses.
var (
	ip0 = netip.MustParseAddr("198.18.0.1") // rvt0
	ip1 = netip.MustParseAddr("198.18.0.2") // rvt1
)

// cmNode is a client with a device, a PD, 4 MiB of shared memory
// registered, one CQ, a QP of the given type and an rdma_cm event channel.
type cmNode struct {
	c   *client.Client
	dev *client.Device
	pd  uint32
	shm *client.Shm
	mr  *client.MR
	cq  *client.CQ
	qp  *client.QP
	ch  *client.CMChannel
}

func newCMNode(sock, dev string, qpType uint8) (*cmNode, error) {
	c, err := client.Dial(sock, "rvtd-cm-test")
	if err != nil {
		return nil, err
	}
	n := &cmNode{c: c}
	if n.dev, err = c.OpenDevice(dev); err != nil {
		return nil, err
	}
	if n.pd, err = n.dev.AllocPD(); err != nil {
		return nil, err
	}
	if n.shm, err = n.dev.ShmAlloc(shmSize); err != nil {
		return nil, err
	}
	if n.mr, err = n.dev.RegMR(n.pd, n.shm, 0, shmSize, accessAll); err != nil {
		return nil, err
	}
	if n.cq, err = n.dev.CreateCQ(256, 0); err != nil {
		return nil, err
	}
	if n.qp, err = n.dev.CreateQP(n.pd, qpType, n.cq, n.cq, proto.Cap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}); err != nil {
		return nil, err
	}
	n.ch, err = c.CreateEventChannel()
	return n, err
}

func (n *cmNode) poll(want int) ([]client.WC, error) { return (&node{cq: n.cq}).poll(want) }

// waitEvent reads the channel's next event and checks its type.
func waitEvent(ch *client.CMChannel, want uint32) (proto.CMEvent, error) {
	ev, err := ch.GetEvent(10 * time.Second)
	if err != nil {
		return ev, fmt.Errorf("waiting for event %d: %w", want, err)
	}
	if ev.Event != want {
		return ev, fmt.Errorf("event %d (status %d), want %d", ev.Event, ev.Status, want)
	}
	return ev, nil
}

// resolve takes an active ID through address and route resolution.
func resolve(ch *client.CMChannel, id *client.CMID, src netip.Addr, dst netip.AddrPort) error {
	if err := id.ResolveAddr(src, dst, 2000); err != nil {
		return err
	}
	if _, err := waitEvent(ch, evAddrResolved); err != nil {
		return err
	}
	if err := id.ResolveRoute(2000); err != nil {
		return err
	}
	_, err := waitEvent(ch, evRouteResolved)
	return err
}

// listen binds a new ID of the channel to addr and listens; it returns
// the ID and its port.
func listen(ch *client.CMChannel, ctx uint64, ps uint16, qpType uint8, addr netip.AddrPort) (*client.CMID, uint16, error) {
	id, err := ch.CreateID(ctx, ps, qpType)
	if err != nil {
		return nil, 0, err
	}
	if err := id.BindAddr(addr); err != nil {
		return id, 0, err
	}
	if err := id.Listen(0); err != nil { // 1024, as rdma_listen(id, 0)
		return id, 0, err
	}
	q, err := id.Query()
	if err != nil {
		return id, 0, err
	}
	return id, q.Src.Port, nil
}

func privData(ev proto.CMEvent) []byte { return ev.PrivateData[:ev.PrivateDataLen] }

// cmRole runs the rdma_cm client roles of the multi-process tests.
func cmRole(role, sock, dev string) error {
	switch role {
	case "cm-server", "cm-victim-request", "cm-victim-connected":
		return cmServer(role, sock, dev)
	case "cm-client":
		return cmClient(sock, dev)
	case "cm-udserver":
		return cmUDServer(sock, dev)
	case "cm-udclient":
		return cmUDClient(sock, dev)
	}
	return fmt.Errorf("unknown role %s", role)
}

var (
	helloB   = []byte("hello from B")
	welcome  = []byte("welcome")
	udHello  = []byte("ud hello")
	udReply  = []byte("ud welcome")
	datagram = []byte("a datagram through SIDR")
)

const cmSendLen = 3000

// udTries is how many datagrams the SIDR test sends.
const udTries = 8

// cmServer listens on ip0, accepts one connection with private data
// carrying its MR's address and rkey, checks a SEND and an RDMA WRITE and
// waits for the peer's disconnection. The victim roles stop half-way
// (before accepting, or once connected) and wait to be killed.
func cmServer(role, sock, dev string) error {
	n, err := newCMNode(sock, dev, 2)
	if err != nil {
		return err
	}
	lid, port, err := listen(n.ch, 0x1111, proto.PSTCP, 2, netip.AddrPortFrom(ip0, 0))
	if err != nil {
		return err
	}
	fmt.Println("LISTEN", port)
	ev, err := waitEvent(n.ch, evConnectRequest)
	if err != nil {
		return err
	}
	if ev.ListenID != lid.Handle || ev.ID == lid.Handle || ev.ID == 0 || ev.Context != 0x1111 {
		return fmt.Errorf("CONNECT_REQUEST names listener %d, ID %d, context %#x (listener %d)", ev.ListenID, ev.ID, ev.Context, lid.Handle)
	}
	if !bytes.HasPrefix(privData(ev), helloB) || ev.PrivateDataLen != 56 {
		return fmt.Errorf("request private data %q (%d bytes)", privData(ev), ev.PrivateDataLen)
	}
	if from := client.AddrPort(ev.Dst); from.Addr() != ip1 || from.Port() == 0 {
		return fmt.Errorf("request from %v", from)
	}
	if ev.QPNum == 0 || ev.ResponderResources != 1 || ev.InitiatorDepth != 1 {
		return fmt.Errorf("request parameters %+v", ev)
	}
	cid := n.c.EventID(ev)
	q, err := cid.Query()
	if err != nil {
		return err
	}
	if q.DeviceName != dev || q.Device != n.dev.Handle || q.Port != 1 || q.NumPaths != 1 || client.AddrPort(q.Src).Port() != port {
		return fmt.Errorf("query of the new ID: %+v", q)
	}
	if role == "cm-victim-request" {
		fmt.Println("REQ")
		_, _ = readLine("NEVER")
		return nil
	}
	if err := cid.ModifyQP(n.qp, 1); err != nil {
		return fmt.Errorf("INIT from init_qp_attr: %w", err)
	}
	if err := n.qp.PostRecv(1, client.SGE{Addr: n.mr.Addr, Length: 4096, LKey: n.mr.LKey}); err != nil {
		return err
	}
	priv := binary.LittleEndian.AppendUint64(nil, n.mr.Addr)
	priv = binary.LittleEndian.AppendUint32(priv, n.mr.RKey)
	priv = append(priv, welcome...)
	if err := cid.Accept(proto.CMConnParam{QP: n.qp.Handle, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7, PrivateData: priv}); err != nil {
		return err
	}
	if ev, err = waitEvent(n.ch, evEstablished); err != nil {
		return err
	}
	if ev.ID != cid.Handle {
		return fmt.Errorf("ESTABLISHED for ID %d, want %d", ev.ID, cid.Handle)
	}
	if a, err := n.qp.Query(); err != nil || a.State != 3 {
		return fmt.Errorf("QP after ESTABLISHED: state %d, %v", a.State, err)
	}
	fmt.Println("EST")
	if role == "cm-victim-connected" {
		_, _ = readLine("NEVER")
		return nil
	}
	wcs, err := n.poll(1)
	if err != nil {
		return err
	}
	if wc := wcs[0]; wc.Status != 0 || wc.Opcode != 128 || wc.ByteLen != cmSendLen {
		return fmt.Errorf("receive: %+v", wc)
	}
	for j := 0; j < cmSendLen; j++ {
		if n.shm.Mem[j] != pattern(3, j) {
			return fmt.Errorf("SEND: byte %d is %#x", j, n.shm.Mem[j])
		}
	}
	fmt.Println("RECVOK")
	if _, err := readLine("CHECK"); err != nil {
		return err
	}
	for j := 0; j < writeLen; j++ {
		if n.shm.Mem[writeDst+j] != pattern(writeSeed, j) {
			return fmt.Errorf("RDMA WRITE: byte %d is %#x", j, n.shm.Mem[writeDst+j])
		}
	}
	fmt.Println("WRITEOK")
	if _, err := waitEvent(n.ch, evDisconnected); err != nil {
		return err
	}
	if a, err := n.qp.Query(); err != nil || a.State != 6 {
		return fmt.Errorf("QP after DISCONNECTED: state %d, %v", a.State, err)
	}
	fmt.Println("DISC")
	if _, err := cid.Destroy(); err != nil {
		return err
	}
	if _, err := lid.Destroy(); err != nil {
		return err
	}
	_, _ = readLine("EOF")
	return nil
}

// cmClient resolves and connects from ip1 to the server's port, sends and
// writes, then disconnects.
func cmClient(sock, dev string) error {
	f, err := readLine("PEER")
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(f[0])
	if err != nil {
		return err
	}
	n, err := newCMNode(sock, dev, 2)
	if err != nil {
		return err
	}
	id, err := n.ch.CreateID(0x2222, proto.PSTCP, 2)
	if err != nil {
		return err
	}
	if err := resolve(n.ch, id, ip1, netip.AddrPortFrom(ip0, uint16(port))); err != nil {
		return err
	}
	q, err := id.Query()
	if err != nil {
		return err
	}
	if q.DeviceName != dev || q.NumPaths != 1 || client.AddrPort(q.Dst) != netip.AddrPortFrom(ip0, uint16(port)) || q.Src.Port < 32768 || q.Src.Port > 60999 {
		return fmt.Errorf("query after resolution: %+v", q)
	}
	if err := id.Connect(proto.CMConnParam{QP: n.qp.Handle, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, PrivateData: helloB}); err != nil {
		return err
	}
	ev, err := waitEvent(n.ch, evEstablished)
	if err != nil {
		return err
	}
	pd := privData(ev)
	if ev.Context != 0x2222 || ev.ID != id.Handle || len(pd) != 196 || !bytes.HasPrefix(pd[12:], welcome) || ev.QPNum == 0 {
		return fmt.Errorf("ESTABLISHED %+v, private data %q", ev, pd)
	}
	peerAddr, peerRKey := binary.LittleEndian.Uint64(pd), binary.LittleEndian.Uint32(pd[8:])
	if a, err := n.qp.Query(); err != nil || a.State != 3 || a.DestQPN != ev.QPNum {
		return fmt.Errorf("QP after ESTABLISHED: %+v, %v", a, err)
	}
	fmt.Println("EST")
	if _, err := readLine("GO"); err != nil {
		return err
	}
	mem := n.shm.Mem
	for j := 0; j < cmSendLen; j++ {
		mem[j] = pattern(3, j)
	}
	if err := n.qp.PostSend(client.SendWR{WRID: 7, Opcode: 2, Flags: 2, SGL: []client.SGE{{Addr: n.mr.Addr, Length: cmSendLen, LKey: n.mr.LKey}}}); err != nil {
		return err
	}
	for j := 0; j < writeLen; j++ {
		mem[writeOff+j] = pattern(writeSeed, j)
	}
	if err := n.qp.PostSend(client.SendWR{WRID: 8, Opcode: 0, Flags: 2, SGL: []client.SGE{{Addr: n.mr.Addr + writeOff, Length: writeLen, LKey: n.mr.LKey}},
		RemoteAddr: peerAddr + writeDst, RKey: peerRKey}); err != nil {
		return err
	}
	wcs, err := n.poll(2)
	if err != nil {
		return err
	}
	for i, wc := range wcs {
		if wc.Status != 0 || wc.WRID != uint64(7+i) {
			return fmt.Errorf("completion %d: %+v", i, wc)
		}
	}
	fmt.Println("SENDOK")
	if _, err := readLine("DISC"); err != nil {
		return err
	}
	if err := id.Disconnect(); err != nil {
		return err
	}
	if _, err := waitEvent(n.ch, evDisconnected); err != nil {
		return err
	}
	fmt.Println("DISC")
	if _, err := id.Destroy(); err != nil {
		return err
	}
	_, _ = readLine("EOF")
	return nil
}

// cmUDServer answers one SIDR request with its UD QP and checks the
// datagram that follows.
func cmUDServer(sock, dev string) error {
	n, err := newCMNode(sock, dev, 4)
	if err != nil {
		return err
	}
	lid, port, err := listen(n.ch, 0x3333, proto.PSUDP, 4, netip.AddrPortFrom(ip0, 0))
	if err != nil {
		return err
	}
	fmt.Println("LISTEN", port)
	ev, err := waitEvent(n.ch, evConnectRequest)
	if err != nil {
		return err
	}
	if !ev.UD || ev.ListenID != lid.Handle || !bytes.HasPrefix(privData(ev), udHello) || ev.PrivateDataLen != 180 {
		return fmt.Errorf("SIDR request %+v", ev)
	}
	cid := n.c.EventID(ev)
	for st := uint8(1); st <= 3; st++ {
		if err := cid.ModifyQP(n.qp, st); err != nil {
			return fmt.Errorf("UD QP to %d: %w", st, err)
		}
	}
	if a, err := n.qp.Query(); err != nil || a.QKey != 0x01234567 {
		return fmt.Errorf("UD QP: %+v, %v", a, err)
	}
	// UD may drop a datagram (one that finds no receive taken from the
	// ring yet): the client sends udTries, the first that arrives counts.
	for i := 0; i < udTries; i++ {
		if err := n.qp.PostRecv(uint64(i), client.SGE{Addr: n.mr.Addr + uint64(i)*4096, Length: 40 + 256, LKey: n.mr.LKey}); err != nil {
			return err
		}
	}
	if err := cid.Accept(proto.CMConnParam{QP: n.qp.Handle, PrivateData: udReply}); err != nil {
		return err
	}
	wcs, err := n.poll(1)
	if err != nil {
		return err
	}
	wc := wcs[0]
	got := n.shm.Mem[wc.WRID*4096+40 : wc.WRID*4096+40+uint64(len(datagram))]
	if wc.Status != 0 || wc.ByteLen != uint32(40+len(datagram)) || !bytes.Equal(got, datagram) {
		return fmt.Errorf("datagram: %+v %q", wc, got)
	}
	fmt.Println("UDOK")
	_, _ = readLine("EOF")
	return nil
}

// cmUDClient resolves the server through SIDR and sends it a datagram.
func cmUDClient(sock, dev string) error {
	f, err := readLine("PEER")
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(f[0])
	if err != nil {
		return err
	}
	n, err := newCMNode(sock, dev, 4)
	if err != nil {
		return err
	}
	id, err := n.ch.CreateID(0x4444, proto.PSUDP, 4)
	if err != nil {
		return err
	}
	if err := resolve(n.ch, id, ip1, netip.AddrPortFrom(ip0, uint16(port))); err != nil {
		return err
	}
	for st := uint8(1); st <= 3; st++ {
		if err := id.ModifyQP(n.qp, st); err != nil {
			return fmt.Errorf("UD QP to %d: %w", st, err)
		}
	}
	if err := id.Connect(proto.CMConnParam{QP: n.qp.Handle, PrivateData: udHello}); err != nil {
		return err
	}
	ev, err := waitEvent(n.ch, evEstablished)
	if err != nil {
		return err
	}
	if !ev.UD || ev.QKey != 0x01234567 || ev.QPNum == 0 || !bytes.HasPrefix(privData(ev), udReply) || ev.AH.DGID != netip.AddrFrom4(ip0.As4()).As16() {
		return fmt.Errorf("SIDR answer %+v", ev)
	}
	ah, err := n.dev.CreateAH(n.pd, ev.AH)
	if err != nil {
		return err
	}
	copy(n.shm.Mem, datagram)
	for i := 0; i < udTries; i++ {
		if err := n.qp.PostSend(client.SendWR{WRID: 9, Opcode: 2, Flags: 2, SGL: []client.SGE{{Addr: n.mr.Addr, Length: uint32(len(datagram)), LKey: n.mr.LKey}},
			AH: ah, RemoteQPN: ev.QPNum, RemoteQKey: ev.QKey}); err != nil {
			return err
		}
		wcs, err := n.poll(1)
		if err != nil {
			return err
		}
		if wcs[0].Status != 0 {
			return fmt.Errorf("UD send: %+v", wcs[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("SENT")
	_, _ = readLine("EOF")
	return nil
}

// cmClean waits until no session holds an rdma_cm ID and the agents hold
// nothing (TIMEWAIT over).
func cmClean(t *testing.T, srv *rvtd.Server) {
	t.Helper()
	waitFor(t, "the CM to be empty", func() bool { st := srv.CMStats(); return st == rvtd.CMStats{} })
}

func TestCMConnectBetweenProcesses(t *testing.T) {
	srv, sock := startDaemon(t)
	a := startChild(t, "cm-server", "cm-server", sock, "rvt0")
	b := startChild(t, "cm-client", "cm-client", sock, "rvt1")
	port := a.expect("LISTEN")[1]
	b.send("PEER %s", port)
	a.expect("EST")
	b.expect("EST")
	b.send("GO")
	a.expect("RECVOK")
	b.expect("SENDOK")
	a.send("CHECK")
	a.expect("WRITEOK")
	b.send("DISC")
	b.expect("DISC")
	a.expect("DISC")
	a.in.Close()
	b.in.Close()
	if err := a.cmd.Wait(); err != nil {
		t.Errorf("server: %v", err)
	}
	if err := b.cmd.Wait(); err != nil {
		t.Errorf("client: %v", err)
	}
	waitFor(t, "sessions to end", func() bool { st := srv.Stats(); return st.Sessions == 0 && st.QPs == 0 })
	cmClean(t, srv)
}

func TestCMUDThroughSIDR(t *testing.T) {
	srv, sock := startDaemon(t)
	a := startChild(t, "cm-udserver", "cm-udserver", sock, "rvt0")
	b := startChild(t, "cm-udclient", "cm-udclient", sock, "rvt1")
	port := a.expect("LISTEN")[1]
	b.send("PEER %s", port)
	b.expect("SENT")
	a.expect("UDOK")
	a.in.Close()
	b.in.Close()
	if err := a.cmd.Wait(); err != nil {
		t.Errorf("server: %v", err)
	}
	if err := b.cmd.Wait(); err != nil {
		t.Errorf("client: %v", err)
	}
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 })
	cmClean(t, srv)
}

// TestCMPortsDeviceWide: a port is the device's, across sessions: a
// second listener gets EADDRINUSE (also through a wildcard bind), the
// port is free again once its ID is gone, and active IDs get distinct
// ephemeral ports.
func TestCMPortsDeviceWide(t *testing.T) {
	srv, sock := startDaemon(t)
	a, err := newCMNode(sock, "rvt0", 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newCMNode(sock, "rvt0", 2)
	if err != nil {
		t.Fatal(err)
	}
	la, port, err := listen(a.ch, 1, proto.PSTCP, 2, netip.AddrPortFrom(ip0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if port < 32768 || port > 60999 {
		t.Errorf("ephemeral listening port %d", port)
	}
	for _, addr := range []netip.AddrPort{netip.AddrPortFrom(ip0, port), netip.AddrPortFrom(netip.IPv4Unspecified(), port)} {
		id, err := b.ch.CreateID(2, proto.PSTCP, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := id.BindAddr(addr); !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("second bind of %v: %v, want EADDRINUSE", addr, err)
		}
		if _, err := id.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	// Another port space does not conflict.
	if _, _, err := listen(b.ch, 3, proto.PSUDP, 4, netip.AddrPortFrom(ip0, port)); err != nil {
		t.Errorf("UDP port space, same port: %v", err)
	}
	if _, err := la.Destroy(); err != nil {
		t.Fatal(err)
	}
	lb, _, err := listen(b.ch, 4, proto.PSTCP, 2, netip.AddrPortFrom(netip.IPv4Unspecified(), port))
	if err != nil {
		t.Fatalf("the port after its listener went: %v", err)
	}
	if q, err := lb.Query(); err != nil || q.DeviceName != "" || q.Src.Port != port {
		t.Errorf("wildcard listener query %+v, %v", q, err)
	}
	// Active sides, in two sessions: distinct ephemeral ports.
	seen := map[uint16]bool{}
	for _, n := range []*cmNode{a, b, a, b} {
		id, err := n.ch.CreateID(5, proto.PSTCP, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := resolve(n.ch, id, netip.Addr{}, netip.AddrPortFrom(ip1, 9999)); err != nil {
			t.Fatal(err)
		}
		q, err := id.Query()
		if err != nil {
			t.Fatal(err)
		}
		if q.DeviceName != "rvt1" || q.Src.Port < 32768 || q.Src.Port > 60999 || seen[q.Src.Port] {
			t.Errorf("active ID: device %q, port %d (seen %v)", q.DeviceName, q.Src.Port, seen)
		}
		seen[q.Src.Port] = true
	}
	a.c.Close()
	b.c.Close()
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 })
	cmClean(t, srv)
}

// TestCMRejectAndOptions: a reject with private data both ways, in two
// sessions of this process, and the smaller operations.
func TestCMRejectAndOptions(t *testing.T) {
	srv, sock := startDaemon(t)
	s, err := newCMNode(sock, "rvt0", 2)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newCMNode(sock, "rvt1", 2)
	if err != nil {
		t.Fatal(err)
	}
	lid, port, err := listen(s.ch, 1, proto.PSTCP, 2, netip.AddrPortFrom(netip.IPv4Unspecified(), 0))
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.ch.CreateID(2, proto.PSTCP, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.SetOption(proto.OptLevelID, proto.OptIDTOS, 32); err != nil {
		t.Fatal(err)
	}
	if err := id.SetOption(proto.OptLevelID, proto.OptIDAckTimeout, 14); err != nil {
		t.Fatal(err)
	}
	if err := id.SetOption(proto.OptLevelID, proto.OptIDReuseAddr, 1); err != nil {
		t.Fatal(err)
	}
	if err := id.SetOption(proto.OptLevelIB, proto.OptIBPath, 0); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("RDMA_OPTION_IB_PATH: %v", err)
	}
	if err := id.JoinMulticast(netip.AddrPortFrom(netip.MustParseAddr("239.1.1.1"), 0), 0, 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("join_multicast of an RC ID without a device: %v", err) // the kernel's EINVAL
	}
	if err := id.Connect(proto.CMConnParam{QP: c.qp.Handle}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("connect before resolution: %v", err)
	}
	if err := resolve(c.ch, id, ip1, netip.AddrPortFrom(ip0, port)); err != nil {
		t.Fatal(err)
	}
	if q, err := id.Query(); err != nil || q.TrafficClass != 32 {
		t.Errorf("route after TOS 32: %+v, %v", q, err)
	}
	if err := id.Connect(proto.CMConnParam{QP: 999}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("connect with a bad QP handle: %v", err)
	}
	if err := id.Connect(proto.CMConnParam{QP: c.qp.Handle, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, PrivateData: helloB}); err != nil {
		t.Fatal(err)
	}
	ev, err := waitEvent(s.ch, evConnectRequest)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ListenID != lid.Handle {
		t.Errorf("request for listener %d, want %d", ev.ListenID, lid.Handle)
	}
	// A second channel: the new ID moves there before it is rejected.
	ch2, err := s.c.CreateEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	nid := s.c.EventID(ev)
	if n, err := nid.Migrate(ch2); err != nil || n != 1 {
		t.Errorf("migrate: %d events reported, %v", n, err)
	}
	if err := s.ch.Destroy(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("destroying a channel in use: %v", err)
	}
	if err := nid.Reject([]byte("go away")); err != nil {
		t.Fatal(err)
	}
	ev, err = waitEvent(c.ch, evRejected)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Status != 28 || !bytes.HasPrefix(privData(ev), []byte("go away")) {
		t.Errorf("REJECTED: status %d, private data %q", ev.Status, privData(ev))
	}
	if n, err := nid.Destroy(); err != nil || n != 0 {
		t.Errorf("destroy of the migrated ID: %d, %v", n, err)
	}
	if err := ch2.Destroy(); err != nil {
		t.Errorf("destroying the emptied channel: %v", err)
	}
	if n, err := id.Destroy(); err != nil || n != 3 {
		t.Errorf("destroy: %d events reported (want 3), %v", n, err)
	}
	// Nobody listens: REJECTED with reason 8.
	id, err = c.ch.CreateID(2, proto.PSTCP, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := resolve(c.ch, id, ip1, netip.AddrPortFrom(ip0, 1)); err != nil {
		t.Fatal(err)
	}
	if err := id.Connect(proto.CMConnParam{QP: c.qp.Handle}); err != nil {
		t.Fatal(err)
	}
	if ev, err = waitEvent(c.ch, evRejected); err != nil || ev.Status != 8 {
		t.Errorf("connect to nobody: %+v, %v", ev, err)
	}
	// A session that agreed on minor version 0 has no CM.
	old, err := proto.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Send(proto.Header{Op: proto.OpHello, ReqID: 1}, &proto.Hello{Magic: proto.Magic, Major: proto.Major, Minor: 0}); err != nil {
		t.Fatal(err)
	}
	if m, err := old.Recv(); err != nil || m.Body.(*proto.HelloReply).Minor != 0 {
		t.Fatalf("hello 1.0: %+v, %v", m, err)
	}
	if err := old.Send(proto.Header{Op: proto.OpCMCreateEventChannel, ReqID: 2}, nil); err != nil {
		t.Fatal(err)
	}
	if m, err := old.Recv(); err != nil || m.Status != proto.EOPNOTSUPP {
		t.Errorf("CM on a 1.0 session: %+v, %v", m, err)
	}
	old.Close()
	s.c.Close()
	c.c.Close()
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 })
	cmClean(t, srv)
}

// TestCMKilledBeforeAccept: the passive client is killed after
// CONNECT_REQUEST, before it accepts. The active side is rejected, rvtd
// goes on, and the victim's port is free for a new listener.
func TestCMKilledBeforeAccept(t *testing.T) {
	srv, sock := startDaemon(t)
	v := startChild(t, "victim", "cm-victim-request", sock, "rvt0")
	port, _ := strconv.Atoi(v.expect("LISTEN")[1])
	c, err := newCMNode(sock, "rvt1", 2)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.ch.CreateID(2, proto.PSTCP, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := resolve(c.ch, id, ip1, netip.AddrPortFrom(ip0, uint16(port))); err != nil {
		t.Fatal(err)
	}
	if err := id.Connect(proto.CMConnParam{QP: c.qp.Handle, PrivateData: helloB, ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		t.Fatal(err)
	}
	v.expect("REQ")
	if st := srv.CMStats(); st.IDs != 3 { // the victim's listener and request, our ID
		t.Errorf("before the kill: %+v", st)
	}
	if err := v.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = v.cmd.Wait()
	ev, err := c.ch.GetEvent(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Event != evRejected && ev.Event != evUnreachable {
		t.Errorf("after the kill: event %d status %d, want REJECTED or UNREACHABLE", ev.Event, ev.Status)
	}
	t.Logf("active side: event %d, status %d", ev.Event, ev.Status)
	waitFor(t, "the victim's session to end", func() bool { return srv.Stats().Sessions == 1 && srv.CMStats().IDs == 1 })
	// The port is free again: a new listener (in another session) takes it.
	n, err := newCMNode(sock, "rvt0", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := listen(n.ch, 1, proto.PSTCP, 2, netip.AddrPortFrom(ip0, uint16(port))); err != nil {
		t.Errorf("listening on the victim's port: %v", err)
	}
	n.c.Close()
	c.c.Close()
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 && srv.Stats().QPs == 0 })
	cmClean(t, srv)
}

// TestCMKilledWhenConnected: a connected passive client is killed; the
// active side sees DISCONNECTED and nothing is left behind.
func TestCMKilledWhenConnected(t *testing.T) {
	srv, sock := startDaemon(t)
	v := startChild(t, "victim", "cm-victim-connected", sock, "rvt0")
	port, _ := strconv.Atoi(v.expect("LISTEN")[1])
	c, err := newCMNode(sock, "rvt1", 2)
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.ch.CreateID(2, proto.PSTCP, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := resolve(c.ch, id, ip1, netip.AddrPortFrom(ip0, uint16(port))); err != nil {
		t.Fatal(err)
	}
	if err := id.Connect(proto.CMConnParam{QP: c.qp.Handle, PrivateData: helloB, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitEvent(c.ch, evEstablished); err != nil {
		t.Fatal(err)
	}
	v.expect("EST")
	if err := v.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = v.cmd.Wait()
	if _, err := waitEvent(c.ch, evDisconnected); err != nil {
		t.Fatal(err)
	}
	if a, err := c.qp.Query(); err != nil || a.State != 6 {
		t.Errorf("our QP after the peer's death: state %d, %v", a.State, err)
	}
	waitFor(t, "the victim's objects to go", func() bool {
		return srv.Stats().Sessions == 1 && srv.Stats().QPs == 1 && srv.CMStats().IDs == 1
	})
	if _, err := id.Destroy(); err != nil {
		t.Fatal(err)
	}
	c.c.Close()
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 && srv.Stats().QPs == 0 })
	cmClean(t, srv)
}

// TestCMIDLimit: a session holds at most limits.cm_ids IDs, the ones made
// for incoming requests included; a request beyond it is rejected.
func TestCMIDLimit(t *testing.T) {
	cfg := rvtd.DefaultConfig()
	cfg.Limits.CMIDs = 2
	srv, err := rvtd.New(cfg, rvtd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	sock := t.TempDir() + "/rvtd.sock"
	if err := srv.Listen(sock); err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	s, err := newCMNode(sock, "rvt0", 2)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newCMNode(sock, "rvt1", 2)
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := listen(s.ch, 1, proto.PSTCP, 2, netip.AddrPortFrom(ip0, 0))
	if err != nil {
		t.Fatal(err)
	}
	extra, err := s.ch.CreateID(2, proto.PSTCP, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ch.CreateID(3, proto.PSTCP, 2); !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("third ID: %v, want ENOMEM", err)
	}
	connect := func() *client.CMID {
		id, err := c.ch.CreateID(4, proto.PSTCP, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := resolve(c.ch, id, ip1, netip.AddrPortFrom(ip0, port)); err != nil {
			t.Fatal(err)
		}
		if err := id.Connect(proto.CMConnParam{QP: c.qp.Handle}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// The listener's session is full: the request is rejected (28).
	id := connect()
	if ev, err := c.ch.GetEvent(10 * time.Second); err != nil || ev.Event != evRejected || ev.Status != 28 {
		t.Errorf("request beyond the limit: event %d status %d, %v", ev.Event, ev.Status, err)
	}
	if _, err := id.Destroy(); err != nil {
		t.Fatal(err)
	}
	// With room again, the request arrives.
	if _, err := extra.Destroy(); err != nil {
		t.Fatal(err)
	}
	id = connect()
	if ev, err := waitEvent(s.ch, evConnectRequest); err != nil {
		t.Error(err)
	} else if _, err := s.c.EventID(ev).Destroy(); err != nil {
		t.Error(err)
	}
	if _, err := waitEvent(c.ch, evRejected); err != nil {
		t.Error(err)
	}
	if _, err := id.Destroy(); err != nil {
		t.Fatal(err)
	}
	s.c.Close()
	c.c.Close()
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 })
	cmClean(t, srv)
}

// TestCMLibrdmacmOrder: the order a C librdmacm uses, with QP numbers
// instead of handles: each side moves its own QP with init_qp_attr and
// modify_qp (the passive side to RTS before accepting), the active side
// gets CONNECT_RESPONSE and sends the RTU with establish. Data flows, so
// the PSNs both sides set agree with the REQ and the REP.
func TestCMLibrdmacmOrder(t *testing.T) {
	srv, sock := startDaemon(t)
	s, err := newCMNode(sock, "rvt0", 2)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newCMNode(sock, "rvt1", 2)
	if err != nil {
		t.Fatal(err)
	}
	lid, port, err := listen(s.ch, 1, proto.PSTCP, 2, netip.AddrPortFrom(ip0, 0))
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.ch.CreateID(2, proto.PSTCP, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := resolve(c.ch, id, ip1, netip.AddrPortFrom(ip0, port)); err != nil {
		t.Fatal(err)
	}
	if err := id.ModifyQP(c.qp, 1); err != nil { // rdma_create_qp: INIT
		t.Fatal(err)
	}
	if err := id.Connect(proto.CMConnParam{QPNum: c.qp.QPN, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev, err := waitEvent(s.ch, evConnectRequest)
	if err != nil {
		t.Fatal(err)
	}
	if ev.QPNum != c.qp.QPN {
		t.Errorf("request from QP %#x, want %#x", ev.QPNum, c.qp.QPN)
	}
	nid := s.c.EventID(ev)
	for st := uint8(1); st <= 3; st++ {
		if err := nid.ModifyQP(s.qp, st); err != nil {
			t.Fatalf("passive QP to %d: %v", st, err)
		}
	}
	if err := s.qp.PostRecv(1, client.SGE{Addr: s.mr.Addr, Length: 4096, LKey: s.mr.LKey}); err != nil {
		t.Fatal(err)
	}
	if err := nid.Accept(proto.CMConnParam{QPNum: s.qp.QPN, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev, err = waitEvent(c.ch, 5) // CONNECT_RESPONSE
	if err != nil {
		t.Fatal(err)
	}
	if ev.QPNum != s.qp.QPN {
		t.Errorf("response from QP %#x, want %#x", ev.QPNum, s.qp.QPN)
	}
	for st := uint8(2); st <= 3; st++ {
		if err := id.ModifyQP(c.qp, st); err != nil {
			t.Fatalf("active QP to %d: %v", st, err)
		}
	}
	if err := id.Establish(); err != nil {
		t.Fatal(err)
	}
	if _, err := waitEvent(c.ch, evEstablished); err != nil {
		t.Fatal(err)
	}
	if _, err := waitEvent(s.ch, evEstablished); err != nil {
		t.Fatal(err)
	}
	copy(c.shm.Mem, "through librdmacm's order")
	if err := c.qp.PostSend(client.SendWR{WRID: 2, Opcode: 2, Flags: 2, SGL: []client.SGE{{Addr: c.mr.Addr, Length: 25, LKey: c.mr.LKey}}}); err != nil {
		t.Fatal(err)
	}
	if wcs, err := c.poll(1); err != nil || wcs[0].Status != 0 {
		t.Fatalf("send: %+v, %v", wcs, err)
	}
	if wcs, err := s.poll(1); err != nil || wcs[0].Status != 0 || string(s.shm.Mem[:25]) != "through librdmacm's order" {
		t.Fatalf("receive: %+v, %v, %q", wcs, err, s.shm.Mem[:25])
	}
	if err := nid.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if _, err := waitEvent(c.ch, evDisconnected); err != nil {
		t.Fatal(err)
	}
	if err := id.Disconnect(); err != nil { // the DREP
		t.Fatal(err)
	}
	if _, err := waitEvent(s.ch, evDisconnected); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*client.CMID{id, nid, lid} {
		if _, err := x.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	s.c.Close()
	c.c.Close()
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 })
	cmClean(t, srv)
}

// TestCMDeviceRemoval: at shutdown, every ID with a device gets
// DEVICE_REMOVAL on its channel.
func TestCMDeviceRemoval(t *testing.T) {
	srv, sock := startDaemon(t) // Shutdown again at cleanup: a no-op
	n, err := newCMNode(sock, "rvt0", 2)
	if err != nil {
		t.Fatal(err)
	}
	lid, _, err := listen(n.ch, 0x77, proto.PSTCP, 2, netip.AddrPortFrom(ip0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.ch.CreateID(1, proto.PSTCP, 2); err != nil { // no device: no event
		t.Fatal(err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ev, err := waitEvent(n.ch, 11)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != lid.Handle || ev.Context != 0x77 {
		t.Errorf("DEVICE_REMOVAL %+v", ev)
	}
	if ev, err := n.ch.GetEvent(time.Second); err == nil {
		t.Errorf("a second event %+v", ev)
	}
	n.c.Close()
}

// TestCMDeviceRemovalOnce: when the agent under an ID goes while the
// daemon runs, the ID gets DEVICE_REMOVAL from the agent; the daemon's
// own at shutdown does not tell it again. A wildcard ID, on every device,
// is not told when one device's agent goes (Linux tells only the IDs
// bound to the removed device), and is told once at shutdown.
func TestCMDeviceRemovalOnce(t *testing.T) {
	srv, sock := startDaemon(t) // Shutdown again at cleanup: a no-op
	n, err := newCMNode(sock, "rvt0", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer n.c.Close()
	lid, _, err := listen(n.ch, 0x77, proto.PSTCP, 2, netip.AddrPortFrom(ip0, 0))
	if err != nil {
		t.Fatal(err)
	}
	wid, _, err := listen(n.ch, 0x88, proto.PSTCP, 2, netip.AddrPortFrom(netip.IPv4Unspecified(), 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := rvtd.CloseCMAgentForTest(srv, "rvt0"); err != nil {
		t.Fatal(err)
	}
	ev, err := waitEvent(n.ch, 11)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != lid.Handle || ev.Context != 0x77 {
		t.Errorf("DEVICE_REMOVAL %+v, want the ID bound to rvt0's address", ev)
	}
	if ev, err := n.ch.GetEvent(200 * time.Millisecond); err == nil {
		t.Errorf("an event %+v after the first DEVICE_REMOVAL", ev)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ev, err = waitEvent(n.ch, 11)
	if err != nil {
		t.Fatal(err)
	}
	if ev.ID != wid.Handle || ev.Context != 0x88 {
		t.Errorf("DEVICE_REMOVAL %+v at shutdown, want the wildcard ID's only", ev)
	}
	if ev, err := n.ch.GetEvent(time.Second); err == nil {
		t.Errorf("a second event %+v", ev)
	}
}

// TestCMManyConnections: 32 connections between two sessions at once,
// all requests issued before any answer; then one session closes with all
// of them established, and the other sees 32 DISCONNECTED.
func TestCMManyConnections(t *testing.T) {
	const n = 32
	srv, sock := startDaemon(t)
	s, err := newCMNode(sock, "rvt0", 2)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newCMNode(sock, "rvt1", 2)
	if err != nil {
		t.Fatal(err)
	}
	_, port, err := listen(s.ch, 1, proto.PSTCP, 2, netip.AddrPortFrom(ip0, 0))
	if err != nil {
		t.Fatal(err)
	}
	capa := proto.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	ids := map[uint32]bool{}
	for i := 0; i < n; i++ {
		q, err := c.dev.CreateQP(c.pd, 2, c.cq, c.cq, capa)
		if err != nil {
			t.Fatal(err)
		}
		id, err := c.ch.CreateID(uint64(i), proto.PSTCP, 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := id.ResolveAddr(ip1, netip.AddrPortFrom(ip0, port), 1000); err != nil {
			t.Fatal(err)
		}
		if _, err := waitEvent(c.ch, evAddrResolved); err != nil {
			t.Fatal(err)
		}
		if err := id.Connect(proto.CMConnParam{QP: q.Handle, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		ids[id.Handle] = true
	}
	for i := 0; i < n; i++ {
		ev, err := waitEvent(s.ch, evConnectRequest)
		if err != nil {
			t.Fatal(err)
		}
		q, err := s.dev.CreateQP(s.pd, 2, s.cq, s.cq, capa)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.c.EventID(ev).Accept(proto.CMConnParam{QP: q.Handle, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[uint32]bool{}
	for i := 0; i < 2*n; i++ {
		ev, err := c.ch.GetEvent(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Event == evEstablished && ids[ev.ID] {
			seen[ev.ID] = true
			if len(seen) == n {
				break
			}
		}
	}
	if len(seen) != n {
		t.Fatalf("%d of %d connections established", len(seen), n)
	}
	if st := srv.CMStats(); st.IDs != 2*n+1 {
		t.Errorf("IDs: %+v, want %d", st, 2*n+1)
	}
	s.c.Close() // all established: each peer gets a DREQ
	disc := map[uint32]bool{}
	for len(disc) < n {
		ev, err := c.ch.GetEvent(10 * time.Second)
		if err != nil {
			t.Fatalf("%d DISCONNECTED: %v", len(disc), err)
		}
		if ev.Event == evDisconnected {
			disc[ev.ID] = true
		}
	}
	c.c.Close()
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 && srv.Stats().QPs == 0 })
	cmClean(t, srv)
}

// TestCMForeignHandles: an ID, channel or QP handle of another session,
// or a QP of another device than the ID's, is EINVAL.
func TestCMForeignHandles(t *testing.T) {
	_, sock := startDaemon(t)
	a, err := newCMNode(sock, "rvt0", 2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newCMNode(sock, "rvt1", 2)
	if err != nil {
		t.Fatal(err)
	}
	lid, _, err := listen(a.ch, 1, proto.PSTCP, 2, netip.AddrPortFrom(ip0, 0))
	if err != nil {
		t.Fatal(err)
	}
	// b names a's listener and a's second channel: handles b has not.
	ch2, err := a.c.CreateEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.EventID(proto.CMEvent{ID: lid.Handle}).Query(); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("query of another session's ID %d: %v", lid.Handle, err)
	}
	if _, err := b.c.Call(proto.OpCMCreateID, ch2.Handle, &proto.CMCreateID{PortSpace: proto.PSTCP, QPType: 2}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("create_id on another session's channel %d: %v", ch2.Handle, err)
	}
	// An ID on rvt0 and a QP of the same session on rvt1.
	d1, err := a.c.OpenDevice("rvt1")
	if err != nil {
		t.Fatal(err)
	}
	pd, err := d1.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d1.CreateCQ(16, 0)
	if err != nil {
		t.Fatal(err)
	}
	q1, err := d1.CreateQP(pd, 2, cq, cq, proto.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.ch.CreateID(2, proto.PSTCP, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := resolve(a.ch, id, ip0, netip.AddrPortFrom(ip1, 5000)); err != nil {
		t.Fatal(err)
	}
	if err := id.Connect(proto.CMConnParam{QP: q1.Handle}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("connect of an rvt0 ID with an rvt1 QP: %v", err)
	}
	if err := id.Connect(proto.CMConnParam{QP: b.qp.Handle + 1000}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("connect with a handle of nothing: %v", err)
	}
	a.c.Close()
	b.c.Close()
}

// cmRequest starts a daemon whose loops do not spin (a WQE posted with no
// doorbell waits for a request that serves it), with an RC cmNode on
// each default device, s listening on rvt0 and c connecting to it; it
// returns them with c's ID and s's CONNECT_REQUEST. byNumber: c names
// its QP by number and moves it itself, as librdmacm does (finish the
// connection with cmActiveByNumber).
func cmRequest(t *testing.T, byNumber bool) (*rvtd.Server, *cmNode, *cmNode, *client.CMID, proto.CMEvent) {
	t.Helper()
	srv, sock := startDaemonWith(t, nil, rvtd.Options{Spin: -1})
	s, err := newCMNode(sock, "rvt0", 2)
	require.NoError(t, err)
	c, err := newCMNode(sock, "rvt1", 2)
	require.NoError(t, err)
	_, port, err := listen(s.ch, 1, proto.PSTCP, 2, netip.AddrPortFrom(ip0, 0))
	require.NoError(t, err)
	id, err := c.ch.CreateID(7, proto.PSTCP, 2)
	require.NoError(t, err)
	require.NoError(t, id.ResolveAddr(ip1, netip.AddrPortFrom(ip0, port), 1000))
	_, err = waitEvent(c.ch, evAddrResolved)
	require.NoError(t, err)
	conn := proto.CMConnParam{QP: c.qp.Handle, ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
	if byNumber {
		require.NoError(t, id.ModifyQP(c.qp, 1)) // rdma_create_qp: INIT
		conn.QP, conn.QPNum = 0, c.qp.QPN
	}
	require.NoError(t, id.Connect(conn))
	ev, err := waitEvent(s.ch, evConnectRequest)
	require.NoError(t, err)
	return srv, s, c, id, ev
}

// cmActiveByNumber is the active side's part, once the peer accepted, of
// a connection cmRequest(t, true) began: RTR and RTS, then the RTU.
func cmActiveByNumber(t *testing.T, c *cmNode, id *client.CMID) {
	t.Helper()
	_, err := waitEvent(c.ch, 5) // CONNECT_RESPONSE
	require.NoError(t, err)
	for st := uint8(2); st <= 3; st++ {
		require.NoError(t, id.ModifyQP(c.qp, st))
	}
	require.NoError(t, id.Establish())
}

// TestCMPostedBeforeDisconnect: a SEND posted (not rung) just before
// rdma_disconnect is sent before the QP goes to ERR, as over rxe: the
// peer gets the message, then DISCONNECTED. The active side names its QP
// by handle, or by number as librdmacm does.
func TestCMPostedBeforeDisconnect(t *testing.T) {
	for _, byNumber := range []bool{false, true} {
		t.Run(map[bool]string{false: "handle", true: "number"}[byNumber], func(t *testing.T) {
			testPostedBeforeDisconnect(t, byNumber)
		})
	}
}

func testPostedBeforeDisconnect(t *testing.T, byNumber bool) {
	srv, s, c, id, ev := cmRequest(t, byNumber)
	require.NoError(t, s.qp.PostRecv(77, client.SGE{Addr: s.mr.Addr, Length: 4096, LKey: s.mr.LKey}))
	require.NoError(t, s.c.EventID(ev).Accept(proto.CMConnParam{QP: s.qp.Handle, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}))
	if byNumber {
		cmActiveByNumber(t, c, id)
	}
	_, err := waitEvent(c.ch, evEstablished)
	require.NoError(t, err)

	clearNeedWakeup(c.qp.SendRingHeader()) // the client will not ring
	copy(c.shm.Mem, "the last word")
	require.NoError(t, c.qp.PostSend(client.SendWR{WRID: 5, Opcode: 2, Flags: 2,
		SGL: []client.SGE{{Addr: c.mr.Addr, Length: 13, LKey: c.mr.LKey}}}))
	require.NoError(t, id.Disconnect())
	wcs, err := s.poll(1)
	require.NoError(t, err, "the server got nothing")
	require.Zero(t, wcs[0].Status, "%+v", wcs[0])
	require.Equal(t, "the last word", string(s.shm.Mem[:wcs[0].ByteLen]))
	for {
		ev, err := s.ch.GetEvent(10 * time.Second)
		require.NoError(t, err)
		if ev.Event == evDisconnected {
			break
		}
	}
	s.c.Close()
	c.c.Close()
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 })
}

// TestCMDisconnectedAfterCompletions: what completed before the peer's
// DREQ is in the CQ ring when DISCONNECTED is read, as over a NIC, whose
// CQEs are written before the ACK that lets the peer disconnect; the data
// path's loops, which otherwise carry completions to the rings, are held
// back here. rsockets counts on it: it polls its CQ once at DISCONNECTED
// and calls what it did not find there lost. The receiving side names its
// QP by handle, or by number as librdmacm does (its QPs are in its
// libibverbs session).
func TestCMDisconnectedAfterCompletions(t *testing.T) {
	for _, byNumber := range []bool{false, true} {
		t.Run(map[bool]string{false: "handle", true: "number"}[byNumber], func(t *testing.T) {
			testDisconnectedAfterCompletions(t, byNumber)
		})
	}
}

func testDisconnectedAfterCompletions(t *testing.T, byNumber bool) {
	srv, s, c, id, ev := cmRequest(t, false)
	nid := s.c.EventID(ev)
	accept := proto.CMConnParam{QP: s.qp.Handle, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}
	if byNumber {
		for st := uint8(1); st <= 3; st++ {
			require.NoError(t, nid.ModifyQP(s.qp, st))
		}
		accept.QP, accept.QPNum = 0, s.qp.QPN
	}
	require.NoError(t, s.qp.PostRecv(77, client.SGE{Addr: s.mr.Addr, Length: 4096, LKey: s.mr.LKey}))
	require.NoError(t, nid.Accept(accept))
	_, err := waitEvent(c.ch, evEstablished)
	require.NoError(t, err)
	_, err = waitEvent(s.ch, evEstablished)
	require.NoError(t, err)

	release := srv.HoldDrainsForTest("rvt0")
	defer release()
	clearNeedWakeup(c.qp.SendRingHeader()) // carried by the disconnect
	copy(c.shm.Mem, "before the DREQ")
	require.NoError(t, c.qp.PostSend(client.SendWR{WRID: 5, Opcode: 2, Flags: 2,
		SGL: []client.SGE{{Addr: c.mr.Addr, Length: 15, LKey: c.mr.LKey}}}))
	require.NoError(t, id.Disconnect())
	_, err = waitEvent(s.ch, evDisconnected)
	require.NoError(t, err)
	wcs := make([]client.WC, 4)
	n, err := s.cq.Poll(wcs)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the receive's completion is not in the ring at DISCONNECTED")
	require.Equal(t, uint64(77), wcs[0].WRID)
	require.Zero(t, wcs[0].Status, "%+v", wcs[0])
	require.Equal(t, "before the DREQ", string(s.shm.Mem[:wcs[0].ByteLen]))
	release()
	s.c.Close()
	c.c.Close()
	waitFor(t, "sessions to end", func() bool { return srv.Stats().Sessions == 0 })
}
