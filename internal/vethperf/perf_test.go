package vethperf

import (
	"strings"
	"testing"
	"time"

	"github.com/softverbs/softverbs/internal/traffic"
)

// perfLatency is a latency whose half round trips have median med and
// 99th percentile p99, in µs.
func perfLatency(med, p99 float64) traffic.Latency {
	rtts := make([]time.Duration, 100)
	for i := range rtts {
		rtts[i] = time.Duration(2 * med * float64(time.Microsecond))
	}
	rtts[99] = time.Duration(2 * p99 * float64(time.Microsecond))
	return traffic.Latency{RTTs: rtts}
}

// The table's rows line up with its header: every number ends where its
// column's name ends, also on the "busy xdp" rows (which were shifted
// and lacked the goodput columns) and on error rows, whatever the values.
func TestPerfTable(t *testing.T) {
	m4k, m1k := PathMTUs["4096"], PathMTUs["1024"]
	gb := func(v float64) traffic.Result { return traffic.Result{Bytes: int64(v * 1e9), Elapsed: time.Second} }
	baseLat := perfLatency(2.9, 4.4)
	xdp := perfLinkResult{write: gb(1.078), lat: perfLatency(6.2, 40.7), busy: perfLatency(14.2, 17514.1)}
	slow := perfLinkResult{write: gb(0.216), lat: perfLatency(9.2, 46.5), busy: perfLatency(4.7, 5.1)}
	table := Header() +
		Rows("xdp", m4k, xdp, gb(1.065), baseLat, perfLatency(2.6, 19.6)) +
		Rows("udp", m4k, slow, gb(1.065), baseLat, traffic.Latency{}) +
		Rows("xdp", m1k, slow, gb(0.267), baseLat, perfLatency(4968, 8023.1)) +
		ErrorRow("tap", m1k, traffic.ErrTimeout)
	want := "" +
		"link       mtu  veth WRITE_GB/s   UDP_GB/s    x_udp SEND_med SEND_p99  UDP_med  UDP_p99    lat_x  targets\n" +
		"xdp       4096  9000      1.078      1.065     1.01      6.2     40.7      2.9      4.4     2.14  goodput met, latency MISSED\n" +
		"busy xdp  4096  9000          -          -        -     14.2  17514.1      2.6     19.6     5.46  busy polling both sides: latency MISSED\n" +
		"udp       4096  9000      0.216      1.065    0.203      9.2     46.5      2.9      4.4     3.17  goodput MISSED\n" +
		"xdp       1024  1500      0.216      0.267    0.809      9.2     46.5      2.9      4.4     3.17  goodput MISSED, latency MISSED\n" +
		"busy xdp  1024  1500          -          -        -      4.7      5.1   4968.0   8023.1 0.000946  busy polling both sides: latency met\n" +
		"tap       1024  1500  error: timed out waiting for completions\n"
	if table != want {
		t.Errorf("table:\n%s\nwant:\n%s", table, want)
	}

	// Independently of the golden text: each right-aligned column's cells
	// end at the same offset as its name in the header.
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	ends := map[int]bool{}
	off := perfColumns[0].width
	for _, c := range perfColumns[1 : len(perfColumns)-1] {
		off += 1 + c.width
		ends[off] = true
		if lines[0][off-1] == ' ' || lines[0][off] != ' ' {
			t.Errorf("header: column %s does not end at %d", c.name, off)
		}
	}
	for _, l := range lines[1 : len(lines)-1] {
		for end := range ends {
			if end >= len(l) || l[end-1] == ' ' || l[end] != ' ' {
				t.Errorf("%q: no cell ends at offset %d", l, end)
			}
		}
	}
}

// The cpu line under a link's rows: goodput over the sendmmsg baseline,
// CPU per MTU-sized packet of goodput and per round trip; the busy pair
// only where the link measured busy polling.
func TestCPURow(t *testing.T) {
	m4k := PathMTUs["4096"]
	gb := func(v float64) traffic.Result { return traffic.Result{Bytes: int64(v * 1e9), Elapsed: time.Second} }
	b := baselines{
		stream: gb(1.0), mmsg: gb(0.8), streamCPU: 1500 * time.Millisecond, mmsgCPU: 1000 * time.Millisecond,
		lat: perfLatency(3, 5), busy: perfLatency(2, 4), latCPU: 800 * time.Microsecond, busyCPU: 1600 * time.Microsecond,
	}
	res := perfLinkResult{write: gb(1.2), lat: perfLatency(6, 40), busy: perfLatency(5, 20),
		writeCPU: 1200 * time.Millisecond, latCPU: 2 * time.Millisecond, busyCPU: 3 * time.Millisecond}
	want := "  cpu xdp 4096: WRITE 1.5 x UDP sendmmsg/recvmmsg (0.800 GB/s); CPU µs per 4096 B: WRITE 4.10, " +
		"UDP write() 6.14, UDP sendmmsg 5.12; CPU µs per round trip: SEND 20.00, UDP 8.00, busy SEND 30.00, busy UDP 16.00\n"
	if got := CPURow("xdp", m4k, res, b); got != want {
		t.Errorf("CPURow:\n%q\nwant\n%q", got, want)
	}
	res.busy = traffic.Latency{}
	if got := CPURow("udp", m4k, res, b); strings.Contains(got, "busy") || !strings.HasPrefix(got, "  cpu udp 4096: WRITE 1.5 x") {
		t.Errorf("CPURow without busy polling: %q", got)
	}
	// Nothing measured: zeros, not a division by zero.
	if got := CPURow("tap", m4k, perfLinkResult{}, baselines{}); !strings.Contains(got, "WRITE 0 x") {
		t.Errorf("CPURow of nothing: %q", got)
	}
}
