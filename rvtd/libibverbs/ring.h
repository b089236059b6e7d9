/* Client side of rvtd's shared-memory rings (docs/rvtd-protocol.md,
 * section 7): the client produces into send and receive rings and consumes
 * CQ rings. Indices are free-running u32 counters; records are plain
 * memory published with release stores. */
#ifndef RVC_RING_H
#define RVC_RING_H

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>
#include "wire.h"

struct rvc_ring {
	uint8_t *hdr;      /* the 256-byte header */
	uint8_t *recs;     /* hdr + 256 */
	uint32_t entries;  /* a power of two */
	uint32_t stride;
	uint32_t idx;      /* our own index: producer (SQ/RQ) or consumer (CQ) */
};

static inline uint32_t *rvc_word(const struct rvc_ring *r, unsigned off)
{
	return (uint32_t *)(void *)(r->hdr + off);
}

static inline void rvc_ring_init(struct rvc_ring *r, uint8_t *base, const struct rvc_ring_desc *d,
				 int producer)
{
	r->hdr = base + d->offset;
	r->recs = r->hdr + RVC_RING_HDR;
	r->entries = d->entries;
	r->stride = d->stride;
	r->idx = __atomic_load_n(rvc_word(r, producer ? RVC_RING_PROD : RVC_RING_CONS),
				 __ATOMIC_ACQUIRE);
}

static inline void *rvc_slot(const struct rvc_ring *r, uint32_t i)
{
	return r->recs + (size_t)(i & (r->entries - 1)) * r->stride;
}

/* Producer: how many records are outstanding (posted, not yet released by
 * the consumer). */
static inline uint32_t rvc_outstanding(const struct rvc_ring *r)
{
	uint32_t c = __atomic_load_n(rvc_word(r, RVC_RING_CONS), __ATOMIC_ACQUIRE);
	return r->idx - c;
}

/* Producer: publish everything written up to r->idx, then report whether the
 * consumer asked to be woken (store-then-load, sequentially consistent). */
static inline int rvc_publish(struct rvc_ring *r)
{
	__atomic_store_n(rvc_word(r, RVC_RING_PROD), r->idx, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return (__atomic_load_n(rvc_word(r, RVC_RING_FLAGS), __ATOMIC_RELAXED) & RVC_NEED_WAKEUP) != 0;
}

/* Consumer: records available, or -1 if the producer index is out of range
 * (more than entries ahead of ours). */
static inline int64_t rvc_available(const struct rvc_ring *r)
{
	uint32_t p = __atomic_load_n(rvc_word(r, RVC_RING_PROD), __ATOMIC_ACQUIRE);
	uint32_t n = p - r->idx;
	if (n > r->entries)
		return -1;
	return n;
}

/* Consumer: give n records back. */
static inline void rvc_release(struct rvc_ring *r, uint32_t n)
{
	r->idx += n;
	__atomic_store_n(rvc_word(r, RVC_RING_CONS), r->idx, __ATOMIC_RELEASE);
}

static inline uint32_t rvc_status(const struct rvc_ring *r)
{
	return __atomic_load_n(rvc_word(r, RVC_RING_STATUS), __ATOMIC_ACQUIRE);
}

/* Consumer of a CQ ring: request one completion event (ibv_req_notify_cq).
 * A pending next-completion arm is not narrowed to solicited-only. The store
 * is sequentially consistent: the program's next poll (a load of the
 * producer index) pairs with the daemon's store of the producer index and
 * load of arm_req. */
static inline void rvc_arm(struct rvc_ring *r, int solicited_only)
{
	uint32_t done = __atomic_load_n(rvc_word(r, RVC_RING_ARM_DONE), __ATOMIC_ACQUIRE);
	uint32_t cur = __atomic_load_n(rvc_word(r, RVC_RING_ARM_REQ), __ATOMIC_RELAXED);
	if ((cur >> 1) != done && (!(cur & 1) || solicited_only))
		return; /* pending, and at least as wide */
	uint32_t v = (done + 1) << 1;
	if (solicited_only)
		v |= 1;
	__atomic_store_n(rvc_word(r, RVC_RING_ARM_REQ), v, __ATOMIC_SEQ_CST);
}

/* rvc_map_rings maps size bytes of a reply's memfd (a queue's rings)
 * shared, unless *err is already set, and closes memfd either way. It
 * returns the mapping, or MAP_FAILED with *err set. */
static inline void *rvc_map_rings(int memfd, uint64_t size, int *err)
{
	void *m = MAP_FAILED;
	if (!*err) {
		m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
		if (m == MAP_FAILED)
			*err = errno;
	}
	close(memfd);
	return m;
}

/* rvc_rings_done ends rvc_map_rings once the caller has checked the
 * mapped headers: with err set it unmaps m (if mapped) and returns err;
 * otherwise it keeps m out of a fork's child, as the kernel's queue
 * mappings (a child must not write the rings), and returns 0. */
static inline int rvc_rings_done(void *m, uint64_t size, int err)
{
	if (err) {
		if (m != MAP_FAILED)
			munmap(m, size);
		return err;
	}
	madvise(m, size, MADV_DONTFORK);
	return 0;
}

#endif
