//go:build linux

package xdp

// The XDP steering program of the AF_XDP link, written with cilium/ebpf's
// asm package so that no C compiler is needed.
//
// It parses Ethernet (at most one 802.1Q tag), then IPv4 (any IHL from 5 to
// 15, not a fragment) or IPv6 (next header UDP directly: no extension
// headers), then UDP; a datagram to port 4791 (RoCEv2), unicast or
// multicast, is redirected with bpf_redirect_map into the XSKMAP entry of
// the packet's receive queue (ctx->rx_queue_index), with XDP_PASS as the
// fallback so that a queue without a bound socket hands the packet to the
// kernel. Everything else is passed: ARP, ICMP, TCP, other UDP, fragments,
// truncated and malformed frames. Each outcome bumps one counter in a
// single-entry array map whose value is an array of uint64 (direct value
// access, no helper call), so tests and Stats can see which path a frame
// took even when the redirect falls back to XDP_PASS.
//
// The program is loaded with BPF_F_XDP_HAS_FRAGS: it only reads the headers,
// which are in the linear part, so it is safe on multi-buffer frames, and
// that lets it run on interfaces whose MTU exceeds a page (veth refuses
// non-frags programs then) and lets the socket use XDP_USE_SG.

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/netdev"
)

// XDP verdicts (enum xdp_action).
const (
	xdpAborted  = 0
	xdpDrop     = 1
	xdpPass     = 2
	xdpTX       = 3
	xdpRedirect = 4
)

// xdpCounter indexes the program's counters.
type xdpCounter int

// The program's counters, one per outcome.
const (
	xdpCntNotIP      xdpCounter = iota // ethertype is neither IPv4 nor IPv6 (ARP, LLDP, ...)
	xdpCntNotUDP                       // IP but not UDP (ICMP, TCP, IPv6 extension headers)
	xdpCntOtherPort                    // UDP to a port other than 4791
	xdpCntFragment                     // an IPv4 fragment or an IPv6 fragment header
	xdpCntTruncated                    // a header runs past the end of the frame
	xdpCntMalformed                    // bad IP version or IPv4 IHL
	xdpCntRedirected                   // RoCEv2, redirected into the XSK
	xdpCntNoSocket                     // RoCEv2, but no XSK on that queue: passed
	xdpNumCounters
)

var xdpCounterNames = [xdpNumCounters]string{
	xdpCntNotIP:      "pass_not_ip",
	xdpCntNotUDP:     "pass_not_udp",
	xdpCntOtherPort:  "pass_other_port",
	xdpCntFragment:   "pass_fragment",
	xdpCntTruncated:  "pass_truncated",
	xdpCntMalformed:  "pass_malformed",
	xdpCntRedirected: "redirect",
	xdpCntNoSocket:   "pass_no_socket",
}

func (c xdpCounter) String() string {
	if c >= 0 && c < xdpNumCounters {
		return xdpCounterNames[c]
	}
	return fmt.Sprintf("xdpCounter(%d)", int(c))
}

// xdpMaxQueues is the size of the XSKMAP: receive queues at or above it
// have no entry, and their RoCEv2 packets go to the kernel.
const xdpMaxQueues = 256

// xdp_md field offsets.
const (
	xdpMdData         = 0
	xdpMdDataEnd      = 4
	xdpMdRxQueueIndex = 16
)

// xdpObjects are the loaded program and its maps.
type xdpObjects struct {
	prog     *ebpf.Program
	xsks     *ebpf.Map // XSKMAP: rx queue index -> socket
	counters *ebpf.Map // ARRAY, 1 entry of [xdpNumCounters]uint64
}

// loadXDPObjects creates the maps and loads the program.
func loadXDPObjects() (*xdpObjects, error) {
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "sv_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: xdpMaxQueues,
	})
	if err != nil {
		return nil, fmt.Errorf("create xskmap: %w", err)
	}
	counters, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "sv_counters", Type: ebpf.Array, KeySize: 4, ValueSize: 8 * uint32(xdpNumCounters), MaxEntries: 1,
	})
	if err != nil {
		xsks.Close()
		return nil, fmt.Errorf("create counter map: %w", err)
	}
	insns, err := xdpInstructions(xsks, counters)
	if err == nil {
		var prog *ebpf.Program
		prog, err = ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
			Name: "sv_roce_steer", Type: ebpf.XDP, License: "Dual MIT/GPL",
			Flags: unix.BPF_F_XDP_HAS_FRAGS, Instructions: insns,
		}, ebpf.ProgramOptions{LogSizeStart: 1 << 16})
		if err == nil {
			return &xdpObjects{prog: prog, xsks: xsks, counters: counters}, nil
		}
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			err = fmt.Errorf("%w\n%+v", err, ve)
		}
	}
	xsks.Close()
	counters.Close()
	return nil, fmt.Errorf("load xdp program: %w", err)
}

// Close releases the program and maps (an attached program stays alive
// until its bpf_link goes).
func (o *xdpObjects) Close() error {
	return errors.Join(o.prog.Close(), o.xsks.Close(), o.counters.Close())
}

// readCounters returns the program's counters.
func (o *xdpObjects) readCounters() ([xdpNumCounters]uint64, error) {
	var v [xdpNumCounters]uint64
	err := o.counters.Lookup(uint32(0), &v)
	return v, err
}

// Labels of the program.
const (
	lblVLANDone  = "vlan_done"
	lblIPv4      = "ipv4"
	lblIPv6      = "ipv6"
	lblUDP       = "udp"
	lblNotIP     = "not_ip"
	lblNotUDP    = "not_udp"
	lblOtherPort = "other_port"
	lblFragment  = "fragment"
	lblTruncated = "truncated"
	lblMalformed = "malformed"
	lblNoSocket  = "no_socket"
)

// xdpInstructions assembles the program. Registers: R6 ctx, R2 data, R3
// data_end, R7 the L3 offset, R8 a cursor (packet pointer) at the current
// header, R4/R5 scratch. Every load from the packet is preceded by a check
// that cursor+len <= data_end, which is what the verifier needs.
func xdpInstructions(xsks, counters *ebpf.Map) (asm.Instructions, error) {
	var assocErr error
	count := func(c xdpCounter) asm.Instructions {
		ld := asm.LoadMapValue(asm.R1, 0, uint32(c)*8)
		if err := ld.AssociateMap(counters); err != nil {
			assocErr = err
		}
		return asm.Instructions{
			ld,
			asm.Mov.Imm(asm.R2, 1),
			asm.AddAtomic.Mem(asm.R1, asm.R2, asm.DWord, 0),
		}
	}
	// exit counts c and returns verdict.
	exit := func(label string, c xdpCounter, verdict int32) asm.Instructions {
		out := count(c)
		out[0] = out[0].WithSymbol(label)
		return append(out, asm.Mov.Imm(asm.R0, verdict), asm.Return())
	}
	// need jumps to truncated unless R8+n <= data_end.
	need := func(n int32) asm.Instructions {
		return asm.Instructions{
			asm.Mov.Reg(asm.R4, asm.R8),
			asm.Add.Imm(asm.R4, n),
			asm.JGT.Reg(asm.R4, asm.R3, lblTruncated),
		}
	}
	var p asm.Instructions
	add := func(is ...asm.Instruction) { p = append(p, is...) }

	// Ethernet.
	add(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, xdpMdData, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, xdpMdDataEnd, asm.Word),
		asm.Mov.Reg(asm.R8, asm.R2),
	)
	add(need(netdev.EthernetHeaderLen)...)
	add(
		asm.LoadMem(asm.R5, asm.R8, netdev.EthTypeOff, asm.Half),
		asm.HostTo(asm.BE, asm.R5, asm.Half),
		asm.Mov.Imm(asm.R7, netdev.EthernetHeaderLen),
		asm.JNE.Imm(asm.R5, netdev.EtherTypeVLAN, lblVLANDone),
	)
	add(need(netdev.EthernetHeaderLen + netdev.VLANTagLen)...)
	add(
		asm.LoadMem(asm.R5, asm.R8, netdev.EthernetHeaderLen+netdev.VLANTypeOff, asm.Half),
		asm.HostTo(asm.BE, asm.R5, asm.Half),
		asm.Mov.Imm(asm.R7, netdev.EthernetHeaderLen+netdev.VLANTagLen),

		asm.Mov.Reg(asm.R8, asm.R2).WithSymbol(lblVLANDone),
		asm.Add.Reg(asm.R8, asm.R7),
		asm.JEq.Imm(asm.R5, netdev.EtherTypeIPv4, lblIPv4),
		asm.JEq.Imm(asm.R5, netdev.EtherTypeIPv6, lblIPv6),
		asm.Ja.Label(lblNotIP),
	)

	// IPv4: version 4, IHL >= 5, no MF and no fragment offset, protocol UDP.
	ipv4 := need(netdev.IPv4HeaderLen)
	ipv4[0] = ipv4[0].WithSymbol(lblIPv4)
	add(ipv4...)
	add(
		asm.LoadMem(asm.R4, asm.R8, netdev.IPv4VersIHLOff, asm.Byte),
		asm.Mov.Reg(asm.R5, asm.R4),
		asm.RSh.Imm(asm.R5, 4),
		asm.JNE.Imm(asm.R5, 4, lblMalformed),
		asm.And.Imm(asm.R4, 0x0f),
		asm.JLT.Imm(asm.R4, 5, lblMalformed),
		asm.LSh.Imm(asm.R4, 2),
		asm.LoadMem(asm.R5, asm.R8, netdev.IPv4FlagsFragOff, asm.Half),
		asm.HostTo(asm.BE, asm.R5, asm.Half),
		asm.And.Imm(asm.R5, 0x3fff), // MF and the offset; DF is allowed
		asm.JNE.Imm(asm.R5, 0, lblFragment),
		asm.LoadMem(asm.R5, asm.R8, netdev.IPv4ProtocolOff, asm.Byte),
		asm.JNE.Imm(asm.R5, netdev.ProtocolUDP, lblNotUDP),
		asm.Add.Reg(asm.R8, asm.R4), // R4 is in [20, 60]
		asm.Ja.Label(lblUDP),
	)

	// IPv6: version 6, next header UDP.
	ipv6 := need(netdev.IPv6HeaderLen)
	ipv6[0] = ipv6[0].WithSymbol(lblIPv6)
	add(ipv6...)
	add(
		asm.LoadMem(asm.R4, asm.R8, netdev.IPv6VersTCFlowOff, asm.Byte),
		asm.RSh.Imm(asm.R4, 4),
		asm.JNE.Imm(asm.R4, 6, lblMalformed),
		asm.LoadMem(asm.R5, asm.R8, netdev.IPv6NextHeaderOff, asm.Byte),
		asm.JEq.Imm(asm.R5, netdev.ProtocolIPv6Fragment, lblFragment),
		asm.JNE.Imm(asm.R5, netdev.ProtocolUDP, lblNotUDP),
		asm.Add.Imm(asm.R8, netdev.IPv6HeaderLen),
	)

	// UDP: destination port 4791.
	udp := need(netdev.UDPHeaderLen)
	udp[0] = udp[0].WithSymbol(lblUDP)
	add(udp...)
	add(
		asm.LoadMem(asm.R5, asm.R8, netdev.UDPDstPortOff, asm.Half),
		asm.HostTo(asm.BE, asm.R5, asm.Half),
		asm.JNE.Imm(asm.R5, netdev.RoCEv2Port, lblOtherPort),
	)

	// Redirect into the queue's socket, falling back to XDP_PASS.
	ldMap := asm.LoadMapPtr(asm.R1, 0)
	if err := ldMap.AssociateMap(xsks); err != nil {
		return nil, err
	}
	add(
		asm.LoadMem(asm.R2, asm.R6, xdpMdRxQueueIndex, asm.Word),
		ldMap,
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.JNE.Imm(asm.R7, xdpRedirect, lblNoSocket),
	)
	add(count(xdpCntRedirected)...)
	add(asm.Mov.Reg(asm.R0, asm.R7), asm.Return())
	ns := count(xdpCntNoSocket)
	ns[0] = ns[0].WithSymbol(lblNoSocket)
	add(ns...)
	add(asm.Mov.Reg(asm.R0, asm.R7), asm.Return())

	add(exit(lblNotIP, xdpCntNotIP, xdpPass)...)
	add(exit(lblNotUDP, xdpCntNotUDP, xdpPass)...)
	add(exit(lblOtherPort, xdpCntOtherPort, xdpPass)...)
	add(exit(lblFragment, xdpCntFragment, xdpPass)...)
	add(exit(lblTruncated, xdpCntTruncated, xdpPass)...)
	add(exit(lblMalformed, xdpCntMalformed, xdpPass)...)
	if assocErr != nil {
		return nil, assocErr
	}
	return p, nil
}
