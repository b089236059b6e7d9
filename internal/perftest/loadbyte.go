package perftest

// loadByte reads b[i] while a peer's RDMA WRITE may be landing in it (the
// ib_write_lat poll): the device's responder writes the buffer on another
// goroutine, and the loop only waits for a value to appear, as perftest
// spins on a volatile char. It is kept out of the race detector's view and
// never inlined, so the load is repeated on every call.
//
//go:norace
//go:noinline
func loadByte(b []byte, i int) byte { return b[i] }
