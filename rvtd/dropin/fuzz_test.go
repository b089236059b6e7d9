package dropin_test

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// harness is the C decoder harness (rvtd/libibverbs/tests/decode_harness.c,
// built with ASan and UBSan), one process per test process, fed records on
// its stdin.
type harness struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

var (
	harnessOnce sync.Once
	theHarness  *harness
	harnessErr  error
)

func getHarness(t testing.TB) *harness {
	t.Helper()
	build := libs(t)
	harnessOnce.Do(func() {
		h := &harness{cmd: exec.Command(filepath.Join(build, "test", "decode_harness"))}
		h.in, harnessErr = h.cmd.StdinPipe()
		if harnessErr != nil {
			return
		}
		var out io.ReadCloser
		out, harnessErr = h.cmd.StdoutPipe()
		if harnessErr != nil {
			return
		}
		h.out = bufio.NewReader(out)
		h.cmd.Stderr = &lockedStderr{}
		harnessErr = h.cmd.Start()
		theHarness = h
	})
	if harnessErr != nil {
		t.Fatal(harnessErr)
	}
	return theHarness
}

type lockedStderr struct{ mu sync.Mutex }

func (l *lockedStderr) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Printf("decode_harness: %s", p)
}

// decode runs one datagram through rvc_decode (and rvc_check_reply against
// every layout) and returns rvc_decode's result.
func (h *harness) decode(t testing.TB, data []byte, nfds uint8) int {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	rec := make([]byte, 5+len(data))
	binary.LittleEndian.PutUint32(rec, uint32(len(data)))
	rec[4] = nfds
	copy(rec[5:], data)
	if _, err := h.in.Write(rec); err != nil {
		t.Fatalf("harness died (a sanitizer report above?): %v", err)
	}
	line, err := h.out.ReadString('\n')
	if err != nil {
		t.Fatalf("harness died on %x (a sanitizer report above?): %v", data, err)
	}
	var d, c int
	if _, err := fmt.Sscanf(line, "%d %d", &d, &c); err != nil {
		t.Fatalf("harness said %q", line)
	}
	return d
}

// wantDecode is the protocol document's framing rule (sections 2 and 4) for
// a datagram the daemon sent: what rvc_decode must answer.
func wantDecode(data []byte, nfds uint8) int {
	const eproto = 71
	if len(data) < 24 || len(data) > 65536 {
		return eproto
	}
	le := binary.LittleEndian
	flags := data[6]
	status := le.Uint32(data[16:])
	switch {
	case int(le.Uint32(data)) != len(data), le.Uint32(data[20:]) != 0,
		flags&^3 != 0, flags == 3, flags == 0,
		data[7] > 4, data[7] != nfds,
		status != 0 && (len(data) != 24 || data[7] != 0):
		return eproto
	}
	return 0
}

func msg(op uint16, flags, nfds uint8, id, status uint32, body []byte) []byte {
	b := make([]byte, 24+len(body))
	le := binary.LittleEndian
	le.PutUint32(b, uint32(len(b)))
	le.PutUint16(b[4:], op)
	b[6], b[7] = flags, nfds
	le.PutUint32(b[8:], id)
	le.PutUint32(b[16:], status)
	copy(b[24:], body)
	return b
}

// seeds are well-formed replies and events of the kinds the library reads.
func seeds() [][]byte {
	dev := make([]byte, 88)
	copy(dev, "rvt0")
	cq := make([]byte, 32)
	binary.LittleEndian.PutUint32(cq[4:], 16)
	binary.LittleEndian.PutUint64(cq[8:], 4096+256+16*64)
	binary.LittleEndian.PutUint32(cq[24:], 16)
	binary.LittleEndian.PutUint32(cq[28:], 64)
	return [][]byte{
		msg(0x0001, 1, 0, 1, 0, make([]byte, 64)),
		msg(0x0010, 1, 0, 2, 0, append(dev, dev...)),
		msg(0x0011, 1, 1, 3, 0, make([]byte, 8)),
		msg(0x0042, 1, 1, 4, 0, cq),
		msg(0x0050, 1, 2, 5, 0, make([]byte, 72)),
		msg(0x0033, 1, 0, 6, 22, nil),
		msg(0x0002, 2, 0, 0, 0, append(make([]byte, 16), "bad header"...)),
	}
}

func check(t testing.TB, h *harness, data []byte, nfds uint8) {
	t.Helper()
	if got, want := h.decode(t, data, nfds), wantDecode(data, nfds); got != want {
		t.Fatalf("rvc_decode(%x, nfds %d) = %d, the protocol says %d", data, nfds, got, want)
	}
}

// FuzzDecoder: the C decoder never faults (ASan, UBSan) and accepts exactly
// the datagrams the protocol's framing rules accept.
func FuzzDecoder(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s, s[7])
	}
	f.Fuzz(func(t *testing.T, data []byte, nfds uint8) {
		check(t, getHarness(t), data, nfds%6)
	})
}

// TestDecoderRandom is FuzzDecoder's property on seeded random and mutated
// inputs, under plain go test.
func TestDecoderRandom(t *testing.T) {
	h := getHarness(t)
	rng := rand.New(rand.NewSource(20))
	base := seeds()
	for i := 0; i < 20000; i++ {
		var data []byte
		nfds := uint8(rng.Intn(6))
		switch i % 3 {
		case 0:
			data = make([]byte, rng.Intn(200))
			rng.Read(data)
		default:
			s := base[rng.Intn(len(base))]
			data = append([]byte(nil), s...)
			nfds = s[7]
			for k := rng.Intn(4); k >= 0; k-- {
				switch rng.Intn(4) {
				case 0:
					if len(data) > 0 {
						data[rng.Intn(len(data))] ^= byte(1 << rng.Intn(8))
					}
				case 1:
					data = data[:rng.Intn(len(data)+1)]
				case 2:
					data = append(data, byte(rng.Intn(256)))
				case 3:
					nfds = uint8(rng.Intn(6))
				}
			}
			if i%7 == 0 && len(data) >= 4 { // keep the length field true
				binary.LittleEndian.PutUint32(data, uint32(len(data)))
			}
		}
		check(t, h, data, nfds)
	}
}
