package netdev

// Lock order: CaptureLink.mu only; it is held while a record is written,
// never while the inner link sends or a handler runs.

import (
	"fmt"
	"io"
	"sync"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softverbs/softverbs/clock"
)

// CaptureSnapLen is the snapshot length written in capture file headers.
const CaptureSnapLen = 262144

// CaptureLink wraps a Link and writes every frame it sends and receives to a
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
type CaptureLink struct {
	inner Link
	clk   clock.Clock

	mu     sync.Mutex
	w      *pcapgo.Writer
	err    error
	frames uint64
}

var (
	_ Link     = (*CaptureLink)(nil)
	_ Releaser = (*CaptureLink)(nil)
	_ Wrapper  = (*CaptureLink)(nil)
)

// WithCapture wraps l, writing a pcap file header to w at once and a record
// per frame after that. clk (nil: the real clock) stamps the records. It
// returns an error if the header cannot be written.
func WithCapture(l Link, clk clock.Clock, w io.Writer) (Link, error) {
	c, err := NewCaptureLink(l, clk, w)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// NewCaptureLink is WithCapture returning the concrete type (for Err and
// Frames).
func NewCaptureLink(l Link, clk clock.Clock, w io.Writer) (*CaptureLink, error) {
	pw := pcapgo.NewWriterNanos(w)
	if err := pw.WriteFileHeader(CaptureSnapLen, layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("with capture: write pcap header: %w", err)
	}
	return &CaptureLink{inner: l, clk: clock.OrReal(clk), w: pw}, nil
}

func (c *CaptureLink) record(frame []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	data := frame
	if len(data) > CaptureSnapLen {
		data = data[:CaptureSnapLen]
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
func (c *CaptureLink) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Frames returns how many frames have been recorded.
func (c *CaptureLink) Frames() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames
}

// Send records frame and sends it on the inner link. A frame the inner link
// refuses (closed, too long) is still in the capture.
func (c *CaptureLink) Send(frame []byte) error {
	c.record(frame)
	return c.inner.Send(frame)
}

// SetHandler sets h as the receive handler; each received frame is recorded
// before h gets it.
func (c *CaptureLink) SetHandler(h Handler) {
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
func (c *CaptureLink) HardwareAddr() MAC { return c.inner.HardwareAddr() }

// MTU returns the inner link's MTU.
func (c *CaptureLink) MTU() int { return c.inner.MTU() }

// Release passes a received frame back to the inner link, if it pools.
func (c *CaptureLink) Release(frame []byte) {
	if r, ok := c.inner.(Releaser); ok {
		r.Release(frame)
	}
}

// Unwrap returns the inner link.
func (c *CaptureLink) Unwrap() Link { return c.inner }

// Close closes the inner link. It does not close the writer.
func (c *CaptureLink) Close() error { return c.inner.Close() }
