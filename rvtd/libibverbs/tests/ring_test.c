/* Unit tests of the client's ring code (ring.h) and the layout checks
 * (wire.c), with the daemon's side played here as the protocol document
 * describes it. Run by rvtd/dropin's TestRingC; prints "PASS" and exits 0. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ring.h"
#include "wire.h"

static int failures;
#define CHECK(c)                                                                     \
	do {                                                                         \
		if (!(c)) {                                                          \
			fprintf(stderr, "%s:%d: %s: CHECK(%s) failed\n", __FILE__,   \
				__LINE__, __func__, #c);                              \
			failures++;                                                  \
		}                                                                    \
	} while (0)

static uint8_t *new_ring(uint32_t entries, uint32_t stride, uint32_t kind, struct rvc_ring_desc *d,
			 uint32_t start)
{
	size_t size = RVC_RING_HDR + (size_t)entries * stride;
	uint8_t *m = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
	memset(m, 0, size);
	uint32_t desc[4] = {RVC_RING_MAGIC, kind, entries, stride};
	memcpy(m + RVC_RING_MAGIC_OFF, desc, sizeof(desc));
	memcpy(m + RVC_RING_PROD, &start, 4);
	memcpy(m + RVC_RING_CONS, &start, 4);
	d->offset = 0;
	d->entries = entries;
	d->stride = stride;
	return m;
}

static uint32_t word(uint8_t *m, unsigned off)
{
	return __atomic_load_n((uint32_t *)(void *)(m + off), __ATOMIC_ACQUIRE);
}

static void set_word(uint8_t *m, unsigned off, uint32_t v)
{
	__atomic_store_n((uint32_t *)(void *)(m + off), v, __ATOMIC_SEQ_CST);
}

/* The daemon's TakeArm (section 7, "Completion channels and arming"). */
static int daemon_take_arm(uint8_t *m, int solicited)
{
	uint32_t req = word(m, RVC_RING_ARM_REQ), done = word(m, RVC_RING_ARM_DONE);
	if (req >> 1 == done)
		return 0;
	if ((req & 1) && !solicited)
		return 0;
	set_word(m, RVC_RING_ARM_DONE, req >> 1);
	return 1;
}

static void test_produce_wrap(void)
{
	struct rvc_ring_desc d;
	uint8_t *m = new_ring(8, 64, RVC_RING_SEND, &d, 0xfffffff0u);
	struct rvc_ring r;
	rvc_ring_init(&r, m, &d, 1);
	CHECK(r.idx == 0xfffffff0u);
	uint32_t cons = 0xfffffff0u;
	for (uint32_t i = 0; i < 40; i++) {
		if (rvc_outstanding(&r) == 8) {
			/* The daemon consumes two. */
			for (int k = 0; k < 2; k++) {
				uint64_t v;
				memcpy(&v, m + RVC_RING_HDR + (cons & 7) * 64, 8);
				CHECK(v == cons - 0xfffffff0u);
				cons++;
			}
			set_word(m, RVC_RING_CONS, cons);
		}
		CHECK(rvc_outstanding(&r) < 8);
		uint64_t v = i;
		memcpy(rvc_slot(&r, r.idx), &v, 8);
		r.idx++;
		CHECK(rvc_publish(&r) == 0);
		CHECK(word(m, RVC_RING_PROD) == 0xfffffff0u + i + 1);
	}
	CHECK(word(m, RVC_RING_PROD) == 0xfffffff0u + 40); /* wrapped past 2^32 */
	set_word(m, RVC_RING_FLAGS, RVC_NEED_WAKEUP);
	r.idx++;
	CHECK(rvc_publish(&r) == 1);
	free(m);
}

static void test_consume(void)
{
	struct rvc_ring_desc d;
	uint8_t *m = new_ring(4, 64, RVC_RING_CQ, &d, 0x7ffffffeu);
	struct rvc_ring r;
	rvc_ring_init(&r, m, &d, 0);
	CHECK(rvc_available(&r) == 0);
	set_word(m, RVC_RING_PROD, 0x7ffffffeu + 3);
	CHECK(rvc_available(&r) == 3);
	rvc_release(&r, 2);
	CHECK(word(m, RVC_RING_CONS) == 0x7ffffffeu + 2);
	CHECK(rvc_available(&r) == 1);
	set_word(m, RVC_RING_PROD, 0x7ffffffeu + 2 + 5); /* 5 > entries: out of range */
	CHECK(rvc_available(&r) == -1);
	set_word(m, RVC_RING_PROD, 0x7ffffffeu + 1); /* behind the consumer */
	CHECK(rvc_available(&r) == -1);
	CHECK(rvc_status(&r) == 0);
	set_word(m, RVC_RING_STATUS, 5);
	CHECK(rvc_status(&r) == 5);
	free(m);
}

static void test_arm(void)
{
	struct rvc_ring_desc d;
	uint8_t *m = new_ring(4, 64, RVC_RING_CQ, &d, 0);
	struct rvc_ring r;
	rvc_ring_init(&r, m, &d, 0);
	CHECK(!daemon_take_arm(m, 0)); /* nothing armed */
	rvc_arm(&r, 0);
	CHECK(word(m, RVC_RING_ARM_REQ) == 2);
	CHECK(daemon_take_arm(m, 0));
	CHECK(!daemon_take_arm(m, 1)); /* one-shot */
	rvc_arm(&r, 1);
	CHECK(word(m, RVC_RING_ARM_REQ) == 5);
	CHECK(!daemon_take_arm(m, 0)); /* solicited only: not met */
	rvc_arm(&r, 0);             /* widened, same count */
	CHECK(word(m, RVC_RING_ARM_REQ) == 4);
	rvc_arm(&r, 1); /* not narrowed */
	CHECK(word(m, RVC_RING_ARM_REQ) == 4);
	CHECK(daemon_take_arm(m, 0));
	CHECK(word(m, RVC_RING_ARM_DONE) == 2);
	/* The count wraps at 2^31. */
	set_word(m, RVC_RING_ARM_DONE, 0x7fffffffu);
	set_word(m, RVC_RING_ARM_REQ, 0xfffffffeu);
	rvc_arm(&r, 0);
	CHECK(word(m, RVC_RING_ARM_REQ) == 0);
	CHECK(daemon_take_arm(m, 0));
	CHECK(word(m, RVC_RING_ARM_DONE) == 0);
	free(m);
}

static void test_checks(void)
{
	struct rvc_ring_desc d = {.offset = 0, .entries = 16, .stride = 64};
	CHECK(rvc_check_ring(&d, 256 + 16 * 64, 64) == 0);
	CHECK(rvc_check_ring(&d, 256 + 16 * 64 - 1, 64) != 0);
	CHECK(rvc_check_ring(&d, 256 + 16 * 64, 128) != 0);
	d.entries = 12;
	CHECK(rvc_check_ring(&d, 1 << 20, 64) != 0);
	d.entries = 16;
	d.offset = 4096;
	CHECK(rvc_check_ring(&d, 4096, 64) != 0);
	d.offset = ~0ull - 100;
	CHECK(rvc_check_ring(&d, ~0ull, 64) != 0); /* no overflow */
	struct rvc_ring_desc e;
	uint8_t *m = new_ring(16, 64, RVC_RING_CQ, &e, 0);
	CHECK(rvc_check_ring_header(m, &e, RVC_RING_CQ) == 0);
	CHECK(rvc_check_ring_header(m, &e, RVC_RING_SEND) != 0);
	e.stride = 128;
	CHECK(rvc_check_ring_header(m, &e, RVC_RING_CQ) != 0);
	free(m);
	char ok[8] = "abc", bad[8] = "abc\0x";
	CHECK(rvc_cstr_ok(ok, sizeof(ok)));
	CHECK(!rvc_cstr_ok(bad, sizeof(bad)));
	char full[4] = {'a', 'b', 'c', 'd'};
	CHECK(!rvc_cstr_ok(full, sizeof(full)));
}

/* A producer thread using ring.h against a consumer thread playing the
 * daemon, across many wraps of a small ring: every record arrives once, in
 * order, with its contents. */
#define N_RECORDS 200000u
struct stress {
	uint8_t *m;
	struct rvc_ring r;
	int bad;
};

static void *stress_consumer(void *arg)
{
	struct stress *s = arg;
	uint32_t cons = 0;
	while (cons != N_RECORDS) {
		uint32_t p = word(s->m, RVC_RING_PROD);
		if (p == cons)
			sched_yield();
		for (; cons != p; cons++) {
			uint64_t v[2];
			memcpy(v, s->m + RVC_RING_HDR + (cons & 15) * 64, 16);
			if (v[0] != cons || v[1] != ~(uint64_t)cons)
				s->bad++;
		}
		__atomic_store_n((uint32_t *)(void *)(s->m + RVC_RING_CONS), cons, __ATOMIC_RELEASE);
	}
	return NULL;
}

static void test_stress(void)
{
	struct stress s = {0};
	struct rvc_ring_desc d;
	s.m = new_ring(16, 64, RVC_RING_SEND, &d, 0);
	rvc_ring_init(&s.r, s.m, &d, 1);
	pthread_t th;
	pthread_create(&th, NULL, stress_consumer, &s);
	for (uint32_t i = 0; i < N_RECORDS;) {
		if (rvc_outstanding(&s.r) >= 16) {
			sched_yield(); /* two spinning threads may share one CPU */
			continue;
		}
		uint64_t v[2] = {i, ~(uint64_t)i};
		memcpy(rvc_slot(&s.r, s.r.idx), v, 16);
		s.r.idx++;
		i++;
		rvc_publish(&s.r);
	}
	pthread_join(th, NULL);
	CHECK(s.bad == 0);
	free(s.m);
}

int main(void)
{
	test_produce_wrap();
	test_consume();
	test_arm();
	test_checks();
	test_stress();
	if (failures) {
		printf("FAIL: %d checks\n", failures);
		return 1;
	}
	printf("PASS\n");
	return 0;
}
