/* rsockets: stream sockets over an RC QP, on the wire as Linux librdmacm's
 * (docs/rsockets.md has the protocol and where each fact comes from).
 *
 * An rsocket is a CM ID on an event channel of its own; the channel's
 * descriptor is the number the program holds, so rsockets and ordinary
 * descriptors never collide and rpoll tells them apart by a table. Every
 * descriptor this file owns (CM channel, completion channel, epoll) is
 * non-blocking; a blocking call sleeps in poll() on them instead, so
 * O_NONBLOCK on an rsocket is only a flag here.
 *
 * Data: each message is an RDMA WRITE WITH IMMEDIATE into the receive
 * buffer the peer offered (its target SGL entries), the immediate holding
 * the op and the length. The receiver offers half its buffer at a time and
 * returns credits (a sequence number) with each offer.
 *
 * Locking: rs_tab_lock guards the table only; each rsocket has one mutex
 * for all its state, released only while it sleeps in poll(). Never two
 * rsocket mutexes at once, and no rsocket mutex under rs_tab_lock. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rsocket.h>
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
	int keepalive_time;

	/* verbs */
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	int epfd; /* the completion channel and the CM channel together */
	int armed;
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

static pthread_mutex_t rs_tab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk **rs_tab;
static int rs_tab_n;

static struct rsk *rs_get(int fd)
{
	struct rsk *rs = NULL;
	pthread_mutex_lock(&rs_tab_lock);
	if (fd >= 0 && fd < rs_tab_n)
		rs = rs_tab[fd];
	pthread_mutex_unlock(&rs_tab_lock);
	return rs;
}

static int rs_put(struct rsk *rs)
{
	int err = 0;
	pthread_mutex_lock(&rs_tab_lock);
	if (rs->fd >= rs_tab_n) {
		int n = rs_tab_n ? rs_tab_n : 64;
		while (n <= rs->fd)
			n *= 2;
		struct rsk **t = realloc(rs_tab, sizeof(*t) * (size_t)n);
		if (!t) {
			err = ENOMEM;
		} else {
			memset(t + rs_tab_n, 0, sizeof(*t) * (size_t)(n - rs_tab_n));
			rs_tab = t;
			rs_tab_n = n;
		}
	}
	if (!err)
		rs_tab[rs->fd] = rs;
	pthread_mutex_unlock(&rs_tab_lock);
	return err;
}

static void rs_drop(struct rsk *rs)
{
	pthread_mutex_lock(&rs_tab_lock);
	if (rs->fd >= 0 && rs->fd < rs_tab_n && rs_tab[rs->fd] == rs)
		rs_tab[rs->fd] = NULL;
	pthread_mutex_unlock(&rs_tab_lock);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int host_is_net(void) { return htonl(1) == 1; }

static uint64_t swap64(uint64_t v, int swap) { return swap ? __builtin_bswap64(v) : v; }
static uint32_t swap32(uint32_t v, int swap) { return swap ? __builtin_bswap32(v) : v; }

/* ---- life cycle ---- */

static struct rsk *rs_alloc(const struct rsk *from)
{
	struct rsk *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return NULL;
	pthread_mutex_init(&rs->lock, NULL);
	rs->fd = -1;
	rs->epfd = -1;
	if (from) {
		rs->sq_size = from->sq_size;
		rs->rq_size = from->rq_size;
		rs->sq_inline = from->sq_inline;
		rs->sbuf_size = from->sbuf_size;
		rs->rbuf_size = from->rbuf_size;
		rs->iomap_size = from->iomap_size;
	} else {
		rs->sq_size = RS_DEF_SQSIZE;
		rs->rq_size = RS_DEF_RQSIZE;
		rs->sq_inline = RS_DEF_INLINE;
		rs->sbuf_size = RS_DEF_WMEM;
		rs->rbuf_size = RS_DEF_MEM;
	}
	return rs;
}

/* rs_open_channel makes the socket's CM channel, whose descriptor is its number. */
static int rs_open_channel(struct rsk *rs)
{
	rs->ch = rdma_create_event_channel();
	if (!rs->ch)
		return -1;
	if (set_nonblock(rs->ch->fd))
		return -1;
	rs->fd = rs->ch->fd;
	return 0;
}

static void rs_free(struct rsk *rs)
{
	if (rs->id && rs->id->qp) {
		if (!rs->qp_down)
			rdma_disconnect(rs->id); /* sends the DREQ; an error (already gone) does not matter */
		if (rs->unacked)
			ibv_ack_cq_events(rs->cq, rs->unacked);
		rdma_destroy_qp(rs->id);
	}
	while (rs->maps) {
		struct rs_map *m = rs->maps;
		rs->maps = m->next;
		ibv_dereg_mr(m->mr);
		free(m);
	}
	free(rs->slots);
	if (rs->cq)
		ibv_destroy_cq(rs->cq);
	if (rs->cc)
		ibv_destroy_comp_channel(rs->cc);
	if (rs->epfd >= 0)
		close(rs->epfd);
	if (rs->smr)
		ibv_dereg_mr(rs->smr);
	if (rs->rmr)
		ibv_dereg_mr(rs->rmr);
	if (rs->tmr)
		ibv_dereg_mr(rs->tmr);
	free(rs->sbuf);
	free(rs->rbuf);
	free(rs->tbuf);
	free(rs->rmsg);
	if (rs->id)
		rdma_destroy_id(rs->id);
	if (rs->ch)
		rdma_destroy_event_channel(rs->ch);
	pthread_mutex_destroy(&rs->lock);
	free(rs);
}

static void rs_down(struct rsk *rs, enum rs_phase p, int err)
{
	rs->phase = p;
	rs->rd = rs->wr = 0;
	if (err)
		rs->err = err;
}

static int rs_post_recv(struct rsk *rs)
{
	struct ibv_recv_wr wr = {.wr_id = RS_WR_RECV}, *bad;
	return ibv_post_recv(rs->id->qp, &wr, &bad);
}

/* rs_create_ep makes the CQ, the QP and the three buffers, and posts the
 * receives; the ID has its device (route resolved, or a request). */
static int rs_create_ep(struct rsk *rs)
{
	struct ibv_device_attr da;
	uint32_t max = RS_QP_MAX;
	if (!ibv_query_device(rs->id->verbs, &da) && (uint32_t)da.max_qp_wr < max)
		max = (uint32_t)da.max_qp_wr;
	if (rs->sq_size > max)
		rs->sq_size = max;
	if (rs->sq_size < RS_QP_MIN)
		rs->sq_size = RS_QP_MIN;
	if (rs->rq_size > max)
		rs->rq_size = max;
	if (rs->rq_size < RS_QP_MIN)
		rs->rq_size = RS_QP_MIN;

	rs->cc = ibv_create_comp_channel(rs->id->verbs);
	if (!rs->cc || set_nonblock(rs->cc->fd))
		return -1;
	rs->cq = ibv_create_cq(rs->id->verbs, (int)(rs->sq_size + rs->rq_size), rs, rs->cc, 0);
	if (!rs->cq)
		return -1;
	rs->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (rs->epfd < 0)
		return -1;
	struct epoll_event ev = {.events = EPOLLIN};
	if (epoll_ctl(rs->epfd, EPOLL_CTL_ADD, rs->cc->fd, &ev) ||
	    epoll_ctl(rs->epfd, EPOLL_CTL_ADD, rs->ch->fd, &ev))
		return -1;

	struct ibv_qp_init_attr qa = {
		.qp_context = rs,
		.send_cq = rs->cq,
		.recv_cq = rs->cq,
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
		.cap = {.max_send_wr = rs->sq_size, .max_recv_wr = rs->rq_size, .max_send_sge = 2,
			.max_recv_sge = 1, .max_inline_data = rs->sq_inline},
	};
	if (rdma_create_qp(rs->id, NULL, &qa))
		return -1;
	rs->sq_inline = qa.cap.max_inline_data;

	size_t sbytes = rs->sbuf_size;
	if (rs->sq_inline < sizeof(struct rsw_iomap))
		sbytes += sizeof(struct rsw_iomap) * RS_CTRL_SLOTS; /* credit updates not sent inline */
	size_t tbytes = sizeof(struct rsw_sge) * RSW_TARGET_SGL_ENTRIES +
			sizeof(struct rsw_iomap) * rs->iomap_size;
	rs->sbuf = calloc(1, sbytes);
	rs->rbuf = calloc(1, rs->rbuf_size);
	rs->tbuf = calloc(1, tbytes);
	rs->rmsg_n = rs->rq_size + 1;
	rs->rmsg = calloc(rs->rmsg_n, sizeof(*rs->rmsg));
	if (!rs->sbuf || !rs->rbuf || !rs->tbuf || !rs->rmsg) {
		errno = ENOMEM;
		return -1;
	}
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	rs->smr = ibv_reg_mr(rs->id->pd, rs->sbuf, sbytes, IBV_ACCESS_LOCAL_WRITE);
	rs->rmr = rs->smr ? ibv_reg_mr(rs->id->pd, rs->rbuf, rs->rbuf_size, rw) : NULL;
	rs->tmr = rs->rmr ? ibv_reg_mr(rs->id->pd, rs->tbuf, tbytes, rw) : NULL;
	if (!rs->tmr)
		return -1;
	rs->tsgl = rs->tbuf;
	rs->tiomap = rs->iomap_size ? (void *)((uint8_t *)rs->tbuf + sizeof(struct rsw_sge) *
									RSW_TARGET_SGL_ENTRIES)
				    : NULL;
	rs->savail = rs->sbuf_size;
	rs->rfree = rs->ravail = rs->rbuf_size / 2;
	rs->ctrl_max = RS_CTRL_SLOTS;
	rs->sqe_avail = (int)rs->sq_size - RS_CTRL_SLOTS;
	rs->rseq_comp = (uint16_t)(rs->rq_size / 2);
	for (uint32_t i = 0; i < rs->rq_size; i++) {
		int err = rs_post_recv(rs);
		if (err) {
			errno = err;
			return -1;
		}
	}
	return 0;
}

static void rs_conn_data(struct rsk *rs, uint8_t *out)
{
	struct rsw_conn c = {
		.version = 1,
		.flags = RSW_FLAG_IOMAP | (host_is_net() ? RSW_FLAG_NET : 0),
		.credits = (uint16_t)rs->rq_size,
		.iomap_scale = rsw_iomap_scale(rs->iomap_size),
		.target_sgl = {(uintptr_t)rs->tbuf, rs->tmr->rkey, RSW_TARGET_SGL_ENTRIES},
		.data_buf = {(uintptr_t)rs->rbuf, rs->rmr->rkey, rs->rbuf_size / 2},
	};
	rsw_conn_encode(out, &c);
}

/* rs_take_conn_data keeps the peer's conn data: 0, or an errno. */
static int rs_take_conn_data(struct rsk *rs, const void *pdata, size_t len)
{
	struct rsw_conn c;
	if (rsw_conn_decode(pdata, len, &c) || c.version != 1)
		return ENOTSUP;
	if (!c.target_sgl.length || c.target_sgl.length > 64 || !c.data_buf.length)
		return EPROTO;
	rs->rsgl = c.target_sgl;
	rs->rsge = 1; /* the peer's entry 0 is the data buffer of its conn data */
	rs->swap = !(c.flags & RSW_FLAG_NET) != !host_is_net();
	if (c.flags & RSW_FLAG_IOMAP) {
		rs->riomap.addr = rs->rsgl.addr + sizeof(struct rsw_sge) * rs->rsgl.length;
		rs->riomap.length = rsw_iomap_unscale(c.iomap_scale);
		rs->riomap.key = rs->rsgl.key;
	}
	rs->tsgl[0].addr = c.data_buf.addr;
	rs->tsgl[0].key = c.data_buf.key;
	rs->tsgl[0].length = c.data_buf.length;
	rs->sseq_comp = c.credits;
	return 0;
}

/* ---- the data path ---- */

static int rs_post_write(struct rsk *rs, enum ibv_wr_opcode op, uint32_t msg, struct ibv_sge *sg,
			 int nsge, int flags, uint64_t addr, uint32_t rkey)
{
	struct ibv_send_wr wr = {
		.wr_id = msg,
		.sg_list = sg,
		.num_sge = nsge,
		.opcode = op,
		.send_flags = (unsigned)flags,
		.imm_data = htonl(msg),
	}, *bad;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	int err = ibv_post_send(rs->id->qp, &wr, &bad);
	if (err)
		errno = err;
	return err ? -1 : 0;
}

static int rs_post_ctrl(struct rsk *rs, uint32_t msg)
{
	rs->ctrl_seq++;
	return rs_post_write(rs, IBV_WR_RDMA_WRITE_WITH_IMM, msg, NULL, 0, 0, 0, 0);
}

static int rs_ctrl_avail(const struct rsk *rs) { return rs->ctrl_seq != rs->ctrl_max; }

/* rs_send_credits offers the next half of the receive buffer if it is
 * free, and with it (or alone) the new credit limit. */
static void rs_send_credits(struct rsk *rs)
{
	uint32_t half = rs->rbuf_size / 2;
	uint32_t msg = RSW_MSG(RSW_OP_SGL, (uint16_t)(rs->rseq_no + rs->rq_size));
	rs->rseq_comp = (uint16_t)(rs->rseq_no + rs->rq_size / 2);
	if (rs->ravail < half) {
		rs_post_ctrl(rs, msg);
		return;
	}
	struct rsw_sge s = {swap64((uintptr_t)(rs->rbuf + rs->rfree), rs->swap),
			    swap32(rs->rmr->rkey, rs->swap), swap32(half, rs->swap)};
	struct ibv_sge sg = {.length = sizeof(s)};
	int flags = 0;
	if (rs->sq_inline >= sizeof(s)) {
		sg.addr = (uintptr_t)&s;
		flags = IBV_SEND_INLINE;
	} else {
		uint8_t *slot = rs->sbuf + rs->sbuf_size +
				sizeof(struct rsw_iomap) * (rs->ctrl_seq % RS_CTRL_SLOTS);
		memcpy(slot, &s, sizeof(s));
		sg.addr = (uintptr_t)slot;
		sg.lkey = rs->smr->lkey;
	}
	rs->ctrl_seq++;
	rs_post_write(rs, IBV_WR_RDMA_WRITE_WITH_IMM, msg, &sg, 1, flags,
		      rs->rsgl.addr + sizeof(struct rsw_sge) * rs->rsge, rs->rsgl.key);
	rs->ravail -= half;
	rs->rfree += half;
	if (rs->rfree >= rs->rbuf_size)
		rs->rfree = 0;
	if (++rs->rsge == rs->rsgl.length)
		rs->rsge = 0;
}

static void rs_update_credits(struct rsk *rs)
{
	if (rs->phase != P_CONNECTED || !rs_ctrl_avail(rs))
		return;
	if (rs->ravail >= rs->rbuf_size / 2 || (int16_t)(rs->rseq_no - rs->rseq_comp) >= 0)
		rs_send_credits(rs);
}

static void rs_recv_msg(struct rsk *rs, uint32_t msg)
{
	switch (RSW_MSG_OP(msg)) {
	case RSW_OP_DATA: {
		uint32_t next = (rs->rtail + 1) % rs->rmsg_n;
		if (next == rs->rhead) { /* more than the credits we gave */
			rs_down(rs, P_ERROR, EPROTO);
			return;
		}
		rs->rmsg[rs->rtail].len = RSW_MSG_ARG(msg);
		rs->rtail = next;
		break;
	}
	case RSW_OP_SGL:
		rs->sseq_comp = (uint16_t)RSW_MSG_ARG(msg);
		break;
	case RSW_OP_CTRL:
		if (RSW_MSG_ARG(msg) == RSW_CTRL_DISCONNECT) {
			rs_down(rs, P_DISCONNECTED, 0);
		} else if (RSW_MSG_ARG(msg) == RSW_CTRL_SHUTDOWN) {
			if (rs->wr)
				rs->rd = 0;
			else
				rs_down(rs, P_DISCONNECTED, 0);
		}
		break;
	default: /* IOMAP_SGL: the table entry is in place; others: unused */
		break;
	}
}

static void rs_send_done(struct rsk *rs, const struct ibv_wc *wc)
{
	uint32_t msg = (uint32_t)wc->wr_id;
	switch (RSW_MSG_OP(msg)) {
	case RSW_OP_SGL:
		rs->ctrl_max++;
		break;
	case RSW_OP_CTRL:
		rs->ctrl_max++;
		if (RSW_MSG_ARG(msg) == RSW_CTRL_DISCONNECT && rs->phase == P_CONNECTED)
			rs_down(rs, P_DISCONNECTED, 0);
		break;
	case RSW_OP_IOMAP_SGL:
		rs->sqe_avail++;
		rs->savail += sizeof(struct rsw_iomap);
		break;
	default: /* DATA, WRITE */
		rs->sqe_avail++;
		rs->savail += RSW_MSG_ARG(msg);
		break;
	}
	if (wc->status != IBV_WC_SUCCESS && rs->phase == P_CONNECTED)
		rs_down(rs, P_ERROR, EIO);
}

static void rs_poll_cq(struct rsk *rs)
{
	struct ibv_wc wc[16];
	int n, recvd = 0;
	if (!rs->cq)
		return;
	while ((n = ibv_poll_cq(rs->cq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			if (!(wc[i].wr_id & RS_WR_RECV)) {
				rs_send_done(rs, &wc[i]);
				continue;
			}
			if (wc[i].status != IBV_WC_SUCCESS)
				continue; /* flushed */
			recvd++;
			if (wc[i].wc_flags & IBV_WC_WITH_IMM)
				rs_recv_msg(rs, ntohl(wc[i].imm_data));
		}
	}
	if (n < 0 && rs->phase == P_CONNECTED)
		rs_down(rs, P_ERROR, EIO);
	while (recvd-- > 0 && rs->phase == P_CONNECTED) {
		int err = rs_post_recv(rs);
		if (err)
			rs_down(rs, P_ERROR, err);
	}
}

/* rs_take_events reads what woke the socket: completion events (the CQ is
 * then unarmed) and CM events (a DISCONNECTED ends a connection whose peer
 * vanished without its disconnect message). */
static void rs_take_events(struct rsk *rs)
{
	struct ibv_cq *cq;
	void *ctx;
	while (rs->cc && !ibv_get_cq_event(rs->cc, &cq, &ctx)) {
		rs->armed = 0;
		if (++rs->unacked >= 64) {
			ibv_ack_cq_events(rs->cq, rs->unacked);
			rs->unacked = 0;
		}
	}
	if (rs->cc && errno != EAGAIN && errno != EWOULDBLOCK && rs->phase == P_CONNECTED)
		rs_down(rs, P_ERROR, EIO);
	if (rs->phase < P_CONNECTED)
		return; /* rs_drive reads the CM events while connecting */
	struct rdma_cm_event *ev;
	while (!rdma_get_cm_event(rs->ch, &ev)) {
		enum rdma_cm_event_type t = ev->event;
		rdma_ack_cm_event(ev);
		if (rs->phase == P_CONNECTED &&
		    (t == RDMA_CM_EVENT_DISCONNECTED || t == RDMA_CM_EVENT_DEVICE_REMOVAL)) {
			rs_poll_cq(rs); /* what arrived before the DREQ stays readable */
			if (rs->phase == P_CONNECTED)
				rs_down(rs, P_DISCONNECTED, 0);
		}
	}
}

/* rs_sleep waits, unlocked, until the socket's CQ or CM channel has news. */
static void rs_sleep(struct rsk *rs)
{
	struct pollfd p = {.fd = rs->epfd, .events = POLLIN};
	pthread_mutex_unlock(&rs->lock);
	poll(&p, 1, -1);
	pthread_mutex_lock(&rs->lock);
	rs_take_events(rs);
}

/* rs_process polls the CQ until test holds: 0, or -1 with errno
 * (EWOULDBLOCK when nonblock and test does not hold yet). */
static int rs_process(struct rsk *rs, int nonblock, int (*test)(struct rsk *))
{
	for (;;) {
		rs_update_credits(rs);
		rs_poll_cq(rs);
		rs_update_credits(rs);
		if (test(rs))
			return 0;
		if (nonblock) {
			errno = EWOULDBLOCK;
			return -1;
		}
		if (!rs->armed) {
			ibv_req_notify_cq(rs->cq, 0);
			rs->armed = 1;
			continue; /* what completed before the arm */
		}
		rs_sleep(rs);
	}
}

static int rs_have_rdata(struct rsk *rs) { return rs->rhead != rs->rtail; }
static int t_rdata(struct rsk *rs) { return rs_have_rdata(rs) || !rs->rd; }
static int rs_can_send(struct rsk *rs)
{
	return rs->sqe_avail > 0 && rs->savail >= RS_SNDLOWAT && rs->sseq_no != rs->sseq_comp &&
	       rs->tsgl[rs->tsge].length != 0;
}
static int t_send(struct rsk *rs) { return rs_can_send(rs) || !rs->wr; }
static int t_ctrl(struct rsk *rs) { return rs_ctrl_avail(rs) || rs->phase != P_CONNECTED; }
static int t_drained(struct rsk *rs)
{
	return (int)(rs->ctrl_max - rs->ctrl_seq) + rs->sqe_avail == (int)rs->sq_size ||
	       rs->phase != P_CONNECTED;
}

static int rs_nonblocking(const struct rsk *rs, int flags)
{
	return (rs->fd_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
}

/* ---- connecting ---- */

static int rs_fail(struct rsk *rs, int err)
{
	rs->phase = P_CONNECT_ERROR;
	rs->err = err;
	errno = err;
	return -1;
}

static int event_errno(const struct rdma_cm_event *ev)
{
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		return ECONNREFUSED;
	if (ev->status < 0)
		return -ev->status;
	if (ev->event == RDMA_CM_EVENT_UNREACHABLE || ev->event == RDMA_CM_EVENT_ADDR_ERROR ||
	    ev->event == RDMA_CM_EVENT_ROUTE_ERROR)
		return EHOSTUNREACH;
	return ev->status ? ev->status : ECONNRESET;
}

static int rs_connect_now(struct rsk *rs)
{
	uint8_t pdata[RSW_CONN_LEN];
	if (rs_create_ep(rs))
		return errno ? errno : ENOMEM;
	rs_conn_data(rs, pdata);
	struct rdma_conn_param p = {
		.private_data = pdata,
		.private_data_len = sizeof(pdata),
		.flow_control = 1,
		.retry_count = 7,
		.rnr_retry_count = 7,
	};
	return rdma_connect(rs->id, &p) ? errno : 0;
}

/* rs_drive moves an opening socket on by the CM events that have come:
 * 0 once connected; else -1 with errno EINPROGRESS (nonblock, not yet) or
 * the connection's error. */
static int rs_drive(struct rsk *rs, int nonblock)
{
	for (;;) {
		if (rs->phase == P_CONNECTED)
			return 0;
		if (rs->phase < P_RESOLVING_ADDR || rs->phase > P_ACCEPTING) {
			errno = rs->phase == P_CONNECT_ERROR && rs->err ? rs->err : ENOTCONN;
			return -1;
		}
		struct rdma_cm_event *ev;
		if (rdma_get_cm_event(rs->ch, &ev)) {
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return rs_fail(rs, errno);
			if (nonblock) {
				errno = EINPROGRESS;
				return -1;
			}
			struct pollfd p = {.fd = rs->ch->fd, .events = POLLIN};
			pthread_mutex_unlock(&rs->lock);
			poll(&p, 1, -1);
			pthread_mutex_lock(&rs->lock);
			continue;
		}
		int err = 0;
		switch (ev->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (rs->phase != P_RESOLVING_ADDR)
				break;
			rs->phase = P_RESOLVING_ROUTE;
			if (rdma_resolve_route(rs->id, RS_RESOLVE_MS))
				err = errno;
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			if (rs->phase != P_RESOLVING_ROUTE)
				break;
			rs->phase = P_CONNECTING;
			err = rs_connect_now(rs);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			if (rs->phase == P_CONNECTING)
				err = rs_take_conn_data(rs, ev->param.conn.private_data,
							ev->param.conn.private_data_len);
			if (!err) {
				rs->phase = P_CONNECTED;
				rs->rd = rs->wr = 1;
			}
			break;
		case RDMA_CM_EVENT_CONNECT_RESPONSE:
			break;
		default:
			err = event_errno(ev);
			break;
		}
		rdma_ack_cm_event(ev);
		if (err)
			return rs_fail(rs, err);
	}
}

/* rs_ready: the socket connected, or on its way (driven here): 0, or -1
 * with errno (EAGAIN when it is still connecting and the call must not
 * block, ENOTCONN when it never was). */
static int rs_ready(struct rsk *rs, int nonblock)
{
	if (rs->phase >= P_RESOLVING_ADDR && rs->phase <= P_ACCEPTING) {
		if (rs_drive(rs, nonblock)) {
			if (errno == EINPROGRESS)
				errno = EAGAIN;
			return -1;
		}
	}
	if (rs->phase < P_CONNECTED || rs->phase == P_CONNECT_ERROR) {
		errno = ENOTCONN;
		return -1;
	}
	return 0;
}

/* ---- the socket calls ---- */

RVM_EXPORT int rsocket(int domain, int type, int protocol)
{
	if ((domain != AF_INET && domain != AF_INET6) || (type != SOCK_STREAM && type != SOCK_DGRAM))
		return rvm_err(ENOTSUP);
	if (type == SOCK_DGRAM)
		return rvm_err(ESOCKTNOSUPPORT); /* datagram rsockets are not served (docs/rsockets.md) */
	if (protocol && protocol != IPPROTO_TCP)
		return rvm_err(ENOTSUP);
	struct rsk *rs = rs_alloc(NULL);
	if (!rs)
		return rvm_err(ENOMEM);
	int err = 0;
	if (rs_open_channel(rs) || rdma_create_id(rs->ch, &rs->id, rs, RDMA_PS_TCP))
		err = errno ? errno : ENOMEM;
	if (!err)
		err = rs_put(rs);
	if (err) {
		rs_free(rs);
		return rvm_err(err);
	}
	return rs->fd;
}

#define RS_GET(rs, fd)                          \
	struct rsk *rs = rs_get(fd);            \
	if (!rs)                                \
		return rvm_err(EBADF);

RVM_EXPORT int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	RS_GET(rs, socket);
	pthread_mutex_lock(&rs->lock);
	int ret = -1;
	if (rs->phase != P_INIT)
		errno = EINVAL;
	else if (!addr || addrlen < sizeof(struct sockaddr_in))
		errno = EINVAL;
	else if (!(ret = rdma_bind_addr(rs->id, (struct sockaddr *)addr)))
		rs->phase = P_BOUND;
	pthread_mutex_unlock(&rs->lock);
	return ret;
}

RVM_EXPORT int rlisten(int socket, int backlog)
{
	RS_GET(rs, socket);
	pthread_mutex_lock(&rs->lock);
	int ret = 0;
	if (rs->phase != P_LISTENING) {
		ret = rdma_listen(rs->id, backlog);
		if (!ret)
			rs->phase = P_LISTENING;
	}
	pthread_mutex_unlock(&rs->lock);
	return ret;
}

static socklen_t sa_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static void copy_addr(struct sockaddr *dst, socklen_t *len, const struct sockaddr *src)
{
	socklen_t n = sa_len(src);
	memcpy(dst, src, *len < n ? *len : n);
	*len = n;
}

RVM_EXPORT int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	RS_GET(ls, socket);
	pthread_mutex_lock(&ls->lock);
	if (ls->phase != P_LISTENING) {
		pthread_mutex_unlock(&ls->lock);
		return rvm_err(EINVAL);
	}
	int nonblock = ls->fd_flags & O_NONBLOCK;
	struct rdma_cm_event *ev;
	for (;;) {
		if (!rdma_get_cm_event(ls->ch, &ev)) {
			if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
				break;
			rdma_ack_cm_event(ev);
			continue;
		}
		if ((errno != EAGAIN && errno != EWOULDBLOCK) || nonblock) {
			int e = errno;
			pthread_mutex_unlock(&ls->lock);
			return rvm_err(e);
		}
		struct pollfd p = {.fd = ls->ch->fd, .events = POLLIN};
		pthread_mutex_unlock(&ls->lock);
		poll(&p, 1, -1);
		pthread_mutex_lock(&ls->lock);
	}
	struct rsk *rs = rs_alloc(ls);
	pthread_mutex_unlock(&ls->lock);
	struct rdma_conn_param req = ev->param.conn;
	uint8_t pdata[RSW_CONN_LEN];
	size_t plen = req.private_data_len < sizeof(pdata) ? req.private_data_len : sizeof(pdata);
	if (req.private_data)
		memcpy(pdata, req.private_data, plen);
	struct rdma_cm_id *nid = ev->id;
	rdma_ack_cm_event(ev);
	int err = rs ? 0 : ENOMEM;
	if (!err && (rs_open_channel(rs) || rdma_migrate_id(nid, rs->ch)))
		err = errno;
	if (err) {
		rdma_reject(nid, NULL, 0);
		rdma_destroy_id(nid);
		if (rs)
			rs_free(rs);
		return rvm_err(err);
	}
	rs->id = nid;
	nid->context = rs;
	rs->phase = P_ACCEPTING;
	if (rs_create_ep(rs))
		err = errno ? errno : ENOMEM;
	if (!err)
		err = rs_take_conn_data(rs, pdata, plen);
	if (!err) {
		uint8_t mine[RSW_CONN_LEN];
		rs_conn_data(rs, mine);
		struct rdma_conn_param p = req;
		p.private_data = mine;
		p.private_data_len = sizeof(mine);
		if (rdma_accept(nid, &p))
			err = errno;
	} else {
		rdma_reject(nid, NULL, 0);
	}
	if (!err)
		err = rs_put(rs);
	if (err) {
		rs_free(rs);
		return rvm_err(err);
	}
	if (!nonblock) {
		pthread_mutex_lock(&rs->lock);
		int ret = rs_drive(rs, 0);
		pthread_mutex_unlock(&rs->lock);
		if (ret) {
			err = errno;
			rs_drop(rs);
			rs_free(rs);
			return rvm_err(err);
		}
	}
	if (addr && addrlen)
		copy_addr(addr, addrlen, rdma_get_peer_addr(rs->id));
	return rs->fd;
}

RVM_EXPORT int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	RS_GET(rs, socket);
	pthread_mutex_lock(&rs->lock);
	int ret = -1;
	switch (rs->phase) {
	case P_INIT:
	case P_BOUND:
		if (!addr || addrlen < sizeof(struct sockaddr_in)) {
			errno = EINVAL;
			break;
		}
		rs->phase = P_RESOLVING_ADDR;
		if (rdma_resolve_addr(rs->id, NULL, (struct sockaddr *)addr, RS_RESOLVE_MS)) {
			rs_fail(rs, errno);
			break;
		}
		/* fall through */
	case P_RESOLVING_ADDR:
	case P_RESOLVING_ROUTE:
	case P_CONNECTING:
	case P_ACCEPTING:
		ret = rs_drive(rs, rs->fd_flags & O_NONBLOCK);
		break;
	case P_CONNECTED:
	case P_DISCONNECTED:
	case P_ERROR:
		errno = EISCONN;
		break;
	default:
		errno = EINVAL;
		break;
	}
	pthread_mutex_unlock(&rs->lock);
	return ret;
}

/* ---- sending ---- */

struct iocur {
	const struct iovec *iov;
	int cnt;
	size_t off;
};

static void iocopy(struct iocur *c, uint8_t *dst, size_t n)
{
	while (n && c->cnt) {
		size_t take = c->iov->iov_len - c->off;
		if (take > n)
			take = n;
		memcpy(dst, (const uint8_t *)c->iov->iov_base + c->off, take);
		dst += take;
		n -= take;
		c->off += take;
		if (c->off == c->iov->iov_len) {
			c->iov++;
			c->cnt--;
			c->off = 0;
		}
	}
}

/* rs_stage copies n bytes into the send ring: the SGEs that hold them (1 or 2). */
static int rs_stage(struct rsk *rs, struct iocur *c, uint32_t n, struct ibv_sge sg[2])
{
	uint32_t room = rs->sbuf_size - rs->shead;
	sg[0] = (struct ibv_sge){(uintptr_t)(rs->sbuf + rs->shead), n, rs->smr->lkey};
	if (n <= room) {
		iocopy(c, rs->sbuf + rs->shead, n);
		rs->shead += n;
		if (rs->shead == rs->sbuf_size)
			rs->shead = 0;
		return 1;
	}
	sg[0].length = room;
	iocopy(c, rs->sbuf + rs->shead, room);
	iocopy(c, rs->sbuf, n - room);
	sg[1] = (struct ibv_sge){(uintptr_t)rs->sbuf, n - room, rs->smr->lkey};
	rs->shead = n - room;
	return 2;
}

/* rs_wait_send: 0 when a message may go, else -1 with errno. */
static int rs_wait_send(struct rsk *rs, int nonblock)
{
	if (!rs->wr) {
		errno = ECONNRESET;
		return -1;
	}
	if (rs_can_send(rs))
		return 0;
	if (rs_process(rs, nonblock, t_send))
		return -1;
	if (!rs->wr) {
		errno = ECONNRESET;
		return -1;
	}
	return 0;
}

static int rs_send_iomaps(struct rsk *rs, int nonblock)
{
	for (struct rs_map *m = rs->maps; m; m = m->next) {
		if (m->index < 0 || m->sent)
			continue;
		if (rs_wait_send(rs, nonblock))
			return -1;
		struct rsw_iomap e = {swap64(m->offset, rs->swap),
				      {swap64((uintptr_t)m->mr->addr, rs->swap), swap32(m->mr->rkey, rs->swap),
				       swap32((uint32_t)m->mr->length, rs->swap)}};
		struct iovec v = {&e, sizeof(e)};
		struct iocur c = {&v, 1, 0};
		struct ibv_sge sg[2];
		int n = rs_stage(rs, &c, sizeof(e), sg);
		rs->sseq_no++;
		rs->sqe_avail--;
		rs->savail -= sizeof(e);
		if (rs_post_write(rs, IBV_WR_RDMA_WRITE_WITH_IMM, RSW_MSG(RSW_OP_IOMAP_SGL, m->index), sg, n,
				  rs->sq_inline >= sizeof(e) ? IBV_SEND_INLINE : 0,
				  rs->riomap.addr + sizeof(e) * (uint32_t)m->index, rs->riomap.key))
			return -1;
		m->sent = 1;
	}
	rs->iomap_pending = 0;
	return 0;
}

static ssize_t rs_sendv(int socket, const struct iovec *iov, int iovcnt, int flags)
{
	RS_GET(rs, socket);
	size_t total = 0;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	pthread_mutex_lock(&rs->lock);
	int nonblock = rs_nonblocking(rs, flags);
	size_t left = total;
	int ret = rs_ready(rs, nonblock);
	if (!ret && rs->iomap_pending)
		ret = rs_send_iomaps(rs, nonblock);
	struct iocur c = {iov, iovcnt, 0};
	uint32_t olen = RS_OLAP_START;
	while (!ret && left) {
		ret = rs_wait_send(rs, nonblock);
		if (ret)
			break;
		uint32_t n = olen;
		if (olen < left) {
			if (olen < RS_MAX_XFER)
				olen <<= 1;
		} else {
			n = (uint32_t)left;
		}
		if (n > rs->savail)
			n = rs->savail;
		volatile struct rsw_sge *t = &rs->tsgl[rs->tsge];
		if (n > t->length)
			n = t->length;
		struct ibv_sge sg[2];
		int nsge = rs_stage(rs, &c, n, sg);
		uint64_t addr = t->addr;
		uint32_t key = t->key;
		t->addr = addr + n;
		t->length -= n;
		if (!t->length && ++rs->tsge == RSW_TARGET_SGL_ENTRIES)
			rs->tsge = 0;
		rs->sseq_no++;
		rs->sqe_avail--;
		rs->savail -= n;
		ret = rs_post_write(rs, IBV_WR_RDMA_WRITE_WITH_IMM, RSW_MSG(RSW_OP_DATA, n), sg, nsge,
				    n <= rs->sq_inline ? IBV_SEND_INLINE : 0, addr, key);
		if (!ret)
			left -= n;
	}
	pthread_mutex_unlock(&rs->lock);
	return ret && left == total ? -1 : (ssize_t)(total - left);
}

RVM_EXPORT ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	struct iovec v = {(void *)buf, len};
	return rs_sendv(socket, &v, 1, flags);
}

RVM_EXPORT ssize_t rsendto(int socket, const void *buf, size_t len, int flags,
			   const struct sockaddr *dest_addr, socklen_t addrlen)
{
	if (dest_addr || addrlen)
		return rvm_err(EISCONN);
	return rsend(socket, buf, len, flags);
}

RVM_EXPORT ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		return rvm_err(ENOTSUP);
	return rs_sendv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

RVM_EXPORT ssize_t rwrite(int socket, const void *buf, size_t count) { return rsend(socket, buf, count, 0); }

RVM_EXPORT ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	return rs_sendv(socket, iov, iovcnt, 0);
}

/* ---- receiving ---- */

/* rs_copy_out takes up to n bytes from the receive ring (consume: for
 * good, giving back buffer room and, per whole message, a credit). */
static size_t rs_copy_out(struct rsk *rs, uint8_t *dst, size_t n, int consume)
{
	uint32_t head = rs->rhead, off = rs->roff;
	size_t done = 0;
	while (done < n && head != rs->rtail) {
		uint32_t take = rs->rmsg[head].len;
		int whole = 1;
		if (take > n - done) {
			take = (uint32_t)(n - done);
			whole = 0;
		}
		uint32_t end = rs->rbuf_size - off;
		if (take > end) {
			memcpy(dst + done, rs->rbuf + off, end);
			memcpy(dst + done + end, rs->rbuf, take - end);
			off = take - end;
		} else {
			memcpy(dst + done, rs->rbuf + off, take);
			off += take;
			if (off == rs->rbuf_size)
				off = 0;
		}
		done += take;
		if (consume) {
			rs->ravail += take;
			if (whole)
				rs->rseq_no++;
			else
				rs->rmsg[head].len -= take;
		}
		if (whole)
			head = (head + 1) % rs->rmsg_n;
	}
	if (consume) {
		rs->rhead = head;
		rs->roff = off;
	}
	return done;
}

RVM_EXPORT ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	RS_GET(rs, socket);
	pthread_mutex_lock(&rs->lock);
	int nonblock = rs_nonblocking(rs, flags);
	size_t got = 0;
	int ret = rs_ready(rs, nonblock);
	while (!ret) {
		if (!rs_have_rdata(rs)) {
			ret = rs_process(rs, nonblock, t_rdata);
			if (ret)
				break;
		}
		if (flags & MSG_PEEK) {
			got = rs_copy_out(rs, buf, len, 0);
			break;
		}
		got += rs_copy_out(rs, (uint8_t *)buf + got, len - got, 1);
		rs_update_credits(rs);
		if (got == len || !(flags & MSG_WAITALL) || !rs->rd)
			break;
	}
	pthread_mutex_unlock(&rs->lock);
	return ret && !got ? -1 : (ssize_t)got;
}

RVM_EXPORT ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags, struct sockaddr *src_addr,
			     socklen_t *addrlen)
{
	ssize_t n = rrecv(socket, buf, len, flags);
	if (n > 0 && src_addr && addrlen)
		rgetpeername(socket, src_addr, addrlen);
	return n;
}

static ssize_t rs_recvv(int socket, const struct iovec *iov, int iovcnt, int flags)
{
	ssize_t total = 0;
	for (int i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_len)
			continue;
		ssize_t n = rrecv(socket, iov[i].iov_base, iov[i].iov_len, total ? flags | MSG_DONTWAIT : flags);
		if (n < 0)
			return total ? total : -1;
		total += n;
		if ((size_t)n < iov[i].iov_len)
			break;
	}
	return total;
}

RVM_EXPORT ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	if (msg->msg_control && msg->msg_controllen)
		return rvm_err(ENOTSUP);
	return rs_recvv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

RVM_EXPORT ssize_t rread(int socket, void *buf, size_t count) { return rrecv(socket, buf, count, 0); }

RVM_EXPORT ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	return rs_recvv(socket, iov, iovcnt, 0);
}

/* ---- poll and select ---- */

static int rs_revents_locked(struct rsk *rs, short events)
{
	if (rs->phase >= P_RESOLVING_ADDR && rs->phase <= P_ACCEPTING) {
		if (rs_drive(rs, 1) && errno == EINPROGRESS)
			return 0;
	}
	switch (rs->phase) {
	case P_LISTENING: {
		struct pollfd p = {.fd = rs->ch->fd, .events = events};
		poll(&p, 1, 0);
		return p.revents;
	}
	case P_CONNECT_ERROR:
		return (events & (POLLIN | POLLOUT)) | POLLERR;
	case P_CONNECTED:
	case P_DISCONNECTED:
	case P_ERROR: {
		rs_update_credits(rs);
		rs_poll_cq(rs);
		rs_update_credits(rs);
		int rev = 0;
		if ((events & POLLIN) && t_rdata(rs))
			rev |= POLLIN;
		if ((events & POLLOUT) && rs_can_send(rs))
			rev |= POLLOUT;
		/* POLLHUP once the data before the disconnect is read (Linux's
		 * rsockets set it at once: docs/rsockets.md). */
		if (rs->phase == P_DISCONNECTED && !rs_have_rdata(rs))
			rev |= POLLHUP;
		else if (rs->phase == P_ERROR)
			rev |= POLLERR;
		return rev;
	}
	default:
		return 0;
	}
}

/* rs_arm: the descriptor that wakes a poll for this socket (-1: none),
 * once the CQ is armed; *rev is set if something is ready already. */
static int rs_arm(struct rsk *rs, short events, short *rev)
{
	int fd = -1;
	pthread_mutex_lock(&rs->lock);
	*rev = 0;
	switch (rs->phase) {
	case P_CONNECTED:
		if (!rs->armed) {
			ibv_req_notify_cq(rs->cq, 0);
			rs->armed = 1;
			*rev = (short)rs_revents_locked(rs, events);
		}
		fd = rs->epfd;
		break;
	case P_LISTENING:
	case P_RESOLVING_ADDR:
	case P_RESOLVING_ROUTE:
	case P_CONNECTING:
	case P_ACCEPTING:
		fd = rs->ch->fd;
		break;
	default:
		*rev = (short)rs_revents_locked(rs, events);
		break;
	}
	pthread_mutex_unlock(&rs->lock);
	return fd;
}

static int rs_revents(struct rsk *rs, short events, int woke)
{
	pthread_mutex_lock(&rs->lock);
	if (woke && rs->phase == P_CONNECTED)
		rs_take_events(rs);
	int rev = rs_revents_locked(rs, events);
	pthread_mutex_unlock(&rs->lock);
	return rev;
}

static int ms_left(const struct timespec *end)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	long ms = (end->tv_sec - now.tv_sec) * 1000 + (end->tv_nsec - now.tv_nsec) / 1000000;
	return ms < 0 ? 0 : (int)ms;
}

/* rpoll: rsockets and ordinary descriptors together. A call with no
 * rsocket in it is poll() (rping, ucmatose and udaddy poll event
 * channels with it). */
RVM_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	struct rsk **rss = calloc(nfds ? nfds : 1, sizeof(*rss));
	struct pollfd *pf = calloc(nfds ? nfds : 1, sizeof(*pf));
	int any = 0, ret = 0;
	if (!rss || !pf) {
		free(rss);
		free(pf);
		return rvm_err(ENOMEM);
	}
	for (nfds_t i = 0; i < nfds; i++)
		any |= !!(rss[i] = rs_get(fds[i].fd));
	if (!any) {
		free(rss);
		free(pf);
		return poll(fds, nfds, timeout);
	}
	struct timespec end;
	clock_gettime(CLOCK_MONOTONIC, &end);
	if (timeout > 0) {
		end.tv_sec += timeout / 1000;
		end.tv_nsec += (long)(timeout % 1000) * 1000000;
		if (end.tv_nsec >= 1000000000) {
			end.tv_sec++;
			end.tv_nsec -= 1000000000;
		}
	}
	int woke = 0;
	for (;;) {
		ret = 0;
		for (nfds_t i = 0; i < nfds; i++) {
			if (rss[i]) {
				fds[i].revents = (short)rs_revents(rss[i], fds[i].events, woke && pf[i].revents);
			} else {
				fds[i].revents = 0;
				if (fds[i].fd >= 0)
					poll(&fds[i], 1, 0);
			}
			ret += !!fds[i].revents;
		}
		if (ret || !timeout)
			break;
		for (nfds_t i = 0; i < nfds && !ret; i++) {
			pf[i] = fds[i];
			pf[i].revents = 0;
			if (rss[i]) {
				short rev;
				pf[i].fd = rs_arm(rss[i], fds[i].events, &rev);
				pf[i].events = POLLIN;
				if (rev) {
					fds[i].revents = rev;
					ret = 1;
				}
			}
		}
		if (ret)
			break;
		int n = poll(pf, nfds, timeout < 0 ? -1 : ms_left(&end));
		if (n <= 0) {
			ret = n;
			for (nfds_t i = 0; i < nfds; i++)
				fds[i].revents = 0;
			break;
		}
		woke = 1;
	}
	free(rss);
	free(pf);
	return ret;
}

RVM_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
		       struct timeval *timeout)
{
	struct pollfd *fds = calloc(nfds > 0 ? (size_t)nfds : 1, sizeof(*fds));
	if (!fds)
		return rvm_err(ENOMEM);
	int n = 0;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		int want = 0;
		if (readfds && FD_ISSET(fd, readfds))
			ev |= POLLIN, want = 1;
		if (writefds && FD_ISSET(fd, writefds))
			ev |= POLLOUT, want = 1;
		if (exceptfds && FD_ISSET(fd, exceptfds))
			want = 1;
		if (want)
			fds[n++] = (struct pollfd){.fd = fd, .events = ev};
	}
	int ms = timeout ? (int)(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
	int ret = rpoll(fds, (nfds_t)n, ms);
	if (readfds)
		FD_ZERO(readfds);
	if (writefds)
		FD_ZERO(writefds);
	if (exceptfds)
		FD_ZERO(exceptfds);
	if (ret > 0) {
		ret = 0;
		for (int i = 0; i < n; i++) {
			if (readfds && (fds[i].revents & (POLLIN | POLLHUP)))
				FD_SET(fds[i].fd, readfds), ret++;
			if (writefds && (fds[i].revents & POLLOUT))
				FD_SET(fds[i].fd, writefds), ret++;
			if (exceptfds && (fds[i].revents & ~(POLLIN | POLLOUT)))
				FD_SET(fds[i].fd, exceptfds), ret++;
		}
	}
	free(fds);
	return ret;
}

/* ---- shutdown and close ---- */

static int rs_shutdown_locked(struct rsk *rs, int how)
{
	if (rs->phase == P_CONNECTED) {
		uint32_t ctrl;
		if (how == SHUT_RDWR) {
			ctrl = RSW_CTRL_DISCONNECT;
			rs->rd = rs->wr = 0;
		} else if (how == SHUT_WR) {
			rs->wr = 0;
			ctrl = rs->rd ? RSW_CTRL_SHUTDOWN : RSW_CTRL_DISCONNECT;
		} else if (how == SHUT_RD) {
			rs->rd = 0;
			if (rs->wr)
				return 0;
			ctrl = RSW_CTRL_DISCONNECT;
		} else {
			errno = EINVAL;
			return -1;
		}
		if (!rs_ctrl_avail(rs))
			rs_process(rs, 0, t_ctrl);
		if (rs->phase == P_CONNECTED && rs_ctrl_avail(rs))
			rs_post_ctrl(rs, RSW_MSG(RSW_OP_CTRL, ctrl));
	}
	if (rs->phase == P_CONNECTED)
		rs_process(rs, 0, t_drained);
	if ((rs->phase == P_DISCONNECTED || rs->phase == P_ERROR) && rs->id->qp && !rs->qp_down) {
		/* Flush what is posted (wakes an rpoll on this socket) and
		 * tell the CM. */
		rdma_disconnect(rs->id);
		rs->qp_down = 1;
	}
	return 0;
}

RVM_EXPORT int rshutdown(int socket, int how)
{
	RS_GET(rs, socket);
	pthread_mutex_lock(&rs->lock);
	int ret = rs_shutdown_locked(rs, how);
	pthread_mutex_unlock(&rs->lock);
	return ret;
}

RVM_EXPORT int rclose(int socket)
{
	RS_GET(rs, socket);
	rs_drop(rs);
	pthread_mutex_lock(&rs->lock);
	if (rs->phase == P_CONNECTED)
		rs_shutdown_locked(rs, SHUT_RDWR);
	pthread_mutex_unlock(&rs->lock);
	rs_free(rs);
	return 0;
}

/* ---- addresses, options, flags ---- */

RVM_EXPORT int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	RS_GET(rs, socket);
	if (!addr || !addrlen)
		return rvm_err(EFAULT);
	copy_addr(addr, addrlen, rdma_get_peer_addr(rs->id));
	return 0;
}

RVM_EXPORT int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	RS_GET(rs, socket);
	if (!addr || !addrlen)
		return rvm_err(EFAULT);
	copy_addr(addr, addrlen, rdma_get_local_addr(rs->id));
	return 0;
}

static void set_bit(uint64_t *opts, int name, int on)
{
	if (name < 0 || name > 63)
		return;
	if (on)
		*opts |= 1ULL << name;
	else
		*opts &= ~(1ULL << name);
}

RVM_EXPORT int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	RS_GET(rs, socket);
	if (!optval || optlen < sizeof(int))
		return rvm_err(EINVAL);
	int v = *(const int *)optval;
	int ret = 0;
	pthread_mutex_lock(&rs->lock);
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_REUSEADDR:
			/* The daemon's ports are per device; a refusal is no error here, as over IB. */
			rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, (void *)optval, sizeof(int));
			set_bit(&rs->so_opts, optname, v);
			break;
		case SO_RCVBUF:
			if (!rs->rbuf && v > 0)
				rs->rbuf_size = (uint32_t)v << 1;
			break;
		case SO_SNDBUF:
			if (!rs->sbuf && v > 0)
				rs->sbuf_size = (uint32_t)v << 1;
			if (rs->sbuf_size < RS_SNDLOWAT)
				rs->sbuf_size = RS_SNDLOWAT << 1;
			break;
		case SO_LINGER:
			set_bit(&rs->so_opts, optname, !((const struct linger *)optval)->l_onoff);
			break;
		case SO_KEEPALIVE: /* recorded; no keepalive messages are sent (docs/rsockets.md) */
		case SO_OOBINLINE:
			set_bit(&rs->so_opts, optname, v);
			break;
		default:
			ret = ENOTSUP;
		}
		break;
	case IPPROTO_TCP:
		switch (optname) {
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
		case TCP_MAXSEG:
			break;
		case TCP_KEEPIDLE:
			if (v <= 0)
				ret = EINVAL;
			else
				rs->keepalive_time = v;
			break;
		case TCP_NODELAY:
			set_bit(&rs->tcp_opts, optname, v);
			break;
		default:
			ret = ENOTSUP;
		}
		break;
	case IPPROTO_IPV6:
		if (optname != IPV6_V6ONLY) {
			ret = ENOTSUP;
			break;
		}
		if (rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, (void *)optval, sizeof(int)))
			ret = errno;
		else
			set_bit(&rs->ipv6_opts, optname, v);
		break;
	case SOL_RDMA:
		if (rs->phase >= P_RESOLVING_ADDR) {
			ret = EINVAL;
			break;
		}
		switch (optname) {
		case RDMA_SQSIZE:
			rs->sq_size = (uint32_t)v > RS_QP_MAX ? RS_QP_MAX : (uint32_t)v;
			break;
		case RDMA_RQSIZE:
			rs->rq_size = (uint32_t)v > RS_QP_MAX ? RS_QP_MAX : (uint32_t)v;
			break;
		case RDMA_INLINE:
			rs->sq_inline = (uint32_t)v > RS_QP_MAX ? RS_QP_MAX : (uint32_t)v;
			break;
		case RDMA_IOMAPSIZE:
			rs->iomap_size = rsw_iomap_unscale(rsw_iomap_scale((unsigned)v));
			break;
		default: /* RDMA_ROUTE: paths come from the daemon */
			ret = ENOTSUP;
		}
		break;
	default:
		ret = ENOTSUP;
	}
	pthread_mutex_unlock(&rs->lock);
	return rvm_err(ret);
}

RVM_EXPORT int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
	RS_GET(rs, socket);
	if (!optval || !optlen)
		return rvm_err(EFAULT);
	int ret = 0, v = 0;
	pthread_mutex_lock(&rs->lock);
	switch (level) {
	case SOL_SOCKET:
		switch (optname) {
		case SO_REUSEADDR:
		case SO_KEEPALIVE:
		case SO_OOBINLINE:
			v = !!(rs->so_opts & (1ULL << optname));
			break;
		case SO_RCVBUF:
			v = (int)rs->rbuf_size;
			break;
		case SO_SNDBUF:
			v = (int)rs->sbuf_size;
			break;
		case SO_ERROR:
			v = rs->err;
			rs->err = 0;
			break;
		case SO_LINGER:
			if (*optlen < sizeof(struct linger)) {
				ret = EINVAL;
				break;
			}
			((struct linger *)optval)->l_onoff = !(rs->so_opts & (1ULL << optname));
			((struct linger *)optval)->l_linger = 0;
			*optlen = sizeof(struct linger);
			pthread_mutex_unlock(&rs->lock);
			return 0;
		default:
			ret = ENOTSUP;
		}
		break;
	case IPPROTO_TCP:
		switch (optname) {
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
			v = 1;
			break;
		case TCP_KEEPIDLE:
			v = rs->keepalive_time;
			break;
		case TCP_NODELAY:
			v = !!(rs->tcp_opts & (1ULL << optname));
			break;
		case TCP_MAXSEG:
			v = rs->id->route.num_paths && rs->id->route.path_rec
				    ? 1 << (7 + rs->id->route.path_rec->mtu)
				    : 2048;
			break;
		default:
			ret = ENOTSUP;
		}
		break;
	case IPPROTO_IPV6:
		if (optname == IPV6_V6ONLY)
			v = !!(rs->ipv6_opts & (1ULL << optname));
		else
			ret = ENOTSUP;
		break;
	case SOL_RDMA:
		switch (optname) {
		case RDMA_SQSIZE:
			v = (int)rs->sq_size;
			break;
		case RDMA_RQSIZE:
			v = (int)rs->rq_size;
			break;
		case RDMA_INLINE:
			v = (int)rs->sq_inline;
			break;
		case RDMA_IOMAPSIZE:
			v = (int)rs->iomap_size;
			break;
		default:
			ret = ENOTSUP;
		}
		break;
	default:
		ret = ENOTSUP;
	}
	pthread_mutex_unlock(&rs->lock);
	if (ret)
		return rvm_err(ret);
	if (*optlen < sizeof(int))
		return rvm_err(EINVAL);
	*(int *)optval = v;
	*optlen = sizeof(int);
	return 0;
}

RVM_EXPORT int rfcntl(int socket, int cmd, ... /* arg */)
{
	RS_GET(rs, socket);
	va_list ap;
	va_start(ap, cmd);
	int ret = 0;
	pthread_mutex_lock(&rs->lock);
	switch (cmd) {
	case F_GETFL:
		ret = rs->fd_flags;
		break;
	case F_SETFL:
		rs->fd_flags = va_arg(ap, int);
		break;
	default:
		ret = rvm_err(ENOTSUP);
	}
	pthread_mutex_unlock(&rs->lock);
	va_end(ap);
	return ret;
}

/* ---- iomaps ---- */

RVM_EXPORT off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	RS_GET(rs, socket);
	if (prot & ~(PROT_WRITE | PROT_NONE))
		return rvm_err(EINVAL);
	pthread_mutex_lock(&rs->lock);
	int err = 0, index = -1;
	if (!rs->id->pd) { /* no QP yet */
		err = EINVAL;
	} else if (prot & PROT_WRITE) {
		if (!rs->slots && rs->riomap.length)
			rs->slots = calloc(rs->riomap.length, sizeof(*rs->slots));
		for (uint32_t i = 0; rs->slots && i < rs->riomap.length && index < 0; i++)
			if (!rs->slots[i])
				index = (int)i;
		if (index < 0)
			err = ENOMEM;
	}
	struct rs_map *m = err ? NULL : calloc(1, sizeof(*m));
	if (!err && !m)
		err = ENOMEM;
	if (!err) {
		int access = IBV_ACCESS_LOCAL_WRITE | (index >= 0 ? IBV_ACCESS_REMOTE_WRITE : 0);
		m->mr = ibv_reg_mr(rs->id->pd, buf, len, access);
		if (!m->mr) {
			err = errno ? errno : ENOMEM;
			free(m);
		}
	}
	if (!err) {
		m->index = index;
		m->offset = offset == -1 ? (uint64_t)(uintptr_t)buf : (uint64_t)offset;
		m->next = rs->maps;
		rs->maps = m;
		if (index >= 0) {
			rs->slots[index] = m;
			rs->iomap_pending = 1;
		}
	}
	pthread_mutex_unlock(&rs->lock);
	return err ? rvm_err(err) : (off_t)m->offset;
}

RVM_EXPORT int riounmap(int socket, void *buf, size_t len)
{
	RS_GET(rs, socket);
	pthread_mutex_lock(&rs->lock);
	int err = EINVAL;
	for (struct rs_map **p = &rs->maps; *p; p = &(*p)->next) {
		struct rs_map *m = *p;
		if (m->mr->addr != buf || m->mr->length != len)
			continue;
		*p = m->next;
		if (m->index >= 0)
			rs->slots[m->index] = NULL;
		ibv_dereg_mr(m->mr);
		free(m);
		err = 0;
		break;
	}
	pthread_mutex_unlock(&rs->lock);
	return rvm_err(err);
}

/* The peer's riomap that holds offset, from the table it writes into ours. */
static int rs_find_iomap(struct rsk *rs, uint64_t offset, struct rsw_iomap *out)
{
	for (uint32_t i = 0; i < rs->iomap_size; i++) {
		volatile struct rsw_iomap *e = &rs->tiomap[i];
		uint64_t o = e->offset;
		uint32_t l = e->sge.length;
		if (l && offset >= o && offset < o + l) {
			out->offset = o;
			out->sge.addr = e->sge.addr;
			out->sge.key = e->sge.key;
			out->sge.length = l;
			return 0;
		}
	}
	return -1;
}

RVM_EXPORT size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	struct rsk *rs = rs_get(socket);
	if (!rs) {
		errno = EBADF;
		return (size_t)-1;
	}
	pthread_mutex_lock(&rs->lock);
	int nonblock = rs_nonblocking(rs, flags);
	size_t left = count;
	int ret = rs_ready(rs, nonblock);
	if (!ret && rs->iomap_pending)
		ret = rs_send_iomaps(rs, nonblock);
	struct iovec v = {(void *)buf, count};
	struct iocur c = {&v, 1, 0};
	uint32_t olen = RS_OLAP_START;
	uint64_t off = (uint64_t)offset;
	while (!ret && left) {
		struct rsw_iomap m;
		if (rs_find_iomap(rs, off, &m))
			break;
		ret = rs_wait_send(rs, nonblock);
		if (ret)
			break;
		uint32_t n = olen;
		if (olen < left) {
			if (olen < RS_MAX_XFER)
				olen <<= 1;
		} else {
			n = (uint32_t)left;
		}
		if (n > rs->savail)
			n = rs->savail;
		if (n > m.offset + m.sge.length - off)
			n = (uint32_t)(m.offset + m.sge.length - off);
		struct ibv_sge sg[2];
		int nsge = rs_stage(rs, &c, n, sg);
		rs->sqe_avail--;
		rs->savail -= n;
		ret = rs_post_write(rs, IBV_WR_RDMA_WRITE, RSW_MSG(RSW_OP_WRITE, n), sg, nsge,
				    n <= rs->sq_inline ? IBV_SEND_INLINE : 0, m.sge.addr + (off - m.offset),
				    m.sge.key);
		if (!ret) {
			left -= n;
			off += n;
		}
	}
	pthread_mutex_unlock(&rs->lock);
	return ret && left == count ? (size_t)-1 : count - left;
}
