package ring

// Reset empties the ring for a QP moved to RESET (the daemon, while the
// client waits for its modify_qp reply): both indices, the flags and the
// status go back to 0, and the records in it are dropped.
func (c *Consumer) Reset() {
	c.hdr.u32(offProducer).Store(0)
	c.hdr.u32(offConsumer).Store(0)
	c.hdr.u32(offFlags).Store(0)
	c.hdr.u32(offStatus).Store(0)
	c.tail = 0
}

// Resync takes the ring's indices from shared memory again (the client,
// after the daemon reset the ring): the producer goes on from there.
func (p *Producer) Resync() {
	p.head = p.hdr.u32(offProducer).Load()
	p.cons = p.hdr.u32(offConsumer).Load()
}

// Producer is the producer index as the other side last published it,
// unchecked (for a daemon that polls rings while it spins).
func (c *Consumer) Producer() uint32 { return c.hdr.u32(offProducer).Load() }
