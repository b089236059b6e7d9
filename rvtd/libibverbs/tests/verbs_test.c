/* Verbs through the drop-in libibverbs.so.1 in one process: an RC QP on
 * rvt0 (extended, ibv_create_qp_ex) connected to one on rvt1 (with an
 * extended CQ), GID index 1. RDMA WRITE and READ, SEND with immediate,
 * completion channel events, ibv_start_poll, resize_cq, posting from
 * several threads at once, fork (the child's copy is its own), MRs sharing
 * pages and deregistration giving them back, memory windows, the ibv_wr_*
 * interface, UD with an AH made from a received GRH (ibv_create_ah_from_wc),
 * and verbs rvtd does not serve failing cleanly. Run by
 * rvtd/dropin's TestVerbsC with RVTD_SOCKET set; prints PASS. With the
 * argument "fatal", the daemon's death instead (fatal_mode); with "exec
 * PROG...", an exec under a session (exec_mode). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int failures;
static int vm_mode; /* RVTD_MR=vm: every MR is kind 2 (process_vm) */
#define CHECK(c)                                                                               \
	do {                                                                                   \
		if (!(c)) {                                                                    \
			fprintf(stderr, "%s:%d: %s: CHECK(%s) failed (errno %d)\n", __FILE__,  \
				__LINE__, __func__, #c, errno);                                 \
			failures++;                                                            \
		}                                                                              \
	} while (0)
#define REQUIRE(c)                                                                             \
	do {                                                                                   \
		if (!(c)) {                                                                    \
			fprintf(stderr, "%s:%d: REQUIRE(%s) failed (errno %d: %s)\n", __FILE__, \
				__LINE__, #c, errno, strerror(errno));                          \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

#define BUF (1 << 20)

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_cq_ex *cqx; /* b's CQ is an extended one */
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	union ibv_gid gid;
};

static struct ibv_context *open_dev(const char *name)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	REQUIRE(l && n >= 2);
	struct ibv_context *ctx = NULL;
	for (int i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(l[i]), name))
			ctx = ibv_open_device(l[i]);
	ibv_free_device_list(l); /* the context keeps its device */
	REQUIRE(ctx);
	CHECK(!strcmp(ibv_get_device_name(ctx->device), name));
	return ctx;
}

static void setup(struct side *s, const char *dev, int extended)
{
	s->ctx = open_dev(dev);
	REQUIRE(s->pd = ibv_alloc_pd(s->ctx));
	REQUIRE(s->ch = ibv_create_comp_channel(s->ctx));
	if (extended) {
		REQUIRE(s->cq = ibv_create_cq(s->ctx, 64, s, s->ch, 0));
	} else {
		struct ibv_cq_init_attr_ex ca = {.cqe = 64, .cq_context = s, .channel = s->ch,
						 .wc_flags = IBV_WC_STANDARD_FLAGS};
		REQUIRE(s->cqx = ibv_create_cq_ex(s->ctx, &ca));
		s->cq = ibv_cq_ex_to_cq(s->cqx);
	}
	CHECK(s->cq->cqe >= 64);
	REQUIRE(posix_memalign((void **)&s->buf, 4096, BUF) == 0);
	memset(s->buf, 0, BUF);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!s->mr && errno == EOPNOTSUPP && vm_mode) {
		printf("NOKIND2: this rvtd does not serve reg_mr kind 2\n");
		exit(77);
	}
	REQUIRE(s->mr);
	struct ibv_qp_init_attr ia = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 256, .max_recv_wr = 64, .max_send_sge = 2,
					      .max_recv_sge = 2, .max_inline_data = 64}};
	if (extended) {
		struct ibv_qp_init_attr_ex ix = {
			.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC, .cap = ia.cap,
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = s->pd,
			.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND};
		REQUIRE(s->qp = ibv_create_qp_ex(s->ctx, &ix));
		ia.cap = ix.cap;
		CHECK(ibv_qp_to_qp_ex(s->qp) != NULL);
	} else {
		REQUIRE(s->qp = ibv_create_qp(s->pd, &ia));
		CHECK(ibv_qp_to_qp_ex(s->qp) == NULL);
	}
	CHECK(ia.cap.max_send_wr >= 256 && ia.cap.max_inline_data >= 64);
	REQUIRE(ibv_query_gid(s->ctx, 1, 1, &s->gid) == 0);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
	REQUIRE(ibv_modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS) == 0);
}

/* connect_qp takes qp (INIT) to RTS towards peer, whose GID is gid. */
static void connect_qp(struct ibv_qp *qp, struct ibv_qp *peer, union ibv_gid gid)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
				.dest_qp_num = peer->qp_num, .rq_psn = 7,
				.max_dest_rd_atomic = 4, .min_rnr_timer = 1};
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				.rnr_retry = 7, .sq_psn = 7, .max_rd_atomic = 4};
	REQUIRE(ibv_modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					  IBV_QP_MAX_QP_RD_ATOMIC) == 0);
}

static void connect_to(struct side *s, struct side *peer)
{
	connect_qp(s->qp, peer->qp, peer->gid);
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	REQUIRE(ibv_query_qp(s->qp, &q, IBV_QP_STATE | IBV_QP_DEST_QPN, &qi) == 0);
	CHECK(q.qp_state == IBV_QPS_RTS && q.dest_qp_num == peer->qp->qp_num);
	CHECK(qi.qp_type == IBV_QPT_RC && qi.send_cq == s->cq);
}

/* wait_wc polls until n completions arrived (10 s at most). */
static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	int got = 0;
	for (long spins = 0; got < n && spins < 200000000L; spins++) {
		int k = ibv_poll_cq(cq, n - got, wc + got);
		if (k < 0)
			return k;
		got += k;
		if (!k && spins % 64 == 0)
			usleep(10);
	}
	return got;
}

static void test_write_read(struct side *a, struct side *b)
{
	for (int i = 0; i < 65536; i++)
		a->buf[i] = (uint8_t)(i * 7 + 1);
	struct ibv_sge sge = {(uintptr_t)a->buf, 65536, a->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 11, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)b->buf + 4096;
	wr.wr.rdma.rkey = b->mr->rkey;
	REQUIRE(ibv_post_send(a->qp, &wr, &bad) == 0);
	struct ibv_wc wc;
	REQUIRE(wait_wc(a->cq, &wc, 1) == 1);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 11 && wc.opcode == IBV_WC_RDMA_WRITE);
	CHECK(!memcmp(b->buf + 4096, a->buf, 65536));
	/* READ it back into another place of a's buffer. */
	sge.addr = (uintptr_t)a->buf + 131072;
	wr.wr_id = 12;
	wr.opcode = IBV_WR_RDMA_READ;
	REQUIRE(ibv_post_send(a->qp, &wr, &bad) == 0);
	REQUIRE(wait_wc(a->cq, &wc, 1) == 1);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 12 && wc.opcode == IBV_WC_RDMA_READ &&
	      wc.byte_len == 65536);
	CHECK(!memcmp(a->buf + 131072, a->buf, 65536));
}

static void test_send_imm_events(struct side *a, struct side *b)
{
	struct ibv_sge rs[2] = {{(uintptr_t)b->buf + 300000, 10, b->mr->lkey},
				{(uintptr_t)b->buf + 400000, 100, b->mr->lkey}};
	struct ibv_recv_wr rw = {.wr_id = 21, .sg_list = rs, .num_sge = 2}, *rbad;
	REQUIRE(ibv_post_recv(b->qp, &rw, &rbad) == 0);
	REQUIRE(ibv_req_notify_cq(b->cq, 0) == 0);
	char msg[] = "inline hello, softverbs";
	struct ibv_sge ss = {(uintptr_t)msg, sizeof(msg), 0};
	struct ibv_send_wr sw = {.wr_id = 22, .sg_list = &ss, .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE,
				 .imm_data = htobe32(0xabcd1234)}, *sbad;
	REQUIRE(ibv_post_send(a->qp, &sw, &sbad) == 0);
	memset(msg, 'x', sizeof(msg) - 1); /* inline: the buffer is ours again */
	struct pollfd pfd = {.fd = b->ch->fd, .events = POLLIN};
	CHECK(poll(&pfd, 1, 10000) == 1);
	struct ibv_cq *ecq;
	void *ectx;
	REQUIRE(ibv_get_cq_event(b->ch, &ecq, &ectx) == 0);
	CHECK(ecq == b->cq && ectx == b);
	ibv_ack_cq_events(ecq, 1);
	/* b's CQ is extended: read the completion with ibv_start_poll. */
	struct ibv_cq_ex *x = b->cqx;
	struct ibv_poll_cq_attr pa = {0};
	int rc = ENOENT;
	for (int i = 0; i < 100000 && rc == ENOENT; i++)
		if ((rc = ibv_start_poll(x, &pa)) == ENOENT)
			usleep(10);
	REQUIRE(rc == 0);
	CHECK(x->status == IBV_WC_SUCCESS && x->wr_id == 21 && ibv_wc_read_opcode(x) == IBV_WC_RECV);
	CHECK(ibv_wc_read_byte_len(x) == sizeof(msg) && (ibv_wc_read_wc_flags(x) & IBV_WC_WITH_IMM) &&
	      be32toh(ibv_wc_read_imm_data(x)) == 0xabcd1234 &&
	      ibv_wc_read_qp_num(x) == b->qp->qp_num && ibv_wc_read_src_qp(x) == a->qp->qp_num);
	CHECK(ibv_next_poll(x) == ENOENT);
	ibv_end_poll(x);
	CHECK(ibv_start_poll(x, &pa) == ENOENT);
	struct ibv_wc wc;
	CHECK(!memcmp(b->buf + 300000, "inline hel", 10) &&
	      !memcmp(b->buf + 400000, "lo, softverbs", 14));
	REQUIRE(wait_wc(a->cq, &wc, 1) == 1);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 22 && wc.opcode == IBV_WC_SEND);
	/* No arm: no event. */
	CHECK(poll(&pfd, 1, 50) == 0);
}

#define THREADS 4
#define PER_THREAD 3000
/* Completions not yet polled are bounded by the program, not by the send
 * queue (a slot is free once its CQE is written): posters wait while this
 * many are out, so the 1024-entry CQ cannot overflow. */
#define MAX_UNPOLLED 768
static unsigned posted_total, polled_total;
struct poster {
	struct side *a, *b;
	int id;
	int busy;
};

static void *post_thread(void *arg)
{
	struct poster *p = arg;
	for (int i = 0; i < PER_THREAD; i++) {
		uint64_t *src = (uint64_t *)(void *)(p->a->buf + 524288 + (p->id * PER_THREAD + i) * 8);
		*src = ((uint64_t)p->id << 32) | (uint64_t)i;
		struct ibv_sge sge = {(uintptr_t)src, 8, p->a->mr->lkey};
		struct ibv_send_wr wr = {.wr_id = ((uint64_t)p->id << 32) | (uint64_t)i, .sg_list = &sge,
					 .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;
		wr.wr.rdma.remote_addr = (uintptr_t)p->b->buf + 524288 + (p->id * PER_THREAD + i) * 8;
		wr.wr.rdma.rkey = p->b->mr->rkey;
		int err;
		while (__atomic_add_fetch(&posted_total, 1, __ATOMIC_ACQ_REL) -
			       __atomic_load_n(&polled_total, __ATOMIC_ACQUIRE) >
		       MAX_UNPOLLED) {
			__atomic_sub_fetch(&posted_total, 1, __ATOMIC_ACQ_REL);
			usleep(20);
		}
		while ((err = ibv_post_send(p->a->qp, &wr, &bad)) == ENOMEM) {
			p->busy++;
			usleep(20);
		}
		if (err) {
			fprintf(stderr, "post_send: %d\n", err);
			failures++;
			return NULL;
		}
	}
	return NULL;
}

static void test_threads(struct side *a, struct side *b)
{
	/* The CQ must hold the completions the posting threads race to make:
	 * grow it (resize_cq) while it is empty, then poll as we go. */
	REQUIRE(ibv_resize_cq(a->cq, 1024) == 0);
	CHECK(a->cq->cqe >= 1024);
	pthread_t th[THREADS];
	struct poster ps[THREADS];
	for (int t = 0; t < THREADS; t++) {
		ps[t] = (struct poster){a, b, t, 0};
		pthread_create(&th[t], NULL, post_thread, &ps[t]);
	}
	static uint8_t seen[THREADS][PER_THREAD];
	int total = 0, bad = 0;
	struct ibv_wc wc[32];
	for (long spins = 0; total < THREADS * PER_THREAD && spins < 100000000L; spins++) {
		int k = ibv_poll_cq(a->cq, 32, wc);
		if (k < 0)
			fprintf(stderr, "poll_cq: %d after %d completions\n", k, total);
		REQUIRE(k >= 0);
		for (int i = 0; i < k; i++) {
			uint32_t t = (uint32_t)(wc[i].wr_id >> 32), n = (uint32_t)wc[i].wr_id;
			if (wc[i].status != IBV_WC_SUCCESS || t >= THREADS || n >= PER_THREAD || seen[t][n]++)
				bad++;
		}
		total += k;
		__atomic_add_fetch(&polled_total, (unsigned)k, __ATOMIC_ACQ_REL);
		if (!k)
			usleep(5);
	}
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	CHECK(total == THREADS * PER_THREAD);
	CHECK(bad == 0);
	CHECK(!memcmp(a->buf + 524288, b->buf + 524288, THREADS * PER_THREAD * 8));
}

static int in_shared_mapping(void *addr);

static int mapped(void *p)
{
	unsigned char v;
	return mincore((void *)((uintptr_t)p & ~4095ul), 4096, &v) == 0;
}

/* fork(): the child has a private copy of the registered pages (as with
 * rdma-core on a fork-safe kernel): it reads the parent's bytes, its writes
 * stay its own, and the parent's verbs go on working (test_mw, test_wr and
 * the last write/read run after this). */
static void test_fork(struct side *a)
{
	CHECK(ibv_is_fork_initialized() == IBV_FORK_UNNEEDED);
	a->buf[900000] = 0x11;
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		if (!mapped(a->buf) || a->buf[900000] != 0x11)
			_exit(3);
		a->buf[900000] = 0x22;
		void *p = malloc(1000); /* malloc's pages may be registered ones */
		free(p);
		_exit(a->buf[900000] == 0x22 ? 0 : 4);
	}
	int st;
	REQUIRE(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(a->buf[900000] == 0x11); /* the child's write did not reach us */
	CHECK(in_shared_mapping(a->buf) != vm_mode); /* still the segment (kind 1) */
}

/* Is addr in a shared (rvtd segment) mapping? */
static int in_shared_mapping(void *addr)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int shared = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo <= (uintptr_t)addr &&
		    (uintptr_t)addr < hi)
			shared = perms[3] == 's';
	}
	if (f)
		fclose(f);
	return shared;
}

static void test_dereg(struct side *a)
{
	if (vm_mode)
		return; /* the page moves below are kind 1's */
	uint8_t *p;
	REQUIRE(posix_memalign((void **)&p, 4096, 3 * 4096) == 0);
	memset(p, 0x5a, 3 * 4096);
	struct ibv_mr *m1 = ibv_reg_mr(a->pd, p + 100, 5000, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(m1);
	CHECK(in_shared_mapping(p + 100));
	/* A second region in the same pages shares the segment. */
	struct ibv_mr *m2 = ibv_reg_mr(a->pd, p + 4096, 100, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(m2);
	CHECK(m1->lkey != m2->lkey);
	p[5000] = 0x77;
	CHECK(ibv_dereg_mr(m1) == 0);
	CHECK(in_shared_mapping(p + 4096));
	CHECK(ibv_dereg_mr(m2) == 0);
	CHECK(!in_shared_mapping(p + 4096));
	CHECK(p[5000] == 0x77 && p[0] == 0x5a && p[3 * 4096 - 1] == 0x5a);
	CHECK(ibv_reg_mr(a->pd, p, 0, 0) == NULL && errno == EINVAL);
	free(p);
}

/* A thread writing to the page of a region while the region is
 * deregistered loses none of its writes (rping's CM thread counting an
 * event on its rdma_cm_id, a malloc'd neighbour of the buffers its main
 * thread deregisters: the count came back one short now and then). */
struct hammer {
	volatile uint64_t *counter;
	volatile int run, started;
	uint64_t done;
};

static void *hammer_thread(void *arg)
{
	struct hammer *h = arg;
	uint64_t n = 0;
	while (h->run) {
		*h->counter = *h->counter + 1;
		if (++n == 1000)
			h->started = 1;
	}
	h->done = n;
	return NULL;
}

static void test_dereg_concurrent(struct side *a)
{
	if (vm_mode)
		return; /* kind 2 moves no pages */
	uint8_t *p;
	REQUIRE(posix_memalign((void **)&p, 4096, 2 * 4096) == 0);
	memset(p, 0, 2 * 4096);
	int lost = 0;
	for (int i = 0; i < 200; i++) {
		struct hammer h = {.counter = (volatile uint64_t *)(p + 3000), .run = 1};
		*h.counter = 0;
		struct ibv_mr *m = ibv_reg_mr(a->pd, p + 100, 1000, IBV_ACCESS_LOCAL_WRITE);
		REQUIRE(m);
		pthread_t t;
		REQUIRE(pthread_create(&t, NULL, hammer_thread, &h) == 0);
		while (!h.started)
			sched_yield();
		CHECK(ibv_dereg_mr(m) == 0);
		h.run = 0;
		pthread_join(t, NULL);
		if (*h.counter != h.done)
			lost++;
	}
	if (lost)
		printf("dereg: writes lost in %d of 200 rounds\n", lost);
	CHECK(lost == 0);
	free(p);
}

/* A thread writing beside a region while the region is registered loses
 * none of its writes either: registration moves the pages into shared
 * memory, and a store between the copy and the remap was lost (a
 * program's worker thread updating a malloc'd neighbour while the main
 * thread registers a buffer). */
static void test_reg_concurrent(struct side *a)
{
	if (vm_mode)
		return;
	uint8_t *p;
	REQUIRE(posix_memalign((void **)&p, 4096, 2 * 4096) == 0);
	memset(p, 0, 2 * 4096);
	int lost = 0, moved = 0;
	for (int i = 0; i < 200; i++) {
		struct hammer h = {.counter = (volatile uint64_t *)(p + 3000), .run = 1};
		*h.counter = 0;
		pthread_t t;
		REQUIRE(pthread_create(&t, NULL, hammer_thread, &h) == 0);
		while (!h.started)
			sched_yield();
		struct ibv_mr *m = ibv_reg_mr(a->pd, p + 100, 1000, IBV_ACCESS_LOCAL_WRITE);
		REQUIRE(m);
		h.run = 0;
		pthread_join(t, NULL);
		moved += in_shared_mapping(p + 100);
		CHECK(ibv_dereg_mr(m) == 0);
		if (*h.counter != h.done)
			lost++;
	}
	if (lost)
		printf("reg: writes lost in %d of 200 rounds\n", lost);
	CHECK(lost == 0);
	CHECK(moved == 200);
	free(p);
}

/* Registration guards its page move with a SIGSEGV handler; a fault that
 * is not the move's still reaches the program's own handler, installed
 * before or after the first registration. */
static sigjmp_buf segv_jump;
static volatile int segv_seen;

static void own_segv(int sig, siginfo_t *si, void *uc)
{
	(void)sig, (void)si, (void)uc;
	segv_seen++;
	siglongjmp(segv_jump, 1);
}

static void expect_own_handler(volatile uint8_t *guard)
{
	segv_seen = 0;
	if (!sigsetjmp(segv_jump, 1))
		guard[0] = 1;
	CHECK(segv_seen == 1);
}

/* A child that raises SIGSEGV, or faults, with the library's handler in
 * front of the default action dies of SIGSEGV, as without it. (Under a
 * sanitizer, whose handler is in front of the default, not run: its
 * reports would fail the run.) */
static int segv_default; /* SIGSEGV's action at start was the default */

static void expect_segv_death(int fault)
{
	pid_t pid = fork();
	REQUIRE(pid >= 0);
	if (pid == 0) {
		if (fault) {
			volatile uint8_t *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			ro[0] = 1;
		} else {
			raise(SIGSEGV);
		}
		_exit(0);
	}
	int st;
	REQUIRE(waitpid(pid, &st, 0) == pid);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
}

static void test_segv_chain(struct side *a)
{
	if (vm_mode)
		return;
	struct sigaction cur;
	REQUIRE(sigaction(SIGSEGV, NULL, &cur) == 0);
	CHECK(cur.sa_flags & SA_SIGINFO); /* the library's, installed by the moves above */
	if (segv_default) {
		expect_segv_death(0);
		expect_segv_death(1);
	}
	struct sigaction sa = {.sa_sigaction = own_segv, .sa_flags = SA_SIGINFO}, old;
	sigemptyset(&sa.sa_mask);
	REQUIRE(sigaction(SIGSEGV, &sa, &old) == 0);
	volatile uint8_t *guard = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(guard != MAP_FAILED);
	uint8_t *p;
	REQUIRE(posix_memalign((void **)&p, 4096, 4096) == 0);
	struct ibv_mr *m = ibv_reg_mr(a->pd, p, 4096, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(m);
	expect_own_handler(guard);
	CHECK(ibv_dereg_mr(m) == 0);
	/* Installed again after the library's: still the program's. */
	REQUIRE(sigaction(SIGSEGV, &sa, NULL) == 0);
	m = ibv_reg_mr(a->pd, p, 4096, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(m);
	expect_own_handler(guard);
	CHECK(ibv_dereg_mr(m) == 0);
	REQUIRE(sigaction(SIGSEGV, &old, NULL) == 0);
	munmap((void *)guard, 4096);
	free(p);
}

/* Memory windows on b's memory, bound by b, written through by a: type 1
 * with ibv_bind_mw, type 2 with a BIND_MW work request. */
static void write_via(struct side *a, uint64_t addr, uint32_t rkey, uint8_t fill)
{
	memset(a->buf + 700000, fill, 100);
	struct ibv_sge sge = {(uintptr_t)a->buf + 700000, 100, a->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 41, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	REQUIRE(ibv_post_send(a->qp, &wr, &bad) == 0);
	struct ibv_wc wc;
	REQUIRE(wait_wc(a->cq, &wc, 1) == 1);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 41);
}

static void test_mw(struct side *a, struct side *b)
{
	struct ibv_mr *mr = ibv_reg_mr(b->pd, b->buf + 600000, 65536,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_MW_BIND);
	REQUIRE(mr);
	struct ibv_mw *mw1 = ibv_alloc_mw(b->pd, IBV_MW_TYPE_1);
	REQUIRE(mw1);
	uint32_t before = mw1->rkey;
	struct ibv_mw_bind bind = {.wr_id = 31, .send_flags = IBV_SEND_SIGNALED,
				   .bind_info = {mr, (uintptr_t)b->buf + 600000, 4096,
						 IBV_ACCESS_REMOTE_WRITE}};
	REQUIRE(ibv_bind_mw(b->qp, mw1, &bind) == 0);
	CHECK(mw1->rkey != before);
	struct ibv_wc wc;
	REQUIRE(wait_wc(b->cq, &wc, 1) == 1);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 31 && wc.opcode == IBV_WC_BIND_MW);
	write_via(a, (uintptr_t)b->buf + 600000, mw1->rkey, 0xa1);
	CHECK(b->buf[600000] == 0xa1 && b->buf[600099] == 0xa1);

	struct ibv_mw *mw2 = ibv_alloc_mw(b->pd, IBV_MW_TYPE_2);
	REQUIRE(mw2);
	struct ibv_send_wr wr = {.wr_id = 32, .opcode = IBV_WR_BIND_MW,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.bind_mw.mw = mw2;
	wr.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){mr, (uintptr_t)b->buf + 610000, 4096,
							 IBV_ACCESS_REMOTE_WRITE};
	REQUIRE(ibv_post_send(b->qp, &wr, &bad) == 0);
	REQUIRE(wait_wc(b->cq, &wc, 1) == 1);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 32 && wc.opcode == IBV_WC_BIND_MW);
	write_via(a, (uintptr_t)b->buf + 610000, wr.bind_mw.rkey, 0xb2);
	CHECK(b->buf[610000] == 0xb2 && b->buf[610099] == 0xb2);
	CHECK(ibv_dealloc_mw(mw1) == 0);
	CHECK(ibv_dealloc_mw(mw2) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
}

/* The ibv_wr_* interface on a's extended QP: a batch of two WRITEs (one
 * inline) is posted whole; a batch with a bad SGE list posts nothing; an
 * aborted batch posts nothing. */
static void test_wr(struct side *a, struct side *b)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a->qp);
	REQUIRE(x);
	memset(a->buf + 800000, 0x3c, 256);
	char inl[16] = "inline via wr";
	ibv_wr_start(x);
	x->wr_id = 51;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, b->mr->rkey, (uintptr_t)b->buf + 800000);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf + 800000, 256);
	x->wr_id = 52;
	ibv_wr_rdma_write(x, b->mr->rkey, (uintptr_t)b->buf + 801000);
	ibv_wr_set_inline_data(x, inl, sizeof(inl));
	CHECK(ibv_wr_complete(x) == 0);
	struct ibv_wc wc[2];
	REQUIRE(wait_wc(a->cq, wc, 2) == 2);
	CHECK(wc[0].wr_id == 51 && wc[1].wr_id == 52 && wc[0].status == IBV_WC_SUCCESS &&
	      wc[1].status == IBV_WC_SUCCESS);
	CHECK(b->buf[800000] == 0x3c && b->buf[800255] == 0x3c && !strcmp((char *)b->buf + 801000, inl));

	struct ibv_sge sg[3] = {{(uintptr_t)a->buf, 1, a->mr->lkey}, {(uintptr_t)a->buf, 1, a->mr->lkey},
				{(uintptr_t)a->buf, 1, a->mr->lkey}};
	ibv_wr_start(x);
	x->wr_id = 53;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf, 8);
	x->wr_id = 54;
	ibv_wr_rdma_write(x, b->mr->rkey, (uintptr_t)b->buf);
	ibv_wr_set_sge_list(x, 3, sg); /* more than max_send_sge */
	CHECK(ibv_wr_complete(x) == EINVAL);
	ibv_wr_start(x);
	x->wr_id = 55;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, a->mr->lkey, (uintptr_t)a->buf, 8);
	ibv_wr_abort(x);
	usleep(100000);
	CHECK(ibv_poll_cq(a->cq, 2, wc) == 0); /* neither batch reached the ring */
}

/* UD: a sends a datagram to b through an AH; b answers through the AH that
 * ibv_create_ah_from_wc makes from the datagram's GRH. */
struct ud {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static void ud_setup(struct side *s, struct ud *u)
{
	REQUIRE(u->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0));
	struct ibv_qp_init_attr ia = {.send_cq = u->cq, .recv_cq = u->cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					      .max_recv_sge = 1}};
	REQUIRE(u->qp = ibv_create_qp(s->pd, &ia));
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};
	REQUIRE(ibv_modify_qp(u->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0);
	a.qp_state = IBV_QPS_RTR;
	REQUIRE(ibv_modify_qp(u->qp, &a, IBV_QP_STATE) == 0);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	REQUIRE(ibv_modify_qp(u->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
}

static void ud_recv(struct side *s, struct ud *u, size_t off)
{
	struct ibv_sge sge = {(uintptr_t)s->buf + off, 40 + 512, s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = 61, .sg_list = &sge, .num_sge = 1}, *bad;
	REQUIRE(ibv_post_recv(u->qp, &wr, &bad) == 0);
}

static void ud_send(struct side *s, struct ud *u, struct ibv_ah *ah, uint32_t qpn, size_t off)
{
	struct ibv_sge sge = {(uintptr_t)s->buf + off, 100, s->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 62, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = 0x11111111;
	REQUIRE(ibv_post_send(u->qp, &wr, &bad) == 0);
}

static void test_ud(struct side *a, struct side *b)
{
	struct ud ua, ub;
	ud_setup(a, &ua);
	ud_setup(b, &ub);
	ud_recv(b, &ub, 950000);
	ud_recv(a, &ua, 950000);
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1};
	aa.grh.dgid = b->gid;
	aa.grh.sgid_index = 1;
	aa.grh.hop_limit = 64;
	struct ibv_ah *ah = ibv_create_ah(a->pd, &aa);
	REQUIRE(ah);
	memset(a->buf + 940000, 0x5d, 100);
	ud_send(a, &ua, ah, ub.qp->qp_num, 940000);
	struct ibv_wc wc[2];
	REQUIRE(wait_wc(ub.cq, wc, 1) == 1);
	CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV && wc[0].byte_len == 140 &&
	      (wc[0].wc_flags & IBV_WC_GRH) && wc[0].src_qp == ua.qp->qp_num);
	CHECK(b->buf[950040] == 0x5d && b->buf[950139] == 0x5d);
	/* The answer's AH from the datagram. */
	struct ibv_ah_attr back;
	CHECK(ibv_init_ah_from_wc(b->ctx, 1, &wc[0], (struct ibv_grh *)(b->buf + 950000), &back) == 0);
	CHECK(back.is_global && !memcmp(&back.grh.dgid, &a->gid, 16) && back.grh.sgid_index == 1);
	struct ibv_ah *bah = ibv_create_ah_from_wc(b->pd, &wc[0], (struct ibv_grh *)(b->buf + 950000), 1);
	REQUIRE(bah);
	memset(b->buf + 940000, 0x6e, 100);
	ud_send(b, &ub, bah, wc[0].src_qp, 940000);
	int got = wait_wc(ua.cq, wc, 2); /* a's send and the answer */
	CHECK(got == 2);
	CHECK(a->buf[950040] == 0x6e && a->buf[950139] == 0x6e);
	REQUIRE(wait_wc(ub.cq, wc, 1) == 1);
	CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].wr_id == 62);
	CHECK(ibv_destroy_ah(ah) == 0 && ibv_destroy_ah(bah) == 0);

	/* Multicast: b joins a group, a sends to it (QPN 0xffffff). A daemon
	 * without multicast answers EOPNOTSUPP. */
	union ibv_gid mgid = {.raw = {0xff, 0x0e, [15] = 0x42}};
	int err = ibv_attach_mcast(ub.qp, &mgid, 0);
	if (err == EOPNOTSUPP) {
		printf("no multicast in this rvtd\n");
	} else {
		CHECK(err == 0);
		CHECK(ibv_attach_mcast(ub.qp, &mgid, 0) == EEXIST);
		ud_recv(b, &ub, 960000);
		struct ibv_ah_attr ma = {.is_global = 1, .port_num = 1};
		ma.grh.dgid = mgid;
		ma.grh.sgid_index = 1;
		ma.grh.hop_limit = 1;
		struct ibv_ah *mah = ibv_create_ah(a->pd, &ma);
		REQUIRE(mah);
		memset(a->buf + 940000, 0x7f, 100);
		ud_send(a, &ua, mah, 0xffffff, 940000);
		REQUIRE(wait_wc(ub.cq, wc, 1) == 1);
		CHECK(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV &&
		      wc[0].byte_len == 140 && b->buf[960040] == 0x7f);
		REQUIRE(wait_wc(ua.cq, wc, 1) == 1);
		CHECK(ibv_detach_mcast(ub.qp, &mgid, 0) == 0);
		CHECK(ibv_detach_mcast(ub.qp, &mgid, 0) == EINVAL);
		CHECK(ibv_destroy_ah(mah) == 0);
	}
	CHECK(ibv_destroy_qp(ua.qp) == 0 && ibv_destroy_qp(ub.qp) == 0);
	CHECK(ibv_destroy_cq(ua.cq) == 0 && ibv_destroy_cq(ub.cq) == 0);
}

static void test_unsupported(struct side *a)
{
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(a->pd, &sa);
	if (srq) { /* a daemon with SRQs */
		struct ibv_srq_attr q;
		CHECK(sa.attr.max_wr >= 16 && ibv_query_srq(srq, &q) == 0 && q.max_wr == sa.attr.max_wr);
		/* Resize (IBV_SRQ_MAX_WR): 3 posted move to the new ring, which
		 * then takes 60 in all; not below what it holds. */
		struct ibv_sge sg = {.addr = (uintptr_t)a->buf, .length = 64, .lkey = a->mr->lkey};
		struct ibv_recv_wr rw = {.sg_list = &sg, .num_sge = 1}, *bad;
		for (int k = 0; k < 3; k++)
			CHECK(ibv_post_srq_recv(srq, &rw, &bad) == 0);
		struct ibv_srq_attr na = {.max_wr = 2};
		CHECK(ibv_modify_srq(srq, &na, IBV_SRQ_MAX_WR) == EINVAL);
		na.max_wr = 64;
		na.srq_limit = 5;
		CHECK(ibv_modify_srq(srq, &na, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) == 0);
		CHECK(ibv_query_srq(srq, &q) == 0 && q.max_wr >= 64 && q.srq_limit == 5);
		int posted = 3;
		while (posted < 60 && ibv_post_srq_recv(srq, &rw, &bad) == 0)
			posted++;
		CHECK(posted == 60);
		CHECK(ibv_destroy_srq(srq) == 0);
	} else
		CHECK(errno == EOPNOTSUPP);
	struct ibv_cq_init_attr_ex ca = {.cqe = 4, .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};
	errno = 0;
	CHECK(ibv_create_cq_ex(a->ctx, &ca) == NULL && errno == EOPNOTSUPP);
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(a->ctx, NULL, &dx) == 0 && dx.orig_attr.phys_port_cnt == 1);
	/* What the device does, as rxe says it: RNR NAKs, SRQ resize, windows
	 * of types 1 and 2B, fast registration; and a CM on the port. */
	unsigned int caps = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_MEM_WINDOW |
			    IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_MEM_MGT_EXTENSIONS | IBV_DEVICE_SYS_IMAGE_GUID;
	CHECK((dx.orig_attr.device_cap_flags & caps) == caps);
	CHECK(!(dx.orig_attr.device_cap_flags & (IBV_DEVICE_XRC | IBV_DEVICE_MEM_WINDOW_TYPE_2A)));
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(a->ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE &&
	      pa.link_layer == IBV_LINK_LAYER_ETHERNET && (pa.port_cap_flags & IBV_PORT_CM_SUP));
	__be16 pkey;
	CHECK(ibv_query_pkey(a->ctx, 1, 0, &pkey) == 0 && pkey == 0xffff);
	struct ibv_gid_entry ge;
	CHECK(ibv_query_gid_ex(a->ctx, 1, 1, &ge, 0) == 0 && ge.gid_type == IBV_GID_TYPE_ROCE_V2 &&
	      !memcmp(&ge.gid, &a->gid, 16));
	/* Past the table (gid_tbl_len) or on no port: EINVAL, as the kernel
	 * answers; ENODATA is for an empty slot inside it, and this table has
	 * none. ibv_query_gid then fails with errno, where rdma-core reads
	 * only an empty slot as zeros (ibv_rc_pingpong -g 5000 stops at once). */
	CHECK(ibv_query_gid_ex(a->ctx, 1, 99, &ge, 0) == EINVAL);
	CHECK(ibv_query_gid_ex(a->ctx, 2, 0, &ge, 0) == EINVAL);
	union ibv_gid g99;
	errno = 0;
	CHECK(ibv_query_gid(a->ctx, 1, 99, &g99) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(ibv_query_gid(a->ctx, 1, -1, &g99) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(ibv_query_gid(a->ctx, 1, (int)pa.gid_tbl_len, &g99) == -1 && errno == EINVAL);
	CHECK(!strcmp(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR), "transport retry counter exceeded"));
	CHECK(!strcmp(ibv_wc_status_str(200), "unknown"));
	/* A bad WR: too many SGEs is refused with bad_wr set. */
	struct ibv_sge sg[3];
	struct ibv_send_wr wr = {.sg_list = sg, .num_sge = 3, .opcode = IBV_WR_SEND}, *bad = NULL;
	CHECK(ibv_post_send(a->qp, &wr, &bad) == EINVAL && bad == &wr);
}

static void teardown(struct side *s)
{
	CHECK(ibv_destroy_qp(s->qp) == 0);
	CHECK(ibv_dereg_mr(s->mr) == 0);
	CHECK(ibv_destroy_cq(s->cq) == 0);
	CHECK(ibv_destroy_comp_channel(s->ch) == 0);
	CHECK(ibv_dealloc_pd(s->pd) == 0);
	CHECK(ibv_close_device(s->ctx) == 0);
	free(s->buf);
}

/* verbs_test fatal: the daemon dies under busy pollers (rvtd/dropin's
 * TestDaemonKilled kills it, or shuts it down, once this prints READY). Every work
 * request posted and not completed comes back as a WR_FLUSH_ERR completion
 * after the real completions left in the ring, each queue in posting
 * order; then the CQs are empty; posting fails with EIO; the async socket
 * gives IBV_EVENT_DEVICE_FATAL and then EIO; an armed CQ's channel EIO. */
static struct side fa, fb; /* static: still reachable at exit (LeakSanitizer) */

struct want {
	uint64_t wr_id;
	int status, opcode;
	uint32_t qpn;
	int queue; /* completions of one queue come in this array's order */
};

static struct ibv_qp *plain_qp(struct side *s, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = {.send_cq = s->cq, .recv_cq = s->cq, .srq = srq,
				      .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 16, .max_recv_wr = srq ? 0 : 16,
					      .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &ia);
	REQUIRE(qp);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
	REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					  IBV_QP_ACCESS_FLAGS) == 0);
	return qp;
}

static int post_recv1(struct ibv_qp *qp, struct ibv_srq *srq, struct side *s, uint64_t id)
{
	struct ibv_sge sg = {(uintptr_t)s->buf + 8192, 4096, s->mr->lkey};
	struct ibv_recv_wr w = {.wr_id = id, .sg_list = &sg, .num_sge = 1}, *bad = NULL;
	int err = srq ? ibv_post_srq_recv(srq, &w, &bad) : ibv_post_recv(qp, &w, &bad);
	CHECK(err == 0 || bad == &w);
	return err;
}

static int post_send1(struct ibv_qp *qp, struct side *s, uint64_t id, enum ibv_wr_opcode op,
		      int flags)
{
	struct ibv_sge sg = {(uintptr_t)s->buf, 64, s->mr->lkey};
	struct ibv_send_wr w = {.wr_id = id, .sg_list = &sg, .num_sge = 1, .opcode = op,
				.send_flags = flags}, *bad = NULL;
	w.wr.rdma.rkey = fb.mr->rkey;
	w.wr.rdma.remote_addr = (uintptr_t)fb.buf + 65536;
	int err = ibv_post_send(qp, &w, &bad);
	CHECK(err == 0 || bad == &w);
	return err;
}

/* collect reads n completions of cq (x: through ibv_start_poll), 20 s at
 * most, then checks that nothing more comes. */
static int collect(struct ibv_cq *cq, struct ibv_cq_ex *x, struct want *got, int n)
{
	time_t end = time(NULL) + 20;
	int k = 0;
	while (k < n && time(NULL) < end) {
		if (x) {
			struct ibv_poll_cq_attr pa = {0};
			int rc = ibv_start_poll(x, &pa);
			if (rc == ENOENT)
				continue;
			REQUIRE(rc == 0);
			do {
				if (k < n)
					got[k] = (struct want){x->wr_id, x->status, ibv_wc_read_opcode(x),
							       ibv_wc_read_qp_num(x), 0};
				k++;
			} while ((rc = ibv_next_poll(x)) == 0);
			CHECK(rc == ENOENT);
			ibv_end_poll(x);
		} else {
			struct ibv_wc wc[4];
			int m = ibv_poll_cq(cq, 4, wc);
			REQUIRE(m >= 0);
			for (int i = 0; i < m; i++, k++)
				if (k < n)
					got[k] = (struct want){wc[i].wr_id, wc[i].status, wc[i].opcode,
							       wc[i].qp_num, 0};
		}
	}
	CHECK(k == n);
	for (int i = 0; i < 1000; i++) {
		struct ibv_wc wc;
		if (x) {
			struct ibv_poll_cq_attr pa = {0};
			CHECK(ibv_start_poll(x, &pa) == ENOENT);
		} else
			CHECK(ibv_poll_cq(cq, 1, &wc) == 0);
	}
	return k;
}

/* match checks got against want: each once, with its fields, in its
 * queue's order. */
static void match(const char *who, const struct want *got, int n, const struct want *want, int nw)
{
	int seen[16] = {0}, last[8];
	for (int q = 0; q < 8; q++)
		last[q] = -1;
	CHECK(n == nw);
	for (int i = 0; i < n; i++) {
		int j = 0;
		while (j < nw && want[j].wr_id != got[i].wr_id)
			j++;
		if (j == nw || seen[j]) {
			fprintf(stderr, "%s: completion %d: wr_id %#llx not expected\n", who, i,
				(unsigned long long)got[i].wr_id);
			failures++;
			continue;
		}
		seen[j] = 1;
		if (got[i].status != want[j].status || got[i].opcode != want[j].opcode ||
		    got[i].qpn != want[j].qpn || j < last[want[j].queue]) {
			fprintf(stderr, "%s: wr_id %#llx: status %d opcode %d qp %#x, want %d %d %#x%s\n",
				who, (unsigned long long)got[i].wr_id, got[i].status, got[i].opcode,
				got[i].qpn, want[j].status, want[j].opcode, want[j].qpn,
				j < last[want[j].queue] ? " (out of order)" : "");
			failures++;
		}
		last[want[j].queue] = j;
	}
}

static int fatal_mode(void)
{
	setup(&fa, "rvt0", 1);
	setup(&fb, "rvt1", 0);
	connect_to(&fa, &fb);
	connect_to(&fb, &fa);
	/* A real completion left in b's ring: its event says it is there;
	 * nobody polls it before the daemon dies. */
	REQUIRE(post_recv1(fb.qp, NULL, &fb, 0xb0) == 0);
	REQUIRE(ibv_req_notify_cq(fb.cq, 0) == 0);
	REQUIRE(post_send1(fa.qp, &fa, 0xa0, IBV_WR_SEND, IBV_SEND_SIGNALED) == 0);
	struct ibv_wc wc;
	REQUIRE(wait_wc(fa.cq, &wc, 1) == 1);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 0xa0);
	struct pollfd pfd = {.fd = fb.ch->fd, .events = POLLIN};
	REQUIRE(poll(&pfd, 1, 10000) == 1);
	struct ibv_cq *ecq;
	void *ectx;
	REQUIRE(ibv_get_cq_event(fb.ch, &ecq, &ectx) == 0);
	ibv_ack_cq_events(ecq, 1);
	/* Receives nobody sends to. */
	for (uint64_t id = 0xb1; id <= 0xb3; id++)
		REQUIRE(post_recv1(fb.qp, NULL, &fb, id) == 0);
	REQUIRE(post_recv1(fa.qp, NULL, &fa, 0xa1) == 0);
	REQUIRE(post_recv1(fa.qp, NULL, &fa, 0xa2) == 0);
	/* A second pair whose receiver posts nothing: a2's requests wait on
	 * RNR NAKs for ever (rnr_retry 7), the later ones behind the first. */
	struct ibv_qp *a2 = plain_qp(&fa, NULL), *b2 = plain_qp(&fb, NULL);
	connect_qp(a2, b2, fb.gid);
	connect_qp(b2, a2, fa.gid);
	REQUIRE(post_send1(a2, &fa, 0xa21, IBV_WR_SEND, IBV_SEND_SIGNALED) == 0);
	REQUIRE(post_send1(a2, &fa, 0xa22, IBV_WR_RDMA_WRITE, 0) == 0); /* unsignaled */
	REQUIRE(post_send1(a2, &fa, 0xa23, IBV_WR_SEND_WITH_IMM, IBV_SEND_SIGNALED) == 0);
	/* An SRQ with two receives, taken from by a QP never connected. */
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(fb.pd, &sa);
	REQUIRE(srq);
	struct ibv_qp *b3 = plain_qp(&fb, srq);
	REQUIRE(post_recv1(NULL, srq, &fb, 0xb31) == 0);
	REQUIRE(post_recv1(NULL, srq, &fb, 0xb32) == 0);
	usleep(100000);
	CHECK(ibv_poll_cq(fa.cq, 1, &wc) == 0); /* all stuck while the daemon lives */
	printf("READY\n");
	fflush(stdout);

	enum { S = IBV_WC_SUCCESS, F = IBV_WC_WR_FLUSH_ERR };
	const struct want wa[] = {
		{0xa1, F, IBV_WC_RECV, fa.qp->qp_num, 0},
		{0xa2, F, IBV_WC_RECV, fa.qp->qp_num, 0},
		{0xa21, F, IBV_WC_SEND, a2->qp_num, 1},
		{0xa22, F, IBV_WC_RDMA_WRITE, a2->qp_num, 1},
		{0xa23, F, IBV_WC_SEND, a2->qp_num, 1},
	};
	const struct want wb[] = {
		{0xb0, S, IBV_WC_RECV, fb.qp->qp_num, 0},
		{0xb1, F, IBV_WC_RECV, fb.qp->qp_num, 0},
		{0xb2, F, IBV_WC_RECV, fb.qp->qp_num, 0},
		{0xb3, F, IBV_WC_RECV, fb.qp->qp_num, 0},
		{0xb31, F, IBV_WC_RECV, b3->qp_num, 1},
		{0xb32, F, IBV_WC_RECV, b3->qp_num, 1},
	};
	struct want got[16];
	int n = collect(fa.cq, NULL, got, 5);
	match("rvt0 CQ", got, n, wa, 5);
	n = collect(fb.cq, fb.cqx, got, 6);
	match("rvt1 CQ", got, n, wb, 6);
	CHECK(n > 0 && got[0].wr_id == 0xb0); /* the real completion first */

	/* Posting fails with EIO, as mlx5_ib in its internal-error state. */
	CHECK(post_send1(fa.qp, &fa, 0xe1, IBV_WR_SEND, IBV_SEND_SIGNALED) == EIO);
	CHECK(post_recv1(fb.qp, NULL, &fb, 0xe2) == EIO);
	CHECK(post_recv1(NULL, srq, &fb, 0xe3) == EIO);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(fa.qp);
	REQUIRE(x);
	ibv_wr_start(x);
	x->wr_id = 0xe4;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, fa.mr->lkey, (uintptr_t)fa.buf, 8);
	CHECK(ibv_wr_complete(x) == EIO);
	CHECK(ibv_poll_cq(fa.cq, 1, &wc) == 0); /* nothing of those */

	/* The async socket: DEVICE_FATAL (the daemon's on a shutdown, the
	 * library's when the daemon was killed), then EIO. */
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(fa.ctx, &ev) == 0 && ev.event_type == IBV_EVENT_DEVICE_FATAL);
	ibv_ack_async_event(&ev);
	errno = 0;
	CHECK(ibv_get_async_event(fa.ctx, &ev) == -1 && errno == EIO);
	/* An armed CQ's channel does not block. */
	CHECK(ibv_req_notify_cq(fb.cq, 0) == 0);
	errno = 0;
	CHECK(ibv_get_cq_event(fb.ch, &ecq, &ectx) == -1 && errno == EIO);
	if (failures) {
		printf("FAIL: %d checks\n", failures);
		return 1;
	}
	printf("PASS\n");
	return 0;
}

/* exec_mode (verbs_test exec, with RVTD_MR=vm): this process opens rvt0, so
 * the session's memory is its own; it forks, and then execs another image
 * (prog) while the child keeps the session. Over the kernel an MR pins the
 * pages of the process that registered it and never reaches the image an
 * exec puts in its place; so here a kind-2 MR registered before the exec
 * must stop reading (a peer's RDMA READ completes in error), and one
 * registered after must be refused. Before rvtd held the address space
 * (/proc/<pid>/mem at hello), it followed the pid: a child could read and
 * write a setuid program its parent had become. The child prints PASS or
 * FAIL; the process the test started becomes prog.
 * prog is this program again ("sleep N"), without address randomization:
 * the new image has exec_word at the same address, holding its initial
 * value, where the old image held 0xbef0; a READ that followed the pid
 * would succeed and see the initial value. */
static uint64_t exec_word = 0x5eed5eed5eed5eedULL; /* at one address in every image */

static int read_word(struct side *b, struct ibv_qp *qp, uint32_t rkey, struct ibv_wc *wc)
{
	struct ibv_sge sge = {.addr = (uintptr_t)b->buf, .length = 8, .lkey = b->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 9, .sg_list = &sge, .num_sge = 1,
				 .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = (uintptr_t)&exec_word;
	wr.wr.rdma.rkey = rkey;
	memset(b->buf, 0, 8);
	REQUIRE(ibv_post_send(qp, &wr, &bad) == 0);
	return wait_wc(b->cq, wc, 1);
}

static int exec_mode(char **argv, char **prog)
{
	int pers = personality(0xffffffff);
	if (pers != -1 && !(pers & ADDR_NO_RANDOMIZE)) {
		/* Again without address randomization, which exec keeps. */
		REQUIRE(personality(pers | ADDR_NO_RANDOMIZE) != -1);
		execv("/proc/self/exe", argv);
		REQUIRE(0);
	}
	exec_word = 0xbef0; /* the old image's value, in parent and child */
	int go[2], execd[2];
	REQUIRE(pipe(go) == 0 && pipe2(execd, O_CLOEXEC) == 0);
	struct ibv_context *ctx = open_dev("rvt0");
	pid_t c = fork();
	REQUIRE(c >= 0);
	if (c > 0) {
		/* The session's process: become prog when the child says so
		 * (execd's write end closes at the exec, which the child sees). */
		close(execd[0]);
		char x;
		REQUIRE(read(go[0], &x, 1) == 1);
		execvp(prog[0], prog);
		perror("exec");
		_exit(1);
	}
	close(execd[1]);
	struct ibv_pd *pd;
	REQUIRE(pd = ibv_alloc_pd(ctx));
	struct ibv_mr *before = ibv_reg_mr(pd, &exec_word, sizeof exec_word,
					   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!before && errno == EOPNOTSUPP) {
		printf("NOKIND2: this rvtd does not serve reg_mr kind 2\n");
		fflush(stdout);
		if (write(go[1], "x", 1) != 1)
			perror("write");
		_exit(77);
	}
	REQUIRE(before);
	struct ibv_cq *cq;
	REQUIRE(cq = ibv_create_cq(ctx, 16, NULL, NULL, 0));
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					      .max_recv_sge = 1}};
	struct ibv_qp *qa;
	REQUIRE(qa = ibv_create_qp(pd, &ia));
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_READ};
	REQUIRE(ibv_modify_qp(qa, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					    IBV_QP_ACCESS_FLAGS) == 0);
	union ibv_gid ga;
	REQUIRE(ibv_query_gid(ctx, 1, 1, &ga) == 0);
	struct side b = {0};
	setup(&b, "rvt1", 0); /* the child's own session */
	connect_qp(qa, b.qp, b.gid);
	connect_qp(b.qp, qa, ga);

	struct ibv_wc wc;
	REQUIRE(read_word(&b, b.qp, before->rkey, &wc) == 1);
	CHECK(wc.status == IBV_WC_SUCCESS && *(uint64_t *)b.buf == 0xbef0);

	REQUIRE(write(go[1], "x", 1) == 1);
	char y;
	CHECK(read(execd[0], &y, 1) == 0); /* the exec happened */

	/* The session's process is another image now: what the MR named is
	 * gone. rvtd answers the READ with a NAK; the QP pair is in error. */
	REQUIRE(read_word(&b, b.qp, before->rkey, &wc) == 1);
	CHECK(wc.status != IBV_WC_SUCCESS);
	CHECK(*(uint64_t *)b.buf == 0); /* not the new image's 0x5eed... */
	errno = 0;
	CHECK(ibv_reg_mr(pd, &exec_word, sizeof exec_word, IBV_ACCESS_LOCAL_WRITE) == NULL);
	if (failures) {
		printf("FAIL: %d checks\n", failures);
		fflush(stdout);
		_exit(1);
	}
	printf("PASS\n");
	fflush(stdout); /* _exit: stdio is not flushed */
	_exit(0);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "fatal"))
		return fatal_mode();
	if (argc > 2 && !strcmp(argv[1], "exec"))
		return exec_mode(argv, argv + 2);
	if (argc > 2 && !strcmp(argv[1], "sleep")) /* exec_mode's new image */
		return sleep((unsigned)atoi(argv[2])) != 0;
	const char *mode = getenv("RVTD_MR");
	vm_mode = mode && !strcmp(mode, "vm");
	struct sigaction at_start;
	REQUIRE(sigaction(SIGSEGV, NULL, &at_start) == 0);
	segv_default = !(at_start.sa_flags & SA_SIGINFO) && at_start.sa_handler == SIG_DFL;
	CHECK(ibv_fork_init() == 0);
	struct side a = {0}, b = {0};
	setup(&a, "rvt0", 1);
	setup(&b, "rvt1", 0);
	connect_to(&a, &b);
	connect_to(&b, &a);
	test_write_read(&a, &b);
	test_send_imm_events(&a, &b);
	test_threads(&a, &b);
	test_fork(&a);
	test_dereg(&a);
	test_dereg_concurrent(&a);
	test_reg_concurrent(&a);
	test_segv_chain(&a);
	test_mw(&a, &b);
	test_wr(&a, &b);
	test_ud(&a, &b);
	test_unsupported(&a);
	/* The data path still works after all that. */
	test_write_read(&b, &a);
	teardown(&a);
	teardown(&b);
	if (failures) {
		printf("FAIL: %d checks\n", failures);
		return 1;
	}
	printf("PASS\n");
	return 0;
}
