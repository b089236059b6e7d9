package ring

import (
	"encoding/binary"
	"runtime"
	"sync"
	"testing"
)

// BenchmarkThroughput moves 64-byte records from one goroutine to another
// through a shared-memory ring (one record per publish, and batches of
// 16), beside a buffered Go channel of 64-byte values of the same depth,
// measured in the same run. Both sides spin (the ring's busy path: no
// system call); the figure is entries/s.
func BenchmarkThroughput(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two CPUs")
	}
	const depth = 256
	for _, batch := range []int{1, 16} {
		b.Run("ring/batch="+itoa(batch), func(b *testing.B) {
			p, c, _, _ := pair(b, depth, 0)
			b.ResetTimer()
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for sent := 0; sent < b.N; {
					free, err := p.Free()
					if err != nil {
						panic(err)
					}
					n := min(free, batch, b.N-sent)
					if n == 0 {
						runtime.Gosched()
						continue
					}
					for k := range n {
						binary.LittleEndian.PutUint64(p.Slot(k), uint64(sent+k))
					}
					if _, err := p.Publish(n); err != nil {
						panic(err)
					}
					sent += n
				}
			}()
			var sum uint64
			for got := 0; got < b.N; {
				n, err := c.Available()
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					runtime.Gosched()
					continue
				}
				for k := range n {
					sum += binary.LittleEndian.Uint64(c.Slot(k))
				}
				c.Release(n)
				got += n
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
			if want := uint64(b.N) * uint64(b.N-1) / 2; sum != want {
				b.Fatalf("sum %d, want %d", sum, want)
			}
		})
	}
	b.Run("chan", func(b *testing.B) {
		type rec [64]byte
		ch := make(chan rec, depth)
		b.ResetTimer()
		go func() {
			var r rec
			for i := 0; i < b.N; i++ {
				binary.LittleEndian.PutUint64(r[:], uint64(i))
				ch <- r
			}
		}()
		var sum uint64
		for i := 0; i < b.N; i++ {
			r := <-ch
			sum += binary.LittleEndian.Uint64(r[:])
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	})
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
