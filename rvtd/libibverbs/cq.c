/* Completion channels and CQs: poll_cq reads the CQE ring with no system
 * call; req_notify_cq is two words in the ring header. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "internal.h"

RVC_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct rvc_context *rc = to_rctx(ctx);
	struct rvc_channel *ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	struct rvc_handle_reply r;
	struct rvc_reply rep;
	int err = rvc_call(&rc->conn, RVC_OP_CREATE_COMP_CHANNEL, rc->dev_handle, NULL, 0, NULL, 0,
			   &r, sizeof(r), 0, 0, 1, &rep);
	if (err) {
		free(ch);
		errno = err;
		return NULL;
	}
	ch->handle = r.handle;
	ch->ch.context = ctx;
	ch->ch.fd = rep.fds[0];
	ch->ch.refcnt = 0;
	return &ch->ch;
}

RVC_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct rvc_channel *ch = rvc_container_of(channel, struct rvc_channel, ch);
	struct rvc_context *rc = to_rctx(channel->context);
	if (__atomic_load_n(&channel->refcnt, __ATOMIC_ACQUIRE))
		return EBUSY;
	int err = rvc_call(&rc->conn, RVC_OP_DESTROY_COMP_CHANNEL, ch->handle, NULL, 0, NULL, 0,
			   NULL, 0, 0, 0, 0, NULL);
	if (err)
		return err;
	close(channel->fd);
	free(ch);
	return 0;
}

/* map_cq maps a CQ reply's memfd and checks its ring. */
static int map_cq(struct rvc_cq *c, const struct rvc_cq_reply *r, int memfd)
{
	int err = rvc_check_ring(&r->ring, r->map_size, sizeof(struct rvc_cqe));
	if (!err && r->ring.stride != sizeof(struct rvc_cqe))
		err = EPROTO;
	void *m = rvc_map_rings(memfd, r->map_size, &err);
	if (!err && rvc_check_ring_header((uint8_t *)m + r->ring.offset, &r->ring, RVC_RING_CQ))
		err = EPROTO;
	if ((err = rvc_rings_done(m, r->map_size, err)))
		return err;
	c->map = m;
	c->map_size = r->map_size;
	rvc_ring_init(&c->ring, m, &r->ring, 0);
	return 0;
}

RVC_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
					struct ibv_comp_channel *channel, int comp_vector)
{
	struct rvc_context *rc = to_rctx(ctx);
	if (cqe <= 0 || comp_vector < 0 || comp_vector >= ctx->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	struct rvc_cq *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	struct rvc_create_cq req = {
		.cqe = (uint32_t)cqe,
		.comp_vector = (uint32_t)comp_vector,
		.channel = channel ? rvc_container_of(channel, struct rvc_channel, ch)->handle : 0,
		.cookie = (uintptr_t)&c->cq,
	};
	struct rvc_cq_reply r;
	struct rvc_reply rep;
	int err = rvc_call(&rc->conn, RVC_OP_CREATE_CQ, rc->dev_handle, &req, sizeof(req), NULL, 0,
			   &r, sizeof(r), 0, 0, 1, &rep);
	if (!err) {
		err = map_cq(c, &r, rep.fds[0]);
		if (err)
			rvc_call(&rc->conn, RVC_OP_DESTROY_CQ, r.cq, NULL, 0, NULL, 0, NULL,
				 sizeof(struct rvc_destroy_reply), 0, 0, 0, NULL);
	}
	if (err) {
		free(c);
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->cq.mutex, NULL);
	pthread_cond_init(&c->cq.cond, NULL);
	c->cq.context = ctx;
	c->cq.channel = channel;
	c->cq.cq_context = cq_context;
	c->cq.handle = r.cq;
	c->cq.cqe = (int)r.cqe;
	const char *y = getenv("RVTD_POLL_YIELD");
	/* A busy poller yields its CPU every 16 empty polls (RVTD_POLL_YIELD,
	 * 0: never): rvtd does the work on the same CPUs. */
	c->yield_every = y && *y ? (uint32_t)strtoul(y, NULL, 10) : 16;
	if (rvc_live_add(rc, RVC_K_CQ, r.cq, c)) {
		rvc_call(&rc->conn, RVC_OP_DESTROY_CQ, r.cq, NULL, 0, NULL, 0, NULL,
			 sizeof(struct rvc_destroy_reply), 0, 0, 0, NULL);
		munmap(c->map, c->map_size);
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	if (channel)
		__atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_ACQ_REL);
	return &c->cq;
}

RVC_EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	struct rvc_cq *c = to_rcq(cq);
	struct rvc_context *rc = to_rctx(cq->context);
	if (cqe <= 0)
		return EINVAL;
	struct rvc_cqe_req req = {.cqe = (uint32_t)cqe};
	struct rvc_cq_reply r;
	struct rvc_reply rep;
	pthread_mutex_lock(&c->lock); /* no poll while the rings change */
	int err = rvc_call(&rc->conn, RVC_OP_RESIZE_CQ, cq->handle, &req, sizeof(req), NULL, 0, &r,
			   sizeof(r), 0, 0, 1, &rep);
	void *old = c->map;
	size_t old_size = c->map_size;
	if (!err) {
		err = map_cq(c, &r, rep.fds[0]);
		if (!err) {
			munmap(old, old_size);
			cq->cqe = (int)r.cqe;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return err;
}

RVC_EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct rvc_cq *c = to_rcq(cq);
	struct rvc_context *rc = to_rctx(cq->context);
	struct rvc_destroy_reply r;
	/* From now on events about the CQ are dropped, not handed out. */
	rvc_live_del(rc, RVC_K_CQ, cq->handle);
	int err = rvc_call(&rc->conn, RVC_OP_DESTROY_CQ, cq->handle, NULL, 0, NULL, 0, &r,
			   sizeof(r), 0, 0, 0, NULL);
	if (err) {
		rvc_live_add(rc, RVC_K_CQ, cq->handle, c);
		return err;
	}
	if (cq->channel)
		__atomic_sub_fetch(&cq->channel->refcnt, 1, __ATOMIC_ACQ_REL);
	/* As rdma-core: wait until the program acknowledged every event it
	 * was given (the daemon's counts include events still unread in the
	 * sockets, which are dropped). */
	pthread_mutex_lock(&cq->mutex);
	while (cq->comp_events_completed != c->comp_delivered ||
	       cq->async_events_completed != c->async_delivered)
		pthread_cond_wait(&cq->cond, &cq->mutex);
	pthread_mutex_unlock(&cq->mutex);
	munmap(c->map, c->map_size);
	pthread_mutex_destroy(&c->lock);
	free(c);
	return 0;
}

static void cqe_to_wc(const struct rvc_cqe *e, struct ibv_wc *wc)
{
	wc->wr_id = e->wr_id;
	wc->status = (enum ibv_wc_status)e->status;
	wc->opcode = (enum ibv_wc_opcode)e->opcode;
	wc->vendor_err = e->vendor_err;
	wc->byte_len = e->byte_len;
	wc->imm_data = e->imm_data;
	wc->qp_num = e->qp_num;
	wc->src_qp = e->src_qp;
	wc->wc_flags = e->wc_flags;
	wc->pkey_index = e->pkey_index;
	wc->slid = e->slid;
	wc->sl = e->sl;
	wc->dlid_path_bits = e->dlid_path_bits;
}

/* idle counts an empty poll of c (c's lock held) and says whether this one
 * should look for the daemon's end (rvc_check_fatal, after unlocking). */
static int idle(struct rvc_cq *c, int fatal)
{
	if (fatal || ++c->idle_polls < RVC_FATAL_CHECK)
		return 0;
	c->idle_polls = 0;
	return 1;
}

int rvc_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct rvc_cq *c = to_rcq(cq);
	struct rvc_context *rc = to_rctx(cq->context);
	if (n < 0)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	/* Before the producer index: once fatal, the daemon had stopped, and
	 * the ring holds every real completion there will be. */
	int fatal = rvc_fatal(rc);
	int64_t avail = rvc_available(&c->ring);
	if (avail < 0) {
		pthread_mutex_unlock(&c->lock);
		return -EPROTO;
	}
	int k = avail < n ? (int)avail : n;
	for (int i = 0; i < k; i++) {
		struct rvc_cqe e;
		memcpy(&e, rvc_slot(&c->ring, c->ring.idx + (uint32_t)i), sizeof(e));
		cqe_to_wc(&e, &wc[i]);
	}
	if (k)
		rvc_release(&c->ring, (uint32_t)k);
	if (!k && rvc_status(&c->ring)) {
		/* Overflow or a ring the daemon stopped serving: an error once
		 * the completions left are read. */
		pthread_mutex_unlock(&c->lock);
		return -(int)rvc_status(&c->ring);
	}
	if (fatal) {
		struct rvc_cqe e;
		while (k < n && rvc_next_flush(rc, cq, &e))
			cqe_to_wc(&e, &wc[k++]);
	}
	int yield = 0, check = 0;
	if (k) {
		c->empty_polls = 0;
		c->idle_polls = 0;
	} else {
		if (c->yield_every && ++c->empty_polls >= c->yield_every) {
			c->empty_polls = 0;
			yield = 1;
		}
		check = idle(c, fatal);
	}
	pthread_mutex_unlock(&c->lock);
	if (check)
		rvc_check_fatal(rc); /* the next poll flushes */
	if (yield)
		sched_yield(); /* let the daemon run on a crowded CPU */
	return k;
}

int rvc_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct rvc_cq *c = to_rcq(cq);
	pthread_mutex_lock(&c->lock);
	rvc_arm(&c->ring, solicited_only);
	pthread_mutex_unlock(&c->lock);
	return 0;
}

RVC_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
				void **cq_context)
{
	struct rvc_context *rc = to_rctx(channel->context);
	for (;;) {
		struct rvc_comp_event ev;
		ssize_t n;
		do
			n = read(channel->fd, &ev, sizeof(ev));
		while (n < 0 && errno == EINTR);
		if (n == 0) {
			/* The daemon closed the channel: it died or ended the
			 * session, and serves no CQ of it any more. EIO, as a
			 * read of a disassociated device's channel. */
			rvc_set_fatal(rc);
			errno = EIO;
			return -1;
		}
		if (n != (ssize_t)sizeof(ev)) {
			if (n > 0)
				errno = EPROTO;
			return -1;
		}
		/* The CQ by its handle, not by the cookie: an event of a CQ
		 * destroyed since is dropped. */
		pthread_mutex_lock(&rc->live_lock);
		struct rvc_cq *c = rvc_live_get_locked(rc, RVC_K_CQ, ev.cq);
		if (c) {
			pthread_mutex_lock(&c->cq.mutex);
			c->comp_delivered++;
			pthread_mutex_unlock(&c->cq.mutex);
		}
		pthread_mutex_unlock(&rc->live_lock);
		if (c) {
			*cq = &c->cq;
			*cq_context = c->cq.cq_context;
			return 0;
		}
	}
}

RVC_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* Extended CQs: ibv_create_cq_ex with the standard completion fields, and
 * the ibv_start_poll/ibv_next_poll/ibv_end_poll interface over the same
 * ring (the CQ's lock is held from a start that found a completion to the
 * end). */
static struct rvc_cq *xcq(struct ibv_cq_ex *x) { return rvc_container_of(x, struct rvc_cq, cqx); }

static void set_cur(struct rvc_cq *c)
{
	c->cqx.status = (enum ibv_wc_status)c->cur.status;
	c->cqx.wr_id = c->cur.wr_id;
}

static void load_cur(struct rvc_cq *c)
{
	memcpy(&c->cur, rvc_slot(&c->ring, c->ring.idx + c->batch), sizeof(c->cur));
	set_cur(c);
	c->batch++;
}

/* In the fatal state, once the ring's completions are read, the batch goes
 * on with flushed work requests (they take no ring records). */
static int flush_cur(struct rvc_cq *c, int fatal)
{
	if (!fatal || !rvc_next_flush(to_rctx(c->cq.context), &c->cq, &c->cur))
		return 0;
	set_cur(c);
	return 1;
}

static int start_poll(struct ibv_cq_ex *x, struct ibv_poll_cq_attr *attr)
{
	struct rvc_cq *c = xcq(x);
	struct rvc_context *rc = to_rctx(c->cq.context);
	if (attr->comp_mask)
		return EINVAL;
	pthread_mutex_lock(&c->lock);
	int fatal = rvc_fatal(rc); /* before the producer index, as rvc_poll_cq */
	int64_t avail = rvc_available(&c->ring);
	c->batch = 0;
	if (avail <= 0) {
		uint32_t st = avail < 0 ? EPROTO : rvc_status(&c->ring);
		if (!st && flush_cur(c, fatal))
			return 0;
		int check = !st && idle(c, fatal);
		pthread_mutex_unlock(&c->lock);
		if (check)
			rvc_check_fatal(rc);
		return st ? (int)st : ENOENT; /* no end_poll after a failed start */
	}
	c->idle_polls = 0;
	load_cur(c);
	return 0;
}

static int next_poll(struct ibv_cq_ex *x)
{
	struct rvc_cq *c = xcq(x);
	int fatal = rvc_fatal(to_rctx(c->cq.context));
	int64_t avail = rvc_available(&c->ring);
	if (avail < 0)
		return EPROTO;
	if ((uint32_t)avail <= c->batch)
		return flush_cur(c, fatal) ? 0 : ENOENT;
	load_cur(c);
	return 0;
}

static void end_poll(struct ibv_cq_ex *x)
{
	struct rvc_cq *c = xcq(x);
	rvc_release(&c->ring, c->batch);
	c->batch = 0;
	pthread_mutex_unlock(&c->lock);
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *x) { return (enum ibv_wc_opcode)xcq(x)->cur.opcode; }
static uint32_t read_vendor_err(struct ibv_cq_ex *x) { return xcq(x)->cur.vendor_err; }
static uint32_t read_byte_len(struct ibv_cq_ex *x) { return xcq(x)->cur.byte_len; }
static __be32 read_imm_data(struct ibv_cq_ex *x) { return xcq(x)->cur.imm_data; }
static uint32_t read_qp_num(struct ibv_cq_ex *x) { return xcq(x)->cur.qp_num; }
static uint32_t read_src_qp(struct ibv_cq_ex *x) { return xcq(x)->cur.src_qp; }
static unsigned int read_wc_flags(struct ibv_cq_ex *x) { return xcq(x)->cur.wc_flags; }
static uint32_t read_slid(struct ibv_cq_ex *x) { return xcq(x)->cur.slid; }
static uint8_t read_sl(struct ibv_cq_ex *x) { return xcq(x)->cur.sl; }
static uint8_t read_dlid_path_bits(struct ibv_cq_ex *x) { return xcq(x)->cur.dlid_path_bits; }

struct ibv_cq_ex *rvc_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a)
{
	/* No timestamps, VLANs, flow tags or tag matching; no parent domain;
	 * a CQ that may overrun is not offered. */
	if ((a->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS) ||
	    (a->wc_flags & ~(uint64_t)IBV_WC_STANDARD_FLAGS) ||
	    ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	     (a->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct ibv_cq *cq = ibv_create_cq(ctx, (int)a->cqe, a->cq_context, a->channel,
					  (int)a->comp_vector);
	if (!cq)
		return NULL;
	struct ibv_cq_ex *x = &to_rcq(cq)->cqx;
	x->comp_mask = 0;
	x->start_poll = start_poll;
	x->next_poll = next_poll;
	x->end_poll = end_poll;
	x->read_opcode = read_opcode;
	x->read_vendor_err = read_vendor_err;
	x->read_byte_len = read_byte_len;
	x->read_imm_data = read_imm_data;
	x->read_qp_num = read_qp_num;
	x->read_src_qp = read_src_qp;
	x->read_wc_flags = read_wc_flags;
	x->read_slid = read_slid;
	x->read_sl = read_sl;
	x->read_dlid_path_bits = read_dlid_path_bits;
	return x;
}
