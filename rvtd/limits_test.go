package rvtd_test

import (
	"errors"
	"testing"

	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

func TestSessionLimits(t *testing.T) {
	cfg := rvtd.DefaultConfig()
	cfg.Limits = rvtd.Limits{QPs: 1, MRs: 1, CQEntries: 64, MemBytes: 1 << 20}
	_, sock := startDaemonConfig(t, cfg)
	for round := 0; round < 2; round++ { // per session: a second session gets the same
		c, err := client.Dial(sock, "limits")
		if err != nil {
			t.Fatal(err)
		}
		d, _ := c.OpenDevice("rvt0")
		pd, _ := d.AllocPD()
		// The device's attributes say what this session may hold, so a
		// program that sizes itself by them (perftest, cmtime's peers)
		// asks for what it can get.
		a, err := d.QueryDevice()
		if err != nil {
			t.Fatal(err)
		}
		if a.MaxQP != 1 || a.MaxSRQ != 1 || a.MaxMR != 1 || a.MaxCQE != 64 || a.MaxCQ != 64 {
			t.Errorf("query_device: max_qp %d max_srq %d max_mr %d max_cqe %d max_cq %d, want the session's 1 1 1 64 64",
				a.MaxQP, a.MaxSRQ, a.MaxMR, a.MaxCQE, a.MaxCQ)
		}
		if a.MaxResRdAtom != a.MaxQPRdAtom*a.MaxQP {
			t.Errorf("query_device: max_res_rd_atom %d, want max_qp_rd_atom %d x max_qp %d", a.MaxResRdAtom, a.MaxQPRdAtom, a.MaxQP)
		}
		if _, err := d.ShmAlloc(2 << 20); !errors.Is(err, proto.ENOMEM) {
			t.Errorf("2 MiB segment: %v, want ENOMEM", err)
		}
		shm, err := d.ShmAlloc(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.RegMR(pd, shm, 0, 4096, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := d.RegMR(pd, shm, 4096, 4096, 1); !errors.Is(err, proto.ENOMEM) {
			t.Errorf("second MR: %v, want ENOMEM", err)
		}
		cq, err := d.CreateCQ(64, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.CreateCQ(1, 0); !errors.Is(err, proto.ENOMEM) {
			t.Errorf("CQ entries past the limit: %v, want ENOMEM", err)
		}
		capa := proto.Cap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
		if _, err := d.CreateQP(pd, 2, cq, cq, capa); err != nil {
			t.Fatal(err)
		}
		if _, err := d.CreateQP(pd, 2, cq, cq, capa); !errors.Is(err, proto.ENOMEM) {
			t.Errorf("second QP: %v, want ENOMEM", err)
		}
		if _, err := d.CreateSRQ(pd, 4, 1, 0, 0); !errors.Is(err, proto.ENOMEM) {
			t.Errorf("an SRQ past the QP limit: %v, want ENOMEM", err)
		}
		c.Close()
	}
}

// The defaults leave room for what RDMA programs do at scale (cmtime's
// thousands of connections: an rdma_cm ID and a QP each) and report the
// device's own maxima where the session's are larger.
func TestSessionLimitsDefault(t *testing.T) {
	srv, sock := startDaemon(t)
	c, d := openDevice(t, sock, "limits", "rvt0")
	a, err := d.QueryDevice()
	if err != nil {
		t.Fatal(err)
	}
	dev := srv.Device("rvt0").QueryDevice()
	if int(a.MaxQP) != min(dev.MaxQP, rvtd.DefaultMaxQPs) || int(a.MaxMR) != min(dev.MaxMR, rvtd.DefaultMaxMRs) || int(a.MaxCQE) != min(dev.MaxCQE, rvtd.DefaultMaxCQEntries) {
		t.Errorf("query_device: max_qp %d max_mr %d max_cqe %d; device %d %d %d", a.MaxQP, a.MaxMR, a.MaxCQE, dev.MaxQP, dev.MaxMR, dev.MaxCQE)
	}
	// cmtime -c 3000: 3000 IDs and QPs in one session (the ucma has no
	// limit of its own; rxe allows 65536 QPs).
	ch, err := c.CreateEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	capa := proto.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}
	for i := 0; i < 3000; i++ {
		if _, err := ch.CreateID(uint64(i), 0x0106, 2); err != nil { // RDMA_PS_TCP, RC
			t.Fatalf("rdma_cm ID %d: %v", i, err)
		}
		if _, err := d.CreateQP(pd, 2, cq, cq, capa); err != nil {
			t.Fatalf("QP %d: %v", i, err)
		}
	}
}
