/* rsockets' data path: posting, credits, completions, waiting, sending,
 * receiving, iomaps (rsock.h). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
#include "rsock.h"
#include <rdma/rsocket.h>

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

int rs_post_ctrl(struct rsk *rs, uint32_t msg)
{
	rs->ctrl_seq++;
	return rs_post_write(rs, IBV_WR_RDMA_WRITE_WITH_IMM, msg, NULL, 0, 0, 0, 0);
}

int rs_ctrl_avail(const struct rsk *rs) { return rs->ctrl_seq != rs->ctrl_max; }

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

void rs_update_credits(struct rsk *rs)
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
	/* Retries run out: the peer is gone (what a keepalive finds out);
	 * ETIMEDOUT, as TCP reports unanswered keepalive probes. Linux's
	 * rsockets say EIO for every failed send. */
	if (wc->status != IBV_WC_SUCCESS && rs->phase == P_CONNECTED)
		rs_down(rs, P_ERROR, wc->status == IBV_WC_RETRY_EXC_ERR ? ETIMEDOUT : EIO);
}

void rs_wake(struct rsk *rs)
{
	uint64_t one = 1;
	if (write(rs->kickfd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		rs_down(rs, P_ERROR, errno);
}

void rs_unwake_now(struct rsk *rs)
{
	uint64_t kicks;
	if (read(rs->kickfd, &kicks, sizeof(kicks)) < 0 && errno != EAGAIN)
		rs_down(rs, P_ERROR, errno);
}

void rs_unwake(struct rsk *rs)
{
	if (rs->phase == P_CONNECTED)
		rs_unwake_now(rs);
}

/* rs_kick wakes the thread sleeping in rs_process (rs->sleeper): another
 * thread took the events or completions it waits for. */
static void rs_kick(struct rsk *rs)
{
	if (rs->sleeper)
		rs_wake(rs);
}

void rs_poll_cq(struct rsk *rs)
{
	struct ibv_wc wc[16];
	int n, recvd = 0, total = 0;
	if (!rs->cq)
		return;
	while ((n = ibv_poll_cq(rs->cq, 16, wc)) > 0) {
		total += n;
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
	if (total) {
		/* What another thread of this socket waits for may be here. */
		rs_kick(rs);
		pthread_cond_broadcast(&rs->cond);
	}
}

/* rs_take_events reads what woke the socket: completion events (the CQ is
 * then unarmed) and CM events (a DISCONNECTED ends a connection whose peer
 * vanished without its disconnect message). */
void rs_take_events(struct rsk *rs)
{
	struct ibv_cq *cq;
	void *ctx;
	int took = 0;
	while (rs->cc && !ibv_get_cq_event(rs->cc, &cq, &ctx)) {
		took = 1;
		rs->armed = 0;
		if (++rs->unacked >= 64) {
			ibv_ack_cq_events(rs->cq, rs->unacked);
			rs->unacked = 0;
		}
	}
	if (rs->cc && errno != EAGAIN && errno != EWOULDBLOCK && rs->phase == P_CONNECTED)
		rs_down(rs, P_ERROR, EIO);
	if (took)
		rs_kick(rs); /* the sleeper's wake-up, taken here */
	if (rs->phase < P_CONNECTED)
		return; /* rs_drive reads the CM events while connecting */
	struct rdma_cm_event *ev;
	while (!rdma_get_cm_event(rs->ch, &ev)) {
		rs_kick(rs);
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

/* rs_sleep waits, unlocked, until the socket's CQ or CM channel has news.
 * One thread at a time sleeps in poll(); others wait until it has taken
 * what woke it, then look again (rsock.h). */
static void rs_sleep(struct rsk *rs)
{
	if (rs->sleeper || rs->unbounded) {
		/* An rpoll waits unbounded: it looks again, bounds its wait,
		 * and wakes this thread (rs_unarm). */
		if (rs->unbounded)
			rs_wake(rs);
		pthread_cond_wait(&rs->cond, &rs->lock);
		return;
	}
	rs->sleeper = 1;
	struct pollfd p = {.fd = rs->epfd, .events = POLLIN};
	int ms = rs->pollers ? RS_SHARED_WAIT_MS : -1;
	pthread_mutex_unlock(&rs->lock);
	poll(&p, 1, ms);
	pthread_mutex_lock(&rs->lock);
	rs->sleeper = 0;
	rs_unwake(rs);
	rs_take_events(rs);
	pthread_cond_broadcast(&rs->cond);
}

/* rs_process polls the CQ until test holds: 0, or -1 with errno
 * (EWOULDBLOCK when nonblock and test does not hold yet). */
int rs_process(struct rsk *rs, int nonblock, int (*test)(struct rsk *))
{
	int waiting = 0, ret = 0;
	for (;;) {
		rs_update_credits(rs);
		rs_poll_cq(rs);
		rs_update_credits(rs);
		if (test(rs))
			break;
		if (nonblock) {
			errno = EWOULDBLOCK;
			ret = -1;
			break;
		}
		if (!rs->armed) {
			ibv_req_notify_cq(rs->cq, 0);
			rs->armed = 1;
			continue; /* what completed before the arm */
		}
		if (!waiting) {
			waiting = 1;
			rs->waiters++;
		}
		rs_sleep(rs);
	}
	if (waiting)
		rs->waiters--;
	return ret;
}

int rs_have_rdata(struct rsk *rs) { return rs->rhead != rs->rtail; }
int t_rdata(struct rsk *rs) { return rs_have_rdata(rs) || !rs->rd; }
int rs_can_send(struct rsk *rs)
{
	return rs->sqe_avail > 0 && rs->savail >= RS_SNDLOWAT && rs->sseq_no != rs->sseq_comp &&
	       rs->tsgl[rs->tsge].length != 0;
}
int t_send(struct rsk *rs) { return rs_can_send(rs) || !rs->wr; }
int t_ctrl(struct rsk *rs) { return rs_ctrl_avail(rs) || rs->phase != P_CONNECTED; }
int t_drained(struct rsk *rs)
{
	return (int)(rs->ctrl_max - rs->ctrl_seq) + rs->sqe_avail == (int)rs->sq_size ||
	       rs->phase != P_CONNECTED;
}

int rs_nonblocking(const struct rsk *rs, int flags)
{
	return (rs->fd_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
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

/* rs_xfer_len is how much of left the next transfer of a call takes:
 * *olen, which doubles with each transfer up to RS_MAX_XFER, or what is
 * left; at most avail. */
static uint32_t rs_xfer_len(uint32_t *olen, size_t left, uint32_t avail)
{
	uint32_t n = *olen;
	if (*olen < left) {
		if (*olen < RS_MAX_XFER)
			*olen <<= 1;
	} else {
		n = (uint32_t)left;
	}
	return n < avail ? n : avail;
}

static ssize_t rs_sendv(int socket, const struct iovec *iov, int iovcnt, int flags)
{
	RS_GET(rs, socket);
	size_t total = 0;
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	int saved = errno; /* kept on success, as in rrecv */
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
		uint32_t n = rs_xfer_len(&olen, left, rs->savail);
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
	if (ret && left == total)
		return -1;
	errno = saved;
	return (ssize_t)(total - left);
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
		/* The hang-up that rpolls wait for is due now (rs_arm). */
		if (rs->phase == P_DISCONNECTED && rs->pollers && head == rs->rtail)
			rs_wake(rs);
	}
	return done;
}

RVM_EXPORT ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	RS_GET(rs, socket);
	int saved = errno; /* kept on success: the EAGAINs of the library's own descriptors are not the caller's */
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
	if (!ret && !got && len && rs->phase == P_ERROR && rs->err) {
		/* Nothing left to read on a failed connection: its error,
		 * once (and cleared, as SO_ERROR clears it), then EOF, as a
		 * TCP socket reports a keepalive timeout. Linux's rsockets
		 * return 0 at once. */
		errno = rs->err;
		rs->err = 0;
		ret = -1;
	}
	pthread_mutex_unlock(&rs->lock);
	if (ret && !got)
		return -1;
	errno = saved;
	return (ssize_t)got;
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

/* ---- iomaps ---- */

static off_t do_riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
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

static int do_riounmap(int socket, void *buf, size_t len)
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
	int saved = errno; /* kept on success, as in rrecv */
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
		uint32_t n = rs_xfer_len(&olen, left, rs->savail);
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
	if (ret && left == count)
		return (size_t)-1;
	errno = saved;
	return count - left;
}

/* ---- errno: these calls keep the caller's on success (RS_KEEP_ERRNO, rsock.h) ---- */

RVM_EXPORT off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	return RS_KEEP_ERRNO(do_riomap(socket, buf, len, prot, flags, offset));
}

RVM_EXPORT int riounmap(int socket, void *buf, size_t len)
{
	return RS_KEEP_ERRNO(do_riounmap(socket, buf, len));
}
