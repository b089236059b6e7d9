package rvt

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/transport"
)

// fuzzOps are the request opcodes the fuzzer builds from valid templates
// (RC and, to check the type check, some UC and UD ones).
var fuzzOps = []transport.Opcode{
	0x00, 0x01, 0x02, 0x03, 0x04, 0x05, // SEND first/middle/last/last imm/only/only imm
	0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, // WRITE first/middle/last/last imm/only/only imm
	0x0C, 0x13, 0x14, // READ request, CMP_SWP, FETCH_ADD
	0x16, 0x17, // SEND last/only with invalidate
	0x10, 0x11, // ACK, atomic ACK (responses: for the completer)
	0x24, 0x64, // UC SEND only, UD SEND only
}

// FuzzResponder feeds a device's receive path sequences of packets built
// from valid header templates with fuzzed opcodes, PSNs, lengths, keys and
// addresses (and bytes flipped after the headers were written, under a
// valid ICRC, or the ICRC made bad) for an RC QP in RTS. Invariants: no
// panic; memory outside the registered region never changes; completions
// are well formed; the QP is in RTS or ERR; a packet with a bad ICRC is
// counted as dropped and moves no PSN and completes nothing.
func FuzzResponder(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{4, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{10, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 0, 1, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{14, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 13, 0, 1, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{6, 0, 0, 0, 4, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 7, 0, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		8, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 64*16 {
			return
		}
		fuzzResponder(t, in)
	})
}

const (
	fuzzGuard  = 4096
	fuzzMRSize = 16384
	fuzzPeerQP = 0x77
	fuzzPSN    = 0x100
)

func fuzzResponder(t *testing.T, in []byte) {
	clk := clock.NewManual()
	fab := fabric.New(clk, 1)
	macA := netdev.MAC{0x02, 0, 0, 0, 0, 1}
	macB := netdev.MAC{0x02, 0, 0, 0, 0, 2}
	ipA := netip.AddrFrom4([4]byte{198, 18, 0, 1})
	ipB := netip.AddrFrom4([4]byte{198, 18, 0, 2})
	fab.AddAddr(ipA, macA)
	fab.AddAddr(ipB, macB)
	port := fab.NewPort(macA, 4096+200)
	peer := fab.NewPort(macB, 4096+200) // the fuzzer's side: drops what it gets
	defer peer.Close()
	d, err := Open(Options{Inline: true, Clock: clk, Link: port, MAC: macA,
		Addrs: []netip.Addr{netip.MustParseAddr("fe80::1"), ipA}, Resolve: fab.Resolve})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, _ := d.AllocPD()
	c, _ := d.CreateCQ(4096, nil)
	big := make([]byte, fuzzGuard+fuzzMRSize+fuzzGuard)
	simFill(big, 42)
	orig := append([]byte(nil), big...)
	mr, err := pd.Reg(big[fuzzGuard:fuzzGuard+fuzzMRSize], simAccess)
	if err != nil {
		t.Fatal(err)
	}
	q, err := pd.CreateQP(QPInitAttr{Type: qp.RC, SendCQ: c, RecvCQ: c,
		Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2}})
	if err != nil {
		t.Fatal(err)
	}
	var gidB GID
	copy(gidB[:], netdev.GIDFromIP(ipB).IP().AsSlice())
	gidB = GID(netdev.GIDFromIP(ipB))
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(q.Modify(&QPAttr{State: qp.Init, Port: 1, AccessFlags: simAccess &^ 1},
		qp.AttrState|qp.AttrPkeyIndex|qp.AttrPort|qp.AttrAccessFlags))
	must(q.Modify(&QPAttr{State: qp.RTR, PathMTU: qp.MTU1024, DestQPN: fuzzPeerQP, RQPSN: fuzzPSN,
		MaxDestRdAtomic: 4, MinRNRTimer: 1, AV: AddressVector{DGID: gidB, SGIDIndex: 1, HopLimit: 64, Port: 1}},
		qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer))
	must(q.Modify(&QPAttr{State: qp.RTS, SQPSN: 0x200, Timeout: 10, RetryCnt: 1, RNRRetry: 1, MaxRdAtomic: 4},
		qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxQPRdAtomic))
	// Four receive WQEs of 2 KiB each, in two SGEs.
	recvLen := map[uint64]uint32{}
	for i := range 4 {
		base := mr.IOVA + uint64(8192+i*2048)
		must(q.PostRecv(RecvWR{WRID: uint64(100 + i), SGL: []SGE{
			{Addr: base, Length: 1000, Lkey: mr.Lkey}, {Addr: base + 1024, Length: 1024, Lkey: mr.Lkey}}}))
		recvLen[uint64(100+i)] = 2024
	}

	frame := make([]byte, 14+40+8+transport.BTHLen+64+4096+8)
	src := netdev.Endpoint{MAC: macB, IP: ipB, Port: 0xC123}
	dst := netdev.Endpoint{MAC: macA, IP: ipA, Port: transport.RoCEv2Port}
	payload := make([]byte, 4096)
	simFill(payload, 7)
	var wcs [64]WC
	for len(in) >= 16 {
		rec := in[:16]
		in = in[16:]
		op := fuzzOps[int(rec[0])%len(fuzzOps)]
		if rec[1]&0x80 != 0 {
			op = transport.Opcode(rec[0])
		}
		epsn := q.Conn().Snapshot().ExpectedPSN
		psn := epsn.Add(uint32(int32(int8(rec[2]))))
		n := int(binary.LittleEndian.Uint16(rec[3:])) & 0x1FFF
		n = min(n, 4096)
		info := op.Info()
		hl := info.HdrLen
		if hl < transport.BTHLen {
			hl = transport.BTHLen
		}
		if rec[1]&0x40 != 0 {
			n = int(rec[4]) // short payloads
		}
		pad := (4 - n%4) % 4
		ibLen := hl + n + pad
		ipHdr := netdev.HeaderLen(false)
		pkt := frame[ipHdr : ipHdr+ibLen+transport.ICRCLen]
		clear(pkt[:hl])
		bth := transport.BTH(pkt)
		bth.Init(op, transport.DefaultPKey, q.Num(), psn)
		bth.SetPadCount(uint8(pad))
		bth.SetAckReq(rec[1]&1 != 0)
		rkey := mr.Rkey
		if rec[1]&2 != 0 {
			rkey ^= uint32(rec[5]) << (8 * (rec[6] % 4))
		}
		va := mr.IOVA + uint64(int64(int16(binary.LittleEndian.Uint16(rec[7:]))))
		if rec[1]&4 == 0 {
			va &^= 7
		}
		dmaLen := uint32(binary.LittleEndian.Uint16(rec[9:]))
		if rec[1]&8 != 0 {
			dmaLen = uint32(n)
		}
		if off := info.Offset(transport.HdrRETH); off != 0 && off+16 <= hl {
			r := transport.RETH(pkt[off:])
			r.SetVA(va)
			r.SetRKey(rkey)
			r.SetDMALen(dmaLen)
		}
		if off := info.Offset(transport.HdrAtomicETH); off != 0 && off+28 <= hl {
			a := transport.AtomicETH(pkt[off:])
			a.SetVA(va)
			a.SetRKey(rkey)
			a.SetSwapAdd(uint64(rec[11]))
			a.SetCompare(uint64(rec[12]))
		}
		if off := info.Offset(transport.HdrIETH); off != 0 {
			transport.IETH(pkt[off:]).SetRKey(rkey)
		}
		copy(pkt[hl:hl+n], payload)
		clear(pkt[hl+n : hl+n+pad])
		if rec[13] != 0 {
			// Flip a header or payload byte under a valid ICRC.
			pkt[int(rec[14])%(hl+n+pad)] ^= rec[13]
		}
		whole := frame[:ipHdr+ibLen+transport.ICRCLen]
		if netdev.EncodeRoCEv2(whole, src, dst, 64, 0, ibLen+transport.ICRCLen) == 0 {
			continue
		}
		if err := transport.PutICRC(whole[netdev.EthernetHeaderLen:]); err != nil {
			continue
		}
		badICRC := rec[15]&2 != 0
		if badICRC {
			// A bad ICRC (a WRITE's middle packet's is checked as its
			// payload is placed): dropped, and nothing changes.
			whole[len(whole)-1-int(rec[14]%4)] ^= 1 << (rec[13] % 8)
		}
		var drops uint64
		if badICRC {
			drops = d.Counters()[dropBadICRC]
		}
		before := q.Conn().Snapshot().ExpectedPSN
		d.Engine().ReceiveFrame(append([]byte(nil), whole...))
		if badICRC {
			if got := q.Conn().Snapshot().ExpectedPSN; got != before {
				t.Fatalf("%v with a bad ICRC moved the expected PSN from %#x to %#x", op, uint32(before), uint32(got))
			}
			if got := d.Counters()[dropBadICRC]; got != drops+1 {
				t.Fatalf("%v with a bad ICRC: %d drops counted, want %d", op, got-drops, 1)
			}
			if k := c.Poll(wcs[:]); k != 0 {
				t.Fatalf("%v with a bad ICRC completed %+v", op, wcs[:k])
			}
		}
		if rec[15]&1 != 0 {
			clk.Advance(1 << (rec[15] >> 4) * 1000)
		}

		// Invariants.
		if !bytes.Equal(big[:fuzzGuard], orig[:fuzzGuard]) || !bytes.Equal(big[fuzzGuard+fuzzMRSize:], orig[fuzzGuard+fuzzMRSize:]) {
			t.Fatalf("memory outside the registered region changed after %v psn %#x len %d", op, uint32(psn), n)
		}
		if st := q.State(); st != qp.RTS && st != qp.Err {
			t.Fatalf("QP in %v", st)
		}
		for {
			k := c.Poll(wcs[:])
			for _, wc := range wcs[:k] {
				if wc.QPNum != q.Num() {
					t.Fatalf("completion for QP %#x: %+v", wc.QPNum, wc)
				}
				if wc.Opcode >= cq.Recv {
					l, ok := recvLen[wc.WRID]
					if !ok {
						t.Fatalf("receive completion for a WR never posted (or completed twice): %+v", wc)
					}
					delete(recvLen, wc.WRID)
					if wc.Status == cq.Success && wc.Opcode == cq.Recv && wc.ByteLen > l {
						t.Fatalf("receive completion longer than its WQE (%d): %+v", l, wc)
					}
				} else {
					t.Fatalf("send completion with no send posted: %+v", wc)
				}
			}
			if k < len(wcs) {
				break
			}
		}
	}
}
