package dropin_test

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softverbs/softverbs/internal/devopen"
	"github.com/softverbs/softverbs/netdev"
)

// TestRdmacmMcastLeave runs rvtd/librdmacm/tests/mcast_test.c:
// rdma_leave_multicast waits, as librdmacm over ucma does, until the
// program acknowledged the events about the join it was handed (a leave
// while MULTICAST_JOIN is held returns only after the ack); it returns
// at once when they are acked, for an event never read, and on a
// synchronous ID. Again under ASan and UBSan.
func TestRdmacmMcastLeave(t *testing.T) {
	build := rdmacmLib(t)
	runCTest(t, build, startDaemon(t), "mcast_test")
}

// TestRdmacmMcastError: "mcast_test lost" joins 239.1.2.42 from rvt0's
// address; the test then takes the address out of rvt0's GID table (as
// when it leaves the interface), and the program gets
// RDMA_CM_EVENT_MULTICAST_ERROR with status -ENETRESET and the join's
// context, then leaves the group.
func TestRdmacmMcastError(t *testing.T) {
	build := rdmacmLib(t)
	srv, sock := serveDaemon(t, nil)
	p := start(t, build, sock, 30*time.Second, nil, filepath.Join(build, "test", "mcast_test"), "lost")
	p.waitOutput(t, "joined", 10*time.Second)
	mac, _ := devopen.NodeAddrs(0)
	if err := srv.Device("rvt0").SetAddrs(netdev.GIDOrder(mac, []netip.Addr{netip.MustParseAddr("198.18.0.9")})); err != nil {
		t.Fatal(err)
	}
	if err, out := p.wait(); err != nil || !strings.Contains(out, "PASS") {
		t.Fatalf("mcast_test lost: %v\n%s", err, out)
	}
}
