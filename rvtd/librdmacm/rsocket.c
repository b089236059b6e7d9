/* rsockets: the table, life cycle, connecting and accepting, shutdown and
 * close, addresses and options (rsock.h). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "rsock.h"
#include <rdma/rsocket.h>

static pthread_mutex_t rs_tab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rsk **rs_tab;
static int rs_tab_n;

struct rsk *rs_get(int fd)
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



/* ---- life cycle ---- */

static struct rsk *rs_alloc(const struct rsk *from)
{
	struct rsk *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return NULL;
	pthread_mutex_init(&rs->lock, NULL);
	pthread_cond_init(&rs->cond, NULL);
	rs->fd = -1;
	rs->epfd = -1;
	rs->kickfd = -1;
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
	if (rs->kickfd >= 0)
		close(rs->kickfd);
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
	pthread_cond_destroy(&rs->cond);
	pthread_mutex_destroy(&rs->lock);
	free(rs);
}

void rs_down(struct rsk *rs, enum rs_phase p, int err)
{
	rs->phase = p;
	rs->rd = rs->wr = 0;
	if (err)
		rs->err = err;
}

int rs_post_recv(struct rsk *rs)
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
	rs->kickfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (rs->kickfd < 0)
		return -1;
	struct epoll_event ev = {.events = EPOLLIN};
	if (epoll_ctl(rs->epfd, EPOLL_CTL_ADD, rs->cc->fd, &ev) ||
	    epoll_ctl(rs->epfd, EPOLL_CTL_ADD, rs->ch->fd, &ev) ||
	    epoll_ctl(rs->epfd, EPOLL_CTL_ADD, rs->kickfd, &ev))
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
int rs_drive(struct rsk *rs, int nonblock)
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
			/* Bounded: another thread of the socket (an rpoll, a
			 * send beside this receive) may take the event that
			 * moves it on while this one waits unlocked. */
			struct pollfd p = {.fd = rs->ch->fd, .events = POLLIN};
			pthread_mutex_unlock(&rs->lock);
			poll(&p, 1, RS_SHARED_WAIT_MS);
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
int rs_ready(struct rsk *rs, int nonblock)
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

static int do_rsocket(int domain, int type, int protocol)
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


static int do_rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
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

static int do_rlisten(int socket, int backlog)
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

static int do_raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
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

static int do_rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
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

/* rs_keepalive_off takes rs out of the keepalive service (as Linux's
 * rshutdown and rclose do), if it ever was in it; SO_KEEPALIVE still
 * reads 1, and setting it again puts the socket back. */
static void rs_keepalive_off(struct rsk *rs)
{
	pthread_mutex_lock(&rs->lock);
	int used = rs->ka_used;
	rs->ka_on = 0;
	pthread_mutex_unlock(&rs->lock);
	if (used)
		rs_keepalive_remove(rs);
}

static int do_rshutdown(int socket, int how)
{
	RS_GET(rs, socket);
	rs_keepalive_off(rs);
	pthread_mutex_lock(&rs->lock);
	int ret = rs_shutdown_locked(rs, how);
	pthread_mutex_unlock(&rs->lock);
	return ret;
}

static int do_rclose(int socket)
{
	RS_GET(rs, socket);
	rs_drop(rs);
	rs_keepalive_off(rs);
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

/* rs_set_keepalive: SO_KEEPALIVE. On: into the keepalive service with
 * TCP_KEEPIDLE's time, or the kernel's tcp_keepalive_time when none was
 * set (kept, so TCP_KEEPIDLE reads it back), as Linux's rsockets; the
 * first message goes that long after this call. Off: out of it. The
 * service is called without the socket's mutex (rskeep.c). */
static int rs_set_keepalive(struct rsk *rs, int on)
{
	on = !!on;
	pthread_mutex_lock(&rs->lock);
	int was = rs->ka_on;
	if (on && !rs->keepalive_time)
		rs->keepalive_time = (int)rs_keepalive_default();
	unsigned secs = (unsigned)rs->keepalive_time;
	rs->ka_on = on;
	rs->ka_used |= on;
	pthread_mutex_unlock(&rs->lock);
	int ret = 0;
	if (on && !was)
		ret = rs_keepalive_set(rs, secs, 1);
	else if (!on && was)
		rs_keepalive_remove(rs);
	pthread_mutex_lock(&rs->lock);
	if (ret)
		rs->ka_on = 0;
	else
		set_bit(&rs->so_opts, SO_KEEPALIVE, on);
	pthread_mutex_unlock(&rs->lock);
	return ret;
}

static int do_rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	RS_GET(rs, socket);
	if (!optval || optlen < sizeof(int))
		return rvm_err(EINVAL);
	int v = *(const int *)optval;
	if (level == SOL_SOCKET && optname == SO_KEEPALIVE)
		return rvm_err(rs_set_keepalive(rs, v));
	int ret = 0, keepidle = 0;
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
			if (v <= 0) {
				ret = EINVAL;
			} else {
				rs->keepalive_time = v;
				keepidle = rs->ka_on;
			}
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
	if (keepidle) /* with keepalive on, the next message v seconds from now */
		ret = rs_keepalive_set(rs, (unsigned)v, 0);
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

/* ---- errno: these calls keep the caller's on success (RS_KEEP_ERRNO, rsock.h) ---- */

RVM_EXPORT int rsocket(int domain, int type, int protocol)
{
	return RS_KEEP_ERRNO(do_rsocket(domain, type, protocol));
}

RVM_EXPORT int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	return RS_KEEP_ERRNO(do_rbind(socket, addr, addrlen));
}

RVM_EXPORT int rlisten(int socket, int backlog)
{
	return RS_KEEP_ERRNO(do_rlisten(socket, backlog));
}

RVM_EXPORT int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	return RS_KEEP_ERRNO(do_raccept(socket, addr, addrlen));
}

RVM_EXPORT int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	return RS_KEEP_ERRNO(do_rconnect(socket, addr, addrlen));
}

RVM_EXPORT int rshutdown(int socket, int how)
{
	return RS_KEEP_ERRNO(do_rshutdown(socket, how));
}

RVM_EXPORT int rclose(int socket)
{
	return RS_KEEP_ERRNO(do_rclose(socket));
}

RVM_EXPORT int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
	return RS_KEEP_ERRNO(do_rsetsockopt(socket, level, optname, optval, optlen));
}
