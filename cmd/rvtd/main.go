// Command rvtd is the softverbs daemon: it owns softverbs devices (from a
// YAML configuration, or rvt0 and rvt1 on an in-memory fabric with none)
// and serves client processes on a unix socket (docs/rvtd.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"

	"github.com/softverbs/softverbs/rvtd"
)

type flags struct {
	config, socket, logFormat, logLevel string
	metrics                             string
	checkConfig                         bool
	loops                               int
	spin                                time.Duration
}

func main() {
	var f flags
	fs := pflag.NewFlagSet("rvtd", pflag.ContinueOnError)
	fs.StringVarP(&f.config, "config", "c", "", "YAML configuration file (default: rvt0 and rvt1 on an in-memory fabric)")
	fs.StringVarP(&f.socket, "socket", "s", "", "unix socket to serve (default: $RVTD_SOCKET, /run/rvtd/rvtd.sock for root, $XDG_RUNTIME_DIR/rvtd.sock)")
	fs.StringVar(&f.logFormat, "log-format", "", "log format: text or json (default: the config's, else text)")
	fs.StringVar(&f.logLevel, "log-level", "", "log level: debug, info, warn or error (default: the config's, else info)")
	fs.BoolVar(&f.checkConfig, "check-config", false, "check the configuration and exit")
	fs.StringVar(&f.metrics, "metrics", "", "serve Prometheus metrics at http://ADDR/metrics, e.g. 127.0.0.1:9464 (default: off)")
	fs.IntVar(&f.loops, "loops", rvtd.DefaultLoops, "data-path goroutines")
	fs.DurationVar(&f.spin, "spin", rvtd.DefaultSpin, "how long a data-path goroutine keeps polling the rings it served before it sleeps (0: it sleeps at once; docs/rvtd.md, Figures)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			os.Exit(0)
		}
		// ContinueOnError prints nothing itself: under systemd a
		// mistyped ExecStart would leave no line to say why.
		fmt.Fprintf(os.Stderr, "rvtd: %v\n", err)
		fs.SetOutput(os.Stderr)
		fs.PrintDefaults()
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "rvtd: unexpected argument %q\n", fs.Arg(0))
		os.Exit(2)
	}
	if f.loops < 1 {
		fmt.Fprintf(os.Stderr, "rvtd: --loops %d: want 1 or more\n", f.loops)
		os.Exit(2)
	}
	if f.spin < 0 {
		fmt.Fprintf(os.Stderr, "rvtd: --spin %v: want a duration of 0 or more\n", f.spin)
		os.Exit(2)
	}
	if err := run(f); err != nil {
		fmt.Fprintln(os.Stderr, "rvtd:", err)
		os.Exit(1)
	}
}

func run(f flags) error {
	cfg := rvtd.DefaultConfig()
	if f.config != "" {
		c, err := rvtd.LoadConfig(f.config)
		if err != nil {
			return err
		}
		cfg = c
	}
	if f.logFormat != "" {
		cfg.Log.Format = f.logFormat
	}
	if f.logLevel != "" {
		cfg.Log.Level = f.logLevel
	}
	if err := cfg.Check(); err != nil {
		return err
	}
	if f.checkConfig {
		fmt.Printf("configuration OK: %d devices\n", len(cfg.Devices))
		// Descriptors under this process's RLIMIT_NOFILE (under systemd,
		// ExecStartPre runs with the unit's LimitNOFILE, as the daemon).
		lim, nofile, _ := rvtd.DefaultFDLimit()
		switch {
		case cfg.Limits.FDs == 0:
			fmt.Printf("limits.fds: about %d descriptors per session (a quarter of RLIMIT_NOFILE %d, less the daemon's own)\n", lim, nofile)
		case cfg.Limits.FDs >= nofile:
			fmt.Printf("warning: limits.fds %d is not below RLIMIT_NOFILE %d: one session can take every descriptor of the daemon\n", cfg.Limits.FDs, nofile)
		}
		switch {
		case cfg.Limits.UserFDs == 0:
			fmt.Printf("limits.user_fds: about %d descriptors per client user, root included (half of RLIMIT_NOFILE %d, less the daemon's own)\n", max(rvtd.DefaultUserFDLimit(), cfg.Limits.FDs), nofile)
		case cfg.Limits.UserFDs >= nofile:
			fmt.Printf("warning: limits.user_fds %d is not below RLIMIT_NOFILE %d: one user can take every descriptor of the daemon\n", cfg.Limits.UserFDs, nofile)
		}
		return nil
	}
	log := newLogger(cfg)
	sock := f.socket
	if sock == "" {
		sock = cmpOr(cfg.Socket, rvtd.DefaultSocket())
	}
	if err := rvtd.CheckSocket(sock, log); err != nil {
		return err
	}
	srv, err := rvtd.New(cfg, rvtd.Options{Logger: log, Loops: f.loops, Spin: spinOption(f.spin)})
	if err != nil {
		return err
	}
	if err := srv.Listen(sock); err != nil {
		_ = srv.Shutdown(context.Background())
		return err
	}
	if f.metrics != "" {
		ms, err := serveMetrics(f.metrics, srv, log)
		if err != nil {
			_ = srv.Shutdown(context.Background())
			return err
		}
		defer ms.Close()
	}
	sig := make(chan os.Signal, 1)
	// SIGHUP too: a daemon started from a terminal that closes stops as
	// cleanly as on SIGTERM (its clients get DEVICE_FATAL, the socket
	// goes), instead of dying with the signal.
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	var serveErr error
	select {
	case s := <-sig:
		log.Info("stopping", "signal", s.String())
	case serveErr = <-served:
		if serveErr != nil {
			log.Error("serve", "err", serveErr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		return err
	}
	if serveErr != nil {
		return fmt.Errorf("serve: %w", serveErr) // exit 1: a supervisor restarts it
	}
	return nil
}

// serveMetrics serves /metrics at addr: the daemon's collector, with the
// Go runtime's and the process's, on a registry of its own.
func serveMetrics(addr string, srv *rvtd.Server, log *slog.Logger) (*http.Server, error) {
	reg := prometheus.NewRegistry()
	if err := srv.RegisterMetrics(reg); err != nil {
		return nil, err
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics", "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return hs, nil
}

func newLogger(cfg *rvtd.Config) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cmpOr(cfg.Log.Level, "info")))
	o := &slog.HandlerOptions{Level: lvl}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, o))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, o))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// spinOption is rvtd.Options.Spin for --spin: 0 there means the default,
// here never.
func spinOption(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
