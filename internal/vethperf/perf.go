// Package vethperf is `rvt perf`: softverbs over real links between two
// network namespaces joined by a veth pair, beside the kernel's own UDP
// over the same veth, measured in the same run (issue 4, "Benchmarks").
//
// For each path MTU (4096 on a 9000-byte veth, 1024 on a 1500-byte one)
// Run measures first the kernel baselines (4096- or 1024-byte UDP datagrams
// from one sender goroutine to one receiver; 8-byte UDP ping-pong), then
// for each link kind a pair of devices, one per namespace: 8-byte RC SEND
// ping-pong and RC RDMA WRITE goodput. Each link kind gets fresh devices
// and links, closed before the next: AF_XDP on the veth ends, the UDP-socket
// link on the veth ends' addresses, and TAPs bridged with the veth ends
// (softverbs its own host with its own MAC and IP behind each TAP). It
// writes the table row by row as each measurement ends (Header, Rows,
// ErrorRow format it).
//
// Everything lives in the two namespaces, which are deleted at the end, on
// error and when the context is cancelled. It needs root.
package vethperf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// Config is what Run measures.
type Config struct {
	Links   []string // link kinds, from LinkKinds, in the order given
	MTUs    []MTU    // path MTUs to measure, from PathMTUs
	Seconds float64  // length of each goodput run; latency runs take half
	Size    int      // RDMA WRITE message size (1 to traffic.MaxWriteSize)
}

// MTU is one path MTU and the veth MTU that carries it.
type MTU struct {
	Path rvt.MTU
	Size int // bytes: the payload of a full packet, and the UDP datagram size
	Veth int // the veth's Ethernet MTU
}

// PathMTUs are the path MTUs Run measures, by their size in bytes.
var PathMTUs = map[string]MTU{
	"4096": {qp.MTU4096, 4096, 9000},
	"1024": {qp.MTU1024, 1024, 1500},
}

// Targets are issue 4's goodput targets, as a fraction of raw UDP.
var Targets = map[string]float64{"xdp": 1.0, "udp": 0.8, "tap": 0.5}

// Run creates the network, runs every measurement, writes the table to w
// and removes the network again. A link kind whose measurement fails gets
// an error row, and Run an error naming it; a cancelled ctx ends the run
// with "interrupted".
func Run(ctx context.Context, w io.Writer, cfg Config) (err error) {
	links, mtus := cfg.Links, cfg.MTUs
	if len(links) == 0 || len(mtus) == 0 || !(cfg.Seconds > 0) || cfg.Size < 1 || cfg.Size > traffic.MaxWriteSize {
		return fmt.Errorf("vethperf: invalid config %+v", cfg)
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates two network namespaces, a veth pair, TAPs and AF_XDP sockets " +
			"(run it with sudo)")
	}
	n, err := newPerfNet(mtus[0].Veth)
	if err != nil {
		return fmt.Errorf("creating the network: %w", err)
	}
	defer func() {
		if cerr := n.close(); cerr != nil && err == nil {
			err = fmt.Errorf("removing the network: %w", cerr)
		}
	}()

	dur := time.Duration(cfg.Seconds * float64(time.Second))
	latDur := dur / 2
	fmt.Fprintf(w, "rvt perf: namespaces %s and %s joined by veth %s-%s (%v, %v), %v per goodput run, %v per latency run\n",
		n.ns[0], n.ns[1], n.veth[0], n.veth[1], n.ip[0], n.ip[1], dur, latDur)
	fmt.Fprintf(w, "  WRITE: RC RDMA WRITE goodput, %d-byte messages, %d in flight; x_udp: WRITE / kernel UDP datagram throughput\n",
		cfg.Size, traffic.WriteDepth)
	fmt.Fprintf(w, "  SEND: %d-byte RC SEND ping-pong; UDP: %d-byte kernel UDP ping-pong; half round trips in µs; "+
		"lat_x: SEND / UDP median\n", traffic.PingSize, traffic.PingSize)
	fmt.Fprintf(w, "  targets (issue 4): goodput xdp >= %.1f x_udp, udp >= %.1f x_udp, tap >= %.1f x_udp; "+
		"xdp SEND median <= UDP ping-pong median\n\n", Targets["xdp"], Targets["udp"], Targets["tap"])
	fmt.Fprint(w, Header())

	var failed []string
	for _, m := range mtus {
		if n.mtu != m.Veth {
			if err := n.setMTU(m.Veth); err != nil {
				return err
			}
		}
		var b baselines
		t0 := traffic.ProcessCPU()
		base, err := udpStream(ctx, n, m.Size, dur)
		if err != nil {
			return fmt.Errorf("kernel UDP throughput at MTU %d: %w", m.Veth, err)
		}
		b.stream, b.streamCPU, t0 = base, cpuSince(t0), traffic.ProcessCPU()
		if b.mmsg, err = udpStreamMmsg(ctx, n, m.Size, dur); err != nil {
			return fmt.Errorf("kernel UDP sendmmsg throughput at MTU %d: %w", m.Veth, err)
		}
		b.mmsgCPU, t0 = cpuSince(t0), traffic.ProcessCPU()
		baseLat, err := udpPingpong(ctx, n, latDur, false)
		if err != nil {
			return fmt.Errorf("kernel UDP ping-pong: %w", err)
		}
		b.lat, b.latCPU = baseLat, cpuSince(t0)
		var baseBusy traffic.Latency
		if slices.Contains(links, "xdp") {
			t0 = traffic.ProcessCPU()
			if baseBusy, err = udpPingpong(ctx, n, latDur, true); err != nil {
				return fmt.Errorf("kernel UDP busy-polling ping-pong: %w", err)
			}
			b.busy, b.busyCPU = baseBusy, cpuSince(t0)
		}
		for _, kind := range links {
			if err := ctx.Err(); err != nil {
				return errors.New("interrupted")
			}
			res, err := runPerfLink(ctx, n, kind, m.Path, cfg.Size, dur, latDur)
			if ctx.Err() != nil {
				return errors.New("interrupted")
			}
			if err != nil {
				fmt.Fprint(w, ErrorRow(kind, m, err))
				failed = append(failed, fmt.Sprintf("%s at MTU %d", kind, m.Size))
				continue
			}
			writeRow(w, kind, m, res, base, baseLat, baseBusy)
			fmt.Fprint(w, CPURow(kind, m, res, b))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// perfColumns are the table's columns and their widths. The first and the
// last are text, left-aligned; the others are numbers, right-aligned. The
// widths are fixed, rather than measured with text/tabwriter, because
// rows are printed as each measurement ends: a tabwriter would hold the
// whole table back until the last one. The number formats fit the
// widths: GB/s as %.3f, µs as %.1f, ratios as %.3g (at most 8
// characters for a positive value).
var perfColumns = []struct {
	name  string
	width int
}{
	{"link", 8}, {"mtu", 5}, {"veth", 5}, {"WRITE_GB/s", 10}, {"UDP_GB/s", 10}, {"x_udp", 8},
	{"SEND_med", 8}, {"SEND_p99", 8}, {"UDP_med", 8}, {"UDP_p99", 8}, {"lat_x", 8}, {"targets", 0},
}

// perfRow formats the first len(cells) columns of a row and ends the line.
// The last column is not padded.
func perfRow(cells ...string) string {
	var b strings.Builder
	for i, c := range cells {
		switch {
		case i == 0:
			fmt.Fprintf(&b, "%-*s", perfColumns[i].width, c)
		case i == len(perfColumns)-1:
			fmt.Fprintf(&b, "  %s", c)
		default:
			fmt.Fprintf(&b, " %*s", perfColumns[i].width, c)
		}
	}
	return strings.TrimRight(b.String(), " ") + "\n"
}

// Header is the table's first line.
func Header() string {
	names := make([]string, len(perfColumns))
	for i, c := range perfColumns {
		names[i] = c.name
	}
	return perfRow(names...)
}

// ErrorRow is the line of a link kind whose measurement failed.
func ErrorRow(kind string, m MTU, err error) string {
	return strings.TrimSuffix(perfRow(kind, strconv.Itoa(m.Size), strconv.Itoa(m.Veth)), "\n") + "  error: " + err.Error() + "\n"
}

// writeRow prints one line of the table.
//
// For xdp a second line, "busy xdp", compares busy polling on both sides:
// SEND with rvt.Device.PollLink in the CQ loop against UDP with spinning
// non-blocking reads, in the SEND_med, SEND_p99, UDP_med, UDP_p99 and
// lat_x columns; its goodput columns are "-".
func writeRow(w io.Writer, kind string, m MTU, res perfLinkResult, base traffic.Result, baseLat, baseBusy traffic.Latency) {
	fmt.Fprint(w, Rows(kind, m, res, base, baseLat, baseBusy))
}

// Rows is what writeRow prints.
func Rows(kind string, m MTU, res perfLinkResult, base traffic.Result, baseLat, baseBusy traffic.Latency) string {
	xUDP := 0.0
	if base.GBps() > 0 {
		xUDP = res.write.GBps() / base.GBps()
	}
	latX := 0.0
	if b := baseLat.HalfMicros(0.5); b > 0 {
		latX = res.lat.HalfMicros(0.5) / b
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	targets := "goodput " + verdict(xUDP >= Targets[kind])
	if kind == "xdp" {
		targets += ", latency " + verdict(latX <= 1)
	}
	f3 := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	f1 := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	g3 := func(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) }
	mtu, veth := strconv.Itoa(m.Size), strconv.Itoa(m.Veth)
	out := perfRow(kind, mtu, veth, f3(res.write.GBps()), f3(base.GBps()), g3(xUDP),
		f1(res.lat.HalfMicros(0.5)), f1(res.lat.HalfMicros(0.99)), f1(baseLat.HalfMicros(0.5)), f1(baseLat.HalfMicros(0.99)), g3(latX),
		targets)
	if kind != "xdp" {
		return out
	}
	busyX := 0.0
	if b := baseBusy.HalfMicros(0.5); b > 0 {
		busyX = res.busy.HalfMicros(0.5) / b
	}
	return out + perfRow("busy "+kind, mtu, veth, "-", "-", "-",
		f1(res.busy.HalfMicros(0.5)), f1(res.busy.HalfMicros(0.99)), f1(baseBusy.HalfMicros(0.5)), f1(baseBusy.HalfMicros(0.99)), g3(busyX),
		"busy polling both sides: latency "+verdict(busyX > 0 && busyX <= 1))
}
