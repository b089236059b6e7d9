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
