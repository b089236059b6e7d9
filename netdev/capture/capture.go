// Package capture wraps any netdev.Link and writes the frames it sends and
// receives to a pcap stream, for Wireshark.
package capture

// Lock order: Link.mu only; it is held while a record is written,
// never while the inner link sends or a handler runs.

import (
	"fmt"
	"io"
	"sync"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softverbs/softverbs/clock"
	"github.com/softverbs/softverbs/netdev"
)

// SnapLen is the snapshot length written in capture file headers.
const SnapLen = 262144

// Link wraps a Link and writes every frame it sends and receives to a
// pcap stream (LINKTYPE_ETHERNET, nanosecond timestamps from the clock). It
// is safe for concurrent use. A sent frame is recorded before it is handed
// to the inner link, so a reply delivered synchronously follows it in the
// file. The first write error stops recording and is kept (Err); the link
// itself keeps working.
//
// Unwrap returns the inner link, so As finds the inner link's optional
// interfaces (Holder, Poller, OwnReceiver, GroupJoiner) through the
// capture. Every frame is still recorded: a hold only delays the inner
// link's transmit of frames Send has already recorded, and a poll runs
// the handler SetHandler installed, which records.
type Link struct {
	inner netdev.Link
	clk   clock.Clock

	mu     sync.Mutex
	w      *pcapgo.Writer
	err    error
	frames uint64
}

var (
	_ netdev.Link     = (*Link)(nil)
	_ netdev.Releaser = (*Link)(nil)
	_ netdev.Wrapper  = (*Link)(nil)
)

// Wrap wraps l, writing a pcap file header to w at once and a record
// per frame after that. clk (nil: the real clock) stamps the records. It
// returns an error if the header cannot be written.
func Wrap(l netdev.Link, clk clock.Clock, w io.Writer) (netdev.Link, error) {
	c, err := New(l, clk, w)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// New is Wrap returning the concrete type (for Err and
// Frames).
func New(l netdev.Link, clk clock.Clock, w io.Writer) (*Link, error) {
	pw := pcapgo.NewWriterNanos(w)
	if err := pw.WriteFileHeader(SnapLen, layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("with capture: write pcap header: %w", err)
	}
	return &Link{inner: l, clk: clock.OrReal(clk), w: pw}, nil
}

func (c *Link) record(frame []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	data := frame
	if len(data) > SnapLen {
		data = data[:SnapLen]
	}
	ci := gopacket.CaptureInfo{
		Timestamp:     c.clk.Now(),
		CaptureLength: len(data),
		Length:        len(frame),
	}
	if err := c.w.WritePacket(ci, data); err != nil {
		c.err = fmt.Errorf("capture: write packet: %w", err)
		return
	}
	c.frames++
}

// Err returns the first error writing the capture, if any.
func (c *Link) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Frames returns how many frames have been recorded.
func (c *Link) Frames() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames
}

// Send records frame and sends it on the inner link. A frame the inner link
// refuses (closed, too long) is still in the capture.
func (c *Link) Send(frame []byte) error {
	c.record(frame)
	return c.inner.Send(frame)
}

// SetHandler sets h as the receive handler; each received frame is recorded
// before h gets it.
func (c *Link) SetHandler(h netdev.Handler) {
	if h == nil {
		c.inner.SetHandler(nil)
		return
	}
	c.inner.SetHandler(func(frame []byte) {
		c.record(frame)
		h(frame)
	})
}

// HardwareAddr returns the inner link's MAC.
func (c *Link) HardwareAddr() netdev.MAC { return c.inner.HardwareAddr() }

// MTU returns the inner link's MTU.
func (c *Link) MTU() int { return c.inner.MTU() }

// Release passes a received frame back to the inner link, if it pools.
func (c *Link) Release(frame []byte) {
	if r, ok := c.inner.(netdev.Releaser); ok {
		r.Release(frame)
	}
}

// Unwrap returns the inner link.
func (c *Link) Unwrap() netdev.Link { return c.inner }

// Close closes the inner link. It does not close the writer.
func (c *Link) Close() error { return c.inner.Close() }
