package ring

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// pair makes a CQ-sized ring in a fresh region with a producer and a
// consumer, the consumer sleeping on a doorbell the producer rings.
func pair(t testing.TB, entries uint32, start uint32) (*Producer, *Consumer, *Doorbell, *Region) {
	t.Helper()
	l := Layout{Offset: 0, Entries: entries, Stride: 64}
	reg, err := Create("ring-test", int(l.Size()))
	require.NoError(t, err)
	t.Cleanup(func() { reg.Close() })
	require.NoError(t, Init(reg.Bytes(), KindCQ, l))
	h := header(reg.Bytes())
	h.u32(offProducer).Store(start)
	h.u32(offConsumer).Store(start)
	db, err := NewDoorbell()
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	p, err := NewProducer(reg.Bytes(), KindCQ, l, db, true)
	require.NoError(t, err)
	c, err := NewConsumer(reg.Bytes(), KindCQ, l, db, true)
	require.NoError(t, err)
	return p, c, db, reg
}

func TestProduceConsumeWraps(t *testing.T) {
	// Start just below 2^32 so the free-running indices wrap mid-test.
	p, c, _, _ := pair(t, 8, 0xffff_fff0)
	next, want := uint64(0), uint64(0)
	for round := 0; round < 40; round++ {
		free, err := p.Free()
		require.NoError(t, err)
		n := min(free, round%5+1)
		for k := range n {
			binary.LittleEndian.PutUint64(p.Slot(k), next)
			next++
		}
		_, err = p.Publish(n)
		require.NoError(t, err)
		avail, err := c.Available()
		require.NoError(t, err)
		require.Equal(t, int(next-want), avail)
		take := avail - round%2 // sometimes leave one behind
		for k := range take {
			require.Equal(t, want, binary.LittleEndian.Uint64(c.Slot(k)))
			want++
		}
		c.Release(take)
	}
	require.Greater(t, want, uint64(60))
}

func TestProducerFull(t *testing.T) {
	p, c, _, _ := pair(t, 4, 0)
	free, err := p.Free()
	require.NoError(t, err)
	require.Equal(t, 4, free)
	_, err = p.Publish(4)
	require.NoError(t, err)
	free, err = p.Free()
	require.NoError(t, err)
	require.Zero(t, free)
	c.Release(1)
	free, err = p.Free()
	require.NoError(t, err)
	require.Equal(t, 1, free)
}

// TestCorruptIndices: indices the other side writes out of range are
// ErrCorrupt for the reader, never a panic or an access outside the ring.
func TestCorruptIndices(t *testing.T) {
	for _, tc := range []struct {
		name       string
		prod, cons uint32 // written by the "other side" after setup
		consumer   bool   // the side that checks
	}{
		{"producer too far ahead", 4 + 8 + 1, 4, true},
		{"producer behind consumer", 3, 4, true},
		{"producer huge", 0x8000_0000, 4, true},
		{"consumer ahead of producer", 4, 5, false},
		{"consumer went back", 4, 2, false},
		{"consumer huge", 4, 0xffff_0000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, c, _, _ := pair(t, 8, 0)
			_, err := p.Publish(4)
			require.NoError(t, err)
			n, err := c.Available()
			require.NoError(t, err)
			c.Release(n)
			_, err = p.Free()
			require.NoError(t, err)
			h := p.hdr
			if tc.consumer {
				h.u32(offProducer).Store(tc.prod)
				_, err = c.Available()
			} else {
				h.u32(offConsumer).Store(tc.cons)
				_, err = p.Free()
			}
			require.ErrorIs(t, err, ErrCorrupt)
			var ie *IndexError
			require.True(t, errors.As(err, &ie))
			require.Equal(t, uint32(8), ie.Entries)
			// Slots stay inside the ring whatever the index.
			require.Len(t, c.Slot(int(tc.prod)), 64)
			p.Fail(71)
			require.Equal(t, uint32(71), c.Status())
		})
	}
	// A ring that is corrupt when attached is refused.
	l := Layout{Entries: 8, Stride: 64}
	reg, err := Create("ring-test", int(l.Size()))
	require.NoError(t, err)
	defer reg.Close()
	require.NoError(t, Init(reg.Bytes(), KindSend, l))
	header(reg.Bytes()).u32(offProducer).Store(100)
	_, err = NewConsumer(reg.Bytes(), KindSend, l, nil, true)
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = NewConsumer(reg.Bytes(), KindCQ, l, nil, true)
	require.ErrorIs(t, err, ErrLayout, "the description must match")
}

func TestLayoutCheck(t *testing.T) {
	for _, tc := range []struct {
		l    Layout
		size int
		ok   bool
	}{
		{Layout{0, 8, 64}, 256 + 512, true},
		{Layout{0, 8, 64}, 256 + 511, false},
		{Layout{4096, 8, 64}, 4096 + 768, true},
		{Layout{32, 8, 64}, 4096, false},
		{Layout{0, 6, 64}, 4096, false},
		{Layout{0, 0, 64}, 4096, false},
		{Layout{0, 8, 48}, 4096, false},
		{Layout{0, 8, 8}, 4096, false},
		{Layout{1 << 62, 8, 64}, 4096, false},
		{Layout{0, MaxEntries * 2, 64}, 1 << 30, false},
	} {
		err := tc.l.Check(tc.size)
		if tc.ok {
			require.NoError(t, err, "%+v", tc.l)
		} else {
			require.ErrorIs(t, err, ErrLayout, "%+v", tc.l)
		}
	}
	require.Equal(t, uint32(128), SendStride(1, 0))
	require.Equal(t, uint32(128), SendStride(4, 64))
	require.Equal(t, uint32(512), SendStride(4, 256))
	require.Equal(t, uint32(1024), SendStride(32, 0))
	require.Equal(t, uint32(32), RecvStride(1))
	require.Equal(t, uint32(128), RecvStride(4))
}

// TestNeedWakeup: a busy consumer is never rung; a sleeping one is rung
// exactly when it has set NEED_WAKEUP, and wakes.
func TestNeedWakeup(t *testing.T) {
	p, c, _, _ := pair(t, 64, 0)
	for range 10 {
		rang, err := p.Publish(1)
		require.NoError(t, err)
		require.False(t, rang, "nobody sleeps")
	}
	n, err := c.Available()
	require.NoError(t, err)
	c.Release(n)

	// Sleep finds records published in between and does not sleep.
	_, err = p.Publish(1)
	require.NoError(t, err)
	ready, err := c.Sleep()
	require.NoError(t, err)
	require.True(t, ready)
	c.Release(1)

	var wg sync.WaitGroup
	got := make(chan int, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, err := c.Wait()
		if err != nil {
			n = -1
		}
		got <- n
	}()
	// Wait until the consumer has said it sleeps, then publish.
	for p.hdr.u32(offFlags).Load()&NeedWakeup == 0 {
		time.Sleep(time.Millisecond)
	}
	rang, err := p.Publish(1)
	require.NoError(t, err)
	require.True(t, rang)
	wg.Wait()
	require.Equal(t, 1, <-got)
	require.Zero(t, p.hdr.u32(offFlags).Load()&NeedWakeup, "woken, the flag is cleared")
	rang, err = p.Publish(1)
	require.NoError(t, err)
	require.False(t, rang)
}

func TestArm(t *testing.T) {
	p, c, _, _ := pair(t, 8, 0)
	require.False(t, p.TakeArm(true), "not armed")
	c.Arm(true)
	require.False(t, p.TakeArm(false), "solicited-only arm, unsolicited completion")
	require.True(t, p.TakeArm(true))
	require.False(t, p.TakeArm(true), "one-shot")
	c.Arm(false)
	c.Arm(true) // does not narrow the pending arm
	require.True(t, p.TakeArm(false))
	c.Arm(true)
	c.Arm(false) // widens
	require.True(t, p.TakeArm(false))
}

func TestMapRefusesUnsealed(t *testing.T) {
	reg, err := Create("ring-test", 4096)
	require.NoError(t, err)
	defer reg.Close()
	seals, err := fcntlSeals(reg.FD())
	require.NoError(t, err)
	require.Equal(t, Seals, seals)
	_, err = Map(dupFD(t, reg.FD()), 8192, false)
	require.ErrorIs(t, err, ErrLayout, "larger than the file")
	r2, err := Map(dupFD(t, reg.FD()), 4096, true)
	require.NoError(t, err)
	r2.Bytes()[100] = 7
	require.Equal(t, byte(7), reg.Bytes()[100], "the same memory")
	require.NoError(t, r2.Close())

	fd := plainMemfd(t, 4096)
	_, err = Map(fd, 4096, true)
	require.ErrorIs(t, err, ErrNotSealed)
}

// TestMapSealRace: a client that shrinks its memfd and then seals it while
// the daemon maps it must not get a mapping past the file's end (a SIGBUS
// in the daemon at the first access). The seals are checked first, so a
// file unsealed then is refused, and one sealed then cannot shrink.
func TestMapSealRace(t *testing.T) {
	shrinkAndSeal := func(fd int) {
		_ = unix.Ftruncate(fd, 0)
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK)
	}
	testHookMapBetween = shrinkAndSeal
	defer func() { testHookMapBetween = nil }()

	fd, err := unix.MemfdCreate("sealable", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	require.NoError(t, err)
	require.NoError(t, unix.Ftruncate(fd, 4096))
	_, err = Map(fd, 4096, true)
	require.ErrorIs(t, err, ErrNotSealed, "unsealed when looked at")

	reg, err := Create("ring-test", 4096)
	require.NoError(t, err)
	defer reg.Close()
	r2, err := Map(dupFD(t, reg.FD()), 4096, true)
	require.NoError(t, err, "sealed first: the shrink is refused")
	r2.Bytes()[4095] = 1 // would fault past the end of a shrunk file
	require.NoError(t, r2.Close())
}
