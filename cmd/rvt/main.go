// Command rvt is the softverbs command-line tool: a demo of every verb on
// an in-memory fabric, device information and statistics.
//
//	rvt demo [flags]      RC, UC and UD traffic of every opcode, throughput, counters
//	rvt devinfo [flags]   device and port attributes, like ibv_devinfo -v
//	rvt stat [flags]      QPs and counters after a little traffic, like rdma statistic
//	rvt pingpong [flags] [server]
//	                      ibv_rc/uc/ud_pingpong against softverbs or rdma-core peers
//	rvt perf [flags]      goodput and latency over TAP, UDP and AF_XDP on a veth pair (root)
//	rvt help [command]
//
// Only pingpong talks to other processes: it needs a real link (a TAP or
// AF_XDP link needs root, a UDP link does not). perf needs root for its
// namespaces. demo, devinfo and stat need no root: their devices live in
// this process.
//
// This command parses flags and prints; what the tools do lives in
// internal/demo, internal/pingpong and internal/vethperf, on links that
// internal/devopen opens and traffic that internal/traffic makes.
//
// Flags follow getopt_long, as rdma-core's tools parse them: "-s1024",
// "-s 1024", "--size=1024", "--size 1024", "-ce", flags on either side of
// the positional argument, "--" to end the flags.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/softverbs/softverbs/internal/traffic"
	"github.com/softverbs/softverbs/rvt"
	"github.com/spf13/pflag"
)

// command is one subcommand: its flags are parsed into a config that run
// closes over.
type command struct {
	name, summary string
	flags         func(fs *pflag.FlagSet) (run func(w io.Writer) error)
	// args names the one optional positional argument ("" for none); run
	// reads it with fs.Arg(0).
	args string
}

// usageError is an error in the command line (a flag's value out of range,
// flags that exclude each other): run reports it with exit status 2, as it
// does a flag the parser refuses.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError with fmt.Errorf's text.
func usagef(format string, a ...any) error {
	return usageError{fmt.Errorf(format, a...)}
}

func commands() []command {
	return []command{
		{"demo", "RC, UC and UD traffic of every opcode on an in-memory fabric, a throughput run, counters",
			func(fs *pflag.FlagSet) func(io.Writer) error {
				cfg := defaultDemoConfig()
				fs.Float64Var(&cfg.Seconds, "seconds", cfg.Seconds, fmt.Sprintf("length of each throughput run, in seconds (more than 0, at most %d)", maxDemoSeconds))
				fs.IntVar(&cfg.Size, "size", cfg.Size, fmt.Sprintf("RDMA WRITE size of the throughput run, in bytes (1 to %d MiB)", traffic.MaxWriteSize>>20))
				fs.IntVar(&cfg.MTU, "mtu", cfg.MTU, "path MTU in bytes: 256, 512, 1024, 2048 or 4096")
				fs.Float64Var(&cfg.Loss, "loss", cfg.Loss, "probability that an RC frame is lost, in [0, 1) (shows retransmission)")
				fs.StringVar(&cfg.PCAP, "pcap", cfg.PCAP, "write rvt0's frames of the functional phase to this pcap `file`")
				fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the fabric and the fault profile")
				return func(w io.Writer) error { return runDemo(w, cfg) }
			}, ""},
		{"devinfo", "device and port attributes, GID and P_Key tables, like ibv_devinfo -v",
			func(fs *pflag.FlagSet) func(io.Writer) error {
				cfg := defaultDevinfoConfig()
				fs.BoolVar(&cfg.Loopback, "loopback", cfg.Loopback, "open the device without a link (loopback only)")
				fs.IntVar(&cfg.LinkMTU, "link-mtu", cfg.LinkMTU, "Ethernet MTU of the fabric port")
				fs.BoolVarP(&cfg.Verbose, "verbose", "v", cfg.Verbose, "print the device limits too (-v=false: leave them out)")
				rvtdFlag(fs, &cfg.RVTD)
				fs.StringVarP(&cfg.Device, "ib-dev", "d", cfg.Device, "the `device` (with --rvtd: the daemon's)")
				return func(w io.Writer) error { return runDevinfo(w, cfg) }
			}, ""},
		{"stat", "QPs and counters of the demo pair after a little traffic, like rdma statistic",
			func(fs *pflag.FlagSet) func(io.Writer) error {
				cfg := defaultStatConfig()
				fs.IntVar(&cfg.Messages, "messages", cfg.Messages, "RC SENDs (and as many WRITEs) to run first")
				fs.StringVar(&cfg.RVTD, "rvtd", "", "list the QPs of every session of the rvtd daemon on `socket` (with their pid and command) "+
					"and its counters, instead of running the demo pair (no value: the default socket)")
				fs.Lookup("rvtd").NoOptDefVal = rvt.DefaultSocket()
				fs.StringVarP(&cfg.Device, "ib-dev", "d", "", "with --rvtd: only this `device` (default every device of the daemon)")
				return func(w io.Writer) error { return runStat(w, cfg) }
			}, ""},
		{"pingpong", "ping-pong of SENDs like rdma-core's ibv_rc_pingpong, ibv_uc_pingpong and ibv_ud_pingpong; " +
			"with no server argument, wait for a client (root for --tap and --xdp)",
			func(fs *pflag.FlagSet) func(io.Writer) error {
				cfg := defaultPingpongConfig()
				pingpongFlags(fs, &cfg)
				return func(w io.Writer) error {
					cfg.Server = fs.Arg(0)
					return runPingpong(w, cfg)
				}
			}, "[server]"},
		perfCommand(),
		rpingCommand(), ucmatoseCommand(), udaddyCommand(), mckeyCommand(),
	}
}

// helpSummary is the summary of `rvt help`.
const helpSummary = "this text, or `rvt help <command>` for a command's flags"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run executes one command line and returns the exit status: 0 on success,
// 1 when the command failed, 2 for a usage error.
//
// Flags follow getopt_long, as rdma-core's tools parse them (pflag):
// "-s1024", "-s 1024", "--size=1024", "--size 1024", clustered short
// booleans ("-ce"), flags before, between and after the positional
// argument, and "--" to end the flags.
func run(args []string, stdout, stderr io.Writer) int {
	cmds := append(commands(), perftestCommands()...)
	if len(args) == 0 {
		usage(stderr, cmds)
		return 2
	}
	name, args := args[0], joinRVTDValue(args[1:])
	flagOut := stderr
	if name == "help" || name == "-h" || name == "-help" || name == "--help" {
		switch {
		case len(args) == 0:
			usage(stdout, cmds)
			return 0
		case len(args) > 1:
			fmt.Fprintf(stderr, "rvt help: unexpected arguments %q\n", args[1:])
			return 2
		case args[0] == "help":
			fmt.Fprintf(stdout, "usage: rvt help [command]\n\n%s.\n", strings.ToUpper(helpSummary[:1])+helpSummary[1:])
			return 0
		}
		name, args, flagOut = args[0], []string{"--help"}, stdout
	}
	for _, c := range cmds {
		if c.name != name {
			continue
		}
		fs := pflag.NewFlagSet("rvt "+c.name, pflag.ContinueOnError)
		fs.SortFlags = false // the order they are registered in, as the tools' usage texts have them
		fs.SetOutput(flagOut)
		runCmd := c.flags(fs)
		synopsis := "rvt " + c.name + " [flags]"
		if c.args != "" {
			synopsis += " " + c.args
		}
		fs.Usage = func() {
			fmt.Fprintf(fs.Output(), "usage: %s\n\n%s.\n\nflags:\n", synopsis, c.summary)
			fs.PrintDefaults()
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, pflag.ErrHelp) {
				return 0
			}
			fmt.Fprintf(stderr, "rvt %s: %v\n%s", c.name, err, helpHint(c.name))
			return 2
		}
		maxArgs := 0
		if c.args != "" {
			maxArgs = 1
		}
		if fs.NArg() > maxArgs {
			fmt.Fprintf(stderr, "rvt %s: unexpected arguments %q\n", c.name, fs.Args())
			return 2
		}
		if err := runCmd(stdout); err != nil {
			fmt.Fprintf(stderr, "rvt %s: %v\n", c.name, err)
			if errors.As(err, new(usageError)) {
				fmt.Fprint(stderr, helpHint(c.name))
				return 2
			}
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "rvt: unknown command %q\n\n", name)
	usage(stderr, cmds)
	return 2
}

// helpHint is the line after a usage error.
func helpHint(name string) string {
	return fmt.Sprintf("run 'rvt help %s' for its flags\n", name)
}

func usage(w io.Writer, cmds []command) {
	fmt.Fprintf(w, "rvt: the softverbs command-line tool\n\nusage: rvt <command> [flags]\n\ncommands:\n")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-8s %s\n", "help", helpSummary)
	fmt.Fprintf(w, "\ndemo, devinfo and stat need no root: their devices live in this process and talk over\n"+
		"an in-memory fabric. pingpong needs root for --tap and --xdp (not for --udp); perf needs root.\n")
}
