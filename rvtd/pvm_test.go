package rvtd_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// Client memory through process_vm (reg_mr kind 2) and fast-register MRs.

const (
	accessAtomic = 8 // IBV_ACCESS_REMOTE_ATOMIC
	testPD       = 2 // newNode's PD: the first handle after the device's

	pvmSize     = 2 << 20
	pvmReadOff  = 512 << 10 // the owner's READ source
	pvmReadLen  = 64 << 10
	pvmRecvOff  = 1 << 20 // where the peer's SEND lands
	pvmSendLen  = 5000
	pvmAtomOff  = 1536 << 10 // the atomic word
	pvmSeedR    = 3
	pvmSeedS    = 4
	pvmSeedB    = 5
	pvmBackOff  = 2<<20 + 512<<10 // in the peer's segment: the owner's WRITE back
	pvmBackRecv = 3<<20 + 512<<10 // and its SEND back

	wcRemAccessErr = 10 // IBV_WC_REM_ACCESS_ERR
	wcLocProtErr   = 4  // IBV_WC_LOC_PROT_ERR
)

// allowAtomics adds REMOTE_ATOMIC to a connected QP's access flags (RTS to
// RTS); connect grants write and read only.
func (n *node) allowAtomics() error {
	return n.qp.Modify(proto.QPAttr{State: 3, AccessFlags: accessAll | accessAtomic}, maskState|maskAccess)
}

// exchange prints our endpoint, reads the peer's, connects and says READY.
func (n *node) exchange(ep endpoint, before func() error) (endpoint, error) {
	fmt.Println("EP", ep)
	f, err := readLine("PEER")
	if err != nil {
		return endpoint{}, err
	}
	peer, err := parseEndpoint(f)
	if err != nil {
		return peer, err
	}
	if before != nil {
		if err := before(); err != nil {
			return peer, err
		}
	}
	if err := n.connect(peer); err != nil {
		return peer, err
	}
	if err := n.allowAtomics(); err != nil {
		return peer, err
	}
	fmt.Println("READY")
	return peer, nil
}

// one posts wr and waits for its completion.
func (n *node) one(wr client.SendWR) (client.WC, error) {
	if err := n.qp.PostSend(wr); err != nil {
		return client.WC{}, err
	}
	wcs, err := n.poll(1)
	if err != nil {
		return client.WC{}, err
	}
	return wcs[0], nil
}

func pvmRole(role, sock, dev string) error {
	switch role {
	case "pvm-noperm":
		return nopermRole()
	case "pvm-victim-sleep":
		buf := make([]byte, 4096)
		fmt.Println("ADDR", uint64(uintptr(unsafe.Pointer(&buf[0]))))
		_, _ = readLine("NEVER")
		buf[0] = 1
		return nil
	}
	n, err := newNode(sock, dev)
	if err != nil {
		return err
	}
	switch role {
	case "pvm-owner", "pvm-victim":
		buf := make([]byte, pvmSize)
		for j := 0; j < pvmReadLen; j++ {
			buf[pvmReadOff+j] = pattern(pvmSeedR, j)
		}
		binary.NativeEndian.PutUint64(buf[pvmAtomOff:], 100)
		mr, err := n.dev.RegMem(testPD, buf, accessAll|accessAtomic)
		if err != nil {
			return fmt.Errorf("reg_mr kind 2: %w", err)
		}
		ep, err := n.endpoint()
		if err != nil {
			return err
		}
		ep.Addr, ep.RKey = mr.Addr, mr.RKey
		peerEP, err := n.exchange(ep, func() error {
			return n.qp.PostRecv(7, client.SGE{Addr: mr.Addr + pvmRecvOff, Length: 8192, LKey: mr.LKey})
		})
		if err != nil {
			return err
		}
		if role == "pvm-victim" {
			_, _ = readLine("NEVER")
			return nil
		}
		if _, err := readLine("CHECK"); err != nil {
			return err
		}
		wcs, err := n.poll(1)
		if err != nil {
			return err
		}
		if wc := wcs[0]; wc.Status != 0 || wc.WRID != 7 || wc.Opcode != 128 || wc.ByteLen != pvmSendLen {
			return fmt.Errorf("receive into kind-2 memory: %+v", wc)
		}
		for j := 0; j < writeLen; j++ {
			if buf[j] != pattern(writeSeed, j) {
				return fmt.Errorf("RDMA WRITE into kind-2 memory: byte %d is %#x, want %#x", j, buf[j], pattern(writeSeed, j))
			}
		}
		for j := 0; j < pvmSendLen; j++ {
			if buf[pvmRecvOff+j] != pattern(pvmSeedS, j) {
				return fmt.Errorf("SEND into kind-2 memory: byte %d is %#x", j, buf[pvmRecvOff+j])
			}
		}
		if buf[pvmRecvOff+pvmSendLen] != 0 {
			return errors.New("SEND wrote past its length")
		}
		if v := binary.NativeEndian.Uint64(buf[pvmAtomOff:]); v != 7 {
			return fmt.Errorf("atomics on kind-2 memory: the word is %d, want 7 (100 + 5, then swapped)", v)
		}
		// The other way: kind-2 memory as the source of its own SEND
		// and WRITE (the daemon gathers with process_vm_readv).
		for j := 0; j < pvmReadLen; j++ {
			buf[pvmReadOff+j] = pattern(pvmSeedB, j)
		}
		wc, err := n.one(client.SendWR{WRID: 20, Opcode: 2, Flags: 2,
			SGL: []client.SGE{{Addr: mr.Addr + pvmReadOff, Length: 3000, LKey: mr.LKey}}})
		if err != nil || wc.Status != 0 {
			return fmt.Errorf("SEND from kind-2 memory: %+v %v", wc, err)
		}
		wc, err = n.one(client.SendWR{WRID: 21, Opcode: 0, Flags: 2,
			SGL:        []client.SGE{{Addr: mr.Addr + pvmReadOff, Length: pvmReadLen, LKey: mr.LKey}},
			RemoteAddr: peerEP.Addr + pvmBackOff, RKey: peerEP.RKey})
		if err != nil || wc.Status != 0 {
			return fmt.Errorf("WRITE from kind-2 memory: %+v %v", wc, err)
		}
		if err := n.dev.DeregMR(mr); err != nil {
			return err
		}
		fmt.Println("PVMOK")
	case "pvm-peer":
		ep, err := n.endpoint()
		if err != nil {
			return err
		}
		peer, err := n.exchange(ep, func() error {
			return n.qp.PostRecv(30, client.SGE{Addr: n.mr.Addr + pvmBackRecv, Length: 4096, LKey: n.mr.LKey})
		})
		if err != nil {
			return err
		}
		if _, err := readLine("GO"); err != nil {
			return err
		}
		mem := n.shm.Mem
		for j := 0; j < writeLen; j++ {
			mem[j] = pattern(writeSeed, j)
		}
		const chunk = 64 << 10
		for k := 0; k < writeLen/chunk; k++ {
			wc, err := n.one(client.SendWR{WRID: uint64(k), Opcode: 0, Flags: 2,
				SGL:        []client.SGE{{Addr: n.mr.Addr + uint64(k*chunk), Length: chunk, LKey: n.mr.LKey}},
				RemoteAddr: peer.Addr + uint64(k*chunk), RKey: peer.RKey})
			if err != nil || wc.Status != 0 {
				return fmt.Errorf("WRITE %d into kind-2 memory: %+v %v", k, wc, err)
			}
		}
		const readDst = 1 << 20
		wc, err := n.one(client.SendWR{WRID: 10, Opcode: 4, Flags: 2,
			SGL:        []client.SGE{{Addr: n.mr.Addr + readDst, Length: pvmReadLen, LKey: n.mr.LKey}},
			RemoteAddr: peer.Addr + pvmReadOff, RKey: peer.RKey})
		if err != nil || wc.Status != 0 {
			return fmt.Errorf("READ from kind-2 memory: %+v %v", wc, err)
		}
		for j := 0; j < pvmReadLen; j++ {
			if mem[readDst+j] != pattern(pvmSeedR, j) {
				return fmt.Errorf("READ from kind-2 memory: byte %d is %#x, want %#x", j, mem[readDst+j], pattern(pvmSeedR, j))
			}
		}
		const sendSrc = 2 << 20
		for j := 0; j < pvmSendLen; j++ {
			mem[sendSrc+j] = pattern(pvmSeedS, j)
		}
		wc, err = n.one(client.SendWR{WRID: 11, Opcode: 2, Flags: 2,
			SGL: []client.SGE{{Addr: n.mr.Addr + sendSrc, Length: pvmSendLen, LKey: n.mr.LKey}}})
		if err != nil || wc.Status != 0 {
			return fmt.Errorf("SEND into kind-2 memory: %+v %v", wc, err)
		}
		const atomDst = 3 << 20
		wc, err = n.one(client.SendWR{WRID: 12, Opcode: 6, Flags: 2, CompareAdd: 5,
			SGL:        []client.SGE{{Addr: n.mr.Addr + atomDst, Length: 8, LKey: n.mr.LKey}},
			RemoteAddr: peer.Addr + pvmAtomOff, RKey: peer.RKey})
		if err != nil || wc.Status != 0 {
			return fmt.Errorf("FETCH_ADD on kind-2 memory: %+v %v", wc, err)
		}
		if v := binary.NativeEndian.Uint64(mem[atomDst:]); v != 100 {
			return fmt.Errorf("FETCH_ADD returned %d, want 100", v)
		}
		wc, err = n.one(client.SendWR{WRID: 13, Opcode: 5, Flags: 2, CompareAdd: 105, Swap: 7,
			SGL:        []client.SGE{{Addr: n.mr.Addr + atomDst + 8, Length: 8, LKey: n.mr.LKey}},
			RemoteAddr: peer.Addr + pvmAtomOff, RKey: peer.RKey})
		if err != nil || wc.Status != 0 {
			return fmt.Errorf("CMP_SWAP on kind-2 memory: %+v %v", wc, err)
		}
		if v := binary.NativeEndian.Uint64(mem[atomDst+8:]); v != 105 {
			return fmt.Errorf("CMP_SWAP returned %d, want 105", v)
		}
		fmt.Println("PEEROK")
		if _, err := readLine("BACK"); err != nil {
			return err
		}
		wcs, err := n.poll(1)
		if err != nil {
			return err
		}
		if wc := wcs[0]; wc.Status != 0 || wc.WRID != 30 || wc.ByteLen != 3000 {
			return fmt.Errorf("receive of the SEND from kind-2 memory: %+v", wc)
		}
		for j := 0; j < 3000; j++ {
			if mem[pvmBackRecv+j] != pattern(pvmSeedB, j) {
				return fmt.Errorf("SEND from kind-2 memory: byte %d is %#x", j, mem[pvmBackRecv+j])
			}
		}
		for j := 0; j < pvmReadLen; j++ {
			if mem[pvmBackOff+j] != pattern(pvmSeedB, j) {
				return fmt.Errorf("WRITE from kind-2 memory: byte %d is %#x", j, mem[pvmBackOff+j])
			}
		}
		fmt.Println("BACKOK")
	default:
		return fmt.Errorf("unknown role %s", role)
	}
	_, _ = readLine("EOF")
	return nil
}

// nopermRole probes its parent's memory as the daemon does, first as root
// (allowed), then after dropping to nobody (refused: EPERM).
func nopermRole() error {
	addr, err := strconv.ParseUint(os.Getenv("RVTD_TEST_ADDR"), 10, 64)
	if err != nil {
		return err
	}
	ppid := os.Getppid()
	fmt.Println("ROOT", errnoWord(rvtd.ProbeProcessForTest(ppid, addr, 8)))
	if err := syscall.Setgroups(nil); err != nil {
		return err
	}
	if err := syscall.Setresgid(65534, 65534, 65534); err != nil {
		return err
	}
	if err := syscall.Setresuid(65534, 65534, 65534); err != nil {
		return err
	}
	fmt.Println("NOBODY", errnoWord(rvtd.ProbeProcessForTest(ppid, addr, 8)))
	return nil
}

func errnoWord(err error) string {
	var e proto.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &e):
		return unix.ErrnoName(unix.Errno(e))
	}
	return strings.ReplaceAll(err.Error(), " ", "_")
}

// TestProcessVMBetweenProcesses: a client registers ordinary heap memory
// (kind 2) and a client on the other device WRITEs into it, READs from it,
// SENDs into it and runs atomics on it; the owner checks every byte.
func TestProcessVMBetweenProcesses(t *testing.T) {
	srv, sock := startDaemon(t)
	owner, peer := pairUp(t, sock, "pvm-owner", "pvm-peer")
	peer.send("GO")
	peer.expect("PEEROK")
	owner.send("CHECK")
	owner.expect("PVMOK")
	peer.send("BACK")
	peer.expect("BACKOK")
	owner.in.Close()
	peer.in.Close()
	if err := owner.cmd.Wait(); err != nil {
		t.Errorf("owner: %v", err)
	}
	if err := peer.cmd.Wait(); err != nil {
		t.Errorf("peer: %v", err)
	}
	waitFor(t, "sessions to end", func() bool { st := srv.Stats(); return st.Sessions == 0 && st.QPs == 0 })
}

// TestProcessVMKilledOwner kills (SIGKILL) a client while a peer streams
// 1 MiB WRITEs into its kind-2 memory: the peer gets an error completion
// and rvtd keeps serving.
func TestProcessVMKilledOwner(t *testing.T) {
	srv, sock := startDaemon(t)
	victim, writer := pairUp(t, sock, "pvm-victim", "stream")
	writer.send("GO")
	writer.expect("STREAMING")
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	f := writer.expect("ERR")
	t.Logf("writer's error completion: status %s after %s WRITEs", f[1], f[2])
	switch f[1] {
	case "10", "12", "5": // REM_ACCESS_ERR (its memory gone), RETRY_EXC_ERR (its QP gone), a flush after either
	default:
		t.Errorf("writer's error completion: status %s", f[1])
	}
	// The writer exits after its error completion: at most its session is left.
	waitFor(t, "the victim's objects to go", func() bool { st := srv.Stats(); return st.Sessions <= 1 && st.QPs <= 1 })
	c, err := client.Dial(sock, "after")
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.OpenDevice("rvt1")
	if err != nil {
		t.Fatal(err)
	}
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	if _, err := d.RegMem(pd, buf, accessAll); err != nil {
		t.Fatalf("kind-2 registration after the kill: %v", err)
	}
	c.Close()
	writer.in.Close()
	_ = writer.cmd.Wait()
	waitFor(t, "sessions to end", func() bool { st := srv.Stats(); return st.Sessions == 0 && st.QPs == 0 })
}

// TestProcessVMRegErrors: EFAULT for memory that is not mapped (all of
// it, or only its last byte), EPERM from a refusing system with the text a
// user needs, EINVAL for a kind-2 request naming a segment.
func TestProcessVMRegErrors(t *testing.T) {
	_, sock := startDaemon(t)
	c, d := openDevice(t, sock, "pvm-errors", "rvt0")
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	ps := os.Getpagesize()
	m, err := unix.Mmap(-1, 0, 2*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	base := uint64(uintptr(unsafe.Pointer(&m[0])))
	if err := unix.MunmapPtr(unsafe.Pointer(&m[ps]), uintptr(ps)); err != nil { // the second page goes
		t.Fatal(err)
	}
	defer unix.MunmapPtr(unsafe.Pointer(&m[0]), uintptr(ps))
	for _, tc := range []struct {
		name         string
		addr, length uint64
		want         error
	}{
		{"mapped", base, uint64(ps), nil},
		{"page 0", 0, 8, proto.EFAULT},
		{"last byte unmapped", base, uint64(ps) + 1, proto.EFAULT},
		{"all unmapped", base + uint64(ps), 64, proto.EFAULT},
		{"empty", base, 0, proto.EINVAL},
		{"wraps", ^uint64(0) - 8, 64, proto.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mr, err := d.RegMemAt(pd, tc.addr, tc.length, 0x10000, accessAll)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("reg_mr kind 2 of %d bytes at %#x: %v, want %v", tc.length, tc.addr, err, tc.want)
			}
			if mr != nil {
				if err := d.DeregMR(mr); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	if _, err := c.Call(proto.OpRegMR, pd, &proto.RegMR{Kind: proto.MRVM, Addr: base, Length: 8, Shm: 1}); !errors.Is(err, proto.EINVAL) {
		t.Errorf("kind 2 naming a segment: %v, want EINVAL", err)
	}

	t.Run("EPERM", func(t *testing.T) {
		restore := rvtd.SetProbeErrorForTest(proto.EPERM)
		c2, err := client.Dial(sock, "pvm-eperm")
		restore()
		if err != nil {
			t.Fatal(err)
		}
		defer c2.Close()
		d2, err := c2.OpenDevice("rvt0")
		if err != nil {
			t.Fatal(err)
		}
		pd2, err := d2.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		_, err = d2.RegMem(pd2, make([]byte, 64), accessAll)
		var me *client.MemAccessError
		if !errors.As(err, &me) || !errors.Is(err, proto.EPERM) {
			t.Fatalf("refused registration: %v, want a MemAccessError (EPERM)", err)
		}
		for _, s := range []string{"PR_SET_PTRACER", "/proc/sys/kernel/yama/ptrace_scope", strconv.Itoa(int(c2.Hello.DaemonPID))} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error text %q does not name %s", err, s)
			}
		}
	})
}

// TestProcessVMRefusedByKernel runs the daemon's probe in a child process
// that drops root for nobody: the kernel refuses process_vm_readv of this
// (root's) process, and the probe says EPERM.
func TestProcessVMRefusedByKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop to another user")
	}
	word := new(uint64)
	t.Setenv("RVTD_TEST_ADDR", strconv.FormatUint(uint64(uintptr(unsafe.Pointer(word))), 10))
	ch := startChild(t, "noperm", "pvm-noperm", "", "")
	if f := ch.expect("ROOT"); f[1] != "ok" {
		t.Fatalf("probe as root: %s", f[1])
	}
	if f := ch.expect("NOBODY"); f[1] != "EPERM" {
		t.Fatalf("probe as nobody: %s, want EPERM", f[1])
	}
	if err := ch.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	*word = 1 // keep it alive until the child has probed it
}

// TestProcessVMPidfd: the accessor notices its process's exit through the
// pidfd and refuses every access afterwards, without touching the pid
// (which the kernel may give to another process).
func TestProcessVMPidfd(t *testing.T) {
	ch := startChild(t, "victim", "pvm-victim-sleep", "", "")
	f := ch.expect("ADDR")
	addr, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	fails, gone, err := rvtd.ProcGoneForTest(ch.cmd.Process.Pid, addr, func() {
		_ = ch.cmd.Process.Signal(syscall.SIGKILL)
		_ = ch.cmd.Wait() // reaped: the pid is free for reuse
	})
	if err != nil {
		t.Fatal(err)
	}
	if !gone || !fails {
		t.Fatalf("after the exit: gone %v, reads fail %v", gone, fails)
	}
}

// TestFastRegThroughDaemon: alloc_mr, a REG_MR WQE whose page list and
// pages lie in a shared-memory segment (scattered pages) or in the client's
// own memory, a peer's WRITE through the new rkey, then LOCAL_INV or
// SEND_WITH_INV, after which the same WRITE fails with a remote access
// error.
func TestFastRegThroughDaemon(t *testing.T) {
	const ps = 4096
	const iova = 0x40000000
	const listOff = 3 << 20 // the page list, in a's segment
	pageOffs := []uint64{5 * ps, 2 * ps, 7 * ps}
	for _, mode := range []string{"local_inv", "send_with_inv", "client_memory"} {
		t.Run(mode, func(t *testing.T) {
			_, sock := startDaemon(t)
			a, b := pair(t, sock, false, false)
			mr, err := a.dev.AllocMR(testPD, 4)
			if err != nil {
				t.Fatal(err)
			}
			reg := client.FastReg{MR: mr, Key: 1, Access: accessAll, IOVA: iova, Length: 3 * ps, PageShift: 12, Pages: 3}
			var heap []byte
			page := func(i int) []byte { return a.shm.Mem[pageOffs[i] : pageOffs[i]+ps] }
			if mode == "client_memory" {
				heap = make([]byte, 6*ps)
				al := (ps - int(uintptr(unsafe.Pointer(&heap[0])))%ps) % ps
				addrs := make([]uint64, 3)
				for i := range addrs {
					addrs[i] = uint64(uintptr(unsafe.Pointer(&heap[al+(2-i)*ps]))) // reversed
				}
				list := make([]byte, 24)
				client.PutPageList(list, addrs)
				reg.ListAddr = uint64(uintptr(unsafe.Pointer(&list[0])))
				page = func(i int) []byte { return heap[al+(2-i)*ps : al+(3-i)*ps] }
				defer func() { _ = list[0] }()
			} else {
				reg.Shm = a.shm.Handle
				reg.ListAddr = listOff
				client.PutPageList(a.shm.Mem[listOff:], pageOffs)
			}
			if wcs, err := a.poll0(client.RegMRWR(1, 2, reg)); err != nil || wcs.Status != 0 {
				t.Fatalf("REG_MR: %+v %v", wcs, err)
			}
			rkey := client.FastRegKey(mr, 1)
			if reg.Shm != 0 {
				if _, err := a.c.Call(proto.OpShmFree, a.shm.Handle, nil); !errors.Is(err, proto.EBUSY) {
					t.Errorf("shm_free of the page segment: %v, want EBUSY", err)
				}
			}
			write := func(seed int) uint8 {
				for j := 0; j < 3*ps; j++ {
					b.shm.Mem[j] = pattern(seed, j)
				}
				wc, err := b.one(client.SendWR{WRID: 2, Opcode: 0, Flags: 2, RemoteAddr: iova, RKey: rkey,
					SGL: []client.SGE{{Addr: b.mr.Addr, Length: 3 * ps, LKey: b.mr.LKey}}})
				if err != nil {
					t.Fatal(err)
				}
				return wc.Status
			}
			if st := write(8); st != 0 {
				t.Fatalf("WRITE through the fast-registered rkey: status %d", st)
			}
			for i := 0; i < 3; i++ {
				for j, v := range page(i) {
					if v != pattern(8, i*ps+j) {
						t.Fatalf("page %d byte %d is %#x, want %#x", i, j, v, pattern(8, i*ps+j))
					}
				}
			}
			switch mode {
			case "local_inv", "client_memory":
				if wc, err := a.poll0(client.LocalInvWR(3, 2, rkey)); err != nil || wc.Status != 0 {
					t.Fatalf("LOCAL_INV: %+v %v", wc, err)
				}
			case "send_with_inv":
				if err := a.qp.PostRecv(4, client.SGE{Addr: a.mr.Addr + 1<<20, Length: 64, LKey: a.mr.LKey}); err != nil {
					t.Fatal(err)
				}
				wc, err := b.one(client.SendWithInvWR(5, 2, rkey, client.SGE{Addr: b.mr.Addr, Length: 16, LKey: b.mr.LKey}))
				if err != nil || wc.Status != 0 {
					t.Fatalf("SEND_WITH_INV: %+v %v", wc, err)
				}
				wcs, err := a.poll(1)
				if err != nil {
					t.Fatal(err)
				}
				const withInv = 8 // IBV_WC_WITH_INV
				if wc := wcs[0]; wc.Status != 0 || wc.Flags&withInv == 0 || bits.ReverseBytes32(wc.ImmData) != rkey {
					t.Fatalf("receive of SEND_WITH_INV: %+v, want WITH_INV of %#x", wc, rkey)
				}
			}
			if st := write(9); st != wcRemAccessErr {
				t.Fatalf("WRITE after the invalidation: status %d, want REM_ACCESS_ERR", st)
			}
			if heap != nil {
				_ = heap[0]
			}
		})
	}
}

// TestFastRegBadWQEs: REG_MR WQEs the daemon refuses complete in error.
func TestFastRegBadWQEs(t *testing.T) {
	const ps = 4096
	for _, tc := range []struct {
		name string
		edit func(f *client.FastReg, a *node)
		want uint8
	}{
		{"page outside the segment", func(f *client.FastReg, a *node) {
			client.PutPageList(a.shm.Mem[f.ListAddr:], []uint64{shmSize})
		}, wcLocProtErr},
		{"list outside the segment", func(f *client.FastReg, a *node) { f.ListAddr = shmSize - 4 }, wcLocProtErr},
		{"more pages than allocated", func(f *client.FastReg, a *node) { f.Pages = 5 }, 1}, // LOC_LEN_ERR
		{"page size 4", func(f *client.FastReg, a *node) { f.PageShift = 2 }, 2},           // LOC_QP_OP_ERR
		{"not a fast-register MR", func(f *client.FastReg, a *node) { f.MR = a.mr }, 2},
		{"page list not matching the length", func(f *client.FastReg, a *node) { f.Length = 3 * ps }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, sock := startDaemon(t)
			a, _ := pair(t, sock, false, false)
			mr, err := a.dev.AllocMR(testPD, 4)
			if err != nil {
				t.Fatal(err)
			}
			f := client.FastReg{MR: mr, Key: 1, Access: accessAll, IOVA: 0x10000, Length: ps, PageShift: 12,
				Shm: a.shm.Handle, ListAddr: 2 << 20, Pages: 1}
			client.PutPageList(a.shm.Mem[f.ListAddr:], []uint64{0})
			tc.edit(&f, a)
			wc, err := a.poll0(client.RegMRWR(1, 2, f))
			if err != nil {
				t.Fatal(err)
			}
			if wc.Status != tc.want {
				t.Fatalf("status %d, want %d", wc.Status, tc.want)
			}
		})
	}
}

// poll0 posts wr on n's QP and returns its completion.
func (n *node) poll0(wr client.SendWR) (client.WC, error) { return n.one(wr) }

// TestProcessMemoryOwner: hello opens a client's memory only while
// /proc/<pid> belongs to the client's user (SO_PEERCRED): a process that
// exec'd a setuid program since it connected, or made itself
// non-dumpable, is root's there, and reg_mr kind 2 is refused (EPERM).
func TestProcessMemoryOwner(t *testing.T) {
	uid := uint32(os.Getuid())
	if err := rvtd.OpenProcMemForTest(os.Getpid(), uid); err != nil {
		t.Fatalf("own memory as own user: %v", err)
	}
	err := rvtd.OpenProcMemForTest(os.Getpid(), uid+1)
	if !errors.Is(err, unix.EPERM) {
		t.Fatalf("own memory as another user: %v, want EPERM", err)
	}
}
