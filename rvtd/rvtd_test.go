package rvtd_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softverbs/softverbs/rvtd"
	"github.com/softverbs/softverbs/rvtd/client"
	"github.com/softverbs/softverbs/rvtd/proto"
)

// TestMain runs a client role when the test binary is re-executed as one.
func TestMain(m *testing.M) {
	if role := os.Getenv("RVTD_TEST_ROLE"); role != "" {
		if err := runRole(role, os.Getenv("RVTD_TEST_SOCKET"), os.Getenv("RVTD_TEST_DEVICE")); err != nil {
			fmt.Println("FAIL", strings.ReplaceAll(err.Error(), "\n", " "))
			fmt.Fprintln(os.Stderr, role+":", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const (
	nSends    = 16
	writeOff  = 1 << 20   // where the writer's data lies in its segment
	writeDst  = 512 << 10 // where it lands in the peer's
	writeLen  = 256 << 10
	writeSeed = 9
)

// readLine reads the next line of stdin and checks its first word.
func readLine(word string) ([]string, error) {
	in := stdinLines
	if !in.Scan() {
		return nil, fmt.Errorf("stdin closed waiting for %s", word)
	}
	f := strings.Fields(in.Text())
	if len(f) == 0 || f[0] != word {
		return nil, fmt.Errorf("want %s, got %q", word, in.Text())
	}
	return f[1:], nil
}

func newStdin() *bufio.Scanner { return bufio.NewScanner(os.Stdin) }

func sendSize(i int) int { return 1 + i*255 }

func runRole(role, sock, dev string) error {
	line := readLine
	switch role {
	case "garbage":
		return garbageRole(sock)
	case "many":
		return manyRole(sock)
	case "uid-send":
		return uidSendRole(sock) // userfds_test.go
	}
	if strings.HasPrefix(role, "pvm-") {
		return pvmRole(role, sock, dev) // pvm_test.go
	}
	if strings.HasPrefix(role, "cm-") {
		return cmRole(role, sock, dev)
	}
	n, err := newNode(sock, dev)
	if err != nil {
		return err
	}
	if err := prepareRole(role, n); err != nil {
		return err
	}
	ep, err := n.endpoint()
	if err != nil {
		return err
	}
	fmt.Println("EP", ep)
	f, err := line("PEER")
	if err != nil {
		return err
	}
	peer, err := parseEndpoint(f)
	if err != nil {
		return err
	}
	mem := n.shm.Mem
	switch role {
	case "ping", "pong":
		for i := 0; i < 16; i++ {
			if err := n.qp.PostRecv(uint64(i), client.SGE{Addr: n.mr.Addr + uint64(i*64), Length: 64, LKey: n.mr.LKey}); err != nil {
				return err
			}
		}
	case "recv":
		for i := 0; i < nSends; i++ {
			if err := n.qp.PostRecv(uint64(1000+i), client.SGE{Addr: n.mr.Addr + uint64(i*4096), Length: 4096, LKey: n.mr.LKey}); err != nil {
				return err
			}
		}
	}
	if err := n.connect(peer); err != nil {
		return err
	}
	fmt.Println("READY")
	switch role {
	case "recv":
		wcs, err := n.poll(nSends)
		if err != nil {
			return err
		}
		for i, wc := range wcs {
			if wc.Status != 0 || wc.Opcode != 128 || wc.WRID != uint64(1000+i) || int(wc.ByteLen) != sendSize(i) {
				return fmt.Errorf("receive %d: %+v", i, wc)
			}
			for j := 0; j < sendSize(i); j++ {
				if mem[i*4096+j] != pattern(i, j) {
					return fmt.Errorf("receive %d: byte %d is %#x, want %#x", i, j, mem[i*4096+j], pattern(i, j))
				}
			}
		}
		fmt.Println("RECVOK")
		if _, err := line("CHECK"); err != nil {
			return err
		}
		for j := 0; j < writeLen; j++ {
			if mem[writeDst+j] != pattern(writeSeed, j) {
				return fmt.Errorf("RDMA WRITE: byte %d is %#x, want %#x", j, mem[writeDst+j], pattern(writeSeed, j))
			}
		}
		fmt.Println("WRITEOK")
	case "send":
		if _, err := line("GO"); err != nil {
			return err
		}
		for i := 0; i < nSends; i++ {
			for j := 0; j < sendSize(i); j++ {
				mem[i*4096+j] = pattern(i, j)
			}
			wr := client.SendWR{WRID: uint64(2000 + i), Opcode: 2, Flags: 2,
				SGL: []client.SGE{{Addr: n.mr.Addr + uint64(i*4096), Length: uint32(sendSize(i)), LKey: n.mr.LKey}}}
			if err := n.qp.PostSend(wr); err != nil {
				return err
			}
		}
		wcs, err := n.poll(nSends)
		if err != nil {
			return err
		}
		for i, wc := range wcs {
			if wc.Status != 0 || wc.Opcode != 0 || wc.WRID != uint64(2000+i) {
				return fmt.Errorf("send completion %d: %+v", i, wc)
			}
		}
		for j := 0; j < writeLen; j++ {
			mem[writeOff+j] = pattern(writeSeed, j)
		}
		const chunk = 64 << 10
		for k := 0; k < writeLen/chunk; k++ {
			wr := client.SendWR{WRID: uint64(3000 + k), Opcode: 0, Flags: 2,
				SGL:        []client.SGE{{Addr: n.mr.Addr + writeOff + uint64(k*chunk), Length: chunk, LKey: n.mr.LKey}},
				RemoteAddr: peer.Addr + writeDst + uint64(k*chunk), RKey: peer.RKey}
			if err := n.qp.PostSend(wr); err != nil {
				return err
			}
		}
		wcs, err = n.poll(writeLen / chunk)
		if err != nil {
			return err
		}
		for k, wc := range wcs {
			if wc.Status != 0 || wc.Opcode != 1 || wc.WRID != uint64(3000+k) {
				return fmt.Errorf("write completion %d: %+v", k, wc)
			}
		}
		fmt.Println("SENDOK")
	case "stream":
		if _, err := line("GO"); err != nil {
			return err
		}
		const chunk = 1 << 20
		outstanding, done := 0, 0
		buf := make([]client.WC, 16)
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
			for outstanding < 8 {
				wr := client.SendWR{WRID: uint64(done + outstanding), Opcode: 0, Flags: 2,
					SGL:        []client.SGE{{Addr: n.mr.Addr, Length: chunk, LKey: n.mr.LKey}},
					RemoteAddr: peer.Addr, RKey: peer.RKey}
				if err := n.qp.PostSend(wr); err != nil {
					return err
				}
				outstanding++
			}
			k, err := n.cq.Poll(buf)
			if err != nil {
				return err
			}
			for _, wc := range buf[:k] {
				outstanding--
				if wc.Status != 0 {
					fmt.Println("ERR", wc.Status, done)
					// Keep the session until the test has looked at
					// the daemon: it closes stdin.
					_, _ = line("NEVER")
					return nil
				}
				done++
				if done == 32 {
					fmt.Println("STREAMING")
				}
			}
			if k == 0 {
				time.Sleep(20 * time.Microsecond)
			}
		}
		return errors.New("no error completion after the peer died")
	case "victim", "sink":
		_, _ = line("NEVER")
	case "writebench":
		return writeBench(n, peer)
	case "ping", "pong":
		return pingPong(n, role == "ping")
	case "msgsend":
		return msgSend(n)
	case "msgrecv":
		return msgRecv(n)
	}
	_, _ = line("EOF")
	return nil
}

// garbageRole sends garbage: datagrams before hello, then well-framed
// messages with random bodies, opcodes and handles after it.
func garbageRole(sock string) error {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 20; i++ {
		c, err := proto.Dial(sock)
		if err != nil {
			return err
		}
		b := make([]byte, rng.Intn(200))
		rng.Read(b)
		if err := c.WriteRaw(b, nil); err != nil {
			return err
		}
		// The daemon answers with protocol_error (or nothing) and closes.
		for {
			if _, _, err := c.ReadRaw(); err != nil {
				break
			}
		}
		c.Close()
	}
	c, err := client.Dial(sock, "garbage")
	if err != nil {
		return err
	}
	// Some objects for the random handles to hit: device 1, PD 2, CQ 3.
	d, err := c.OpenDevice("rvt0")
	if err != nil {
		return err
	}
	if _, err := d.AllocPD(); err != nil {
		return err
	}
	if _, err := d.CreateCQ(8, 0); err != nil {
		return err
	}
	refused := 0
	for i := 0; i < 500; i++ {
		op := proto.Op(rng.Intn(0x80))
		body := make([]byte, rng.Intn(120))
		rng.Read(body)
		if rng.Intn(2) == 0 {
			clear(body)
		}
		b := make([]byte, proto.HeaderSize+len(body))
		proto.PutHeader(b, proto.Header{Length: uint32(len(b)), Op: op, ReqID: uint32(i + 100), Handle: uint32(rng.Intn(8))})
		copy(b[proto.HeaderSize:], body)
		if err := c.Conn().WriteRaw(b, nil); err != nil {
			return err
		}
		raw, fds, err := c.Conn().ReadRaw()
		if err != nil {
			return fmt.Errorf("message %d (op %#x): %w", i, uint16(op), err)
		}
		for _, fd := range fds {
			syscall.Close(fd)
		}
		h, err := proto.ParseHeader(raw, len(fds))
		if err != nil {
			return fmt.Errorf("reply to message %d: %w", i, err)
		}
		if h.ReqID != uint32(i+100) || h.Op != op || h.Flags != proto.FlagReply {
			return fmt.Errorf("reply to %d (op %#x): %+v", i+100, uint16(op), h)
		}
		if h.Status != 0 {
			refused++
		}
	}
	if _, err := c.OpenDevice("rvt0"); err != nil {
		return fmt.Errorf("after garbage: %w", err)
	}
	fmt.Println("GARBAGEOK", refused)
	return nil
}

// pairUp starts two client processes on rvt1 and rvt0 and connects them.
func pairUp(t *testing.T, sock, roleA, roleB string) (a, b *child) {
	a = startChild(t, roleA, roleA, sock, "rvt1")
	b = startChild(t, roleB, roleB, sock, "rvt0")
	ea := a.expect("EP")
	eb := b.expect("EP")
	a.send("PEER %s", strings.Join(eb[1:], " "))
	b.send("PEER %s", strings.Join(ea[1:], " "))
	a.expect("READY")
	b.expect("READY")
	return a, b
}

// TestSendAndWriteBetweenProcesses, on the default devices and on devices
// with receive_here.
func TestSendAndWriteBetweenProcesses(t *testing.T) {
	for _, here := range []bool{false, true} {
		t.Run(map[bool]string{false: "workers", true: "receive_here"}[here], func(t *testing.T) {
			cfg := rvtd.DefaultConfig()
			for i := range cfg.Devices {
				cfg.Devices[i].ReceiveHere = here
			}
			srv, sock := startDaemonConfig(t, cfg)
			a, b := pairUp(t, sock, "recv", "send")
			b.send("GO")
			a.expect("RECVOK")
			b.expect("SENDOK")
			a.send("CHECK")
			a.expect("WRITEOK")
			a.in.Close()
			b.in.Close()
			if err := a.cmd.Wait(); err != nil {
				t.Errorf("recv: %v", err)
			}
			if err := b.cmd.Wait(); err != nil {
				t.Errorf("send: %v", err)
			}
			waitFor(t, "sessions to end", func() bool { st := srv.Stats(); return st.Sessions == 0 && st.QPs == 0 && st.CQs == 0 })
		})
	}
}

func TestKilledClient(t *testing.T) {
	srv, sock := startDaemon(t)
	victim, writer := pairUp(t, sock, "victim", "stream")
	writer.send("GO")
	writer.expect("STREAMING")
	if st := srv.Stats(); st.Sessions != 2 || st.QPs != 2 {
		t.Fatalf("before the kill: %+v", st)
	}
	before := memfds(t) // the two sessions' segment, CQ and QP each, and any of earlier tests' clients in this process
	if before < 6 {
		t.Fatalf("%d memfds mapped before the kill, want at least 6", before)
	}
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	f := writer.expect("ERR")
	if f[1] != "12" && f[1] != "5" { // RETRY_EXC_ERR, or a flush after it
		t.Errorf("writer's error completion: status %s", f[1])
	}
	waitFor(t, "the victim's objects to go", func() bool { st := srv.Stats(); return st.Sessions == 1 && st.QPs == 1 && st.CQs == 1 })
	if n := memfds(t); n != before-3 {
		t.Errorf("%d memfds mapped after the kill, want %d: the victim's 3 unmapped", n, before-3)
	}
	// rvtd keeps serving.
	c, err := client.Dial(sock, "after")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.OpenDevice("rvt1"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	writer.in.Close()
	_ = writer.cmd.Wait()
	waitFor(t, "sessions to end", func() bool { st := srv.Stats(); return st.Sessions == 0 && st.QPs == 0 })
}

func TestGarbageClient(t *testing.T) {
	srv, sock := startDaemon(t)
	g := startChild(t, "garbage", "garbage", sock, "")
	f := g.expect("GARBAGEOK")
	if err := g.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("refused %s of 500 random requests", f[1])
	if st := srv.Stats(); st.ProtoErrors == 0 || st.BadRequests == 0 {
		t.Errorf("counters: %+v", st)
	}
	waitFor(t, "sessions to end", func() bool { st := srv.Stats(); return st.Sessions == 0 && st.QPs == 0 && st.CQs == 0 })
}

func TestSecondDaemonRefused(t *testing.T) {
	_, sock := startDaemon(t)
	srv2, err := rvtd.New(&rvtd.Config{Devices: []rvtd.DeviceConfig{{Name: "x", Fabric: "f", IP: "198.18.9.1/24"}}}, rvtd.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Shutdown(context.Background())
	err = srv2.Listen(sock)
	if !errors.Is(err, rvtd.ErrRunning) {
		t.Fatalf("second daemon on %s: %v", sock, err)
	}
	t.Log(err)
}

func TestStaleSocketRemoved(t *testing.T) {
	sock := t.TempDir() + "/rvtd.sock"
	ln, err := proto.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // leaves the file, nobody listening
	if err := rvtd.CheckSocket(sock, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("stale socket still there: %v", err)
	}
}

// memfds counts the rvtd memfds this process (the daemon) has mapped: it
// keeps the mapping of a segment or a ring, not the descriptor, once it has
// passed the memfd on.
func memfds(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip("no /proc/self/maps")
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, " /memfd:rvtd-") {
			n++
		}
	}
	return n
}
