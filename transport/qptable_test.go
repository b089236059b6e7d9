package transport

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softverbs/softverbs/cq"
	"github.com/softverbs/softverbs/keys"
	"github.com/softverbs/softverbs/qp"
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

	// The last QP of a page takes the page with it, and the last page
	// the empty ones before it.
	tab.set(0xFFFFFF, nil)
	require.Len(t, *tab.pages.Load(), 1024>>qpPageBits+1, "trimmed to the last page in use")
	for qpn := range conns {
		tab.set(qpn, nil)
	}
	require.Empty(t, *tab.pages.Load())
	tab.each(func(*Conn) { t.Fatal("an empty table has a QP") })
}

// QPs made and destroyed over time, a few alive at once, their numbers
// moving on as a device gives them out: the table keeps a page or two, not
// one for every 1,024 numbers ever used.
func TestQPTableChurn(t *testing.T) {
	var tab qpTable
	const alive = 10
	for qpn := uint32(0x11); qpn < 0x11+200_000; qpn++ {
		tab.set(qpn, new(Conn))
		if qpn >= 0x11+alive {
			tab.set(qpn-alive, nil)
		}
		pages := 0
		for _, p := range *tab.pages.Load() {
			if p != nil {
				pages++
			}
		}
		require.LessOrEqual(t, pages, 2, "qpn %#x", qpn)
	}
	n := 0
	tab.each(func(*Conn) { n++ })
	require.Equal(t, alive, n)
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

// An engine takes each QP number once, up to the last of 24 bits (qp.New
// makes no larger one).
func TestNewConnNumbers(t *testing.T) {
	e, _, _, _ := loopPair(t) // QPs 0x21 and 0x22
	scq, err := cq.New(4)
	require.NoError(t, err)
	mk := func(num uint32) error {
		q, err := qp.New(num, qp.Config{Type: qp.RC, PD: keys.NewPD(1), SendCQ: scq, RecvCQ: scq, Keys: e.keys,
			Cap:    qp.Cap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1},
			Limits: &qp.Limits{MaxMTU: qp.MTU4096, MaxRdAtomic: 1, MaxDestRdAtomic: 1, PkeyTableLen: 1, GIDTableLen: 1, Ports: 1}})
		require.NoError(t, err)
		_, err = e.NewConn(q)
		return err
	}
	require.ErrorIs(t, mk(0x21), ErrExists)
	require.NoError(t, mk(qp.MaxQPN))
	require.NotNil(t, e.lookup(qp.MaxQPN))
	require.Len(t, *e.qps.pages.Load(), qp.MaxQPN>>qpPageBits+1)
}
