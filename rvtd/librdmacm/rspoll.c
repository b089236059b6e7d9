/* rpoll and rselect over rsockets and ordinary descriptors (rsock.h). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>
#include "rsock.h"
#include <rdma/rsocket.h>

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
		rs->pollers++; /* until rs_unarm */
		if (rs->sleeper || rs->unbounded)
			rs_wake(rs); /* it may sleep unbounded: it bounds its wait */
		if (!rs->armed) {
			ibv_req_notify_cq(rs->cq, 0);
			rs->armed = 1;
			*rev = (short)rs_revents_locked(rs, events);
		}
		fd = rs->epfd;
		break;
	case P_DISCONNECTED:
		*rev = (short)rs_revents_locked(rs, events);
		if (!*rev) {
			/* Data from before the disconnect is still unread, and
			 * the hang-up waits for it: the thread that reads the
			 * last of it writes kickfd (rs_copy_out). A kick left
			 * from before, which nobody else may wait for, is
			 * taken back first. */
			if (!rs->pollers && !rs->sleeper)
				rs_unwake_now(rs);
			rs->pollers++; /* until rs_unarm */
			fd = rs->kickfd;
		}
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

/* rs_alone: whether this rpoll, which polls the socket's epfd, is the
 * only thread that may take its events; if so it is counted as waiting
 * unbounded (rs->unbounded) until rs_unarm. */
static int rs_alone(struct rsk *rs)
{
	pthread_mutex_lock(&rs->lock);
	int alone = !rs->waiters && rs->pollers == 1;
	rs->unbounded += (unsigned)alone;
	pthread_mutex_unlock(&rs->lock);
	return alone;
}

/* rs_unarm: this rpoll no longer polls the socket's epfd. One that waited
 * unbounded (alone) takes back the wake-ups written meanwhile (rs_sleep,
 * rs_arm) and lets the threads that waited for it go on. */
static void rs_unarm(struct rsk *rs, int alone)
{
	pthread_mutex_lock(&rs->lock);
	if (rs->pollers)
		rs->pollers--;
	if (alone && !--rs->unbounded) {
		rs_unwake(rs);
		pthread_cond_broadcast(&rs->cond);
	}
	pthread_mutex_unlock(&rs->lock);
}

/* rs_revents: what the socket is ready for now. Its completion and CM
 * events are taken first, whether or not a poll woke for them: a program
 * that calls rpoll with timeout 0 in a loop (rstream -T a) must still see
 * a peer that vanished (its DISCONNECTED). */
static int rs_revents(struct rsk *rs, short events)
{
	pthread_mutex_lock(&rs->lock);
	if (rs->phase == P_CONNECTED)
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
	/* One block: the sockets, then whether this call waits on each
	 * alone (rs_alone). */
	size_t slots = nfds ? nfds : 1;
	struct rsk **rss = calloc(slots, sizeof(*rss) + 1);
	struct pollfd *pf = calloc(slots, sizeof(*pf));
	int any = 0, ret = 0;
	if (!rss || !pf) {
		free(rss);
		free(pf);
		return rvm_err(ENOMEM);
	}
	char *alone = (char *)(rss + slots);
	for (nfds_t i = 0; i < nfds; i++)
		any |= !!(rss[i] = rs_get(fds[i].fd));
	if (!any) {
		free(rss);
		free(pf);
		return poll(fds, nfds, timeout);
	}
	int saved = errno; /* kept on success, as in rrecv */
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
	for (;;) {
		ret = 0;
		for (nfds_t i = 0; i < nfds; i++) {
			if (rss[i]) {
				fds[i].revents = (short)rs_revents(rss[i], fds[i].events);
			} else {
				fds[i].revents = 0;
				if (fds[i].fd >= 0)
					poll(&fds[i], 1, 0);
			}
			ret += !!fds[i].revents;
		}
		if (ret || !timeout)
			break;
		for (nfds_t i = 0; i < nfds; i++) { /* all of them: rs_unarm below */
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
		/* A wait longer than RS_SHARED_WAIT_MS only where this rpoll
		 * alone takes the socket's events (rsock.h). */
		int ms = timeout < 0 ? -1 : ms_left(&end);
		for (nfds_t i = 0; i < nfds; i++) {
			alone[i] = 0;
			if (ret || !rss[i] || pf[i].fd != rss[i]->epfd ||
			    (ms >= 0 && ms <= RS_SHARED_WAIT_MS))
				continue;
			if (!(alone[i] = (char)rs_alone(rss[i])))
				ms = RS_SHARED_WAIT_MS;
		}
		int n = ret ? 0 : poll(pf, nfds, ms);
		for (nfds_t i = 0; i < nfds; i++)
			if (rss[i] && pf[i].fd >= 0 && (pf[i].fd == rss[i]->epfd || pf[i].fd == rss[i]->kickfd))
				rs_unarm(rss[i], alone[i]); /* counted in pollers by rs_arm */
		if (ret)
			break;
		if (n == 0 && timeout != 0 && (timeout < 0 || ms_left(&end) > 0))
			continue; /* a bounded wait (RS_SHARED_WAIT_MS) ended: look again */
		if (n <= 0) {
			ret = n;
			for (nfds_t i = 0; i < nfds; i++)
				fds[i].revents = 0;
			break;
		}
	}
	free(rss);
	free(pf);
	if (ret >= 0)
		errno = saved;
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
