package main

// --rvtd [SOCKET]: the tools on a device of an rvtd daemon (rvt.Dial)
// instead of one of their own, -d naming the daemon's device.

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"

	"github.com/softverbs/softverbs/internal/demo"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd/client"
)

// rvtdUsage is the --rvtd flag's help text.
const rvtdUsage = "use the device (-d; --ib-dev for the rdma_cm tools) of the rvtd daemon on `socket` (no value: $RVTD_SOCKET, " +
	"/run/rvtd/rvtd.sock for root, else $XDG_RUNTIME_DIR/rvtd.sock)"

// rvtdFlag registers --rvtd with an optional value: alone it means the
// default socket (rvt.DefaultSocket, as rvtd listens).
func rvtdFlag(fs *pflag.FlagSet, sock *string) {
	fs.StringVar(sock, "rvtd", *sock, rvtdUsage)
	fs.Lookup("rvtd").NoOptDefVal = rvt.DefaultSocket()
}

// joinRVTDValue rewrites "--rvtd PATH" as "--rvtd=PATH" when PATH names a
// socket file (it holds a '/'): a flag with an optional value takes one
// only after '=' in getopt_long, so "--rvtd ./rvtd.sock" would otherwise
// leave the path as the positional argument (the server of pingpong).
// Anything else after --rvtd (a flag, a host name) is left alone.
func joinRVTDValue(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if a == "--rvtd" && i+1 < len(args) && strings.Contains(args[i+1], "/") && !strings.HasPrefix(args[i+1], "-") {
			out = append(out, "--rvtd="+args[i+1])
			i++
			continue
		}
		out = append(out, a)
	}
	return out
}

// runStatRVTD prints the QPs of the daemon's devices (every session's,
// with the owner's pid and command, as `rdma resource show qp`) and the
// devices' counters. dev "" is every device of the daemon.
func runStatRVTD(w io.Writer, sock, dev string) error {
	names := []string{dev}
	if dev == "" {
		c, err := client.Dial(sock, "rvt-stat")
		if err != nil {
			return fmt.Errorf("rvtd %s: %w", sock, err)
		}
		ds, err := c.ListDevices()
		c.Close()
		if err != nil {
			return fmt.Errorf("rvtd %s: list devices: %w", sock, err)
		}
		names = names[:0]
		for _, d := range ds {
			names = append(names, d.Name)
		}
	}
	var counters []func()
	for _, name := range names {
		d, err := rvt.Dial(sock, name)
		if err != nil {
			return err
		}
		defer d.Close()
		for _, q := range d.QPs() {
			fmt.Fprintf(w, "link %s/1 lqpn %d type %v state %v sq-psn %d unacked-psn %d rq-psn %d msn %d sq-posted %d rq-posted %d comm %s pid %d\n",
				name, q.Num, q.Type, q.State, uint32(q.NextPSN), uint32(q.UnackedPSN), uint32(q.ExpectedPSN),
				q.MSN, q.SQPosted, q.RQPosted, q.Comm, q.PID)
		}
		counters = append(counters, func() { demo.PrintCounters(w, "link "+name+"/1", d.Counters()) })
	}
	fmt.Fprintln(w)
	for _, f := range counters {
		f()
	}
	return nil
}
