package rvtd_test

import (
	"testing"

	"github.com/softverbs/softverbs/rvtd/client"
)

func TestMemoryWindows(t *testing.T) {
	_, sock := startDaemon(t)
	a, b := pair(t, sock, false, false)
	const pd = 2
	write := func(rkey uint32, addr uint64, seed int) uint8 {
		t.Helper()
		for j := 0; j < 256; j++ {
			b.shm.Mem[j] = pattern(seed, j)
		}
		if err := b.qp.PostSend(client.SendWR{WRID: 1, Opcode: 0, Flags: 2, RemoteAddr: addr, RKey: rkey,
			SGL: []client.SGE{{Addr: b.mr.Addr, Length: 256, LKey: b.mr.LKey}}}); err != nil {
			t.Fatal(err)
		}
		wcs, err := b.poll(1)
		if err != nil {
			t.Fatal(err)
		}
		return wcs[0].Status
	}
	win := a.mr.Addr + 64<<10

	// Type 1: bound by a control message.
	mw1, _, err := a.dev.AllocMW(pd, 1)
	if err != nil {
		t.Fatal(err)
	}
	rkey, err := a.dev.BindMW(mw1, a.mr, win, 4096, 2) // REMOTE_WRITE
	if err != nil {
		t.Fatal(err)
	}
	if st := write(rkey, win, 5); st != 0 {
		t.Fatalf("WRITE through the window: status %d", st)
	}
	for j := 0; j < 256; j++ {
		if a.shm.Mem[64<<10+j] != pattern(5, j) {
			t.Fatalf("byte %d", j)
		}
	}

	// Type 2: bound by a BIND_MW WQE on a's QP.
	mw2, rkey2, err := a.dev.AllocMW(pd, 2)
	if err != nil {
		t.Fatal(err)
	}
	newKey := rkey2&^0xff | (rkey2+1)&0xff
	if err := a.qp.PostSend(client.SendWR{WRID: 2, Opcode: 8, Flags: 2, AH: mw2, RemoteQPN: a.mr.Handle,
		RemoteAddr: win + 8192, CompareAdd: 4096, Swap: 2, RKey: newKey}); err != nil {
		t.Fatal(err)
	}
	if wcs, err := a.poll(1); err != nil || wcs[0].Status != 0 || wcs[0].WRID != 2 {
		t.Fatalf("BIND_MW: %+v %v", wcs, err)
	}
	if st := write(newKey, win+8192, 6); st != 0 {
		t.Fatalf("WRITE through the type-2 window: status %d", st)
	}
	for j := 0; j < 256; j++ {
		if a.shm.Mem[64<<10+8192+j] != pattern(6, j) {
			t.Fatalf("byte %d", j)
		}
	}
	// Outside the window: remote access error (b's QP goes to ERR).
	if st := write(newKey, win+8192+4000, 7); st != 10 {
		t.Fatalf("WRITE past the window: status %d, want REM_ACCESS_ERR", st)
	}
}
