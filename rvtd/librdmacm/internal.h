/* Objects of the drop-in librdmacm: each public struct is embedded in ours
 * and found again with container_of. One process-wide session with rvtd
 * (protocol minor 1) holds every event channel and ID; verbs objects
 * (id->verbs, PDs, QPs) belong to our libibverbs, one context per device,
 * and are moved by QP number (protocol section 9, "librdmacm's order").
 * Lock order: rvm_lock, then nothing (no socket call under it except the
 * device cache's, which has its own lock). */
#ifndef RVM_INTERNAL_H
#define RVM_INTERNAL_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <pthread.h>
#include <stddef.h>
#include "cmwire.h"

#define RVM_EXPORT __attribute__((visibility("default")))
#define rvm_container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* libibverbs' private interface (rvtd/libibverbs/priv.c, RVTD_PRIVATE_1). */
void *rvtd_priv_session_open(const char *who, uint16_t minor, uint16_t *agreed, int *err);
void rvtd_priv_session_close(void *s);
int rvtd_priv_call(void *s, uint16_t op, uint32_t handle, const void *req, size_t reqlen,
		   void *out, size_t fixed, size_t tail, size_t cap, size_t *outlen, int want_fds,
		   int *fds);

/* A device as the CM library uses it: our libibverbs' context, opened once
 * per process, and a PD for rdma_create_qp without one. */
struct rvm_dev {
	char name[64];
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_device_attr attr;
};

struct rvm_channel {
	struct rdma_event_channel ch;
	uint32_t handle;
	volatile int destroyed; /* the struct is kept: see rdma_destroy_event_channel */
	struct rvm_channel *next_dead;
};

struct rvm_id {
	struct rdma_cm_id id;
	uint32_t handle;
	int sync;		    /* created without a channel: calls wait for their event */
	struct rdma_cm_event *sync_ev; /* sync: the last event, acked at the next */
	uint32_t delivered, acked;  /* events naming this ID handed out / acked (rvm_lock) */
	struct rvm_dev *dev;
	uint8_t resp_res, init_depth; /* for the QP: from the request or our connect */
	struct ibv_sa_path_rec path;
	int own_cqs;
	/* The program called rdma_establish: over the kernel no event follows,
	 * the daemon sends ESTABLISHED, which is dropped (under rvm_lock). */
	int drop_established;
	/* The CONNECT_RESPONSE the library answered: its REP's private data
	 * and parameters go with the ESTABLISHED that follows. */
	struct rvm_event *rep;
	struct ibv_qp_init_attr *listen_qp_attr; /* rdma_create_ep on a passive sync ID */
	struct rvm_id *next; /* the registry, by handle */
};

static inline struct rvm_id *to_rid(struct rdma_cm_id *id) { return rvm_container_of(id, struct rvm_id, id); }

struct rvm_evt {
	struct rdma_cm_event ev;
	struct rvm_id *id, *listen; /* whose counts the ack completes */
	void *mc; /* the multicast join whose count the ack completes (mcast.c) */
	uint8_t pdata[RVM_PRIVATE_MAX];
};

extern pthread_mutex_t rvm_lock;
extern pthread_cond_t rvm_cond;

/* cm.c */
int rvm_call(uint16_t op, uint32_t handle, const void *req, size_t reqlen, void *out,
	     size_t outlen, int *fd);
int rvm_session(void);
struct rvm_dev *rvm_dev_get(const char *name);
int rvm_to_addr(const struct sockaddr *sa, struct rvm_addr *a);
void rvm_from_addr(const struct rvm_addr *a, struct sockaddr_storage *ss);
void rvm_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int rvm_err(int e); /* errno = e; return -1 (0 for e == 0) */
int rvm_sync_wait(struct rvm_id *r, enum rdma_cm_event_type want);

/* mcast.c */
struct rvm_event;
int rvm_mc_event(struct rvm_id *r, struct rdma_cm_event *ev, const struct rvm_event *w, void **mc);
void rvm_mc_acked(void *mc);
void rvm_mc_forget(struct rvm_id *r);

#endif
