package keys

import (
	"bytes"
	"testing"
)

func TestMirror(t *testing.T) {
	tb := NewTable(MinTableBits)
	pd := NewPD(1)
	buf := make([]byte, 64)
	mr := tb.Mirror(pd, buf, 0x1234, 0x1234, 0x9000, LocalWrite|RemoteRead)
	if !mr.Valid() || mr.Windows() != 0 || mr.IOVA != 0x9000 || mr.Length != 64 || mr.Lkey != 0x1234 {
		t.Fatalf("mirror %+v valid %v", mr, mr.Valid())
	}
	if n := mr.WriteAt([]byte("abcd"), 0x9010); n != 4 || !bytes.Equal(buf[16:20], []byte("abcd")) {
		t.Fatalf("WriteAt %d: %q", n, buf[16:20])
	}
	got := make([]byte, 4)
	if n := mr.ReadAt(got, 0x9010); n != 4 || string(got) != "abcd" {
		t.Fatalf("ReadAt %d %q", n, got)
	}
	if n := mr.ReadAt(got, 0x9000+62); n != 2 {
		t.Fatalf("ReadAt across the end: %d bytes, want 2 (clamped)", n)
	}
	if _, err := tb.CheckLocal(pd, 0x1234, 0x9000, 4, LocalWrite); err == nil {
		t.Fatal("a mirrored key passes the table's checks")
	}
	tb.Unmirror(mr)
	if mr.Valid() || mr.ReadAt(got, 0x9010) != 0 {
		t.Fatal("Unmirror left the MR readable")
	}
	mw := tb.MirrorMW(pd, MWType2, 0x55)
	if _, _, _, _, ok := mw.Binding(); ok || mw.Rkey != 0x55 || mw.Type != MWType2 {
		t.Fatalf("mirrored MW %+v", mw)
	}
}
