package perftest

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Verb is the operation a test measures, in perftest's order.
type Verb int

// Verbs.
const (
	Send Verb = iota
	Write
	Read
	Atomic
)

var verbNames = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

func (v Verb) String() string {
	if v < 0 || int(v) >= len(verbNames) {
		return "Verb(" + strconv.Itoa(int(v)) + ")"
	}
	return verbNames[v]
}

// Atomic operations (-A).
const (
	CmpAndSwap  = "CMP_AND_SWAP"
	FetchAndAdd = "FETCH_AND_ADD"
)

// Lines and titles perftest prints.
const (
	ResultLine = "---------------------------------------------------------------------------------------\n"
	bwTitle    = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	bwTitleG   = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	latTitle   = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	latDurTitl = " #bytes        #iterations       t_avg[usec]    tps average"
	waiting    = "\n************************************\n* Waiting for client to connect... *\n************************************\n"
)

// Header is what ctx_print_test_info prints about a test.
type Header struct {
	Verb      Verb
	Atomic    string // with Verb Atomic: CmpAndSwap or FetchAndAdd
	Latency   bool   // a latency test (else bandwidth)
	Duplex    bool   // -b
	PostList  int    // -l
	Events    bool   // -e
	Device    string
	QPs       int
	Conn      string // "RC", "UC" or "UD"
	Server    bool
	TxDepth   int
	RxDepth   int
	CQMod     int
	MTU       int // bytes
	LinkType  string
	GIDIndex  int  // -1: none, and no line
	Inline    int  // max inline data (SEND and WRITE tests)
	OutReads  int  // outstanding reads (READ and atomic tests)
	ViaRDMACM bool // -R: "rdma_cm QPs : ON", and the server's notice
	// DataExRDMACM (-z, -R): the exchange runs over rdma_cm.
	DataExRDMACM bool
}

// Write prints the header block, from the first ResultLine to the last.
func (h Header) Write(w io.Writer) {
	var b strings.Builder
	b.WriteString(ResultLine)
	b.WriteString("                    ")
	b.WriteString(h.Verb.String() + " ")
	if h.Verb == Atomic {
		b.WriteString(h.Atomic + " ")
	}
	if h.Latency {
		b.WriteString("Latency ")
	} else {
		if h.Duplex {
			b.WriteString("Bidirectional ")
		}
		if h.PostList > 1 {
			b.WriteString("Post List ")
		}
		b.WriteString("BW ")
	}
	b.WriteString("Test\n")
	if h.Events {
		fmt.Fprintf(&b, " Test with events. Using %s_comp%d\n", h.Device, 0)
	}
	onOff := func(v bool) string {
		if v {
			return "ON"
		}
		return "OFF"
	}
	fmt.Fprintf(&b, " Dual-port       : %s\t\tDevice         : %s\n", "OFF", h.Device)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : %s\n", h.QPs, "IB")
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : %s\n", h.Conn, "OFF")
	// perftest 4.5's ib_write_lat registers its buffer without relaxed
	// ordering and says so; every other tool prints ON (testdata).
	fmt.Fprintf(&b, " PCIe relax order: %s\n", onOff(!(h.Latency && h.Verb == Write)))
	fmt.Fprintf(&b, " ibv_wr* API     : %s\n", "OFF")
	if !h.Server || h.Duplex {
		fmt.Fprintf(&b, " TX depth        : %d\n", h.TxDepth)
	}
	if h.PostList > 1 {
		fmt.Fprintf(&b, " Post List       : %d\n", h.PostList)
	}
	if h.Verb == Send && (h.Server || h.Duplex) {
		fmt.Fprintf(&b, " RX depth        : %d\n", h.RxDepth)
	}
	if !h.Latency {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", h.CQMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", h.MTU)
	fmt.Fprintf(&b, " Link type       : %s\n", h.LinkType)
	if h.GIDIndex != -1 {
		fmt.Fprintf(&b, " GID index       : %d\n", h.GIDIndex)
	}
	if h.Verb != Read && h.Verb != Atomic {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", h.Inline)
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", h.OutReads)
	}
	fmt.Fprintf(&b, " rdma_cm QPs\t : %s\n", onOff(h.ViaRDMACM))
	if h.DataExRDMACM {
		b.WriteString(" Data ex. method : rdma_cm")
	} else {
		b.WriteString(" Data ex. method : Ethernet")
	}
	if h.ViaRDMACM && h.Server {
		b.WriteString("\n" + ResultLine)
		b.WriteString(" Waiting for client rdma_cm QP to connect\n")
		b.WriteString(" Please run the same command with the IB/RoCE interface IP")
	}
	b.WriteString("\n" + ResultLine)
	io.WriteString(w, b.String())
}

// WriteWaiting prints the server's banner before it accepts a client.
func WriteWaiting(w io.Writer) { io.WriteString(w, waiting) }

// cHex formats v as C's printf("%#0<width>x"): "0x" and hex digits
// zero-padded to width characters in all, except that 0 gets no "0x" and
// is all zeros.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return "0x" + fmt.Sprintf("%0*x", max(width-2, 0), v)
}

// WriteDest prints one address as ctx_print_pingpong_data does: side is
// "local" or "remote"; READ tests add the outstanding reads, READ and
// WRITE tests the rkey and address; withGID adds the GID line (every RoCE
// test), with each byte in decimal.
func WriteDest(w io.Writer, side string, d Dest, v Verb, withGID bool) {
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side, cHex(uint64(d.LID), 4), cHex(uint64(d.QPN), 6), cHex(uint64(d.PSN), 6))
	if v == Read {
		fmt.Fprintf(&b, " OUT %s", cHex(uint64(d.OutReads), 4))
	}
	if v == Read || v == Write {
		fmt.Fprintf(&b, " RKey %s VAddr %s", cHex(uint64(d.RKey), 8), cHex(d.VAddr, 16))
	}
	b.WriteByte('\n')
	if withGID {
		b.WriteString(" GID: ")
		for i, g := range d.GID {
			if i > 0 {
				b.WriteByte(':')
			}
			fmt.Fprintf(&b, "%02d", g)
		}
		b.WriteByte('\n')
	}
	io.WriteString(w, b.String())
}

// WriteBWTitle prints the line above bandwidth rows, with the ResultLine
// before it.
func WriteBWTitle(w io.Writer, gbits bool) {
	t := bwTitle
	if gbits {
		t = bwTitleG
	}
	io.WriteString(w, ResultLine+t+"\n")
}

// WriteLatTitle prints the line above latency rows, with the ResultLine
// before it; timed is -D's shorter title.
func WriteLatTitle(w io.Writer, timed bool) {
	t := latTitle
	if timed {
		t = latDurTitl
	}
	io.WriteString(w, ResultLine+t+"\n")
}

// Output selects what a tool prints (--output).
type Output int

// Outputs.
const (
	FullVerbosity Output = iota
	OutputBandwidth
	OutputMsgRate
	OutputLatency
)

// ParseOutput reads --output's value.
func ParseOutput(s string) (Output, error) {
	switch s {
	case "bandwidth":
		return OutputBandwidth, nil
	case "message_rate":
		return OutputMsgRate, nil
	case "latency":
		return OutputLatency, nil
	}
	return 0, fmt.Errorf("Invalid output type %q: use bandwidth, message_rate or latency", s)
}

// WriteBWRow prints a bandwidth row as print_full_bw_report does: with
// --output bandwidth or message_rate just the figure ("%lf"), otherwise
// the row, with six decimals for everything when a Gb/s average is below
// 0.1.
func WriteBWRow(w io.Writer, r BWReport, out Output, gbits bool) {
	switch out {
	case OutputBandwidth:
		fmt.Fprintf(w, "%f\n", r.Avg)
		return
	case OutputMsgRate:
		fmt.Fprintf(w, "%f\n", r.MsgRate)
		return
	}
	if gbits && r.Avg < 0.1 {
		fmt.Fprintf(w, " %-7d    %d           %-7.6f            %-7.6f            %-7.6f", r.Size, r.Iters, r.Peak, r.Avg, r.MsgRate)
	} else {
		fmt.Fprintf(w, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f", r.Size, r.Iters, r.Peak, r.Avg, r.MsgRate)
	}
	if out == FullVerbosity {
		io.WriteString(w, "\n")
	}
}

// WriteLatRow prints a latency row as print_report_lat does; with
// --output latency just the average ("%lf").
func WriteLatRow(w io.Writer, size, iters uint64, r LatResult, out Output) {
	if out == OutputLatency {
		fmt.Fprintf(w, "%f\n", r.Avg)
		return
	}
	fmt.Fprintf(w, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		size, iters, r.Min, r.Max, r.Typical, r.Avg, r.Stdev, r.P99, r.P999)
}

// WriteLatDurRow prints a timed latency row (print_report_lat_duration).
func WriteLatDurRow(w io.Writer, size uint64, r LatDurResult, out Output) {
	if out == OutputLatency {
		fmt.Fprintf(w, "%f\n", r.Avg)
		return
	}
	fmt.Fprintf(w, " %-7d       %d            %-7.2f        %-7.2f\n", size, r.Iters, r.Avg, r.TPS)
}

// InlineWarning is what perftest prints on stderr (after a ResultLine on
// stdout) for READ and atomic tests on a device it does not know, such as
// rxe: softverbs prints it too, so that both sides look alike.
const InlineWarning = "Device not recognized to implement inline feature. Disabling it\n"
