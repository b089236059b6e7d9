package dropin_test

import (
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCmtime runs rdma-core's cmtime: 2000 connections set up at once
// (create ID, bind, resolve address and route, create QP, connect), then
// disconnected and destroyed, each step for all of them before the next,
// against a cmtime server on the other device (the daemon's CM with 2000
// connections in flight: 4000 IDs, REQ/REP/RTU and DREQ/DREP each; more
// IDs and QPs than a session could hold before the limits were raised,
// when its rdma_create_id failed at 1024 and cmtime crashed on the NULL
// ID). The client must report
// every step and no failure; the server must still be serving (it never
// exits by itself) and have reported nothing.
func TestCmtime(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	bin := tool(t, "cmtime")
	port := fmt.Sprint(freePort(t))
	srv := start(t, build, sock, 90*time.Second, nil, bin, "-b", cmServerAddr, "-p", port)
	time.Sleep(100 * time.Millisecond)
	err, out := run(t, build, sock, 60*time.Second, bin, "-s", cmServerAddr, "-b", cmClientAddr, "-p", port, "-c", "2000")
	if err != nil {
		t.Fatalf("cmtime client: %v\n%s\nserver:\n%s", err, out, srv.stdout.String()+srv.stderr.String())
	}
	for _, step := range []string{"create id", "bind addr", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy"} {
		// "step : total ms  max ms  min us  us / conn"
		re := regexp.MustCompile(`(?m)^` + step + `\s*:\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+$`)
		if !re.MatchString(out) {
			t.Errorf("cmtime client: no figures for %q:\n%s", step, out)
		}
	}
	// cmtime exits 0 whatever happened; it prints "event: <name>, error:
	// <status>" for an unexpected event (REJECTED, UNREACHABLE, ...) and
	// "failure in ..." when a call fails.
	if strings.Contains(out, "fail") || strings.Contains(out, "event:") {
		t.Errorf("cmtime client reports a failure:\n%s", out)
	}
	select {
	case <-srv.done:
		_, sout := srv.wait()
		t.Fatalf("cmtime server ended: %v\n%s", srv.err, sout)
	default:
	}
	if sout := srv.stdout.String() + srv.stderr.String(); sout != "" {
		t.Errorf("cmtime server printed:\n%s", sout)
	}
}

// TestRdmaXclient runs rdma-core's rdma_xserver and rdma_xclient: over RC
// the client sends 16 bytes inline on a QP it asked for one SGE and no
// inline data (rxe gives 16 bytes of inline room per SGE; the daemon
// does too, else ibv_post_send is EINVAL), and both end with status 0.
// With -c x (XRC, which neither rxe nor softverbs serves) both stop
// cleanly at rdma_create_ep.
func TestRdmaXclient(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	srvBin, cliBin := tool(t, "rdma_xserver"), tool(t, "rdma_xclient")
	port := fmt.Sprint(freePort(t))
	cout, sout := cmPair(t, build, sock, srvBin, []string{"-p", port}, cliBin, []string{"-s", cmServerAddr, "-p", port})
	for who, out := range map[string]string{"rdma_xclient": cout, "rdma_xserver": sout} {
		if !strings.Contains(out, who+": end 0") {
			t.Errorf("%s did not end with 0:\n%s", who, out)
		}
	}
	for _, c := range []struct {
		bin  string
		args []string
	}{{srvBin, []string{"-p", port, "-c", "x"}}, {cliBin, []string{"-s", cmServerAddr, "-p", port, "-c", "x"}}} {
		err, out := run(t, build, sock, 30*time.Second, c.bin, c.args...)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() <= 0 || !strings.Contains(out, "rdma_create_ep: ") {
			t.Errorf("%s %v: %v, want a clean failure at rdma_create_ep:\n%s", c.bin, c.args, err, out)
		}
	}
}
