package dropin_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
