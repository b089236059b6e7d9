package main

import (
	"fmt"
	"time"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// In-flight work requests of the throughput runs.
const (
	writeDepth = 16
	sendDepth  = 64
	recvDepth  = 512
)

// maxWriteSize bounds the RDMA WRITE size of the throughput runs (demo and
// perf --size). writeRun keeps writeDepth WRITEs of it in flight (1 GiB at
// 64 MiB) and holds three buffers of it; bigger ones spend the run
// allocating and filling memory and then outlast the wait for the last
// completions, without measuring anything the smaller ones do not.
const maxWriteSize = 64 << 20

// throughput runs RC WRITEs of cfg.Size bytes, then 8-byte RC SENDs, for
// cfg.Seconds each.
func (d *demo) throughput() error {
	a, err := d.p.n[0].newEndpoint(qp.RC, qpOpts{sendWR: 256, recvWR: recvDepth})
	if err != nil {
		return err
	}
	b, err := d.p.n[1].newEndpoint(qp.RC, qpOpts{sendWR: 256, recvWR: recvDepth})
	if err != nil {
		return err
	}
	if err := connect(a, b, d.mtu); err != nil {
		return err
	}
	dur := time.Duration(d.cfg.Seconds * float64(time.Second))

	res, err := writeRun(a, b, d.cfg.Size, dur)
	d.line("RC", "RDMA_WRITE throughput", writeDetail(d.cfg.Size, res, err), err)

	res, err = sendRun(a, b, dur)
	d.line("RC", "SEND message rate", sendDetail(res, err), err)
	return nil
}

// writeDetail is the text of the RDMA_WRITE throughput line. A run that
// failed gives no rate: it says what completed before it failed.
func writeDetail(size int, res runResult, err error) string {
	head := fmt.Sprintf("%6d B x %d in flight: ", size, writeDepth)
	switch {
	case err != nil && res.elapsed == 0:
		return head + "did not start"
	case err != nil:
		return head + fmt.Sprintf("did not complete: %d WRs done in %v", res.ops, res.elapsed.Round(time.Millisecond))
	}
	return head + fmt.Sprintf("%d WRs in %v, %.3f GB/s (%.2f Gbit/s)",
		res.ops, res.elapsed.Round(time.Millisecond), res.gbps(), 8*res.gbps())
}

// sendDetail is the text of the SEND message rate line, like writeDetail.
func sendDetail(res runResult, err error) string {
	head := fmt.Sprintf("%6d B x %d in flight: ", 8, sendDepth)
	switch {
	case err != nil && res.elapsed == 0:
		return head + "did not start"
	case err != nil:
		return head + fmt.Sprintf("did not complete: %d messages received in %v", res.ops, res.elapsed.Round(time.Millisecond))
	}
	return head + fmt.Sprintf("%d messages in %v, %.0f msgs/s", res.ops, res.elapsed.Round(time.Millisecond), res.rate())
}

type runResult struct {
	ops, bytes int64
	elapsed    time.Duration
}

func (r runResult) gbps() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.bytes) / r.elapsed.Seconds() / 1e9
}

func (r runResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// writeRun keeps writeDepth WRITEs of size bytes in flight for dur, then
// waits for the last ones and checks the data of the final write. On
// error the result says what completed, and for how long it ran.
func writeRun(a, b *endpoint, size int, dur time.Duration) (r runResult, err error) {
	src, want, err := a.n.buffer(size, 40)
	if err != nil {
		return r, err
	}
	dst, _, err := b.n.buffer(size, 0)
	if err != nil {
		return r, err
	}
	wr := rvt.SendWR{Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: sge(src, 0, size), RemoteAddr: dst.IOVA, Rkey: dst.Rkey}
	start := time.Now()
	defer func() {
		if err != nil {
			r.elapsed = time.Since(start)
		}
	}()
	deadline := start.Add(dur)
	inflight := 0
	post := func() error {
		wr.WRID++
		inflight++
		return a.PostSend(wr)
	}
	for inflight < writeDepth {
		if err := post(); err != nil {
			return r, err
		}
	}
	buf := make([]rvt.WC, 32)
	for idle := 0; inflight > 0; {
		k := a.cq.Poll(buf)
		if k == 0 {
			if time.Since(start) > dur+waitTimeout {
				return r, fmt.Errorf("%w after %v: %d writes outstanding", errTimeout, (dur + waitTimeout).Round(time.Millisecond), inflight)
			}
			idle++
			backoff(idle)
			continue
		}
		idle = 0
		more := time.Now().Before(deadline)
		for _, wc := range buf[:k] {
			inflight--
			if wc.Status != cq.Success {
				return r, fmt.Errorf("wr_id %d: %v", wc.WRID, wc.Status)
			}
			r.ops++
			r.bytes += int64(size)
			if more {
				if err := post(); err != nil {
					return r, err
				}
			}
		}
	}
	r.elapsed = time.Since(start)
	// The responder placed the data under its QP lock; taking that lock
	// orders this read after it even when the path between the devices
	// runs through the kernel (which the race detector cannot see).
	_ = b.Query()
	return r, sameBytes(dst, dst.IOVA, want)
}

// sendRun keeps sendDepth 8-byte SENDs in flight for dur; the receiver
// keeps recvDepth receives posted and checks each message's sequence
// number. On error the result says what arrived, and for how long it ran.
func sendRun(a, b *endpoint, dur time.Duration) (r runResult, err error) {
	const n = 8
	rbuf, _, err := b.n.buffer(n*recvDepth, 0)
	if err != nil {
		return r, err
	}
	slots := slotSGEs(rbuf, recvDepth, n)
	recv := func(slot uint64) error {
		return b.PostRecv(rvt.RecvWR{WRID: slot, SGL: slotSGL(slots, slot)})
	}
	for i := range uint64(recvDepth) {
		if err := recv(i); err != nil {
			return r, err
		}
	}
	var seq uint64
	msg := make([]byte, n)
	post := func() error {
		seq++
		for i := range msg {
			msg[i] = byte(seq >> (8 * i))
		}
		return a.PostSend(rvt.SendWR{WRID: seq, Opcode: qp.OpSend, Flags: qp.Signaled | qp.Inline, InlineData: msg})
	}
	start := time.Now()
	defer func() {
		if err != nil {
			r.elapsed = time.Since(start)
		}
	}()
	deadline := start.Add(dur)
	inflight := 0
	for ; inflight < sendDepth; inflight++ {
		if err := post(); err != nil {
			return r, err
		}
	}
	sent := int64(inflight)
	buf := make([]rvt.WC, 64)
	got := make([]byte, n)
	var next uint64 = 1
	for idle := 0; inflight > 0 || r.ops < sent; {
		progress := false
		if k := a.cq.Poll(buf); k > 0 {
			progress = true
			more := time.Now().Before(deadline)
			for _, wc := range buf[:k] {
				inflight--
				if wc.Status != cq.Success {
					return r, fmt.Errorf("send wr_id %d: %v", wc.WRID, wc.Status)
				}
				if more {
					if err := post(); err != nil {
						return r, err
					}
					inflight++
					sent++
				}
			}
		}
		if k := b.cq.Poll(buf); k > 0 {
			progress = true
			for _, wc := range buf[:k] {
				if wc.Status != cq.Success || wc.ByteLen != n {
					return r, fmt.Errorf("recv wr_id %d: %v, %d bytes", wc.WRID, wc.Status, wc.ByteLen)
				}
				rbuf.ReadAt(got, rbuf.IOVA+wc.WRID*n)
				var v uint64
				for i := range got {
					v |= uint64(got[i]) << (8 * i)
				}
				if v != next {
					return r, fmt.Errorf("message %d arrived as number %d", v, next)
				}
				next++
				r.ops++
				r.bytes += n
				if err := recv(wc.WRID); err != nil {
					return r, err
				}
			}
		}
		if progress {
			idle = 0
			continue
		}
		if time.Since(start) > dur+waitTimeout {
			return r, fmt.Errorf("%w after %v: %d sends outstanding, %d of %d received",
				errTimeout, (dur + waitTimeout).Round(time.Millisecond), inflight, r.ops, sent)
		}
		idle++
		backoff(idle)
	}
	r.elapsed = time.Since(start)
	return r, nil
}
