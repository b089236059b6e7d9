package dropin_test

import (
	"encoding/binary"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeDaemon serves SOCK_SEQPACKET sessions that answer hello properly and
// every later request with reply(op, id) (nil: close the connection): a
// daemon that is wrong in one chosen way, to show the library refuses what
// it cannot trust with an error, never a crash.
func fakeDaemon(t *testing.T, reply func(op uint16, id uint32) []byte) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "fake.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 65537)
				for {
					n, err := c.Read(buf)
					if err != nil || n < 24 {
						return
					}
					op := binary.LittleEndian.Uint16(buf[4:])
					id := binary.LittleEndian.Uint32(buf[8:])
					var out []byte
					if op == 0x0001 {
						body := make([]byte, 64)
						binary.LittleEndian.PutUint32(body, 0x44545652)
						binary.LittleEndian.PutUint16(body[4:], 1)
						binary.LittleEndian.PutUint32(body[20:], 65536)
						binary.LittleEndian.PutUint32(body[24:], 4096)
						out = msg(op, 1, 0, id, 0, body)
					} else if out = reply(op, id); out == nil {
						return
					}
					if _, err := c.Write(out); err != nil {
						return
					}
				}
			}()
		}
	}()
	return sock
}

func deviceEntry(name string) []byte {
	e := make([]byte, 88)
	copy(e, name)
	binary.LittleEndian.PutUint32(e[80:], 1)
	return e
}

func TestFakeDaemon(t *testing.T) {
	build := libs(t)
	devices := tool(t, "ibv_devices")
	devinfo := tool(t, "ibv_devinfo")
	good := deviceEntry("fake0")
	for _, tc := range []struct {
		name   string
		bin    string
		reply  func(op uint16, id uint32) []byte
		stdout string // what the tool prints, if it runs
		stderr string // the library's or the tool's message
	}{
		{"ragged device list", devices, func(op uint16, id uint32) []byte {
			return msg(op, 1, 0, id, 0, append(good, 1, 2, 3))
		}, "", "Failed to get IB devices list"},
		{"wrong request id", devices, func(op uint16, id uint32) []byte {
			return msg(op, 1, 0, id+7, 0, good)
		}, "", "Protocol error"},
		{"descriptor count without descriptors", devices, func(op uint16, id uint32) []byte {
			return msg(op, 1, 1, id, 0, good)
		}, "", "Protocol error"},
		{"error status with a body", devices, func(op uint16, id uint32) []byte {
			return msg(op, 1, 0, id, 22, good)
		}, "", "Protocol error"},
		{"protocol_error event", devices, func(op uint16, id uint32) []byte {
			return msg(0x0002, 2, 0, 0, 0, append(make([]byte, 16), "you sent nonsense"...))
		}, "", "you sent nonsense"},
		{"hang-up", devices, func(op uint16, id uint32) []byte { return nil }, "", "Failed to get IB devices list"},
		{"name without NUL is skipped", devices, func(op uint16, id uint32) []byte {
			bad := deviceEntry(strings.Repeat("x", 64))
			return msg(op, 1, 0, id, 0, append(bad, good...))
		}, "fake0", ""},
		{"open_device without its async socket", devinfo, func(op uint16, id uint32) []byte {
			if op == 0x0010 {
				return msg(op, 1, 0, id, 0, good)
			}
			return msg(op, 1, 0, id, 0, make([]byte, 8)) // nfds 0: the fd is missing
		}, "", "open_device fake0: Protocol error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := fakeDaemon(t, tc.reply)
			p := start(t, build, sock, 20*time.Second, nil, tc.bin)
			err, _ := p.wait()
			stdout, stderr := p.stdout.String(), p.stderr.String()
			var ee *exec.ExitError
			if errorAs(err, &ee) {
				if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
					t.Fatalf("killed by %v\n%s%s", st.Signal(), stdout, stderr)
				}
			}
			if tc.stdout != "" {
				if err != nil || !strings.Contains(stdout, tc.stdout) || strings.Contains(stdout, "xxxx") {
					t.Fatalf("%v, want exit 0 listing %q only\n%s%s", err, tc.stdout, stdout, stderr)
				}
				return
			}
			t.Logf("%v: %s%s", err, stdout, stderr)
			if err == nil || !strings.Contains(stdout+stderr, tc.stderr) {
				t.Fatalf("%v, want a failure saying %q\n%s%s", err, tc.stderr, stdout, stderr)
			}
		})
	}
}
