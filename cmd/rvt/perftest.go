package main

// rvt ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw, ib_write_lat,
// ib_read_lat and ib_send_lat: perftest 4.5's tools on softverbs devices.
// The tools live in internal/perftest; this file parses perftest's flags
// (getopt_long's short and long names) and picks the device:
//
//   - with no link flag, the embedded mode: both sides in this process, the
//     client on rvt0 and the server on rvt1 of the in-memory pair (like
//     `rvt demo`, no root), talking through the real TCP exchange on
//     127.0.0.1; only the client's output is printed, as a perftest client
//     prints it;
//   - with --tap, --xdp or --udp (as `rvt pingpong` takes them), one device
//     on that link, server or client of a peer elsewhere (another rvt, or
//     perftest on Linux rxe or a RoCE NIC).

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/internal/perfplot"
	"github.com/softverbs/softverbs/internal/perftest"
)

// perftestConfig are the flags of one perftest tool.
type perftestConfig struct {
	perftest.Config
	output string
	plot   string // --plot FILE.svg or FILE.png

	// Flags softverbs refuses: their names, when given.
	unsupported []string

	// Link selection, as rvt pingpong takes it (none: the in-memory pair).
	link devopen.Config
	// receiveHere: the in-memory pair's devices get rvt.Options.ReceiveHere.
	receiveHere bool
}

// perftestCommands returns the seven tools' commands.
func perftestCommands() []command {
	var cmds []command
	for _, t := range perftest.Tests() {
		cmds = append(cmds, command{
			name: t.String(),
			summary: fmt.Sprintf("%s, as perftest's; both sides on the in-memory pair, or one side over "+
				"--udp, --tap or --xdp (root for --tap and --xdp)", perftestWhat[t]),
			flags: func(fs *pflag.FlagSet) func(io.Writer) error {
				cfg := &perftestConfig{Config: perftest.DefaultConfig(t)}
				perftestFlags(fs, cfg)
				return func(w io.Writer) error {
					cfg.Server = fs.Arg(0)
					return runPerftest(w, fs, cfg)
				}
			},
			args: "[server]",
		})
	}
	return cmds
}

// perftestWhat says what each tool measures.
var perftestWhat = map[perftest.Test]string{
	perftest.WriteBW: "RDMA WRITE bandwidth", perftest.ReadBW: "RDMA READ bandwidth",
	perftest.SendBW: "SEND bandwidth", perftest.AtomicBW: "atomic bandwidth",
	perftest.WriteLat: "RDMA WRITE latency", perftest.ReadLat: "RDMA READ latency",
	perftest.SendLat: "SEND latency",
}

// sizeValue is -s: a byte count with perftest's optional K, M or G
// suffix (powers of 1024).
type sizeValue struct{ p *int }

func (s sizeValue) String() string {
	if s.p == nil {
		return "0"
	}
	return strconv.Itoa(*s.p)
}

func (s sizeValue) Set(v string) error {
	mul := 1
	switch {
	case strings.HasSuffix(v, "K") || strings.HasSuffix(v, "k"):
		mul = 1 << 10
	case strings.HasSuffix(v, "M") || strings.HasSuffix(v, "m"):
		mul = 1 << 20
	case strings.HasSuffix(v, "G") || strings.HasSuffix(v, "g"):
		mul = 1 << 30
	}
	if mul > 1 {
		v = v[:len(v)-1]
	}
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil || n < 0 || n*int64(mul) > 1<<31 {
		return fmt.Errorf("not a size: %q", v)
	}
	*s.p = int(n) * mul
	return nil
}

func (sizeValue) Type() string { return "size" }

// refused is a flag softverbs accepts only to refuse with a clear reason.
type refused struct {
	cfg    *perftestConfig
	name   string
	isBool bool
}

func (r refused) String() string { return "" }

func (r refused) Set(string) error {
	r.cfg.unsupported = append(r.cfg.unsupported, r.name)
	return nil
}

func (r refused) Type() string {
	if r.isBool {
		return "bool"
	}
	return "string"
}

func (r refused) IsBoolFlag() bool { return r.isBool }

// refusedWhy says why each refused flag is refused.
var refusedWhy = map[string]string{
	"use_cuda":      "softverbs registers host memory only (no GPU memory)",
	"use_rocm":      "softverbs registers host memory only (no GPU memory)",
	"odp":           "softverbs devices have no on-demand paging",
	"dualport":      "a softverbs device has one port",
	"mmap":          "softverbs registers heap memory only",
	"use-srq":       "the tools do not use an SRQ on softverbs yet",
	"mcg":           "multicast tests are not supported yet",
	"use_hugepages": "softverbs registers heap memory only",
}

// perftestFlags registers perftest's flags for cfg.Test: its short and
// long names where they make sense here, the ones refused, then rvt's
// long-only link flags.
func perftestFlags(fs *pflag.FlagSet, cfg *perftestConfig) {
	c := &cfg.Config
	t := c.Test
	v := t.Verb()
	fs.IntVarP(&c.Port, "port", "p", c.Port, "listen on/connect to TCP `port`")
	fs.StringVarP(&c.Device, "ib-dev", "d", c.Device, "use softverbs `device`")
	fs.IntVarP(&c.IBPort, "ib-port", "i", c.IBPort, "use `port` of the device (softverbs devices have port 1)")
	fs.IntVarP(&c.MTU, "mtu", "m", c.MTU, "path MTU in `bytes`: 256 to 4096 (default the port's active MTU)")
	fs.VarP(sizeValue{&c.Size}, "size", "s", "`size` of message to exchange, with an optional K, M or G (default 65536; latency 2; atomic 8)")
	fs.BoolVarP(&c.All, "all", "a", c.All, "run sizes from 2 till 2^23")
	fs.IntVarP(&c.Iters, "iters", "n", c.Iters, "`number` of exchanges, at least 5 (default 1000; ib_write_bw 5000)")
	fs.IntVarP(&c.Duration, "duration", "D", c.Duration, "run the test for `seconds` instead of -n iterations")
	fs.IntVarP(&c.Margin, "margin", "f", c.Margin, "with -D, `seconds` at each end of the run left out of the results (default a quarter of -D)")
	fs.IntVarP(&c.GIDIndex, "gid-index", "x", c.GIDIndex, "source GID `index` (default the first IPv4-mapped GID, 1 on rvt devices)")
	fs.StringVarP(&c.Conn, "connection", "c", c.Conn, "connection `type`: RC, UC or UD (UC: SEND and WRITE; UD: SEND)")
	fs.IntVarP(&c.QPs, "qp", "q", c.QPs, "`number` of QPs")
	fs.IntVarP(&c.TxDepth, "tx-depth", "t", c.TxDepth, "size of the send queue, in `WRs` (default 128; latency 1)")
	fs.IntVarP(&c.RxDepth, "rx-depth", "r", c.RxDepth, "size of the receive queue, in `WRs` (default 512)")
	fs.IntVarP(&c.CQMod, "cq-mod", "Q", c.CQMod, "signal one send in `n` (default 100; 1 above 8 KiB)")
	fs.IntVarP(&c.PostList, "post_list", "l", c.PostList, "post `n` WRs per post call")
	fs.BoolVarP(&c.Duplex, "bidirectional", "b", c.Duplex, "measure bidirectional bandwidth")
	fs.BoolVarP(&c.NoPeak, "noPeak", "N", c.NoPeak, "do not compute the peak bandwidth")
	fs.BoolVarP(&c.Events, "events", "e", c.Events, "sleep on CQ events (default poll)")
	fs.IntVarP(&c.SL, "sl", "S", c.SL, "service `level`")
	fs.IntVarP(&c.Inline, "inline_size", "I", c.Inline, "max `bytes` of inline data: accepted as perftest accepts it on a device it does not "+
		"know (rxe, softverbs): with a warning, and nothing inline (default -1)")
	fs.BoolP("CPU-freq", "F", false, "accepted for compatibility (softverbs times in nanoseconds)")
	if v == perftest.Atomic {
		fs.StringVarP(&c.Atomic, "atomic_type", "A", c.Atomic, "atomic `type`: CMP_AND_SWAP or FETCH_AND_ADD")
	}
	if v == perftest.Read || v == perftest.Atomic {
		fs.IntVarP(&c.OutReads, "outs", "o", c.OutReads, "`number` of outstanding reads/atomics (default the device's maximum)")
	}
	fs.BoolVarP(&c.RDMACM, "rdma_cm", "R", c.RDMACM, "connect QPs with rdma_cm and run the test on those QPs (the exchange too goes over rdma_cm)")
	fs.BoolVarP(&c.CommRDMACM, "comm_rdma_cm", "z", c.CommRDMACM, "exchange the test's data over rdma_cm instead of TCP; regular QPs")
	fs.BoolVar(&c.Gbits, "report_gbits", c.Gbits, "report bandwidth in Gb/s instead of MB/s")
	fs.StringVar(&cfg.output, "output", "", "print only one figure: `bandwidth`, message_rate or latency")
	fs.StringVar(&cfg.plot, "plot", "", "draw the results against message size into `file` (.svg or .png): bandwidth and message rate, "+
		"or latency percentiles; on the in-memory pair with a baseline measured in the same run (memcpy, or a Go channel ping-pong)")
	fs.BoolP("version", "V", false, "print perftest's version and exit")
	for _, r := range []struct {
		name, short string
		isBool      bool
	}{
		{"dualport", "O", true}, {"mcg", "g", true},
		{"use_cuda", "", false}, {"use_rocm", "", false}, {"odp", "", true}, {"mmap", "", false},
		{"use-srq", "", true}, {"use_hugepages", "", true},
	} {
		f := fs.VarPF(refused{cfg, r.name, r.isBool}, r.name, r.short, "not supported: "+refusedWhy[r.name])
		if r.isBool {
			f.NoOptDefVal = "true"
		}
	}
	fs.BoolVar(&cfg.receiveHere, "receive-here", false, "the in-memory pair: a packet alone in its sender's run is handled by "+
		"the sending goroutine, not a worker (rvt.Options.ReceiveHere: shorter round trips, lower message rates with many QPs)")
	fs.DurationVar(&c.Timeout, "timeout", 0, "give up when the run takes longer than `duration` (0: never, as perftest; the in-memory pair: 1 minute plus -D)")
	l := &cfg.link
	rvtdFlag(fs, &l.RVTD)
	fs.StringVar(&l.TAP, "tap", "", "create TAP device `name` and be a host on it (needs --ip; root)")
	fs.StringVar(&l.XDP, "xdp", "", "attach AF_XDP to interface `iface` (root)")
	fs.StringVar(&l.UDP, "udp", "", "UDP socket link on `addr` (IP or IP:port; port 4791 by default)")
	fs.StringVar(&l.IP, "ip", "", "our `addr/prefix` on a TAP or XDP link")
	fs.StringVar(&l.MAC, "mac", "", "our `MAC` on a TAP or XDP link (default random)")
	fs.IntVar(&l.LinkMTU, "link-mtu", 0, "Ethernet `MTU` of the link (default: a TAP gets 4224, other links keep the interface's)")
	fs.StringVar(&l.PCAP, "pcap", "", "write the frames we send and receive to pcap `file`")
}

// runPerftest checks the flags and runs the tool.
func runPerftest(w io.Writer, fs *pflag.FlagSet, cfg *perftestConfig) error {
	if v, _ := fs.GetBool("version"); v {
		fmt.Fprintf(w, "Version: %s\n", perftest.Version)
		return nil
	}
	if len(cfg.unsupported) > 0 {
		n := cfg.unsupported[0]
		return fmt.Errorf("--%s: %w: %s", n, perftest.ErrNotSupported, refusedWhy[n])
	}
	// The Config says "the default" with 0; an explicit 0 is out of
	// range (perftest: " Iteration num should be between 5 and ..."),
	// and -1 makes the check say so.
	for name, v := range map[string]*int{"iters": &cfg.Iters, "tx-depth": &cfg.TxDepth, "rx-depth": &cfg.RxDepth,
		"cq-mod": &cfg.CQMod, "size": &cfg.Size, "duration": &cfg.Duration, "post_list": &cfg.PostList} {
		if fs.Changed(name) && *v == 0 {
			*v = -1
		}
	}
	if cfg.output != "" {
		o, err := perftest.ParseOutput(cfg.output)
		if err != nil {
			return usagef("%v", err)
		}
		cfg.Output = o
	}
	if cfg.plot != "" {
		if ext := strings.ToLower(filepath.Ext(cfg.plot)); ext != ".svg" && ext != ".png" {
			return usagef("--plot %s: %v", cfg.plot, perfplot.ErrFormat)
		}
		if cfg.Duration > 0 {
			return usagef("--plot draws -n runs, not -D ones")
		}
	}
	l := &cfg.link
	if l.TAP == "" && l.XDP == "" && l.UDP == "" && l.IP == "" && l.RVTD == "" {
		return runPerftestPair(w, fs, cfg)
	}
	if cfg.receiveHere {
		return usagef("--receive-here is for the in-memory pair (for rvtd's devices it is the configuration's receive_here)")
	}
	if cfg.Device != ppDevice && l.RVTD == "" {
		return usagef("-d %s: IB device %s not found (rvt opens one device, %s)", cfg.Device, cfg.Device, ppDevice)
	}
	l.PathMTU = max(cfg.MTU, 4096) // a TAP we create gets room for 4096-byte packets
	link, err := devopen.Open(*l)
	if err != nil {
		return fmt.Errorf("link: %w", err)
	}
	defer link.Close()
	dev, err := link.OpenDevice(cfg.Device) // embedded, or rvtd's (--rvtd)
	if err != nil {
		return fmt.Errorf(" Couldn't get context for the device: %w", err)
	}
	defer dev.Close()
	var res perftest.Results
	err = perftest.Run(cfg.Config, perftest.Env{Dev: dev, Stdout: w, Stderr: fs.Output(), Warm: link.Warm, Results: &res})
	if err == nil && cfg.plot != "" {
		err = perfplot.Write(cfg.plot, perfplot.Panels(cfg.Test.String(), res, perfplot.Baselines{}, cfg.Gbits))
	}
	return perftestError(err)
}

// runPerftestPair is the embedded mode: client on rvt0, server on rvt1 of
// the in-memory pair, through TCP on 127.0.0.1 (an ephemeral port unless -p
// is given).
func runPerftestPair(w io.Writer, fs *pflag.FlagSet, cfg *perftestConfig) error {
	if cfg.Server != "" {
		return usagef("a server argument needs a link (--tap, --xdp or --udp): the in-memory pair does not reach other processes")
	}
	if cfg.Device != "rvt0" {
		return usagef("-d %s: IB device %s not found (the in-memory pair's client is rvt0)", cfg.Device, cfg.Device)
	}
	p, err := devopen.OpenPair(devopen.PairConfig{ReceiveHere: cfg.receiveHere})
	if err != nil {
		return err
	}
	defer p.Close()
	port := 0
	if fs.Changed("port") {
		port = cfg.Port
	}
	if cfg.Timeout == 0 {
		// Both sides are ours: a stuck run is a bug, not a slow peer.
		cfg.Timeout = time.Minute + time.Duration(cfg.Duration)*time.Second
	}
	var res perftest.Results
	err = perftest.RunPairWith(cfg.Config, p.N[0].Dev, p.N[1].Dev, perftest.PairOptions{Port: port, Stdout: w, Stderr: fs.Output(), Results: &res})
	if err == nil && cfg.plot != "" {
		err = plotPair(cfg, res)
	}
	return perftestError(err)
}

// plotPair draws an in-memory run with its baseline, measured now, in the
// same process.
func plotPair(cfg *perftestConfig, res perftest.Results) error {
	base, err := perfplot.MeasureBaselines(cfg.Test, res, cfg.Iters, pairMemcpyTime, cfg.Gbits)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	return perfplot.Write(cfg.plot, perfplot.Panels(cfg.Test.String(), res, base, cfg.Gbits))
}

// pairMemcpyTime is how long the memcpy baseline runs at each size.
const pairMemcpyTime = 20 * time.Millisecond

// perftestError maps the package's usage errors to the CLI's.
func perftestError(err error) error {
	var ue perftest.UsageError
	if errors.As(err, &ue) {
		return usageError{errors.New(strings.TrimSpace(ue.Error()))}
	}
	return err
}
