package rvtd_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// startDaemon runs an in-process rvtd (the library) on a socket in a
// temporary directory, with the default devices rvt0 and rvt1.
func startDaemon(t testing.TB) (*rvtd.Server, string) {
	t.Helper()
	return startDaemonConfig(t, nil)
}

// startDaemonConfig is startDaemon with the devices of cfg (nil: the
// defaults).
func startDaemonConfig(t testing.TB, cfg *rvtd.Config) (*rvtd.Server, string) {
	t.Helper()
	return startDaemonWith(t, cfg, rvtd.Options{})
}

// startDaemonWith is startDaemonConfig with the options o (a logger of
// its own when verbose).
func startDaemonWith(t testing.TB, cfg *rvtd.Config, o rvtd.Options) (*rvtd.Server, string) {
	t.Helper()
	if testing.Verbose() {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	srv, err := rvtd.New(cfg, o)
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
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return srv, sock
}

// openDevice dials the daemon at sock as name and opens dev; the session
// ends with the test.
func openDevice(t testing.TB, sock, name, dev string) (*client.Client, *client.Device) {
	t.Helper()
	c, err := client.Dial(sock, name)
	if err != nil {
		t.Fatalf("dial %s: %v", sock, err)
	}
	t.Cleanup(func() { c.Close() })
	d, err := c.OpenDevice(dev)
	if err != nil {
		t.Fatalf("open %s: %v", dev, err)
	}
	return c, d
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// child is a client process: the test binary re-executed with a role.
type child struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
}

func startChild(t testing.TB, name, role, sock, dev string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RVTD_TEST_ROLE="+role, "RVTD_TEST_SOCKET="+sock, "RVTD_TEST_DEVICE="+dev)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{t: t, name: name, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return c
}

// expect reads the child's next line and checks its first word.
func (c *child) expect(word string) []string {
	c.t.Helper()
	lines := make(chan []string, 1)
	go func() {
		if !c.out.Scan() {
			lines <- nil
			return
		}
		lines <- strings.Fields(c.out.Text())
	}()
	select {
	case f := <-lines:
		if len(f) == 0 || f[0] != word {
			c.t.Fatalf("%s: want %s, got %q", c.name, word, f)
		}
		return f
	case <-time.After(20 * time.Second):
		c.t.Fatalf("%s: timed out waiting for %s", c.name, word)
	}
	return nil
}

func (c *child) send(format string, args ...any) {
	c.t.Helper()
	if _, err := fmt.Fprintf(c.in, format+"\n", args...); err != nil {
		c.t.Fatalf("%s: %v", c.name, err)
	}
}

// endpoint is what two clients exchange to connect their RC QPs.
type endpoint struct {
	QPN  uint32
	GID  [16]byte
	Addr uint64
	RKey uint32
}

func (e endpoint) String() string {
	return fmt.Sprintf("%d %s %d %d", e.QPN, hex.EncodeToString(e.GID[:]), e.Addr, e.RKey)
}

func parseEndpoint(f []string) (endpoint, error) {
	var e endpoint
	if len(f) != 4 {
		return e, fmt.Errorf("endpoint %q", f)
	}
	g, err := hex.DecodeString(f[1])
	if err != nil || len(g) != 16 {
		return e, fmt.Errorf("gid %q", f[1])
	}
	copy(e.GID[:], g)
	_, err = fmt.Sscan(f[0]+" "+f[2]+" "+f[3], &e.QPN, &e.Addr, &e.RKey)
	return e, err
}

// node is a client's setup: device, PD, 4 MiB of shared memory registered,
// one CQ and an RC QP.
type node struct {
	c   *client.Client
	dev *client.Device
	shm *client.Shm
	mr  *client.MR
	cq  *client.CQ
	ch  *client.Channel
	qp  *client.QP
}

const shmSize = 4 << 20

// IBV_ACCESS_LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ
const accessAll = 1 | 2 | 4

// IBV_ACCESS_MW_BIND
const accessMWBind = 16

func newNode(sock, dev string) (*node, error) { return newNodeCh(sock, dev, false) }

// newNodeCh is newNode, with the CQ on a completion channel if ch.
func newNodeCh(sock, dev string, ch bool) (*node, error) { return newNodeOpts(sock, dev, ch, 256) }

// newNodeOpts is newNode with a CQ of cqe entries, on a channel if ch.
func newNodeOpts(sock, dev string, ch bool, cqe uint32) (*node, error) {
	c, err := client.Dial(sock, "rvtd-test")
	if err != nil {
		return nil, err
	}
	n := &node{c: c}
	if n.dev, err = c.OpenDevice(dev); err != nil {
		return nil, err
	}
	pd, err := n.dev.AllocPD()
	if err != nil {
		return nil, err
	}
	if n.shm, err = n.dev.ShmAlloc(shmSize); err != nil {
		return nil, err
	}
	if n.mr, err = n.dev.RegMR(pd, n.shm, 0, shmSize, accessAll|accessMWBind); err != nil {
		return nil, err
	}
	var chh uint32
	if ch {
		if n.ch, err = n.dev.CreateCompChannel(); err != nil {
			return nil, err
		}
		chh = n.ch.Handle
	}
	if n.cq, err = n.dev.CreateCQ(cqe, chh); err != nil {
		return nil, err
	}
	n.qp, err = n.dev.CreateQP(pd, 2, n.cq, n.cq, proto.Cap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2})
	return n, err
}

func (n *node) endpoint() (endpoint, error) {
	g, err := n.dev.QueryGID(1)
	return endpoint{QPN: n.qp.QPN, GID: g, Addr: n.mr.Addr, RKey: n.mr.RKey}, err
}

// ibv_qp_attr_mask bits.
const (
	maskState     = 1 << 0
	maskAccess    = 1 << 3
	maskPKey      = 1 << 4
	maskPort      = 1 << 5
	maskAV        = 1 << 7
	maskPathMTU   = 1 << 8
	maskTimeout   = 1 << 9
	maskRetry     = 1 << 10
	maskRNRRetry  = 1 << 11
	maskRQPSN     = 1 << 12
	maskMaxRd     = 1 << 13
	maskMinRNR    = 1 << 15
	maskSQPSN     = 1 << 16
	maskMaxDestRd = 1 << 17
	maskDestQPN   = 1 << 20
)

// connect takes the QP through INIT, RTR and RTS to the peer.
func (n *node) connect(peer endpoint) error {
	a := proto.QPAttr{State: 1, PKeyIndex: 0, Port: 1, AccessFlags: accessAll}
	if err := n.qp.Modify(a, maskState|maskPKey|maskPort|maskAccess); err != nil {
		return fmt.Errorf("INIT: %w", err)
	}
	a = proto.QPAttr{State: 2, PathMTU: connectMTU, DestQPN: peer.QPN, RQPSN: 0, MaxDestRdAtomic: 1, MinRNRTimer: 1,
		AV: proto.AV{DGID: peer.GID, SGIDIndex: 1, HopLimit: 64, Port: 1, IsGlobal: true}}
	if err := n.qp.Modify(a, maskState|maskAV|maskPathMTU|maskDestQPN|maskRQPSN|maskMaxDestRd|maskMinRNR); err != nil {
		return fmt.Errorf("RTR: %w", err)
	}
	a = proto.QPAttr{State: 3, Timeout: connectTimeout, RetryCnt: connectRetry, RNRRetry: 7, SQPSN: 0, MaxRdAtomic: 1}
	if err := n.qp.Modify(a, maskState|maskTimeout|maskRetry|maskRNRRetry|maskSQPSN|maskMaxRd); err != nil {
		return fmt.Errorf("RTS: %w", err)
	}
	return nil
}

// poll waits for n completions (5 s at most).
func (n *node) poll(want int) ([]client.WC, error) {
	var got []client.WC
	buf := make([]client.WC, 32)
	for deadline := time.Now().Add(5 * time.Second); len(got) < want; {
		k, err := n.cq.Poll(buf)
		if err != nil {
			return got, err
		}
		got = append(got, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				return got, fmt.Errorf("%d of %d completions", len(got), want)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return got, nil
}

func pattern(seed, i int) byte { return byte(seed*131 + i*7 + i>>8) }
