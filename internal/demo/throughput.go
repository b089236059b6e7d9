package demo

import (
	"fmt"
	"time"

	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/qp"
)

// throughput runs RC WRITEs of cfg.Size bytes, then 8-byte RC SENDs, for
// cfg.Seconds each.
func (d *demo) throughput() error {
	a, err := traffic.NewEndpoint(d.p.N[0], qp.RC, traffic.QPOpts{SendWR: 256, RecvWR: traffic.RecvDepth})
	if err != nil {
		return err
	}
	b, err := traffic.NewEndpoint(d.p.N[1], qp.RC, traffic.QPOpts{SendWR: 256, RecvWR: traffic.RecvDepth})
	if err != nil {
		return err
	}
	if err := traffic.Connect(a, b, d.mtu); err != nil {
		return err
	}
	dur := time.Duration(d.cfg.Seconds * float64(time.Second))

	res, err := traffic.WriteRun(a, b, d.cfg.Size, dur)
	d.line("RC", "RDMA_WRITE throughput", writeDetail(d.cfg.Size, res, err), err)

	res, err = traffic.SendRun(a, b, dur)
	d.line("RC", "SEND message rate", sendDetail(res, err), err)
	return nil
}

// writeDetail is the text of the RDMA_WRITE throughput line. A run that
// failed gives no rate: it says what completed before it failed.
func writeDetail(size int, res traffic.Result, err error) string {
	head := fmt.Sprintf("%6d B x %d in flight: ", size, traffic.WriteDepth)
	switch {
	case err != nil && res.Elapsed == 0:
		return head + "did not start"
	case err != nil:
		return head + fmt.Sprintf("did not complete: %d WRs done in %v", res.Ops, res.Elapsed.Round(time.Millisecond))
	}
	return head + fmt.Sprintf("%d WRs in %v, %.3f GB/s (%.2f Gbit/s)",
		res.Ops, res.Elapsed.Round(time.Millisecond), res.GBps(), 8*res.GBps())
}

// sendDetail is the text of the SEND message rate line, like writeDetail.
func sendDetail(res traffic.Result, err error) string {
	head := fmt.Sprintf("%6d B x %d in flight: ", 8, traffic.SendDepth)
	switch {
	case err != nil && res.Elapsed == 0:
		return head + "did not start"
	case err != nil:
		return head + fmt.Sprintf("did not complete: %d messages received in %v", res.Ops, res.Elapsed.Round(time.Millisecond))
	}
	return head + fmt.Sprintf("%d messages in %v, %.0f msgs/s", res.Ops, res.Elapsed.Round(time.Millisecond), res.Rate())
}
