package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/internal/syncbuf"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// startRvtd runs rvtd as a process of its own under a shell's ulimit -n
// (0: the test's limit) and waits until it answers on its socket. The
// process is stopped with SIGTERM when the test ends (by its PID).
func startRvtd(t *testing.T, nofile int, args ...string) (pid int, sock string, out *syncbuf.Buffer) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "rvtd.sock")
	script := `exec "$0" -test.run='^$'`
	if nofile > 0 {
		script = fmt.Sprintf("ulimit -n %d && %s", nofile, script)
	}
	cmd := exec.Command("sh", "-c", script, os.Args[0])
	cmd.Env = append(os.Environ(), "RVTD_MAIN=1", "RVTD_ARGS="+joinArgs(append([]string{"--socket", sock}, args...)))
	out = &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("rvtd after SIGTERM: %v\n%s", err, out)
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill() // by PID
			<-done
			t.Errorf("rvtd did not stop on SIGTERM\n%s", out)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := client.Dial(sock, "probe")
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rvtd did not come up: %v\n%s", err, out)
		}
	}
	return cmd.Process.Pid, sock, out
}

func joinArgs(a []string) string {
	s := ""
	for i, x := range a {
		if i > 0 {
			s += " "
		}
		s += x
	}
	return s
}

// openFDs is how many descriptors process pid has open.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// settledFDs is openFDs once it has not changed for 100 ms (a session that
// just closed, the startup probe's, is torn down meanwhile).
func settledFDs(t *testing.T, pid int) int {
	t.Helper()
	n, same := openFDs(t, pid), 0
	for deadline := time.Now().Add(10 * time.Second); same < 5; same++ {
		time.Sleep(20 * time.Millisecond)
		if m := openFDs(t, pid); m != n {
			n, same = m, -1
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon's descriptors do not settle: %d", n)
		}
	}
	return n
}

// TestDescriptorsPerObject counts the descriptors the daemon keeps for
// each kind of object, in /proc/PID/fd. A memfd it has passed to the
// client and mapped itself is not kept (nothing sends it again); what is
// left is what the daemon waits on or writes to: a QP's doorbell eventfd,
// its end of a completion channel, of a device context's async event
// socket, of an rdma_cm event channel.
func TestDescriptorsPerObject(t *testing.T) {
	pid, sock, _ := startRvtd(t, 0)
	idle := settledFDs(t, pid)
	c, err := client.Dial(sock, "fds")
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.OpenDevice("rvt0")
	if err != nil {
		t.Fatal(err)
	}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq0, err := d.CreateCQ(16, 0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	var cqs []*client.CQ
	var srqs []*client.SRQ
	capa := proto.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	for _, tc := range []struct {
		kind string
		want int // descriptors per object
		make func() error
	}{
		{"shm_alloc", 0, func() error { _, err := d.ShmAlloc(4096); return err }},
		{"shm_attach", 0, func() error { return shmAttach(c, d) }},
		{"cq", 0, func() error {
			q, err := d.CreateCQ(16, 0)
			cqs = append(cqs, q)
			return err
		}},
		{"resize_cq", 0, func() error { q := cqs[0]; cqs = append(cqs[1:], q); return q.Resize(q.CQE * 2) }},
		{"srq", 0, func() error {
			s, err := d.CreateSRQ(pd, 4, 1, 0, 0)
			srqs = append(srqs, s)
			return err
		}},
		{"resize_srq", 0, func() error { s := srqs[0]; srqs = append(srqs[1:], s); return s.Resize(s.MaxWR * 2) }},
		{"qp", 1, func() error { _, err := d.CreateQP(pd, 2, cq0, cq0, capa); return err }},
		{"comp_channel", 1, func() error { _, err := d.CreateCompChannel(); return err }},
		{"context", 1, func() error { _, err := c.OpenDevice("rvt1"); return err }},
		{"cm_channel", 1, func() error { _, err := c.CreateEventChannel(); return err }},
	} {
		before := settledFDs(t, pid)
		for i := 0; i < n; i++ {
			if err := tc.make(); err != nil {
				t.Fatalf("%s %d: %v", tc.kind, i, err)
			}
		}
		delta := settledFDs(t, pid) - before
		if delta != tc.want*n {
			t.Errorf("%s: %d objects took %d descriptors (%.2f each), want %d each", tc.kind, n, delta, float64(delta)/n, tc.want)
		} else {
			t.Logf("%s: %d objects, %d descriptors", tc.kind, n, delta)
		}
	}
	c.Close()
	var now int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if now = openFDs(t, pid); now <= idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the session ended: %d descriptors, %d before it", now, idle)
		}
	}
}

// shmAttach gives the daemon a sealed memfd of one page (shm_attach).
func shmAttach(c *client.Client, d *client.Device) error {
	fd, err := unix.MemfdCreate("fds-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, 4096); err != nil {
		return err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		return err
	}
	_, err = c.Call(proto.OpShmAttach, d.Handle, &proto.ShmAttach{Size: 4096, FD: fd})
	return err
}
