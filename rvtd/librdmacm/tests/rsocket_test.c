/* rsockets' edge cases in one process, a listener on rvt0 and a client on
 * rvt1: datagram sockets refused, non-blocking accept/connect/recv/send
 * (EAGAIN, EINPROGRESS), rpoll and rselect over rsockets and a pipe,
 * options, many small sends (credits), large transfers that wrap small
 * buffers, MSG_PEEK and MSG_WAITALL, riomap/riowrite, half-close and EOF,
 * the peer's close (0 from rrecv, ECONNRESET from rsend, POLLHUP), a
 * refused connect, a peer process killed mid-stream, and both directions
 * at once with a sending and a receiving thread per socket (and an rpoll
 * beside them). Prints PASS; run by rvtd/dropin TestRsocketC against
 * rvtd (RVTD_SOCKET) with LD_LIBRARY_PATH at build/lib.
 *
 * With arguments, one keepalive case that rvtd/dropin TestRsocketKeepalive
 * drives (it counts the daemon's packets, and kills the peer): ka-idle
 * MODE (an idle connection, keepalive on, off or cleared), ka-peer IP (a
 * peer that accepts and then does nothing until killed), ka-dead BIND IP
 * PORT (a keepalive client that must see that peer die). And
 * shared-wait ROUNDS: an rpoll and an rrecv waiting in one socket at once,
 * run by TestRsocketSharedWait. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <signal.h>
#include <time.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>
#include <rdma/rsocket.h>

#include "check.h"

static void set_sin(struct sockaddr_in *s, const char *ip, int port)
{
	memset(s, 0, sizeof(*s));
	s->sin_family = AF_INET;
	s->sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, ip, &s->sin_addr);
}

/* listen_on: a listener bound to ip (port chosen) with backlog; *a gets
 * its address, port included. */
static int listen_on(const char *ip, int backlog, struct sockaddr_in *a)
{
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	set_sin(a, ip, 0);
	CHECK(l >= 0 && rbind(l, (struct sockaddr *)a, sizeof(*a)) == 0 && rlisten(l, backlog) == 0);
	socklen_t len = sizeof(*a);
	CHECK(rgetsockname(l, (struct sockaddr *)a, &len) == 0);
	return l;
}

static uint8_t pat(size_t i) { return (uint8_t)(i * 7 + (i >> 11)); }

/* Blocking helpers for the threads. */
static void send_all(int s, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = rsend(s, p, n, 0);
		CHECK(k > 0);
		p += k;
		n -= (size_t)k;
	}
}

static void recv_all(int s, uint8_t *p, size_t n)
{
	CHECK(rrecv(s, p, n, MSG_WAITALL) == (ssize_t)n);
}

#define SMALL_N 20000
#define SMALL_LEN 13
#define BIG_LEN ((5u << 20) + 333)

struct peer {
	int s;
	uint8_t *buf;
};

/* The server side of the threaded part. */
static void *server(void *arg)
{
	struct peer *p = arg;
	int s = p->s;
	/* Many small messages, read in odd sizes. */
	size_t total = (size_t)SMALL_N * SMALL_LEN, got = 0;
	uint8_t b[997];
	while (got < total) {
		size_t want = total - got < sizeof(b) ? total - got : sizeof(b);
		ssize_t k = rrecv(s, b, want, 0);
		CHECK(k > 0);
		for (ssize_t i = 0; i < k; i++)
			CHECK(b[i] == pat(got + (size_t)i));
		got += (size_t)k;
	}
	/* One large send's worth, peeked first, then read in odd sizes. */
	uint8_t first[8];
	CHECK(rrecv(s, first, sizeof(first), MSG_PEEK | MSG_WAITALL) > 0);
	CHECK(first[0] == pat(0));
	uint8_t *big = malloc(BIG_LEN);
	CHECK(big);
	for (got = 0; got < BIG_LEN;) {
		size_t want = BIG_LEN - got < 70001 ? BIG_LEN - got : 70001;
		ssize_t k = rrecv(s, big + got, want, 0);
		CHECK(k > 0);
		got += (size_t)k;
	}
	for (size_t i = 0; i < BIG_LEN; i++)
		if (big[i] != pat(i)) {
			fprintf(stderr, "FAIL: byte %zu is %u, want %u\n", i, big[i], pat(i));
			exit(1);
		}
	/* Send it back with rwritev in three pieces. */
	struct iovec v[3] = {{big, 1000}, {big + 1000, 3 << 20}, {big + 1000 + (3 << 20), BIG_LEN - 1000 - (3 << 20)}};
	for (size_t off = 0; off < BIG_LEN;) {
		ssize_t k = rwritev(s, v, 3);
		CHECK(k > 0);
		off += (size_t)k;
		/* advance the vector past what went */
		size_t adv = (size_t)k;
		for (int i = 0; i < 3; i++) {
			size_t t = adv < v[i].iov_len ? adv : v[i].iov_len;
			v[i].iov_base = (uint8_t *)v[i].iov_base + t;
			v[i].iov_len -= t;
			adv -= t;
		}
	}
	free(big);
	/* riomap: the client riowrites into p->buf, then sends a byte. */
	uint8_t c;
	recv_all(s, &c, 1);
	CHECK(c == 'w');
	for (size_t i = 0; i < 100000; i++)
		CHECK(p->buf[i] == pat(i + 5));
	/* Half-close: the client shut writing; we read EOF, and still send. */
	CHECK(rrecv(s, &c, 1, 0) == 0);
	CHECK(rrecv(s, &c, 1, 0) == 0);
	send_all(s, (const uint8_t *)"after", 5);
	return NULL;
}

/* establish accepts on the non-blocking listener l while the non-blocking
 * client c connects, both driven by rpoll (with a quiet pipe beside):
 * one thread cannot block in either (the client's librdmacm answers the
 * REP only when it reads its CM events, as over the kernel). */
static int g_pipe = -1;

static int establish(int l, int c)
{
	int s = -1, connected = 0;
	for (int i = 0; i < 200 && (s < 0 || !connected); i++) {
		struct pollfd p[3] = {{l, POLLIN, 0}, {c, POLLOUT, 0}, {g_pipe, POLLIN, 0}};
		int n = rpoll(p, 3, 5000);
		CHECK(n > 0 && p[2].revents == 0);
		if (p[0].revents & POLLIN) {
			s = raccept(l, NULL, NULL);
			CHECK(s >= 0 || errno == EAGAIN);
		}
		if (p[1].revents & POLLOUT)
			connected = 1;
		CHECK(!(p[1].revents & (POLLERR | POLLHUP)));
	}
	CHECK(s >= 0 && connected);
	return s;
}

/* connect_to: a client bound to *ca, connected to the listener l at *a
 * without blocking (establish), then made blocking again; *s is the
 * accepted socket. */
static int connect_to(int l, const struct sockaddr_in *a, const struct sockaddr_in *ca, int *s)
{
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(c >= 0 && rbind(c, (const struct sockaddr *)ca, sizeof(*ca)) == 0);
	CHECK(rfcntl(c, F_SETFL, O_NONBLOCK) == 0);
	CHECK(rconnect(c, (const struct sockaddr *)a, sizeof(*a)) == -1 && errno == EINPROGRESS);
	*s = establish(l, c);
	CHECK(rfcntl(c, F_SETFL, 0) == 0);
	return c;
}

/* peer: the client a second process runs for the peer-death case: it
 * connects from rvt1 to port and sends until it is killed. */
static int peer(int port)
{
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a;
	set_sin(&a, "198.18.0.2", 0);
	CHECK(c >= 0 && rbind(c, (struct sockaddr *)&a, sizeof(a)) == 0);
	set_sin(&a, "198.18.0.1", port);
	CHECK(rconnect(c, (struct sockaddr *)&a, sizeof(a)) == 0);
	static uint8_t b[65536];
	for (;;)
		CHECK(rsend(c, b, sizeof(b), 0) > 0);
}

/* peer_killed: a blocked rrecv, and an rpoll loop with timeout 0 (as
 * rstream -T a polls), learn of a peer process killed mid-stream (the
 * daemon's DREQ for its ID: EOF, then ECONNRESET and POLLHUP) instead of
 * waiting for ever. */
static void peer_killed(const char *self)
{
	struct sockaddr_in a;
	int l = listen_on("198.18.0.1", 1, &a);
	char port[16];
	snprintf(port, sizeof(port), "%d", ntohs(a.sin_port));
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		execl(self, self, "peer", port, (char *)NULL);
		_exit(127);
	}
	int s = raccept(l, NULL, NULL);
	CHECK(s >= 0);
	static uint8_t b[65536];
	size_t got = 0;
	while (got < (4u << 20)) {
		ssize_t k = rrecv(s, b, sizeof(b), 0);
		CHECK(k > 0);
		got += (size_t)k;
	}
	CHECK(kill(pid, SIGKILL) == 0);
	int st;
	CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st));
	alarm(20); /* a hang is a failure */
	ssize_t k;
	while ((k = rrecv(s, b, sizeof(b), 0)) > 0)
		;
	CHECK(k == 0 || errno == ECONNRESET);
	CHECK(rsend(s, b, 1, 0) == -1 && errno == ECONNRESET);
	struct pollfd p = {s, POLLIN, 0};
	int n;
	while ((n = rpoll(&p, 1, 0)) == 0)
		;
	CHECK(n == 1 && (p.revents & (POLLHUP | POLLERR)));
	alarm(0);
	CHECK(rclose(s) == 0 && rclose(l) == 0);
}

/* duplex: both ends send 8 MB and receive 8 MB at once, each socket used
 * by a sending and a receiving thread (they sleep on the same CQ), and a
 * third thread rpolls the server's socket meanwhile. */
#define DUPLEX_LEN (8u << 20)
struct duplex_arg {
	int s, send;
	int *stop; /* atomic */
};

static void *duplex_run(void *arg)
{
	struct duplex_arg *d = arg;
	static __thread uint8_t b[100003];
	size_t done = 0;
	while (done < DUPLEX_LEN) {
		size_t n = DUPLEX_LEN - done < sizeof(b) ? DUPLEX_LEN - done : sizeof(b);
		ssize_t k;
		if (d->send) {
			for (size_t i = 0; i < n; i++)
				b[i] = pat(done + i);
			k = rsend(d->s, b, n, 0);
		} else {
			k = rrecv(d->s, b, n, 0);
			for (ssize_t i = 0; i < k; i++)
				CHECK(b[i] == pat(done + (size_t)i));
		}
		CHECK(k > 0);
		done += (size_t)k;
	}
	return NULL;
}

static void *duplex_poll(void *arg)
{
	struct duplex_arg *d = arg;
	while (!__atomic_load_n(d->stop, __ATOMIC_RELAXED)) {
		struct pollfd p = {d->s, POLLIN | POLLOUT, 0};
		CHECK(rpoll(&p, 1, 100) >= 0);
	}
	return NULL;
}

static void duplex(int l, const struct sockaddr_in *srv, const struct sockaddr_in *cli)
{
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(c >= 0 && rbind(c, (struct sockaddr *)cli, sizeof(*cli)) == 0);
	CHECK(rfcntl(l, F_SETFL, O_NONBLOCK) == 0 && rfcntl(c, F_SETFL, O_NONBLOCK) == 0);
	CHECK(rconnect(c, (struct sockaddr *)srv, sizeof(*srv)) == -1 && errno == EINPROGRESS);
	int s = establish(l, c);
	CHECK(rfcntl(c, F_SETFL, 0) == 0);
	int stop = 0;
	struct duplex_arg a[5] = {{c, 1, &stop}, {c, 0, &stop}, {s, 1, &stop}, {s, 0, &stop}, {s, 0, &stop}};
	pthread_t th[5];
	alarm(60); /* a lost wake-up is a failure */
	for (int i = 0; i < 5; i++)
		CHECK(pthread_create(&th[i], NULL, i == 4 ? duplex_poll : duplex_run, &a[i]) == 0);
	for (int i = 0; i < 4; i++)
		CHECK(pthread_join(th[i], NULL) == 0);
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	CHECK(pthread_join(th[4], NULL) == 0);
	alarm(0);
	CHECK(rclose(c) == 0 && rclose(s) == 0);
}

/* ---- keepalive ---- */

/* ntasks is how many threads this process runs (/proc/self/task). */
static int ntasks(void)
{
	DIR *d = opendir("/proc/self/task");
	CHECK(d);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/* wait_tasks waits (up to 2 s) until the process runs n threads: a joined
 * thread leaves /proc/self/task as it exits. */
static void wait_tasks(int n)
{
	for (int i = 0; i < 200 && ntasks() != n; i++)
		usleep(10000);
	CHECK(ntasks() == n);
}

static int getopt_int(int s, int level, int name)
{
	int v = -1;
	socklen_t len = sizeof(v);
	CHECK(rgetsockopt(s, level, name, &v, &len) == 0 && len == sizeof(v));
	return v;
}

static void setopt_int(int s, int level, int name, int v)
{
	CHECK(rsetsockopt(s, level, name, &v, sizeof(v)) == 0);
}

static void say(const char *line)
{
	printf("%s\n", line);
	fflush(stdout);
}

struct ka_recv {
	int s;
	ssize_t n;
	int err;
	char c;
};

static void *ka_recv_run(void *arg)
{
	struct ka_recv *r = arg;
	r->n = rrecv(r->s, &r->c, 1, 0);
	r->err = errno;
	return NULL;
}

/* ka_idle: a connection from rvt1 (c) to rvt0 (s) stays idle for 3.5 s
 * between the lines IDLE and IDLE-END while s blocks in rrecv; the test
 * counts the packets rvt0 received meanwhile, then writes a line to our
 * stdin. MODE on: c has SO_KEEPALIVE and TCP_KEEPIDLE 1 (a keepalive
 * every second, none of them data: s's rrecv stays blocked); off: no
 * keepalive option; cleared: SO_KEEPALIVE set, then cleared (and at the
 * end set again, then rshutdown). The keepalive thread exists only while
 * c has keepalive on. */
static int ka_idle(const char *mode)
{
	int on = strcmp(mode, "on") == 0, cleared = strcmp(mode, "cleared") == 0;
	CHECK(on || cleared || strcmp(mode, "off") == 0);
	struct sockaddr_in a, ca;
	int l = listen_on("198.18.0.1", 1, &a);
	set_sin(&ca, "198.18.0.2", 0);
	CHECK(rfcntl(l, F_SETFL, O_NONBLOCK) == 0);
	int s, c = connect_to(l, &a, &ca, &s);
	CHECK(rfcntl(s, F_SETFL, 0) == 0);
	/* A byte each way (the first credit updates go out), then quiet:
	 * every acknowledgement delivered before the count starts. */
	char x;
	CHECK(rsend(c, "a", 1, 0) == 1 && rrecv(s, &x, 1, 0) == 1 && x == 'a');
	CHECK(rsend(s, "b", 1, 0) == 1 && rrecv(c, &x, 1, 0) == 1 && x == 'b');
	usleep(500000);

	int base = ntasks();
	CHECK(getopt_int(c, SOL_SOCKET, SO_KEEPALIVE) == 0);
	CHECK(getopt_int(c, IPPROTO_TCP, TCP_KEEPIDLE) == 0); /* never set */
	int zero = 0;
	CHECK(rsetsockopt(c, IPPROTO_TCP, TCP_KEEPIDLE, &zero, sizeof(zero)) == -1 && errno == EINVAL);
	if (on || cleared) {
		setopt_int(c, SOL_SOCKET, SO_KEEPALIVE, 1);
		/* The kernel's tcp_keepalive_time (7200 without one), until set. */
		CHECK(getopt_int(c, IPPROTO_TCP, TCP_KEEPIDLE) > 1);
		CHECK(ntasks() == base + 1);
		setopt_int(c, SOL_SOCKET, SO_KEEPALIVE, 1); /* again: no second thread */
		setopt_int(c, IPPROTO_TCP, TCP_KEEPIDLE, 1);
		CHECK(getopt_int(c, IPPROTO_TCP, TCP_KEEPIDLE) == 1);
		CHECK(getopt_int(c, SOL_SOCKET, SO_KEEPALIVE) == 1);
		CHECK(ntasks() == base + 1);
	}
	if (cleared) {
		setopt_int(c, SOL_SOCKET, SO_KEEPALIVE, 0);
		CHECK(getopt_int(c, SOL_SOCKET, SO_KEEPALIVE) == 0);
		wait_tasks(base); /* the thread ended with the last keepalive socket */
	}
	if (!on && !cleared)
		setopt_int(c, IPPROTO_TCP, TCP_KEEPIDLE, 1); /* without SO_KEEPALIVE: nothing */

	struct ka_recv r = {.s = s};
	pthread_t th;
	CHECK(pthread_create(&th, NULL, ka_recv_run, &r) == 0);
	say("IDLE");
	usleep(3500000);
	say("IDLE-END");
	char line[16];
	CHECK(fgets(line, sizeof(line), stdin)); /* the test has counted */

	/* Still connected, and the keepalives were no data: the blocked
	 * rrecv gets the first byte sent now; credits still flow. */
	CHECK(rsend(c, "k", 1, 0) == 1);
	CHECK(pthread_join(th, NULL) == 0);
	CHECK(r.n == 1 && r.c == 'k');
	CHECK(rsend(s, "s", 1, 0) == 1 && rrecv(c, &x, 1, 0) == 1 && x == 's');
	CHECK(getopt_int(c, SOL_SOCKET, SO_ERROR) == 0 && getopt_int(s, SOL_SOCKET, SO_ERROR) == 0);
	CHECK(ntasks() == base + on);
	if (cleared) {
		/* Set again: the thread again; rshutdown takes the socket out
		 * (as Linux's), and the option still reads 1. */
		setopt_int(c, SOL_SOCKET, SO_KEEPALIVE, 1);
		CHECK(ntasks() == base + 1);
		CHECK(rshutdown(c, SHUT_RDWR) == 0);
		wait_tasks(base);
		CHECK(getopt_int(c, SOL_SOCKET, SO_KEEPALIVE) == 1);
	}
	CHECK(rclose(c) == 0);
	wait_tasks(base); /* closing the last keepalive socket ends the thread */
	CHECK(rclose(s) == 0 && rclose(l) == 0);
	printf("PASS\n");
	return 0;
}

/* ka_peer: listens on ip, accepts one connection, then does nothing until
 * it is killed (with its daemon: the keepalive side gets no DREQ). */
static int ka_peer(const char *ip)
{
	struct sockaddr_in a;
	int l = listen_on(ip, 1, &a);
	printf("PORT %d\n", ntohs(a.sin_port));
	fflush(stdout);
	int s = raccept(l, NULL, NULL);
	CHECK(s >= 0);
	say("ACCEPTED");
	for (;;)
		pause();
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* ka_dead: connects from bind to ip:port with SO_KEEPALIVE and
 * TCP_KEEPIDLE 1 set before connecting, says CONNECTED, and blocks: one
 * thread in rrecv, this one in rpoll. When the peer dies silently the
 * next keepalive goes unanswered, the QP's retries run out, and both
 * calls must return: rpoll with POLLERR, rrecv with ETIMEDOUT; then
 * rrecv gives EOF and rsend ECONNRESET. */
static int ka_dead(const char *bind, const char *ip, int port)
{
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a;
	set_sin(&a, bind, 0);
	CHECK(c >= 0 && rbind(c, (struct sockaddr *)&a, sizeof(a)) == 0);
	setopt_int(c, IPPROTO_TCP, TCP_KEEPIDLE, 1);
	setopt_int(c, SOL_SOCKET, SO_KEEPALIVE, 1);
	set_sin(&a, ip, port);
	CHECK(rconnect(c, (struct sockaddr *)&a, sizeof(a)) == 0);
	struct ka_recv r = {.s = c};
	pthread_t th;
	CHECK(pthread_create(&th, NULL, ka_recv_run, &r) == 0);
	say("CONNECTED");
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct pollfd p = {c, POLLIN, 0};
	CHECK(rpoll(&p, 1, -1) == 1);
	printf("rpoll: revents 0x%x after %ld ms\n", p.revents, ms_since(&t0));
	CHECK(p.revents & POLLERR);
	CHECK(pthread_join(th, NULL) == 0);
	printf("rrecv: %zd errno %d after %ld ms\n", r.n, r.err, ms_since(&t0));
	CHECK(r.n == -1 && r.err == ETIMEDOUT);
	char x;
	CHECK(rrecv(c, &x, 1, 0) == 0); /* the error was reported once */
	CHECK(rsend(c, "x", 1, 0) == -1 && errno == ECONNRESET);
	CHECK(getopt_int(c, SOL_SOCKET, SO_ERROR) == 0);
	CHECK(rclose(c) == 0);
	printf("PASS\n");
	return 0;
}

/* shared_wait: ROUNDS connections from rvt1 (c) to rvt0 (s), each with
 * two threads waiting in s at once, as ka_dead's do: this one in rpoll
 * for nothing but hang-up and error (events 0), a second in rrecv for two
 * bytes with MSG_WAITALL, started 20 ms later (after the rpoll has begun
 * its wait). c sends one byte, then shuts down. Whichever thread takes
 * each completion or CM event, both must see the end: rrecv returns the
 * byte, rpoll POLLHUP, well within its 10 s timeout. (An rpoll that began
 * its wait alone, unbounded, and then lost both events to the rrecv
 * thread slept on: CI saw ka_dead hang so.) Four threads spin meanwhile:
 * with the CPUs busy, the woken rpoll often runs after the rrecv thread
 * has taken the event, the interleaving that lost it. */
/* hup_wait: an rpoll for the hang-up alone (no POLLIN), in a thread of
 * its own, timed. */
struct hup_wait {
	int s, n;
	short revents;
};

static void *hup_wait_run(void *arg)
{
	struct hup_wait *h = arg;
	struct pollfd p = {h->s, 0, 0};
	h->n = rpoll(&p, 1, 10000);
	h->revents = p.revents;
	return NULL;
}

struct sw_recv {
	int s;
	ssize_t n;
};

static void *sw_recv_run(void *arg)
{
	struct sw_recv *r = arg;
	char b[2];
	usleep(20000);
	r->n = rrecv(r->s, b, sizeof(b), MSG_WAITALL);
	return NULL;
}

static void *sw_send_run(void *arg)
{
	int c = *(int *)arg;
	usleep(60000);
	CHECK(rsend(c, "x", 1, 0) == 1);
	usleep(40000);
	CHECK(rshutdown(c, SHUT_RDWR) == 0);
	return NULL;
}

static int sw_stop; /* atomic */

static void *sw_spin(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&sw_stop, __ATOMIC_RELAXED))
		;
	return NULL;
}

static int shared_wait(int rounds)
{
	pthread_t spin[4];
	for (int i = 0; i < 4; i++)
		CHECK(pthread_create(&spin[i], NULL, sw_spin, NULL) == 0);
	struct sockaddr_in a, ca;
	int l = listen_on("198.18.0.1", 4, &a);
	CHECK(rfcntl(l, F_SETFL, O_NONBLOCK) == 0);
	set_sin(&ca, "198.18.0.2", 0);
	long worst = 0;
	for (int i = 0; i < rounds; i++) {
		int s, c = connect_to(l, &a, &ca, &s);
		CHECK(rfcntl(s, F_SETFL, 0) == 0);
		struct sw_recv r = {.s = s};
		pthread_t rt, st;
		struct timespec t0;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		CHECK(pthread_create(&rt, NULL, sw_recv_run, &r) == 0);
		CHECK(pthread_create(&st, NULL, sw_send_run, &c) == 0);
		struct pollfd p = {s, 0, 0};
		int n = rpoll(&p, 1, 10000);
		long took = ms_since(&t0);
		if (n != 1 || !(p.revents & POLLHUP))
			printf("round %d: rpoll %d, revents 0x%x after %ld ms\n", i, n, p.revents, took);
		CHECK(n == 1 && (p.revents & POLLHUP));
		CHECK(pthread_join(rt, NULL) == 0 && pthread_join(st, NULL) == 0);
		CHECK(r.n == 1);
		if (took > worst)
			worst = took;
		CHECK(rclose(c) == 0 && rclose(s) == 0);
	}
	CHECK(rclose(l) == 0);
	__atomic_store_n(&sw_stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < 4; i++)
		CHECK(pthread_join(spin[i], NULL) == 0);
	printf("%d rounds: the slowest rpoll returned after %ld ms\n", rounds, worst);
	printf("PASS\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "peer") == 0)
		return peer(atoi(argv[2]));
	if (argc == 3 && strcmp(argv[1], "ka-idle") == 0)
		return ka_idle(argv[2]);
	if (argc == 3 && strcmp(argv[1], "ka-peer") == 0)
		return ka_peer(argv[2]);
	if (argc == 3 && strcmp(argv[1], "shared-wait") == 0)
		return shared_wait(atoi(argv[2]));
	if (argc == 5 && strcmp(argv[1], "ka-dead") == 0)
		return ka_dead(argv[2], argv[3], atoi(argv[4]));
	/* What is not served. */
	CHECK(rsocket(AF_INET, SOCK_DGRAM, 0) == -1 && errno == ESOCKTNOSUPPORT);
	CHECK(rsocket(AF_UNIX, SOCK_STREAM, 0) == -1 && errno == ENOTSUP);
	CHECK(rclose(12345) == -1 && errno == EBADF);
	CHECK(rsend(12345, "x", 1, 0) == -1 && errno == EBADF);

	/* A non-blocking listener with a small receive buffer and an iomap,
	 * inherited by what it accepts. */
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(l >= 0);
	int one = 1, v;
	socklen_t len = sizeof(v);
	CHECK(rsetsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0);
	int rb = 8192;
	CHECK(rsetsockopt(l, SOL_SOCKET, SO_RCVBUF, &rb, sizeof(rb)) == 0);
	CHECK(rgetsockopt(l, SOL_SOCKET, SO_RCVBUF, &v, &len) == 0 && v == 16384);
	CHECK(rsetsockopt(l, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof(one)) == 0);
	int sq = 20;
	CHECK(rsetsockopt(l, SOL_RDMA, RDMA_SQSIZE, &sq, sizeof(sq)) == 0);
	struct sockaddr_in a;
	set_sin(&a, "198.18.0.1", 0);
	CHECK(rbind(l, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(rlisten(l, 4) == 0);
	len = sizeof(a);
	CHECK(rgetsockname(l, (struct sockaddr *)&a, &len) == 0 && a.sin_port != 0);
	int port = ntohs(a.sin_port);
	CHECK(rfcntl(l, F_SETFL, O_NONBLOCK) == 0 && rfcntl(l, F_GETFL) == O_NONBLOCK);
	CHECK(raccept(l, NULL, NULL) == -1 && (errno == EAGAIN || errno == EWOULDBLOCK));

	/* A non-blocking client from rvt1. */
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(c >= 0);
	CHECK(rsetsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) == 0);
	len = sizeof(v);
	CHECK(rgetsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, &len) == 0 && v == 1);
	CHECK(rsetsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) == 0);
	int two = 2; /* the table the server's riomap goes into */
	CHECK(rsetsockopt(c, SOL_RDMA, RDMA_IOMAPSIZE, &two, sizeof(two)) == 0);
	int rq = 16, inl = 0; /* 16 credits for the server's sends; data never inline */
	CHECK(rsetsockopt(c, SOL_RDMA, RDMA_RQSIZE, &rq, sizeof(rq)) == 0);
	CHECK(rsetsockopt(c, SOL_RDMA, RDMA_INLINE, &inl, sizeof(inl)) == 0);
	CHECK(rgetsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &v, &len) == 0 && v == 1);
	int sb = 3000;
	CHECK(rsetsockopt(c, SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb)) == 0);
	struct sockaddr_in ca;
	set_sin(&ca, "198.18.0.2", 0);
	CHECK(rbind(c, (struct sockaddr *)&ca, sizeof(ca)) == 0);
	CHECK(rfcntl(c, F_SETFL, O_NONBLOCK) == 0);
	set_sin(&a, "198.18.0.1", port);
	CHECK(rconnect(c, (struct sockaddr *)&a, sizeof(a)) == -1 && errno == EINPROGRESS);
	char x;
	CHECK(rrecv(c, &x, 1, 0) == -1 && errno == EAGAIN);

	/* rpoll: the listener, the connecting client and a quiet pipe. */
	int pfd[2];
	CHECK(pipe(pfd) == 0);
	g_pipe = pfd[0];
	int s = establish(l, c);
	len = sizeof(v);
	CHECK(rgetsockopt(c, SOL_SOCKET, SO_ERROR, &v, &len) == 0 && v == 0);
	CHECK(rsetsockopt(c, SOL_RDMA, RDMA_SQSIZE, &sq, sizeof(sq)) == -1 && errno == EINVAL);
	len = sizeof(v);
	CHECK(rgetsockopt(s, SOL_RDMA, RDMA_IOMAPSIZE, &v, &len) == 0 && v == 1);
	CHECK(rgetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &v, &len) == 0 && v == 20);
	CHECK(rgetsockopt(c, SOL_RDMA, RDMA_RQSIZE, &v, &len) == 0 && v == 16);
	CHECK(rgetsockopt(c, SOL_RDMA, RDMA_INLINE, &v, &len) == 0 && v >= 0); /* what the QP gave */
	CHECK(rgetsockopt(s, SOL_RDMA, RDMA_INLINE, &v, &len) == 0 && v >= 64);
	struct sockaddr_in pa;
	len = sizeof(pa);
	CHECK(rgetpeername(s, (struct sockaddr *)&pa, &len) == 0 && pa.sin_addr.s_addr == ca.sin_addr.s_addr);

	/* The accepted socket is blocking for data unless set; set it. */
	CHECK(rfcntl(s, F_SETFL, O_NONBLOCK) == 0);
	CHECK(rrecv(s, &x, 1, 0) == -1 && (errno == EAGAIN || errno == EWOULDBLOCK));
	CHECK(rrecv(s, &x, 1, MSG_DONTWAIT) == -1 && errno == EAGAIN);

	/* rpoll and rselect: only the pipe is ready. */
	CHECK(write(pfd[1], "p", 1) == 1);
	struct pollfd p2[2] = {{s, POLLIN, 0}, {pfd[0], POLLIN, 0}};
	CHECK(rpoll(p2, 2, 1000) == 1 && p2[0].revents == 0 && p2[1].revents == POLLIN);
	fd_set rf;
	FD_ZERO(&rf);
	FD_SET(s, &rf);
	FD_SET(pfd[0], &rf);
	struct timeval tv = {1, 0};
	int maxfd = (s > pfd[0] ? s : pfd[0]) + 1;
	CHECK(rselect(maxfd, &rf, NULL, NULL, &tv) == 1 && FD_ISSET(pfd[0], &rf) && !FD_ISSET(s, &rf));
	CHECK(read(pfd[0], &x, 1) == 1);
	/* Nothing ready: rpoll times out. */
	CHECK(rpoll(p2, 2, 50) == 0);

	/* Non-blocking sends with nobody reading end in EAGAIN (the small
	 * receive buffer and send buffer); rpoll then wakes for POLLIN on the
	 * other side. */
	uint8_t chunk[1500];
	for (size_t i = 0; i < sizeof(chunk); i++)
		chunk[i] = pat(i);
	size_t sent = 0;
	for (int i = 0; i < 1000; i++) {
		ssize_t k = rsend(c, chunk, sizeof(chunk), 0);
		if (k < 0) {
			CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
			break;
		}
		sent += (size_t)k;
	}
	CHECK(sent > 0 && sent < 1000 * sizeof(chunk));
	struct pollfd p3[2] = {{pfd[0], POLLIN, 0}, {s, POLLIN, 0}};
	CHECK(rpoll(p3, 2, 5000) == 1 && (p3[1].revents & POLLIN));
	size_t drained = 0;
	while (drained < sent) {
		ssize_t k = rrecv(s, chunk, sizeof(chunk), 0);
		if (k < 0) {
			CHECK(errno == EAGAIN);
			struct pollfd pp = {s, POLLIN, 0};
			CHECK(rpoll(&pp, 1, 5000) == 1);
			continue;
		}
		drained += (size_t)k;
	}
	CHECK(drained == sent);

	/* Blocking from here; the server runs in a thread. */
	CHECK(rfcntl(s, F_SETFL, 0) == 0 && rfcntl(c, F_SETFL, 0) == 0);
	struct peer srv = {s, calloc(1, 100000)};
	CHECK(srv.buf);
	CHECK(riomap(s, srv.buf, 100000, PROT_WRITE, 0, 0) == 0);
	pthread_t th;
	CHECK(pthread_create(&th, NULL, server, &srv) == 0);

	uint8_t *m = malloc(BIG_LEN);
	CHECK(m);
	for (size_t i = 0; i < (size_t)SMALL_N * SMALL_LEN; i++)
		m[i] = pat(i);
	for (int i = 0; i < SMALL_N; i++)
		send_all(c, m + (size_t)i * SMALL_LEN, SMALL_LEN);
	for (size_t i = 0; i < BIG_LEN; i++)
		m[i] = pat(i);
	send_all(c, m, BIG_LEN);
	memset(m, 0, BIG_LEN);
	recv_all(c, m, BIG_LEN);
	for (size_t i = 0; i < BIG_LEN; i++)
		CHECK(m[i] == pat(i));

	/* riowrite at offset 0 of the server's riomap, then the byte. */
	for (size_t i = 0; i < 100000; i++)
		m[i] = pat(i + 5);
	CHECK(riowrite(c, m, 100000, 0, 0) == 100000);
	CHECK(riowrite(c, m, 10, 100000, 0) == 0); /* past the map: nothing written */
	send_all(c, (const uint8_t *)"w", 1);

	/* Half-close: reads still work, writes end. */
	CHECK(rshutdown(c, SHUT_WR) == 0);
	CHECK(rsend(c, "y", 1, 0) == -1 && errno == ECONNRESET);
	recv_all(c, m, 5);
	CHECK(memcmp(m, "after", 5) == 0);
	CHECK(pthread_join(th, NULL) == 0);
	CHECK(riounmap(s, srv.buf, 100000) == 0);
	CHECK(riounmap(s, srv.buf, 100000) == -1 && errno == EINVAL);

	/* The server closes: EOF, then ECONNRESET; rpoll says POLLHUP. */
	CHECK(rclose(s) == 0);
	CHECK(rrecv(c, &x, 1, 0) == 0);
	struct pollfd ph = {c, POLLIN | POLLOUT, 0};
	CHECK(rpoll(&ph, 1, 1000) == 1 && (ph.revents & POLLHUP));
	CHECK(rclose(c) == 0);

	/* The hang-up comes after the data before it: an rpoll for POLLHUP
	 * alone that finds the disconnect with a byte unread waits until
	 * another thread reads it, and then returns at once. */
	c = connect_to(l, &a, &ca, &s);
	CHECK(rsend(c, "h", 1, 0) == 1 && rshutdown(c, SHUT_RDWR) == 0);
	struct hup_wait hw = {.s = s};
	pthread_t ht;
	CHECK(pthread_create(&ht, NULL, hup_wait_run, &hw) == 0);
	usleep(300 * 1000); /* it takes the disconnect, the byte still unread */
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(rrecv(s, &x, 1, 0) == 1 && x == 'h');
	CHECK(pthread_join(ht, NULL) == 0);
	CHECK(hw.n == 1 && (hw.revents & POLLHUP) && ms_since(&t0) < 2000);
	CHECK(rclose(s) == 0 && rclose(c) == 0);

	/* A peer that closes while we block in rrecv wakes us with 0. */
	c = connect_to(l, &a, &ca, &s);
	CHECK(rsend(s, "z", 1, 0) == 1 && rshutdown(s, SHUT_RDWR) == 0);
	CHECK(rrecv(c, &x, 1, 0) == 1 && x == 'z');
	CHECK(rrecv(c, &x, 1, 0) == 0);
	CHECK(rsend(c, "z", 1, 0) == -1 && errno == ECONNRESET);
	CHECK(rclose(s) == 0 && rclose(c) == 0);
	duplex(l, &a, &ca);
	CHECK(rclose(l) == 0);

	/* Nobody listens: refused, and so says SO_ERROR. */
	c = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(c >= 0);
	CHECK(rconnect(c, (struct sockaddr *)&a, sizeof(a)) == -1 && errno == ECONNREFUSED);
	len = sizeof(v);
	CHECK(rgetsockopt(c, SOL_SOCKET, SO_ERROR, &v, &len) == 0 && v == ECONNREFUSED);
	CHECK(rgetsockopt(c, SOL_SOCKET, SO_ERROR, &v, &len) == 0 && v == 0);
	CHECK(rclose(c) == 0);

	peer_killed(argv[0]);

	free(m);
	free(srv.buf);
	printf("PASS\n");
	return 0;
}
