// Package dropin_test runs Debian's unmodified rdma-core binaries
// (ibverbs-utils) against rvtd through the drop-in libibverbs.so.1 of
// rvtd/libibverbs, as a program would run them with LD_LIBRARY_PATH.
package dropin_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softverbs/softverbs/internal/syncbuf"
	"github.com/softverbs/softverbs/rvtd"
)

// root is the module's top directory (this file is rvtd/dropin/...).
func root(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

var (
	buildOnce sync.Once
	buildErr  error
	buildOut  []byte
)

// libs builds the drop-in libraries (make libs) once per test binary and
// returns build/. Without gcc or the rdma-core headers it skips when not
// root (nothing can install them) and fails as root (make deps installs
// them, as CI does).
func libs(t testing.TB) string {
	t.Helper()
	top := root(t)
	_, gccErr := exec.LookPath("gcc")
	_, hdrErr := os.Stat("/usr/include/infiniband/verbs.h")
	if gccErr != nil || hdrErr != nil {
		if os.Geteuid() != 0 {
			t.Skip("gcc or libibverbs-dev missing and not root (make deps installs them as root)")
		}
		t.Fatalf("gcc (%v) or /usr/include/infiniband/verbs.h (%v) missing: run make deps", gccErr, hdrErr)
	}
	buildOnce.Do(func() {
		cmd := exec.Command("make", "--no-print-directory", "libs")
		cmd.Dir = top
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("make libs: %v\n%s", buildErr, buildOut)
	}
	build := filepath.Join(top, "build")
	if _, err := os.Stat(filepath.Join(build, "lib", "libibverbs.so.1")); err != nil {
		t.Fatalf("make libs built no library: %v\n%s", err, buildOut)
	}
	return build
}

// tool finds one of Debian's binaries; missing is a skip when not root and
// a failure as root (make deps installs ibverbs-utils).
func tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Geteuid() != 0 {
			t.Skipf("%s missing and not root (make deps installs ibverbs-utils as root)", name)
		}
		t.Fatalf("%s missing: run make deps", name)
	}
	return p
}

// externalDaemon reports whether the tests use a daemon of another build
// (DROPIN_RVTD_SOCKET), which may lack what this tree's rvtd serves.
func externalDaemon() bool { return os.Getenv("DROPIN_RVTD_SOCKET") != "" }

// startDaemon runs an in-process rvtd on a socket in a temporary directory,
// serving rvt0 and rvt1 on one in-memory fabric. DROPIN_RVTD_SOCKET names
// a running daemon to use instead (another build, or one on a TAP link
// whose rvt0 and rvt1 are the same two names).
func startDaemon(t testing.TB) string {
	t.Helper()
	if s := os.Getenv("DROPIN_RVTD_SOCKET"); s != "" {
		return s
	}
	_, sock := serveDaemon(t, nil)
	return sock
}

// daemons maps the sockets of serveDaemon's daemons to them, for tests
// that ask an in-process daemon what its CM agents hold (cmPairEnv).
var daemons sync.Map

// listeners returns how many rdma_cm IDs listen on the devices of the
// daemon at sock, and false for a daemon not of this process.
func listeners(sock string) (int, bool) {
	v, ok := daemons.Load(sock)
	if !ok {
		return 0, false
	}
	return v.(*rvtd.Server).CMStats().Agent.Listeners, true
}

// serveDaemon runs an in-process rvtd with the devices of cfg (nil: the
// defaults) on a socket in a temporary directory, shut down at cleanup;
// it returns the server and the socket.
func serveDaemon(t testing.TB, cfg *rvtd.Config) (*rvtd.Server, string) {
	t.Helper()
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	srv, err := rvtd.New(cfg, rvtd.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "rvtd.sock")
	if err := srv.Listen(sock); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	daemons.Store(sock, srv)
	t.Cleanup(func() {
		daemons.Delete(sock)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return srv, sock
}

// proc is one program run with the drop-in library.
type proc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr syncbuf.Buffer
	done           chan struct{}
	err            error
	cancel         context.CancelFunc
}

// start runs bin with LD_LIBRARY_PATH at build/lib and RVTD_SOCKET at sock;
// the process is killed (by its PID, through the context) after timeout.
func start(t testing.TB, build, sock string, timeout time.Duration, env []string, bin string, args ...string) *proc {
	t.Helper()
	return startStdin(t, build, sock, timeout, env, nil, bin, args...)
}

// startStdin is start with the program's standard input read from stdin
// (nil: none).
func startStdin(t testing.TB, build, sock string, timeout time.Duration, env []string, stdin io.Reader, bin string, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	p := &proc{name: filepath.Base(bin) + " " + strings.Join(args, " "), done: make(chan struct{}), cancel: cancel}
	p.cmd = exec.CommandContext(ctx, bin, args...)
	p.cmd.Stdin = stdin
	p.cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+filepath.Join(build, "lib"), "RVTD_SOCKET="+sock)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		cancel()
		t.Fatalf("%s: %v", p.name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		cancel()
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// wait returns the exit error and the output.
func (p *proc) wait() (error, string) {
	<-p.done
	return p.err, p.stdout.String() + p.stderr.String()
}

// waitOutput waits until p has printed text on stdout; p ending first,
// or d passing, fails t.
func (p *proc) waitOutput(t testing.TB, text string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for !strings.Contains(p.stdout.String(), text) {
		select {
		case <-p.done:
			if !strings.Contains(p.stdout.String(), text) {
				err, out := p.wait()
				t.Fatalf("%s ended (%v) before printing %q:\n%s", p.name, err, text, out)
			}
		case <-deadline:
			t.Fatalf("%s did not print %q in %v:\n%s", p.name, text, d, p.stdout.String()+p.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// run is start then wait.
func run(t testing.TB, build, sock string, timeout time.Duration, bin string, args ...string) (error, string) {
	t.Helper()
	return start(t, build, sock, timeout, nil, bin, args...).wait()
}

// freePort is a TCP port nobody listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// listening reports whether some socket listens on TCP port (from
// /proc/net/tcp{,6}, so that probing does not take the pingpong server's
// only accept).
func listening(port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// waitListening waits until port listens or p exits.
func waitListening(t testing.TB, p *proc, port int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if listening(port) {
			return
		}
		select {
		case <-p.done:
			_, out := p.wait()
			t.Fatalf("%s exited before listening: %v\n%s", p.name, p.err, out)
		default:
		}
	}
	t.Fatalf("%s: port %d never listened", p.name, port)
}

// atoi parses a number the output printed.
func atoi(t testing.TB, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("bad number %q: %v", s, err)
	}
	return v
}

// sanitizerEnv is the environment that runs Debian's tools (or our test
// programs) against the libraries of build/asan: gcc's AddressSanitizer
// and UBSan runtimes preloaded, a leak or memory error exiting 99, the
// first undefined behaviour exiting 98.
func sanitizerEnv(t testing.TB) []string {
	t.Helper()
	var preload []string
	for _, rt := range []string{"libasan.so", "libubsan.so"} {
		out, err := exec.Command("gcc", "-print-file-name="+rt).Output()
		p := strings.TrimSpace(string(out))
		if err != nil || !filepath.IsAbs(p) {
			t.Fatalf("gcc has no %s (%v): gcc's sanitizer runtimes are part of its package", rt, err)
		}
		preload = append(preload, p)
	}
	return []string{"LD_PRELOAD=" + strings.Join(preload, " "), "ASAN_OPTIONS=detect_leaks=1:exitcode=99",
		"UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=98"}
}

// sanitizerReport returns what a sanitizer reported in out (its first
// marker), or "".
func sanitizerReport(out string) string {
	for _, bad := range []string{"Sanitizer", "runtime error"} {
		if strings.Contains(out, bad) {
			return bad
		}
	}
	return ""
}

// runCTest runs one of our C test programs (build/test/NAME) against the
// libraries, then against their ASan and UBSan builds; each run must
// print PASS, exit 0, and (the second) report nothing.
func runCTest(t *testing.T, build, sock, name string, args ...string) {
	t.Helper()
	bin := filepath.Join(build, "test", name)
	err, out := run(t, build, sock, 60*time.Second, bin, args...)
	if err != nil || !strings.Contains(out, "PASS") {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	err, out = start(t, filepath.Join(build, "asan"), sock, 60*time.Second, sanitizerEnv(t), bin, args...).wait()
	if bad := sanitizerReport(out); err != nil || !strings.Contains(out, "PASS") || bad != "" {
		t.Fatalf("%s under ASan and UBSan: %v %s\n%s", name, err, bad, out)
	}
}
