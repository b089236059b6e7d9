package main

// rvt perf: the flags of the veth comparison, checked; the measurements
// and the table are internal/vethperf's.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/internal/vethperf"
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
			fs.IntVar(&cfg.Size, "size", cfg.Size, fmt.Sprintf("RDMA WRITE message size in bytes (1 to %d MiB)", traffic.MaxWriteSize>>20))
			fs.StringVar(&cfg.MTUs, "mtu", cfg.MTUs, "path MTUs to measure, comma-separated: 4096 (veth MTU 9000), 1024 (veth MTU 1500)")
			return func(w io.Writer) error { return runPerf(w, cfg) }
		}, ""}
}

// check validates the flags (errors are usageErrors) and returns the
// measurements they select.
func (cfg perfConfig) check() (vethperf.Config, error) {
	vc := vethperf.Config{Seconds: cfg.Seconds, Size: cfg.Size}
	switch cfg.Link {
	case "all":
		vc.Links = vethperf.LinkKinds
	case "xdp", "udp", "tap":
		vc.Links = []string{cfg.Link}
	default:
		return vc, usagef("--link %q: want xdp, udp, tap or all", cfg.Link)
	}
	for _, s := range strings.Split(cfg.MTUs, ",") {
		m, ok := vethperf.PathMTUs[strings.TrimSpace(s)]
		if !ok {
			return vc, usagef("--mtu %q: perf measures path MTUs 4096 and 1024, not %q", cfg.MTUs, s)
		}
		if slices.Contains(vc.MTUs, m) {
			return vc, usagef("--mtu %q: path MTU %d given twice", cfg.MTUs, m.Size)
		}
		vc.MTUs = append(vc.MTUs, m)
	}
	if !(cfg.Seconds > 0 && cfg.Seconds <= 600) {
		return vc, usagef("--seconds %v: want more than 0 and at most 600", cfg.Seconds)
	}
	if cfg.Size <= 0 || cfg.Size > traffic.MaxWriteSize {
		return vc, usagef("--size %d: want 1 byte to %d MiB (%d WRITEs of it are in flight)", cfg.Size, traffic.MaxWriteSize>>20, traffic.WriteDepth)
	}
	return vc, nil
}

// runPerf runs the measurements until they end, or SIGINT or SIGTERM.
func runPerf(w io.Writer, cfg perfConfig) error {
	vc, err := cfg.check()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop() // after the network is gone: a second ctrl-C cannot cut the clean-up short
	return vethperf.Run(ctx, w, vc)
}
