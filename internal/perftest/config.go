package perftest

import (
	"errors"
	"fmt"
	"time"
)

// Test is one of the tools.
type Test int

// The tools.
const (
	WriteBW Test = iota
	ReadBW
	SendBW
	AtomicBW
	WriteLat
	ReadLat
	SendLat
	numTests
)

var testNames = [numTests]string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat"}

// Tests lists every tool, in the order above.
func Tests() []Test {
	t := make([]Test, numTests)
	for i := range t {
		t[i] = Test(i)
	}
	return t
}

func (t Test) String() string {
	if t < 0 || t >= numTests {
		return fmt.Sprintf("Test(%d)", int(t))
	}
	return testNames[t]
}

// Verb is the operation the tool measures.
func (t Test) Verb() Verb {
	switch t {
	case WriteBW, WriteLat:
		return Write
	case ReadBW, ReadLat:
		return Read
	case AtomicBW:
		return Atomic
	}
	return Send
}

// Latency reports whether t is a latency tool.
func (t Test) Latency() bool { return t >= WriteLat }

// perftest's limits and defaults (perftest_parameters.h).
const (
	defSizeBW     = 65536
	defSizeLat    = 2
	defSizeAtomic = 8
	defIters      = 1000
	defItersWB    = 5000 // ib_write_bw
	defTxBW       = 128
	defTxLat      = 1
	defRxSend     = 512
	defRxRDMA     = 1
	defCQMod      = 100
	defQKey       = 0x11111111
	defHopLimit   = 64
	maxSize       = 1<<31 - 1 // UINT_MAX/2
	maxAllSize    = 1 << 23   // MAX_SIZE: -a's largest
	maxInline     = 1024
	minIters      = 5
	maxIters      = 100000000
	maxTx         = 15000
	maxRx         = 16384
	maxQPs        = 16384
	maxCQMod      = 1024
	maxGIDIndex   = 64
	ucMaxRx       = 16000
	// A message larger than this runs unmoderated unless -Q is given.
	msgSizeCQModLimit = 8192
	// udAddition is the room a UD receive keeps for the GRH.
	udAddition = 40
	// pageSize and cacheLine are what this side announces in the exchange.
	pageSize  = 4096
	cacheLine = 64
)

// Config is a tool's command line.
type Config struct {
	Test     Test
	Server   string // client: the server's host name; "": be the server
	Port     int    // -p
	Device   string // -d
	IBPort   int    // -i
	GIDIndex int    // -x; -1: the first IPv4-mapped GID, as perftest picks one
	Size     int    // -s; 0: the tool's default
	All      bool   // -a: every size from 2 to 2^23 (UD: to the MTU)
	Iters    int    // -n; 0: the tool's default
	Duration int    // -D seconds; 0: iterations
	Margin   int    // -f seconds; -1 (DefaultConfig): a quarter of -D
	QPs      int    // -q
	TxDepth  int    // -t; 0: the tool's default
	RxDepth  int    // -r; 0: the tool's default
	MTU      int    // -m bytes; 0: the port's active MTU
	Conn     string // -c RC, UC or UD
	Duplex   bool   // -b
	PostList int    // -l
	CQMod    int    // -Q; 0: the default
	NoPeak   bool   // -N
	Gbits    bool   // --report_gbits
	Output   Output // --output
	Events   bool   // -e
	Atomic   string // -A CMP_AND_SWAP or FETCH_AND_ADD
	OutReads int    // -o; 0 or less: the device's maximum
	Inline   int    // -I bytes; -1 (DefaultConfig): not given
	SL       int    // -S
	// RDMACM (-R) connects the test's QPs through rdma_cm; it implies
	// CommRDMACM (-z), the exchange over rdma_cm instead of TCP.
	RDMACM     bool
	CommRDMACM bool
	// Timeout bounds each wait for the peer (0: wait forever, as
	// perftest does).
	Timeout time.Duration
}

// DefaultConfig returns perftest's defaults for t.
func DefaultConfig(t Test) Config {
	return Config{Test: t, Port: DefaultPort, Device: "rvt0", IBPort: 1, GIDIndex: -1, QPs: 1, Conn: "RC",
		PostList: 1, Atomic: FetchAndAdd, Inline: -1, Margin: -1}
}

// ErrNotSupported is returned (wrapped) for a perftest feature softverbs
// does not offer.
var ErrNotSupported = errors.New("not supported")

// UsageError is an error in the command line.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

func usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

// params are a Config checked and completed as perftest's parser and
// force_dependecies do.
type params struct {
	Config
	sizeGiven bool
	cqModGive bool
	rtt       int // latency samples per round trip: 2, or 1 for READ
	// notices are what perftest prints as it checks its command line
	// (each after a ResultLine, on stdout), before anything else.
	notices []string
}

// normalize checks c and fills in the defaults.
func (c Config) normalize() (*params, error) {
	p := &params{Config: c, sizeGiven: c.Size != 0, cqModGive: c.CQMod != 0, rtt: 2}
	t := c.Test
	if t < 0 || t >= numTests {
		return nil, usagef("unknown test %d", int(t))
	}
	v := t.Verb()
	if v == Read || v == Atomic {
		p.rtt = 1
	}
	switch c.Conn {
	case "RC":
	case "UC":
		if v == Read || v == Atomic {
			return nil, usagef(" UC connection not possible in READ/ATOMIC verbs")
		}
	case "UD":
		if v != Send {
			return nil, usagef(" UD connection only possible in SEND Verb")
		}
	default:
		return nil, usagef(" Invalid connection type %q: RC, UC or UD", c.Conn)
	}
	if p.Size == 0 {
		switch {
		case v == Atomic:
			p.Size = defSizeAtomic
		case t.Latency():
			p.Size = defSizeLat
		default:
			p.Size = defSizeBW
		}
	}
	if p.Iters == 0 {
		p.Iters = defIters
		if t == WriteBW {
			p.Iters = defItersWB
		}
	}
	if p.TxDepth == 0 {
		p.TxDepth = defTxBW
		if t.Latency() {
			p.TxDepth = defTxLat
		}
	}
	if p.RxDepth == 0 {
		p.RxDepth = defRxRDMA
		if v == Send {
			p.RxDepth = defRxSend
		}
	}
	if p.CQMod == 0 {
		p.CQMod = defCQMod
	}
	switch {
	case p.Port < 0 || p.Port > 65535:
		return nil, usagef(" Invalid TCP port %d", p.Port)
	case p.IBPort != 1:
		return nil, usagef(" -i %d: a softverbs device has port 1 only", p.IBPort)
	case p.GIDIndex < -1 || p.GIDIndex > maxGIDIndex:
		return nil, usagef(" GID index should be between %d and %d", 0, maxGIDIndex)
	case p.Size < 1 || p.Size > maxSize:
		return nil, usagef(" Message Size should be between %d and %d", 1, maxSize)
	case p.Inline < -1 || p.Inline > maxInline:
		return nil, usagef(" Max inline should be between %d and %d", 0, maxInline)
	case p.Inline >= 0 && (v == Read || v == Atomic):
		return nil, usagef(" Inline feature not available on READ/Atomic verbs")
	case p.Events && v == Write:
		return nil, usagef(" Events feature not available on WRITE verb")
	case c.RxDepth > defRxRDMA && v != Send:
		return nil, usagef(" On RDMA verbs rx depth can be only 1")
	case p.NoPeak && t.Latency():
		return nil, usagef(" NoPeak only valid for BW tests")
	case p.Duration > 0 && p.Events:
		return nil, usagef("Duration mode doesn't work with events.")
	case p.Output != FullVerbosity && !t.Latency() && p.Output != OutputBandwidth && p.Output != OutputMsgRate:
		return nil, usagef(" Output verbosity level for BW can be: bandwidth, message_rate")
	case p.Output != FullVerbosity && t.Latency() && p.Output != OutputLatency:
		return nil, usagef(" Output verbosity level for LAT can be: latency")
	case p.Iters < minIters || p.Iters > maxIters:
		return nil, usagef(" Iteration num should be between %d and %d", minIters, maxIters)
	case p.Duration < 0:
		return nil, usagef(" Duration period must be positive")
	case p.Margin < -1:
		return nil, usagef(" Margin must be non-negative int")
	case p.QPs < 1 || p.QPs > maxQPs:
		return nil, usagef(" Num of qps should be between %d and %d", 1, maxQPs)
	case p.TxDepth < 1 || p.TxDepth > maxTx:
		return nil, usagef(" Tx depth should be between %d and %d", 1, maxTx)
	case p.RxDepth < 1 || p.RxDepth > maxRx:
		return nil, usagef(" Rx depth should be between %d and %d", 1, maxRx)
	case p.CQMod < 1 || p.CQMod > maxCQMod:
		return nil, usagef(" CQ moderation should be between %d and %d", 1, maxCQMod)
	case p.PostList < 1:
		return nil, usagef(" Post list size should be at least 1")
	case p.SL < 0 || p.SL > 15:
		return nil, usagef(" SL should be between 0 and 15")
	case p.MTU != 0 && p.MTU != 256 && p.MTU != 512 && p.MTU != 1024 && p.MTU != 2048 && p.MTU != 4096:
		return nil, usagef(" Invalid MTU %d: 256, 512, 1024, 2048 or 4096", p.MTU)
	case p.Atomic != FetchAndAdd && p.Atomic != CmpAndSwap:
		return nil, usagef(" Invalid atomic type %q: CMP_AND_SWAP or FETCH_AND_ADD", p.Atomic)
	case v == Atomic && p.Size != defSizeAtomic:
		return nil, usagef(" Message size for atomic tests is %d", defSizeAtomic)
	case v == Atomic && p.All:
		return nil, usagef(" -a is not possible in atomic tests: their size is %d", defSizeAtomic)
	case p.Duration > 0 && p.All:
		return nil, usagef(" Duration mode doesn't work with -a")
	case t.Latency() && p.Duplex:
		return nil, usagef(" Bidirectional mode is for the bandwidth tests")
	case t.Latency() && p.QPs > 1:
		return nil, usagef(" Multiple QPs are for the bandwidth tests")
	case t.Latency() && p.PostList > 1:
		return nil, usagef(" Post list is for the bandwidth tests")
	case p.Duration > 0 && p.Duplex:
		return nil, fmt.Errorf("-D with -b: %w yet", ErrNotSupported)
	case p.RDMACM && p.Conn == "UC":
		return nil, usagef(" UC is not supported in librdmacm")
	case p.RDMACM && p.Conn == "UD":
		return nil, fmt.Errorf("-R with UD (SIDR and the QPN SEND): %w yet", ErrNotSupported)
	}
	if p.RDMACM {
		p.CommRDMACM = true
	}
	if p.Margin < 0 {
		p.Margin = p.Duration / 4 // whole seconds, as perftest's
	}
	if p.Duration > 0 && p.Duration <= 2*p.Margin {
		return nil, usagef("please check that DURATION > 2*MARGIN")
	}
	// force_dependecies, in its order.
	if p.Size > msgSizeCQModLimit && p.Conn != "UD" && !p.All && !p.Events {
		if !p.cqModGive {
			p.CQMod = 1
		} else if p.CQMod > 1 {
			p.notices = append(p.notices, "Warning: Large message requested and CQ moderation enabled\n"+
				"Warning: It can lead to inaccurate results\n")
		}
	}
	if p.PostList > 1 && !t.Latency() {
		switch {
		case p.Duration == 0 && p.Iters%p.PostList != 0:
			return nil, usagef("Number of iterations must be a multiple of post list size")
		case !p.cqModGive:
			p.CQMod = p.PostList
			p.notices = append(p.notices, "Post List requested - CQ moderation will be the size of the post list\n")
		case p.PostList%p.CQMod != 0:
			return nil, usagef("Post list size must be a multiple of CQ moderation")
		}
	}
	if p.Duration == 0 {
		p.TxDepth = min(p.TxDepth, p.Iters)
		if v == Send {
			p.RxDepth = min(p.RxDepth, p.Iters)
		}
		if (p.Conn == "UD" || p.Conn == "UC") && c.RxDepth == 0 {
			p.RxDepth = min(p.Iters, ucMaxRx)
		}
	}
	if v == Send && p.RxDepth%2 == 1 && !p.All {
		p.RxDepth++ // perftest keeps a SEND test's receive queue even
	}
	p.CQMod = min(p.CQMod, p.TxDepth)
	if p.PostList > p.TxDepth {
		return nil, usagef(" Post list size (%d) must not exceed the TX depth (%d)", p.PostList, p.TxDepth)
	}
	if p.All {
		p.Size = maxAllSize
	}
	return p, nil
}
