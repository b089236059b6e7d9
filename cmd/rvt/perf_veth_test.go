package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softverbs/softverbs/netdev/nettest"
	"github.com/softverbs/softverbs/rvt"
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
		_, mtus, err := cfg.check()
		if err != nil {
			t.Errorf("--mtu %q: %v", tc.mtus, err)
			continue
		}
		var got []int
		for _, m := range mtus {
			got = append(got, m.size)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("--mtu %q: MTUs %v, want %v", tc.mtus, got, tc.want)
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

// TestCQWaiterWait checks cqWaiter.wait's wake-ups, its deadline and stop,
// and that waits reuse one timer: a wait that timed out leaves no tick
// behind for the next, and a wait allocates nothing.
func TestCQWaiterWait(t *testing.T) {
	w := newCQWaiter()
	long := time.Now().Add(time.Hour)
	if err := w.wait(time.Now().Add(-time.Second), nil); err != errTimeout {
		t.Errorf("wait past the deadline: %v, want errTimeout", err)
	}
	if err := w.wait(time.Now().Add(10*time.Millisecond), nil); err != errTimeout {
		t.Errorf("wait with no event: %v, want errTimeout", err)
	}
	timer := w.timer
	if timer == nil {
		t.Fatal("a wait with a deadline made no timer")
	}
	w.notify(nil)
	w.notify(nil) // a second notification before the wait is one wake-up
	if err := w.wait(long, nil); err != nil {
		t.Errorf("wait after notify: %v", err)
	}
	stop := make(chan struct{})
	close(stop)
	if err := w.wait(long, stop); err != context.Canceled {
		t.Errorf("wait with stop closed: %v, want context.Canceled", err)
	}
	// A tick the timed-out wait left behind would end this one early
	// (timers never fire early, so the bound cannot fail otherwise).
	start := time.Now()
	if err := w.wait(start.Add(10*time.Millisecond), nil); err != errTimeout {
		t.Errorf("wait after a timeout: %v, want errTimeout", err)
	}
	if d := time.Since(start); d < 10*time.Millisecond {
		t.Errorf("wait with a 10ms deadline after a timeout returned after %v", d)
	}
	if w.timer != timer {
		t.Error("a later wait made a new timer")
	}
	w.notify(nil)
	if err := w.wait(time.Time{}, nil); err != nil {
		t.Errorf("wait with no deadline after notify: %v", err)
	}
	if n := testing.AllocsPerRun(100, func() {
		w.notify(nil)
		_ = w.wait(long, nil)
	}); n != 0 {
		t.Errorf("notify and wait: %v allocations, want 0", n)
	}
}

// TestSlotSGL checks the receive slots the ping-pong and message-rate
// loops repost: one SGE per slot, each a one-entry SGL capped at one
// entry, so an append cannot write into the next slot.
func TestSlotSGL(t *testing.T) {
	mr := &rvt.MR{IOVA: 0x1000, Lkey: 0x42}
	slots := slotSGEs(mr, 4, 8)
	for i := range uint64(4) {
		want := []rvt.SGE{{Addr: 0x1000 + i*8, Length: 8, Lkey: 0x42}}
		if got := slotSGL(slots, i); !slices.Equal(got, want) || cap(got) != 1 {
			t.Errorf("slot %d: %+v (cap %d), want %+v (cap 1)", i, got, cap(got), want)
		}
	}
}

// perfLatency is a latency whose half round trips have median med and
// 99th percentile p99, in µs.
func perfLatency(med, p99 float64) latency {
	rtts := make([]time.Duration, 100)
	for i := range rtts {
		rtts[i] = time.Duration(2 * med * float64(time.Microsecond))
	}
	rtts[99] = time.Duration(2 * p99 * float64(time.Microsecond))
	return latency{rtts: rtts}
}

// The table's rows line up with its header: every number ends where its
// column's name ends, also on the "busy xdp" rows (which were shifted
// and lacked the goodput columns) and on error rows, whatever the values.
func TestPerfTable(t *testing.T) {
	m4k, m1k := perfMTUs["4096"], perfMTUs["1024"]
	gb := func(v float64) runResult { return runResult{bytes: int64(v * 1e9), elapsed: time.Second} }
	baseLat := perfLatency(2.9, 4.4)
	xdp := perfLinkResult{write: gb(1.078), lat: perfLatency(6.2, 40.7), busy: perfLatency(14.2, 17514.1)}
	slow := perfLinkResult{write: gb(0.216), lat: perfLatency(9.2, 46.5), busy: perfLatency(4.7, 5.1)}
	table := perfHeader() +
		perfRows("xdp", m4k, xdp, gb(1.065), baseLat, perfLatency(2.6, 19.6)) +
		perfRows("udp", m4k, slow, gb(1.065), baseLat, latency{}) +
		perfRows("xdp", m1k, slow, gb(0.267), baseLat, perfLatency(4968, 8023.1)) +
		perfErrorRow("tap", m1k, errTimeout)
	want := "" +
		"link       mtu  veth WRITE_GB/s   UDP_GB/s    x_udp SEND_med SEND_p99  UDP_med  UDP_p99    lat_x  targets\n" +
		"xdp       4096  9000      1.078      1.065     1.01      6.2     40.7      2.9      4.4     2.14  goodput met, latency MISSED\n" +
		"busy xdp  4096  9000          -          -        -     14.2  17514.1      2.6     19.6     5.46  busy polling both sides: latency MISSED\n" +
		"udp       4096  9000      0.216      1.065    0.203      9.2     46.5      2.9      4.4     3.17  goodput MISSED\n" +
		"xdp       1024  1500      0.216      0.267    0.809      9.2     46.5      2.9      4.4     3.17  goodput MISSED, latency MISSED\n" +
		"busy xdp  1024  1500          -          -        -      4.7      5.1   4968.0   8023.1 0.000946  busy polling both sides: latency met\n" +
		"tap       1024  1500  error: timed out waiting for completions\n"
	if table != want {
		t.Errorf("table:\n%s\nwant:\n%s", table, want)
	}

	// Independently of the golden text: each right-aligned column's cells
	// end at the same offset as its name in the header.
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	ends := map[int]bool{}
	off := perfColumns[0].width
	for _, c := range perfColumns[1 : len(perfColumns)-1] {
		off += 1 + c.width
		ends[off] = true
		if lines[0][off-1] == ' ' || lines[0][off] != ' ' {
			t.Errorf("header: column %s does not end at %d", c.name, off)
		}
	}
	for _, l := range lines[1 : len(lines)-1] {
		for end := range ends {
			if end >= len(l) || l[end-1] == ' ' || l[end] != ' ' {
				t.Errorf("%q: no cell ends at offset %d", l, end)
			}
		}
	}
}
