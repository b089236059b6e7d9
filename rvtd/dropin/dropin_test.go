package dropin_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softverbs/softverbs/rvtd"
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

// earlyExit is a pingpong server that ended before it listened.
type earlyExit struct {
	err error
	out string
}

// pingpongTry runs a server on rvt0 and a client on rvt1 (GID index 1, the
// IPv4-mapped address), checks both exit 0 and print size*iters*2 bytes and
// iters iterations, and returns the client's result; or, if the server
// exits before it listens (a verb the daemon does not serve), how it ended.
func pingpongTry(t testing.TB, build, sock string, env []string, prog string, size, iters int, extra ...string) (pingpongResult, *earlyExit) {
	t.Helper()
	bin := tool(t, prog)
	port := freePort(t)
	args := append([]string{"-g", "1", "-p", fmt.Sprint(port), "-s", fmt.Sprint(size), "-n", fmt.Sprint(iters)}, extra...)
	timeout := 60*time.Second + time.Duration(iters)*time.Millisecond
	srv := start(t, build, sock, timeout, env, bin, append([]string{"-d", "rvt0"}, args...)...)
	for deadline := time.Now().Add(20 * time.Second); !listening(port); time.Sleep(10 * time.Millisecond) {
		select {
		case <-srv.done:
			err, out := srv.wait()
			return pingpongResult{}, &earlyExit{err, out}
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: port %d never listened", srv.name, port)
		}
	}
	cli := start(t, build, sock, timeout, env, bin, append(append([]string{"-d", "rvt1"}, args...), "127.0.0.1")...)
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
	return res, nil
}

// pingpong is pingpongTry where the daemon must serve everything.
func pingpong(t testing.TB, build, sock, prog string, size, iters int, extra ...string) pingpongResult {
	t.Helper()
	r, early := pingpongTry(t, build, sock, nil, prog, size, iters, extra...)
	if early != nil {
		t.Fatalf("%s %v: the server ended before listening: %v\n%s", prog, extra, early.err, early.out)
	}
	return r
}

// wantUnsupported checks a server that ended early did so cleanly: exit
// status 1 and the program's own message (marker).
func wantUnsupported(t testing.TB, early *earlyExit, marker string) {
	t.Helper()
	var ee *exec.ExitError
	if !errorAs(early.err, &ee) || ee.ExitCode() != 1 || !strings.Contains(early.out, marker) {
		t.Fatalf("server: %v, want exit status 1 and %q\n%s", early.err, marker, early.out)
	}
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

// ibv_rc_pingpong --new_send posts with the ibv_wr_* interface on a QP
// from ibv_create_qp_ex (rvtd/libibverbs/wr.c).
func TestPingpongNewSend(t *testing.T) {
	build := libs(t)
	sock := startDaemon(t)
	for _, extra := range [][]string{{"--new_send"}, {"--new_send", "-e"}} {
		t.Run(strings.Join(extra, " "), func(t *testing.T) {
			pingpong(t, build, sock, "ibv_rc_pingpong", 4096, 300, extra...)
		})
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
	runStandaloneC(t, build, "ring_test")
}

// runStandaloneC runs the C unit test build/test/name, which needs no daemon,
// and fails t unless it succeeds and prints PASS.
func runStandaloneC(t *testing.T, build, name string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(build, "test", name)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

// The verbs the pingpongs do not use, from C through the library
// (rvtd/libibverbs/tests/verbs_test.c): RDMA WRITE and READ, SEND with
// immediate and inline data, completion channel events, an extended CQ,
// resize_cq, four threads posting on one QP, fork, MRs sharing pages and
// deregistration, memory windows, the ibv_wr_* interface, and unsupported
// verbs failing with EOPNOTSUPP.
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
		if !externalDaemon() {
			t.Fatalf("this tree's rvtd serves reg_mr kind 2, but verbs_test says:\n%s", out)
		}
		t.Logf("the daemon at DROPIN_RVTD_SOCKET has no reg_mr kind 2: verbs_test with RVTD_MR=vm not run")
		return
	}
	if err != nil || !strings.Contains(out, "PASS") {
		t.Fatalf("verbs_test with RVTD_MR=vm: %v\n%s", err, out)
	}
}

// RVTD_MR=vm registers every region for process_vm_readv/writev (reg_mr
// kind 2): the pingpong pair runs. (An older daemon at DROPIN_RVTD_SOCKET
// answers EOPNOTSUPP, and the program must fail cleanly with the library's
// message and its own.)
func TestRegMRProcessVM(t *testing.T) {
	build := libs(t)
	sock := startDaemon(t)
	_, early := pingpongTry(t, build, sock, []string{"RVTD_MR=vm"}, "ibv_rc_pingpong", 4096, 100)
	if early != nil {
		if !externalDaemon() {
			t.Fatalf("this tree's rvtd serves reg_mr kind 2, but the server ended: %v\n%s", early.err, early.out)
		}
		wantUnsupported(t, early, "Couldn't register MR")
		if !strings.Contains(early.out, "does not serve process_vm registration (reg_mr kind 2), which this region needs (RVTD_MR=vm)") {
			t.Fatalf("no reason given:\n%s", early.out)
		}
		t.Logf("the daemon at DROPIN_RVTD_SOCKET has no reg_mr kind 2: clean failure checked")
	}
}

// ibv_srq_pingpong: 16 RC QPs taking receives from one SRQ, with and
// without completion events. (An older daemon at DROPIN_RVTD_SOCKET without
// SRQs answers create_srq with EOPNOTSUPP: the program must end cleanly.)
func TestSRQPingpong(t *testing.T) {
	build := libs(t)
	sock := startDaemon(t)
	for _, events := range []bool{false, true} {
		var extra []string
		if events {
			extra = []string{"-e"}
		}
		_, early := pingpongTry(t, build, sock, nil, "ibv_srq_pingpong", 4096, 200, extra...)
		if early != nil {
			if !externalDaemon() {
				t.Fatalf("ibv_srq_pingpong %v: %v\n%s", extra, early.err, early.out)
			}
			wantUnsupported(t, early, "Couldn't create SRQ")
			t.Logf("this rvtd has no SRQs: clean failure checked")
			return
		}
	}
}

// ibv_asyncwatch reads the context's async event socket: rvtd's shutdown
// sends IBV_EVENT_DEVICE_FATAL, then the socket ends and the tool's next
// ibv_get_async_event fails (exit 1).
func TestAsyncwatch(t *testing.T) {
	build := libs(t)
	bin := tool(t, "ibv_asyncwatch")
	srv, err := rvtd.New(nil, rvtd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "rvtd.sock")
	if err := srv.Listen(sock); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	p := start(t, build, sock, 30*time.Second, nil, bin, "-d", "rvt0")
	p.waitOutput(t, "async event FD", 20*time.Second) // rvt0 opened
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	err, out := p.wait()
	var ee *exec.ExitError
	if !strings.Contains(out, "event_type IBV_EVENT_DEVICE_FATAL (8)") || !errorAs(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("ibv_asyncwatch: %v, want DEVICE_FATAL then exit 1\n%s", err, out)
	}
}

// The library built with AddressSanitizer and UBSan (build/asan), the
// sanitizer runtimes preloaded into Debian's tools: ibv_devinfo -v, the
// RC, UC and UD pingpongs with and without -e, and verbs_test report no
// memory error, undefined behaviour or leak.
func TestASan(t *testing.T) {
	build := libs(t)
	asan := filepath.Join(build, "asan")
	env := sanitizerEnv(t)
	clean := func(t *testing.T, what, out string) {
		if bad := sanitizerReport(out); bad != "" {
			t.Fatalf("%s: %s\n%s", what, bad, out)
		}
	}
	sock := startDaemon(t)
	t.Run("devinfo", func(t *testing.T) {
		err, out := start(t, asan, sock, 60*time.Second, env, tool(t, "ibv_devinfo"), "-v").wait()
		clean(t, "ibv_devinfo", out)
		if err != nil || !strings.Contains(out, "hca_id:\trvt1") {
			t.Fatalf("ibv_devinfo: %v\n%s", err, out)
		}
	})
	t.Run("verbs_test", func(t *testing.T) {
		err, out := start(t, asan, sock, 120*time.Second, env, filepath.Join(build, "test", "verbs_test")).wait()
		clean(t, "verbs_test", out)
		if err != nil || !strings.Contains(out, "PASS") {
			t.Fatalf("verbs_test: %v\n%s", err, out)
		}
	})
	for _, prog := range []string{"ibv_rc_pingpong", "ibv_uc_pingpong", "ibv_ud_pingpong"} {
		for _, extra := range [][]string{nil, {"-e"}} {
			t.Run(strings.Join(append([]string{prog}, extra...), " "), func(t *testing.T) {
				r, early := pingpongTry(t, asan, sock, env, prog, 1024, 100, extra...)
				if early != nil {
					t.Fatalf("server ended early: %v\n%s", early.err, early.out)
				}
				if r.iters != 100 {
					t.Fatalf("%+v", r)
				}
			})
		}
	}
}

// TestExecLeavesSession (verbs_test exec, RVTD_MR=vm): a process opens
// rvt0, forks, and execs another program while its child keeps the
// session. The child's kind-2 MR of the process's memory reads before the
// exec and not after, and a registration after it is refused: as over the
// kernel, the session never reaches the new image (which, for a setuid
// program, would have handed a user root's memory).
func TestExecLeavesSession(t *testing.T) {
	build := libs(t)
	sock := startDaemon(t)
	bin := filepath.Join(build, "test", "verbs_test")
	p := start(t, build, sock, 60*time.Second, []string{"RVTD_MR=vm"}, bin, "exec", bin, "sleep", "2")
	err, out := p.wait()
	if strings.Contains(out, "NOKIND2") && externalDaemon() {
		t.Skip("the daemon at DROPIN_RVTD_SOCKET has no reg_mr kind 2")
	}
	if err != nil || !strings.Contains(out, "PASS") || strings.Contains(out, "FAIL") {
		t.Fatalf("verbs_test exec: %v\n%s", err, out)
	}
}
