package dropin_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/softverbs/softverbs/rvtd"
)

// IPv6 addresses of rvt0 and rvt1 for the IPv6 rdma_cm tests.
const (
	cmServerAddr6 = "fd00:5e::1"
	cmClientAddr6 = "fd00:5e::2"
)

// startDaemonIPv6 runs an in-process rvtd whose rvt0 and rvt1 have IPv6
// addresses (fd00:5e::1 and ::2 on one in-memory fabric). With
// DROPIN_RVTD_SOCKET (another daemon, IPv4) the test is skipped.
func startDaemonIPv6(t *testing.T) string {
	t.Helper()
	if externalDaemon() {
		t.Skip("DROPIN_RVTD_SOCKET: the daemon's devices have no IPv6 addresses")
	}
	cfg := &rvtd.Config{Devices: []rvtd.DeviceConfig{
		{Name: "rvt0", Fabric: "fabric0", IP: cmServerAddr6 + "/64", MAC: "02:00:5e:00:00:01"},
		{Name: "rvt1", Fabric: "fabric0", IP: cmClientAddr6 + "/64", MAC: "02:00:5e:00:00:02"},
	}}
	_, sock := serveDaemon(t, cfg)
	return sock
}

// TestRdmacmIPv6 runs Debian's rping, ucmatose and udaddy over IPv6
// addresses through the drop-in librdmacm (rping: 10 pings, both ends'
// data; ucmatose and udaddy: 2 connections, 10 messages each).
func TestRdmacmIPv6(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemonIPv6(t)
	t.Run("rping", func(t *testing.T) {
		bin := tool(t, "rping")
		port := fmt.Sprint(freePort(t))
		const n = 10
		cout, sout := cmPair(t, build, sock,
			bin, []string{"-s", "-a", cmServerAddr6, "-p", port, "-C", fmt.Sprint(n), "-v"},
			bin, []string{"-c", "-a", cmServerAddr6, "-I", cmClientAddr6, "-p", port, "-C", fmt.Sprint(n), "-v"})
		for i := 0; i < n; i++ {
			want := fmt.Sprintf("ping data: rdma-ping-%d: ", i)
			if !strings.Contains(cout, want) || !strings.Contains(sout, "server "+want) {
				t.Errorf("no %q:\nclient:\n%s\nserver:\n%s", want, cout, sout)
			}
		}
	})
	for _, name := range []string{"ucmatose", "udaddy"} {
		t.Run(name, func(t *testing.T) { cmTool6(t, build, sock, name) })
	}
}

// cmTool6 runs a server bound to rvt0's IPv6 address and a client bound
// to rvt1's.
func cmTool6(t *testing.T, build, sock, name string) {
	bin := tool(t, name)
	var sp, cp []string
	if name == "ucmatose" { // udaddy's -p is the port space; its port is 7174
		port := fmt.Sprint(freePort(t))
		sp, cp = []string{"-p", port}, []string{"-p", port}
	}
	cout, sout := cmPair(t, build, sock,
		bin, append(sp, "-b", cmServerAddr6, "-c", "2", "-C", "10"),
		bin, append(cp, "-s", cmServerAddr6, "-b", cmClientAddr6, "-c", "2", "-C", "10"))
	for _, side := range []struct{ who, out string }{{"client", cout}, {"server", sout}} {
		for _, want := range []string{"data transfers complete", "test complete", "return status 0"} {
			if !strings.Contains(side.out, want) {
				t.Errorf("%s: no %q:\n%s", side.who, want, side.out)
			}
		}
	}
}
