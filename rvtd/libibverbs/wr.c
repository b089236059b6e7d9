/* Extended QPs: ibv_create_qp_ex with send ops flags, and the ibv_wr_*
 * interface, which builds WQE records straight in the send ring between
 * wr_start (takes the send queue's lock) and wr_complete (publishes them at
 * once, rings the doorbell if the daemon sleeps) or wr_abort. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include "internal.h"

static struct rvc_qp *xq(struct ibv_qp_ex *qpx) { return rvc_container_of(qpx, struct rvc_qp, qpx); }

/* next starts a WQE of opcode in the next slot. */
static struct rvc_send_wqe *next(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op)
{
	struct rvc_qp *q = xq(qpx);
	q->wr_cur = NULL;
	if (q->wr_err)
		return NULL;
	if (rvc_outstanding(&q->sq) >= q->cap.max_send_wr) {
		q->wr_err = ENOMEM;
		return NULL;
	}
	struct rvc_send_wqe *w = rvc_slot(&q->sq, q->sq.idx);
	memset(w, 0, sizeof(*w));
	w->wr_id = qpx->wr_id;
	w->send_flags = qpx->wr_flags & ~(unsigned)IBV_SEND_INLINE;
	w->opcode = (uint8_t)op;
	q->sq.idx++;
	q->wr_cur = w;
	return w;
}

static void wr_send(struct ibv_qp_ex *qpx) { next(qpx, IBV_WR_SEND); }

static void wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
	struct rvc_send_wqe *w = next(qpx, IBV_WR_SEND_WITH_IMM);
	if (w)
		w->imm_data = imm;
}

static void wr_send_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct rvc_send_wqe *w = next(qpx, IBV_WR_SEND_WITH_INV);
	if (w)
		w->imm_data = rkey;
}

static void wr_local_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	struct rvc_send_wqe *w = next(qpx, IBV_WR_LOCAL_INV);
	if (w)
		w->imm_data = rkey;
}

static void rdma(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr,
		 __be32 imm)
{
	struct rvc_send_wqe *w = next(qpx, op);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = addr;
		w->imm_data = imm;
	}
}

static void wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	rdma(qpx, IBV_WR_RDMA_WRITE, rkey, addr, 0);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, __be32 imm)
{
	rdma(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm);
}

static void wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr)
{
	rdma(qpx, IBV_WR_RDMA_READ, rkey, addr, 0);
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, uint64_t compare,
			      uint64_t swap)
{
	struct rvc_send_wqe *w = next(qpx, IBV_WR_ATOMIC_CMP_AND_SWP);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = addr;
		w->compare_add = compare;
		w->swap = swap;
	}
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t addr, uint64_t add)
{
	struct rvc_send_wqe *w = next(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = addr;
		w->compare_add = add;
	}
}

static void wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw, uint32_t rkey,
		       const struct ibv_mw_bind_info *b)
{
	struct rvc_send_wqe *w = next(qpx, IBV_WR_BIND_MW);
	if (w) {
		w->rkey = rkey;
		w->remote_addr = b->addr;
		w->compare_add = b->length;
		w->swap = b->mw_access_flags;
		w->ah = mw->handle;
		w->remote_qpn = b->mr ? b->mr->handle : 0;
	}
}

static void wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct rvc_send_wqe *w = xq(qpx)->wr_cur;
	if (w) {
		w->ah = ah->handle;
		w->remote_qpn = qpn;
		w->remote_qkey = qkey;
	}
}

static void wr_set_sge_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_sge *sg)
{
	struct rvc_qp *q = xq(qpx);
	struct rvc_send_wqe *w = q->wr_cur;
	if (!w)
		return;
	if (n > q->cap.max_send_sge) {
		q->wr_err = EINVAL;
		return;
	}
	w->num_sge = (uint8_t)n;
	memcpy(w + 1, sg, n * sizeof(*sg));
}

static void wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge sge = {addr, length, lkey};
	wr_set_sge_list(qpx, 1, &sge);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_data_buf *b)
{
	struct rvc_qp *q = xq(qpx);
	struct rvc_send_wqe *w = q->wr_cur;
	if (!w)
		return;
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (total + b[i].length > q->cap.max_inline_data) {
			q->wr_err = EINVAL;
			return;
		}
		memcpy((uint8_t *)(w + 1) + total, b[i].addr, b[i].length);
		total += b[i].length;
	}
	w->send_flags |= IBV_SEND_INLINE;
	w->num_sge = 0;
	w->inline_len = (uint16_t)total;
}

static void wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
	struct ibv_data_buf b = {addr, length};
	wr_set_inline_data_list(qpx, 1, &b);
}

static void wr_start(struct ibv_qp_ex *qpx)
{
	struct rvc_qp *q = xq(qpx);
	pthread_mutex_lock(&q->sq_lock);
	q->wr_first = q->sq.idx;
	q->wr_err = 0;
	q->wr_cur = NULL;
}

static int wr_complete(struct ibv_qp_ex *qpx)
{
	struct rvc_qp *q = xq(qpx);
	int err = q->wr_err;
	if (!err && rvc_fatal(to_rctx(q->qp.context)))
		err = EIO;
	if (err)
		q->sq.idx = q->wr_first; /* nothing of the batch is posted */
	else if (q->sq.idx != q->wr_first && rvc_publish(&q->sq))
		rvc_ring_doorbell(q);
	q->wr_cur = NULL;
	pthread_mutex_unlock(&q->sq_lock);
	return err;
}

static void wr_abort(struct ibv_qp_ex *qpx)
{
	struct rvc_qp *q = xq(qpx);
	q->sq.idx = q->wr_first;
	q->wr_cur = NULL;
	pthread_mutex_unlock(&q->sq_lock);
}

#define SUPPORTED_OPS                                                                      \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |                           \
	 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |             \
	 IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV)

struct ibv_qp *rvc_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
	if ((a->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) ||
	    !(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || a->pd->context != ctx) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	uint64_t ops = a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS ? a->send_ops_flags : 0;
	if (ops & ~(uint64_t)SUPPORTED_OPS) {
		errno = EOPNOTSUPP; /* TSO, atomic write */
		return NULL;
	}
	struct ibv_qp_init_attr ia = {.qp_context = a->qp_context, .send_cq = a->send_cq,
				      .recv_cq = a->recv_cq, .srq = a->srq, .cap = a->cap,
				      .qp_type = a->qp_type, .sq_sig_all = a->sq_sig_all};
	struct ibv_qp *qp = rvc_create_qp(a->pd, &ia);
	if (!qp)
		return NULL;
	a->cap = ia.cap;
	if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		struct rvc_qp *q = to_rqp(qp);
		struct ibv_qp_ex *x = &q->qpx;
		q->has_qpx = 1;
		x->comp_mask = 0;
		x->wr_send = wr_send;
		x->wr_send_imm = wr_send_imm;
		x->wr_send_inv = wr_send_inv;
		x->wr_local_inv = wr_local_inv;
		x->wr_rdma_write = wr_rdma_write;
		x->wr_rdma_write_imm = wr_rdma_write_imm;
		x->wr_rdma_read = wr_rdma_read;
		x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
		x->wr_atomic_fetch_add = wr_atomic_fetch_add;
		x->wr_bind_mw = wr_bind_mw;
		x->wr_set_ud_addr = wr_set_ud_addr;
		x->wr_set_sge = wr_set_sge;
		x->wr_set_sge_list = wr_set_sge_list;
		x->wr_set_inline_data = wr_set_inline_data;
		x->wr_set_inline_data_list = wr_set_inline_data_list;
		x->wr_start = wr_start;
		x->wr_complete = wr_complete;
		x->wr_abort = wr_abort;
	}
	return qp;
}
