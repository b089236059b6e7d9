package dropin_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softverbs/softverbs/internal/syncbuf"
	"github.com/softverbs/softverbs/rvtd"
)

// TestMain runs an rvtd when the test binary is re-executed as one
// (daemonProcess): a daemon in a process of its own, which a test can kill.
func TestMain(m *testing.M) {
	if sock := os.Getenv("DROPIN_CHILD_RVTD"); sock != "" {
		os.Exit(childDaemon(sock, os.Getenv("DROPIN_CHILD_RVTD_UDP")))
	}
	os.Exit(m.Run())
}

// childDaemon serves rvtd's default devices, or with udp one device, u0,
// on the UDP link at that address.
func childDaemon(sock, udp string) int {
	var cfg *rvtd.Config
	if udp != "" {
		cfg = &rvtd.Config{Devices: []rvtd.DeviceConfig{{Name: "u0", UDP: udp}}}
	}
	srv, err := rvtd.New(cfg, rvtd.Options{})
	if err == nil {
		err = srv.Listen(sock)
	}
	if err == nil {
		// SIGTERM: a clean shutdown, as cmd/rvtd's.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		go func() {
			<-sig
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		}()
		err = srv.Serve()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rvtd:", err)
		return 1
	}
	return 0
}

// daemonProc is an rvtd in a child process.
type daemonProc struct {
	cmd  *exec.Cmd
	out  syncbuf.Buffer
	done chan struct{}
}

// daemonProcess starts rvtd (rvt0 and rvt1 on one in-memory fabric) in a
// child process on a socket in a temporary directory and waits until it
// accepts sessions. Cleanup kills it if it still runs.
func daemonProcess(t *testing.T) (*daemonProc, string) {
	t.Helper()
	return daemonProcessUDP(t, "")
}

// daemonProcessUDP is daemonProcess with, when udp is not "", one device
// on the UDP link at udp instead of the in-memory pair.
func daemonProcessUDP(t *testing.T, udp string) (*daemonProc, string) {
	t.Helper()
	if externalDaemon() {
		t.Skip("DROPIN_RVTD_SOCKET: this test kills the daemon, so it runs one of its own")
	}
	sock := filepath.Join(t.TempDir(), "rvtd.sock")
	d := &daemonProc{done: make(chan struct{})}
	d.cmd = exec.Command(os.Args[0], "-test.run=^$")
	d.cmd.Env = append(os.Environ(), "DROPIN_CHILD_RVTD="+sock, "DROPIN_CHILD_RVTD_UDP="+udp)
	d.cmd.Stdout, d.cmd.Stderr = &d.out, &d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := net.Dial("unixpacket", sock)
		if err == nil {
			c.Close()
			return d, sock
		}
		select {
		case <-d.done:
			t.Fatalf("rvtd ended: %s", d.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("rvtd did not come up: %v\n%s", err, d.out.String())
		}
	}
}

// kill ends the daemon with sig (its own process only) and reaps it.
func (d *daemonProc) kill(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	<-d.done
}

// within waits for p to end, at most limit.
func within(t *testing.T, p *proc, limit time.Duration) (error, string) {
	t.Helper()
	select {
	case <-p.done:
		return p.wait()
	case <-time.After(limit):
		t.Fatalf("%s still runs %v after the daemon died:\n%s", p.name, limit,
			p.stdout.String()+p.stderr.String())
		return nil, ""
	}
}

// TestDaemonKilled kills rvtd (SIGKILL) under verbs_test's busy pollers
// (verbs_test fatal): every work request posted and not completed must come
// back as a WR_FLUSH_ERR completion, after the real completion left in a
// ring, posts must fail with EIO, and the async socket give DEVICE_FATAL,
// all within seconds; with the library built plainly and with ASan. And
// the same when rvtd shuts down cleanly (SIGTERM): the daemon sends
// DEVICE_FATAL itself and must complete nothing twice.
func TestDaemonKilled(t *testing.T) {
	build := libs(t)
	for _, variant := range []string{"plain", "asan", "sigterm"} {
		t.Run(variant, func(t *testing.T) {
			sig := os.Signal(syscall.SIGKILL)
			if variant == "sigterm" {
				sig = syscall.SIGTERM
			}
			lib, env := build, []string(nil)
			if variant == "asan" {
				lib, env = filepath.Join(build, "asan"), sanitizerEnv(t)
			}
			d, sock := daemonProcess(t)
			p := start(t, lib, sock, 120*time.Second, env, filepath.Join(build, "test", "verbs_test"), "fatal")
			p.waitOutput(t, "READY", 60*time.Second)
			d.kill(t, sig)
			killed := time.Now()
			err, out := within(t, p, 25*time.Second)
			if bad := sanitizerReport(out); bad != "" {
				t.Fatalf("%s\n%s", bad, out)
			}
			if err != nil || !strings.Contains(out, "PASS") {
				t.Fatalf("verbs_test fatal: %v\n%s", err, out)
			}
			t.Logf("verbs_test ended %v after the kill", time.Since(killed).Round(time.Millisecond))
		})
	}
}

// TestDaemonKilledPingpong: Debian's ibv_rc_pingpong, busy-polling (no -e)
// on both sides, ends with the flushed completion's error (exit 1) when the
// daemon is killed mid-run, instead of spinning for ever.
func TestDaemonKilledPingpong(t *testing.T) {
	build := libs(t)
	bin := tool(t, "ibv_rc_pingpong")
	stdbuf := tool(t, "stdbuf") // line-buffered output: the addresses show the run started
	d, sock := daemonProcess(t)
	port := freePort(t)
	args := []string{"-oL", bin, "-g", "1", "-p", fmt.Sprint(port), "-s", "1024", "-n", "1000000000"}
	srv := start(t, build, sock, 120*time.Second, nil, stdbuf, append(args, "-d", "rvt0")...)
	for deadline := time.Now().Add(20 * time.Second); !listening(port); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ibv_rc_pingpong server: port %d never listened", port)
		}
	}
	cli := start(t, build, sock, 120*time.Second, nil, stdbuf, append(args, "-d", "rvt1", "127.0.0.1")...)
	cli.waitOutput(t, "remote address", 30*time.Second)
	srv.waitOutput(t, "remote address", 30*time.Second)
	time.Sleep(300 * time.Millisecond) // in the ping-pong loop
	d.kill(t, syscall.SIGKILL)
	for _, p := range []*proc{srv, cli} {
		err, out := within(t, p, 20*time.Second)
		var ee *exec.ExitError
		if !errorAs(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, "Failed status Work Request Flushed Error") {
			t.Errorf("%s: %v, want exit status 1 after a flushed completion\n%s", p.name, err, out)
		}
	}
}
