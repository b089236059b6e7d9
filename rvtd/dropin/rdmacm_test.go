package dropin_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The rdma_cm tools (rdmacm-utils, perftest) through the drop-in
// librdmacm.so.1 of rvtd/librdmacm: a server on rvt0's address, a client
// bound to rvt1's, both ends' output and exit codes checked.

const (
	cmServerAddr = "198.18.0.1" // rvt0
	cmClientAddr = "198.18.0.2" // rvt1
)

// rdmacmLib skips (or fails as root) when the library was not built (no
// librdmacm-dev).
func rdmacmLib(t testing.TB) string {
	t.Helper()
	build := libs(t)
	if _, err := os.Stat(filepath.Join(build, "lib", "librdmacm.so.1")); err != nil {
		if os.Geteuid() != 0 {
			t.Skip("librdmacm.so.1 not built (librdmacm-dev missing; make deps installs it as root)")
		}
		t.Fatalf("librdmacm.so.1 not built: %v", err)
	}
	return build
}

// cmPair runs a server, then the client until it connects. The client
// starts once the server listens, when the daemon is this process's (it
// is asked: the CM has no port to poll like TCP); otherwise after a head
// start. A client that fails while the server is still starting
// (REJECTED: nobody listens yet) is run again, up to 40 times. It
// returns both ends' outputs after both exited; both must exit 0.
func cmPair(t *testing.T, build, sock string, srvBin string, srvArgs []string, cliBin string, cliArgs []string) (string, string) {
	t.Helper()
	return cmPairEnv(t, build, sock, nil, 100*time.Millisecond, srvBin, srvArgs, cliBin, cliArgs)
}

// cmPairEnv is cmPair with an environment and the head start of the
// server when the daemon is not this process's (perftest's client,
// rejected, sometimes crashes or hangs in its own error path: its server
// gets a second to listen).
func cmPairEnv(t *testing.T, build, sock string, env []string, first time.Duration, srvBin string, srvArgs []string, cliBin string, cliArgs []string) (string, string) {
	t.Helper()
	// The previous pair's server may still be going away.
	waitListeners(sock, func(n int) bool { return n == 0 })
	srv := start(t, build, sock, 90*time.Second, env, srvBin, srvArgs...)
	var cerr error
	var cout string
	for try := 0; ; try++ {
		if try == 0 {
			if !waitListeners(sock, func(n int) bool { return n > 0 }) {
				time.Sleep(first)
			}
		} else {
			time.Sleep(200 * time.Millisecond)
		}
		select {
		case <-srv.done:
			_, out := srv.wait()
			t.Fatalf("%s exited before a client connected: %v\n%s", srv.name, srv.err, out)
		default:
		}
		cerr, cout = start(t, build, sock, 60*time.Second, env, cliBin, cliArgs...).wait()
		if cerr == nil || try == 40 || !notListening(cout) {
			break
		}
	}
	if cerr != nil {
		srv.cancel() // it would wait for a client for ever
	}
	serr, sout := srv.wait()
	if cerr != nil || serr != nil {
		t.Fatalf("client %v, server %v\nclient:\n%s\nserver:\n%s", cerr, serr, cout, sout)
	}
	return cout, sout
}

// waitListeners waits up to 30 s until the number of rdma_cm IDs that
// listen on the daemon at sock meets ok. It reports false at once for a
// daemon not of this process, and after 30 s.
func waitListeners(sock string, ok func(int) bool) bool {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		n, mine := listeners(sock)
		if !mine {
			return false
		}
		if ok(n) {
			return true
		}
	}
	return false
}

// notListening: what the tools print when the server's ID does not listen
// yet (REJ reason 8; perftest prints the event's number).
func notListening(out string) bool {
	for _, m := range []string{"RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_UNREACHABLE", "Unexpected CM event bl blka 8"} {
		if strings.Contains(out, m) {
			return true
		}
	}
	return false
}

func TestRping(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	bin := tool(t, "rping")
	for _, extra := range [][]string{nil, {"-S", "4096"}} {
		t.Run(strings.Join(append([]string{"rping"}, extra...), " "), func(t *testing.T) {
			port := fmt.Sprint(freePort(t))
			const n = 10
			cout, sout := cmPair(t, build, sock,
				bin, append([]string{"-s", "-a", cmServerAddr, "-p", port, "-C", fmt.Sprint(n), "-v"}, extra...),
				bin, append([]string{"-c", "-a", cmServerAddr, "-I", cmClientAddr, "-p", port, "-C", fmt.Sprint(n), "-v"}, extra...))
			for i := 0; i < n; i++ {
				want := fmt.Sprintf("ping data: rdma-ping-%d: ", i)
				if !strings.Contains(cout, want) {
					t.Errorf("client: no %q:\n%s", want, cout)
				}
				if !strings.Contains(sout, "server "+want) {
					t.Errorf("server: no %q:\n%s", "server "+want, sout)
				}
			}
			if strings.Contains(cout, fmt.Sprintf("rdma-ping-%d:", n)) {
				t.Errorf("client: more than %d pings:\n%s", n, cout)
			}
		})
	}
}

// TestRpingSelfQP: rping -q creates its QP itself and moves it with
// rdma_init_qp_attr, connects by QP number and finishes with
// rdma_establish (librdmacm 1.2).
func TestRpingSelfQP(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	bin := tool(t, "rping")
	port := fmt.Sprint(freePort(t))
	cout, sout := cmPair(t, build, sock,
		bin, []string{"-s", "-q", "-a", cmServerAddr, "-p", port, "-C", "5", "-v"},
		bin, []string{"-c", "-q", "-a", cmServerAddr, "-I", cmClientAddr, "-p", port, "-C", "5", "-v"})
	if !strings.Contains(cout, "ping data: rdma-ping-4: ") || !strings.Contains(sout, "server ping data: rdma-ping-4: ") {
		t.Errorf("no fifth ping:\nclient:\n%s\nserver:\n%s", cout, sout)
	}
}

// TestUcmatose: RC connections with private data and SENDs both ways (4
// connections, 10 messages each); TestUdaddy the same over UD (SIDR).
func TestUcmatose(t *testing.T) {
	cmToolPair(t, "ucmatose")
}

func TestUdaddy(t *testing.T) {
	cmToolPair(t, "udaddy")
}

func cmToolPair(t *testing.T, name string) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	bin := tool(t, name)
	port := fmt.Sprint(freePort(t))
	var srvArgs, cliArgs []string
	if name == "ucmatose" { // udaddy's -p is the port space; its port is 7174
		srvArgs, cliArgs = []string{"-p", port}, []string{"-p", port}
	}
	cout, sout := cmPair(t, build, sock,
		bin, append(srvArgs, "-c", "4", "-C", "10"),
		bin, append(cliArgs, "-s", cmServerAddr, "-b", cmClientAddr, "-c", "4", "-C", "10"))
	for _, side := range []struct{ who, out, first string }{{"client", cout, "connecting"}, {"server", sout, "starting server"}} {
		for _, want := range []string{side.first, "data transfers complete", "test complete", "return status 0"} {
			if !strings.Contains(side.out, want) {
				t.Errorf("%s: no %q:\n%s", side.who, want, side.out)
			}
		}
	}
	if name == "ucmatose" && !strings.Contains(sout, "disconnected") {
		t.Errorf("server: no disconnect:\n%s", sout)
	}
}

// TestRdmacmC runs rvtd/librdmacm/tests/cm_test.c: both ends in one
// process (getaddrinfo, bind to port 0, resolve with device and path, a
// rejected request with private data both ways and the new ID destroyed
// before its event's ack, an accepted one with library-made CQs and a
// SEND, the REP's private data on ESTABLISHED, rdma_migrate_id, options,
// multicast refused); again with both libraries under ASan and UBSan.
func TestRdmacmC(t *testing.T) {
	build := rdmacmLib(t)
	runCTest(t, build, startDaemon(t), "cm_test")
}

// TestRdmaServerClient: rdma_server and rdma_client, synchronous IDs
// (rdma_create_ep, rdma_get_request, rdma_reg_msgs, rdma_post_send, ...).
func TestRdmaServerClient(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	port := fmt.Sprint(freePort(t))
	cout, sout := cmPair(t, build, sock,
		tool(t, "rdma_server"), []string{"-s", cmServerAddr, "-p", port},
		tool(t, "rdma_client"), []string{"-s", cmServerAddr, "-p", port})
	if !strings.Contains(cout, "rdma_client: end 0") || !strings.Contains(sout, "rdma_server: end 0") {
		t.Errorf("client:\n%s\nserver:\n%s", cout, sout)
	}
}

// TestRdmacmASan: both libraries built with AddressSanitizer and UBSan
// (build/asan/lib), the runtimes preloaded into Debian's tools: rping,
// ucmatose, udaddy and rdma_server/rdma_client end with no memory error,
// undefined behaviour or leak.
func TestRdmacmASan(t *testing.T) {
	build := rdmacmLib(t)
	asan := filepath.Join(build, "asan")
	env := sanitizerEnv(t)
	sock := startDaemon(t)
	for _, tc := range []struct {
		name       string
		srv, cli   []string
		wantC      string
		srvB, cliB string
	}{
		{"rping", []string{"-s", "-a", cmServerAddr, "-C", "5", "-v"}, []string{"-c", "-a", cmServerAddr, "-I", cmClientAddr, "-C", "5", "-v"}, "rdma-ping-4", "rping", "rping"},
		{"ucmatose", []string{"-c", "2"}, []string{"-s", cmServerAddr, "-b", cmClientAddr, "-c", "2"}, "return status 0", "ucmatose", "ucmatose"},
		{"udaddy", []string{"-c", "2"}, []string{"-s", cmServerAddr, "-b", cmClientAddr, "-c", "2"}, "return status 0", "udaddy", "udaddy"},
		{"rdma_server", []string{"-s", cmServerAddr}, []string{"-s", cmServerAddr}, "end 0", "rdma_server", "rdma_client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := fmt.Sprint(freePort(t))
			srv, cli := tc.srv, tc.cli
			if tc.name == "rping" || tc.name == "rdma_server" || tc.name == "ucmatose" {
				srv, cli = append(srv, "-p", port), append(cli, "-p", port)
			}
			cout, sout := cmPairEnv(t, asan, sock, env, 300*time.Millisecond, tool(t, tc.srvB), srv, tool(t, tc.cliB), cli)
			for _, out := range []string{cout, sout} {
				if bad := sanitizerReport(out); bad != "" {
					t.Fatalf("%s: %s\nclient:\n%s\nserver:\n%s", tc.name, bad, cout, sout)
				}
			}
			if !strings.Contains(cout, tc.wantC) {
				t.Errorf("client: no %q:\n%s", tc.wantC, cout)
			}
		})
	}
}

// TestPerftestRdmacm: perftest with -R (the QPs and the exchange through
// rdma_cm). The client names the server by address.
func TestPerftestRdmacm(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	// The latency tools' client connects right after the handshake that
	// lets the server go on to rdma_listen; the daemon keeps a REQ that
	// finds no listener for a second (cm.Options.NoListenerWait), else
	// it was rejected now and then and perftest's retry crashed or hung.
	for _, prog := range []string{"ib_send_bw", "ib_write_bw", "ib_write_lat", "ib_read_lat"} {
		t.Run(prog, func(t *testing.T) {
			bin := tool(t, prog)
			port := fmt.Sprint(freePort(t))
			args := []string{"-R", "-x", "1", "-p", port, "-n", "300"}
			cout, sout := cmPairEnv(t, build, sock, nil, time.Second,
				bin, append([]string{"-d", "rvt0"}, args...),
				bin, append(append([]string{"-d", "rvt1"}, args...), cmServerAddr))
			for _, side := range []struct{ who, out string }{{"client", cout}, {"server", sout}} {
				if !strings.Contains(side.out, "Data ex. method : rdma_cm") {
					t.Errorf("%s: not through rdma_cm:\n%s", side.who, side.out)
				}
				row := perftestRow(side.out)
				if strings.HasSuffix(prog, "_lat") && side.who == "server" && row == nil {
					continue
				}
				if len(row) < 3 || row[1] != "300" {
					t.Errorf("%s: no result row with 300 iterations:\n%s", side.who, side.out)
				}
			}
			t.Logf("%s -R: %s", prog, strings.Join(perftestRow(cout), " "))
		})
	}
}

// TestRdmacmErrors: a client with nobody listening sees REJECTED and exits
// with an error, not a signal; without rvtd the tools fail with the
// library's message.
func TestRdmacmErrors(t *testing.T) {
	build := rdmacmLib(t)
	sock := startDaemon(t)
	rping := tool(t, "rping")
	port := fmt.Sprint(freePort(t))
	err, out := run(t, build, sock, 30*time.Second, rping, "-c", "-a", cmServerAddr, "-I", cmClientAddr, "-p", port, "-C", "1")
	var ee *exec.ExitError
	if err == nil || !errorAs(err, &ee) || ee.ExitCode() <= 0 {
		t.Errorf("rping to nobody: %v, want an exit status\n%s", err, out)
	}
	if !strings.Contains(out, "RDMA_CM_EVENT_REJECTED") {
		t.Errorf("rping to nobody: no REJECTED:\n%s", out)
	}
	ucm := tool(t, "ucmatose")
	err, out = run(t, build, sock, 30*time.Second, ucm, "-s", cmServerAddr, "-b", cmClientAddr, "-p", port)
	if err == nil || !errorAs(err, &ee) || ee.ExitCode() != 8 || !strings.Contains(out, "RDMA_CM_EVENT_REJECTED, error: 8") {
		t.Errorf("ucmatose to nobody: %v, want exit status 8 (REJ reason 8)\n%s", err, out)
	}

	nobody := filepath.Join(t.TempDir(), "nobody.sock")
	err, out = run(t, build, nobody, 30*time.Second, rping, "-c", "-a", cmServerAddr, "-C", "1")
	if err == nil || !errorAs(err, &ee) || ee.ExitCode() <= 0 {
		t.Errorf("rping without rvtd: %v, want an exit status\n%s", err, out)
	}
	if !strings.Contains(out, "cannot reach rvtd at "+nobody) {
		t.Errorf("rping without rvtd: no clear message:\n%s", out)
	}
}

// eventHarness is the C cm_event decoder harness
// (rvtd/librdmacm/tests/event_harness.c, ASan and UBSan).
type eventHarness struct {
	mu  sync.Mutex
	in  io.WriteCloser
	out *bufio.Reader
}

var (
	evHarnessOnce sync.Once
	evHarness     *eventHarness
	evHarnessErr  error
)

func getEventHarness(t testing.TB) *eventHarness {
	t.Helper()
	build := rdmacmLib(t)
	evHarnessOnce.Do(func() {
		cmd := exec.Command(filepath.Join(build, "test", "cm_event_harness"))
		h := &eventHarness{}
		h.in, evHarnessErr = cmd.StdinPipe()
		if evHarnessErr != nil {
			return
		}
		var out io.ReadCloser
		out, evHarnessErr = cmd.StdoutPipe()
		if evHarnessErr != nil {
			return
		}
		h.out = bufio.NewReader(out)
		cmd.Stderr = &lockedStderr{}
		evHarnessErr = cmd.Start()
		evHarness = h
	})
	if evHarnessErr != nil {
		t.Fatal(evHarnessErr)
	}
	return evHarness
}

func (h *eventHarness) decode(t testing.TB, rec []byte) int {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	b := make([]byte, 4+len(rec))
	binary.LittleEndian.PutUint32(b, uint32(len(rec)))
	copy(b[4:], rec)
	if _, err := h.in.Write(b); err != nil {
		t.Fatalf("harness died (a sanitizer report above?): %v", err)
	}
	line, err := h.out.ReadString('\n')
	if err != nil {
		t.Fatalf("harness died on %x (a sanitizer report above?): %v", rec, err)
	}
	var d int
	if _, err := fmt.Sscanf(line, "%d", &d); err != nil {
		t.Fatalf("harness said %q", line)
	}
	return d
}

// wantEventDecode is the protocol's rule for a cm_event record (section 9):
// 384 bytes, a known event, an ID, the bools 0 or 1, reserved bytes zero,
// addresses of family 0 (all zero), 2 (IPv4-mapped) or 10, and nothing
// past private_data_len.
func wantEventDecode(r []byte) int {
	const eproto = 71
	if len(r) != 384 {
		return eproto
	}
	le := binary.LittleEndian
	zero := func(b []byte) bool {
		for _, x := range b {
			if x != 0 {
				return false
			}
		}
		return true
	}
	addrOK := func(a []byte) bool {
		if !zero(a[4:8]) {
			return false
		}
		switch le.Uint16(a) {
		case 0:
			return zero(a[2:24])
		case 2:
			return zero(a[8:18]) && a[18] == 0xff && a[19] == 0xff
		case 10:
			return true
		}
		return false
	}
	switch {
	case le.Uint32(r[8:]) == 0, le.Uint32(r[16:]) > 15,
		r[37] > 1, r[39] > 1, r[116] > 1,
		!zero(r[118:128]),
		!addrOK(r[40:64]), !addrOK(r[64:88]),
		!zero(r[128+int(r[38]):]):
		return eproto
	}
	return 0
}

// cmEventSeeds are well-formed records: a CONNECT_REQUEST with private
// data, an ESTABLISHED of a UD ID with its AH, a REJECTED.
func cmEventSeeds() [][]byte {
	le := binary.LittleEndian
	mk := func(id, ev uint32, status int32, plen int) []byte {
		r := make([]byte, 384)
		le.PutUint64(r, 0x5555aaaa0000)
		le.PutUint32(r[8:], id)
		le.PutUint32(r[16:], ev)
		le.PutUint32(r[20:], uint32(status))
		for _, off := range []int{40, 64} {
			le.PutUint16(r[off:], 2)
			le.PutUint16(r[off+2:], 7174)
			r[off+18], r[off+19] = 0xff, 0xff
			copy(r[off+20:], []byte{198, 18, 0, byte(off / 40)})
		}
		r[38] = byte(plen)
		for i := 0; i < plen; i++ {
			r[128+i] = byte(i + 1)
		}
		return r
	}
	req := mk(3, 4, 0, 56)
	le.PutUint32(req[12:], 1)
	ud := mk(4, 9, 0, 0)
	ud[39], ud[116] = 1, 1
	le.PutUint32(ud[24:], 0x12)
	le.PutUint32(ud[28:], 0x01234567)
	return [][]byte{req, ud, mk(5, 8, 28, 148), mk(6, 10, 0, 0)}
}

func checkEvent(t testing.TB, h *eventHarness, rec []byte) {
	t.Helper()
	if got, want := h.decode(t, rec), wantEventDecode(rec); got != want {
		t.Fatalf("rvm_decode_event(%x) = %d, the protocol says %d", rec, got, want)
	}
}

// FuzzCMEventDecoder: the C cm_event decoder never faults and accepts
// exactly the records the protocol allows.
func FuzzCMEventDecoder(f *testing.F) {
	for _, s := range cmEventSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rec []byte) {
		checkEvent(t, getEventHarness(t), rec)
	})
}

// TestCMEventDecoderRandom is FuzzCMEventDecoder's property on seeded
// random and mutated records, under plain go test.
func TestCMEventDecoderRandom(t *testing.T) {
	h := getEventHarness(t)
	for _, s := range cmEventSeeds() {
		if wantEventDecode(s) != 0 || h.decode(t, s) != 0 {
			t.Fatalf("a well-formed record refused: %x", s)
		}
	}
	rng := rand.New(rand.NewSource(21))
	base := cmEventSeeds()
	for i := 0; i < 20000; i++ {
		var rec []byte
		if i%5 == 0 {
			rec = make([]byte, []int{0, 383, 384, 385, rng.Intn(800)}[rng.Intn(5)])
			rng.Read(rec)
		} else {
			rec = append([]byte(nil), base[rng.Intn(len(base))]...)
			for k := rng.Intn(3); k >= 0; k-- {
				switch rng.Intn(5) {
				case 0, 1:
					rec[rng.Intn(len(rec))] ^= byte(1 << rng.Intn(8))
				case 2:
					rec[38] = byte(rng.Intn(256)) // private_data_len
				case 3:
					rec[16] = byte(rng.Intn(20)) // event
				case 4:
					if rng.Intn(8) == 0 {
						rec = rec[:rng.Intn(len(rec)+1)]
					}
				}
				if len(rec) != 384 {
					break
				}
			}
		}
		checkEvent(t, h, rec)
	}
}
