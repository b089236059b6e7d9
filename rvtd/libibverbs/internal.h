/* Objects of the drop-in libibverbs: each public struct is embedded in ours
 * and found again with container_of. Lock order: context conn.lock is a
 * leaf; a cq lock, then the context's live_lock, then a qp's sq_lock or
 * rq_lock or an srq's lock (flushing in the fatal state, fatal.c); those
 * three are leaves otherwise (the data path never takes the connection's
 * lock). */
#ifndef RVC_INTERNAL_H
#define RVC_INTERNAL_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stddef.h>
#include "ring.h"
#include "wire.h"

#define rvc_container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#define RVC_EXPORT __attribute__((visibility("default")))

/* One session with rvtd: a SOCK_SEQPACKET connection, requests serialised
 * by lock (one request, one reply). */
struct rvc_conn {
	int fd;
	int broken; /* a reply could not be trusted: the session is shut down */
	pthread_mutex_t lock;
	uint32_t next_id;
	uint32_t daemon_pid;
	uint32_t page_size;
	uint16_t minor; /* agreed in the hello */
	uint8_t *buf; /* RVC_MAX_MESSAGE + 1 */
};

/* A reply: its body copied out by rvc_call, and its descriptors (owned by
 * the caller). */
struct rvc_reply {
	size_t len;
	int fds[RVC_MAX_FDS];
	int nfds;
};

const char *rvc_socket_path(char *buf, size_t n);
int rvc_connect(struct rvc_conn *c, int quiet);
/* rvc_connect_ex asks for protocol minor version minor; who names the
 * library in the hello (the daemon's logs). */
int rvc_connect_ex(struct rvc_conn *c, int quiet, uint16_t minor, const char *who);
void rvc_disconnect(struct rvc_conn *c);
/* rvc_call sends one request and waits for its reply; the reply's body
 * (exactly fixed bytes, or fixed plus whole tail elements up to cap) is
 * copied to out. Returns 0 or a positive errno (the daemon's, or EPROTO or
 * the socket's). */
int rvc_call(struct rvc_conn *c, uint16_t op, uint32_t handle, const void *req, size_t reqlen,
	     const int *fds, int nfds, void *out, size_t fixed, size_t tail, size_t cap,
	     int want_fds, struct rvc_reply *rep);

struct rvc_device {
	struct ibv_device dev;
	uint64_t node_guid;
	int refs;
};

struct rvc_seg;

/* Live objects that events name, by daemon handle: an event about an
 * object destroyed meanwhile (still queued in a socket) is dropped, as the
 * kernel drops a destroyed CQ's unread events. */
enum rvc_kind { RVC_K_CQ = 1, RVC_K_QP, RVC_K_SRQ };
struct rvc_live {
	uint32_t handle;
	uint32_t kind;
	void *obj;
};

struct rvc_context {
	struct rvc_conn conn;
	uint32_t dev_handle;
	struct rvc_device *rdev;
	pthread_mutex_t mr_lock;
	struct rvc_seg *segs;
	int ptracer_set;
	pthread_mutex_t live_lock; /* then an object's mutex */
	struct rvc_live *live;
	size_t nlive, caplive;
	/* The daemon no longer serves this context (fatal.c): its async
	 * socket ended. fatal_told: IBV_EVENT_DEVICE_FATAL was handed out. */
	int fatal, fatal_told;
	struct verbs_context vctx; /* ibv_context last, as verbs.h wants */
};

static inline struct rvc_context *to_rctx(struct ibv_context *c)
{
	return rvc_container_of(c, struct rvc_context, vctx.context);
}

/* Where flushing a ring has got to in the fatal state: the next record
 * to complete with WR_FLUSH_ERR (from the consumer index the daemon left). */
struct rvc_flush {
	uint32_t next;
	int started;
};

struct rvc_mr {
	struct ibv_mr mr;
	struct rvc_seg *seg;
};

struct rvc_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx; /* begins with ibv_cq's fields */
	};
	/* ibv_start_poll ... ibv_end_poll (lock held): the current CQE and
	 * how many of the ring's records the batch has read. */
	struct rvc_cqe cur;
	uint32_t batch;
	/* Events handed to the program (ibv_get_cq_event, ibv_get_async_event),
	 * under cq.mutex: ibv_destroy_cq waits for as many acks. */
	uint32_t comp_delivered, async_delivered;
	pthread_mutex_t lock;
	void *map;
	size_t map_size;
	struct rvc_ring ring;
	uint32_t empty_polls, yield_every; /* RVTD_POLL_YIELD */
	uint32_t idle_polls; /* empty polls since the daemon was last checked */
};

static inline struct rvc_cq *to_rcq(struct ibv_cq *c) { return rvc_container_of(c, struct rvc_cq, cq); }

struct rvc_channel {
	struct ibv_comp_channel ch;
	uint32_t handle;
};

struct rvc_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qpx; /* begins with the ibv_qp */
	};
	int has_qpx; /* created with send ops flags (ibv_qp_to_qp_ex) */
	uint32_t async_delivered; /* under qp.mutex */
	void *map;
	size_t map_size;
	int doorbell;
	struct rvc_cap cap;
	pthread_mutex_t sq_lock, rq_lock;
	struct rvc_ring sq, rq;
	struct rvc_flush sq_flush, rq_flush; /* under sq_lock, rq_lock */
	/* ibv_wr_* batch, between wr_start and wr_complete (sq_lock held). */
	uint32_t wr_first;
	int wr_err;
	struct rvc_send_wqe *wr_cur;
};

struct rvc_srq {
	struct ibv_srq srq;
	uint32_t async_delivered; /* under srq.mutex */
	void *map;
	size_t map_size;
	uint32_t max_wr, max_sge;
	pthread_mutex_t lock;
	struct rvc_ring ring;
	struct rvc_flush flush; /* under lock */
};

static inline struct rvc_srq *to_rsrq(struct ibv_srq *s) { return rvc_container_of(s, struct rvc_srq, srq); }

static inline struct rvc_qp *to_rqp(struct ibv_qp *q) { return rvc_container_of(q, struct rvc_qp, qp); }

/* Data path (qp.c, cq.c). */
int rvc_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int rvc_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int rvc_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int rvc_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int rvc_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* write_recv fills one receive WQE record (receive rings and SRQs). */
void rvc_write_recv(uint8_t *rec, const struct ibv_recv_wr *wr);

/* Live objects (device.c). */
int rvc_live_add(struct rvc_context *rc, uint32_t kind, uint32_t handle, void *obj);
void rvc_live_del(struct rvc_context *rc, uint32_t kind, uint32_t handle);
/* Under live_lock. */
void *rvc_live_get_locked(struct rvc_context *rc, uint32_t kind, uint32_t handle);

/* Extended CQs (cq.c). */
struct ibv_cq_ex *rvc_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);

/* Extended QPs (wr.c). */
struct ibv_qp *rvc_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
void rvc_ring_doorbell(struct rvc_qp *q);
struct ibv_qp *rvc_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);

/* Memory windows (qp.c). */
struct ibv_mw *rvc_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int rvc_dealloc_mw(struct ibv_mw *mw);
int rvc_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);

/* Memory (mem.c). */
void rvc_release_segments(struct rvc_context *ctx);
/* pagemove.c: replace [start, start+len) by the pages mapped at with (the
 * same length), copying the bytes; other threads' stores are held, not
 * lost (0 or an errno). _single: for a process with one thread (a fork
 * child). rvc_on_own_stack: whether the range touches the calling
 * thread's stack, which cannot be moved so. */
int rvc_replace_pages(uintptr_t start, size_t len, void *with);
void rvc_replace_pages_single(uintptr_t start, size_t len, void *with);
void rvc_move_lock(void);
void rvc_move_unlock(void);
int rvc_on_own_stack(uintptr_t start, uintptr_t end);

/* The fatal state (fatal.c): the daemon died or ended the session. An
 * empty poll checks the async socket every RVC_FATAL_CHECK times. */
#define RVC_FATAL_CHECK 256
static inline int rvc_fatal(struct rvc_context *rc)
{
	return __atomic_load_n(&rc->fatal, __ATOMIC_ACQUIRE);
}
void rvc_set_fatal(struct rvc_context *rc);
int rvc_check_fatal(struct rvc_context *rc);
/* rvc_next_flush fills e with cq's next WR_FLUSH_ERR completion (cq's lock
 * held): 1, or 0 when none is left. */
int rvc_next_flush(struct rvc_context *rc, struct ibv_cq *cq, struct rvc_cqe *e);

/* Misc. */
void rvc_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
