package rvtd_test

import (
	"context"
	"errors"
	"testing"

	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

func TestSessionLimits(t *testing.T) {
	cfg := rvtd.DefaultConfig()
	cfg.Limits = rvtd.Limits{QPs: 1, MRs: 1, CQEntries: 64, MemBytes: 1 << 20}
	srv, err := rvtd.New(cfg, rvtd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	sock := t.TempDir() + "/rvtd.sock"
	if err := srv.Listen(sock); err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	for round := 0; round < 2; round++ { // per session: a second session gets the same
		c, err := client.Dial(sock, "limits")
		if err != nil {
			t.Fatal(err)
		}
		d, _ := c.OpenDevice("rvt0")
		pd, _ := d.AllocPD()
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
