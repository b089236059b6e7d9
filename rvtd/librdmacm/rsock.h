/* The rsockets of this library (rsocket.c: sockets, connections, options;
 * rsdata.c: the data path, credits, iomaps; rspoll.c: rpoll, rselect):
 * stream sockets over an RC QP, on the wire as Linux librdmacm's (the
 * protocol, and where each fact comes from, in docs/rsockets.md).
 *
 * An rsocket is a CM ID on an event channel of its own; the channel's
 * descriptor is the number the program holds, so rsockets and ordinary
 * descriptors never collide and rpoll tells them apart by a table. Every
 * descriptor the library owns for it (CM channel, completion channel,
 * epoll) is non-blocking; a blocking call sleeps in poll() on them
 * instead, so O_NONBLOCK on an rsocket is only a flag here.
 *
 * Data: each message is an RDMA WRITE WITH IMMEDIATE into the receive
 * buffer the peer offered (its target SGL entries), the immediate holding
 * the op and the length. The receiver offers half its buffer at a time and
 * returns credits (a sequence number) with each offer.
 *
 * Keepalive (rskeep.c): a service thread posts RS_CTRL_KEEPALIVE on the
 * sockets that asked for it.
 *
 * Locking: rs_tab_lock guards the table only; each rsocket has one mutex
 * for all its state, released only while it sleeps in poll(). Never two
 * rsocket mutexes at once, and no rsocket mutex under rs_tab_lock. The
 * keepalive service (rs_keepalive_*) is called with no rsocket mutex held:
 * it may wait for its thread, which takes them (rskeep.c). */
#ifndef RVM_RSOCK_H
#define RVM_RSOCK_H

#include <arpa/inet.h>
#include <sys/socket.h>
#include "internal.h"
#include "rswire.h"

/* Defaults and limits as Linux's rsockets (docs/rsockets.md). */
enum {
	RS_DEF_SQSIZE = 384,
	RS_DEF_RQSIZE = 384,
	RS_DEF_INLINE = 64,
	RS_DEF_MEM = 1 << 17,  /* receive buffer */
	RS_DEF_WMEM = 1 << 17, /* send buffer */
	RS_QP_MIN = 16,
	RS_QP_MAX = 0xfffe,
	RS_CTRL_SLOTS = 4,  /* send WRs kept for control messages */
	RS_SNDLOWAT = 2048, /* send room below which a sender waits */
	RS_OLAP_START = 2048,
	RS_MAX_XFER = 65536,
	RS_RESOLVE_MS = 2000,
	RS_SHARED_WAIT_MS = 50,
};
#define RS_WR_RECV (1ULL << 63)

enum rs_phase {
	P_INIT,
	P_BOUND,
	P_LISTENING,
	P_RESOLVING_ADDR, /* the opening phases, in order */
	P_RESOLVING_ROUTE,
	P_CONNECTING,
	P_ACCEPTING,
	P_CONNECTED,
	P_CONNECT_ERROR,
	P_DISCONNECTED,
	P_ERROR,
};

struct rs_rmsg {
	uint32_t len;
};

/* One riomap: a region the peer may write (index >= 0: its slot in the
 * peer's iomap table) or a local one (index -1). */
struct rs_map {
	struct rs_map *next;
	struct ibv_mr *mr;
	uint64_t offset;
	int index;
	int sent;
};

struct rsk {
	int fd;
	pthread_mutex_t lock;
	enum rs_phase phase;
	int rd, wr; /* not shut down for reading / writing */
	int fd_flags;
	int err; /* SO_ERROR */
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;

	/* options */
	uint32_t sq_size, rq_size, sq_inline, sbuf_size, rbuf_size, iomap_size;
	uint64_t so_opts, tcp_opts, ipv6_opts;
	int keepalive_time; /* TCP_KEEPIDLE, seconds (0: not set yet) */
	int ka_on;	    /* keepalive messages wanted: SO_KEEPALIVE set, no rshutdown since */
	int ka_used;	    /* SO_KEEPALIVE was set once: rclose tells the keepalive service */

	/* verbs */
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	int epfd; /* the completion channel and the CM channel together */
	int armed;
	/* Threads waiting in this socket. waiters counts the threads blocked
	 * in rs_process: one of them sleeps in poll() on epfd (sleeper), the
	 * others wait on cond until it has taken what woke it. pollers counts
	 * rpoll calls polling epfd. Only the sleeper and rpoll take
	 * completion and CM events, so while more than one thread may take
	 * them, each polls with a bounded timeout (RS_SHARED_WAIT_MS): the one
	 * that took an event may have left the others' wake-up unarmed.
	 *
	 * A thread alone waits unbounded. An rpoll alone says so (unbounded,
	 * until its poll returns); a thread that comes to wait meanwhile
	 * writes kickfd, so that the rpoll looks again and bounds its wait,
	 * and does not sleep on epfd itself until then (rs_sleep). So no
	 * thread sleeps on epfd unbounded while another may take the event it
	 * waits for (for good: the last event of a connection). */
	unsigned waiters;
	int sleeper;
	unsigned pollers, unbounded;
	pthread_cond_t cond;
	int kickfd; /* in epfd: wakes a thread that sleeps unbounded, to bound its wait;
		     * after DISCONNECTED, an rpoll waiting for the hang-up (rs_arm) */
	unsigned unacked;
	int qp_down;
	struct ibv_mr *smr, *rmr, *tmr;
	uint8_t *sbuf, *rbuf;
	void *tbuf;
	volatile struct rsw_sge *tsgl;	 /* where we may write: the peer updates it */
	volatile struct rsw_iomap *tiomap; /* the peer's riomaps, written by it */

	/* sending */
	uint32_t shead, savail;
	int sqe_avail;
	uint16_t sseq_no, sseq_comp;
	int tsge;
	unsigned ctrl_seq, ctrl_max;
	struct rsw_sge rsgl, riomap; /* the peer's target SGL and iomap table */
	uint32_t rsge;
	int swap; /* the peer's byte order differs from ours */
	struct rs_map *maps;
	struct rs_map **slots; /* riomap.length entries */
	int iomap_pending;

	/* receiving */
	struct rs_rmsg *rmsg;
	uint32_t rhead, rtail, rmsg_n;
	uint32_t roff, ravail, rfree;
	uint16_t rseq_no, rseq_comp;
};

static inline int host_is_net(void) { return htonl(1) == 1; }
static inline uint64_t swap64(uint64_t v, int swap) { return swap ? __builtin_bswap64(v) : v; }
static inline uint32_t swap32(uint32_t v, int swap) { return swap ? __builtin_bswap32(v) : v; }

/* RS_GET: the rsocket of fd, or return -1 with EBADF. */
#define RS_GET(rs, fd)                          \
	struct rsk *rs = rs_get(fd);            \
	if (!rs)                                \
		return rvm_err(EBADF);

/* rsocket.c */
struct rsk *rs_get(int fd);
void rs_down(struct rsk *rs, enum rs_phase p, int err);
int rs_post_recv(struct rsk *rs);
int rs_drive(struct rsk *rs, int nonblock);
int rs_ready(struct rsk *rs, int nonblock);

/* rskeep.c */
unsigned rs_keepalive_default(void);
int rs_keepalive_set(struct rsk *rs, unsigned secs, int add);
void rs_keepalive_remove(struct rsk *rs);

/* rsdata.c */
int rs_post_ctrl(struct rsk *rs, uint32_t msg);
int rs_ctrl_avail(const struct rsk *rs);
void rs_update_credits(struct rsk *rs);
void rs_poll_cq(struct rsk *rs);
/* rs_wake makes kickfd, and so epfd, readable until rs_unwake takes the
 * kicks back. Once the connection has ended rs_unwake leaves them: a kick
 * is then what an rpoll waiting for the hang-up waits for (rs_arm), and
 * no thread sleeps on epfd any more. rs_unwake_now takes them back in
 * any phase. */
void rs_wake(struct rsk *rs);
void rs_unwake(struct rsk *rs);
void rs_unwake_now(struct rsk *rs);
void rs_take_events(struct rsk *rs);
int rs_process(struct rsk *rs, int nonblock, int (*test)(struct rsk *));
int rs_nonblocking(const struct rsk *rs, int flags);
/* Conditions rs_process waits for. */
int rs_have_rdata(struct rsk *rs);
int rs_can_send(struct rsk *rs);
int t_rdata(struct rsk *rs);
int t_send(struct rsk *rs);
int t_ctrl(struct rsk *rs);
int t_drained(struct rsk *rs);

/* RS_KEEP_ERRNO(call) is call's result, with errno left as the caller had
 * it when the call succeeds (returns 0 or more): the library's own
 * non-blocking descriptors answer EAGAIN inside it, and programs such as
 * rstream read errno after a return of 0 (EOF). */
#define RS_KEEP_ERRNO(call)                           \
	({                                            \
		int saved_errno_ = errno;             \
		__typeof__(call) ret_ = (call);       \
		if (ret_ >= 0)                        \
			errno = saved_errno_;         \
		ret_;                                 \
	})

#endif
