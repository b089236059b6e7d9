package main

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/softverbs/softverbs/internal/vethperf"
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
		if len(f) >= 12 && f[0] == "busy" {
			// busy xdp mtu veth - - -: SEND med/p99, UDP med/p99, lat_x.
			rows["busy "+f[1]+" "+f[2]]++
			for i, s := range f[7:12] {
				v, err := strconv.ParseFloat(s, 64)
				if err != nil || !(v > 0) {
					t.Errorf("%s: column %d is %q, want a positive number", line, i+7, s)
				}
			}
			continue
		}
		if len(f) >= 9 && f[0] == "cpu" {
			// cpu kind mtu: WRITE x x UDP sendmmsg/recvmmsg (GB/s); ...
			rows["cpu "+f[1]+" "+strings.TrimSuffix(f[2], ":")]++
			for _, s := range []string{f[4], strings.TrimPrefix(f[8], "(")} {
				if v, err := strconv.ParseFloat(s, 64); err != nil || !(v > 0) {
					t.Errorf("%s: %q, want a positive number", line, s)
				}
			}
			continue
		}
		if len(f) < 12 || !slices.Contains(vethperf.LinkKinds, f[0]) {
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
	kinds := []string{"busy xdp"}
	for _, k := range vethperf.LinkKinds {
		kinds = append(kinds, k, "cpu "+k)
	}
	for _, kind := range kinds {
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
	for _, tc := range []struct {
		args []string
		want string // in stderr, beside the flag's name
	}{
		{[]string{"perf", "--link", "ib"}, `--link "ib"`},
		{[]string{"perf", "--mtu", "2048"}, `--mtu "2048": perf measures path MTUs 4096 and 1024, not "2048"`},
		// The whole value is quoted, and the bad element named in it.
		{[]string{"perf", "--mtu", "4096,,1024"}, `--mtu "4096,,1024": perf measures path MTUs 4096 and 1024, not ""`},
		{[]string{"perf", "--mtu", "4096, 1024,x"}, `--mtu "4096, 1024,x": perf measures path MTUs 4096 and 1024, not "x"`},
		{[]string{"perf", "--mtu", "4096,1024,4096"}, `--mtu "4096,1024,4096": path MTU 4096 given twice`},
		{[]string{"perf", "--mtu", "1024, 1024"}, `--mtu "1024, 1024": path MTU 1024 given twice`},
		{[]string{"perf", "--seconds", "0"}, "--seconds 0"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, code)
		}
		// The flags are checked before root is: the message names the
		// bad flag.
		if !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: stderr %q does not say %s", tc.args, errb.String(), tc.want)
		}
	}
	// Valid lists pass the check, in the order given.
	for _, tc := range []struct {
		mtus string
		want []int
	}{
		{"4096,1024", []int{4096, 1024}},
		{"1024, 4096", []int{1024, 4096}},
		{"1024", []int{1024}},
	} {
		cfg := defaultPerfConfig()
		cfg.MTUs = tc.mtus
		vc, err := cfg.check()
		if err != nil {
			t.Errorf("--mtu %q: %v", tc.mtus, err)
			continue
		}
		var got []int
		for _, m := range vc.MTUs {
			got = append(got, m.Size)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("--mtu %q: MTUs %v, want %v", tc.mtus, got, tc.want)
		}
	}
}
