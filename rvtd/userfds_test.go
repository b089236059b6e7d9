package rvtd_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/rvtd/client"
)

// otherUID is the user the test's second client runs as (nobody).
const otherUID = 65534

// TestUserDescriptorShare: one user's sessions together hold at most
// limits.user_fds of the daemon's descriptors, their sockets and pidfds
// included. Root opens sessions that make QPs until refused: the first
// ones at their session share (limits.fds), the last one at the user's,
// before its own share (ENOMEM, and EMFILE for a channel); then a new
// session of root is refused at hello with EMFILE. A client process of
// another user still connects two sessions and passes a SEND between
// them; and once one of root's sessions ends, root connects again.
func TestUserDescriptorShare(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	const perSession, perUser = 24, 64
	cfg := rvtd.DefaultConfig()
	cfg.Limits.FDs, cfg.Limits.UserFDs = perSession, perUser
	srv, sock := startDaemonConfig(t, cfg)
	if srv.UserFDLimit() != perUser {
		t.Fatalf("UserFDLimit %d, want limits.user_fds %d", srv.UserFDLimit(), perUser)
	}
	// The other user reaches the socket.
	for _, p := range []string{filepath.Dir(filepath.Dir(sock)), filepath.Dir(sock)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	held := func() int {
		n := 0
		for _, v := range srv.SessionFDsForTest() {
			n += v
		}
		return n
	}
	var hogs []*client.Client
	var refused error
	for len(hogs) <= perUser/3 {
		c, err := client.Dial(sock, "hog")
		if err != nil {
			refused = err
			break
		}
		t.Cleanup(func() { c.Close() })
		hogs = append(hogs, c)
		d, err := c.OpenDevice("rvt0")
		if err != nil {
			// A context takes a descriptor: at the user's share, EMFILE.
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("session %d: open device: %v, want EMFILE", len(hogs), err)
			}
			continue
		}
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := d.CreateCQ(16, 0)
		if err != nil {
			t.Fatal(err)
		}
		n := len(qpsUntilRefused(t, d, pd, cq, perSession))
		if _, err := d.CreateCompChannel(); !errors.Is(err, syscall.EMFILE) {
			t.Errorf("session %d: a channel past its share: %v, want EMFILE", len(hogs), err)
		}
		fds := srv.SessionFDsForTest()[c.Hello.Session]
		t.Logf("session %d: %d QPs, %d descriptors; the user %d", len(hogs), n, fds, held())
		if fds > perSession {
			t.Errorf("session %d holds %d descriptors, limits.fds %d", len(hogs), fds, perSession)
		}
	}
	if refused == nil {
		t.Fatalf("%d sessions of one user with limits.user_fds %d, none refused", len(hogs), perUser)
	}
	if !errors.Is(refused, syscall.EMFILE) {
		t.Fatalf("a session past the user's share: %v, want EMFILE", refused)
	}
	t.Logf("refused: %v", refused)
	if got := held(); got > perUser || got < perUser-3 {
		t.Errorf("root's sessions hold %d descriptors, want at most limits.user_fds %d and close to it", got, perUser)
	}
	if len(hogs) < 3 {
		t.Errorf("%d sessions before the refusal: want the user's share to take more than two", len(hogs))
	}
	// The hogs go on.
	if _, err := hogs[0].ListDevices(); err != nil {
		t.Fatalf("a session of the user at its share: %v", err)
	}

	// Another user is served meanwhile.
	ch := startChild(t, "nobody", "uid-send", sock, "")
	if f := ch.expect("SENT"); len(f) != 2 || f[1] != fmt.Sprint(otherUID) {
		t.Fatalf("the other user's client said %q", f)
	}
	if err := ch.cmd.Wait(); err != nil {
		t.Fatal(err)
	}

	// A session that ends gives its descriptors back to its user.
	hogs[0].Close()
	waitFor(t, "the first hog's session to end", func() bool { return held() <= perUser-perSession+3 })
	c, err := client.Dial(sock, "again")
	if err != nil {
		t.Fatalf("root after one of its sessions ended: %v", err)
	}
	defer c.Close()
	if _, err := c.OpenDevice("rvt0"); err != nil {
		t.Fatal(err)
	}
}

// uidSendRole runs as otherUID: two sessions, an RC QP each (rvt0 and
// rvt1), connected, one SEND between them; it prints SENT and its uid.
func uidSendRole(sock string) error {
	if err := syscall.Setgroups(nil); err != nil {
		return err
	}
	if err := syscall.Setresgid(otherUID, otherUID, otherUID); err != nil {
		return err
	}
	if err := syscall.Setresuid(otherUID, otherUID, otherUID); err != nil {
		return err
	}
	a, err := newNode(sock, "rvt0")
	if err != nil {
		return fmt.Errorf("as uid %d: %w", otherUID, err)
	}
	b, err := newNode(sock, "rvt1")
	if err != nil {
		return fmt.Errorf("as uid %d: %w", otherUID, err)
	}
	ea, err := a.endpoint()
	if err != nil {
		return err
	}
	eb, err := b.endpoint()
	if err != nil {
		return err
	}
	if err := a.connect(eb); err != nil {
		return err
	}
	if err := b.connect(ea); err != nil {
		return err
	}
	if err := b.qp.PostRecv(7, client.SGE{Addr: b.mr.Addr, Length: 4096, LKey: b.mr.LKey}); err != nil {
		return err
	}
	copy(a.shm.Mem, "from another user")
	if err := a.qp.PostSend(client.SendWR{WRID: 8, Opcode: 2, Flags: 2,
		SGL: []client.SGE{{Addr: a.mr.Addr, Length: 17, LKey: a.mr.LKey}}}); err != nil {
		return err
	}
	if wc, err := a.poll(1); err != nil || wc[0].Status != 0 {
		return fmt.Errorf("send completion %+v: %v", wc, err)
	}
	if wc, err := b.poll(1); err != nil || wc[0].Status != 0 || wc[0].ByteLen != 17 {
		return fmt.Errorf("receive completion %+v: %v", wc, err)
	}
	if string(b.shm.Mem[:17]) != "from another user" {
		return fmt.Errorf("received %q", b.shm.Mem[:17])
	}
	fmt.Println("SENT", os.Getuid())
	return nil
}
