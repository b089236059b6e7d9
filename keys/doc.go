// Package keys owns protection domains, memory regions (MRs), memory windows
// (MWs) and the table that turns a 32-bit lkey or rkey into the object it
// names, in the manner of Linux rdmavt's lkey table.
//
// # Key layout
//
// A key is 32 bits, split for a table of 2^bits slots (NewTable(bits)) as
//
//	bit 31                                               0
//	+-------------+----------------------+--------------+
//	| index: bits | generation: 24-bits  | key byte: 8  |
//	+-------------+----------------------+--------------+
//
// so NewTable(8) gives 8 index bits and a 16-bit generation, NewTable(20) a
// 4-bit generation.
//
// The index selects a slot of the table, so a lookup is one shift and one
// array access. The generation is per slot and increments
// every time the slot is freed, so a key held by a peer after its MR was
// deregistered does not name the next MR that lands in the same slot (until
// the generation wraps; freed slots are reused in FIFO order to push that far
// out). The low 8 bits are the consumer key byte that the REG_MR (fast
// register) and BIND_MW work requests change, so that the owner can retire an
// rkey handed out earlier without giving up the slot. Index 0 is reserved: key
// 0 is never valid (rdmavt reserves it for the DMA MR; here it simply means
// "no key").
//
// As in rdmavt, an MR has a single key: Lkey == Rkey. The rkey is meaningful
// only for the remote operations the MR's access flags allow; CheckRemote
// refuses an MR that lacks the requested remote access flag.
//
// # Checks
//
// CheckLocal and CheckRemote run on the per-packet path. A check of a valid
// MR reads an immutable grant without a lock (as rdmavt reads its table under
// RCU); MWs and failures take the table's read lock. They do not allocate,
// and return wrapped sentinel errors (ErrInvalidKey, ErrPDMismatch,
// ErrAccess, ErrBounds) that the transport maps to completion statuses and
// NAK syndromes. A zero-length check succeeds with a nil *MR and validates
// nothing (IBTA: zero-length transfers do not check keys).
//
// # Data path and concurrency
//
// A Table is safe for concurrent use. Verbs (RegMR, FastReg, BindMW, ...)
// take the table lock and publish grants for the lock-free checks. Epoch
// moves after every change that may make a passing CheckLocal fail, so a
// CheckLocal result may be kept while it is unchanged. It does not cover
// CheckRemote: invalidating, deallocating or rebinding a memory window does
// not move it, so never keep a CheckRemote result.
//
// MR.ReadAt, MR.WriteAt and MR.Word take no lock: they read an immutable
// description of the MR's memory that MapPages replaces atomically, and they
// clamp to it, so a consumer that remaps an MR while data is still in flight
// gets short copies, never a panic or an access outside the registered
// memory. The exported fields of MR and MW are snapshots for their owner;
// they change only through the Table's verbs.
//
// Lock order: Table.mu is the only lock in this package. PD reference counts
// are atomic.
package keys
