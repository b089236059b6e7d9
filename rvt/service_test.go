package rvt

import (
	"errors"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/netdev"
	"github.com/softverbs/softverbs/netdev/fabric"
)

type svcKey struct{ name string }

// testService records its closing in a shared log.
type testService struct {
	name string
	log  *[]string
	mu   *sync.Mutex
}

func (s *testService) Close() error {
	s.mu.Lock()
	*s.log = append(*s.log, s.name)
	s.mu.Unlock()
	return nil
}

// A service is opened once per device and key, by whichever caller comes
// first (the others wait for it); a failed open is retried by the next
// caller; DropService forgets one; Close closes them newest first, and
// Service fails after it.
func TestDeviceService(t *testing.T) {
	d, err := Open(Options{Inline: true})
	require.NoError(t, err)
	var (
		mu     sync.Mutex
		closed []string
		opens  atomic.Int32
	)
	opener := func(name string) func() (io.Closer, error) {
		return func() (io.Closer, error) {
			opens.Add(1)
			return &testService{name: name, log: &closed, mu: &mu}, nil
		}
	}

	// Concurrent first calls: one open, one service.
	var wg sync.WaitGroup
	got := make([]any, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := d.Service(svcKey{"a"}, opener("a"))
			require.NoError(t, err)
			got[i] = v
		}()
	}
	wg.Wait()
	require.EqualValues(t, 1, opens.Load())
	for _, v := range got {
		require.Same(t, got[0], v)
	}

	// A failed open is not kept.
	boom := errors.New("boom")
	_, err = d.Service(svcKey{"b"}, func() (io.Closer, error) { return nil, boom })
	require.ErrorIs(t, err, boom)
	b, err := d.Service(svcKey{"b"}, opener("b"))
	require.NoError(t, err)
	require.Equal(t, "b", b.(*testService).name)

	// An open may use other keys.
	c, err := d.Service(svcKey{"c"}, func() (io.Closer, error) {
		if _, err := d.Service(svcKey{"a"}, opener("a again")); err != nil {
			return nil, err
		}
		return opener("c")()
	})
	require.NoError(t, err)
	require.Equal(t, "c", c.(*testService).name)

	// DropService forgets only the service it names.
	require.False(t, d.DropService(svcKey{"b"}, &testService{}))
	require.True(t, d.DropService(svcKey{"b"}, b.(io.Closer)))
	b2, err := d.Service(svcKey{"b"}, opener("b2"))
	require.NoError(t, err)
	require.NotSame(t, b, b2)

	require.NoError(t, d.Close())
	require.Equal(t, []string{"b2", "c", "a"}, closed, "closed newest first; a dropped one is not closed")
	_, err = d.Service(svcKey{"a"}, opener("late"))
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, d.Close())
	require.Len(t, closed, 3, "closed once")
}

// A service that uses the device (its own QP) is closed before the
// device's QPs stop.
func TestDeviceServiceUsesDevice(t *testing.T) {
	n := newNode(t, Options{})
	var qpAlive bool
	_, err := n.d.Service(svcKey{"qp"}, func() (io.Closer, error) {
		q := n.qp(t, 2 /* UD */)
		return closerFunc(func() error {
			qpAlive = q.Destroy() == nil
			return nil
		}), nil
	})
	require.NoError(t, err)
	require.NoError(t, n.d.Close())
	require.True(t, qpAlive, "the service destroyed its QP on a live device")
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// ResolveNeighbour answers with the port's resolver, and false without one.
func TestDeviceResolveNeighbour(t *testing.T) {
	fab := fabric.New(nil, 1)
	mac := netdev.MAC{2, 0, 0, 0, 0, 9}
	ip := netip.MustParseAddr("10.8.0.9")
	fab.AddAddr(ip, mac)
	port := fab.NewPort(netdev.MAC{2, 0, 0, 0, 0, 1}, 1500)
	t.Cleanup(func() { port.Close() })
	n := newNode(t, Options{Link: port, MAC: netdev.MAC{2, 0, 0, 0, 0, 1}, Resolve: fab.Resolve})
	m, ok := n.d.ResolveNeighbour(ip)
	require.True(t, ok)
	require.Equal(t, mac, m)
	_, ok = n.d.ResolveNeighbour(netip.MustParseAddr("10.8.0.10"))
	require.False(t, ok)
	_, ok = newNode(t, Options{}).d.ResolveNeighbour(ip)
	require.False(t, ok, "no resolver")
}
