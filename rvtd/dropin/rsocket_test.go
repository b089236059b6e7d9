package dropin_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// rsockets (rsocket.c) under Debian's unmodified rstream, riostream and
// rcopy: a server on rvt0's address, a client on rvt1's.

// rstreamLine: a result line, "name bytes xfers iters total time Gb/sec
// usec/xfer" ("64_lat  64 1 100k 12m 0.58s 0.0 2.93").
var rstreamLine = regexp.MustCompile(`(?m)^(\S+)\s+\S+\s+\S+\s+\S+\s+\S+\s+[0-9.]+s\s+[0-9.]+\s+[0-9.]+$`)

// rsPair runs a server of bin with args, then its client with the same
// args and -s, and returns both outputs; both must exit 0 and print at
// least one result line each.
func rsPair(t *testing.T, build, sock, bin string, args ...string) (string, string) {
	t.Helper()
	port := fmt.Sprint(freePort(t))
	all := append([]string{"-p", port}, args...)
	cout, sout := cmPair(t, build, sock, bin, append([]string{"-b", cmServerAddr}, all...),
		bin, append([]string{"-s", cmServerAddr, "-b", cmClientAddr}, all...))
	for who, out := range map[string]string{"client": cout, "server": sout} {
		if !rstreamLine.MatchString(out) {
			t.Errorf("%s %v: %s printed no result:\n%s", filepath.Base(bin), args, who, out)
		}
	}
	return cout, sout
}

func TestRstream(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	bin := tool(t, "rstream")
	for _, args := range [][]string{
		{"-C", "200", "-S", "1000", "-T", "v"},
		{"-C", "100", "-S", "100000", "-T", "b", "-T", "v"},
		{"-C", "100", "-S", "70000", "-T", "n", "-T", "v"},
		{"-C", "100", "-S", "4096", "-T", "a", "-T", "v"},
		{"-C", "1000", "-S", "10", "-I", "5", "-B", "8192", "-T", "v"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			rsPair(t, build, sock, bin, args...)
		})
	}
}
