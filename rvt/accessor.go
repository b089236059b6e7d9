package rvt

import "github.com/softverbs/softverbs/keys"

// Accessor is memory the device reaches through calls instead of as a
// slice: rvtd's process_vm_readv/writev on a client process. See
// keys.Accessor.
type Accessor = keys.Accessor

// RegMRAccessor registers length bytes at address addr of acc's memory as a
// memory region with I/O virtual address iova. A copy that fails (the
// memory went away) completes the WR that needed it with the IBTA outcome:
// a local protection error where the memory is local to the WR, a remote
// access error NAK where a peer's RDMA named it. RDMA atomics on such a
// region are atomic with respect to the device's other atomics only
// (IBV_ATOMIC_HCA), not to the CPU that owns the memory.
func (pd *PD) RegMRAccessor(acc Accessor, addr, length, iova uint64, access Access) (*MR, error) {
	return pd.d.keys.RegMRAccessor(pd.PD, acc, addr, length, iova, access)
}
