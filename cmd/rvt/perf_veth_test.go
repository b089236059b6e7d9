package main

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softverbs/softverbs/netdev/nettest"
)

// TestPerfVeth runs `rvt perf --link all` briefly and checks that every
// link kind has a row of positive numbers and that nothing was left
// behind. Performance is reported, not asserted.
func TestPerfVeth(t *testing.T) {
	nettest.RequireRoot(t) // skips without root; fails as root without ip
	var out, errb bytes.Buffer
	code := run([]string{"perf", "--link", "all", "--seconds", "0.3"}, &out, &errb)
	t.Logf("\n%s%s", out.String(), errb.String())
	if code != 0 {
		t.Fatalf("rvt perf exited with %d: %s", code, errb.String())
	}
	rows := map[string]int{}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) >= 9 && f[0] == "busy" {
			// busy xdp mtu veth: SEND med/p99, UDP med/p99, lat_x.
			rows["busy "+f[1]+" "+f[2]]++
			for i, s := range f[4:9] {
				v, err := strconv.ParseFloat(s, 64)
				if err != nil || !(v > 0) {
					t.Errorf("%s: column %d is %q, want a positive number", line, i+5, s)
				}
			}
			continue
		}
		if len(f) < 12 || !slices.Contains(perfLinkKinds, f[0]) {
			continue
		}
		rows[f[0]+" "+f[1]]++
		// mtu, veth, WRITE, UDP, x_udp, SEND med/p99, UDP med/p99, lat_x.
		for i, s := range f[1:11] {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || !(v > 0) {
				t.Errorf("%s: column %d is %q, want a positive number", line, i+2, s)
			}
		}
	}
	for _, kind := range append([]string{"busy xdp"}, perfLinkKinds...) {
		for _, mtu := range []string{"4096", "1024"} {
			if rows[kind+" "+mtu] != 1 {
				t.Errorf("%d rows for link %s at MTU %s, want 1", rows[kind+" "+mtu], kind, mtu)
			}
		}
	}
	if ns, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		prefix := "svp" + strconv.FormatInt(int64(os.Getpid()), 16)
		if strings.Contains(string(ns), prefix) {
			t.Errorf("namespaces left behind:\n%s", ns)
		}
	}
}

// TestPerfNonRoot checks the message a user without root gets.
func TestPerfNonRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("checks the refusal when not root")
	}
	var out, errb bytes.Buffer
	if code := run([]string{"perf", "--seconds", "0.1"}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(errb.String(), "needs root") {
		t.Errorf("stderr %q does not say it needs root", errb.String())
	}
}

// TestPerfFlags checks flag validation, which needs no root.
func TestPerfFlags(t *testing.T) {
	for _, args := range [][]string{
		{"perf", "--link", "ib"},
		{"perf", "--mtu", "2048"},
		{"perf", "--seconds", "0"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 1 {
			t.Errorf("%v: exit %d, want 1", args, code)
		}
		// Without root, refusing for that reason also exits 1: the message
		// must name the bad flag.
		if !strings.Contains(errb.String(), args[1]+" ") {
			t.Errorf("%v: stderr %q does not name %s", args, errb.String(), args[1])
		}
	}
}

// TestLatencyQuantile checks the quantiles of a run's round trips, which
// the run sorts once when it ends.
func TestLatencyQuantile(t *testing.T) {
	lat := latency{rtts: []time.Duration{50, 10, 40, 20, 30}}.sorted()
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0, 10}, {0.5, 30}, {0.99, 50}, {1, 50},
	} {
		if got := lat.quantile(tc.q); got != tc.want {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := (latency{}).quantile(0.5); got != 0 {
		t.Errorf("quantile of no samples = %v, want 0", got)
	}
}
