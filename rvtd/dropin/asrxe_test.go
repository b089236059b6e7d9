package dropin_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Behaviours of Debian's rdmacm-utils on our libraries that differed from
// Linux rxe (seen against the rxe guest of scripts/interop-rvtd.sh).

// TestRdmacmNoNeighbour: Debian's rping, ucmatose and udaddy to an address
// of the fabric's subnet that no device answers for fail at address
// resolution within their rdma_resolve_addr timeout (2 s), with
// ADDR_ERROR and -ETIMEDOUT, as over Linux rxe when ARP gets no answer
// (seen against the rxe guest: "cma event RDMA_CM_EVENT_ADDR_ERROR, error
// -110" after 2 s). They used to get ADDR_RESOLVED and wait for the CM's
// REQ retries (over a minute).
func TestRdmacmNoNeighbour(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	const nobody = "198.18.0.77"
	for _, tc := range []struct {
		tool string
		args []string
		want string
	}{
		{"rping", []string{"-c", "-a", nobody, "-C", "1"}, "RDMA_CM_EVENT_ADDR_ERROR, error -110"},
		{"rping", []string{"-c", "-a", nobody, "-I", cmClientAddr, "-C", "1"}, "RDMA_CM_EVENT_ADDR_ERROR, error -110"},
		{"ucmatose", []string{"-s", nobody}, "RDMA_CM_EVENT_ADDR_ERROR, error: -110"},
		{"udaddy", []string{"-s", nobody, "-b", cmClientAddr}, "RDMA_CM_EVENT_ADDR_ERROR, error: -110"},
	} {
		t.Run(tc.tool+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			took := runFailing(t, build, sock, tool(t, tc.tool), tc.args, tc.want)
			if took < 1500*time.Millisecond || took > 15*time.Second {
				t.Errorf("took %v, want about the 2 s resolve timeout", took)
			}
		})
	}
}

// TestUdaddyNoListener: Debian's udaddy to a port nobody listens on ends
// as over Linux rxe (seen against the rxe guest): the SIDR_REP status
// UNSUPPORTED comes as "RDMA_CM_EVENT_UNREACHABLE, error: 1", exit status
// 1. It used to come as REJECTED with reason 8.
func TestUdaddyNoListener(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	bin := tool(t, "udaddy")
	// udaddy's port is 7174; nobody listens there.
	err, out := run(t, build, sock, 30*time.Second, bin, "-s", cmServerAddr, "-b", cmClientAddr)
	var ee *exec.ExitError
	if err == nil || !errorAs(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("%v, want exit status 1\n%s", err, out)
	}
	if want := "RDMA_CM_EVENT_UNREACHABLE, error: 1"; !strings.Contains(out, want) {
		t.Errorf("no %q:\n%s", want, out)
	}
}

// TestRdmacmNetUnreachable: Debian's rping and ucmatose to an address off
// the devices' subnet (the fabric's 198.18.0.0/24, no gateway) fail as
// over Linux rxe with no route (measured in the rxe guest, 10.50.0.2/24
// with no default route, to 10.60.0.1): rdma_resolve_addr itself fails
// with ENETUNREACH at once when no source address is given; from a bound
// source address (rping -I) the destination is taken as on-link and the
// resolution ends in ADDR_ERROR -110 at its 2 s timeout. They used to
// get ADDR_ERROR -110 after 2 s in both cases.
func TestRdmacmNetUnreachable(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	const off = "10.60.0.1"
	for _, tc := range []struct {
		tool    string
		args    []string
		want    string
		slowest time.Duration
	}{
		{"rping", []string{"-c", "-a", off, "-C", "1"}, "rdma_resolve_addr: Network is unreachable", time.Second},
		{"ucmatose", []string{"-s", off}, "failure getting addr: Network is unreachable", time.Second},
		{"rping", []string{"-c", "-a", off, "-I", cmClientAddr, "-C", "1"}, "RDMA_CM_EVENT_ADDR_ERROR, error -110", 15 * time.Second},
	} {
		t.Run(tc.tool+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			took := runFailing(t, build, sock, tool(t, tc.tool), tc.args, tc.want)
			if took > tc.slowest {
				t.Errorf("took %v, want at most %v", took, tc.slowest)
			}
		})
	}
}

// runFailing runs bin with args against the daemon at sock and returns
// how long it took; it fails t unless bin exits with a failure status and
// prints want.
func runFailing(t *testing.T, build, sock, bin string, args []string, want string) time.Duration {
	t.Helper()
	t0 := time.Now()
	err, out := run(t, build, sock, 30*time.Second, bin, args...)
	took := time.Since(t0)
	var ee *exec.ExitError
	if err == nil || !errorAs(err, &ee) || ee.ExitCode() <= 0 {
		t.Errorf("%v, want an exit status\n%s", err, out)
	}
	if !strings.Contains(out, want) {
		t.Errorf("no %q:\n%s", want, out)
	}
	return took
}
