/* The fatal state: rvtd died, or ended the session. Completion rings are
 * memory the daemon writes, so a program polling them would wait for ever;
 * instead, once the daemon is known to be gone, every work request posted
 * and not completed comes back as a WR_FLUSH_ERR completion (after the
 * real completions left in the ring), as mlx5_ib's reset flow completes
 * the outstanding WQEs of a device in its internal-error state, and posts
 * fail with EIO (docs/rvtd-protocol.md, section 7, "When the daemon is
 * gone").
 *
 * The sign is the context's async event socket ending: the daemon closes
 * it last when it tears a session down, after it has stopped serving the
 * session's rings, and the kernel closes it when the daemon dies. (The
 * session socket ends first on a shutdown, while the daemon may still
 * complete work; it is not the sign.) */
#define _GNU_SOURCE
#include <poll.h>
#include <string.h>
#include "internal.h"

void rvc_set_fatal(struct rvc_context *rc)
{
	if (__atomic_exchange_n(&rc->fatal, 1, __ATOMIC_ACQ_REL))
		return;
	rvc_warn("rvtd ended the session of %s: outstanding work requests complete "
		 "with WR_FLUSH_ERR, new ones fail with EIO",
		 rc->vctx.context.device->name);
}

/* rvc_check_fatal looks (without blocking or reading) whether the async
 * socket has ended. A system call: callers do it rarely (an empty poll
 * every RVC_FATAL_CHECK times). */
int rvc_check_fatal(struct rvc_context *rc)
{
	if (rvc_fatal(rc))
		return 1;
	struct pollfd p = {.fd = rc->vctx.context.async_fd, .events = POLLIN};
	if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR))) {
		rvc_set_fatal(rc);
		return 1;
	}
	return 0;
}

/* take returns the next record of r to flush, or NULL. The first time it
 * starts at the consumer index the daemon left: records before it are
 * completed (their completions are in the CQ ring), those from it to our
 * producer index are not. */
static void *take(struct rvc_ring *r, struct rvc_flush *f)
{
	if (!r->hdr)
		return NULL;
	if (!f->started) {
		f->next = __atomic_load_n(rvc_word(r, RVC_RING_CONS), __ATOMIC_ACQUIRE);
		f->started = 1;
		if (r->idx - f->next > r->entries)
			f->next = r->idx; /* an index the daemon never wrote: nothing to trust */
	}
	if (f->next == r->idx)
		return NULL;
	return rvc_slot(r, f->next++);
}

/* The completion opcode of a send WR's opcode, as the daemon's engine
 * gives it for a flushed WQE (qp.Opcode.WCOpcode). */
static uint8_t wc_opcode(uint8_t wr)
{
	switch (wr) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ:
		return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return IBV_WC_FETCH_ADD;
	case IBV_WR_LOCAL_INV:
		return IBV_WC_LOCAL_INV;
	case IBV_WR_BIND_MW:
		return IBV_WC_BIND_MW;
	default:
		return IBV_WC_SEND;
	}
}

static void flushed(struct rvc_cqe *e, uint64_t wr_id, uint8_t opcode, uint32_t qp_num)
{
	memset(e, 0, sizeof(*e));
	e->wr_id = wr_id;
	e->status = IBV_WC_WR_FLUSH_ERR;
	e->opcode = opcode;
	e->qp_num = qp_num;
}

static int flush_send(struct rvc_qp *q, struct rvc_cqe *e)
{
	pthread_mutex_lock(&q->sq_lock);
	const struct rvc_send_wqe *w = take(&q->sq, &q->sq_flush);
	if (w)
		flushed(e, w->wr_id, wc_opcode(w->opcode), q->qp.qp_num);
	pthread_mutex_unlock(&q->sq_lock);
	return w != NULL;
}

static int flush_recv(struct rvc_qp *q, struct rvc_cqe *e)
{
	pthread_mutex_lock(&q->rq_lock);
	const struct rvc_recv_wqe *w = take(&q->rq, &q->rq_flush);
	if (w)
		flushed(e, w->wr_id, IBV_WC_RECV, q->qp.qp_num);
	pthread_mutex_unlock(&q->rq_lock);
	return w != NULL;
}

/* flush_srq flushes s's receives on cq if a live QP takes from s and
 * reports to cq: the first such QP names them. */
static int flush_srq_locked(struct rvc_context *rc, struct rvc_srq *s, struct ibv_cq *cq,
			    struct rvc_cqe *e)
{
	struct rvc_qp *by = NULL;
	for (size_t i = 0; i < rc->nlive && !by; i++) {
		struct rvc_qp *q = rc->live[i].obj;
		if (rc->live[i].kind == RVC_K_QP && q->qp.srq == &s->srq && q->qp.recv_cq == cq)
			by = q;
	}
	if (!by)
		return 0;
	pthread_mutex_lock(&s->lock);
	const struct rvc_recv_wqe *w = take(&s->ring, &s->flush);
	if (w)
		flushed(e, w->wr_id, IBV_WC_RECV, by->qp.qp_num);
	pthread_mutex_unlock(&s->lock);
	return w != NULL;
}

int rvc_next_flush(struct rvc_context *rc, struct ibv_cq *cq, struct rvc_cqe *e)
{
	int found = 0;
	pthread_mutex_lock(&rc->live_lock);
	for (size_t i = 0; i < rc->nlive && !found; i++) {
		if (rc->live[i].kind != RVC_K_QP)
			continue;
		struct rvc_qp *q = rc->live[i].obj;
		if (q->qp.send_cq == cq)
			found = flush_send(q, e);
		if (!found && q->qp.recv_cq == cq && !q->qp.srq)
			found = flush_recv(q, e);
	}
	for (size_t i = 0; i < rc->nlive && !found; i++)
		if (rc->live[i].kind == RVC_K_SRQ)
			found = flush_srq_locked(rc, rc->live[i].obj, cq, e);
	pthread_mutex_unlock(&rc->live_lock);
	return found;
}
