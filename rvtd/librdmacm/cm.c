/* rdma_cm over rvtd (protocol section 9): the session, devices, addresses,
 * event channels and IDs. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "internal.h"

pthread_mutex_t rvm_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t rvm_cond = PTHREAD_COND_INITIALIZER;

static pthread_mutex_t session_lock = PTHREAD_MUTEX_INITIALIZER;
static void *session;
static int session_err;

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rvm_dev devs[16];
static int ndevs;

static struct rvm_id *registry; /* under rvm_lock */
static struct rvm_channel *dead_channels; /* under rvm_lock */

void rvm_warn(const char *fmt, ...)
{
	va_list ap;
	fputs("librdmacm (rvtd): ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int rvm_err(int e)
{
	if (!e)
		return 0;
	errno = e;
	return -1;
}

/* rvm_session opens the process's session on first use: 0 or an errno. */
int rvm_session(void)
{
	pthread_mutex_lock(&session_lock);
	if (!session && !session_err) {
		uint16_t minor = 0;
		int err = 0;
		session = rvtd_priv_session_open("librdmacm", RVM_MINOR, &minor, &err);
		if (!session)
			session_err = err ? err : ENODEV;
		else if (minor < RVM_MINOR) {
			rvm_warn("rvtd speaks protocol 1.%u, without the connection manager (1.1)",
				 minor);
			rvtd_priv_session_close(session);
			session = NULL;
			session_err = ENOSYS;
		}
	}
	int err = session ? 0 : session_err;
	pthread_mutex_unlock(&session_lock);
	return err;
}

/* rvm_call: one request; the reply body must be exactly outlen bytes. */
int rvm_call(uint16_t op, uint32_t handle, const void *req, size_t reqlen, void *out,
	     size_t outlen, int *fd)
{
	int err = rvm_session();
	if (err)
		return err;
	return rvtd_priv_call(session, op, handle, req, reqlen, out, outlen, 0, outlen, NULL,
			      fd ? 1 : 0, fd);
}

/* rvm_dev_get: our libibverbs' context of the named device, opened once. */
struct rvm_dev *rvm_dev_get(const char *name)
{
	struct rvm_dev *d = NULL;
	pthread_mutex_lock(&dev_lock);
	for (int i = 0; i < ndevs; i++)
		if (strcmp(devs[i].name, name) == 0) {
			d = &devs[i];
			goto out;
		}
	if (ndevs == (int)(sizeof(devs) / sizeof(devs[0])))
		goto out;
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		goto out;
	for (int i = 0; i < n; i++) {
		if (strcmp(ibv_get_device_name(list[i]), name) != 0)
			continue;
		struct ibv_context *ctx = ibv_open_device(list[i]);
		if (!ctx)
			break;
		d = &devs[ndevs];
		memset(d, 0, sizeof(*d));
		snprintf(d->name, sizeof(d->name), "%s", name);
		d->ctx = ctx;
		if (ibv_query_device(ctx, &d->attr)) {
			d->attr.max_qp_rd_atom = 16;
			d->attr.max_qp_init_rd_atom = 16;
		}
		ndevs++;
		break;
	}
	ibv_free_device_list(list);
out:
	pthread_mutex_unlock(&dev_lock);
	return d;
}

static struct ibv_pd *dev_pd(struct rvm_dev *d)
{
	pthread_mutex_lock(&dev_lock);
	if (!d->pd)
		d->pd = ibv_alloc_pd(d->ctx);
	struct ibv_pd *pd = d->pd;
	pthread_mutex_unlock(&dev_lock);
	return pd;
}

static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

int rvm_to_addr(const struct sockaddr *sa, struct rvm_addr *a)
{
	memset(a, 0, sizeof(*a));
	if (!sa)
		return 0;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;
		a->family = 2;
		a->port = ntohs(s->sin_port);
		memcpy(a->addr, v4mapped, 12);
		memcpy(a->addr + 12, &s->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const void *)sa;
		a->family = 10;
		a->port = ntohs(s->sin6_port);
		memcpy(a->addr, &s->sin6_addr, 16);
		return 0;
	}
	return EAFNOSUPPORT;
}

void rvm_from_addr(const struct rvm_addr *a, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (a->family == 2) {
		struct sockaddr_in *s = (void *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(a->port);
		memcpy(&s->sin_addr, a->addr + 12, 4);
	} else if (a->family == 10) {
		struct sockaddr_in6 *s = (void *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(a->port);
		memcpy(&s->sin6_addr, a->addr, 16);
	}
}

/* ---- event channels ---- */

RVM_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct rvm_channel *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	struct rvm_u32 r;
	int fd = -1;
	int err = rvm_call(RVM_OP_CREATE_EVENT_CHANNEL, 0, NULL, 0, &r, sizeof(r), &fd);
	if (err) {
		free(c);
		errno = err;
		return NULL;
	}
	c->handle = r.v;
	c->ch.fd = fd;
	return &c->ch;
}

RVM_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (!channel)
		return;
	struct rvm_channel *c = rvm_container_of(channel, struct rvm_channel, ch);
	c->destroyed = 1; /* before the daemon closes its end */
	int err = rvm_call(RVM_OP_DESTROY_EVENT_CHANNEL, c->handle, NULL, 0, NULL, 0, NULL);
	if (err == EBUSY) {
		c->destroyed = 0;
		rvm_warn("rdma_destroy_event_channel: IDs still use the channel");
		return;
	}
	/* A thread may still be blocked reading the channel (rping's CM
	 * thread, cancelled after the destroy): over the kernel that read
	 * stays blocked; here the daemon's end is closed and the read returns
	 * 0, so rdma_get_cm_event must know the channel is gone and block
	 * instead of failing. The struct is kept for that (a few bytes per
	 * destroyed channel, on a list so that they stay reachable). */
	close(c->ch.fd);
	pthread_mutex_lock(&rvm_lock);
	c->next_dead = dead_channels;
	dead_channels = c;
	pthread_mutex_unlock(&rvm_lock);
}

/* ---- the ID registry ---- */

static void reg_add(struct rvm_id *r)
{
	pthread_mutex_lock(&rvm_lock);
	r->next = registry;
	registry = r;
	pthread_mutex_unlock(&rvm_lock);
}

static void reg_del_locked(struct rvm_id *r)
{
	for (struct rvm_id **p = &registry; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			return;
		}
}

static struct rvm_id *reg_find_locked(uint32_t handle)
{
	for (struct rvm_id *r = registry; r; r = r->next)
		if (r->handle == handle)
			return r;
	return NULL;
}

/* query fills the ID's addresses, device and route from cm_query. */
static int query(struct rvm_id *r)
{
	struct rvm_query_reply q;
	int err = rvm_call(RVM_OP_QUERY, r->handle, NULL, 0, &q, sizeof(q), NULL);
	if (err)
		return err;
	if (!rvm_addr_ok(&q.src_addr) || !rvm_addr_ok(&q.dst_addr) ||
	    !memchr(q.device_name, 0, sizeof(q.device_name)))
		return EPROTO;
	rvm_from_addr(&q.src_addr, &r->id.route.addr.src_storage);
	rvm_from_addr(&q.dst_addr, &r->id.route.addr.dst_storage);
	if (q.device_name[0] && !r->dev) {
		r->dev = rvm_dev_get(q.device_name);
		if (!r->dev)
			return ENODEV;
		r->id.verbs = r->dev->ctx;
	}
	if (q.port_num)
		r->id.port_num = q.port_num;
	struct ibv_sa_path_rec *p = &r->path;
	memcpy(p->sgid.raw, q.sgid, 16);
	memcpy(p->dgid.raw, q.dgid, 16);
	p->pkey = htons(q.pkey);
	p->flow_label = htonl(q.flow_label);
	p->hop_limit = q.hop_limit;
	p->traffic_class = q.traffic_class;
	p->mtu = q.mtu;
	p->mtu_selector = 2; /* exactly */
	p->packet_life_time = q.packet_life_time;
	p->packet_life_time_selector = 2;
	p->sl = q.sl;
	p->reversible = htonl(1);
	p->numb_path = 1;
	memcpy(r->id.route.addr.addr.ibaddr.sgid.raw, q.sgid, 16);
	memcpy(r->id.route.addr.addr.ibaddr.dgid.raw, q.dgid, 16);
	r->id.route.addr.addr.ibaddr.pkey = htons(q.pkey);
	if (q.num_paths) {
		r->id.route.path_rec = p;
		r->id.route.num_paths = 1;
	}
	return 0;
}

static struct rvm_id *new_id(struct rdma_event_channel *ch, void *context,
			     enum rdma_port_space ps, enum ibv_qp_type qpt, uint32_t handle)
{
	struct rvm_id *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->handle = handle;
	r->id.channel = ch;
	r->id.context = context;
	r->id.ps = ps;
	r->id.qp_type = qpt;
	return r;
}

static enum ibv_qp_type ps_qp_type(enum rdma_port_space ps)
{
	return ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
}

static int create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		     enum rdma_port_space ps, enum ibv_qp_type qpt)
{
	int sync = 0;
	if (!id)
		return rvm_err(EINVAL);
	if (!channel) {
		channel = rdma_create_event_channel();
		if (!channel)
			return -1;
		sync = 1;
	}
	struct rvm_channel *c = rvm_container_of(channel, struct rvm_channel, ch);
	struct rvm_id *r = new_id(channel, context, ps, qpt, 0);
	if (!r) {
		if (sync)
			rdma_destroy_event_channel(channel);
		return rvm_err(ENOMEM);
	}
	r->sync = sync;
	struct rvm_create_id req = {.context = (uint64_t)(uintptr_t)&r->id, .port_space = ps,
				    .qp_type = (uint8_t)qpt};
	struct rvm_u32 rep;
	int err = rvm_call(RVM_OP_CREATE_ID, c->handle, &req, sizeof(req), &rep, sizeof(rep), NULL);
	if (err) {
		free(r);
		if (sync)
			rdma_destroy_event_channel(channel);
		return rvm_err(err);
	}
	r->handle = rep.v;
	reg_add(r);
	*id = &r->id;
	return 0;
}

RVM_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
			      void *context, enum rdma_port_space ps)
{
	if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB && ps != RDMA_PS_IPOIB)
		return rvm_err(EINVAL);
	return create_id(channel, id, context, ps, ps_qp_type(ps));
}

/* wait_acked waits until the program acknowledged every event it was
 * handed about r. It gives up after 2 s and returns 1, and the caller
 * then keeps r allocated, so that a late acknowledgement writes to live
 * memory. rping's client used to wait here about once in 100 runs: its
 * main thread deregistered its buffers, malloc'd neighbours of r, while
 * its CM thread counted DISCONNECTED, and libibverbs' page move at
 * ibv_dereg_mr (copy, then map the copy) put back the page as it was
 * before the count (fixed in libibverbs/mem.c, seg_unshare). */
static int wait_acked(struct rvm_id *r)
{
	int late = 0;
	pthread_mutex_lock(&rvm_lock);
	while (r->acked != r->delivered) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 2;
		if (pthread_cond_timedwait(&rvm_cond, &rvm_lock, &ts) == ETIMEDOUT &&
		    r->acked != r->delivered) {
			if (getenv("RVM_DEBUG"))
				rvm_warn("ID %u: %u events handed out, %u acknowledged; going on",
					 r->handle, r->delivered, r->acked);
			late = 1;
			break;
		}
	}
	pthread_mutex_unlock(&rvm_lock);
	return late;
}

RVM_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	if (!id)
		return rvm_err(EINVAL);
	struct rvm_id *r = to_rid(id);
	if (r->sync_ev) {
		rdma_ack_cm_event(r->sync_ev);
		r->sync_ev = NULL;
		r->id.event = NULL;
	}
	pthread_mutex_lock(&rvm_lock);
	reg_del_locked(r); /* later records about it are dropped */
	pthread_mutex_unlock(&rvm_lock);
	int late = wait_acked(r);
	struct rvm_u32 rep;
	int err = rvm_call(RVM_OP_DESTROY_ID, r->handle, NULL, 0, &rep, sizeof(rep), NULL);
	if (err && err != ENOTCONN && err != EBADF && err != ENOENT) {
		reg_add(r);
		return rvm_err(err);
	}
	rvm_mc_forget(r);
	if (r->sync)
		rdma_destroy_event_channel(id->channel);
	free(r->listen_qp_attr);
	free(r->rep);
	r->listen_qp_attr = NULL;
	r->rep = NULL;
	if (!late)
		free(r);
	return 0;
}

/* sync_wait: for an ID without a channel of its own choosing, read the
 * event the call started and check it is `want`. */
static int sync_wait(struct rvm_id *r, enum rdma_cm_event_type want)
{
	if (!r->sync)
		return 0;
	if (r->sync_ev) {
		rdma_ack_cm_event(r->sync_ev);
		r->sync_ev = NULL;
		r->id.event = NULL;
	}
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(r->id.channel, &ev))
		return -1;
	r->sync_ev = ev;
	r->id.event = ev; /* as librdmacm: the private data of a synchronous call */
	if (ev->event != want) {
		int st = ev->status;
		if (getenv("RVM_DEBUG"))
			rvm_warn("sync: got %s (%d), want %s", rdma_event_str(ev->event), st, rdma_event_str(want));
		return rvm_err(st < 0 ? -st : st ? ECONNREFUSED : EINVAL);
	}
	return 0;
}

RVM_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct rvm_id *r = to_rid(id);
	struct rvm_addr a;
	if (!addr)
		return rvm_err(EINVAL);
	int err = rvm_to_addr(addr, &a);
	if (!err)
		err = rvm_call(RVM_OP_BIND_ADDR, r->handle, &a, sizeof(a), NULL, 0, NULL);
	if (!err)
		err = query(r);
	return rvm_err(err);
}

RVM_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
				 struct sockaddr *dst_addr, int timeout_ms)
{
	struct rvm_id *r = to_rid(id);
	struct rvm_resolve_addr req = {.timeout_ms = timeout_ms > 0 ? (uint32_t)timeout_ms : 2000};
	if (!dst_addr)
		return rvm_err(EINVAL);
	int err = rvm_to_addr(src_addr, &req.src);
	if (!err)
		err = rvm_to_addr(dst_addr, &req.dst);
	if (!err) {
		struct sockaddr_storage ss;
		rvm_from_addr(&req.dst, &ss);
		memcpy(&id->route.addr.dst_storage, &ss, sizeof(ss));
		err = rvm_call(RVM_OP_RESOLVE_ADDR, r->handle, &req, sizeof(req), NULL, 0, NULL);
	}
	if (err)
		return rvm_err(err);
	return sync_wait(r, RDMA_CM_EVENT_ADDR_RESOLVED);
}

RVM_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct rvm_id *r = to_rid(id);
	struct rvm_u32 req = {.v = timeout_ms > 0 ? (uint32_t)timeout_ms : 2000};
	int err = rvm_call(RVM_OP_RESOLVE_ROUTE, r->handle, &req, sizeof(req), NULL, 0, NULL);
	if (err)
		return rvm_err(err);
	return sync_wait(r, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

RVM_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct rvm_id *r = to_rid(id);
	struct rvm_u32 req = {.v = backlog > 0 ? (uint32_t)backlog : 0};
	int err = rvm_call(RVM_OP_LISTEN, r->handle, &req, sizeof(req), NULL, 0, NULL);
	if (!err)
		err = query(r);
	return rvm_err(err);
}

/* ---- QPs ---- */

/* rdma_init_qp_attr asks the daemon for the attributes of qp_attr->qp_state. */
RVM_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr,
				 int *qp_attr_mask)
{
	struct rvm_id *r = to_rid(id);
	struct rvm_init_qp_attr req = {.qp_state = (uint8_t)qp_attr->qp_state};
	struct rvm_qp_attr a;
	int err = rvm_call(RVM_OP_INIT_QP_ATTR, r->handle, &req, sizeof(req), &a, sizeof(a), NULL);
	if (err)
		return rvm_err(err);
	memset(qp_attr, 0, sizeof(*qp_attr));
	qp_attr->qp_state = a.qp_state;
	qp_attr->cur_qp_state = a.cur_qp_state;
	qp_attr->path_mtu = a.path_mtu;
	qp_attr->path_mig_state = a.path_mig_state;
	qp_attr->qkey = a.qkey;
	qp_attr->rq_psn = a.rq_psn;
	qp_attr->sq_psn = a.sq_psn;
	qp_attr->dest_qp_num = a.dest_qp_num;
	qp_attr->qp_access_flags = a.qp_access_flags;
	qp_attr->cap.max_send_wr = a.max_send_wr;
	qp_attr->cap.max_recv_wr = a.max_recv_wr;
	qp_attr->cap.max_send_sge = a.max_send_sge;
	qp_attr->cap.max_recv_sge = a.max_recv_sge;
	qp_attr->cap.max_inline_data = a.max_inline_data;
	qp_attr->pkey_index = a.pkey_index;
	qp_attr->en_sqd_async_notify = a.en_sqd_async_notify;
	qp_attr->sq_draining = a.sq_draining;
	qp_attr->max_rd_atomic = a.max_rd_atomic;
	qp_attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
	qp_attr->min_rnr_timer = a.min_rnr_timer;
	qp_attr->port_num = a.port_num;
	qp_attr->timeout = a.timeout;
	qp_attr->retry_cnt = a.retry_cnt;
	qp_attr->rnr_retry = a.rnr_retry;
	struct ibv_ah_attr *ah = &qp_attr->ah_attr;
	memcpy(ah->grh.dgid.raw, a.ah.dgid, 16);
	ah->grh.flow_label = a.ah.flow_label;
	ah->grh.sgid_index = a.ah.sgid_index;
	ah->grh.hop_limit = a.ah.hop_limit;
	ah->grh.traffic_class = a.ah.traffic_class;
	ah->dlid = a.ah.dlid;
	ah->sl = a.ah.sl;
	ah->static_rate = a.ah.static_rate;
	ah->port_num = a.ah.port_num;
	ah->is_global = a.ah.is_global;
	ah->src_path_bits = a.ah.src_path_bits;
	*qp_attr_mask = (int)a.attr_mask;
	return 0;
}

/* qp_to moves the ID's QP to state with the daemon's attributes; rd >= 0
 * overrides the RTR responder resources or the RTS initiator depth, as
 * librdmacm does with its conn param. */
static int qp_to(struct rvm_id *r, struct ibv_qp *qp, enum ibv_qp_state state, int rd)
{
	struct ibv_qp_attr attr = {.qp_state = state};
	int mask;
	if (rdma_init_qp_attr(&r->id, &attr, &mask))
		return errno;
	if (rd >= 0 && state == IBV_QPS_RTR && (mask & IBV_QP_MAX_DEST_RD_ATOMIC))
		attr.max_dest_rd_atomic = (uint8_t)rd;
	if (rd >= 0 && state == IBV_QPS_RTS && (mask & IBV_QP_MAX_QP_RD_ATOMIC))
		attr.max_rd_atomic = (uint8_t)rd;
	return ibv_modify_qp(qp, &attr, mask);
}

static int init_qp(struct rvm_id *r, struct ibv_qp *qp)
{
	int err = qp_to(r, qp, IBV_QPS_INIT, -1);
	if (!err && qp->qp_type == IBV_QPT_UD) {
		err = qp_to(r, qp, IBV_QPS_RTR, -1);
		if (!err)
			err = qp_to(r, qp, IBV_QPS_RTS, -1);
	}
	return err;
}

static int create_cqs(struct rvm_id *r, struct ibv_qp_init_attr_ex *a)
{
	struct rdma_cm_id *id = &r->id;
	if (!a->recv_cq) {
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq_channel)
			return errno;
		id->recv_cq = ibv_create_cq(id->verbs, a->cap.max_recv_wr ? a->cap.max_recv_wr : 1,
					    id, id->recv_cq_channel, 0);
		if (!id->recv_cq)
			return errno;
		a->recv_cq = id->recv_cq;
		r->own_cqs |= 1;
	}
	if (!a->send_cq) {
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq_channel)
			return errno;
		id->send_cq = ibv_create_cq(id->verbs, a->cap.max_send_wr ? a->cap.max_send_wr : 1,
					    id, id->send_cq_channel, 0);
		if (!id->send_cq)
			return errno;
		a->send_cq = id->send_cq;
		r->own_cqs |= 2;
	}
	return 0;
}

static void destroy_cqs(struct rvm_id *r)
{
	struct rdma_cm_id *id = &r->id;
	if (r->own_cqs & 1) {
		ibv_destroy_cq(id->recv_cq);
		ibv_destroy_comp_channel(id->recv_cq_channel);
		id->recv_cq = NULL;
		id->recv_cq_channel = NULL;
	}
	if (r->own_cqs & 2) {
		ibv_destroy_cq(id->send_cq);
		ibv_destroy_comp_channel(id->send_cq_channel);
		id->send_cq = NULL;
		id->send_cq_channel = NULL;
	}
	r->own_cqs = 0;
}

RVM_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct rvm_id *r = to_rid(id);
	if (!attr || id->qp)
		return rvm_err(EINVAL);
	if (!id->verbs || !r->dev)
		return rvm_err(ENODEV); /* no address bound or resolved yet */
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd ? id->pd : dev_pd(r->dev);
		if (!attr->pd)
			return -1;
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
	}
	if (attr->pd->context != id->verbs)
		return rvm_err(EINVAL);
	int err = create_cqs(r, attr);
	if (err) {
		destroy_cqs(r);
		return rvm_err(err);
	}
	struct ibv_qp *qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp) {
		err = errno;
		destroy_cqs(r);
		return rvm_err(err);
	}
	err = init_qp(r, qp);
	if (err) {
		ibv_destroy_qp(qp);
		destroy_cqs(r);
		return rvm_err(err);
	}
	id->qp = qp;
	if (!id->pd)
		id->pd = attr->pd; /* rdma_reg_msgs and friends use it */
	return 0;
}

RVM_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
			      struct ibv_qp_init_attr *qp_init_attr)
{
	if (!qp_init_attr)
		return rvm_err(EINVAL);
	struct ibv_qp_init_attr_ex ax;
	memset(&ax, 0, sizeof(ax));
	memcpy(&ax, qp_init_attr, sizeof(*qp_init_attr));
	ax.comp_mask = pd ? IBV_QP_INIT_ATTR_PD : 0;
	ax.pd = pd;
	int ret = rdma_create_qp_ex(id, &ax);
	if (ret)
		return ret;
	qp_init_attr->send_cq = ax.send_cq;
	qp_init_attr->recv_cq = ax.recv_cq;
	qp_init_attr->srq = ax.srq;
	qp_init_attr->cap = ax.cap;
	return 0;
}

RVM_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (!id || !id->qp)
		return;
	ibv_destroy_qp(id->qp);
	id->qp = NULL;
	destroy_cqs(to_rid(id));
}

/* ---- connections ---- */

static uint8_t cap_rd(uint8_t want, int max)
{
	if (want == RDMA_MAX_RESP_RES || want > max)
		return (uint8_t)(max > 0xfe ? 0xfe : max);
	return want;
}

static int send_conn(uint16_t op, struct rvm_id *r, const struct rdma_conn_param *p,
		     uint8_t resp, uint8_t depth)
{
	uint8_t buf[sizeof(struct rvm_conn_param) + RVM_PRIVATE_MAX];
	struct rvm_conn_param *c = (void *)buf;
	memset(c, 0, sizeof(*c));
	c->responder_resources = resp;
	c->initiator_depth = depth;
	c->retry_count = p ? p->retry_count : 7;
	c->rnr_retry_count = p ? p->rnr_retry_count : 7;
	c->flow_control = p ? p->flow_control : 1;
	c->srq = p ? !!p->srq : 0;
	if (r->id.qp) {
		c->qp_num = r->id.qp->qp_num;
		c->srq = r->id.qp->srq != NULL;
	} else if (p)
		c->qp_num = p->qp_num;
	size_t plen = 0;
	if (p && p->private_data && p->private_data_len) {
		plen = p->private_data_len;
		if (plen > RVM_PRIVATE_MAX)
			return EINVAL;
		memcpy(buf + sizeof(*c), p->private_data, plen);
	}
	return rvm_call(op, r->handle, buf, sizeof(*c) + plen, NULL, 0, NULL);
}

RVM_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct rvm_id *r = to_rid(id);
	int maxr = r->dev ? r->dev->attr.max_qp_rd_atom : 16;
	int maxi = r->dev ? r->dev->attr.max_qp_init_rd_atom : 16;
	r->resp_res = conn_param ? cap_rd(conn_param->responder_resources, maxr) : (uint8_t)maxr;
	r->init_depth = conn_param ? cap_rd(conn_param->initiator_depth, maxi) : (uint8_t)maxi;
	int err = send_conn(RVM_OP_CONNECT, r, conn_param, r->resp_res, r->init_depth);
	if (err)
		return rvm_err(err);
	return sync_wait(r, RDMA_CM_EVENT_ESTABLISHED); /* RC and UD (the SIDR_REP) alike */
}

RVM_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct rvm_id *r = to_rid(id);
	uint8_t resp = r->resp_res, depth = r->init_depth;
	if (conn_param) {
		if (conn_param->responder_resources != RDMA_MAX_RESP_RES &&
		    conn_param->responder_resources < resp)
			resp = conn_param->responder_resources;
		if (conn_param->initiator_depth != RDMA_MAX_INIT_DEPTH &&
		    conn_param->initiator_depth < depth)
			depth = conn_param->initiator_depth;
	}
	int ud = id->qp_type == IBV_QPT_UD || id->ps == RDMA_PS_UDP || id->ps == RDMA_PS_IPOIB;
	if (id->qp && !ud) {
		int err = qp_to(r, id->qp, IBV_QPS_RTR, resp);
		if (!err)
			err = qp_to(r, id->qp, IBV_QPS_RTS, depth);
		if (err)
			return rvm_err(err);
	}
	int err = send_conn(RVM_OP_ACCEPT, r, conn_param, resp, depth);
	if (err) {
		if (id->qp && !ud) {
			struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
			ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
		}
		return rvm_err(err);
	}
	if (ud)
		return 0;
	return sync_wait(r, RDMA_CM_EVENT_ESTABLISHED);
}

RVM_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data,
			   uint8_t private_data_len)
{
	struct rvm_id *r = to_rid(id);
	uint8_t buf[sizeof(struct rvm_reject) + RVM_PRIVATE_MAX] = {0};
	if (private_data && private_data_len)
		memcpy(buf + sizeof(struct rvm_reject), private_data, private_data_len);
	size_t n = sizeof(struct rvm_reject) + (private_data ? private_data_len : 0);
	return rvm_err(rvm_call(RVM_OP_REJECT, r->handle, buf, n, NULL, 0, NULL));
}

RVM_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	struct rvm_id *r = to_rid(id);
	if (id->qp) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
		int err = ibv_modify_qp(id->qp, &a, IBV_QP_STATE);
		if (err)
			return rvm_err(err);
	}
	return rvm_err(rvm_call(RVM_OP_DISCONNECT, r->handle, NULL, 0, NULL, 0, NULL));
}

RVM_EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	if (id->qp)
		return rvm_err(EINVAL); /* librdmacm: only for an ID without a QP */
	struct rvm_id *r = to_rid(id);
	pthread_mutex_lock(&rvm_lock);
	r->drop_established = 1;
	pthread_mutex_unlock(&rvm_lock);
	int err = rvm_call(RVM_OP_ESTABLISH, r->handle, NULL, 0, NULL, 0, NULL);
	if (err) {
		pthread_mutex_lock(&rvm_lock);
		r->drop_established = 0;
		pthread_mutex_unlock(&rvm_lock);
	}
	return rvm_err(err);
}

RVM_EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	struct rvm_u32 req = {.v = (uint32_t)event};
	return rvm_err(rvm_call(RVM_OP_NOTIFY, to_rid(id)->handle, &req, sizeof(req), NULL, 0, NULL));
}

RVM_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval,
			       size_t optlen)
{
	struct rvm_set_option req = {.level = (uint32_t)level, .optname = (uint32_t)optname};
	if (!optval)
		return rvm_err(EINVAL);
	switch (optlen) {
	case 1: req.value = *(uint8_t *)optval; break;
	case 2: req.value = *(uint16_t *)optval; break;
	case 4: req.value = *(uint32_t *)optval; break;
	case 8: req.value = *(uint64_t *)optval; break;
	default: return rvm_err(EINVAL);
	}
	return rvm_err(rvm_call(RVM_OP_SET_OPTION, to_rid(id)->handle, &req, sizeof(req), NULL, 0, NULL));
}

static int migrate(struct rvm_id *r, struct rdma_event_channel *channel, int wait)
{
	struct rdma_cm_id *id = &r->id;
	int sync = 0;
	if (!channel) {
		channel = rdma_create_event_channel();
		if (!channel)
			return -1;
		sync = 1;
	}
	if (wait) {
		if (r->sync_ev) {
			rdma_ack_cm_event(r->sync_ev);
			r->sync_ev = NULL;
			r->id.event = NULL;
		}
		(void)wait_acked(r);
	}
	struct rvm_u32 req = {.v = rvm_container_of(channel, struct rvm_channel, ch)->handle};
	struct rvm_u32 rep;
	int err = rvm_call(RVM_OP_MIGRATE_ID, r->handle, &req, sizeof(req), &rep, sizeof(rep), NULL);
	if (err) {
		if (sync)
			rdma_destroy_event_channel(channel);
		return rvm_err(err);
	}
	struct rdma_event_channel *old = id->channel;
	id->channel = channel;
	if (r->sync)
		rdma_destroy_event_channel(old);
	r->sync = sync;
	return 0;
}

RVM_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	return migrate(to_rid(id), channel, 1);
}

/* rdma_join_multicast, rdma_join_multicast_ex, rdma_leave_multicast: mcast.c. */
int rvm_sync_wait(struct rvm_id *r, enum rdma_cm_event_type want) { return sync_wait(r, want); }

/* ---- events ---- */

static void conn_param_of(struct rvm_evt *e, const struct rvm_event *w)
{
	struct rdma_conn_param *c = &e->ev.param.conn;
	c->private_data = w->private_data_len ? e->pdata : NULL;
	c->private_data_len = w->private_data_len;
	c->responder_resources = w->responder_resources;
	c->initiator_depth = w->initiator_depth;
	c->flow_control = w->flow_control;
	c->retry_count = w->retry_count;
	c->rnr_retry_count = w->rnr_retry_count;
	c->srq = w->srq;
	c->qp_num = w->qp_num;
}

static void ud_param_of(struct rvm_evt *e, const struct rvm_event *w)
{
	struct rdma_ud_param *u = &e->ev.param.ud;
	u->private_data = w->private_data_len ? e->pdata : NULL;
	u->private_data_len = w->private_data_len;
	u->qp_num = w->qp_num;
	u->qkey = w->qkey;
	struct ibv_ah_attr *ah = &u->ah_attr;
	memcpy(ah->grh.dgid.raw, w->ah.dgid, 16);
	ah->grh.flow_label = w->ah.flow_label;
	ah->grh.sgid_index = w->ah.sgid_index;
	ah->grh.hop_limit = w->ah.hop_limit;
	ah->grh.traffic_class = w->ah.traffic_class;
	ah->dlid = w->ah.dlid;
	ah->sl = w->ah.sl;
	ah->static_rate = w->ah.static_rate;
	ah->port_num = w->ah.port_num;
	ah->is_global = w->ah.is_global;
	ah->src_path_bits = w->ah.src_path_bits;
}

/* connect_response: librdmacm's order for an active ID with a QP: RTR, RTS,
 * cm_establish; the daemon's ESTABLISHED record follows. */
static int connect_response(struct rvm_id *r)
{
	int err = qp_to(r, r->id.qp, IBV_QPS_RTR, r->resp_res);
	if (!err)
		err = qp_to(r, r->id.qp, IBV_QPS_RTS, r->init_depth);
	if (!err)
		err = rvm_call(RVM_OP_ESTABLISH, r->handle, NULL, 0, NULL, 0, NULL);
	return err;
}

static void undeliver(struct rvm_id *a, struct rvm_id *b)
{
	pthread_mutex_lock(&rvm_lock);
	if (a)
		a->acked++;
	if (b)
		b->acked++;
	pthread_cond_broadcast(&rvm_cond);
	pthread_mutex_unlock(&rvm_lock);
}

RVM_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	if (!channel || !event)
		return rvm_err(EINVAL);
	struct rvm_channel *c = rvm_container_of(channel, struct rvm_channel, ch);
	uint8_t buf[RVM_EVENT_SIZE + 1];
	for (;;) {
		/* A thread that comes here after the channel's destroy (rping's
		 * CM thread, between two events when its program tears down)
		 * blocks as one that was reading during the destroy does (see
		 * rdma_destroy_event_channel): its descriptor is closed, and
		 * its number may be another file's by now. */
		while (c->destroyed)
			pause(); /* a cancellation point, as the kernel's read */
		ssize_t n = read(channel->fd, buf, sizeof(buf));
		if (n < 0) {
			if (errno == EINTR || c->destroyed)
				continue;
			return -1;
		}
		if (n == 0) {
			if (c->destroyed)
				continue;
			return rvm_err(ENODEV); /* the daemon ended the channel */
		}
		struct rvm_event w;
		if (rvm_decode_event(buf, (size_t)n, &w)) {
			rvm_warn("dropped a malformed cm_event record (%zd bytes)", n);
			continue;
		}
		struct rvm_evt *e = calloc(1, sizeof(*e));
		if (!e)
			return rvm_err(ENOMEM);
		memcpy(e->pdata, w.private_data, sizeof(e->pdata));
		e->ev.event = w.event;
		e->ev.status = w.status;
		struct rvm_id *r = NULL, *l = NULL;
		pthread_mutex_lock(&rvm_lock);
		if (w.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			l = reg_find_locked(w.listen_id);
			if (l && (uint64_t)(uintptr_t)&l->id == w.context && !reg_find_locked(w.id))
				l->delivered++;
			else
				l = NULL;
		} else {
			/* By handle: an ID made for a request carries its
			 * listener's context in every record. */
			r = reg_find_locked(w.id);
			if (r && w.event == RDMA_CM_EVENT_ESTABLISHED && r->drop_established) {
				r->drop_established = 0;
				r = NULL; /* dropped below */
			} else if (r)
				r->delivered++;
		}
		pthread_mutex_unlock(&rvm_lock);
		if (w.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			if (!l) {
				/* For a listener destroyed meanwhile: the daemon's new ID
				 * is nobody's (its destroy rejects the request). */
				struct rvm_u32 rep;
				rvm_call(RVM_OP_DESTROY_ID, w.id, NULL, 0, &rep, sizeof(rep), NULL);
				free(e);
				continue;
			}
			r = new_id(l->id.channel, l->id.context, l->id.ps, l->id.qp_type, w.id);
			int err = r ? query(r) : ENOMEM;
			if (err) {
				rvm_warn("cannot take a connection request: %s", strerror(err));
				struct rvm_u32 rep;
				rvm_call(RVM_OP_DESTROY_ID, w.id, NULL, 0, &rep, sizeof(rep), NULL);
				free(r);
				free(e);
				undeliver(l, NULL);
				continue;
			}
			int maxr = r->dev ? r->dev->attr.max_qp_rd_atom : 16;
			int maxi = r->dev ? r->dev->attr.max_qp_init_rd_atom : 16;
			r->resp_res = w.initiator_depth < maxr ? w.initiator_depth : (uint8_t)maxr;
			r->init_depth = w.responder_resources < maxi ? w.responder_resources : (uint8_t)maxi;
			/* The request counts against the listener only, as over
			 * the kernel: a program may reject and destroy the new ID
			 * before it acknowledges the event. */
			reg_add(r);
			e->listen = l;
			e->ev.listen_id = &l->id;
			if (w.ud)
				ud_param_of(e, &w);
			else
				conn_param_of(e, &w);
		} else {
			if (!r) {
				free(e); /* about an ID destroyed meanwhile */
				continue;
			}
			switch (w.event) {
			case RDMA_CM_EVENT_ADDR_RESOLVED:
			case RDMA_CM_EVENT_ROUTE_RESOLVED: {
				int err = query(r);
				if (err) {
					e->ev.event = w.event == RDMA_CM_EVENT_ADDR_RESOLVED
							      ? RDMA_CM_EVENT_ADDR_ERROR
							      : RDMA_CM_EVENT_ROUTE_ERROR;
					e->ev.status = -err;
				}
				break;
			}
			case RDMA_CM_EVENT_CONNECT_RESPONSE:
				if (r->id.qp) {
					if (!r->rep)
						r->rep = malloc(sizeof(*r->rep));
					int err = r->rep ? connect_response(r) : ENOMEM;
					if (!err) {
						*r->rep = w;
						/* ESTABLISHED follows: hand that one. */
						free(e);
						undeliver(r, NULL);
						continue;
					}
					e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
					e->ev.status = -err;
				}
				conn_param_of(e, &w);
				break;
			case RDMA_CM_EVENT_ESTABLISHED:
				if (r->rep && !w.ud) {
					/* The daemon's ESTABLISHED after cm_establish
					 * carries no REP data: the response's. */
					if (!w.private_data_len)
						memcpy(e->pdata, r->rep->private_data, sizeof(e->pdata));
					conn_param_of(e, w.private_data_len ? &w : r->rep);
					free(r->rep);
					r->rep = NULL;
					break;
				}
				if (w.ud)
					ud_param_of(e, &w);
				else
					conn_param_of(e, &w);
				break;
			case RDMA_CM_EVENT_MULTICAST_JOIN:
			case RDMA_CM_EVENT_MULTICAST_ERROR:
				ud_param_of(e, &w);
				if (rvm_mc_event(r, &e->ev, &w, &e->mc)) {
					free(e); /* about a group left meanwhile */
					undeliver(r, NULL);
					continue;
				}
				break;
			case RDMA_CM_EVENT_UNREACHABLE:
			case RDMA_CM_EVENT_REJECTED:
			case RDMA_CM_EVENT_DISCONNECTED:
			case RDMA_CM_EVENT_CONNECT_ERROR:
				if (w.ud || r->id.qp_type == IBV_QPT_UD)
					ud_param_of(e, &w);
				else
					conn_param_of(e, &w);
				break;
			default:
				break;
			}
		}
		if (w.event != RDMA_CM_EVENT_CONNECT_REQUEST)
			e->id = r;
		e->ev.id = &r->id;
		if (getenv("RVM_DEBUG"))
			rvm_warn("deliver %s id %u (%u/%u)", rdma_event_str(e->ev.event), r->handle,
				 r->delivered, r->acked);
		*event = &e->ev;
		return 0;
	}
}

RVM_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return rvm_err(EINVAL);
	struct rvm_evt *e = rvm_container_of(event, struct rvm_evt, ev);
	if (getenv("RVM_DEBUG"))
		rvm_warn("ack %s id %p", rdma_event_str(event->event), (void *)e->id);
	if (e->mc)
		rvm_mc_acked(e->mc);
	undeliver(e->id, e->listen);
	free(e);
	return 0;
}

RVM_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED",	  "RDMA_CM_EVENT_ADDR_ERROR",
		"RDMA_CM_EVENT_ROUTE_RESOLVED",	  "RDMA_CM_EVENT_ROUTE_ERROR",
		"RDMA_CM_EVENT_CONNECT_REQUEST",  "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR",	  "RDMA_CM_EVENT_UNREACHABLE",
		"RDMA_CM_EVENT_REJECTED",	  "RDMA_CM_EVENT_ESTABLISHED",
		"RDMA_CM_EVENT_DISCONNECTED",	  "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN",	  "RDMA_CM_EVENT_MULTICAST_ERROR",
		"RDMA_CM_EVENT_ADDR_CHANGE",	  "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	if ((unsigned)event < sizeof(names) / sizeof(names[0]))
		return names[event];
	return "UNKNOWN EVENT";
}

RVM_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return NULL;
	struct ibv_context **out = calloc((size_t)n + 1, sizeof(*out));
	int k = 0;
	for (int i = 0; out && i < n; i++) {
		struct rvm_dev *d = rvm_dev_get(ibv_get_device_name(list[i]));
		if (d)
			out[k++] = d->ctx;
	}
	ibv_free_device_list(list);
	if (num_devices)
		*num_devices = k;
	if (!out)
		errno = ENOMEM;
	return out;
}

RVM_EXPORT void rdma_free_devices(struct ibv_context **list) { free(list); }

RVM_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	struct sockaddr *sa = &id->route.addr.src_addr;
	if (sa->sa_family == AF_INET6)
		return id->route.addr.src_sin6.sin6_port;
	return id->route.addr.src_sin.sin_port;
}

RVM_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	struct sockaddr *sa = &id->route.addr.dst_addr;
	if (sa->sa_family == AF_INET6)
		return id->route.addr.dst_sin6.sin6_port;
	return id->route.addr.dst_sin.sin_port;
}

/* ---- librdmacm 1.3: ECE is not served ---- */

RVM_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	return rvm_err(EOPNOTSUPP);
}

RVM_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	return rvm_err(EOPNOTSUPP);
}

RVM_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
			       uint8_t private_data_len)
{
	return rvm_err(EOPNOTSUPP);
}

/* ---- endpoints (synchronous IDs): rdma_create_ep and friends ---- */

RVM_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res,
			      struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id || !res)
		return rvm_err(EINVAL);
	struct rdma_cm_id *cid;
	enum ibv_qp_type qpt = res->ai_qp_type ? (enum ibv_qp_type)res->ai_qp_type
					       : ps_qp_type((enum rdma_port_space)res->ai_port_space);
	if (create_id(NULL, &cid, NULL, (enum rdma_port_space)res->ai_port_space, qpt))
		return -1;
	struct rvm_id *r = to_rid(cid);
	int ret;
	if (qp_init_attr)
		qp_init_attr->qp_type = qpt; /* as librdmacm: the addrinfo's */
	if (res->ai_flags & RAI_PASSIVE) {
		ret = rdma_bind_addr(cid, res->ai_src_addr);
		if (!ret && qp_init_attr) {
			r->listen_qp_attr = malloc(sizeof(*qp_init_attr));
			if (!r->listen_qp_attr)
				ret = rvm_err(ENOMEM);
			else
				*r->listen_qp_attr = *qp_init_attr;
		}
		cid->pd = pd;
	} else {
		ret = rdma_resolve_addr(cid, res->ai_src_addr, res->ai_dst_addr, 2000);
		if (!ret)
			ret = rdma_resolve_route(cid, 2000);
		if (!ret) {
			cid->pd = pd;
			if (qp_init_attr)
				ret = rdma_create_qp(cid, pd, qp_init_attr);
		}
	}
	if (ret) {
		int e = errno;
		rdma_destroy_id(cid);
		return rvm_err(e);
	}
	*id = cid;
	return 0;
}

RVM_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

RVM_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct rvm_id *l = to_rid(listen);
	if (!l->sync || !id)
		return rvm_err(EINVAL);
	for (;;) {
		struct rdma_cm_event *ev;
		if (rdma_get_cm_event(listen->channel, &ev))
			return -1;
		if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
			int st = ev->status;
			rdma_ack_cm_event(ev);
			if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL)
				return rvm_err(ENODEV);
			(void)st;
			continue;
		}
		struct rdma_cm_id *nid = ev->id;
		struct rvm_id *r = to_rid(nid);
		/* The request's ID becomes synchronous on a channel of its own. */
		if (migrate(r, NULL, 0)) {
			int e = errno;
			rdma_ack_cm_event(ev);
			rdma_reject(nid, NULL, 0);
			rdma_destroy_id(nid);
			return rvm_err(e);
		}
		r->sync = 1;
		r->sync_ev = ev;
		nid->event = ev;
		nid->pd = listen->pd;
		if (l->listen_qp_attr) {
			struct ibv_qp_init_attr a = *l->listen_qp_attr;
			if (rdma_create_qp(nid, listen->pd, &a)) {
				int e = errno;
				rdma_reject(nid, NULL, 0);
				rdma_destroy_id(nid);
				return rvm_err(e);
			}
		}
		*id = nid;
		return 0;
	}
}

