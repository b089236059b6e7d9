/* The control path: a session with rvtd over SOCK_SEQPACKET (section 1-4). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "internal.h"

void rvc_warn(const char *fmt, ...)
{
	va_list ap;
	fputs("libibverbs (rvtd): ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* The daemon's default, in cmd/rvtd's order. */
const char *rvc_socket_path(char *buf, size_t n)
{
	const char *s = getenv("RVTD_SOCKET");
	if (s && *s) {
		snprintf(buf, n, "%s", s);
		return buf;
	}
	if (geteuid() == 0) {
		snprintf(buf, n, "/run/rvtd/rvtd.sock");
		return buf;
	}
	s = getenv("XDG_RUNTIME_DIR");
	if (s && *s) {
		snprintf(buf, n, "%s/rvtd.sock", s);
		return buf;
	}
	s = getenv("TMPDIR");
	snprintf(buf, n, "%s/rvtd-%u.sock", s && *s ? s : "/tmp", (unsigned)geteuid());
	return buf;
}

static int send_msg(int fd, const void *hdr, const void *body, size_t blen, const int *fds, int nfds)
{
	struct iovec iov[2] = {{(void *)hdr, RVC_HDR_SIZE}, {(void *)body, blen}};
	union {
		char buf[CMSG_SPACE(sizeof(int) * RVC_MAX_FDS)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = blen ? 2 : 1};
	if (nfds > 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
	}
	for (;;) {
		ssize_t r = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (r >= 0)
			return 0;
		if (errno != EINTR)
			return errno;
	}
}

/* recv_msg reads one datagram into c->buf; descriptors into fds. Returns
 * its length, or -errno. */
static ssize_t recv_msg(struct rvc_conn *c, int *fds, int *nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * (RVC_MAX_FDS + 4))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {c->buf, RVC_MAX_MESSAGE + 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf)};
	ssize_t r;
	do
		r = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	*nfds = 0;
	int extra = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int got[RVC_MAX_FDS + 4];
		memcpy(got, CMSG_DATA(cm), sizeof(int) * k);
		for (int i = 0; i < k; i++) {
			if (*nfds < RVC_MAX_FDS)
				fds[(*nfds)++] = got[i];
			else {
				close(got[i]);
				extra = 1;
			}
		}
	}
	if (r == 0)
		return -ECONNRESET;
	if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || extra) {
		for (int i = 0; i < *nfds; i++)
			close(fds[i]);
		*nfds = 0;
		return -EPROTO;
	}
	return r;
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

/* The daemon's protocol_error event: print its text. */
static void report_protocol_error(const struct rvc_msg *m)
{
	struct rvc_protocol_error pe;
	if (m->body_len < sizeof(pe)) {
		rvc_warn("rvtd ended the session: malformed protocol_error");
		return;
	}
	memcpy(&pe, m->body, sizeof(pe));
	int tl = (int)(m->body_len - sizeof(pe));
	rvc_warn("rvtd ended the session (protocol error %u on request %u, opcode 0x%04x): %.*s",
		 pe.err, pe.bad_request_id, pe.bad_opcode, tl, (const char *)m->body + sizeof(pe));
}

/* call_locked returns 0 or an errno; *fatal says the session can no longer
 * be trusted (the socket failed, or a message broke the framing rules),
 * as opposed to an error the daemon replied. */
static int call_locked(struct rvc_conn *c, uint16_t op, uint32_t handle, const void *req,
		       size_t reqlen, const int *fds, int nfds, void *out, size_t fixed,
		       size_t tail, size_t cap, int want_fds, struct rvc_reply *rep, int *fatal)
{
	*fatal = 1;
	if (c->fd < 0 || c->broken)
		return ENOTCONN;
	struct rvc_hdr h = {.length = (uint32_t)(RVC_HDR_SIZE + reqlen), .opcode = op,
			    .nfds = (uint8_t)nfds, .request_id = ++c->next_id, .handle = handle};
	int err = send_msg(c->fd, &h, req, reqlen, fds, nfds);
	if (err) {
		*fatal = err == EPIPE || err == ECONNRESET;
		return err;
	}
	for (;;) {
		int rfds[RVC_MAX_FDS], rn = 0;
		ssize_t n = recv_msg(c, rfds, &rn);
		if (n < 0)
			return (int)-n;
		struct rvc_msg m;
		if (rvc_decode(c->buf, (size_t)n, rn, &m)) {
			close_fds(rfds, rn);
			return EPROTO;
		}
		if (m.hdr.flags & RVC_F_EVENT) {
			close_fds(rfds, rn);
			if (m.hdr.opcode == RVC_OP_PROTOCOL_ERROR) {
				report_protocol_error(&m);
				return EPROTO;
			}
			continue; /* an event this version does not know */
		}
		if (rvc_check_reply(&m, op, h.request_id, fixed, tail, want_fds)) {
			close_fds(rfds, rn);
			return EPROTO;
		}
		*fatal = 0;
		if (m.hdr.status)
			return (int)m.hdr.status;
		size_t len = m.body_len < cap ? m.body_len : cap;
		if (out)
			memcpy(out, m.body, len);
		if (rep) {
			rep->len = len;
			rep->nfds = rn;
			memcpy(rep->fds, rfds, sizeof(int) * rn);
		} else
			close_fds(rfds, rn);
		return 0;
	}
}

int rvc_call(struct rvc_conn *c, uint16_t op, uint32_t handle, const void *req, size_t reqlen,
	     const int *fds, int nfds, void *out, size_t fixed, size_t tail, size_t cap,
	     int want_fds, struct rvc_reply *rep)
{
	pthread_mutex_lock(&c->lock);
	int fatal;
	int err = call_locked(c, op, handle, req, reqlen, fds, nfds, out, fixed, tail,
			      cap ? cap : fixed, want_fds, rep, &fatal);
	if (err && fatal && err != ENOTCONN) {
		/* Replies and requests may no longer pair up: end the session
		 * (the daemon tears down its objects), keep the descriptor
		 * until the context closes. Later calls fail with ENOTCONN. */
		if (c->fd >= 0 && !c->broken) {
			shutdown(c->fd, SHUT_RDWR);
			c->broken = 1;
		}
	}
	pthread_mutex_unlock(&c->lock);
	return err;
}

int rvc_connect(struct rvc_conn *c, int quiet)
{
	return rvc_connect_ex(c, quiet, RVC_MINOR, "libibverbs");
}

int rvc_connect_ex(struct rvc_conn *c, int quiet, uint16_t minor, const char *who)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 64];
	rvc_socket_path(path, sizeof(path));
	memset(c, 0, sizeof(*c));
	c->fd = -1;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path)) {
		rvc_warn("socket path too long: %s", path);
		return ENAMETOOLONG;
	}
	strcpy(sa.sun_path, path);
	/* The kernel writes replies here. Not on the heap: a registration may
	 * be moving a page it shares with the program's buffers, and then
	 * the kernel's write would fail with EFAULT (pagemove.c). */
	c->buf = mmap(NULL, RVC_MAX_MESSAGE + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		      -1, 0);
	if (c->buf == MAP_FAILED) {
		c->buf = NULL;
		return ENOMEM;
	}
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int e = errno;
		rvc_disconnect(c);
		return e;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		if (!quiet)
			rvc_warn("cannot reach rvtd at %s: %s (is rvtd running? start it with "
				 "`rvtd`, or set RVTD_SOCKET)", path, strerror(e));
		close(fd);
		rvc_disconnect(c);
		return e;
	}
	c->fd = fd;
	pthread_mutex_init(&c->lock, NULL);
	struct rvc_hello hi = {.magic = RVC_MAGIC, .major = RVC_MAJOR, .minor = minor,
			       .pid = (uint32_t)getpid()};
	char comm[64] = "";
	FILE *f = fopen("/proc/self/comm", "re");
	if (f) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
	}
	snprintf(hi.client, sizeof(hi.client), "%.10s %.20s", who, comm);
	struct rvc_hello_reply hr;
	int err = rvc_call(c, RVC_OP_HELLO, 0, &hi, sizeof(hi), NULL, 0, &hr, sizeof(hr), 0, 0, 0, NULL);
	if (!err && (hr.magic != RVC_MAGIC || hr.major != RVC_MAJOR))
		err = EPROTONOSUPPORT;
	if (err) {
		rvc_warn("rvtd at %s refused the session: %s", path, strerror(err));
		rvc_disconnect(c);
		return err;
	}
	c->daemon_pid = hr.daemon_pid;
	c->page_size = hr.page_size;
	c->minor = hr.minor;
	return 0;
}

void rvc_disconnect(struct rvc_conn *c)
{
	if (c->fd >= 0) {
		close(c->fd);
		c->fd = -1;
		pthread_mutex_destroy(&c->lock);
	}
	if (c->buf)
		munmap(c->buf, RVC_MAX_MESSAGE + 1);
	c->buf = NULL;
}
