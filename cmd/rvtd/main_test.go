package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/rvtd/client"
)

// TestMain runs rvtd's main when the test binary is re-executed as it.
func TestMain(m *testing.M) {
	if os.Getenv("RVTD_MAIN") == "1" {
		os.Args = append([]string{"rvtd"}, strings.Fields(os.Getenv("RVTD_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func rvtdCmd(args ...string) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RVTD_MAIN=1", "RVTD_ARGS="+strings.Join(args, " "))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return cmd, &out
}

func TestSIGTERMAndSecondInstance(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rvtd.sock")
	first, out := rvtdCmd("--socket", sock, "--log-format", "json")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	var c *client.Client
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if c, err = client.Dial(sock, "cmd-test"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rvtd did not come up: %v\n%s", err, out)
		}
	}
	d, err := c.OpenDevice("rvt1")
	if err != nil {
		t.Fatal(err)
	}

	second, out2 := rvtdCmd("--socket", sock)
	err = second.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out2.String(), "another rvtd is serving") {
		t.Fatalf("second rvtd: %v\n%s", err, out2)
	}

	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ev, err := d.ReadAsyncEvent()
	if err != nil || ev.Type != 8 {
		t.Errorf("async event %+v (%v), want DEVICE_FATAL", ev, err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("rvtd after SIGTERM: %v\n%s", err, out)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	if !strings.Contains(out.String(), `"msg":"stopped"`) {
		t.Errorf("log:\n%s", out)
	}
}

func TestCheckConfig(t *testing.T) {
	cmd, out := rvtdCmd("--check-config", "--config", "rvtd.example.yaml")
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "configuration OK: 2 devices") {
		t.Fatalf("%v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("devices: [{name: a, fabrik: x}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, out = rvtdCmd("--check-config", "--config", bad)
	if err := cmd.Run(); err == nil || !strings.Contains(out.String(), "fabrik") {
		t.Fatalf("bad config accepted: %v\n%s", err, out)
	}
}

func TestMetricsFlag(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	sock := filepath.Join(t.TempDir(), "rvtd.sock")
	cmd, out := rvtdCmd("--socket", sock, "--metrics", addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var body []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			body, err = io.ReadAll(r.Body)
			r.Body.Close()
			if err == nil && r.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no metrics: %v", err)
		}
	}
	for _, want := range []string{"\nrvtd_clients 0\n", "\n" + `rvtd_port_sent_pkts_total{device="rvt0",port="1"} 0` + "\n", "\ngo_goroutines "} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("no %q in\n%s", want, body)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rvtd after SIGTERM: %v\n%s", err, out)
	}
}

// TestOutOfDescriptors: a daemon that runs out of file descriptors (here
// a limit of 48; a client holding thousands of QPs reaches the default
// one the same way) keeps serving the sessions it has, waits, and accepts
// again once some are closed, instead of stopping for everyone (and
// exiting 0, which a supervisor would not restart). Its sessions are of
// one user (root): limits.user_fds is set out of the way, so that they
// can take the daemon's every descriptor (TestSessionsShareDescriptors
// and rvtd's TestUserDescriptorShare have the shares).
func TestOutOfDescriptors(t *testing.T) {
	const warning = "accept: waiting for resources"
	cfg := filepath.Join(t.TempDir(), "rvtd.yaml")
	if err := os.WriteFile(cfg, []byte("limits:\n  user_fds: 48\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Stopped by SIGTERM at the end (startRvtd's cleanup), after the
	// sessions below are closed; it must exit 0.
	_, sock, out := startRvtd(t, 48, "--config", cfg)
	first, err := client.Dial(sock, "fds")
	if err != nil {
		t.Fatal(err)
	}
	held := []*client.Client{first}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	dev, err := held[0].OpenDevice("rvt0")
	if err != nil {
		t.Fatal(err)
	}
	// Sessions until the daemon says it has no descriptor left to
	// accept one with: that one waits.
	type dialed struct {
		c   *client.Client
		err error
	}
	var pending chan dialed
	for len(held) < 100 && pending == nil {
		done := make(chan dialed, 1)
		go func() {
			c, err := client.Dial(sock, "fds")
			done <- dialed{c, err}
		}()
	wait:
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			select {
			case d := <-done:
				if d.err != nil {
					t.Fatalf("session %d: %v\n%s", len(held)+1, d.err, out)
				}
				held = append(held, d.c)
				break wait
			default:
			}
			if strings.Contains(out.String(), warning) {
				pending = done
				break wait
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %d: neither answered nor waiting\n%s", len(held)+1, out)
			}
		}
	}
	if pending == nil {
		t.Fatalf("100 sessions under a limit of 48 descriptors:\n%s", out)
	}
	// The sessions it has still work.
	if _, err := dev.QueryDevice(); err != nil {
		t.Fatalf("a session while out of descriptors: %v", err)
	}
	for _, c := range held[1:] {
		c.Close()
	}
	held = held[:1]
	select {
	case d := <-pending:
		if d.err != nil {
			t.Fatalf("the waiting session: %v", d.err)
		}
		held = append(held, d.c)
	case <-time.After(30 * time.Second):
		t.Fatalf("the waiting session was not accepted once descriptors were freed:\n%s", out)
	}
}

// TestFlagErrors: a mistyped command line says what is wrong (under
// systemd nothing else would), and exits 2.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--bogus", "unknown flag: --bogus"},
		{"--loops abc", `invalid argument "abc"`},
		{"--loops -5", "--loops -5: want 1 or more"},
		{"--spin 5", `invalid argument "5"`},
		{"--spin -1ms", "--spin -1ms: want a duration of 0 or more"},
		{"extra --check-config", `unexpected argument "extra"`},
	} {
		cmd, out := rvtdCmd(strings.Fields(tc.args)...)
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%s: %v, want exit status 2\n%s", tc.args, err, out)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%s: %q not in\n%s", tc.args, tc.want, out)
		}
	}
}

// TestSpinFlag: --spin's default is rvtd.DefaultSpin, and 0 turns the
// spin off (where rvtd.Options.Spin 0 would mean the default); the
// daemon logs what it runs with.
func TestSpinFlag(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"", "spin=" + rvtd.DefaultSpin.String()},
		{"--spin 0", "spin=0s"},
		{"--spin 1ms", "spin=1ms"},
	} {
		sock := filepath.Join(t.TempDir(), "rvtd.sock")
		cmd, out := rvtdCmd(append([]string{"--socket", sock}, strings.Fields(tc.args)...)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if c, err := client.Dial(sock, "cmd-test"); err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("%q: rvtd did not come up", tc.args)
			}
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%q: %v\n%s", tc.args, err, out)
		}
		if !strings.Contains(out.String(), "msg=\"data path\" loops=1 "+tc.want+"\n") {
			t.Errorf("%q: want %s in the log:\n%s", tc.args, tc.want, out)
		}
	}
}

// TestSIGHUP: a daemon whose terminal closes stops as on SIGTERM: exit 0,
// the socket removed.
func TestSIGHUP(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rvtd.sock")
	cmd, out := rvtdCmd("--socket", sock)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill() // by PID, if still running
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := client.Dial(sock, "hup"); err == nil {
			c.Close()
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("rvtd did not come up: %v\n%s", err, out)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("rvtd after SIGHUP: %v\n%s", err, out)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after SIGHUP: %v", err)
	}
}
