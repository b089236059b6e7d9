package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softverbs/softverbs/qp"
	"github.com/softverbs/softverbs/rvt"
	"github.com/softverbs/softverbs/rvtd"
)

// TestMain runs rvt's main when the test binary is re-executed as it
// (RVT_MAIN=1, the arguments in RVT_ARGS separated by newlines).
func TestMain(m *testing.M) {
	if os.Getenv("RVT_MAIN") == "1" {
		os.Exit(run(strings.Split(os.Getenv("RVT_ARGS"), "\n"), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// rvtProcess is the rvt command as a process of its own.
func rvtProcess(args ...string) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RVT_MAIN=1", "RVT_ARGS="+strings.Join(args, "\n"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return cmd, &out
}

// startDaemon runs an in-process rvtd with rvt0 and rvt1 on a socket in
// a temporary directory.
func startDaemon(t *testing.T) string {
	t.Helper()
	srv, err := rvtd.New(nil, rvtd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "rvtd.sock")
	if err := srv.Listen(sock); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve() }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	return sock
}

// TestPingpongThroughRVTD runs `rvt pingpong --rvtd SOCK -d rvt1` (server)
// and `-d rvt0` (client) as two processes against a daemon of the test's,
// in each mode, and checks both print the tool's result lines.
func TestPingpongThroughRVTD(t *testing.T) {
	sock := startDaemon(t)
	for i, mode := range [][]string{{"--rc"}, {"--rc", "-e"}, {"--uc", "-e"}, {"--ud", "-e"}} {
		t.Run(strings.Join(mode, ""), func(t *testing.T) {
			port := fmt.Sprint(19515 + os.Getpid()%500 + 500*i)
			common := append([]string{"pingpong", "--rvtd", sock, "-g", "1", "-n", "100", "-s", "1024", "-c", "-p", port, "--timeout", "60s"}, mode...)
			srv, srvOut := rvtProcess(append(common, "-d", "rvt1")...)
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			defer srv.Process.Kill() // by PID, if it is still running
			var cli *exec.Cmd
			var cliOut *bytes.Buffer
			var err error
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				cli, cliOut = rvtProcess(append(common, "-d", "rvt0", "127.0.0.1")...)
				if err = cli.Run(); err == nil || time.Now().After(deadline) || !strings.Contains(cliOut.String(), "connect") {
					break
				}
			}
			if err != nil {
				t.Fatalf("client: %v\n%s\nserver:\n%s", err, cliOut, srvOut)
			}
			if err := srv.Wait(); err != nil {
				t.Fatalf("server: %v\n%s", err, srvOut)
			}
			for name, out := range map[string]string{"client": cliOut.String(), "server": srvOut.String()} {
				if !regexp.MustCompile(`(?m)^100 iters in [0-9.]+ seconds = [0-9.]+ usec/iter$`).MatchString(out) ||
					!strings.Contains(out, "GID ::ffff:198.18.0.") {
					t.Errorf("%s output:\n%s", name, out)
				}
			}
		})
	}
}

// TestDevinfoStatThroughRVTD: devinfo of the daemon's device, and
// `rvt stat --rvtd` listing a QP of another session with its pid and
// command.
func TestDevinfoStatThroughRVTD(t *testing.T) {
	sock := startDaemon(t)
	var out, errb bytes.Buffer
	if rc := run([]string{"devinfo", "--rvtd", sock, "-d", "rvt1"}, &out, &errb); rc != 0 {
		t.Fatalf("devinfo: %d %s", rc, errb.String())
	}
	for _, want := range []string{"hca_id:\trvt1\n", "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n", "\t\t\tGID[  1]:\t\t::ffff:198.18.0.2, RoCE v2\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("devinfo lacks %q:\n%s", want, out.String())
		}
	}

	d, err := rvt.Dial(sock, "rvt0")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.CreateCQ(8, nil)
	if err != nil {
		t.Fatal(err)
	}
	q, err := pd.CreateQP(rvt.QPInitAttr{Type: qp.UD, SendCQ: c, RecvCQ: c, Cap: rvt.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if rc := run([]string{"stat", "--rvtd=" + sock}, &out, &errb); rc != 0 {
		t.Fatalf("stat: %d %s", rc, errb.String())
	}
	comm := filepath.Base(os.Args[0])
	if len(comm) > 15 {
		comm = comm[:15]
	}
	want := fmt.Sprintf(`(?m)^link rvt0/1 lqpn %d type UD state RESET .* comm %s pid %d$`, q.Num(), regexp.QuoteMeta(comm), os.Getpid())
	if !regexp.MustCompile(want).MatchString(out.String()) {
		t.Errorf("stat --rvtd output lacks %s:\n%s", want, out.String())
	}
	if !regexp.MustCompile(`(?m)^link rvt1/1`).MatchString(out.String()) {
		t.Errorf("stat --rvtd without -d lists rvt0 only:\n%s", out.String())
	}
	// The flags that shape a link of this process are refused with --rvtd.
	if rc := run([]string{"pingpong", "--rvtd", sock, "--udp", "127.0.0.1"}, &out, &errb); rc != 1 ||
		!strings.Contains(errb.String(), "--rvtd and --udp") {
		t.Errorf("pingpong --rvtd --udp: %d %s", rc, errb.String())
	}
}

func TestJoinRVTDValue(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"--rvtd", "/run/x.sock", "-d", "rvt1"}, []string{"--rvtd=/run/x.sock", "-d", "rvt1"}},
		{[]string{"--rvtd", "-d", "rvt1", "host"}, []string{"--rvtd", "-d", "rvt1", "host"}},
		{[]string{"--rvtd", "host"}, []string{"--rvtd", "host"}},
		{[]string{"--", "--rvtd", "./s"}, []string{"--", "--rvtd", "./s"}},
		{[]string{"--rvtd=./s", "x"}, []string{"--rvtd=./s", "x"}},
	} {
		if got := joinRVTDValue(tc.in); !slicesEqual(got, tc.want) {
			t.Errorf("joinRVTDValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }

// TestPerftestThroughRVTD runs perftest tools as server and client
// processes on the daemon's rvt1 and rvt0 (devopen.Link.OpenDevice).
func TestPerftestThroughRVTD(t *testing.T) {
	sock := startDaemon(t)
	for i, tool := range []string{"ib_write_bw", "ib_read_lat", "ib_atomic_bw"} {
		t.Run(tool, func(t *testing.T) {
			port := fmt.Sprint(21515 + os.Getpid()%500 + 500*i)
			common := []string{tool, "--rvtd", sock, "-n", "100", "-p", port, "--timeout", "60s"}
			srv, srvOut := rvtProcess(append(common, "-d", "rvt1")...)
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			defer srv.Process.Kill() // by PID, if it is still running
			var cli *exec.Cmd
			var cliOut *bytes.Buffer
			var err error
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				cli, cliOut = rvtProcess(append(common, "-d", "rvt0", "127.0.0.1")...)
				if err = cli.Run(); err == nil || time.Now().After(deadline) || !strings.Contains(cliOut.String(), "onnect") {
					break
				}
			}
			if err != nil {
				t.Fatalf("client: %v\n%s\nserver:\n%s", err, cliOut, srvOut)
			}
			if err := srv.Wait(); err != nil {
				t.Fatalf("server: %v\n%s", err, srvOut)
			}
			if !regexp.MustCompile(`(?m)^ (2|8|65536) +100 `).MatchString(cliOut.String()) {
				t.Errorf("client output has no result line:\n%s", cliOut)
			}
		})
	}
}
