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
// AF_XDP link needs root, a UDP link does not). The others need no root:
// their devices live in this process.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// command is one subcommand: its flags are parsed into a config that run
// closes over.
type command struct {
	name, summary string
	flags         func(fs *flag.FlagSet) (run func(w io.Writer) error)
	// args names the one optional positional argument ("" for none); run
	// reads it with fs.Arg(0).
	args string
}

func commands() []command {
	return []command{
		{"demo", "RC, UC and UD traffic of every opcode on an in-memory fabric, a throughput run, counters",
			func(fs *flag.FlagSet) func(io.Writer) error {
				cfg := defaultDemoConfig()
				fs.Float64Var(&cfg.Seconds, "seconds", cfg.Seconds, "length of each throughput run, in seconds")
				fs.IntVar(&cfg.Size, "size", cfg.Size, "RDMA WRITE size of the throughput run, in bytes")
				fs.IntVar(&cfg.MTU, "mtu", cfg.MTU, "path MTU in bytes: 256, 512, 1024, 2048 or 4096")
				fs.Float64Var(&cfg.Loss, "loss", cfg.Loss, "probability that an RC frame is lost (shows retransmission)")
				fs.StringVar(&cfg.PCAP, "pcap", cfg.PCAP, "write rvt0's frames of the functional phase to this pcap `file`")
				fs.Int64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the fabric and the fault profile")
				return func(w io.Writer) error { return runDemo(w, cfg) }
			}, ""},
		{"devinfo", "device and port attributes, GID and P_Key tables, like ibv_devinfo -v",
			func(fs *flag.FlagSet) func(io.Writer) error {
				cfg := defaultDevinfoConfig()
				fs.BoolVar(&cfg.Loopback, "loopback", cfg.Loopback, "open the device without a link (loopback only)")
				fs.IntVar(&cfg.LinkMTU, "link-mtu", cfg.LinkMTU, "Ethernet MTU of the fabric port")
				fs.BoolVar(&cfg.Verbose, "v", cfg.Verbose, "print the device limits too")
				return func(w io.Writer) error { return runDevinfo(w, cfg) }
			}, ""},
		{"stat", "QPs and counters of the demo pair after a little traffic, like rdma statistic",
			func(fs *flag.FlagSet) func(io.Writer) error {
				cfg := defaultStatConfig()
				fs.IntVar(&cfg.Messages, "messages", cfg.Messages, "RC SENDs (and as many WRITEs) to run first")
				return func(w io.Writer) error { return runStat(w, cfg) }
			}, ""},
		{"pingpong", "ping-pong of SENDs like rdma-core's ibv_rc_pingpong, ibv_uc_pingpong and ibv_ud_pingpong; " +
			"with no server argument, wait for a client",
			func(fs *flag.FlagSet) func(io.Writer) error {
				cfg := defaultPingpongConfig()
				pingpongFlags(fs, &cfg)
				return func(w io.Writer) error {
					cfg.Server = fs.Arg(0)
					return runPingpong(w, cfg)
				}
			}, "[server]"},
		perfCommand(),
	}
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run executes one command line and returns the exit status: 0 on success,
// 1 when the command failed, 2 for a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 {
		usage(stderr, cmds)
		return 2
	}
	name, args := args[0], args[1:]
	flagOut := stderr
	if name == "help" || name == "-h" || name == "-help" || name == "--help" {
		if len(args) == 0 {
			usage(stdout, cmds)
			return 0
		}
		name, args, flagOut = args[0], []string{"-h"}, stdout
	}
	for _, c := range cmds {
		if c.name != name {
			continue
		}
		fs := flag.NewFlagSet("rvt "+c.name, flag.ContinueOnError)
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
		if err := parseInterspersed(fs, args, c.args != ""); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
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
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "rvt: unknown command %q\n\n", name)
	usage(stderr, cmds)
	return 2
}

// parseInterspersed parses args into fs and leaves the positional
// arguments, in the order given, as fs.Args. With positional true they may
// also stand before or between the flags, as getopt allows ("rvt pingpong
// 10.0.0.1 -n 10"); after a "--" everything is positional.
func parseInterspersed(fs *flag.FlagSet, args []string, positional bool) error {
	if err := fs.Parse(args); err != nil || !positional {
		return err
	}
	var pos []string
	for {
		rest := fs.Args()
		// Parse stops at the first positional argument, or just past "--".
		if len(rest) == 0 || endsAtSeparator(fs, args[:len(args)-len(rest)]) {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
		if err := fs.Parse(args); err != nil {
			return err
		}
	}
	if len(pos) == fs.NArg() {
		return nil // nothing was interspersed: fs.Args is pos already
	}
	return fs.Parse(append([]string{"--"}, pos...))
}

// endsAtSeparator reports whether the arguments fs.Parse consumed end
// with a "--" separator, rather than with a "--" that is the value of a
// flag ("-d --"). It walks them as the flag package does: a flag without
// "=" that is not boolean takes the next argument as its value.
func endsAtSeparator(fs *flag.FlagSet, consumed []string) bool {
	for i := 0; i < len(consumed); i++ {
		a := consumed[i]
		if a == "--" {
			return i == len(consumed)-1
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				i++ // its value
			}
		}
	}
	return false
}

func usage(w io.Writer, cmds []command) {
	fmt.Fprintf(w, "rvt: the softverbs command-line tool (no root needed)\n\nusage: rvt <command> [flags]\n\ncommands:\n")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-8s %s\n", "help", "this text, or `rvt help <command>` for a command's flags")
}
