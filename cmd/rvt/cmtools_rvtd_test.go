package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// runClient runs the client args until the server has taken it: a
// client that ran before the server listened was rejected (the daemon's
// CM agent answers a REQ to a port nobody holds with REJ 8) and prints
// rejected; it is run again for up to 20 s. It returns the last run's
// output and error.
//
// Polling with a bind of the server's port from a session of the test
// would be cheaper, but the probe holds the port while it looks: a server
// binding in that moment gets EADDRINUSE (ports are the device's across
// sessions), which made TestPerftestRDMACMThroughRVTD fail in CI.
func runClient(args []string, rejected string) (*bytes.Buffer, error) {
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cli, out := rvtProcess(args...)
		err := cli.Run()
		if err == nil || time.Now().After(deadline) || !strings.Contains(out.String(), rejected) {
			return out, err
		}
	}
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
		server   []string
		client   []string
		want     string // in the client's output
		wantSrv  string // in the server's
		rejected string // the client's output when the server does not listen yet (REJ, or a SIDR_REP that is not OK)
	}{
		{"rping", []string{"rping", "-s", "-v", "-C", "5", "-p", port}, []string{"rping", "-c", "-a", "198.18.0.1", "-v", "-V", "-C", "5", "-p", port},
			"ping data: rdma-ping-4: ", "server ping data: rdma-ping-4: ", "REJECTED"},
		{"ucmatose", []string{"ucmatose", "-c", "4", "-p", port}, []string{"ucmatose", "-s", "198.18.0.1", "-c", "4", "-p", port},
			"data transfers complete", "data transfers complete", "REJECTED"},
		{"udaddy", []string{"udaddy", "-c", "2"}, []string{"udaddy", "-s", "198.18.0.1", "-c", "2"},
			"data transfers complete", "data transfers complete", "RDMA_CM_EVENT_UNREACHABLE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, srvOut := rvtProcess(append(tc.server, "--rvtd", sock, "--ib-dev", "rvt0", "--timeout", "60s")...)
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			defer srv.Process.Kill() // by PID, if it is still running
			cliOut, err := runClient(append(tc.client, "--rvtd", sock, "--ib-dev", "rvt1", "--timeout", "60s"), tc.rejected)
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
	cliOut, err := runClient(append(common, "-d", "rvt1", "198.18.0.1"), "cm: rejected")
	if err != nil {
		t.Fatalf("client: %v\n%s\nserver:\n%s", err, cliOut, srvOut)
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, srvOut)
	}
	if !regexp.MustCompile(`(?m)^ 65536 +100 `).MatchString(cliOut.String()) {
		t.Errorf("client output has no result line:\n%s\nserver:\n%s", cliOut, srvOut)
	}
}
