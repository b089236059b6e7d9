/* Devices and contexts: ibv_get_device_list asks rvtd; each ibv_context is
 * one session with its own socket. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>
#include "internal.h"

#define RVC_SYSFS_PREFIX "/rvtd-device/"

int rvc_live_add(struct rvc_context *rc, uint32_t kind, uint32_t handle, void *obj)
{
	pthread_mutex_lock(&rc->live_lock);
	if (rc->nlive == rc->caplive) {
		size_t n = rc->caplive ? 2 * rc->caplive : 16;
		struct rvc_live *l = realloc(rc->live, n * sizeof(*l));
		if (!l) {
			pthread_mutex_unlock(&rc->live_lock);
			return ENOMEM;
		}
		rc->live = l;
		rc->caplive = n;
	}
	rc->live[rc->nlive++] = (struct rvc_live){handle, kind, obj};
	pthread_mutex_unlock(&rc->live_lock);
	return 0;
}

void rvc_live_del(struct rvc_context *rc, uint32_t kind, uint32_t handle)
{
	pthread_mutex_lock(&rc->live_lock);
	for (size_t i = 0; i < rc->nlive; i++)
		if (rc->live[i].handle == handle && rc->live[i].kind == kind) {
			rc->live[i] = rc->live[--rc->nlive];
			break;
		}
	pthread_mutex_unlock(&rc->live_lock);
}

void *rvc_live_get_locked(struct rvc_context *rc, uint32_t kind, uint32_t handle)
{
	for (size_t i = 0; i < rc->nlive; i++)
		if (rc->live[i].handle == handle && rc->live[i].kind == kind)
			return rc->live[i].obj;
	return NULL;
}

static void device_put(struct rvc_device *d)
{
	if (__atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) == 0)
		free(d);
}

RVC_EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	struct rvc_conn c;
	int err = rvc_connect(&c, 0);
	if (err) {
		errno = err == ENOENT || err == ECONNREFUSED ? ENOSYS : err;
		if (num)
			*num = 0;
		return NULL;
	}
	size_t cap = RVC_MAX_MESSAGE;
	uint8_t *body = malloc(cap);
	struct rvc_reply rep;
	if (!body) {
		rvc_disconnect(&c);
		errno = ENOMEM;
		return NULL;
	}
	err = rvc_call(&c, RVC_OP_LIST_DEVICES, 0, NULL, 0, NULL, 0, body, 0,
		       sizeof(struct rvc_dev_entry), cap, 0, &rep);
	rvc_disconnect(&c);
	if (err) {
		free(body);
		rvc_warn("list_devices: %s", strerror(err));
		errno = err;
		return NULL;
	}
	int n = (int)(rep.len / sizeof(struct rvc_dev_entry));
	struct ibv_device **list = calloc((size_t)n + 1, sizeof(*list));
	if (!list) {
		free(body);
		errno = ENOMEM;
		return NULL;
	}
	int k = 0;
	for (int i = 0; i < n; i++) {
		struct rvc_dev_entry e;
		memcpy(&e, body + i * sizeof(e), sizeof(e));
		if (!rvc_cstr_ok(e.name, sizeof(e.name)))
			continue;
		struct rvc_device *d = calloc(1, sizeof(*d));
		if (!d)
			break;
		d->refs = 1;
		d->node_guid = e.node_guid;
		d->dev.node_type = (enum ibv_node_type)e.node_type;
		d->dev.transport_type = (enum ibv_transport_type)e.transport_type;
		snprintf(d->dev.name, sizeof(d->dev.name), "%s", e.name);
		snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "%s", e.name);
		snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), RVC_SYSFS_PREFIX "%s", e.name);
		snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), RVC_SYSFS_PREFIX "%s", e.name);
		list[k++] = &d->dev;
	}
	free(body);
	if (num)
		*num = k;
	return list;
}

RVC_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
	if (!list)
		return;
	for (struct ibv_device **p = list; *p; p++)
		device_put(rvc_container_of(*p, struct rvc_device, dev));
	free(list);
}

RVC_EXPORT const char *ibv_get_device_name(struct ibv_device *dev)
{
	return dev->name;
}

RVC_EXPORT __be64 ibv_get_device_guid(struct ibv_device *dev)
{
	/* On the wire the GUID is a number whose most significant byte is
	 * the GUID's first; libibverbs hands it out in network order. */
	return htobe64(rvc_container_of(dev, struct rvc_device, dev)->node_guid);
}

RVC_EXPORT int ibv_get_device_index(struct ibv_device *dev)
{
	(void)dev;
	return -1;
}

static int rvc_query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr,
			     size_t len);
static int rvc_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
			       struct ibv_device_attr_ex *attr, size_t len);

RVC_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	struct rvc_device *rd = rvc_container_of(dev, struct rvc_device, dev);
	struct rvc_context *rc = calloc(1, sizeof(*rc));
	if (!rc) {
		errno = ENOMEM;
		return NULL;
	}
	int err = rvc_connect(&rc->conn, 0);
	if (err) {
		free(rc);
		errno = err;
		return NULL;
	}
	struct rvc_name req;
	memset(&req, 0, sizeof(req));
	snprintf(req.name, sizeof(req.name), "%s", dev->name);
	struct rvc_handle_reply hr;
	struct rvc_reply rep;
	err = rvc_call(&rc->conn, RVC_OP_OPEN_DEVICE, 0, &req, sizeof(req), NULL, 0, &hr,
		       sizeof(hr), 0, 0, 1, &rep);
	if (err) {
		rvc_warn("open_device %s: %s", dev->name, strerror(err));
		rvc_disconnect(&rc->conn);
		free(rc);
		errno = err;
		return NULL;
	}
	rc->dev_handle = hr.handle;
	__atomic_add_fetch(&rd->refs, 1, __ATOMIC_ACQ_REL);
	rc->rdev = rd;
	pthread_mutex_init(&rc->mr_lock, NULL);
	pthread_mutex_init(&rc->live_lock, NULL);

	struct verbs_context *v = &rc->vctx;
	struct ibv_context *ctx = &v->context;
	v->sz = sizeof(*v);
	v->query_port = rvc_query_port_ex;
	v->query_device_ex = rvc_query_device_ex;
	v->create_qp_ex = rvc_create_qp_ex;
	v->create_cq_ex = rvc_create_cq_ex;
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->device = dev;
	ctx->cmd_fd = rc->conn.fd;
	ctx->async_fd = rep.fds[0];
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->ops.poll_cq = rvc_poll_cq;
	ctx->ops.req_notify_cq = rvc_req_notify_cq;
	ctx->ops.post_send = rvc_post_send;
	ctx->ops.post_recv = rvc_post_recv;
	ctx->ops.post_srq_recv = rvc_post_srq_recv;
	ctx->ops.alloc_mw = rvc_alloc_mw;
	ctx->ops.dealloc_mw = rvc_dealloc_mw;
	ctx->ops.bind_mw = rvc_bind_mw;
	return ctx;
}

RVC_EXPORT int ibv_close_device(struct ibv_context *ctx)
{
	struct rvc_context *rc = to_rctx(ctx);
	rvc_call(&rc->conn, RVC_OP_CLOSE_DEVICE, rc->dev_handle, NULL, 0, NULL, 0, NULL, 0, 0, 0, 0, NULL);
	rvc_release_segments(rc);
	close(ctx->async_fd);
	rvc_disconnect(&rc->conn);
	pthread_mutex_destroy(&ctx->mutex);
	pthread_mutex_destroy(&rc->mr_lock);
	pthread_mutex_destroy(&rc->live_lock);
	free(rc->live);
	device_put(rc->rdev);
	free(rc);
	return 0;
}

RVC_EXPORT int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	struct rvc_context *rc = to_rctx(ctx);
	struct rvc_query_device_reply r;
	int err = rvc_call(&rc->conn, RVC_OP_QUERY_DEVICE, rc->dev_handle, NULL, 0, NULL, 0, &r,
			   sizeof(r), 0, 0, 0, NULL);
	if (err)
		return err;
	memset(a, 0, sizeof(*a));
	if (rvc_cstr_ok(r.fw_ver, sizeof(r.fw_ver)))
		snprintf(a->fw_ver, sizeof(a->fw_ver), "%s", r.fw_ver);
	a->node_guid = htobe64(r.node_guid);
	a->sys_image_guid = htobe64(r.sys_image_guid);
	a->max_mr_size = r.max_mr_size;
	a->page_size_cap = r.page_size_cap;
	a->vendor_id = r.vendor_id;
	a->vendor_part_id = r.vendor_part_id;
	a->hw_ver = r.hw_ver;
	a->max_qp = (int)r.max_qp;
	a->max_qp_wr = (int)r.max_qp_wr;
	a->device_cap_flags = r.device_cap_flags;
	a->max_sge = (int)r.max_sge;
	a->max_sge_rd = (int)r.max_sge_rd;
	a->max_cq = (int)r.max_cq;
	a->max_cqe = (int)r.max_cqe;
	a->max_mr = (int)r.max_mr;
	a->max_pd = (int)r.max_pd;
	a->max_qp_rd_atom = (int)r.max_qp_rd_atom;
	a->max_ee_rd_atom = 0;
	a->max_res_rd_atom = (int)r.max_res_rd_atom;
	a->max_qp_init_rd_atom = (int)r.max_qp_init_rd_atom;
	a->atomic_cap = (enum ibv_atomic_cap)r.atomic_cap;
	a->max_mw = (int)r.max_mw;
	a->max_ah = (int)r.max_ah;
	a->max_srq = (int)r.max_srq;
	a->max_srq_wr = (int)r.max_srq_wr;
	a->max_srq_sge = (int)r.max_srq_sge;
	a->max_mcast_grp = (int)r.max_mcast_grp;
	a->max_mcast_qp_attach = (int)r.max_mcast_qp_attach;
	a->max_total_mcast_qp_attach = (int)r.max_total_mcast_qp_attach;
	a->max_pkeys = r.max_pkeys;
	a->local_ca_ack_delay = r.local_ca_ack_delay;
	a->phys_port_cnt = r.phys_port_cnt;
	return 0;
}

static int rvc_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
			       struct ibv_device_attr_ex *attr, size_t len)
{
	(void)in;
	struct ibv_device_attr_ex a;
	memset(&a, 0, sizeof(a));
	int err = ibv_query_device(ctx, &a.orig_attr);
	if (err)
		return err;
	a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

static int query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a)
{
	struct rvc_context *rc = to_rctx(ctx);
	struct rvc_port_req req = {.port_num = port};
	struct rvc_query_port_reply r;
	int err = rvc_call(&rc->conn, RVC_OP_QUERY_PORT, rc->dev_handle, &req, sizeof(req), NULL, 0,
			   &r, sizeof(r), 0, 0, 0, NULL);
	if (err)
		return err;
	memset(a, 0, sizeof(*a));
	a->state = (enum ibv_port_state)r.state;
	a->max_mtu = (enum ibv_mtu)r.max_mtu;
	a->active_mtu = (enum ibv_mtu)r.active_mtu;
	a->gid_tbl_len = (int)r.gid_tbl_len;
	a->port_cap_flags = r.port_cap_flags;
	a->max_msg_sz = r.max_msg_sz;
	a->pkey_tbl_len = r.pkey_tbl_len;
	a->lid = r.lid;
	a->sm_lid = r.sm_lid;
	a->lmc = r.lmc;
	a->max_vl_num = 1;
	a->active_width = r.active_width;
	a->active_speed = r.active_speed;
	a->phys_state = r.phys_state;
	a->link_layer = r.link_layer;
	return 0;
}

static int rvc_query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr,
			     size_t len)
{
	struct ibv_port_attr a;
	int err = query_port(ctx, port, &a);
	if (err)
		return err;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

/* The exported symbol, reached when a program was built against headers
 * without verbs_context query_port (the inline wrapper zeroes the whole
 * struct first). */
#undef ibv_query_port
RVC_EXPORT int ibv_query_port(struct ibv_context *ctx, uint8_t port,
			      struct _compat_ibv_port_attr *attr)
{
	return query_port(ctx, port, (struct ibv_port_attr *)(void *)attr);
}

static int query_gid(struct ibv_context *ctx, uint32_t port, uint32_t index,
		     struct rvc_query_gid_reply *r)
{
	struct rvc_context *rc = to_rctx(ctx);
	struct rvc_index_req req = {.port_num = (uint8_t)port, .index = index};
	if (port > 255)
		return EINVAL;
	return rvc_call(&rc->conn, RVC_OP_QUERY_GID, rc->dev_handle, &req, sizeof(req), NULL, 0, r,
			sizeof(*r), 0, 0, 0, NULL);
}

/* The daemon answers EINVAL for an index past the table (gid_tbl_len) or
 * a port that is not 1, as the kernel does; its table has no empty slots,
 * whose ENODATA ibv_query_gid would read as zeros. */
RVC_EXPORT int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	struct rvc_query_gid_reply r;
	if (index < 0) {
		errno = EINVAL;
		return -1;
	}
	int err = query_gid(ctx, port, (uint32_t)index, &r);
	if (err == ENODATA) {
		memset(gid, 0, sizeof(*gid));
		return 0;
	}
	if (err) {
		errno = err;
		return -1;
	}
	memcpy(gid->raw, r.gid, 16);
	return 0;
}

RVC_EXPORT int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
				 struct ibv_gid_entry *entry, uint32_t flags, size_t size)
{
	struct rvc_query_gid_reply r;
	if (flags)
		return EINVAL;
	int err = query_gid(ctx, port, index, &r);
	if (err)
		return err;
	struct ibv_gid_entry e;
	memset(&e, 0, sizeof(e));
	memcpy(e.gid.raw, r.gid, 16);
	e.gid_index = index;
	e.port_num = port;
	e.gid_type = r.gid_type;
	memcpy(entry, &e, size < sizeof(e) ? size : sizeof(e));
	return 0;
}

RVC_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries,
					size_t max, uint32_t flags, size_t size)
{
	struct ibv_port_attr pa;
	if (flags)
		return -EINVAL;
	int err = query_port(ctx, 1, &pa);
	if (err)
		return -err;
	size_t n = 0;
	for (int i = 0; i < pa.gid_tbl_len && n < max; i++) {
		struct ibv_gid_entry e;
		if (_ibv_query_gid_ex(ctx, 1, (uint32_t)i, &e, 0, sizeof(e)))
			continue;
		memcpy((char *)entries + n * size, &e, size < sizeof(e) ? size : sizeof(e));
		n++;
	}
	return (ssize_t)n;
}

/* IBVERBS_PRIVATE_34: ibv_devinfo asks each GID's type this way. Values of
 * rdma-core's enum ibv_gid_type_sysfs: 0 IB/RoCE v1, 1 RoCE v2. */
RVC_EXPORT int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index,
				  int *type)
{
	struct rvc_query_gid_reply r;
	int err = query_gid(ctx, port, index, &r);
	if (err) {
		errno = err;
		return -1;
	}
	*type = r.gid_type == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;
	return 0;
}

RVC_EXPORT int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	struct rvc_context *rc = to_rctx(ctx);
	struct rvc_index_req req = {.port_num = port, .index = (uint32_t)index};
	struct rvc_query_pkey_reply r;
	if (index < 0)
		return -1;
	int err = rvc_call(&rc->conn, RVC_OP_QUERY_PKEY, rc->dev_handle, &req, sizeof(req), NULL, 0,
			   &r, sizeof(r), 0, 0, 0, NULL);
	if (err) {
		errno = err;
		return -1;
	}
	*pkey = htobe16(r.pkey);
	return 0;
}

RVC_EXPORT int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	__be16 p;
	if (ibv_query_pkey(ctx, port, 0, &p) == 0 && p == pkey)
		return 0;
	return -1;
}

/* No sysfs behind rvtd devices: reads under their paths find nothing; other
 * paths are read as rdma-core does (relative to /sys). */
RVC_EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char path[512];
	if (!strncmp(dir, RVC_SYSFS_PREFIX, strlen(RVC_SYSFS_PREFIX))) {
		errno = ENOENT;
		return -1;
	}
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size);
	close(fd);
	if (n <= 0)
		return -1;
	if ((size_t)n < size)
		buf[n] = 0;
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = 0;
	return (int)n;
}

static uint32_t event_kind(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_CQ_ERR:
		return RVC_K_CQ;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return RVC_K_QP;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return RVC_K_SRQ;
	default:
		return 0; /* port and device events */
	}
}

/* Asynchronous events: one 16-byte record per read of the async socket.
 * An event about an object destroyed since is dropped; one handed out is
 * counted on its object, whose destroy waits for as many acks. The end of
 * the socket is the fatal state (fatal.c). */
RVC_EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	struct rvc_context *rc = to_rctx(ctx);
	for (;;) {
		struct rvc_async_event r;
		ssize_t n;
		do
			n = read(ctx->async_fd, &r, sizeof(r));
		while (n < 0 && errno == EINTR);
		if (n == 0) {
			/* The daemon ended the socket: it died or ended the
			 * session. As a device that is gone: DEVICE_FATAL (if
			 * the daemon could not send it), then EIO. */
			rvc_set_fatal(rc);
			if (!__atomic_exchange_n(&rc->fatal_told, 1, __ATOMIC_ACQ_REL)) {
				memset(ev, 0, sizeof(*ev));
				ev->event_type = IBV_EVENT_DEVICE_FATAL;
				ev->element.port_num = 1; /* as the daemon sends it */
				return 0;
			}
			errno = EIO;
			return -1;
		}
		if (n != (ssize_t)sizeof(r)) {
			if (n > 0)
				errno = EPROTO;
			return -1;
		}
		memset(ev, 0, sizeof(*ev));
		ev->event_type = (enum ibv_event_type)r.event_type;
		if (ev->event_type == IBV_EVENT_DEVICE_FATAL)
			__atomic_store_n(&rc->fatal_told, 1, __ATOMIC_RELEASE);
		uint32_t kind = event_kind(ev->event_type);
		if (!kind) {
			ev->element.port_num = (int)r.element;
			return 0;
		}
		pthread_mutex_lock(&rc->live_lock);
		void *obj = rvc_live_get_locked(rc, kind, r.element);
		if (obj) {
			pthread_mutex_t *mu;
			uint32_t *count;
			if (kind == RVC_K_CQ) {
				struct rvc_cq *c = obj;
				ev->element.cq = &c->cq;
				mu = &c->cq.mutex;
				count = &c->async_delivered;
			} else if (kind == RVC_K_QP) {
				struct rvc_qp *q = obj;
				ev->element.qp = &q->qp;
				mu = &q->qp.mutex;
				count = &q->async_delivered;
			} else {
				struct rvc_srq *s = obj;
				ev->element.srq = &s->srq;
				mu = &s->srq.mutex;
				count = &s->async_delivered;
			}
			pthread_mutex_lock(mu);
			(*count)++;
			pthread_mutex_unlock(mu);
		}
		pthread_mutex_unlock(&rc->live_lock);
		if (obj)
			return 0;
	}
}

RVC_EXPORT void ibv_ack_async_event(struct ibv_async_event *ev)
{
	switch (event_kind(ev->event_type)) {
	case RVC_K_CQ: {
		struct ibv_cq *cq = ev->element.cq;
		pthread_mutex_lock(&cq->mutex);
		cq->async_events_completed++;
		pthread_cond_signal(&cq->cond);
		pthread_mutex_unlock(&cq->mutex);
		break;
	}
	case RVC_K_QP: {
		struct ibv_qp *qp = ev->element.qp;
		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_signal(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
		break;
	}
	case RVC_K_SRQ: {
		struct ibv_srq *srq = ev->element.srq;
		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_signal(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
		break;
	}
	default:
		break;
	}
}
