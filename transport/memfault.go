package transport

// Memory faults. Registered memory reached through an accessor (rvtd's
// process_vm MRs, keys.RegMRAccessor) can fail under the engine: the
// process that owns it exited or unmapped the range. A copy that comes up
// short is turned into the IBTA outcome of a DMA fault, never a panic:
//
//   - requester, gathering a SEND or WRITE payload: nothing of the packet
//     leaves; the WQE completes with LOC_PROT_ERR and the QP goes to ERR
//     (sendPacketLocked);
//   - requester, placing a READ response or an atomic's original value:
//     LOC_PROT_ERR, QP to ERR (completer);
//   - responder, placing a SEND: the receive WQE completes with
//     LOC_PROT_ERR and the requester gets a Remote Operational Error NAK
//     (respLocalProt); UD completes the WQE with LOC_PROT_ERR;
//   - responder, an RDMA WRITE, READ or atomic on the memory: a Remote
//     Access Error NAK (respAccess), at the PSN of the READ response that
//     could not be read (respReadFault).

// abortTx gives back a packet that startTx began and that will not be
// sent.
func (e *Engine) abortTx(t txPkt, bc *bufCache) {
	if t.pb != nil {
		bc.put(e, t.pb)
	}
	if t.lend != nil {
		t.lend.Release(t.frame)
	}
}
