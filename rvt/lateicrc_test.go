package rvt

import (
	"bytes"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/faults"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/transport"
)

// TestFabricCorrupt runs RC WRITEs between two devices on the fabric with
// one side's frames corrupted at random, on worker pools (where the fabric
// delivers inside the sender's Send and the receiving QP's task checks
// the ICRC: transport's lateICRC) and inline: every corrupted frame is
// dropped and counted as a bad ICRC, and go-back-N still puts every byte
// in place. Most corrupted frames are a WRITE's middle packets, whose
// responder copies the payload out as it checks the ICRC (placeFused):
// what a bad one wrote lies in its WRITE's range and is written again,
// and nothing outside the destination (guards on both sides) changes.
//
// SENDs likewise, into receive WQEs of one SGE or of two split inside a
// packet (whose middle packet there is checked whole first).
func TestFabricCorrupt(t *testing.T) {
	for _, workers := range []int{2, 0} {
		for _, op := range []qp.Opcode{qp.OpRDMAWrite, qp.OpSend} {
			name := map[int]string{2: "workers", 0: "inline"}[workers] + "/" + map[qp.Opcode]string{qp.OpRDMAWrite: "write", qp.OpSend: "send"}[op]
			t.Run(name, func(t *testing.T) { testFabricCorrupt(t, workers, op) })
		}
	}
}

func testFabricCorrupt(t *testing.T, workers int, op qp.Opcode) {
	fab := fabric.New(clock.Real(), 1)
	open := func(i byte, corrupt float64) *node {
		o := fabricOptions(fab, i)
		if corrupt > 0 {
			fl, err := faults.New(o.Link, clock.Real(), 7, faults.Profile{Corrupt: corrupt})
			require.NoError(t, err)
			o.Link = fl
		}
		o.Workers = workers
		return newNode(t, o)
	}
	na, nb := open(1, 0.05), open(2, 0.05)
	// Odd SENDs into two SGEs split inside the third packet.
	transferIntact(t, na, nb, op, 64<<10, 16, 10000)
	require.NotZero(t, nb.d.Counters()[dropBadICRC], "%v", nb.d.Counters())
}

var dropBadICRC = "drop_" + transport.DropBadICRC.Name()

// transferIntact connects an RC QP of na to one of nb (MTU 4096, a 1 ms
// timeout: a corrupted tail costs little), moves n messages of size bytes
// from a to b with op (WRITE or SEND), and checks that all complete, that
// the destination holds the source, and that the 4 KiB on each side of it
// did not change. A SEND's receive WQE is split in two SGEs split bytes
// in, for the odd messages, if split is not 0.
func transferIntact(t *testing.T, na, nb *node, op qp.Opcode, size, n, split int) {
	t.Helper()
	const guard = 4096
	a, b := na.qp(t, qp.RC), nb.qp(t, qp.RC)
	at := defaultAttrs()
	at.mtu = qp.MTU4096
	at.timeout = 8
	connect(t, a, na.d, b, nb.d, at)
	src, dst := na.mr(t, size*n), nb.mr(t, guard+size*n+guard)
	pat := make([]byte, size*n)
	for i := range pat {
		pat[i] = byte(i*31 + i>>12)
	}
	src.WriteAt(pat, src.IOVA)
	fill := bytes.Repeat([]byte{0xA5}, guard+size*n+guard)
	dst.WriteAt(fill, dst.IOVA)
	for i := range n {
		off := uint64(i * size)
		if op == qp.OpSend {
			at := dst.IOVA + guard + off
			sgl := []SGE{{Addr: at, Length: uint32(size), Lkey: dst.Lkey}}
			if split != 0 && i%2 == 1 {
				sgl = []SGE{{Addr: at, Length: uint32(split), Lkey: dst.Lkey},
					{Addr: at + uint64(split), Length: uint32(size - split), Lkey: dst.Lkey}}
			}
			require.NoError(t, b.PostRecv(RecvWR{WRID: uint64(i), SGL: sgl}))
		}
		require.NoError(t, a.PostSend(SendWR{WRID: uint64(i), Opcode: op, Flags: qp.Signaled,
			SGL:        []SGE{{Addr: src.IOVA + off, Length: uint32(size), Lkey: src.Lkey}},
			RemoteAddr: dst.IOVA + guard + off, Rkey: dst.Rkey}))
	}
	for _, wc := range poll(t, na.cq, n, nil) {
		require.Zero(t, wc.Status, "%+v", wc)
	}
	if op == qp.OpSend {
		for i, wc := range poll(t, nb.cq, n, nil) {
			require.Zero(t, wc.Status, "%+v", wc)
			require.EqualValues(t, i, wc.WRID)
			require.EqualValues(t, size, wc.ByteLen)
		}
	}
	got := make([]byte, guard+size*n+guard)
	dst.ReadAt(got, dst.IOVA)
	require.True(t, bytes.Equal(pat, got[guard:guard+size*n]), "the destination differs from the source")
	require.True(t, bytes.Equal(fill[:guard], got[:guard]), "written before the destination")
	require.True(t, bytes.Equal(fill[:guard], got[guard+size*n:]), "written after the destination")
}

// corruptFirst is a link that flips a payload bit in the first copy of
// every frame whose RC opcode is in ops (IPv4 frames: the BTH at byte 42),
// and passes everything else, resends included, untouched.
type corruptFirst struct {
	netdev.Link
	ops  map[transport.Opcode]bool
	mu   sync.Mutex
	seen map[uint32]bool // PSNs corrupted once
	hits int
}

func (l *corruptFirst) Send(frame []byte) error {
	const bth = netdev.EthernetHeaderLen + netdev.IPv4HeaderLen + netdev.UDPHeaderLen
	if len(frame) > bth+transport.BTHLen+64 && l.ops[transport.Opcode(frame[bth])] {
		psn := transport.BTH(frame[bth:]).PSN()
		l.mu.Lock()
		first := !l.seen[uint32(psn)]
		if first {
			l.seen[uint32(psn)] = true
			l.hits++
		}
		l.mu.Unlock()
		if first {
			cp := append([]byte(nil), frame...)
			cp[len(cp)-transport.ICRCLen-33] ^= 0x10 // in the payload
			return l.Link.Send(cp)
		}
	}
	return l.Link.Send(frame)
}

// TestFabricCorruptLastAndMiddle corrupts the first copy of every middle
// and last packet of RC WRITEs and SENDs (the packets placeFused takes):
// each is dropped as a bad ICRC, nothing completes with its bytes, and the
// resent packets put every byte in place, with nothing written outside
// the destination.
func TestFabricCorruptLastAndMiddle(t *testing.T) {
	for _, op := range []qp.Opcode{qp.OpRDMAWrite, qp.OpSend} {
		t.Run(map[qp.Opcode]string{qp.OpRDMAWrite: "write", qp.OpSend: "send"}[op], func(t *testing.T) {
			fab := fabric.New(clock.Real(), 1)
			oa, ob := fabricOptions(fab, 1), fabricOptions(fab, 2)
			cl := &corruptFirst{Link: oa.Link, seen: map[uint32]bool{}, ops: map[transport.Opcode]bool{
				transport.RCWriteMiddle: true, transport.RCWriteLast: true,
				transport.RCSendMiddle: true, transport.RCSendLast: true}}
			oa.Link = cl
			na, nb := newNode(t, oa), newNode(t, ob)
			const n = 4
			transferIntact(t, na, nb, op, 3*4096+1024, n, 0) // two middles and a last
			cl.mu.Lock()
			hits := cl.hits
			cl.mu.Unlock()
			require.Equal(t, 3*n, hits, "two middles and a last a message")
			require.EqualValues(t, hits, nb.d.Counters()[dropBadICRC], "%v", nb.d.Counters())
		})
	}
}

// A frame whose ICRC is left to the responder (a WRITE's middle packet)
// and proves bad is dropped before it can do anything, including raise
// COMM_EST on a QP in RTR: it is not a packet from the peer.
func TestBadFusedICRCBeforeCommEst(t *testing.T) {
	n, _ := manualNode(t)
	ev := record(n.d)
	a, b := n.qp(t, qp.RC), n.qp(t, qp.RC)
	at := defaultAttrs()
	require.NoError(t, b.Modify(&QPAttr{State: qp.Init, Port: 1, AccessFlags: at.access},
		qp.RequiredAttrs(qp.RC, qp.Reset, qp.Init)))
	gid, err := n.d.QueryGID(1, 1)
	require.NoError(t, err)
	require.NoError(t, b.Modify(&QPAttr{State: qp.RTR, PathMTU: qp.MTU1024, DestQPN: a.Num(), RQPSN: 0x123456,
		MaxDestRdAtomic: 16, MinRNRTimer: at.minRNR, AV: AddressVector{DGID: gid, SGIDIndex: 1, HopLimit: 64, Port: 1}},
		qp.RequiredAttrs(qp.RC, qp.Init, qp.RTR)))

	// From the peer's address (the device's own GID 1), to b.
	ip := netdev.GID(gid).IP()
	ep := netdev.Endpoint{IP: ip, Port: 0xC000}
	to := netdev.Endpoint{IP: ip, Port: transport.RoCEv2Port}
	const payload = 1024
	hl := netdev.HeaderLen(false)
	ib := transport.BTHLen + payload + transport.ICRCLen
	frame := make([]byte, hl+ib)
	transport.BTH(frame[hl:]).Init(transport.RCWriteMiddle, transport.DefaultPKey, b.Num(), 0x123456)
	require.Equal(t, hl, netdev.EncodeRoCEv2(frame, ep, to, 64, 0, ib))
	require.NoError(t, transport.PutICRC(frame[netdev.EthernetHeaderLen:]))
	frame[len(frame)-1] ^= 1
	n.d.Engine().ReceiveFrame(frame)

	require.Equal(t, uint64(1), n.d.Counters()[dropBadICRC])
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, e := range ev.evs {
		require.NotEqual(t, transport.EventCommEst, e.Type, "COMM_EST from a corrupted packet")
	}
}
