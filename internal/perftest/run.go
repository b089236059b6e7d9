package perftest

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/cm"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Env is where a tool runs: its device and its terminal.
type Env struct {
	Dev            *rvt.Device
	Stdout, Stderr io.Writer
	// Listener, for the server, is where it accepts the client (nil:
	// listen on the configured port, all addresses, as perftest does).
	Listener net.Listener
	// Warm, if not nil, is called with the peer's GID once it is known,
	// to resolve its MAC before the first packet.
	Warm func(rvt.GID)
	// CMListener, for a server with -R or -z, is where it accepts the
	// client's rdma_cm connection (nil: listen on the configured port of
	// every address in port space TCP, as perftest does). It is closed
	// once the client is in.
	CMListener *cm.Listener
	// Results, if not nil, receives every row this side prints (not the
	// -D rows), for plots and tables.
	Results *Results
}

// Results are the rows a tool printed.
type Results struct {
	BW  []BWReport
	Lat []LatRow
}

// LatRow is one latency row: the message size, the iterations and the
// figures.
type LatRow struct {
	Size  int
	Iters int
	LatResult
}

// side is one run of a tool: its parameters, device objects and exchange.
type side struct {
	p      *params
	env    Env
	out    io.Writer
	client bool
	clk    clock.Clock
	base   time.Time

	pd       *rvt.PD
	sendCQ   *rvt.CQ
	recvCQ   *rvt.CQ
	sendWait *cqWaiter
	recvWait *cqWaiter
	qps      []*rvt.QP
	ahs      []*rvt.AH
	buf      []byte
	mr       *rvt.MR
	bufSize  int // per QP and direction: BUFF_SIZE
	mtu      qp.MTU
	gidIndex int
	outReads int

	conn     *Conn
	my, rem  []Dest
	deadline time.Time

	comm    *cmComm    // -z, -R: the exchange's rdma_cm connection
	cmConns []*cm.Conn // -R: the test QPs' connections
}

// full reports whether the tool prints its whole output (no --output).
func (s *side) full() bool { return s.p.Output == FullVerbosity }

// now is the side's cycle counter: nanoseconds from a base a second before
// the run began, so that no stamp is 0 (perftest's arrays use 0 for
// "not recorded").
func (s *side) now() Cycles { return Cycles(s.clk.Now().Sub(s.base)) }

// Run runs one side of cfg's tool on env's device: the server when
// cfg.Server is empty, else the client. It prints what perftest prints.
func Run(cfg Config, env Env) error {
	p, err := cfg.normalize()
	if err != nil {
		return err
	}
	s := &side{p: p, env: env, out: env.Stdout, client: cfg.Server != "", clk: env.Dev.Clock()}
	if s.out == nil {
		s.out = io.Discard
	}
	if env.Stderr == nil {
		s.env.Stderr = io.Discard
	}
	s.base = s.clk.Now().Add(-time.Second)
	defer s.close()
	err = s.run()
	if s.cmConns != nil && err == nil {
		err = s.disconnectCM()
	}
	return err
}

func (s *side) run() error {
	p := s.p
	v := p.Test.Verb()
	for _, n := range p.notices {
		io.WriteString(s.out, ResultLine+n)
	}
	if err := s.checkLink(); err != nil {
		return err
	}
	if v == Read || v == Atomic || p.Inline >= 0 {
		// ctx_set_max_inline on a device perftest does not know: -I
		// (READ and atomic tests ask for 0) is refused with a warning,
		// and nothing is posted inline.
		if s.full() {
			io.WriteString(s.out, ResultLine)
		}
		io.WriteString(s.env.Stderr, InlineWarning)
	}
	if s.full() && !s.client {
		WriteWaiting(s.out)
	}
	if p.Timeout > 0 {
		s.deadline = s.clk.Now().Add(p.Timeout)
	}
	var err error
	if p.CommRDMACM {
		if s.comm, err = s.establishCM(); err != nil {
			return err
		}
		s.conn = NewRDMACMConn(s.comm, s.client)
	} else {
		c, err := s.establish()
		if err != nil {
			return err
		}
		defer c.Close()
		s.conn = NewConn(c, s.client)
	}
	if err := s.conn.Versions(); err != nil {
		return err
	}
	var cycle int
	cycle, _, err = s.conn.SysData(pageSize, cacheLine)
	if err != nil {
		return fmt.Errorf(" Failed to exchange Page Size data between server and client: %w", err)
	}
	if s.mtu, err = s.conn.MTU(s.mtu); err != nil {
		return err
	}
	if p.Conn == "UD" && p.Size > s.mtu.Bytes() {
		if p.All || !p.sizeGiven {
			fmt.Fprintf(s.env.Stderr, " Max msg size in UD is MTU %d\n Changing to this MTU\n", s.mtu.Bytes())
			p.Size = s.mtu.Bytes()
		} else {
			return errors.New(" Max message size in UD cannot be greater than MTU ")
		}
	}
	s.bufSize = alignUp(max(s.recvLen(p.Size), cycle), pageSize)
	if err := s.setup(); err != nil {
		return fmt.Errorf(" Couldn't create IB resources: %w", err)
	}
	if p.RDMACM {
		if err := s.connectCM(); err != nil {
			return fmt.Errorf("Failed to create RDMA CM connection with resources: %w", err)
		}
	}
	if s.full() {
		s.header().Write(s.out)
	}
	switch p.Test {
	case WriteBW, ReadBW, AtomicBW:
		return s.runRDMABW()
	case SendBW:
		return s.runSendBW()
	case SendLat:
		return s.runSendLat()
	case WriteLat:
		return s.runWriteLat()
	default:
		return s.runReadLat()
	}
}

func alignUp(n, a int) int { return (n + a - 1) / a * a }

// checkLink is check_link: the port's MTU, the GID to use, the
// outstanding reads.
func (s *side) checkLink() error {
	p := s.p
	pa, err := s.env.Dev.QueryPort(uint8(p.IBPort))
	if err != nil {
		return fmt.Errorf(" Unable to query port %d: %w", p.IBPort, err)
	}
	s.mtu = pa.ActiveMTU
	if p.MTU != 0 {
		m := qp.MTUFromBytes(p.MTU)
		if m > pa.ActiveMTU {
			fmt.Fprintf(s.env.Stderr, " Requested mtu is higher than active mtu \n Changing to active mtu - %d\n", pa.ActiveMTU.Bytes())
			m = pa.ActiveMTU
		}
		s.mtu = m
	}
	s.gidIndex = p.GIDIndex
	if s.gidIndex < 0 {
		// get_best_gid_index: the first IPv4-mapped GID, else GID 0.
		s.gidIndex = 0
		for i := 0; i < pa.GIDTblLen; i++ {
			g, err := s.env.Dev.QueryGID(uint8(p.IBPort), i)
			if err != nil {
				break
			}
			if a := netip.AddrFrom16(g); a.Is4In6() {
				s.gidIndex = i
				break
			}
		}
	}
	if _, err := s.env.Dev.QueryGID(uint8(p.IBPort), s.gidIndex); err != nil {
		return fmt.Errorf(" Failed to query GID index %d: %w", s.gidIndex, err)
	}
	s.outReads = 1
	if v := p.Test.Verb(); v == Read || v == Atomic {
		// ctx_set_out_reads: -o above the device's maximum is cut to it,
		// and 0 or less is the maximum.
		most := s.env.Dev.QueryDevice().MaxQPRdAtom
		s.outReads = most
		if p.OutReads > most {
			if s.full() {
				io.WriteString(s.out, ResultLine)
			}
			fmt.Fprintf(s.env.Stderr, " Number of outstanding reads is above max = %d\n Changing to that max value\n", most)
		} else if p.OutReads > 0 {
			s.outReads = p.OutReads
		}
	}
	return nil
}

// establish is establish_connection: the client connects to the server,
// the server accepts one client.
func (s *side) establish() (net.Conn, error) {
	p := s.p
	if s.client {
		addr := net.JoinHostPort(p.Server, strconv.Itoa(p.Port))
		d := net.Dialer{Timeout: 30 * time.Second, Deadline: s.deadline}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("Couldn't connect to %s:%d: %w", p.Server, p.Port, err)
		}
		_ = c.SetDeadline(s.deadline)
		return c, nil
	}
	ln := s.env.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(p.Port))); err != nil {
			return nil, fmt.Errorf("Couldn't listen to port %d: %w", p.Port, err)
		}
		defer ln.Close()
	}
	if tl, ok := ln.(*net.TCPListener); ok {
		_ = tl.SetDeadline(s.deadline)
	}
	c, err := ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	_ = c.SetDeadline(s.deadline)
	return c, nil
}

// header is what ctx_print_test_info prints for this side.
func (s *side) header() Header {
	p := s.p
	pa, _ := s.env.Dev.QueryPort(uint8(p.IBPort))
	return Header{
		Verb: p.Test.Verb(), Atomic: p.Atomic, Latency: p.Test.Latency(), Duplex: p.Duplex, PostList: p.PostList,
		Events: p.Events, Device: s.env.Dev.Name(), QPs: p.QPs, Conn: p.Conn, Server: !s.client,
		TxDepth: p.TxDepth, RxDepth: p.RxDepth, CQMod: p.CQMod, MTU: s.mtu.Bytes(), LinkType: pa.LinkLayer,
		GIDIndex: s.gidIndex, OutReads: s.outReads, ViaRDMACM: p.RDMACM, DataExRDMACM: p.CommRDMACM,
	}
}

// qpType is the QP type of -c.
func (s *side) qpType() rvt.QPType {
	switch s.p.Conn {
	case "UC":
		return qp.UC
	case "UD":
		return qp.UD
	}
	return qp.RC
}

// setup makes the PD, CQs, buffer, MR and QPs, moves the QPs to INIT and
// fills in this side's addresses (ctx_init and set_up_connection).
func (s *side) setup() error {
	p := s.p
	dev := s.env.Dev
	var err error
	if s.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	var onSend, onRecv func(*rvt.CQ)
	if p.Events {
		s.sendWait, s.recvWait = newCQWaiter(), newCQWaiter()
		onSend, onRecv = s.sendWait.notify, s.recvWait.notify
	}
	depth := p.QPs * (p.TxDepth + 1)
	if s.sendCQ, err = dev.CreateCQ(depth, onSend); err != nil {
		return err
	}
	if s.recvCQ, err = dev.CreateCQ(p.QPs*(p.RxDepth+1), onRecv); err != nil {
		return err
	}
	// Memory the device reaches without copying (rvtd: shared memory).
	if s.buf, err = dev.AllocBuf(2 * p.QPs * s.bufSize); err != nil {
		return err
	}
	access := keys.LocalWrite | keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic
	if s.mr, err = s.pd.Reg(s.buf, access); err != nil {
		return err
	}
	typ := s.qpType()
	gid, err := dev.QueryGID(uint8(p.IBPort), s.gidIndex)
	if err != nil {
		return err
	}
	pa, err := dev.QueryPort(uint8(p.IBPort))
	if err != nil {
		return err
	}
	for i := 0; i < p.QPs; i++ {
		q, err := s.pd.CreateQP(rvt.QPInitAttr{Type: typ, SendCQ: s.sendCQ, RecvCQ: s.recvCQ,
			Cap: rvt.QPCap{MaxSendWR: uint32(p.TxDepth), MaxRecvWR: uint32(p.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return fmt.Errorf("Couldn't create QP: %w", err)
		}
		s.qps = append(s.qps, q)
		init := rvt.QPAttr{State: qp.Init, Port: uint8(p.IBPort), QKey: defQKey,
			AccessFlags: keys.RemoteWrite | keys.RemoteRead | keys.RemoteAtomic}
		if err := q.Modify(&init, qp.RequiredAttrs(typ, qp.Reset, qp.Init)); err != nil {
			return fmt.Errorf("Failed to modify QP to INIT: %w", err)
		}
		s.my = append(s.my, Dest{LID: pa.LID, OutReads: uint16(s.outReads), QPN: q.Num(), PSN: rand.Uint32() & 0xffffff,
			RKey: s.mr.Rkey, VAddr: s.mr.IOVA + uint64((p.QPs+i)*s.bufSize), GID: gid})
	}
	s.rem = make([]Dest, p.QPs)
	return nil
}

// connect is ctx_connect: RTR and RTS towards the peer's QPs (UD: the
// address handles).
func (s *side) connect() error {
	p := s.p
	if p.RDMACM {
		return nil // rdma_cm moved the QPs to RTS
	}
	typ := s.qpType()
	for i, q := range s.qps {
		rem := s.rem[i]
		av := rvt.AddressVector{DGID: rem.GID, SGIDIndex: uint8(s.gidIndex), HopLimit: defHopLimit,
			SL: uint8(p.SL), DLID: rem.LID, Port: uint8(p.IBPort)}
		if s.env.Warm != nil && i == 0 {
			s.env.Warm(rem.GID)
		}
		outs := uint8(min(s.outReads, 255))
		rtr := rvt.QPAttr{State: qp.RTR, PathMTU: s.mtu, DestQPN: rem.QPN, RQPSN: rem.PSN, AV: av,
			MaxDestRdAtomic: outs, MinRNRTimer: 12}
		if err := q.Modify(&rtr, qp.RequiredAttrs(typ, qp.Init, qp.RTR)); err != nil {
			return fmt.Errorf("Failed to modify QP %d to RTR: %w", q.Num(), err)
		}
		remOuts := uint8(min(int(rem.OutReads), s.env.Dev.QueryDevice().MaxQPInitRdAtom, 255))
		rts := rvt.QPAttr{State: qp.RTS, SQPSN: s.my[i].PSN, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: max(remOuts, 1)}
		if err := q.Modify(&rts, qp.RequiredAttrs(typ, qp.RTR, qp.RTS)); err != nil {
			return fmt.Errorf("Failed to modify QP %d to RTS: %w", q.Num(), err)
		}
		if typ == qp.UD {
			ah, err := s.pd.CreateAH(av)
			if err != nil {
				return fmt.Errorf("Failed to create AH for UD: %w", err)
			}
			s.ahs = append(s.ahs, ah)
		}
	}
	return nil
}

func (s *side) close() {
	for _, c := range s.cmConns {
		_ = c.Close()
	}
	if s.comm != nil {
		s.comm.close()
	}
	for _, q := range s.qps {
		_ = q.Destroy()
	}
	for _, ah := range s.ahs {
		_ = s.env.Dev.DestroyAH(ah)
	}
	if s.mr != nil {
		_ = s.env.Dev.DeregMR(s.mr)
	}
	if s.sendCQ != nil {
		_ = s.env.Dev.DestroyCQ(s.sendCQ)
	}
	if s.recvCQ != nil {
		_ = s.env.Dev.DestroyCQ(s.recvCQ)
	}
	if s.pd != nil {
		_ = s.pd.Dealloc()
	}
}

// Exchange steps shared by the tools.

// hs is one handshake on QP 0's address (a barrier).
func (s *side) hs() error {
	if _, err := s.conn.HandShake(s.my[0]); err != nil {
		return fmt.Errorf("Failed to exchange data between server and clients: %w", err)
	}
	return nil
}

// hsEach swaps every QP's address; with print, it prints the peer's.
func (s *side) hsEach(print bool) error {
	for i := range s.my {
		rem, err := s.conn.HandShake(s.my[i])
		if err != nil {
			return fmt.Errorf("Failed to exchange data between server and clients: %w", err)
		}
		s.rem[i] = rem
		if print && s.full() {
			WriteDest(s.out, "remote", rem, s.destVerb(), true)
		}
	}
	return nil
}

// printMy prints this side's addresses.
func (s *side) printMy() {
	if !s.full() {
		return
	}
	for _, d := range s.my {
		WriteDest(s.out, "local", d, s.destVerb(), true)
	}
}

// destVerb is the verb the address lines are printed for. perftest 4.5
// prints them with its exchange's verb: the test's over TCP, SEND when the
// exchange runs over rdma_cm (-R, -z), so that a READ or WRITE test's lines
// then carry no OUT, RKey and VAddr (seen against ib_write_bw -R and -z,
// ib_read_lat -R on the rxe guest).
func (s *side) destVerb() Verb {
	if s.p.RDMACM || s.p.CommRDMACM {
		return Send
	}
	return s.p.Test.Verb()
}

// finish is ctx_close_connection.
func (s *side) finish() error {
	if err := s.conn.Close(s.my[0]); err != nil {
		return fmt.Errorf("Failed to close connection between server and client: %w", err)
	}
	return nil
}

func (s *side) resultLine() {
	if s.full() {
		io.WriteString(s.out, ResultLine)
	}
}

// sizes returns the message sizes of the run: -s, or with -a 2 to 2^23
// (UD: to the MTU; latency tests from 2 as well).
func (s *side) sizes() []int {
	if !s.p.All {
		return []int{s.p.Size}
	}
	top := maxAllSize
	if s.p.Conn == "UD" {
		top = s.mtu.Bytes()
	}
	var out []int
	for n := 2; n <= top; n *= 2 {
		out = append(out, n)
	}
	return out
}
