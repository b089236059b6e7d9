/* QPs and AHs: create/modify/query/destroy over the socket; post_send and
 * post_recv write WQE records into the rings and ring the doorbell only
 * when the daemon sleeps (NEED_WAKEUP). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "internal.h"

static int map_qp(struct rvc_qp *q, const struct rvc_create_qp_reply *r, int memfd, int has_srq)
{
	int err = rvc_check_ring(&r->sq, r->map_size, 128);
	if (!err && !has_srq)
		err = rvc_check_ring(&r->rq, r->map_size, 32);
	else if (!err && (r->rq.entries || r->cap.max_recv_wr))
		err = EPROTO; /* on an SRQ: no receive ring */
	if (!err && (r->cap.max_send_sge > (r->sq.stride - 64) / 16 ||
		     r->cap.max_inline_data > r->sq.stride - 64 ||
		     r->cap.max_send_wr > r->sq.entries ||
		     (!has_srq && (r->cap.max_recv_sge > (r->rq.stride - 16) / 16 ||
				   r->cap.max_recv_wr > r->rq.entries))))
		err = EPROTO;
	void *m = rvc_map_rings(memfd, r->map_size, &err);
	if (!err && (rvc_check_ring_header((uint8_t *)m + r->sq.offset, &r->sq, RVC_RING_SEND) ||
		     (!has_srq &&
		      rvc_check_ring_header((uint8_t *)m + r->rq.offset, &r->rq, RVC_RING_RECV))))
		err = EPROTO;
	if ((err = rvc_rings_done(m, r->map_size, err)))
		return err;
	q->map = m;
	q->map_size = r->map_size;
	rvc_ring_init(&q->sq, m, &r->sq, 1);
	if (!has_srq)
		rvc_ring_init(&q->rq, m, &r->rq, 1);
	q->cap = r->cap;
	/* num_sge is a u8 in the records. */
	if (q->cap.max_send_sge > 255)
		q->cap.max_send_sge = 255;
	if (q->cap.max_recv_sge > 255)
		q->cap.max_recv_sge = 255;
	return 0;
}

RVC_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	return rvc_create_qp(pd, attr);
}

struct ibv_qp *rvc_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct rvc_context *rc = to_rctx(pd->context);
	if (!attr->send_cq || !attr->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	struct rvc_qp *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	struct rvc_create_qp req = {
		.qp_type = (uint8_t)attr->qp_type,
		.sq_sig_all = attr->sq_sig_all ? 1 : 0,
		.send_cq = attr->send_cq->handle,
		.recv_cq = attr->recv_cq->handle,
		.srq = attr->srq ? attr->srq->handle : 0,
		.cap = {attr->cap.max_send_wr, attr->cap.max_recv_wr, attr->cap.max_send_sge,
			attr->cap.max_recv_sge, attr->cap.max_inline_data},
		.cookie = (uintptr_t)&q->qp,
	};
	struct rvc_create_qp_reply r;
	struct rvc_reply rep;
	int err = rvc_call(&rc->conn, RVC_OP_CREATE_QP, pd->handle, &req, sizeof(req), NULL, 0, &r,
			   sizeof(r), 0, 0, 2, &rep);
	if (!err) {
		q->doorbell = rep.fds[1];
		err = map_qp(q, &r, rep.fds[0], attr->srq != NULL);
		if (err) {
			close(q->doorbell);
			rvc_call(&rc->conn, RVC_OP_DESTROY_QP, r.qp, NULL, 0, NULL, 0, NULL,
				 sizeof(struct rvc_destroy_reply), 0, 0, 0, NULL);
		}
	}
	if (err) {
		free(q);
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&q->sq_lock, NULL);
	pthread_mutex_init(&q->rq_lock, NULL);
	pthread_mutex_init(&q->qp.mutex, NULL);
	pthread_cond_init(&q->qp.cond, NULL);
	q->qp.context = pd->context;
	q->qp.qp_context = attr->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = attr->send_cq;
	q->qp.recv_cq = attr->recv_cq;
	q->qp.srq = attr->srq;
	q->qp.handle = r.qp;
	q->qp.qp_num = r.qp_num;
	q->qp.state = IBV_QPS_RESET;
	q->qp.qp_type = attr->qp_type;
	if (rvc_live_add(rc, RVC_K_QP, r.qp, q)) {
		rvc_call(&rc->conn, RVC_OP_DESTROY_QP, r.qp, NULL, 0, NULL, 0, NULL,
			 sizeof(struct rvc_destroy_reply), 0, 0, 0, NULL);
		munmap(q->map, q->map_size);
		close(q->doorbell);
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	attr->cap.max_send_wr = r.cap.max_send_wr;
	attr->cap.max_recv_wr = r.cap.max_recv_wr;
	attr->cap.max_send_sge = q->cap.max_send_sge;
	attr->cap.max_recv_sge = q->cap.max_recv_sge;
	attr->cap.max_inline_data = r.cap.max_inline_data;
	return &q->qp;
}

RVC_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct rvc_qp *q = to_rqp(qp);
	return q->has_qpx ? &q->qpx : NULL; /* as rdma-core: only an extended QP */
}

static void av_to_wire(const struct ibv_ah_attr *a, struct rvc_av *w)
{
	memcpy(w->dgid, a->grh.dgid.raw, 16);
	w->flow_label = a->grh.flow_label;
	w->dlid = a->dlid;
	w->sgid_index = a->grh.sgid_index;
	w->hop_limit = a->grh.hop_limit;
	w->traffic_class = a->grh.traffic_class;
	w->sl = a->sl;
	w->static_rate = a->static_rate;
	w->port_num = a->port_num;
	w->is_global = a->is_global ? 1 : 0;
	w->src_path_bits = a->src_path_bits;
}

static void av_from_wire(const struct rvc_av *w, struct ibv_ah_attr *a)
{
	memcpy(a->grh.dgid.raw, w->dgid, 16);
	a->grh.flow_label = w->flow_label;
	a->dlid = w->dlid;
	a->grh.sgid_index = w->sgid_index;
	a->grh.hop_limit = w->hop_limit;
	a->grh.traffic_class = w->traffic_class;
	a->sl = w->sl;
	a->static_rate = w->static_rate;
	a->port_num = w->port_num;
	a->is_global = w->is_global;
	a->src_path_bits = w->src_path_bits;
}

RVC_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct rvc_context *rc = to_rctx(qp->context);
	struct rvc_modify_qp req;
	memset(&req, 0, sizeof(req));
	req.attr_mask = (uint32_t)mask;
	struct rvc_qp_attr *w = &req.attr;
	w->qkey = a->qkey;
	w->rq_psn = a->rq_psn;
	w->sq_psn = a->sq_psn;
	w->dest_qp_num = a->dest_qp_num;
	w->qp_access_flags = (uint32_t)a->qp_access_flags;
	w->cap = (struct rvc_cap){a->cap.max_send_wr, a->cap.max_recv_wr, a->cap.max_send_sge,
				  a->cap.max_recv_sge, a->cap.max_inline_data};
	w->pkey_index = a->pkey_index;
	w->qp_state = (uint8_t)a->qp_state;
	w->cur_qp_state = (uint8_t)a->cur_qp_state;
	w->path_mtu = (uint8_t)a->path_mtu;
	w->path_mig_state = (uint8_t)a->path_mig_state;
	w->en_sqd_async_notify = a->en_sqd_async_notify ? 1 : 0;
	w->sq_draining = a->sq_draining ? 1 : 0;
	w->max_rd_atomic = a->max_rd_atomic;
	w->max_dest_rd_atomic = a->max_dest_rd_atomic;
	w->min_rnr_timer = a->min_rnr_timer;
	w->port_num = a->port_num;
	w->timeout = a->timeout;
	w->retry_cnt = a->retry_cnt;
	w->rnr_retry = a->rnr_retry;
	if (mask & IBV_QP_AV)
		av_to_wire(&a->ah_attr, &w->ah);
	/* To RESET the daemon restarts the rings (indices 0): no post while
	 * it does, and our producer indices restart from the headers. */
	int reset = (mask & IBV_QP_STATE) && a->qp_state == IBV_QPS_RESET;
	struct rvc_qp *q = to_rqp(qp);
	if (reset) {
		pthread_mutex_lock(&q->sq_lock);
		pthread_mutex_lock(&q->rq_lock);
	}
	int err = rvc_call(&rc->conn, RVC_OP_MODIFY_QP, qp->handle, &req, sizeof(req), NULL, 0,
			   NULL, 0, 0, 0, 0, NULL);
	if (reset) {
		if (!err) {
			q->sq.idx = __atomic_load_n(rvc_word(&q->sq, RVC_RING_PROD), __ATOMIC_ACQUIRE);
			if (q->rq.hdr)
				q->rq.idx = __atomic_load_n(rvc_word(&q->rq, RVC_RING_PROD),
							    __ATOMIC_ACQUIRE);
		}
		pthread_mutex_unlock(&q->rq_lock);
		pthread_mutex_unlock(&q->sq_lock);
	}
	if (!err && (mask & IBV_QP_STATE))
		qp->state = a->qp_state;
	return err;
}

RVC_EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
			    struct ibv_qp_init_attr *init)
{
	struct rvc_context *rc = to_rctx(qp->context);
	struct rvc_mask_req req = {.attr_mask = (uint32_t)mask};
	struct rvc_query_qp_reply r;
	int err = rvc_call(&rc->conn, RVC_OP_QUERY_QP, qp->handle, &req, sizeof(req), NULL, 0, &r,
			   sizeof(r), 0, 0, 0, NULL);
	if (err)
		return err;
	const struct rvc_qp_attr *w = &r.attr;
	memset(a, 0, sizeof(*a));
	a->qkey = w->qkey;
	a->rq_psn = w->rq_psn;
	a->sq_psn = w->sq_psn;
	a->dest_qp_num = w->dest_qp_num;
	a->qp_access_flags = (int)w->qp_access_flags;
	a->cap.max_send_wr = w->cap.max_send_wr;
	a->cap.max_recv_wr = w->cap.max_recv_wr;
	a->cap.max_send_sge = w->cap.max_send_sge;
	a->cap.max_recv_sge = w->cap.max_recv_sge;
	a->cap.max_inline_data = w->cap.max_inline_data;
	a->pkey_index = w->pkey_index;
	a->qp_state = (enum ibv_qp_state)w->qp_state;
	a->cur_qp_state = (enum ibv_qp_state)w->cur_qp_state;
	a->path_mtu = (enum ibv_mtu)w->path_mtu;
	a->path_mig_state = (enum ibv_mig_state)w->path_mig_state;
	a->en_sqd_async_notify = w->en_sqd_async_notify;
	a->sq_draining = w->sq_draining;
	a->max_rd_atomic = w->max_rd_atomic;
	a->max_dest_rd_atomic = w->max_dest_rd_atomic;
	a->min_rnr_timer = w->min_rnr_timer;
	a->port_num = w->port_num;
	a->timeout = w->timeout;
	a->retry_cnt = w->retry_cnt;
	a->rnr_retry = w->rnr_retry;
	av_from_wire(&w->ah, &a->ah_attr);
	qp->state = a->qp_state;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->qp_context;
		init->send_cq = qp->send_cq;
		init->recv_cq = qp->recv_cq;
		init->srq = qp->srq;
		init->cap = a->cap;
		init->qp_type = (enum ibv_qp_type)r.qp_type;
		init->sq_sig_all = r.sq_sig_all;
	}
	return 0;
}

RVC_EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct rvc_qp *q = to_rqp(qp);
	struct rvc_context *rc = to_rctx(qp->context);
	struct rvc_destroy_reply r;
	rvc_live_del(rc, RVC_K_QP, qp->handle);
	int err = rvc_call(&rc->conn, RVC_OP_DESTROY_QP, qp->handle, NULL, 0, NULL, 0, &r, sizeof(r),
			   0, 0, 0, NULL);
	if (err) {
		rvc_live_add(rc, RVC_K_QP, qp->handle, q);
		return err;
	}
	pthread_mutex_lock(&qp->mutex);
	while (qp->events_completed != q->async_delivered)
		pthread_cond_wait(&qp->cond, &qp->mutex);
	pthread_mutex_unlock(&qp->mutex);
	munmap(q->map, q->map_size);
	close(q->doorbell);
	free(q);
	return 0;
}

void rvc_ring_doorbell(struct rvc_qp *q)
{
	uint64_t one = 1;
	ssize_t n = write(q->doorbell, &one, sizeof(one));
	(void)n; /* EAGAIN: the counter is already non-zero, the daemon wakes */
}

/* write_send fills one send WQE record: 0 or an errno for this WR. */
static int write_send(struct rvc_qp *q, const struct ibv_send_wr *wr, uint8_t *rec)
{
	struct rvc_send_wqe w;
	memset(&w, 0, sizeof(w));
	w.wr_id = wr->wr_id;
	w.send_flags = wr->send_flags;
	w.opcode = (uint8_t)wr->opcode;
	w.imm_data = wr->imm_data;
	if (wr->num_sge < 0)
		return EINVAL;
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		w.rkey = wr->wr.rdma.rkey;
		w.remote_addr = wr->wr.rdma.remote_addr;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		w.rkey = wr->wr.atomic.rkey;
		w.remote_addr = wr->wr.atomic.remote_addr;
		w.compare_add = wr->wr.atomic.compare_add;
		w.swap = wr->wr.atomic.swap;
		break;
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_LOCAL_INV:
		break;
	case IBV_WR_BIND_MW: {
		/* Section 7: the window and region by handle, the new rkey,
		 * address, length and access in the RDMA/atomic fields. */
		const struct ibv_mw_bind_info *b = &wr->bind_mw.bind_info;
		if (!wr->bind_mw.mw)
			return EINVAL;
		w.rkey = wr->bind_mw.rkey;
		w.remote_addr = b->addr;
		w.compare_add = b->length;
		w.swap = b->mw_access_flags;
		w.ah = wr->bind_mw.mw->handle;
		w.remote_qpn = b->mr ? b->mr->handle : 0;
		memcpy(rec, &w, sizeof(w));
		return 0;
	}
	default:
		return EINVAL; /* TSO, driver ops */
	}
	if (q->qp.qp_type == IBV_QPT_UD) {
		if (!wr->wr.ud.ah)
			return EINVAL;
		w.ah = wr->wr.ud.ah->handle;
		w.remote_qpn = wr->wr.ud.remote_qpn;
		w.remote_qkey = wr->wr.ud.remote_qkey;
	}
	uint8_t *data = rec + sizeof(w);
	if (wr->send_flags & IBV_SEND_INLINE) {
		size_t total = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			size_t l = wr->sg_list[i].length;
			if (total + l > q->cap.max_inline_data)
				return EINVAL;
			memcpy(data + total, (void *)(uintptr_t)wr->sg_list[i].addr, l);
			total += l;
		}
		w.inline_len = (uint16_t)total;
	} else {
		if ((uint32_t)wr->num_sge > q->cap.max_send_sge)
			return EINVAL;
		w.num_sge = (uint8_t)wr->num_sge;
		if (wr->num_sge)
			memcpy(data, wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
	}
	memcpy(rec, &w, sizeof(w));
	return 0;
}

int rvc_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct rvc_qp *q = to_rqp(qp);
	int err = 0;
	if (rvc_fatal(to_rctx(qp->context))) {
		*bad = wr;
		return EIO; /* as mlx5_ib in its internal-error state */
	}
	pthread_mutex_lock(&q->sq_lock);
	uint32_t out = rvc_outstanding(&q->sq), start = q->sq.idx;
	for (; wr; wr = wr->next) {
		if (out >= q->cap.max_send_wr) {
			err = ENOMEM;
			break;
		}
		err = write_send(q, wr, rvc_slot(&q->sq, q->sq.idx));
		if (err)
			break;
		q->sq.idx++;
		out++;
	}
	if (q->sq.idx != start && rvc_publish(&q->sq))
		rvc_ring_doorbell(q);
	pthread_mutex_unlock(&q->sq_lock);
	if (err)
		*bad = wr;
	return err;
}

void rvc_write_recv(uint8_t *rec, const struct ibv_recv_wr *wr)
{
	struct rvc_recv_wqe w;
	memset(&w, 0, sizeof(w));
	w.wr_id = wr->wr_id;
	w.num_sge = (uint8_t)wr->num_sge;
	memcpy(rec, &w, sizeof(w));
	if (wr->num_sge)
		memcpy(rec + sizeof(w), wr->sg_list, sizeof(struct ibv_sge) * (size_t)wr->num_sge);
}

int rvc_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct rvc_qp *q = to_rqp(qp);
	int err = 0;
	if (qp->srq) {
		*bad = wr;
		return EINVAL; /* receives go to the SRQ */
	}
	if (rvc_fatal(to_rctx(qp->context))) {
		*bad = wr;
		return EIO;
	}
	pthread_mutex_lock(&q->rq_lock);
	uint32_t out = rvc_outstanding(&q->rq), start = q->rq.idx;
	for (; wr; wr = wr->next) {
		if (out >= q->cap.max_recv_wr) {
			err = ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_recv_sge) {
			err = EINVAL;
			break;
		}
		rvc_write_recv(rvc_slot(&q->rq, q->rq.idx), wr);
		q->rq.idx++;
		out++;
	}
	if (q->rq.idx != start && rvc_publish(&q->rq))
		rvc_ring_doorbell(q);
	pthread_mutex_unlock(&q->rq_lock);
	if (err)
		*bad = wr;
	return err;
}

struct ibv_mw *rvc_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct rvc_context *rc = to_rctx(pd->context);
	struct ibv_mw *mw = calloc(1, sizeof(*mw));
	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	struct rvc_alloc_mw req = {.type = (uint8_t)type};
	struct rvc_alloc_mw_reply r;
	int err = rvc_call(&rc->conn, RVC_OP_ALLOC_MW, pd->handle, &req, sizeof(req), NULL, 0, &r,
			   sizeof(r), 0, 0, 0, NULL);
	if (err) {
		free(mw);
		errno = err;
		return NULL;
	}
	mw->context = pd->context;
	mw->pd = pd;
	mw->rkey = r.rkey;
	mw->handle = r.mw;
	mw->type = type;
	return mw;
}

int rvc_dealloc_mw(struct ibv_mw *mw)
{
	struct rvc_context *rc = to_rctx(mw->context);
	int err = rvc_call(&rc->conn, RVC_OP_DEALLOC_MW, mw->handle, NULL, 0, NULL, 0, NULL, 0, 0, 0,
			   0, NULL);
	if (err)
		return err;
	free(mw);
	return 0;
}

/* ibv_bind_mw of a type-1 window: a BIND_MW WQE in send-queue order with
 * the window's next rkey, which the window takes once it is posted. */
int rvc_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = bind->wr_id;
	wr.send_flags = bind->send_flags;
	wr.opcode = IBV_WR_BIND_MW;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = bind->bind_info;
	int err = rvc_post_send(qp, &wr, &bad);
	if (!err)
		mw->rkey = wr.bind_mw.rkey;
	return err;
}

RVC_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct rvc_context *rc = to_rctx(pd->context);
	struct ibv_ah *ah = calloc(1, sizeof(*ah));
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	struct rvc_av req;
	memset(&req, 0, sizeof(req));
	av_to_wire(attr, &req);
	struct rvc_handle_reply r;
	int err = rvc_call(&rc->conn, RVC_OP_CREATE_AH, pd->handle, &req, sizeof(req), NULL, 0, &r,
			   sizeof(r), 0, 0, 0, NULL);
	if (err) {
		free(ah);
		errno = err;
		return NULL;
	}
	ah->context = pd->context;
	ah->pd = pd;
	ah->handle = r.handle;
	return ah;
}

RVC_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	struct rvc_context *rc = to_rctx(ah->context);
	int err = rvc_call(&rc->conn, RVC_OP_DESTROY_AH, ah->handle, NULL, 0, NULL, 0, NULL, 0, 0, 0,
			   0, NULL);
	if (err)
		return err;
	free(ah);
	return 0;
}

/* ibv_init_ah_from_wc: the AH that answers a received UD datagram. Its
 * first 40 bytes are the GRH as RoCE v2 delivers it: for IPv4, the IPv4
 * header in bytes 20-39 (the first 20 undefined); for IPv6, the IPv6
 * header, laid out as a GRH. The source becomes the destination GID; the
 * local GID it was sent to picks the sgid_index. */
RVC_EXPORT int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc,
				   struct ibv_grh *grh, struct ibv_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	ah->dlid = wc->slid;
	ah->sl = wc->sl;
	ah->src_path_bits = wc->dlid_path_bits;
	ah->port_num = port;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	ah->is_global = 1;
	union ibv_gid to; /* the local GID the datagram was sent to */
	const uint8_t *raw = (const uint8_t *)grh;
	if ((raw[20] >> 4) == 4) {
		memset(&ah->grh.dgid, 0, sizeof(ah->grh.dgid));
		memset(&to, 0, sizeof(to));
		ah->grh.dgid.raw[10] = ah->grh.dgid.raw[11] = 0xff;
		to.raw[10] = to.raw[11] = 0xff;
		memcpy(&ah->grh.dgid.raw[12], raw + 20 + 12, 4); /* saddr */
		memcpy(&to.raw[12], raw + 20 + 16, 4);           /* daddr */
		ah->grh.traffic_class = raw[20 + 1];
		ah->grh.hop_limit = 0xff;
	} else {
		ah->grh.dgid = grh->sgid;
		to = grh->dgid;
		uint32_t vtf = be32toh(grh->version_tclass_flow);
		ah->grh.flow_label = vtf & 0xfffff;
		ah->grh.traffic_class = (uint8_t)(vtf >> 20);
		ah->grh.hop_limit = 0xff;
	}
	struct ibv_port_attr pa;
	int n = ibv_query_port(ctx, port, &pa) == 0 ? pa.gid_tbl_len : 16;
	for (int i = 0; i < n; i++) {
		union ibv_gid g;
		if (ibv_query_gid(ctx, port, i, &g))
			break;
		if (!memcmp(&g, &to, sizeof(g))) {
			ah->grh.sgid_index = (uint8_t)i;
			return 0;
		}
	}
	errno = ENOENT;
	return -1;
}

RVC_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
						struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr a;
	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}
