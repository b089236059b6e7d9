package main

import (
	"io"

	"github.com/softverbs/softverbs/internal/demo"
	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
)

// demoConfig are the flags of `rvt demo`.
type demoConfig = demo.Config

func defaultDemoConfig() demoConfig { return demo.DefaultConfig() }

// exactMTU returns the path MTU of exactly n bytes, and false unless n is
// 256, 512, 1024, 2048 or 4096.
func exactMTU(n int) (rvt.MTU, bool) {
	m := qp.MTUFromBytes(n)
	return m, m != 0 && m.Bytes() == n
}

// maxDemoSeconds bounds demo --seconds.
const maxDemoSeconds = 600

// checkDemo validates the flags; errors are usageErrors.
func checkDemo(cfg demoConfig) error {
	_, ok := exactMTU(cfg.MTU)
	switch {
	case !ok:
		return usagef("--mtu %d: want 256, 512, 1024, 2048 or 4096", cfg.MTU)
	case !(cfg.Seconds > 0 && cfg.Seconds <= maxDemoSeconds): // also NaN
		return usagef("--seconds %v: want more than 0 and at most %d", cfg.Seconds, maxDemoSeconds)
	case cfg.Size < 1 || cfg.Size > traffic.MaxWriteSize:
		return usagef("--size %d: want 1 B to %d MiB (%d WRITEs of it are in flight)", cfg.Size, traffic.MaxWriteSize>>20, traffic.WriteDepth)
	case !(cfg.Loss >= 0 && cfg.Loss < 1):
		return usagef("--loss %v: want [0, 1)", cfg.Loss)
	}
	return nil
}

// runDemo checks the flags and runs the demo (demo.Run), which writes its
// result lines as each check ends. It returns demo.ErrChecks (wrapped) if
// any check failed.
func runDemo(w io.Writer, cfg demoConfig) error {
	if err := checkDemo(cfg); err != nil {
		return err
	}
	return demo.Run(w, cfg)
}
