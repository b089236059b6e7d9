/* rdma_cm multicast over rvtd (protocol section 9, cm_join_multicast and
 * cm_leave_multicast): the joins of each ID, the MULTICAST_JOIN and
 * MULTICAST_ERROR events (the join's context as the UD private data, the
 * QP attached to the group, as librdmacm does over the kernel) and the
 * leave (the QP detached first; then, as librdmacm over ucma, it waits
 * until the program acknowledged every event it was handed about the
 * join: events not yet handed out are dropped, as ucma drops them). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

struct rvm_mc {
	struct rvm_id *r;
	struct rvm_addr addr; /* the group as the daemon names it in the event */
	void *context;
	uint32_t join_flags;
	int attached; /* the ID's QP is attached to mgid */
	union ibv_gid mgid;
	uint16_t mlid;
	uint32_t delivered; /* events about the join handed out (mc_lock) */
	uint32_t acked;	    /* and acknowledged (rvm_lock) */
	struct rvm_mc *next;
};

/* The joins of every ID; mc_lock is taken after rvm_lock, and no call to
 * the daemon or to libibverbs is made under it. */
static pthread_mutex_t mc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rvm_mc *mcs;

struct rvm_join {
	struct rvm_addr addr;
	uint64_t context;
	uint32_t join_flags;
	uint32_t reserved;
};
_Static_assert(sizeof(struct rvm_join) == 40, "cm_join_multicast");

static int same_group(const struct rvm_addr *a, const struct rvm_addr *b)
{
	return a->family == b->family && memcmp(a->addr, b->addr, 16) == 0;
}

/* find_locked: the join of r for the group, unlinked if unlink. */
static struct rvm_mc *find_locked(struct rvm_id *r, const struct rvm_addr *a, int unlink)
{
	for (struct rvm_mc **p = &mcs; *p; p = &(*p)->next) {
		struct rvm_mc *m = *p;
		if (m->r == r && same_group(&m->addr, a)) {
			if (unlink)
				*p = m->next;
			return m;
		}
	}
	return NULL;
}

RVM_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *mc,
				      void *context)
{
	if (!id || !mc || !(mc->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !mc->addr ||
	    !(mc->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    mc->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
		return rvm_err(EINVAL);
	struct rvm_id *r = to_rid(id);
	struct rvm_join req = {.context = (uint64_t)(uintptr_t)context,
			       .join_flags = mc->join_flags};
	int err = rvm_to_addr(mc->addr, &req.addr);
	if (err)
		return rvm_err(err);
	struct rvm_mc *m = calloc(1, sizeof(*m));
	if (!m)
		return rvm_err(ENOMEM);
	m->r = r;
	m->addr = req.addr;
	m->context = context;
	m->join_flags = mc->join_flags;
	/* Listed before the call: the event may be read before it returns. */
	pthread_mutex_lock(&mc_lock);
	if (find_locked(r, &req.addr, 0)) {
		pthread_mutex_unlock(&mc_lock);
		free(m);
		return rvm_err(EADDRINUSE);
	}
	m->next = mcs;
	mcs = m;
	pthread_mutex_unlock(&mc_lock);
	err = rvm_call(RVM_OP_JOIN_MULTICAST, r->handle, &req, sizeof(req), NULL, 0, NULL);
	if (err) {
		pthread_mutex_lock(&mc_lock);
		find_locked(r, &req.addr, 1);
		pthread_mutex_unlock(&mc_lock);
		free(m);
		return rvm_err(err);
	}
	return rvm_sync_wait(r, RDMA_CM_EVENT_MULTICAST_JOIN);
}

RVM_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	struct rdma_cm_join_mc_attr_ex mc = {
		.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
		.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER,
		.addr = addr,
	};
	return rdma_join_multicast_ex(id, &mc, context);
}

RVM_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	if (!id || !addr)
		return rvm_err(EINVAL);
	struct rvm_id *r = to_rid(id);
	struct rvm_addr a;
	int err = rvm_to_addr(addr, &a);
	if (err)
		return rvm_err(err);
	pthread_mutex_lock(&mc_lock);
	struct rvm_mc *m = find_locked(r, &a, 1);
	/* Unlinked: no more events about it are handed out. */
	uint32_t delivered = m ? m->delivered : 0;
	pthread_mutex_unlock(&mc_lock);
	if (!m)
		return rvm_err(EADDRNOTAVAIL); /* librdmacm's answer */
	if (m->attached && id->qp)
		ibv_detach_mcast(id->qp, &m->mgid, m->mlid);
	struct rvm_join req = {.addr = a};
	err = rvm_call(RVM_OP_LEAVE_MULTICAST, r->handle, &req, sizeof(req), NULL, 0, NULL);
	if (r->sync && r->sync_ev) {
		/* A synchronous ID keeps its last event until its next call. */
		rdma_ack_cm_event(r->sync_ev);
		r->sync_ev = NULL;
		r->id.event = NULL;
	}
	/* As librdmacm: wait for the acknowledgement of every event handed
	 * out about the join. Like rdma_destroy_id, give up after 2 s and
	 * keep m allocated then, so that a late ack writes to live memory. */
	int late = 0;
	pthread_mutex_lock(&rvm_lock);
	while (m->acked != delivered) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 2;
		if (pthread_cond_timedwait(&rvm_cond, &rvm_lock, &ts) == ETIMEDOUT &&
		    m->acked != delivered) {
			late = 1;
			break;
		}
	}
	pthread_mutex_unlock(&rvm_lock);
	if (late && getenv("RVM_DEBUG"))
		rvm_warn("leave: %u events about the join handed out, %u acknowledged; going on",
			 delivered, m->acked);
	if (!late)
		free(m);
	return rvm_err(err);
}

void rvm_mc_acked(void *mc)
{
	struct rvm_mc *m = mc;
	pthread_mutex_lock(&rvm_lock);
	m->acked++;
	pthread_cond_broadcast(&rvm_cond);
	pthread_mutex_unlock(&rvm_lock);
}

int rvm_mc_event(struct rvm_id *r, struct rdma_cm_event *ev, const struct rvm_event *w, void **mc)
{
	pthread_mutex_lock(&mc_lock);
	struct rvm_mc *m = find_locked(r, &w->dst_addr, 0);
	if (!m) {
		pthread_mutex_unlock(&mc_lock);
		return -1; /* left meanwhile */
	}
	m->delivered++;
	*mc = m;
	ev->param.ud.private_data = m->context;
	ev->param.ud.private_data_len = 0;
	int attach = ev->event == RDMA_CM_EVENT_MULTICAST_JOIN && r->id.qp &&
		     m->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER && !m->attached;
	if (ev->event == RDMA_CM_EVENT_MULTICAST_JOIN) {
		m->mgid = ev->param.ud.ah_attr.grh.dgid;
		m->mlid = ev->param.ud.ah_attr.dlid;
	}
	union ibv_gid mgid = m->mgid;
	uint16_t mlid = m->mlid;
	if (attach)
		m->attached = 1;
	pthread_mutex_unlock(&mc_lock);
	if (attach && ibv_attach_mcast(r->id.qp, &mgid, mlid)) {
		int e = errno ? errno : EINVAL;
		pthread_mutex_lock(&mc_lock);
		if ((m = find_locked(r, &w->dst_addr, 0)))
			m->attached = 0;
		pthread_mutex_unlock(&mc_lock);
		ev->event = RDMA_CM_EVENT_MULTICAST_ERROR;
		ev->status = -e;
	}
	return 0;
}

void rvm_mc_forget(struct rvm_id *r)
{
	pthread_mutex_lock(&rvm_lock);
	pthread_mutex_lock(&mc_lock);
	for (struct rvm_mc **p = &mcs; *p;) {
		struct rvm_mc *m = *p;
		if (m->r == r) {
			*p = m->next;
			if (m->acked == m->delivered)
				free(m); /* else an ack is still to come: kept */
		} else
			p = &m->next;
	}
	pthread_mutex_unlock(&mc_lock);
	pthread_mutex_unlock(&rvm_lock);
}
