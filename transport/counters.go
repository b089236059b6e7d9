package transport

import "sync/atomic"

// Counter names a transport counter. The names are the ones Linux rxe
// exposes under /sys/class/infiniband/*/ports/1/hw_counters where a
// counterpart exists.
type Counter int

// Counters.
const (
	SentPkts Counter = iota
	RcvdPkts
	DuplicateRequest
	OutOfSeqRequest
	RcvdRNRErr
	SendRNRErr
	RcvdSeqErr
	AckDeferred
	RetryExceededErr
	RNRRetryExceededErr
	CompleterRetryErr
	SendErr
	LinkDowned
	RDMASends
	RDMARecvs
	Retransmits
	Timeouts
	GhostAcks
	RecvWQEMissing
	CreditWaits
	// SentUnresolved counts packets handed to the link before their
	// neighbour was resolved, for the link to hold until it is
	// (netdev.NeighbourQueuer).
	SentUnresolved
	// SeqNAKRepeats counts PSN sequence error NAKs sent again for the
	// same expected PSN (a go-back-N round that missed it too, or a lost
	// NAK); no rxe counterpart.
	SeqNAKRepeats
	// Probes counts early go-back-N retries (Config.Probe).
	Probes
	NumCounters
)

var counterNames = [NumCounters]string{
	"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
	"rcvd_rnr_err", "send_rnr_err", "rcvd_seq_err", "ack_deferred",
	"retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err",
	"send_err", "link_downed", "rdma_sends", "rdma_recvs", "retransmits",
	"timeouts", "ghost_acks", "recv_wqe_missing", "credit_waits",
	"sent_unresolved", "seq_nak_repeats", "probes",
}

func (c Counter) String() string {
	if c >= 0 && c < NumCounters {
		return counterNames[c]
	}
	return "unknown"
}

// Counters are a device's or a QP's counters.
type Counters struct {
	c     [NumCounters]atomic.Uint64
	drops [NumDropReasons]atomic.Uint64
}

// Get returns a counter's value.
func (cs *Counters) Get(c Counter) uint64 { return cs.c[c].Load() }

// Drops returns how many packets were dropped for reason r.
func (cs *Counters) Drops(r DropReason) uint64 { return cs.drops[r].Load() }

// Snapshot returns every non-zero counter by name (drops as "drop_" and the reason's Name, e.g. "drop_bad_icrc").
func (cs *Counters) Snapshot() map[string]uint64 {
	m := make(map[string]uint64)
	for i := Counter(0); i < NumCounters; i++ {
		if v := cs.c[i].Load(); v != 0 {
			m[i.String()] = v
		}
	}
	for r := DropReason(1); r < NumDropReasons; r++ {
		if v := cs.drops[r].Load(); v != 0 {
			m["drop_"+r.Name()] = v
		}
	}
	return m
}

// add adds o's counts to cs: every counter and drop, but rcvd_pkts only if
// rcvd. A device's totals take a QP's counts without it: the device counts
// received packets itself (per frame at the link, and looped packets), and
// the QPs' sum would leave out packets no QP took.
func (cs *Counters) add(o *Counters, rcvd bool) {
	for i := range o.c {
		if rcvd || Counter(i) != RcvdPkts {
			cs.c[i].Add(o.c[i].Load())
		}
	}
	for r := range o.drops {
		cs.drops[r].Add(o.drops[r].Load())
	}
}
