package fabric

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/internal/frametest"
)

// hereSetup is two ports whose frames are recorded by handler: plain[i]
// the ordinary one (inside Send), here[i] the one for frames Flush
// delivers.
type hereSetup struct {
	*fabricSetup
	here []*frametest.Recorder
}

func newHereSetup(t *testing.T) *hereSetup {
	s := &hereSetup{fabricSetup: newFabricSetup(t, frametest.MACA, frametest.MACB)}
	for _, p := range s.ports {
		r := &frametest.Recorder{}
		p.SetHandlerHere(r.Handler)
		s.here = append(s.here, r)
	}
	return s
}

func tags(r *frametest.Recorder) []byte {
	var out []byte
	for _, f := range r.Got() {
		out = append(out, f[netdev.EthernetHeaderLen])
	}
	return out
}

func TestHoldKeepsFramesForFlush(t *testing.T) {
	s := newHereSetup(t)
	a, b := s.ports[0], s.ports[1]
	// No hold: delivered inside Send, to the ordinary handler.
	require.NoError(t, a.Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 1, 10)))
	require.Equal(t, []byte{1}, tags(s.recs[1]))

	a.Hold()
	a.Hold() // holds nest
	require.NoError(t, a.Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 2, 10)))
	require.Equal(t, 0, s.here[1].Count(), "kept until Flush")
	a.Flush()
	require.Equal(t, []byte{2}, tags(s.here[1]), "any Flush delivers; one frame to the here handler")
	a.FlushLazy()

	a.Hold()
	require.NoError(t, a.Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 3, 10)))
	owned := a.TxFrame(64)[:netdev.EthernetHeaderLen+10]
	copy(owned, frametest.RawFrame(frametest.MACA, frametest.MACB, 4, 10))
	require.NoError(t, a.SendOwned(owned))
	require.Equal(t, []byte{1}, tags(s.recs[1]), "kept until Flush")
	a.Flush()
	require.Equal(t, []byte{1, 3, 4}, tags(s.recs[1]), "a burst goes to the ordinary handler, in order, at Flush")
	require.Equal(t, []byte{2}, tags(s.here[1]))
	st := b.Stats()
	require.Equal(t, uint64(4), st.RxFrames)

	// A port with no here handler gets its frames inside Send.
	b.SetHandlerHere(nil)
	a.Hold()
	require.NoError(t, a.Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 5, 10)))
	require.Equal(t, []byte{1, 3, 4, 5}, tags(s.recs[1]))
	a.Flush()

	// Broadcast is not kept.
	b.SetHandlerHere(s.here[1].Handler)
	a.Hold()
	require.NoError(t, a.Send(frametest.RawFrame(frametest.MACA, netdev.BroadcastMAC(), 6, 10)))
	require.Equal(t, []byte{1, 3, 4, 5, 6}, tags(s.recs[1]))
	a.Flush()
}

func TestHoldClosedReceiverDropsKept(t *testing.T) {
	s := newHereSetup(t)
	a, b := s.ports[0], s.ports[1]
	a.Hold()
	require.NoError(t, a.Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 1, 10)))
	require.NoError(t, b.Close())
	a.Flush()
	require.Equal(t, 0, s.here[1].Count())
	require.Equal(t, uint64(1), b.Stats().RxDropped)
}

// A frame kept after the last holder flushed (a sender outside any hold
// racing with it) is delivered at once, the ordinary way.
func TestKeepWithNoHolderDelivers(t *testing.T) {
	s := newHereSetup(t)
	a, b := s.ports[0], s.ports[1]
	a.keep(b, b.copyIn(frametest.RawFrame(frametest.MACA, frametest.MACB, 7, 10)))
	require.Equal(t, []byte{7}, tags(s.recs[1]))
	require.Equal(t, 0, s.here[1].Count())
	require.Zero(t, a.held.Load())
}

// Delivery recurses through the receivers' own holds and flushes, and a
// port whose drainer is up the stack only queues: a ping-pong of n frames
// started by one Flush ends with every frame delivered, in order, at a
// bounded depth.
func TestHoldRecursionIsBounded(t *testing.T) {
	s := newFabricSetup(t, frametest.MACA, frametest.MACB)
	a, b := s.ports[0], s.ports[1]
	const n = 100
	var got []byte
	depth, maxDepth := 0, 0
	bounce := func(self *Port, src, dst netdev.MAC) netdev.Handler {
		return func(f []byte) {
			depth++
			maxDepth = max(maxDepth, depth)
			tag := f[netdev.EthernetHeaderLen]
			got = append(got, tag)
			self.Release(f)
			if tag < n {
				self.Hold()
				require.NoError(t, self.Send(frametest.RawFrame(src, dst, tag+1, 10)))
				self.Flush()
			}
			depth--
		}
	}
	a.SetHandlerHere(bounce(a, frametest.MACA, frametest.MACB))
	b.SetHandlerHere(bounce(b, frametest.MACB, frametest.MACA))
	a.Hold()
	require.NoError(t, a.Send(frametest.RawFrame(frametest.MACA, frametest.MACB, 1, 10)))
	a.Flush()
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i + 1)
	}
	require.Equal(t, want, got)
	require.LessOrEqual(t, maxDepth, 2, "each port's drainer delivers from the top")
}

// Senders and flushers on several goroutines: every frame arrives once,
// each sender's in the order sent, whichever handler Flush chose (run
// with -race).
func TestHoldConcurrent(t *testing.T) {
	s := newFabricSetup(t, frametest.MACA, frametest.MACB)
	a, b := s.ports[0], s.ports[1]
	// The handlers and senders run on the senders' goroutines: they
	// record, and the test goroutine checks after.
	var mu sync.Mutex
	last := map[byte]int{}
	count := 0
	var disorder []string
	record := func(f []byte) {
		p := f[netdev.EthernetHeaderLen:]
		mu.Lock()
		seq := int(p[1]) | int(p[2])<<8
		if seq != last[p[0]] {
			disorder = append(disorder, fmt.Sprintf("sender %d: frame %d after %d", p[0], seq, last[p[0]]-1))
		}
		last[p[0]] = seq + 1
		count++
		mu.Unlock()
		b.Release(f)
	}
	b.SetHandler(record)
	b.SetHandlerHere(record)
	const senders, each = 4, 2000
	var wg sync.WaitGroup
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				a.Hold()
				f := a.TxFrame(64)[:netdev.EthernetHeaderLen+3]
				copy(f, frametest.RawFrame(frametest.MACA, frametest.MACB, byte(g), 3))
				f[netdev.EthernetHeaderLen+1], f[netdev.EthernetHeaderLen+2] = byte(i), byte(i>>8)
				if err := a.SendOwned(f); err != nil {
					t.Error(err)
					return
				}
				if i%3 == 0 {
					a.FlushLazy()
				} else {
					a.Flush()
				}
			}
		}()
	}
	wg.Wait()
	require.Empty(t, disorder)
	require.Equal(t, senders*each, count)
	require.Zero(t, a.held.Load())
}
