package keys_test

import (
	"errors"
	"fmt"

	"github.com/softverbs/softverbs/keys"
)

// Example registers a buffer, lets a "remote" RDMA WRITE land in it through
// its rkey, and shows how a stale key is refused after deregistration.
func Example() {
	tb := keys.NewTable(8)
	pd := keys.NewPD(1)

	buf := make([]byte, 64)
	mr, err := tb.RegMR(pd, buf, 0x10000, keys.LocalWrite|keys.RemoteWrite)
	if err != nil {
		panic(err)
	}
	fmt.Printf("rkey %#08x, access %s\n", mr.Rkey, mr.Access)

	// The responder checks an incoming RDMA WRITE, then copies its payload.
	payload := []byte("hello")
	target, err := tb.CheckRemote(pd, mr.Rkey, 0x10008, uint32(len(payload)), keys.RemoteWrite)
	if err != nil {
		panic(err)
	}
	target.WriteAt(payload, 0x10008)
	fmt.Printf("%s\n", buf[8:13])

	// A read is refused: the MR does not grant RemoteRead.
	_, err = tb.CheckRemote(pd, mr.Rkey, 0x10008, 5, keys.RemoteRead)
	fmt.Println(errors.Is(err, keys.ErrAccess))

	// After deregistration the key is dead, even once its slot is reused.
	old := mr.Rkey
	_ = tb.DeregMR(mr)
	next, _ := tb.RegMR(pd, buf, 0x10000, keys.LocalWrite|keys.RemoteWrite)
	_, err = tb.CheckRemote(pd, old, 0x10008, 5, keys.RemoteWrite)
	fmt.Println(tb.Index(old) == tb.Index(next.Rkey), errors.Is(err, keys.ErrInvalidKey))
	// Output:
	// rkey 0x01000000, access LocalWrite|RemoteWrite
	// hello
	// true
	// true true
}

// ExampleTable_FastReg shows the fast-register cycle: map pages, REG_MR with
// a key byte, LOCAL_INV, and REG_MR again with a new key byte.
func ExampleTable_FastReg() {
	tb := keys.NewTable(8)
	pd := keys.NewPD(1)
	mr, _ := tb.AllocMR(pd, 2)

	pages := [][]byte{make([]byte, 4096), make([]byte, 4096)}
	_ = mr.MapPages(pages, 4096, 0x7000, 8192)
	_ = tb.FastReg(pd, mr, 0x01, keys.LocalWrite|keys.RemoteRead)
	first := mr.Rkey

	_ = tb.Invalidate(pd, first)
	_ = mr.MapPages(pages[:1], 4096, 0x9000, 4096)
	_ = tb.FastReg(pd, mr, 0x02, keys.RemoteRead)

	_, err := tb.CheckRemote(pd, first, 0x7000, 8, keys.RemoteRead)
	fmt.Printf("%#x -> %#x, old key: %v\n", first, mr.Rkey, err)
	// Output: 0x1000001 -> 0x1000002, old key: key byte mismatch: invalid key
}
