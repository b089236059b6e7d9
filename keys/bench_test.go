package keys

import (
	"testing"
)

func BenchmarkCheckRemote(b *testing.B) {
	tb := NewTable(16)
	pd := NewPD(1)
	mr := regMR(b, tb, pd, 1<<20, 0x100000, LocalWrite|RemoteAccess)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := tb.CheckRemote(pd, mr.Rkey, 0x100000+uint64(i&0xffff), 4096, RemoteWrite); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckRemoteParallel(b *testing.B) {
	tb := NewTable(16)
	pd := NewPD(1)
	mr := regMR(b, tb, pd, 1<<20, 0x100000, LocalWrite|RemoteAccess)
	b.ReportAllocs()
	b.RunParallel(func(p *testing.PB) {
		for p.Next() {
			if _, err := tb.CheckRemote(pd, mr.Rkey, 0x100000, 4096, RemoteWrite); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkCheckLocalMiss(b *testing.B) {
	tb := NewTable(16)
	pd := NewPD(1)
	mr := regMR(b, tb, pd, 4096, 0, LocalWrite)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tb.CheckLocal(pd, mr.Lkey^0xff, 0, 64, 0); err == nil {
			b.Fatal("stale key accepted")
		}
	}
}

func BenchmarkWriteAtPages(b *testing.B) {
	tb := NewTable(8)
	pd := NewPD(1)
	mr, _ := fastMR(b, tb, pd, 16, 4096, 0x10000, 1, LocalWrite|RemoteWrite)
	p := make([]byte, 4096)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		mr.WriteAt(p, 0x10000+2048) // straddles two pages
	}
}
