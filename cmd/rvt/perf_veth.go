package main

// rvt perf: softverbs over real links between two network namespaces
// joined by a veth pair, beside the kernel's own UDP over the same veth,
// measured in the same run (issue 4, "Benchmarks").
//
// For each path MTU (4096 on a 9000-byte veth, 1024 on a 1500-byte one)
// it measures first the kernel baselines (4096- or 1024-byte UDP datagrams
// from one sender goroutine to one receiver; 8-byte UDP ping-pong), then
// for each link kind a pair of devices, one per namespace: 8-byte RC SEND
// ping-pong and RC RDMA WRITE goodput. Each link kind gets fresh devices
// and links, closed before the next: AF_XDP on the veth ends, the UDP-socket
// link on the veth ends' addresses, and TAPs bridged with the veth ends
// (softverbs its own host with its own MAC and IP behind each TAP).
//
// Everything lives in the two namespaces, which are deleted at the end, on
// error and on SIGINT or SIGTERM.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// perfConfig is the configuration of `rvt perf`.
type perfConfig struct {
	Link    string  // xdp, udp, tap or all
	Seconds float64 // length of each goodput run; latency runs take half
	Size    int     // RDMA WRITE message size
	MTUs    string  // comma-separated path MTUs: 4096, 1024
}

func defaultPerfConfig() perfConfig {
	return perfConfig{Link: "all", Seconds: 2, Size: 64 << 10, MTUs: "4096,1024"}
}

// perfCommand is the `rvt perf` subcommand.
func perfCommand() command {
	return command{"perf", "RC WRITE goodput and SEND latency over TAP, UDP and AF_XDP links on a veth pair between " +
		"two network namespaces, beside kernel UDP over the same veth (root)",
		func(fs *pflag.FlagSet) func(io.Writer) error {
			cfg := defaultPerfConfig()
			fs.StringVar(&cfg.Link, "link", cfg.Link, "link kind: xdp, udp, tap or all")
			fs.Float64Var(&cfg.Seconds, "seconds", cfg.Seconds, "length of each goodput run in seconds (latency runs take half)")
			fs.IntVar(&cfg.Size, "size", cfg.Size, fmt.Sprintf("RDMA WRITE message size in bytes (1 to %d MiB)", maxWriteSize>>20))
			fs.StringVar(&cfg.MTUs, "mtu", cfg.MTUs, "path MTUs to measure, comma-separated: 4096 (veth MTU 9000), 1024 (veth MTU 1500)")
			return func(w io.Writer) error { return runPerf(w, cfg) }
		}, ""}
}

// perfMTU is one path MTU and the veth MTU that carries it.
type perfMTU struct {
	path rvt.MTU
	size int // bytes: the payload of a full packet, and the UDP datagram size
	veth int
}

var perfMTUs = map[string]perfMTU{
	"4096": {qp.MTU4096, 4096, 9000},
	"1024": {qp.MTU1024, 1024, 1500},
}

// perfTargets are issue 4's goodput targets, as a fraction of raw UDP.
var perfTargets = map[string]float64{"xdp": 1.0, "udp": 0.8, "tap": 0.5}

func (cfg perfConfig) check() (links []string, mtus []perfMTU, err error) {
	switch cfg.Link {
	case "all":
		links = perfLinkKinds
	case "xdp", "udp", "tap":
		links = []string{cfg.Link}
	default:
		return nil, nil, usagef("--link %q: want xdp, udp, tap or all", cfg.Link)
	}
	for _, s := range strings.Split(cfg.MTUs, ",") {
		m, ok := perfMTUs[strings.TrimSpace(s)]
		if !ok {
			return nil, nil, usagef("--mtu %q: perf measures path MTUs 4096 and 1024, not %q", cfg.MTUs, s)
		}
		if slices.Contains(mtus, m) {
			return nil, nil, usagef("--mtu %q: path MTU %d given twice", cfg.MTUs, m.size)
		}
		mtus = append(mtus, m)
	}
	if !(cfg.Seconds > 0 && cfg.Seconds <= 600) {
		return nil, nil, usagef("--seconds %v: want more than 0 and at most 600", cfg.Seconds)
	}
	if cfg.Size <= 0 || cfg.Size > maxWriteSize {
		return nil, nil, usagef("--size %d: want 1 byte to %d MiB (%d WRITEs of it are in flight)", cfg.Size, maxWriteSize>>20, writeDepth)
	}
	return links, mtus, nil
}

// runPerf creates the network, runs every measurement and removes the
// network again.
func runPerf(w io.Writer, cfg perfConfig) (err error) {
	links, mtus, err := cfg.check()
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates two network namespaces, a veth pair, TAPs and AF_XDP sockets " +
			"(run it with sudo)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop() // after the network is gone: a second ctrl-C cannot cut the clean-up short

	n, err := newPerfNet(mtus[0].veth)
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
		cfg.Size, writeDepth)
	fmt.Fprintf(w, "  SEND: %d-byte RC SEND ping-pong; UDP: %d-byte kernel UDP ping-pong; half round trips in µs; "+
		"lat_x: SEND / UDP median\n", pingSize, pingSize)
	fmt.Fprintf(w, "  targets (issue 4): goodput xdp >= %.1f x_udp, udp >= %.1f x_udp, tap >= %.1f x_udp; "+
		"xdp SEND median <= UDP ping-pong median\n\n", perfTargets["xdp"], perfTargets["udp"], perfTargets["tap"])
	fmt.Fprint(w, perfHeader())

	var failed []string
	for _, m := range mtus {
		if n.mtu != m.veth {
			if err := n.setMTU(m.veth); err != nil {
				return err
			}
		}
		base, err := udpStream(ctx, n, m.size, dur)
		if err != nil {
			return fmt.Errorf("kernel UDP throughput at MTU %d: %w", m.veth, err)
		}
		baseLat, err := udpPingpong(ctx, n, latDur, false)
		if err != nil {
			return fmt.Errorf("kernel UDP ping-pong: %w", err)
		}
		var baseBusy latency
		if slices.Contains(links, "xdp") {
			if baseBusy, err = udpPingpong(ctx, n, latDur, true); err != nil {
				return fmt.Errorf("kernel UDP busy-polling ping-pong: %w", err)
			}
		}
		for _, kind := range links {
			if err := ctx.Err(); err != nil {
				return errors.New("interrupted")
			}
			res, err := runPerfLink(ctx, n, kind, m.path, cfg.Size, dur, latDur)
			if ctx.Err() != nil {
				return errors.New("interrupted")
			}
			if err != nil {
				fmt.Fprint(w, perfErrorRow(kind, m, err))
				failed = append(failed, fmt.Sprintf("%s at MTU %d", kind, m.size))
				continue
			}
			writeRow(w, kind, m, res, base, baseLat, baseBusy)
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

// perfHeader is the table's first line.
func perfHeader() string {
	names := make([]string, len(perfColumns))
	for i, c := range perfColumns {
		names[i] = c.name
	}
	return perfRow(names...)
}

// perfErrorRow is the line of a link kind whose measurement failed.
func perfErrorRow(kind string, m perfMTU, err error) string {
	return strings.TrimSuffix(perfRow(kind, strconv.Itoa(m.size), strconv.Itoa(m.veth)), "\n") + "  error: " + err.Error() + "\n"
}

// writeRow prints one line of the table.
//
// For xdp a second line, "busy xdp", compares busy polling on both sides:
// SEND with rvt.Device.PollLink in the CQ loop against UDP with spinning
// non-blocking reads, in the SEND_med, SEND_p99, UDP_med, UDP_p99 and
// lat_x columns; its goodput columns are "-".
func writeRow(w io.Writer, kind string, m perfMTU, res perfLinkResult, base runResult, baseLat, baseBusy latency) {
	fmt.Fprint(w, perfRows(kind, m, res, base, baseLat, baseBusy))
}

// perfRows is what writeRow prints.
func perfRows(kind string, m perfMTU, res perfLinkResult, base runResult, baseLat, baseBusy latency) string {
	xUDP := 0.0
	if base.gbps() > 0 {
		xUDP = res.write.gbps() / base.gbps()
	}
	latX := 0.0
	if b := baseLat.halfMicros(0.5); b > 0 {
		latX = res.lat.halfMicros(0.5) / b
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	targets := "goodput " + verdict(xUDP >= perfTargets[kind])
	if kind == "xdp" {
		targets += ", latency " + verdict(latX <= 1)
	}
	f3 := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	f1 := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	g3 := func(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) }
	mtu, veth := strconv.Itoa(m.size), strconv.Itoa(m.veth)
	out := perfRow(kind, mtu, veth, f3(res.write.gbps()), f3(base.gbps()), g3(xUDP),
		f1(res.lat.halfMicros(0.5)), f1(res.lat.halfMicros(0.99)), f1(baseLat.halfMicros(0.5)), f1(baseLat.halfMicros(0.99)), g3(latX),
		targets)
	if kind != "xdp" {
		return out
	}
	busyX := 0.0
	if b := baseBusy.halfMicros(0.5); b > 0 {
		busyX = res.busy.halfMicros(0.5) / b
	}
	return out + perfRow("busy "+kind, mtu, veth, "-", "-", "-",
		f1(res.busy.halfMicros(0.5)), f1(res.busy.halfMicros(0.99)), f1(baseBusy.halfMicros(0.5)), f1(baseBusy.halfMicros(0.99)), g3(busyX),
		"busy polling both sides: latency "+verdict(busyX > 0 && busyX <= 1))
}
