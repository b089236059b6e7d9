package rvtd_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// TestSessionDescriptorShare: a session that creates QPs until it holds
// its share of the daemon's descriptors (limits.fds) is refused with
// ENOMEM, as a device refuses a QP past max_qp, and a channel past it with
// EMFILE; its session goes on (queries, a CQ, which keeps no descriptor,
// QPs again once it destroys one), and other sessions connect, create
// QPs and pass traffic.
func TestSessionDescriptorShare(t *testing.T) {
	const limit = 48
	cfg := rvtd.DefaultConfig()
	cfg.Limits.FDs = limit
	srv, sock := startDaemonConfig(t, cfg)
	if srv.FDLimit() != limit {
		t.Fatalf("FDLimit %d, want limits.fds %d", srv.FDLimit(), limit)
	}
	hog, d := openDevice(t, sock, "hog", "rvt0")
	id := hog.Hello.Session
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(64, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The session's count once its last reply is through: a memfd counts
	// until the reply has passed it, and a session serves its next request
	// only after that.
	fds := func() int {
		t.Helper()
		if _, err := d.QueryDevice(); err != nil {
			t.Fatal(err)
		}
		return srv.SessionFDsForTest()[id]
	}
	// Its socket, the client's /proc/<pid>/mem, its pidfd (if the kernel
	// has pidfd_open) and the device context's async event socket; the
	// CQ's memfd was passed and closed.
	base := fds()
	if base < 3 || base > 4 {
		t.Fatalf("a session with one device context and a CQ holds %d descriptors, want 4 (3 without a pidfd)", base)
	}
	capa := proto.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	qps := qpsUntilRefused(t, d, pd, cq, limit)
	// A QP keeps its doorbell and needs its memfd too until the reply has
	// passed it: the last one is made with 2 left.
	if want := limit - base - 1; len(qps) != want {
		t.Errorf("%d QPs made, want %d (limit %d, %d held before)", len(qps), want, limit, base)
	}
	if got := fds(); got != base+len(qps) || got > limit {
		t.Errorf("the session holds %d descriptors, want %d, at most %d", got, base+len(qps), limit)
	}
	if _, err := d.CreateCompChannel(); !errors.Is(err, syscall.EMFILE) {
		t.Errorf("completion channel past the share: %v, want EMFILE", err)
	}
	if _, err := hog.OpenDevice("rvt1"); !errors.Is(err, syscall.EMFILE) {
		t.Errorf("device context past the share: %v, want EMFILE", err)
	}
	if _, err := hog.CreateEventChannel(); !errors.Is(err, syscall.EMFILE) {
		t.Errorf("rdma_cm event channel past the share: %v, want EMFILE", err)
	}
	// Refused, not torn down: the session goes on.
	if _, err := d.QueryDevice(); err != nil {
		t.Fatalf("the session after its refusals: %v", err)
	}
	if _, err := d.CreateCQ(16, 0); err != nil {
		t.Errorf("a CQ (no descriptor kept) at the share: %v", err)
	}
	if st := srv.Stats(); st.Sessions != 1 || st.QPs != len(qps) {
		t.Errorf("after the refusals: %+v, want 1 session and %d QPs", st, len(qps))
	}

	// Others are served meanwhile: two more sessions, an RC QP each,
	// connected, a SEND between them.
	a, b := pair(t, sock, false, false)
	sendOne(t, a, b, 3000, 5)

	// A destroyed QP gives its descriptor back.
	if err := qps[0].Destroy(); err != nil {
		t.Fatal(err)
	}
	if got := fds(); got != base+len(qps)-1 {
		t.Errorf("after a destroy: %d descriptors, want %d", got, base+len(qps)-1)
	}
	if _, err := d.CreateQP(pd, 2, cq, cq, capa); err != nil {
		t.Errorf("a QP after a destroy: %v", err)
	}
	if _, err := d.CreateQP(pd, 2, cq, cq, capa); !errors.Is(err, syscall.ENOMEM) {
		t.Errorf("and one more: %v, want ENOMEM", err)
	}
	hog.Close()
	waitFor(t, "the hog's session to end", func() bool { st := srv.Stats(); return st.Sessions == 2 && st.QPs == 2 })
}

// qpsUntilRefused makes small RC QPs on d until one is refused for
// descriptors (ENOMEM, else t fails), and returns those it made; more
// than most fails t.
func qpsUntilRefused(t *testing.T, d *client.Device, pd uint32, cq *client.CQ, most int) []*client.QP {
	t.Helper()
	capa := proto.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	var qps []*client.QP
	for {
		q, err := d.CreateQP(pd, 2, cq, cq, capa)
		if err != nil {
			if !errors.Is(err, syscall.ENOMEM) {
				t.Fatalf("QP %d past the share: %v, want ENOMEM", len(qps)+1, err)
			}
			return qps
		}
		qps = append(qps, q)
		if len(qps) > most {
			t.Fatalf("%d QPs, at most %d expected", len(qps), most)
		}
	}
}
