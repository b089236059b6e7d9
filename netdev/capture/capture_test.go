package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
	"github.com/softverbs/softverbs/netdev/internal/frametest"
)

// udSendOnly returns a RoCEv2 UD SEND_ONLY frame (BTH + DETH + payload +
// a placeholder ICRC) from src to dst.
func udSendOnly(t testing.TB, src, dst netdev.Endpoint, qpn uint32, psn uint32, payload string) []byte {
	bth := make([]byte, 12+8+len(payload)+4)
	bth[0] = 0x64                                       // UD SEND_ONLY
	binary.BigEndian.PutUint16(bth[2:], 0xffff)         // P_Key
	binary.BigEndian.PutUint32(bth[4:], qpn&0xffffff)   // dest QP
	binary.BigEndian.PutUint32(bth[8:], psn&0xffffff)   // PSN
	binary.BigEndian.PutUint32(bth[12:], 0x80010000)    // DETH Q_Key
	binary.BigEndian.PutUint32(bth[16:], 0x11&0xffffff) // DETH src QP
	copy(bth[20:], payload)
	hl := netdev.HeaderLen(netdev.UsesIPv6(src.IP, dst.IP))
	buf := make([]byte, hl+len(bth))
	copy(buf[hl:], bth)
	require.Equal(t, hl, netdev.EncodeRoCEv2(buf, src, dst, 64, 0, len(bth)))
	return buf
}

type capturedFrame struct {
	at   time.Time
	data []byte
}

func readCapture(t *testing.T, r io.Reader) []capturedFrame {
	t.Helper()
	pr, err := pcapgo.NewReader(r)
	require.NoError(t, err)
	require.Equal(t, layers.LinkTypeEthernet, pr.LinkType())
	var out []capturedFrame
	for {
		data, ci, err := pr.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		require.Equal(t, ci.Length, ci.CaptureLength)
		out = append(out, capturedFrame{at: ci.Timestamp, data: data})
	}
}

func TestCapture(t *testing.T) {
	clk := clock.NewManual()
	fab := fabric.New(clk, 1)
	pa, pb := fab.NewPort(frametest.MACA, 1500), fab.NewPort(frametest.MACB, 1500)
	a, b := frametest.EP(frametest.MACA, "10.50.0.2", 0xc001), frametest.EP(frametest.MACB, "10.50.0.1", netdev.RoCEv2Port)
	// b answers every frame with one back to a.
	pb.SetHandler(func(f []byte) {
		fi, err := netdev.ParseFrame(f)
		require.NoError(t, err)
		reply := udSendOnly(t, b, netdev.Endpoint{MAC: fi.SrcMAC, IP: fi.Src, Port: netdev.RoCEv2Port}, 0x24, 1, "pong")
		clk.Advance(time.Microsecond)
		require.NoError(t, pb.Send(reply))
		pb.Release(f)
	})

	var buf bytes.Buffer
	l, err := Wrap(pa, clk, &buf)
	require.NoError(t, err)
	var received [][]byte
	l.SetHandler(func(f []byte) { received = append(received, f) })

	var sent [][]byte
	for i := range 2 {
		f := udSendOnly(t, a, b, 0x42, uint32(i), "ping")
		sent = append(sent, f)
		require.NoError(t, l.Send(f))
		clk.Advance(time.Millisecond)
	}
	require.Len(t, received, 2)
	require.EqualValues(t, 4, l.(*Link).Frames())
	require.NoError(t, l.(*Link).Err())

	raw := append([]byte(nil), buf.Bytes()...)
	got := readCapture(t, bytes.NewReader(raw))
	require.Len(t, got, 4)
	epoch := clock.NewManual().Now()
	want := []capturedFrame{
		{epoch, sent[0]},
		{epoch.Add(time.Microsecond), received[0]},
		{epoch.Add(time.Millisecond + time.Microsecond), sent[1]},
		{epoch.Add(time.Millisecond + 2*time.Microsecond), received[1]},
	}
	for i := range want {
		require.True(t, want[i].at.Equal(got[i].at), "frame %d at %v, want %v", i, got[i].at, want[i].at)
		require.Equal(t, want[i].data, got[i].data, "frame %d", i)
	}

	t.Run("tshark decodes RoCE", func(t *testing.T) {
		tshark, err := exec.LookPath("tshark")
		if err != nil {
			if os.Geteuid() == 0 {
				t.Fatalf("running as root (as CI does) without tshark, which scripts/deps.sh installs: %v", err)
			}
			t.Skip("tshark is not installed (scripts/deps.sh installs it, as root); the pcap was checked with pcapgo above")
		}
		name := filepath.Join(t.TempDir(), "roce.pcap")
		require.NoError(t, os.WriteFile(name, raw, 0o644))
		var stderr bytes.Buffer
		cmd := exec.Command(tshark, "-n", "-r", name)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		require.NoError(t, err, "%s", stderr.String())
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		require.Len(t, lines, 4, "%s", out)
		for _, line := range lines {
			require.Contains(t, line, "RoCE", "%s", out)
			require.Contains(t, line, "UD Send Only", "%s", out)
		}
	})

	require.NoError(t, l.Close())
	require.ErrorIs(t, pa.Send(sent[0]), netdev.ErrClosed)
}

func TestCaptureConcurrent(t *testing.T) {
	fab := fabric.New(nil, 1)
	pa, pb := fab.NewPort(frametest.MACA, 1500), fab.NewPort(frametest.MACB, 1500)
	var buf bytes.Buffer
	la, err := Wrap(pa, nil, &buf)
	require.NoError(t, err)
	var n sync.WaitGroup
	var mu sync.Mutex
	delivered := 0
	la.SetHandler(func(f []byte) { mu.Lock(); delivered++; mu.Unlock(); la.(netdev.Releaser).Release(f) })
	const per = 200
	for g := range 4 {
		n.Go(func() {
			f := frametest.RawFrame(frametest.MACA, frametest.MACB, byte(g), 60)
			for range per {
				require.NoError(t, la.Send(f))
			}
		})
		n.Go(func() {
			f := frametest.RawFrame(frametest.MACB, frametest.MACA, byte(g), 60)
			for range per {
				require.NoError(t, pb.Send(f))
			}
		})
	}
	n.Wait()
	require.Equal(t, 4*per, delivered)
	got := readCapture(t, &buf)
	require.Len(t, got, 8*per, "every frame sent and received by a")
}

type failingWriter struct{ after int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.after <= 0 {
		return 0, errors.New("disk full")
	}
	w.after--
	return len(p), nil
}

func TestCaptureWriteError(t *testing.T) {
	fab := fabric.New(nil, 1)
	pa, pb := fab.NewPort(frametest.MACA, 1500), fab.NewPort(frametest.MACB, 1500)
	r := &frametest.Recorder{}
	pb.SetHandler(r.Handler)

	_, err := Wrap(pa, nil, &failingWriter{})
	require.ErrorContains(t, err, "disk full")

	c, err := New(pa, nil, &failingWriter{after: 1})
	require.NoError(t, err)
	require.NoError(t, c.Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 0, 46)))
	require.NoError(t, c.Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 0, 46)))
	require.ErrorContains(t, c.Err(), "disk full")
	require.Equal(t, 2, r.Count(), "the link keeps working")
	require.Zero(t, c.Frames())
}
