package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	cmd.Env = append(os.Environ(), "RVTD_MAIN=1", "RVTD_ARGS="+strings.Join(append([]string{"--socket", sock}, args...), " "))
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
	d, pd, cq0 := openPDCQ(t, c)
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

// TestSessionsShareDescriptors: rvtd under a small RLIMIT_NOFILE (as a
// machine's 20,000, scaled down) with the default limits.fds. Three
// sessions each make QPs until refused: ENOMEM at their share, before the
// daemon is out of descriptors. A fourth session still connects, makes
// two RC QPs and passes a SEND between them, and the daemon never had to
// wait for descriptors to accept. The four sessions are of one user
// (root): limits.user_fds is set out of the way, to see the session share
// alone (rvtd's TestUserDescriptorShare has the user's).
func TestSessionsShareDescriptors(t *testing.T) {
	const nofile = 400
	cfg := filepath.Join(t.TempDir(), "rvtd.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("limits:\n  user_fds: %d\n", nofile)), 0o644); err != nil {
		t.Fatal(err)
	}
	pid, sock, out := startRvtd(t, nofile, "--config", cfg)
	capa := proto.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	total := 0
	for h := 0; h < 3; h++ {
		c, err := client.Dial(sock, "hog")
		if err != nil {
			t.Fatalf("hog %d: %v\n%s", h, err, out)
		}
		defer c.Close()
		d, pd, cq := openPDCQ(t, c)
		n := 0
		for ; ; n++ {
			if _, err = d.CreateQP(pd, 2, cq, cq, capa); err != nil {
				break
			}
			if n > nofile {
				t.Fatalf("hog %d: %d QPs under RLIMIT_NOFILE %d", h, n, nofile)
			}
		}
		if !errors.Is(err, syscall.ENOMEM) {
			t.Fatalf("hog %d, QP %d: %v, want ENOMEM", h, n+1, err)
		}
		// A quarter of what the limit leaves after the daemon's own.
		if n < nofile/8 || n > nofile/4 {
			t.Errorf("hog %d: %d QPs, want a quarter of %d less the daemon's own", h, n, nofile)
		}
		if _, err := d.QueryDevice(); err != nil {
			t.Fatalf("hog %d after its refusal: %v", h, err)
		}
		total += n
	}
	t.Logf("3 sessions hold %d QPs; the daemon %d descriptors of %d", total, openFDs(t, pid), nofile)

	c, err := client.Dial(sock, "other")
	if err != nil {
		t.Fatalf("a session beside the hogs: %v\n%s", err, out)
	}
	defer c.Close()
	if err := loopbackSend(c); err != nil {
		t.Fatalf("a session beside the hogs: %v\n%s", err, out)
	}
	if strings.Contains(out.String(), "accept: waiting for resources") {
		t.Errorf("the daemon ran out of descriptors:\n%s", out)
	}
	if !strings.Contains(out.String(), "session at its share of the daemon's descriptors") {
		t.Errorf("no warning about a session at its share:\n%s", out)
	}
}

// openPDCQ opens rvt0 on c, with a PD and a 16-entry CQ.
func openPDCQ(t *testing.T, c *client.Client) (*client.Device, uint32, *client.CQ) {
	t.Helper()
	d, err := c.OpenDevice("rvt0")
	if err != nil {
		t.Fatal(err)
	}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d, pd, cq
}

// loopbackSend opens rvt0, connects two RC QPs to each other and sends
// 1000 bytes from one to the other.
func loopbackSend(c *client.Client) error {
	d, err := c.OpenDevice("rvt0")
	if err != nil {
		return err
	}
	pd, err := d.AllocPD()
	if err != nil {
		return err
	}
	shm, err := d.ShmAlloc(1 << 16)
	if err != nil {
		return err
	}
	mr, err := d.RegMR(pd, shm, 0, 1<<16, 1|2|4)
	if err != nil {
		return err
	}
	cq, err := d.CreateCQ(16, 0)
	if err != nil {
		return err
	}
	capa := proto.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	var qps [2]*client.QP
	for i := range qps {
		if qps[i], err = d.CreateQP(pd, 2, cq, cq, capa); err != nil {
			return err
		}
	}
	gid, err := d.QueryGID(1)
	if err != nil {
		return err
	}
	for i, q := range qps {
		peer := qps[1-i].QPN
		if err := q.Modify(proto.QPAttr{State: 1, Port: 1, AccessFlags: 1 | 2 | 4}, 1|1<<3|1<<4|1<<5); err != nil {
			return fmt.Errorf("INIT: %w", err)
		}
		rtr := proto.QPAttr{State: 2, PathMTU: 3, DestQPN: peer, MaxDestRdAtomic: 1, MinRNRTimer: 1,
			AV: proto.AV{DGID: gid, SGIDIndex: 1, HopLimit: 64, Port: 1, IsGlobal: true}}
		if err := q.Modify(rtr, 1|1<<7|1<<8|1<<20|1<<12|1<<17|1<<15); err != nil {
			return fmt.Errorf("RTR: %w", err)
		}
		rts := proto.QPAttr{State: 3, Timeout: 10, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 1}
		if err := q.Modify(rts, 1|1<<9|1<<10|1<<11|1<<16|1<<13); err != nil {
			return fmt.Errorf("RTS: %w", err)
		}
	}
	const n = 1000
	for i := 0; i < n; i++ {
		shm.Mem[i] = byte(i * 7)
	}
	if err := qps[1].PostRecv(1, client.SGE{Addr: mr.Addr + 8192, Length: 4096, LKey: mr.LKey}); err != nil {
		return err
	}
	if err := qps[0].PostSend(client.SendWR{WRID: 2, Opcode: 2, Flags: 2, // IBV_WR_SEND, SIGNALED
		SGL: []client.SGE{{Addr: mr.Addr, Length: n, LKey: mr.LKey}}}); err != nil {
		return err
	}
	var wcs []client.WC
	buf := make([]client.WC, 4)
	for deadline := time.Now().Add(5 * time.Second); len(wcs) < 2; time.Sleep(100 * time.Microsecond) {
		k, err := cq.Poll(buf)
		if err != nil {
			return err
		}
		wcs = append(wcs, buf[:k]...)
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of 2 completions", len(wcs))
		}
	}
	for _, wc := range wcs {
		if wc.Status != 0 {
			return fmt.Errorf("completion %+v", wc)
		}
	}
	for i := 0; i < n; i++ {
		if shm.Mem[8192+i] != byte(i*7) {
			return fmt.Errorf("byte %d not received", i)
		}
	}
	return nil
}
