package main

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// waitListening waits until a listener holds port on rvt0: a bind of the
// port in a session of the test's own is then EADDRINUSE (ports are the
// device's across sessions).
func waitListening(t *testing.T, sock string, ps uint16, port string) {
	t.Helper()
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(sock, "probe")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.CreateEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		id, err := ch.CreateID(0, ps, 2)
		if err != nil {
			t.Fatal(err)
		}
		err = id.BindAddr(netip.AddrPortFrom(netip.MustParseAddr("198.18.0.1"), uint16(p)))
		if _, derr := id.Destroy(); derr != nil {
			t.Fatal(derr)
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			return
		}
	}
	t.Fatalf("nobody listens on port %d", p)
}

// TestCMToolsThroughRVTD runs rping, ucmatose and udaddy as server and
// client processes on the daemon's rvt0 and rvt1 (--rvtd --ib-dev): their
// connection manager is the daemon's (rdma_cm through rvtd, cm on an
// rvt.Dial device).
func TestCMToolsThroughRVTD(t *testing.T) {
	sock := startDaemon(t)
	port := fmt.Sprint(23515 + os.Getpid()%500)
	for _, tc := range []struct {
		name     string
		ps       uint16 // the server's port space and port
		port     string
		server   []string
		client   []string
		want     string // in the client's output
		wantSrv  string // in the server's
		rejected string // the client's output when the server does not listen yet
	}{
		{"rping", proto.PSTCP, port, []string{"rping", "-s", "-v", "-C", "5", "-p", port}, []string{"rping", "-c", "-a", "198.18.0.1", "-v", "-V", "-C", "5", "-p", port},
			"ping data: rdma-ping-4: ", "server ping data: rdma-ping-4: ", "REJECTED"},
		{"ucmatose", proto.PSTCP, port, []string{"ucmatose", "-c", "4", "-p", port}, []string{"ucmatose", "-s", "198.18.0.1", "-c", "4", "-p", port},
			"data transfers complete", "data transfers complete", "REJECTED"},
		{"udaddy", proto.PSUDP, "7174", []string{"udaddy", "-c", "2"}, []string{"udaddy", "-s", "198.18.0.1", "-c", "2"},
			"data transfers complete", "data transfers complete", "REJECTED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, srvOut := rvtProcess(append(tc.server, "--rvtd", sock, "--ib-dev", "rvt0", "--timeout", "60s")...)
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			defer srv.Process.Kill() // by PID, if it is still running
			waitListening(t, sock, tc.ps, tc.port)
			var cli *exec.Cmd
			var cliOut *bytes.Buffer
			var err error
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				cli, cliOut = rvtProcess(append(tc.client, "--rvtd", sock, "--ib-dev", "rvt1", "--timeout", "60s")...)
				if err = cli.Run(); err == nil || time.Now().After(deadline) || !strings.Contains(cliOut.String(), tc.rejected) {
					break
				}
			}
			if err != nil {
				t.Fatalf("client: %v\n%s\nserver:\n%s", err, cliOut, srvOut)
			}
			if err := srv.Wait(); err != nil {
				t.Fatalf("server: %v\n%s", err, srvOut)
			}
			if !strings.Contains(cliOut.String(), tc.want) || !strings.Contains(srvOut.String(), tc.wantSrv) {
				t.Errorf("client:\n%s\nserver:\n%s", cliOut, srvOut)
			}
			if regexp.MustCompile(`(?i)fail|error`).MatchString(cliOut.String() + srvOut.String()) {
				t.Errorf("errors in the output:\nclient:\n%s\nserver:\n%s", cliOut, srvOut)
			}
		})
	}
}

// TestPerftestRDMACMThroughRVTD: ib_write_bw with -R (the QPs connected
// through rdma_cm, in the daemon) as two processes.
func TestPerftestRDMACMThroughRVTD(t *testing.T) {
	sock := startDaemon(t)
	port := fmt.Sprint(24515 + os.Getpid()%500)
	common := []string{"ib_write_bw", "-R", "--rvtd", sock, "-n", "100", "-p", port, "--timeout", "60s"}
	srv, srvOut := rvtProcess(append(common, "-d", "rvt0")...)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill() // by PID, if it is still running
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server:\n%s", srvOut)
		}
	})
	waitListening(t, sock, proto.PSTCP, port)
	cli, cliOut := rvtProcess(append(common, "-d", "rvt1", "198.18.0.1")...)
	if err := cli.Run(); err != nil {
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, cliOut, srvOut)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, srvOut)
	}
	if !regexp.MustCompile(`(?m)^ 65536 +100 `).MatchString(cliOut.String()) {
		t.Errorf("client output has no result line:\n%s\nserver:\n%s", cliOut, srvOut)
	}
}
