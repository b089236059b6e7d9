package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"image/png"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// resultRow returns the fields of the first row under perftest's " #bytes"
// title in out.
func resultRow(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, " #bytes") && i+1 < len(lines) {
			return strings.Fields(lines[i+1])
		}
	}
	t.Fatalf("no result table in:\n%s", out)
	return nil
}

// TestPerftestEmbedded runs every tool with no link flag: both sides on the
// in-memory pair, through the TCP exchange on 127.0.0.1.
func TestPerftestEmbedded(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		size  string
		iters string
		cols  int
	}{
		{[]string{"ib_write_bw", "-s4096", "-n", "50"}, "4096", "50", 5},
		{[]string{"ib_read_bw", "--size=1K", "-n50", "-q", "2"}, "1024", "100", 5},
		{[]string{"ib_send_bw", "-c", "UD", "-s", "1024", "-n", "50", "-e"}, "1024", "50", 5},
		{[]string{"ib_atomic_bw", "-n", "50", "-A", "CMP_AND_SWAP", "-F"}, "8", "50", 5},
		{[]string{"ib_write_lat", "-s", "64", "-n", "50"}, "64", "50", 9},
		{[]string{"ib_read_lat", "-n", "50"}, "2", "50", 9},
		{[]string{"-n", "50", "ib_send_lat"}, "", "", 0}, // flags before the command: not a command
		{[]string{"ib_send_lat", "-n", "50", "-cUC", "--timeout=20s"}, "2", "50", 9},
		{[]string{"ib_send_lat", "-n", "50", "--receive-here"}, "2", "50", 9},
		{[]string{"ib_write_bw", "-s", "64K", "-n", "50", "--receive-here"}, "65536", "50", 5},
		{[]string{"ib_send_bw", "-s", "64", "-n", "50", "-I", "64"}, "64", "50", 5},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(tc.args, &out, &errOut)
			if tc.cols == 0 {
				require.Equal(t, 2, code)
				return
			}
			require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
			row := resultRow(t, out.String())
			require.Len(t, row, tc.cols, out.String())
			require.Equal(t, tc.size, row[0])
			require.Equal(t, tc.iters, row[1])
			for _, f := range row[2:] {
				_, err := strconv.ParseFloat(f, 64)
				require.NoError(t, err, f)
			}
			require.NotContains(t, out.String(), "Waiting for client", "only the client's output is printed")
		})
	}
}

func TestPerftestRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"ib_write_bw", "--use_cuda=0"}, 1, "--use_cuda: not supported: softverbs registers host memory only"},
		{[]string{"ib_read_bw", "--odp"}, 1, "--odp: not supported"},
		{[]string{"ib_send_bw", "-R", "-c", "UC"}, 2, "UC is not supported in librdmacm"},
		{[]string{"ib_send_bw", "-R", "-c", "UD"}, 1, "-R with UD (SIDR and the QPN SEND): not supported yet"},
		{[]string{"ib_write_bw", "-O"}, 1, "--dualport: not supported: a softverbs device has one port"},
		{[]string{"ib_write_bw", "-c", "UD"}, 2, "UD connection only possible in SEND Verb"},
		{[]string{"ib_write_bw", "-n", "3"}, 2, "Iteration num should be between 5"},
		// An explicit 0 is out of range, as in perftest, not the default.
		{[]string{"ib_write_bw", "-n", "0"}, 2, "Iteration num should be between 5"},
		{[]string{"ib_write_bw", "-s", "0"}, 2, "Message Size should be between 1 and 2147483647"},
		{[]string{"ib_write_bw", "-t", "0"}, 2, "Tx depth should be between 1"},
		{[]string{"ib_send_bw", "-r", "0"}, 2, "Rx depth should be between 1"},
		{[]string{"ib_write_bw", "-Q", "0"}, 2, "CQ moderation should be between 1"},
		{[]string{"ib_write_bw", "-D", "0"}, 2, "Duration period must be positive"},
		{[]string{"ib_write_bw", "-l", "3"}, 2, "Number of iterations must be a multiple of post list size"},
		{[]string{"ib_read_bw", "-I", "16"}, 2, "Inline feature not available on READ/Atomic verbs"},
		{[]string{"ib_send_lat", "--output=fast"}, 2, "Invalid output type"},
		{[]string{"ib_write_bw", "10.0.0.1"}, 2, "a server argument needs a link"},
		{[]string{"ib_write_bw", "-d", "mlx5_0"}, 2, "IB device mlx5_0 not found"},
		{[]string{"ib_send_bw", "-A", "CMP_AND_SWAP"}, 2, "unknown shorthand flag: 'A'"},
		{[]string{"ib_send_lat", "--receive-here", "--udp", "127.0.0.1"}, 2, "--receive-here is for the in-memory pair"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			require.Equal(t, tc.code, run(tc.args, &out, &errOut), errOut.String())
			require.Contains(t, errOut.String(), tc.msg)
		})
	}
	var out bytes.Buffer
	require.Equal(t, 0, run([]string{"ib_write_bw", "-V"}, &out, &out))
	require.Equal(t, "Version: 6.06\n", out.String())
	out.Reset()
	require.Equal(t, 0, run([]string{"help"}, &out, &out))
	for _, n := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat"} {
		require.Contains(t, out.String(), "  "+n+" ")
	}
}

// TestPerftestUDP runs ib_send_bw as two rvt commands over UDP-socket
// links on two loopback addresses, server and client, as two processes
// would.
func TestPerftestUDP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	a, b := "127.77.0.1", "127.77.0.2"
	var sout, serr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"ib_send_bw", "--udp", b, "-p", port, "-n", "100", "-s", "2048", "--timeout", "30s"}, &sout, &serr)
	}()
	var cout, cerr bytes.Buffer
	code := 1
	for range 50 { // until the server listens
		cout.Reset()
		cerr.Reset()
		code = run([]string{"ib_send_bw", "--udp", a, "-p", port, "-n", "100", "-s", "2048", "--timeout", "30s", b}, &cout, &cerr)
		if code == 0 || !strings.Contains(cerr.String(), "connection refused") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, 0, code, "client:\n%s%s", cout.String(), cerr.String())
	require.Equal(t, 0, <-done, "server:\n%s%s", sout.String(), serr.String())
	for who, out := range map[string]string{"client": cout.String(), "server": sout.String()} {
		row := resultRow(t, out)
		require.Equal(t, []string{"2048", "100"}, row[:2], who)
		require.Contains(t, out, fmt.Sprintf(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:77:00:0%d\n", map[string]int{"client": 1, "server": 2}[who]), who)
	}
	require.Contains(t, sout.String(), " RX depth        : 100\n")
	require.Contains(t, cout.String(), " TX depth        : 100\n")
}

// TestPerftestUDPRDMACM runs ib_write_bw -R as two rvt commands over
// UDP-socket links: the exchange and the QPs' connections go through
// rdma_cm on the devices' CM agents.
func TestPerftestUDPRDMACM(t *testing.T) {
	a, b := "127.77.0.3", "127.77.0.4"
	args := []string{"ib_write_bw", "-R", "-n", "100", "-s", "8192", "-q", "2", "--timeout", "30s"}
	var sout, serr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(append(append([]string{}, args...), "--udp", b), &sout, &serr)
	}()
	var cout, cerr bytes.Buffer
	code := 1
	for range 100 { // until the server listens
		cout.Reset()
		cerr.Reset()
		code = run(append(append([]string{}, args...), "--udp", a, b), &cout, &cerr)
		if code == 0 || !strings.Contains(cerr.String(), "invalid service ID") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, 0, code, "client:\n%s%s", cout.String(), cerr.String())
	require.Equal(t, 0, <-done, "server:\n%s%s", sout.String(), serr.String())
	for who, out := range map[string]string{"client": cout.String(), "server": sout.String()} {
		row := resultRow(t, out)
		require.Equal(t, []string{"8192", "200"}, row[:2], who)
		require.Contains(t, out, " rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n", who)
	}
}

// TestPerftestPlot draws a run of each kind on the in-memory pair, with
// its baseline: the files are written and well-formed, with the series
// named in the legend.
func TestPerftestPlot(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		file string
		want []string
	}{
		{[]string{"ib_write_bw", "-n", "20", "-s", "4096"}, "bw.svg", []string{"ib_write_bw: bandwidth", "ib_write_bw: message rate", "memcpy (same run)"}},
		{[]string{"ib_send_lat", "-n", "20", "-s", "64"}, "lat.svg", []string{"ib_send_lat t_typical", "ib_send_lat 99.9%", "Go channel ping-pong (same run) t_typical"}},
		{[]string{"ib_read_bw", "-n", "20", "-s", "64"}, "bw.png", nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join(dir, tc.file)
			var out, errOut bytes.Buffer
			require.Equal(t, 0, run(append(tc.args, "--plot", path), &out, &errOut), errOut.String())
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			if strings.HasSuffix(tc.file, ".png") {
				_, err := png.Decode(bytes.NewReader(b))
				require.NoError(t, err)
				return
			}
			require.NoError(t, xml.Unmarshal(b, new(struct {
				XMLName xml.Name `xml:"svg"`
			})))
			for _, w := range tc.want {
				require.Contains(t, string(b), ">"+w+"<")
			}
		})
	}
	var out, errOut bytes.Buffer
	require.Equal(t, 2, run([]string{"ib_write_bw", "--plot", filepath.Join(dir, "x.pdf")}, &out, &errOut))
	require.Contains(t, errOut.String(), "must end in .svg or .png")
}
