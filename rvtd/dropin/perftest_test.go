package dropin_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// perftestRow returns the fields of the result row under the "#bytes"
// header of a perftest tool's output.
func perftestRow(out string) []string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.Contains(l, "#bytes") && i+1 < len(lines) {
			return strings.Fields(lines[i+1])
		}
	}
	return nil
}

// Debian's perftest 4.5 through the library: its binaries link libmlx5 and
// libefa, which load because the library has their IBVERBS_PRIVATE_34
// imports (privstubs.c); the tools then run on rvt0 and rvt1 with -x 1
// (the IPv4 GID), server and client, with the default post path and
// --use_old_post_send. (perftest 4.5 creates no extended QP on these
// devices either way, checked with gdb: the ibv_wr_* path is exercised by
// ibv_rc_pingpong --new_send.)
func TestPerftest(t *testing.T) {
	build := libs(t)
	sock := startDaemon(t)
	for _, tc := range []struct {
		prog  string
		iters int
		extra []string
	}{
		{"ib_write_bw", 300, nil},
		{"ib_write_bw", 300, []string{"--use_old_post_send"}},
		{"ib_send_bw", 300, nil},
		{"ib_read_bw", 300, nil},
		{"ib_atomic_bw", 300, nil},
		{"ib_send_lat", 300, nil},
		{"ib_write_lat", 300, nil},
		{"ib_read_lat", 300, nil},
		// The other transports and modes users reach for: UD and UC,
		// several QPs, both directions, completion events, an SRQ,
		// inline data, atomics' latency, outstanding reads.
		{"ib_send_bw", 300, []string{"-c", "UD"}},
		{"ib_send_lat", 300, []string{"-c", "UD"}},
		{"ib_write_bw", 300, []string{"-c", "UC"}},
		{"ib_send_lat", 300, []string{"-c", "UC"}},
		{"ib_write_bw", 300, []string{"-q", "4"}},
		{"ib_send_bw", 300, []string{"-b"}},
		{"ib_send_bw", 300, []string{"-e"}},
		{"ib_send_bw", 300, []string{"--use-srq"}},
		{"ib_write_lat", 300, []string{"-I", "64", "-s", "64"}},
		{"ib_atomic_lat", 300, nil},
		{"ib_read_bw", 300, []string{"-o", "16"}},
	} {
		t.Run(strings.Join(append([]string{tc.prog}, tc.extra...), " "), func(t *testing.T) {
			bin := tool(t, tc.prog)
			port := freePort(t)
			args := append([]string{"-x", "1", "-p", fmt.Sprint(port), "-n", fmt.Sprint(tc.iters)}, tc.extra...)
			srv := start(t, build, sock, 60*time.Second, nil, bin, append([]string{"-d", "rvt0"}, args...)...)
			waitListening(t, srv, port)
			cli := start(t, build, sock, 60*time.Second, nil, bin, append(append([]string{"-d", "rvt1"}, args...), "127.0.0.1")...)
			cerr, cout := cli.wait()
			serr, sout := srv.wait()
			if cerr != nil || serr != nil {
				t.Fatalf("client %v, server %v\nclient:\n%s\nserver:\n%s", cerr, serr, cout, sout)
			}
			for _, side := range []struct{ who, out string }{{"client", cout}, {"server", sout}} {
				row := perftestRow(side.out)
				if strings.HasSuffix(tc.prog, "_lat") && side.who == "server" && row == nil {
					continue // the latency tools' server prints no result for some tests
				}
				want := tc.iters
				if len(tc.extra) == 2 && tc.extra[0] == "-q" { // iterations per QP
					want *= 4
				}
				if len(row) < 3 || row[1] != fmt.Sprint(want) {
					t.Errorf("%s: no result row with %d iterations:\n%s", side.who, want, side.out)
				}
				if !strings.Contains(side.out, "GID: 00:00:00:00:00:00:00:00:00:00:255:255:198:18:00:0") {
					t.Errorf("%s: no IPv4-mapped GID:\n%s", side.who, side.out)
				}
			}
			t.Logf("%s %v: %s", tc.prog, tc.extra, strings.Join(perftestRow(cout), " "))
		})
	}
}
