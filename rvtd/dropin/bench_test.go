package dropin_test

import (
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/internal/devopen"
	pp "github.com/softverbs/softverbs/internal/pingpong"
	"github.com/softverbs/softverbs/netdev/fabric"
)

// TestBenchmarkPingpong (DROPIN_BENCH=1) measures Debian's ibv_rc_pingpong
// through rvtd and the drop-in library beside rvt pingpong's code with both
// ends embedded in this process on an in-memory fabric, in the same run, rounds alternating: 8-byte messages (half round trip =
// usec/iter / 2) and 64 KiB messages (the Mbit/s the tool prints), busy
// polling and with -e. DROPIN_BENCH_ITERS scales the counts (default
// 100000 small, 5000 large).
func TestBenchmarkPingpong(t *testing.T) {
	if os.Getenv("DROPIN_BENCH") == "" {
		t.Skip("set DROPIN_BENCH=1 to run the benchmark")
	}
	build := libs(t)
	sock := startDaemon(t)
	small, large := 100000, 5000
	if s := os.Getenv("DROPIN_BENCH_ITERS"); s != "" {
		var k int
		fmt.Sscan(s, &k)
		small, large = k, k/20+1
	}
	type cfg struct {
		size, iters int
		events      bool
	}
	cfgs := []cfg{{8, small, false}, {8, small, true}, {65536, large, false}, {65536, large, true}}
	res := map[string][]pingpongResult{}
	key := func(who string, c cfg) string { return fmt.Sprintf("%s/%d/%v", who, c.size, c.events) }
	for round := 0; round < 3; round++ {
		for _, c := range cfgs {
			var extra []string
			if c.events {
				extra = []string{"-e"}
			}
			res[key("rvtd", c)] = append(res[key("rvtd", c)], pingpong(t, build, sock, "ibv_rc_pingpong", c.size, c.iters, extra...))
			res[key("rvt", c)] = append(res[key("rvt", c)], embeddedPingpong(t, c.size, c.iters, c.events))
		}
	}
	med := func(rs []pingpongResult, f func(pingpongResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| measure | mode | ibv_rc_pingpong through rvtd | rvt pingpong embedded, both ends in one process | ratio |\n|---|---|---|---|---|\n")
	for _, c := range cfgs {
		mode := "busy poll"
		if c.events {
			mode = "-e"
		}
		a, e := res[key("rvtd", c)], res[key("rvt", c)]
		if c.size == 8 {
			x, y := med(a, func(r pingpongResult) float64 { return r.usec / 2 }), med(e, func(r pingpongResult) float64 { return r.usec / 2 })
			fmt.Fprintf(&b, "| 8 B half round trip (-n %d) | %s | %.1f us | %.1f us | %.2fx |\n", c.iters, mode, x, y, x/y)
		} else {
			x, y := med(a, func(r pingpongResult) float64 { return r.mbit }), med(e, func(r pingpongResult) float64 { return r.mbit })
			fmt.Fprintf(&b, "| 64 KiB pingpong (-n %d) | %s | %.0f Mbit/s | %.0f Mbit/s | %.2fx |\n", c.iters, mode, x, y, x/y)
		}
	}
	t.Log(b.String())
}

// embeddedPingpong runs rvt pingpong's server and client (internal/pingpong,
// what `rvt pingpong` runs) in this process, each with its own device on
// one in-memory fabric, as the library's pair runs rvt0 and rvt1 in rvtd.
func embeddedPingpong(t testing.TB, size, iters int, events bool) pingpongResult {
	t.Helper()
	fab := fabric.New(clock.Real(), 1)
	links := [2]*devopen.Link{}
	for i := range links {
		mac, addrs := devopen.NodeAddrs(i)
		l, err := devopen.Open(devopen.Config{Fabric: fab, MAC: mac.String(), IP: addrs[1].Unmap().String()})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		links[i] = l
	}
	cfg := pp.DefaultConfig()
	cfg.Port, cfg.GIDIndex, cfg.Iters, cfg.Size, cfg.Events = 0, 1, iters, size, events
	cfg.Timeout = 120*time.Second + time.Duration(iters)*time.Millisecond
	listening := make(chan net.Addr, 1)
	scfg := cfg
	scfg.OnListen = func(a net.Addr) { listening <- a }
	type out struct {
		r   pp.Result
		err error
	}
	sdone := make(chan out, 1)
	go func() {
		r, err := pp.Run(scfg, links[0], func(bool, pp.Dest) {})
		if err != nil {
			close(listening)
		}
		sdone <- out{r, err}
	}()
	a, ok := <-listening
	if !ok {
		t.Fatalf("embedded server: %v", (<-sdone).err)
	}
	ccfg := cfg
	ccfg.Server, ccfg.Port = "127.0.0.1", a.(*net.TCPAddr).Port
	cr, cerr := pp.Run(ccfg, links[1], func(bool, pp.Dest) {})
	so := <-sdone
	if cerr != nil || so.err != nil {
		t.Fatalf("embedded pingpong: client %v, server %v", cerr, so.err)
	}
	if cr.Iters != iters || cr.Bytes != int64(2*size*iters) {
		t.Fatalf("embedded pingpong: %+v", cr)
	}
	usec := float64(cr.Usec)
	return pingpongResult{bytes: float64(cr.Bytes), iters: float64(cr.Iters), usec: usec / float64(cr.Iters), mbit: float64(cr.Bytes) * 8 / usec}
}
