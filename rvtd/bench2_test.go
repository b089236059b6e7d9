package rvtd_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// The other two measurements: the 8-byte SEND message rate with
// post lists of 16, and many clients with many QPs each. As the others,
// they run only with RVTD_BENCH=1, print figures and assert nothing about
// them.

const (
	rateList    = 16  // WRs per post list
	rateDepth   = 128 // SENDs in flight
	rateRecvs   = 512 // receives kept posted
	rateMsgSize = 8
)

// benchOptions are the daemon options of the benchmarks: RVTD_BENCH_SPIN
// (a duration, or -1) sets Options.Spin, RVTD_BENCH_LOOPS Options.Loops.
func benchOptions(t testing.TB) rvtd.Options {
	var o rvtd.Options
	if testing.Verbose() && os.Getenv("RVTD_BENCH_LOG") != "" {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	if s := os.Getenv("RVTD_BENCH_LOOPS"); s != "" {
		o.Loops, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("RVTD_BENCH_SPIN"); s != "" {
		if s == "-1" {
			o.Spin = -1
		} else if d, err := time.ParseDuration(s); err == nil {
			o.Spin = d
		} else {
			t.Fatalf("RVTD_BENCH_SPIN=%s: %v", s, err)
		}
	}
	return o
}

// startDaemonOpts is startDaemon with options; RVTD_BENCH_HERE=0 or 1
// sets the default devices' receive_here (DeviceConfig.ReceiveHere).
func startDaemonOpts(t testing.TB, o rvtd.Options) string {
	t.Helper()
	var cfg *rvtd.Config
	if h := os.Getenv("RVTD_BENCH_HERE"); h != "" {
		cfg = rvtd.DefaultConfig()
		for i := range cfg.Devices {
			cfg.Devices[i].ReceiveHere = h != "0"
		}
	}
	srv, err := rvtd.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "rvtd.sock")
	if err := srv.Listen(sock); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	return sock
}

// connectMTU is the path MTU connect gives (ibv_mtu: 3 is 1024, 5 is
// 4096). The benchmark roles use 4096, as the embedded pairs they are
// compared with do.
var connectMTU uint8 = 3

// connectTimeout and connectRetry are the retransmit timeout (4.096 us <<
// t) and retry count connect gives: the benchmark roles wait longer (67
// ms, 7 retries), as the CPUs are shared with other work.
var connectTimeout, connectRetry uint8 = 10, 3

// prepareRole sets the benchmark roles up: a path MTU of 4096, and for
// the message-rate roles a QP of their depths.
func prepareRole(role string, n *node) error {
	switch role {
	case "writebench", "sink", "ping", "pong", "msgsend", "msgrecv":
		connectMTU, connectTimeout, connectRetry = 5, 14, 7
	}
	if role != "msgsend" && role != "msgrecv" {
		return nil
	}
	var err error
	n.cq, err = n.dev.CreateCQ(2*(256+rateRecvs), 0)
	if err != nil {
		return err
	}
	n.qp, err = n.dev.CreateQP(2, 2, n.cq, n.cq, proto.Cap{MaxSendWR: 256, MaxRecvWR: rateRecvs, MaxSendSGE: 1, MaxRecvSGE: 1})
	if err != nil {
		return err
	}
	if role == "msgrecv" {
		wrids := make([]uint64, rateRecvs)
		sges := make([]client.SGE, rateRecvs)
		for i := range wrids {
			wrids[i] = uint64(i)
			sges[i] = client.SGE{Addr: n.mr.Addr + uint64(i*64), Length: 64, LKey: n.mr.LKey}
		}
		return n.qp.PostRecvList(wrids, sges)
	}
	return nil
}

// msgSend keeps rateDepth 8-byte SENDs in flight, posted in lists of
// rateList, for benchDur, and prints the messages and nanoseconds.
func msgSend(n *node) error {
	if _, err := readLine("GO"); err != nil {
		return err
	}
	list := make([]client.SendWR, rateList)
	for i := range list {
		list[i] = client.SendWR{Opcode: 2, Flags: 2, SGL: []client.SGE{{Addr: n.mr.Addr + 8192, Length: rateMsgSize, LKey: n.mr.LKey}}}
	}
	buf := make([]client.WC, 64)
	inflight, done := 0, 0
	start := time.Now()
	for more := true; more || inflight > 0; {
		more = time.Since(start) < benchDur
		for more && inflight+rateList <= rateDepth {
			if err := n.qp.PostSendList(list); err != nil {
				return err
			}
			inflight += rateList
		}
		k, err := n.cq.Poll(buf)
		if err != nil {
			return err
		}
		if k == 0 {
			schedYield()
		}
		for _, wc := range buf[:k] {
			if wc.Status != 0 {
				return fmt.Errorf("send completion %+v", wc)
			}
			inflight--
			done++
		}
	}
	fmt.Println("MSGS", done, time.Since(start).Nanoseconds())
	return nil
}

// msgRecv reposts receives in lists of rateList until told to stop.
func msgRecv(n *node) error {
	stop := make(chan struct{})
	go func() { _, _ = readLine("EOF"); close(stop) }()
	buf := make([]client.WC, 64)
	var wrids []uint64
	var sges []client.SGE
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		k, err := n.cq.Poll(buf)
		if err != nil {
			return err
		}
		if k == 0 {
			schedYield()
		}
		for _, wc := range buf[:k] {
			if wc.Status != 0 {
				return fmt.Errorf("receive completion %+v", wc)
			}
			wrids = append(wrids, wc.WRID)
			sges = append(sges, client.SGE{Addr: n.mr.Addr + wc.WRID*64, Length: 64, LKey: n.mr.LKey})
		}
		if len(wrids) >= rateList {
			if err := n.qp.PostRecvList(wrids, sges); err != nil {
				return err
			}
			wrids, sges = wrids[:0], sges[:0]
		}
	}
}

// embeddedMsgRate is msgSend and msgRecv on two embedded devices of one
// process.
func embeddedMsgRate(t *testing.T) float64 {
	p, err := devopen.OpenPair(devopen.PairConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	a, err := traffic.NewEndpoint(p.N[0], rvt.QPType(2), traffic.QPOpts{SendWR: 256, RecvWR: rateRecvs})
	if err != nil {
		t.Fatal(err)
	}
	b, err := traffic.NewEndpoint(p.N[1], rvt.QPType(2), traffic.QPOpts{SendWR: 256, RecvWR: rateRecvs})
	if err != nil {
		t.Fatal(err)
	}
	if err := traffic.Connect(a, b, rvt.MTU(5)); err != nil {
		t.Fatal(err)
	}
	sbuf, _, err := traffic.Buffer(p.N[0], 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	rbuf, _, err := traffic.Buffer(p.N[1], 64*rateRecvs, 0)
	if err != nil {
		t.Fatal(err)
	}
	slots := traffic.SlotSGEs(rbuf, rateRecvs, 64)
	rl := make([]rvt.RecvWR, 0, rateRecvs)
	for i := range uint64(rateRecvs) {
		rl = append(rl, rvt.RecvWR{WRID: i, SGL: traffic.SlotSGL(slots, i)})
	}
	if err := b.PostRecv(rl...); err != nil {
		t.Fatal(err)
	}
	// One goroutine drives both ends, as traffic.SendRun does: the
	// receiver's reposts in lists too, between the sender's polls.
	list := make([]rvt.SendWR, rateList)
	for i := range list {
		list[i] = rvt.SendWR{Opcode: qp.OpSend, Flags: qp.Signaled, SGL: traffic.SGE(sbuf, 0, rateMsgSize)}
	}
	buf := make([]rvt.WC, 64)
	rl = rl[:0]
	inflight, done := 0, 0
	start := time.Now()
	for more := true; more || inflight > 0; {
		more = time.Since(start) < benchDur
		for more && inflight+rateList <= rateDepth {
			if err := a.PostSend(list...); err != nil {
				t.Fatal(err)
			}
			inflight += rateList
		}
		k := a.CQ.Poll(buf)
		for _, wc := range buf[:k] {
			if wc.Status != 0 {
				t.Fatalf("send %+v", wc)
			}
			inflight--
			done++
		}
		kr := b.CQ.Poll(buf)
		for _, wc := range buf[:kr] {
			if wc.Status != 0 {
				t.Fatalf("receive %+v", wc)
			}
			rl = append(rl, rvt.RecvWR{WRID: wc.WRID, SGL: traffic.SlotSGL(slots, wc.WRID)})
		}
		if len(rl) >= rateList {
			if err := b.PostRecv(rl...); err != nil {
				t.Fatal(err)
			}
			rl = rl[:0]
		}
		if k == 0 && kr == 0 {
			runtime.Gosched()
		}
	}
	el := time.Since(start)
	return float64(done) / el.Seconds()
}

// TestBenchmarkMessageRate: 8-byte RC SENDs posted in lists of 16, 128 in
// flight, between two client processes through rvtd, and the same between
// two embedded devices of this process, in one run.
func TestBenchmarkMessageRate(t *testing.T) {
	if os.Getenv("RVTD_BENCH") == "" {
		t.Skip("set RVTD_BENCH=1 to measure")
	}
	sock := startDaemonOpts(t, benchOptions(t))
	recv, send := pairUp(t, sock, "msgrecv", "msgsend")
	send.send("GO")
	f := send.expect("MSGS")
	msgs, _ := strconv.ParseFloat(f[1], 64)
	ns, _ := strconv.ParseFloat(f[2], 64)
	recv.send("EOF")
	rate := msgs / ns * 1e9
	emb := embeddedMsgRate(t)
	t.Logf("8-byte SEND message rate, post lists of 16: rvtd %.0f msg/s, embedded %.0f msg/s (%.2fx)", rate, emb, rate/emb)
}

// The many-clients measurement: each client process has manyQPs QPs, half
// on rvt0 writing to the other half on rvt1 (its own, in pairs), each
// sender keeping manyDepth WRITEs of manySize in flight; the client polls
// its one send CQ and sleeps on its completion channel when it is empty.
const (
	manyQPs   = 100
	manyDepth = 2
	manySize  = 4096
)

// manyRole is one client of the many-clients measurement.
func manyRole(sock string) error {
	c, err := client.Dial(sock, "rvtd-many")
	if err != nil {
		return err
	}
	defer c.Close()
	var side [2]struct {
		dev *client.Device
		pd  uint32
		shm *client.Shm
		mr  *client.MR
		cq  *client.CQ
	}
	var ch *client.Channel
	for i, name := range []string{"rvt0", "rvt1"} {
		s := &side[i]
		if s.dev, err = c.OpenDevice(name); err != nil {
			return err
		}
		if s.pd, err = s.dev.AllocPD(); err != nil {
			return err
		}
		if s.shm, err = s.dev.ShmAlloc(1 << 20); err != nil {
			return err
		}
		if s.mr, err = s.dev.RegMR(s.pd, s.shm, 0, 1<<20, accessAll); err != nil {
			return err
		}
		var chh uint32
		if i == 0 {
			if ch, err = s.dev.CreateCompChannel(); err != nil {
				return err
			}
			chh = ch.Handle
		}
		if s.cq, err = s.dev.CreateCQ(1024, chh); err != nil {
			return err
		}
	}
	type pairQP struct {
		snd   *client.QP
		rkey  uint32
		raddr uint64
	}
	byQPN := map[uint32]*pairQP{}
	var pairs []*pairQP
	for range manyQPs / 2 {
		var n [2]*node
		for i := range n {
			s := &side[i]
			q, err := s.dev.CreateQP(s.pd, 2, s.cq, s.cq, proto.Cap{MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
			if err != nil {
				return err
			}
			n[i] = &node{c: c, dev: s.dev, shm: s.shm, mr: s.mr, cq: s.cq, qp: q}
		}
		e0, err := n[0].endpoint()
		if err != nil {
			return err
		}
		e1, err := n[1].endpoint()
		if err != nil {
			return err
		}
		// A retransmit timeout of 67 ms and 7 retries: thousands of QPs
		// on two shared CPUs wait their turn longer than connect's 4 ms.
		if err := connectSlow(n[0], e1); err != nil {
			return err
		}
		if err := connectSlow(n[1], e0); err != nil {
			return err
		}
		p := &pairQP{snd: n[0].qp, rkey: e1.RKey, raddr: e1.Addr}
		pairs = append(pairs, p)
		byQPN[n[0].qp.QPN] = p
	}
	fmt.Println("READY")
	if _, err := readLine("GO"); err != nil {
		return err
	}
	s0 := &side[0]
	post := func(p *pairQP, k int) error {
		off := uint64(k%(256-1)) * manySize
		return p.snd.PostSend(client.SendWR{WRID: uint64(k), Opcode: 0, Flags: 2,
			SGL:        []client.SGE{{Addr: s0.mr.Addr + off, Length: manySize, LKey: s0.mr.LKey}},
			RemoteAddr: p.raddr + off, RKey: p.rkey})
	}
	k := 0
	for _, p := range pairs {
		for range manyDepth {
			if err := post(p, k); err != nil {
				return err
			}
			k++
		}
	}
	inflight := len(pairs) * manyDepth
	buf := make([]client.WC, 64)
	var done int64
	start := time.Now()
	for inflight > 0 {
		more := time.Since(start) < benchDur
		n, err := s0.cq.Poll(buf)
		if err != nil {
			return err
		}
		if n == 0 {
			// Arm, look once more, then sleep on the channel.
			s0.cq.Arm(false)
			if n, err = s0.cq.Poll(buf); err != nil {
				return err
			}
			if n == 0 {
				if _, err := ch.GetEvent(); err != nil {
					return err
				}
				continue
			}
		}
		for _, wc := range buf[:n] {
			if wc.Status != 0 {
				return fmt.Errorf("write completion %+v", wc)
			}
			inflight--
			done++
			if more {
				p := byQPN[wc.QPNum]
				if p == nil {
					return fmt.Errorf("completion of QP %#x", wc.QPNum)
				}
				if err := post(p, k); err != nil {
					return err
				}
				k++
				inflight++
			}
		}
	}
	fmt.Println("MANY", done*manySize, time.Since(start).Nanoseconds())
	fmt.Println("SPAN", start.UnixNano(), time.Now().UnixNano())
	_, _ = readLine("EOF")
	return nil
}

// manyClients runs n clients of manyRole at once and returns their
// aggregate goodput in GB/s.
func manyClients(t *testing.T, sock string, n int) float64 {
	cs := make([]*child, n)
	for i := range cs {
		cs[i] = startChild(t, fmt.Sprintf("many%d", i), "many", sock, "")
	}
	for _, c := range cs {
		c.expect("READY")
	}
	for _, c := range cs {
		c.send("GO")
	}
	// The aggregate is every client's bytes over the span from the first
	// start to the last end (the clients' runs overlap, not exactly).
	var bytes float64
	var first, last int64
	for i, c := range cs {
		f := c.expect("MANY")
		b, _ := strconv.ParseFloat(f[1], 64)
		bytes += b
		f = c.expect("SPAN")
		s, _ := strconv.ParseInt(f[1], 10, 64)
		e, _ := strconv.ParseInt(f[2], 10, 64)
		if i == 0 || s < first {
			first = s
		}
		last = max(last, e)
	}
	for _, c := range cs {
		c.send("EOF")
		_ = c.cmd.Wait()
	}
	return bytes / float64(last-first)
}

// TestBenchmarkManyClients: the aggregate RC WRITE goodput of 64 client
// processes with 100 QPs each (50 writing to the other 50), all active,
// against one such client, through one rvtd, in one run.
// RVTD_BENCH_CLIENTS overrides 64.
func TestBenchmarkManyClients(t *testing.T) {
	if os.Getenv("RVTD_BENCH") == "" {
		t.Skip("set RVTD_BENCH=1 to measure")
	}
	many := 64
	if s := os.Getenv("RVTD_BENCH_CLIENTS"); s != "" {
		many, _ = strconv.Atoi(s)
	}
	o := benchOptions(t)
	sock := startDaemonOpts(t, o)
	one := manyClients(t, sock, 1)
	all := manyClients(t, sock, many)
	t.Logf("4 KiB RC WRITE goodput, %d QPs per client (half writing), %d in flight per writer: 1 client %.3f GB/s, %d clients %.3f GB/s (%.2fx)",
		manyQPs, manyDepth, one, many, all, all/one)
}

// connectSlow is connect with a long retransmit timeout.
func connectSlow(n *node, peer endpoint) error {
	a := proto.QPAttr{State: 1, PKeyIndex: 0, Port: 1, AccessFlags: accessAll}
	if err := n.qp.Modify(a, maskState|maskPKey|maskPort|maskAccess); err != nil {
		return fmt.Errorf("INIT: %w", err)
	}
	a = proto.QPAttr{State: 2, PathMTU: 5, DestQPN: peer.QPN, RQPSN: 0, MaxDestRdAtomic: 1, MinRNRTimer: 1,
		AV: proto.AV{DGID: peer.GID, SGIDIndex: 1, HopLimit: 64, Port: 1, IsGlobal: true}}
	if err := n.qp.Modify(a, maskState|maskAV|maskPathMTU|maskDestQPN|maskRQPSN|maskMaxDestRd|maskMinRNR); err != nil {
		return fmt.Errorf("RTR: %w", err)
	}
	a = proto.QPAttr{State: 3, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 0, MaxRdAtomic: 1}
	if err := n.qp.Modify(a, maskState|maskTimeout|maskRetry|maskRNRRetry|maskSQPSN|maskMaxRd); err != nil {
		return fmt.Errorf("RTS: %w", err)
	}
	return nil
}
