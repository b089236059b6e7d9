package traffic

import (
	"fmt"
	"time"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// In-flight work requests of the throughput runs.
const (
	WriteDepth = 16  // WRITEs in flight in WriteRun
	SendDepth  = 64  // SENDs in flight in SendRun
	RecvDepth  = 512 // receives SendRun keeps posted
)

// MaxWriteSize bounds the RDMA WRITE size of the throughput runs (demo and
// perf --size). WriteRun keeps WriteDepth WRITEs of it in flight (1 GiB at
// 64 MiB) and holds three buffers of it; bigger ones spend the run
// allocating and filling memory and then outlast the wait for the last
// completions, without measuring anything the smaller ones do not.
const MaxWriteSize = 64 << 20

// Result is what a timed run moved: operations (WRs, messages,
// datagrams), bytes, and the time it took.
type Result struct {
	Ops, Bytes int64
	Elapsed    time.Duration
}

// GBps is the goodput in 10^9 bytes per second.
func (r Result) GBps() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Bytes) / r.Elapsed.Seconds() / 1e9
}

// Rate is the operations per second.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// WriteRun keeps WriteDepth WRITEs of size bytes from a to b in flight for
// dur, then waits for the last ones and checks the data of the final
// write. On error the result says what completed, and for how long it ran.
func WriteRun(a, b *Endpoint, size int, dur time.Duration) (r Result, err error) {
	src, want, err := Buffer(a.N, size, 40)
	if err != nil {
		return r, err
	}
	dst, _, err := Buffer(b.N, size, 0)
	if err != nil {
		return r, err
	}
	wr := rvt.SendWR{Opcode: qp.OpRDMAWrite, Flags: qp.Signaled, SGL: SGE(src, 0, size), RemoteAddr: dst.IOVA, Rkey: dst.Rkey}
	start := time.Now()
	defer func() {
		if err != nil {
			r.Elapsed = time.Since(start)
		}
	}()
	deadline := start.Add(dur)
	inflight := 0
	post := func() error {
		wr.WRID++
		inflight++
		return a.PostSend(wr)
	}
	for inflight < WriteDepth {
		if err := post(); err != nil {
			return r, err
		}
	}
	buf := make([]rvt.WC, 32)
	for idle := 0; inflight > 0; {
		k := a.CQ.Poll(buf)
		if k == 0 {
			if time.Since(start) > dur+WaitTimeout {
				return r, fmt.Errorf("%w after %v: %d writes outstanding", ErrTimeout, (dur + WaitTimeout).Round(time.Millisecond), inflight)
			}
			idle++
			Backoff(idle)
			continue
		}
		idle = 0
		more := time.Now().Before(deadline)
		for _, wc := range buf[:k] {
			inflight--
			if wc.Status != cq.Success {
				return r, fmt.Errorf("wr_id %d: %v", wc.WRID, wc.Status)
			}
			r.Ops++
			r.Bytes += int64(size)
			if more {
				if err := post(); err != nil {
					return r, err
				}
			}
		}
	}
	r.Elapsed = time.Since(start)
	// The responder placed the data under its QP lock; taking that lock
	// orders this read after it even when the path between the devices
	// runs through the kernel (which the race detector cannot see).
	_ = b.Query()
	return r, SameBytes(dst, dst.IOVA, want)
}

// SendRun keeps SendDepth 8-byte SENDs from a to b in flight for dur; the
// receiver keeps RecvDepth receives posted and checks each message's
// sequence number. On error the result says what arrived, and for how
// long it ran.
func SendRun(a, b *Endpoint, dur time.Duration) (r Result, err error) {
	const n = 8
	rbuf, _, err := Buffer(b.N, n*RecvDepth, 0)
	if err != nil {
		return r, err
	}
	slots := SlotSGEs(rbuf, RecvDepth, n)
	recv := func(slot uint64) error {
		return b.PostRecv(rvt.RecvWR{WRID: slot, SGL: SlotSGL(slots, slot)})
	}
	for i := range uint64(RecvDepth) {
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
			r.Elapsed = time.Since(start)
		}
	}()
	deadline := start.Add(dur)
	inflight := 0
	for ; inflight < SendDepth; inflight++ {
		if err := post(); err != nil {
			return r, err
		}
	}
	sent := int64(inflight)
	buf := make([]rvt.WC, 64)
	got := make([]byte, n)
	var next uint64 = 1
	for idle := 0; inflight > 0 || r.Ops < sent; {
		progress := false
		if k := a.CQ.Poll(buf); k > 0 {
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
		if k := b.CQ.Poll(buf); k > 0 {
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
				r.Ops++
				r.Bytes += n
				if err := recv(wc.WRID); err != nil {
					return r, err
				}
			}
		}
		if progress {
			idle = 0
			continue
		}
		if time.Since(start) > dur+WaitTimeout {
			return r, fmt.Errorf("%w after %v: %d sends outstanding, %d of %d received",
				ErrTimeout, (dur + WaitTimeout).Round(time.Millisecond), inflight, r.Ops, sent)
		}
		idle++
		Backoff(idle)
	}
	r.Elapsed = time.Since(start)
	return r, nil
}
