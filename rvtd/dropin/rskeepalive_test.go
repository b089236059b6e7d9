package dropin_test

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softverbs/softverbs/rvtd"
)

// TestRsocketKeepalive: SO_KEEPALIVE on rsockets (rvtd/librdmacm/rskeep.c)
// through rsocket_test's ka-* cases, against the library built plainly and
// with ASan and UBSan.
//
// idle-on, idle-off, idle-cleared: an idle connection for 3.5 s, the
// client with SO_KEEPALIVE and TCP_KEEPIDLE 1 (on), without SO_KEEPALIVE
// (off), or with it set and cleared again (cleared). What the server's
// device received meanwhile is counted (rcvd_pkts): each packet a
// keepalive, since nothing else moves (their acknowledgements go the other
// way). On: at least two; otherwise none.
//
// peer-dies: the keepalive client on one daemon, its peer on another (a
// child process), over UDP links on loopback. The peer's daemon and then
// the peer are killed (SIGKILL), so no disconnect reaches the client,
// which is blocked in rrecv and rpoll: the next keepalive goes
// unanswered, the QP's retries run out, and both calls must return the
// error: within TCP_KEEPIDLE and 8 local ACK timeouts (the first try and 7
// retries; 17.7 s after the killing when measured, which fits a timeout
// of 2.1 s, exponent 19), each firing after one to two periods; 45 s is
// the bound.
// Without keepalive nothing would ever be sent, and both calls would block
// for ever.
func TestRsocketKeepalive(t *testing.T) {
	build := rdmacmLib(t)
	if externalDaemon() {
		t.Skip("DROPIN_RVTD_SOCKET: this test counts its own daemon's packets and kills a daemon, so it runs its own")
	}
	for _, v := range []struct {
		name, lib string
		env       []string
	}{
		{"plain", build, nil},
		{"asan", filepath.Join(build, "asan"), sanitizerEnv(t)},
	} {
		for _, mode := range []string{"on", "off", "cleared"} {
			t.Run(v.name+"/idle-"+mode, func(t *testing.T) {
				keepaliveIdle(t, build, v.lib, v.env, mode)
			})
		}
		t.Run(v.name+"/peer-dies", func(t *testing.T) {
			keepalivePeerDies(t, build, v.lib, v.env)
		})
	}
}

// cTestDone checks that a C test program ended with PASS and no sanitizer
// report.
func cTestDone(t *testing.T, p *proc) string {
	t.Helper()
	err, out := p.wait()
	if bad := sanitizerReport(out); err != nil || !strings.Contains(out, "PASS") || bad != "" {
		t.Fatalf("%s: %v %s\n%s", p.name, err, bad, out)
	}
	return out
}

func keepaliveIdle(t *testing.T, build, lib string, env []string, mode string) {
	srv, sock := serveDaemon(t, nil)
	dev := srv.Device("rvt0") // the server's end
	if dev == nil {
		t.Fatal("no device rvt0")
	}
	// A pipe of the kernel's: the program reads it directly (with an
	// io.Reader, its end would wait for a copying goroutine).
	in, tell, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tell.Close() })
	p := startStdin(t, lib, sock, 60*time.Second, env, in, filepath.Join(build, "test", "rsocket_test"), "ka-idle", mode)
	in.Close()
	p.waitOutput(t, "IDLE\n", 30*time.Second)
	before := dev.Counters()["rcvd_pkts"]
	p.waitOutput(t, "IDLE-END\n", 30*time.Second)
	got := dev.Counters()["rcvd_pkts"] - before
	if _, err := io.WriteString(tell, "counted\n"); err != nil {
		t.Fatal(err)
	}
	tell.Close()
	cTestDone(t, p)
	t.Logf("keepalive %s: rvt0 received %d packets in 3.5 idle seconds", mode, got)
	if mode == "on" && got < 2 {
		t.Errorf("keepalive on, TCP_KEEPIDLE 1: rvt0 received %d packets in 3.5 idle seconds, want at least 2", got)
	}
	if mode != "on" && got != 0 {
		t.Errorf("keepalive %s: rvt0 received %d packets in 3.5 idle seconds, want none", mode, got)
	}
}

var kaPort = regexp.MustCompile(`PORT (\d+)\n`)

func keepalivePeerDies(t *testing.T, build, lib string, env []string) {
	// Addresses no other test of the module uses (their UDP links bind
	// port 4791 on them).
	const local, remote = "127.77.0.41", "127.77.0.42"
	bin := filepath.Join(build, "test", "rsocket_test")
	d, peerSock := daemonProcessUDP(t, remote)
	_, sock := serveDaemon(t, &rvtd.Config{Devices: []rvtd.DeviceConfig{{Name: "u0", UDP: local}}})
	peer := start(t, build, peerSock, 120*time.Second, nil, bin, "ka-peer", remote)
	peer.waitOutput(t, "PORT ", 30*time.Second)
	m := kaPort.FindStringSubmatch(peer.stdout.String())
	for deadline := time.Now().Add(5 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		m = kaPort.FindStringSubmatch(peer.stdout.String())
	}
	if m == nil {
		t.Fatalf("ka-peer printed no port: %s", peer.stdout.String())
	}
	cli := start(t, lib, sock, 120*time.Second, env, bin, "ka-dead", local, remote, m[1])
	cli.waitOutput(t, "CONNECTED\n", 30*time.Second)
	peer.waitOutput(t, "ACCEPTED\n", 30*time.Second)
	// Keepalives answered while the peer lives end nothing.
	time.Sleep(2500 * time.Millisecond)
	select {
	case <-cli.done:
		_, out := cli.wait()
		t.Fatalf("ka-dead ended while its peer lived:\n%s", out)
	default:
	}
	d.kill(t, syscall.SIGKILL) // the peer's host: nothing tells the client
	if err := peer.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	select {
	case <-cli.done:
	case <-time.After(45 * time.Second):
		t.Fatalf("ka-dead still blocked 45 s after its peer died:\n%s", cli.stdout.String()+cli.stderr.String())
	}
	took := time.Since(killed)
	out := cTestDone(t, cli)
	t.Logf("ka-dead saw its peer die after %v:\n%s", took.Round(time.Millisecond), out)
}
