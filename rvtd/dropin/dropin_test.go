package dropin_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestDevices(t *testing.T) {
	build := libs(t)
	bin := tool(t, "ibv_devices")
	sock := startDaemon(t)
	err, out := run(t, build, sock, 30*time.Second, bin)
	if err != nil {
		t.Fatalf("ibv_devices: %v\n%s", err, out)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^\s+rvt0\s+[0-9a-f]{16}$`),
		regexp.MustCompile(`(?m)^\s+rvt1\s+[0-9a-f]{16}$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("ibv_devices output lacks %v:\n%s", want, out)
		}
	}
}

func TestDevinfo(t *testing.T) {
	build := libs(t)
	bin := tool(t, "ibv_devinfo")
	sock := startDaemon(t)
	err, out := run(t, build, sock, 30*time.Second, bin, "-v")
	if err != nil {
		t.Fatalf("ibv_devinfo -v: %v\n%s", err, out)
	}
	for _, want := range []string{
		"hca_id:\trvt0", "hca_id:\trvt1", "PORT_ACTIVE (4)", "link_layer:\t\tEthernet",
		"::ffff:198.18.0.1, RoCE v2", "::ffff:198.18.0.2, RoCE v2", "phys_port_cnt:\t\t\t1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("ibv_devinfo -v output lacks %q:\n%s", want, out)
		}
	}
	// One device by name, as -d does.
	err, out = run(t, build, sock, 30*time.Second, bin, "-d", "rvt1")
	if err != nil || !strings.Contains(out, "hca_id:\trvt1") || strings.Contains(out, "rvt0") {
		t.Errorf("ibv_devinfo -d rvt1: %v\n%s", err, out)
	}
}

// With no daemon the library says so on stderr and the program gets the
// clean error of an empty machine.
func TestNoDaemon(t *testing.T) {
	build := libs(t)
	bin := tool(t, "ibv_devices")
	sock := filepath.Join(t.TempDir(), "nobody.sock")
	err, out := run(t, build, sock, 30*time.Second, bin)
	var ee *exec.ExitError
	if err == nil || !errorAs(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("ibv_devices without rvtd: %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(out, "cannot reach rvtd at "+sock) || !strings.Contains(out, "is rvtd running?") {
		t.Errorf("no clear message without rvtd:\n%s", out)
	}
	if strings.Contains(out, "rvt0") {
		t.Errorf("devices listed without rvtd:\n%s", out)
	}
}

var (
	bytesRe = regexp.MustCompile(`(?m)^(\d+) bytes in ([\d.]+) seconds = ([\d.]+) Mbit/sec$`)
	itersRe = regexp.MustCompile(`(?m)^(\d+) iters in ([\d.]+) seconds = ([\d.]+) usec/iter$`)
)

// pingpongResult is what one side of an ibv_*_pingpong printed.
type pingpongResult struct {
	bytes, iters, usec, mbit float64
}

func parsePingpong(t testing.TB, who, out string) pingpongResult {
	t.Helper()
	b := bytesRe.FindStringSubmatch(out)
	i := itersRe.FindStringSubmatch(out)
	if b == nil || i == nil {
		t.Fatalf("%s printed no result:\n%s", who, out)
	}
	return pingpongResult{bytes: atoi(t, b[1]), mbit: atoi(t, b[3]), iters: atoi(t, i[1]), usec: atoi(t, i[3])}
}

// pingpong runs a server on rvt0 and a client on rvt1 (GID index 1, the
// IPv4-mapped address), checks both exit 0 and print size*iters*2 bytes and
// iters iterations, and returns the client's result.
func pingpong(t testing.TB, build, sock, prog string, size, iters int, extra ...string) pingpongResult {
	t.Helper()
	bin := tool(t, prog)
	port := freePort(t)
	args := append([]string{"-g", "1", "-p", fmt.Sprint(port), "-s", fmt.Sprint(size), "-n", fmt.Sprint(iters)}, extra...)
	timeout := 60*time.Second + time.Duration(iters)*time.Millisecond
	srv := start(t, build, sock, timeout, nil, bin, append([]string{"-d", "rvt0"}, args...)...)
	waitListening(t, srv, port)
	cli := start(t, build, sock, timeout, nil, bin, append(append([]string{"-d", "rvt1"}, args...), "127.0.0.1")...)
	cerr, cout := cli.wait()
	serr, sout := srv.wait()
	if cerr != nil || serr != nil {
		t.Fatalf("%s %v: client %v, server %v\nclient:\n%s\nserver:\n%s", prog, extra, cerr, serr, cout, sout)
	}
	var res pingpongResult
	for _, side := range []struct{ who, out string }{{"client", cout}, {"server", sout}} {
		r := parsePingpong(t, prog+" "+side.who, side.out)
		if r.iters != float64(iters) || r.bytes != float64(2*size*iters) {
			t.Errorf("%s %s: %v iters and %v bytes, want %d and %d\n%s", prog, side.who, r.iters, r.bytes, iters, 2*size*iters, side.out)
		}
		if !strings.Contains(side.out, "GID ::ffff:198.18.0.") {
			t.Errorf("%s %s: no IPv4-mapped GID in the addresses:\n%s", prog, side.who, side.out)
		}
		if side.who == "client" {
			res = r
		}
	}
	return res
}

func TestPingpong(t *testing.T) {
	build := libs(t)
	sock := startDaemon(t)
	for _, tc := range []struct {
		prog string
		size int
	}{
		{"ibv_rc_pingpong", 4096},
		{"ibv_uc_pingpong", 4096},
		{"ibv_ud_pingpong", 1024}, // at most the MTU less the GRH
	} {
		for _, events := range []bool{false, true} {
			name := strings.TrimPrefix(tc.prog, "ibv_")
			var extra []string
			if events {
				name += "/events"
				extra = []string{"-e"}
			}
			t.Run(name, func(t *testing.T) {
				r := pingpong(t, build, sock, tc.prog, tc.size, 300, extra...)
				t.Logf("%s %v: %.2f usec/iter, %.1f Mbit/s", tc.prog, extra, r.usec, r.mbit)
			})
		}
	}
}

// A multi-SGE, inline-free size that spans several pages, and a message of
// one byte (RC), through the remapped malloc'd buffers.
func TestPingpongSizes(t *testing.T) {
	build := libs(t)
	sock := startDaemon(t)
	for _, size := range []int{1, 65536, 1 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			pingpong(t, build, sock, "ibv_rc_pingpong", size, 50)
		})
	}
}

// The ring code's C unit test (rvtd/libibverbs/tests/ring_test.c).
func TestRingC(t *testing.T) {
	build := libs(t)
	out, err := exec.Command(filepath.Join(build, "test", "ring_test")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("ring_test: %v\n%s", err, out)
	}
}

// The verbs the pingpongs do not use, from C through the library
// (rvtd/libibverbs/tests/verbs_test.c): RDMA WRITE and READ, SEND with
// immediate and inline data, completion channel events, resize_cq, four
// threads posting on one QP, ibv_fork_init and fork, MRs sharing pages and
// deregistration, and unsupported verbs failing with EOPNOTSUPP.
// With RVTD_MR=vm every MR is kind 2; a daemon without kind 2 makes the
// program exit 77 with NOKIND2 at its first registration.
func TestVerbsC(t *testing.T) {
	build := libs(t)
	sock := startDaemon(t)
	bin := filepath.Join(build, "test", "verbs_test")
	err, out := run(t, build, sock, 120*time.Second, bin)
	if err != nil || !strings.Contains(out, "PASS") {
		t.Fatalf("verbs_test: %v\n%s", err, out)
	}
	p := start(t, build, sock, 120*time.Second, []string{"RVTD_MR=vm"}, bin)
	err, out = p.wait()
	var ee *exec.ExitError
	if errorAs(err, &ee) && ee.ExitCode() == 77 && strings.Contains(out, "NOKIND2") {
		t.Logf("this rvtd has no reg_mr kind 2: verbs_test with RVTD_MR=vm not run")
		return
	}
	if err != nil || !strings.Contains(out, "PASS") {
		t.Fatalf("verbs_test with RVTD_MR=vm: %v\n%s", err, out)
	}
}

// RVTD_MR=vm registers every region for process_vm_readv/writev (reg_mr
// kind 2). A daemon that serves it runs the pingpong pair; one that does
// not answers EOPNOTSUPP, and the program fails cleanly with the library's
// message and its own.
func TestRegMRProcessVM(t *testing.T) {
	build := libs(t)
	bin := tool(t, "ibv_rc_pingpong")
	sock := startDaemon(t)
	port := freePort(t)
	env := []string{"RVTD_MR=vm"}
	args := []string{"-g", "1", "-p", fmt.Sprint(port), "-n", "100", "-s", "4096"}
	srv := start(t, build, sock, 60*time.Second, env, bin, append([]string{"-d", "rvt0"}, args...)...)
	for !listening(port) {
		select {
		case <-srv.done:
			serr, sout := srv.wait()
			var ee *exec.ExitError
			if !strings.Contains(sout, "does not serve process_vm registration") || !errorAs(serr, &ee) ||
				ee.ExitCode() != 1 || !strings.Contains(sout, "Couldn't register MR") || !strings.Contains(sout, "RVTD_MR=vm") {
				t.Fatalf("server: %v, want kind 2 served or exit 1 with the messages\n%s", serr, sout)
			}
			t.Logf("this rvtd has no reg_mr kind 2: clean failure checked")
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	cli := start(t, build, sock, 60*time.Second, env, bin, append(append([]string{"-d", "rvt1"}, args...), "127.0.0.1")...)
	cerr, cout := cli.wait()
	serr, sout := srv.wait()
	if cerr != nil || serr != nil {
		t.Fatalf("kind 2 pingpong: client %v, server %v\n%s\n%s", cerr, serr, cout, sout)
	}
	for _, out := range []string{cout, sout} {
		if r := parsePingpong(t, "ibv_rc_pingpong", out); r.iters != 100 || r.bytes != 2*4096*100 {
			t.Errorf("kind 2 pingpong: %+v\n%s", r, out)
		}
	}
}
