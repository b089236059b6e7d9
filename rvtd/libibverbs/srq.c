/* Shared receive queues (a ring of receive WQEs the daemon takes from
 * when a message for one of its QPs arrives; no doorbell) and multicast
 * membership. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "internal.h"

/* map_srq checks an SRQ reply's ring, maps its memfd (closed here) and
 * checks the ring's header: 0 with *map set, or an errno with nothing
 * mapped. */
static int map_srq(const struct rvc_create_srq_reply *r, int memfd, void **map)
{
	int err = rvc_check_ring(&r->ring, r->map_size, 32);
	if (!err && (r->max_wr > r->ring.entries || r->max_sge > (r->ring.stride - 16) / 16))
		err = EPROTO;
	void *m = rvc_map_rings(memfd, r->map_size, &err);
	if (!err && rvc_check_ring_header((uint8_t *)m + r->ring.offset, &r->ring, RVC_RING_SRQ))
		err = EPROTO;
	if ((err = rvc_rings_done(m, r->map_size, err)))
		return err;
	*map = m;
	return 0;
}

RVC_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct rvc_context *rc = to_rctx(pd->context);
	struct rvc_srq *s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	struct rvc_create_srq req = {.max_wr = attr->attr.max_wr, .max_sge = attr->attr.max_sge,
				     .srq_limit = attr->attr.srq_limit, .cookie = (uintptr_t)&s->srq};
	struct rvc_create_srq_reply r;
	struct rvc_reply rep;
	int err = rvc_call(&rc->conn, RVC_OP_CREATE_SRQ, pd->handle, &req, sizeof(req), NULL, 0, &r,
			   sizeof(r), 0, 0, 1, &rep);
	if (!err) {
		void *m;
		err = map_srq(&r, rep.fds[0], &m);
		if (err) {
			rvc_call(&rc->conn, RVC_OP_DESTROY_SRQ, r.srq, NULL, 0, NULL, 0, NULL,
				 sizeof(struct rvc_destroy_reply), 0, 0, 0, NULL);
		} else {
			s->map = m;
			s->map_size = r.map_size;
			rvc_ring_init(&s->ring, m, &r.ring, 1);
		}
	}
	if (err) {
		free(s);
		errno = err;
		return NULL;
	}
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	s->srq.context = pd->context;
	s->srq.srq_context = attr->srq_context;
	s->srq.pd = pd;
	s->srq.handle = r.srq;
	if (rvc_live_add(rc, RVC_K_SRQ, r.srq, s)) {
		rvc_call(&rc->conn, RVC_OP_DESTROY_SRQ, r.srq, NULL, 0, NULL, 0, NULL,
			 sizeof(struct rvc_destroy_reply), 0, 0, 0, NULL);
		munmap(s->map, s->map_size);
		free(s);
		errno = ENOMEM;
		return NULL;
	}
	s->max_wr = r.max_wr;
	s->max_sge = r.max_sge > 255 ? 255 : r.max_sge; /* num_sge is a u8 */
	attr->attr.max_wr = r.max_wr;
	attr->attr.max_sge = r.max_sge;
	return &s->srq;
}

/* resize: IBV_SRQ_MAX_WR is resize_srq: the daemon passes a new ring
 * holding the WQEs it has not taken; posting goes on there (s->lock held:
 * no post meanwhile). */
static int resize(struct rvc_context *rc, struct rvc_srq *s, uint32_t max_wr)
{
	struct rvc_cqe_req req = {.cqe = max_wr};
	struct rvc_create_srq_reply r;
	struct rvc_reply rep;
	int err = rvc_call(&rc->conn, RVC_OP_RESIZE_SRQ, s->srq.handle, &req, sizeof(req), NULL, 0,
			   &r, sizeof(r), 0, 0, 1, &rep);
	if (err)
		return err;
	void *m;
	if (r.srq != s->srq.handle) {
		close(rep.fds[0]);
		return EPROTO;
	}
	err = map_srq(&r, rep.fds[0], &m);
	if (err)
		return err; /* the daemon serves the new ring only: this SRQ is lost */
	munmap(s->map, s->map_size);
	s->map = m;
	s->map_size = r.map_size;
	rvc_ring_init(&s->ring, m, &r.ring, 1);
	s->max_wr = r.max_wr;
	return 0;
}

RVC_EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	struct rvc_context *rc = to_rctx(srq->context);
	if (mask & IBV_SRQ_MAX_WR) {
		struct rvc_srq *s = to_rsrq(srq);
		pthread_mutex_lock(&s->lock);
		int err = resize(rc, s, attr->max_wr);
		pthread_mutex_unlock(&s->lock);
		mask &= ~IBV_SRQ_MAX_WR;
		if (err || !mask)
			return err;
	}
	struct rvc_srq_attr req = {.srq_attr_mask = (uint32_t)mask, .max_wr = attr->max_wr,
				   .max_sge = attr->max_sge, .srq_limit = attr->srq_limit};
	return rvc_call(&rc->conn, RVC_OP_MODIFY_SRQ, srq->handle, &req, sizeof(req), NULL, 0, NULL,
			0, 0, 0, 0, NULL);
}

RVC_EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct rvc_context *rc = to_rctx(srq->context);
	struct rvc_srq_attr r;
	int err = rvc_call(&rc->conn, RVC_OP_QUERY_SRQ, srq->handle, NULL, 0, NULL, 0, &r, sizeof(r),
			   0, 0, 0, NULL);
	if (err)
		return err;
	attr->max_wr = r.max_wr;
	attr->max_sge = r.max_sge;
	attr->srq_limit = r.srq_limit;
	return 0;
}

RVC_EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct rvc_srq *s = to_rsrq(srq);
	struct rvc_context *rc = to_rctx(srq->context);
	struct rvc_destroy_reply r;
	rvc_live_del(rc, RVC_K_SRQ, srq->handle);
	int err = rvc_call(&rc->conn, RVC_OP_DESTROY_SRQ, srq->handle, NULL, 0, NULL, 0, &r,
			   sizeof(r), 0, 0, 0, NULL);
	if (err) {
		rvc_live_add(rc, RVC_K_SRQ, srq->handle, s);
		return err;
	}
	pthread_mutex_lock(&srq->mutex);
	while (srq->events_completed != s->async_delivered)
		pthread_cond_wait(&srq->cond, &srq->mutex);
	pthread_mutex_unlock(&srq->mutex);
	munmap(s->map, s->map_size);
	free(s);
	return 0;
}

int rvc_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct rvc_srq *s = to_rsrq(srq);
	int err = 0;
	if (rvc_fatal(to_rctx(srq->context))) {
		*bad = wr;
		return EIO;
	}
	pthread_mutex_lock(&s->lock);
	uint32_t out = rvc_outstanding(&s->ring), start = s->ring.idx;
	for (; wr; wr = wr->next) {
		if (out >= s->max_wr) {
			err = ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > s->max_sge) {
			err = EINVAL;
			break;
		}
		rvc_write_recv(rvc_slot(&s->ring, s->ring.idx), wr);
		s->ring.idx++;
		out++;
	}
	if (s->ring.idx != start)
		rvc_publish(&s->ring); /* no doorbell: the daemon takes on arrival */
	pthread_mutex_unlock(&s->lock);
	if (err)
		*bad = wr;
	return err;
}

static int mcast(struct ibv_qp *qp, uint16_t op, const union ibv_gid *gid, uint16_t lid)
{
	struct rvc_context *rc = to_rctx(qp->context);
	struct rvc_mcast req;
	memset(&req, 0, sizeof(req));
	memcpy(req.gid, gid->raw, 16);
	req.lid = lid;
	return rvc_call(&rc->conn, op, qp->handle, &req, sizeof(req), NULL, 0, NULL, 0, 0, 0, 0, NULL);
}

RVC_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, RVC_OP_ATTACH_MCAST, gid, lid);
}

RVC_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, RVC_OP_DETACH_MCAST, gid, lid);
}
