package client

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softverbs/softverbs/rvtd/proto"
)

// Memory the daemon reaches with process_vm_readv/writev (reg_mr kind 2,
// docs/rvtd-protocol.md section 8), and fast-register MRs.

// allowDaemon lets the daemon ptrace-read this process (Yama ptrace_scope
// 1), once per session: prctl(PR_SET_PTRACER, daemon pid). Without Yama
// the call fails with EINVAL and the ordinary ptrace rules apply (same
// user, or CAP_SYS_PTRACE); that is not an error here.
func (c *Client) allowDaemon() error {
	var err error
	c.ptracer.Do(func() {
		err = unix.Prctl(unix.PR_SET_PTRACER, uintptr(c.Hello.DaemonPID), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			err = nil
		}
	})
	if err != nil {
		return fmt.Errorf("prctl(PR_SET_PTRACER, %d): %w", c.Hello.DaemonPID, err)
	}
	return nil
}

// MemAccessError is reg_mr's EPERM for kind-2 memory: the system refused
// the daemon ptrace access to this process. errors.Is(err, proto.EPERM)
// holds.
type MemAccessError struct{ DaemonPID uint32 }

func (e *MemAccessError) Error() string {
	return fmt.Sprintf("rvtd (pid %d) may not read this process's memory (process_vm_readv: EPERM): "+
		"it needs the same user or CAP_SYS_PTRACE, and under Yama this process's PR_SET_PTRACER "+
		"permission, which the client set; /proc/sys/kernel/yama/ptrace_scope 2 or 3 forbids it "+
		"altogether: register shared memory (ShmAlloc) instead", e.DaemonPID)
}

func (e *MemAccessError) Unwrap() error { return proto.EPERM }

// RegMem registers buf, ordinary memory of this process (kind 2), at I/O
// virtual address equal to its address, as ibv_reg_mr does. The daemon
// reads and writes it with process_vm_readv/writev. The caller keeps buf
// reachable until DeregMR (the Go collector does not move heap memory).
//
// Errors: a *MemAccessError (EPERM) if the system refuses the daemon
// access, proto.EFAULT if the memory is not mapped, and the reg_mr errors.
func (d *Device) RegMem(pd uint32, buf []byte, access uint32) (*MR, error) {
	if len(buf) == 0 {
		return nil, errors.New("reg mem: empty buffer")
	}
	addr := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf))))
	return d.RegMemAt(pd, addr, uint64(len(buf)), addr, access)
}

// RegMemAt registers length bytes at address addr of this process (kind
// 2) at I/O virtual address iova: ibv_reg_mr_iova.
func (d *Device) RegMemAt(pd uint32, addr, length, iova uint64, access uint32) (*MR, error) {
	if err := d.c.allowDaemon(); err != nil {
		return nil, err
	}
	r, err := d.c.Call(proto.OpRegMR, pd, &proto.RegMR{Kind: proto.MRVM, Access: access, Addr: addr, Length: length, IOVA: iova})
	if errors.Is(err, proto.EPERM) {
		return nil, &MemAccessError{DaemonPID: d.c.Hello.DaemonPID}
	}
	if err != nil {
		return nil, err
	}
	o := r.(*proto.MRReply)
	return &MR{Handle: o.MR, LKey: o.LKey, RKey: o.RKey, Addr: iova}, nil
}

// DeregMR is ibv_dereg_mr.
func (d *Device) DeregMR(mr *MR) error {
	_, err := d.c.Call(proto.OpDeregMR, mr.Handle, nil)
	return err
}

// AllocMR allocates a fast-register MR of up to maxPages pages: its keys
// are invalid until a REG_MR WQE (RegMRWR) registers it.
func (d *Device) AllocMR(pd uint32, maxPages uint32) (*MR, error) {
	r, err := d.c.Call(proto.OpAllocMR, pd, &proto.AllocMR{MaxPages: maxPages})
	if err != nil {
		return nil, err
	}
	o := r.(*proto.MRReply)
	return &MR{Handle: o.MR, LKey: o.LKey, RKey: o.RKey}, nil
}

// Send-WQE opcodes beyond the atomics (ibv_wr_opcode; REG_MR is
// softverbs's, unused by libibverbs).
const (
	OpLocalInv    = 7
	OpSendWithInv = 9
	OpRegMR       = 12
)

// FastReg describes a REG_MR WQE: the page list is 8-byte little-endian
// page addresses at ListAddr, in the segment Shm (offsets in it), or with
// Shm 0 in this process's memory (addresses, reached with process_vm).
type FastReg struct {
	MR        *MR
	Key       uint8 // the new key byte of the MR's lkey and rkey
	Access    uint32
	IOVA      uint64
	Length    uint64
	PageShift uint8 // log2 of the page size, 3 to 30
	Shm       uint32
	ListAddr  uint64
	Pages     int
}

// RegMRWR returns the send WR that performs f: after it completes, the MR's
// keys are its handle's index and generation with key byte f.Key.
func RegMRWR(wrid uint64, flags uint32, f FastReg) SendWR {
	return SendWR{WRID: wrid, Opcode: OpRegMR, Flags: flags,
		SGL:  []SGE{{Addr: f.ListAddr, Length: uint32(8 * f.Pages)}},
		RKey: uint32(f.Key), RemoteAddr: f.IOVA, CompareAdd: f.Length,
		Swap: uint64(f.Access) | uint64(f.PageShift)<<32, AH: f.MR.Handle, RemoteQPN: f.Shm}
}

// FastRegKey is the key an MR has after a REG_MR with key byte key.
func FastRegKey(mr *MR, key uint8) uint32 { return mr.LKey&^0xff | uint32(key) }

// LocalInvWR returns a LOCAL_INV of rkey.
func LocalInvWR(wrid uint64, flags uint32, rkey uint32) SendWR {
	return SendWR{WRID: wrid, Opcode: OpLocalInv, Flags: flags, ImmData: invField(rkey)}
}

// SendWithInvWR returns a SEND_WITH_INV of sgl that invalidates rkey at
// the responder.
func SendWithInvWR(wrid uint64, flags uint32, rkey uint32, sgl ...SGE) SendWR {
	return SendWR{WRID: wrid, Opcode: OpSendWithInv, Flags: flags, SGL: sgl, ImmData: invField(rkey)}
}

// invField is the value of SendWR.ImmData (written in network order) that
// puts rkey little-endian in the record's imm_data/invalidate_rkey union.
func invField(rkey uint32) uint32 { return bits.ReverseBytes32(rkey) }

// PutPageList writes page addresses (or segment offsets) as a REG_MR page
// list into b and returns the bytes used.
func PutPageList(b []byte, pages []uint64) int {
	for i, p := range pages {
		binary.LittleEndian.PutUint64(b[8*i:], p)
	}
	return 8 * len(pages)
}
