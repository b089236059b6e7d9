package dropin_test

import (
	"context"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/rvtd"
)

// TestRdmacmMcastLeave runs rvtd/librdmacm/tests/mcast_test.c:
// rdma_leave_multicast waits, as librdmacm over ucma does, until the
// program acknowledged the events about the join it was handed (a leave
// while MULTICAST_JOIN is held returns only after the ack); it returns
// at once when they are acked, for an event never read, and on a
// synchronous ID. Again under ASan and UBSan.
func TestRdmacmMcastLeave(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	bin := filepath.Join(build, "test", "mcast_test")
	err, out := run(t, build, sock, 60*time.Second, bin)
	if err != nil || !strings.Contains(out, "PASS") {
		t.Fatalf("mcast_test: %v\n%s", err, out)
	}
	var preload []string
	for _, rt := range []string{"libasan.so", "libubsan.so"} {
		o, err := exec.Command("gcc", "-print-file-name="+rt).Output()
		if err != nil || !filepath.IsAbs(strings.TrimSpace(string(o))) {
			t.Fatalf("gcc has no %s (%v)", rt, err)
		}
		preload = append(preload, strings.TrimSpace(string(o)))
	}
	env := []string{"LD_PRELOAD=" + strings.Join(preload, " "), "ASAN_OPTIONS=detect_leaks=1:exitcode=99",
		"UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=98"}
	err, out = start(t, filepath.Join(build, "asan"), sock, 60*time.Second, env, bin).wait()
	if err != nil || !strings.Contains(out, "PASS") || strings.Contains(out, "Sanitizer") || strings.Contains(out, "runtime error") {
		t.Fatalf("mcast_test under ASan: %v\n%s", err, out)
	}
}

// TestRdmacmMcastError: "mcast_test lost" joins 239.1.2.42 from rvt0's
// address; the test then takes the address out of rvt0's GID table (as
// when it leaves the interface), and the program gets
// RDMA_CM_EVENT_MULTICAST_ERROR with status -ENETRESET and the join's
// context, then leaves the group.
func TestRdmacmMcastError(t *testing.T) {
	build := rdmacmLib(t)
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
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	p := start(t, build, sock, 30*time.Second, nil, filepath.Join(build, "test", "mcast_test"), "lost")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.stdout.String(), "joined") {
		if time.Now().After(deadline) {
			err, out := p.wait()
			t.Fatalf("no join: %v\n%s", err, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mac, _ := devopen.NodeAddrs(0)
	if err := srv.Device("rvt0").SetAddrs(netdev.GIDOrder(mac, []netip.Addr{netip.MustParseAddr("198.18.0.9")})); err != nil {
		t.Fatal(err)
	}
	if err, out := p.wait(); err != nil || !strings.Contains(out, "PASS") {
		t.Fatalf("mcast_test lost: %v\n%s", err, out)
	}
}
