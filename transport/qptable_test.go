package transport

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestQPTable(t *testing.T) {
	var tab qpTable
	require.Nil(t, tab.get(0x11), "empty")
	conns := map[uint32]*Conn{}
	for _, qpn := range []uint32{1, 0x11, 1023, 1024, 0x12345, 0xFFFFFF} {
		c := new(Conn)
		tab.set(qpn, c)
		conns[qpn] = c
	}
	for qpn, c := range conns {
		require.Same(t, c, tab.get(qpn), "%#x", qpn)
	}
	for _, qpn := range []uint32{0, 2, 1025, 0x12344, 0xFFFFFE, 0x1000000 - 1024} {
		require.Nil(t, tab.get(qpn), "%#x", qpn)
	}
	require.Nil(t, tab.get(0xFFFFFFFF), "past the 24 bits")
	tab.set(0x12345, nil)
	require.Nil(t, tab.get(0x12345), "removed")
	delete(conns, 0x12345)
	tab.set(0x777777, nil) // removing from a page never made makes none
	require.Len(t, *tab.pages.Load(), 0xFFFFFF>>qpPageBits+1)
	require.Nil(t, (*tab.pages.Load())[0x777777>>qpPageBits])
	got := map[*Conn]bool{}
	tab.each(func(c *Conn) { got[c] = true })
	require.Len(t, got, len(conns))
	for _, c := range conns {
		require.True(t, got[c])
	}
}

// Readers take no lock while a writer adds QPs on new pages and removes
// them (go test -race): each reader sees a QP it knows is there.
func TestQPTableConcurrentReaders(t *testing.T) {
	var tab qpTable
	var mu sync.Mutex
	fixed := new(Conn)
	tab.set(0x11, fixed)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if tab.get(0x11) != fixed {
					t.Error("the fixed QP went missing")
					return
				}
				tab.get(0x5000)
			}
		}()
	}
	for qpn := uint32(0x12); qpn < 0x12+20000; qpn++ {
		mu.Lock()
		tab.set(qpn, new(Conn))
		if qpn%3 == 0 && qpn-1 != 0x11 {
			tab.set(qpn-1, nil)
		}
		mu.Unlock()
	}
	stop.Store(true)
	wg.Wait()
}
