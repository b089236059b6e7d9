/* rsockets' keepalive (SO_KEEPALIVE, TCP_KEEPIDLE), as Linux's rsockets
 * do it (docs/rsockets.md): one service thread per process, started when
 * the first socket turns keepalive on and ended (joined) when the last one
 * turns it off, shuts down or closes. Every keepalive_time seconds after
 * the option was set, it posts on each such socket that is connected and
 * has a control slot free one control message, RS_CTRL_KEEPALIVE: a
 * zero-length RDMA WRITE WITH IMMEDIATE that the peer's rsocket ignores.
 * Its only purpose is the RC QP's acknowledgement: when the peer is gone
 * the QP's retries run out, the send completes with an error, and the
 * socket's next (or blocked) call reports it. A program that never sets
 * SO_KEEPALIVE never starts the thread or takes its locks.
 *
 * Locking: ka.life serialises starting and ending the thread; ka.lock
 * guards the table and ka.busy; ka.life comes first. The thread takes an
 * rsocket's mutex only with neither held, after marking the socket busy.
 * rs_keepalive_remove waits until the socket is not busy, and may join the
 * thread: these functions are called with no rsocket mutex held, and the
 * thread never waits for anything else, so every wait ends. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "rsock.h"

struct ka_ent {
	struct rsk *rs;
	unsigned secs;
	uint64_t due_ms; /* CLOCK_MONOTONIC */
};

/* One run of the service thread; stop is guarded by ka.lock. */
struct ka_thread {
	pthread_t id;
	int stop;
};

static struct {
	pthread_mutex_t life, lock;
	pthread_cond_t cond; /* the table changed, or busy was cleared */
	struct ka_thread *th;
	struct ka_ent *ents;
	int n, cap;
	struct rsk *busy; /* the socket the thread is posting on, unlocked */
} ka = {.life = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t ka_once = PTHREAD_ONCE_INIT;

static void ka_init_cond(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&ka.cond, &a);
	pthread_condattr_destroy(&a);
}

/* fork: the child has no service thread. Its table is emptied, so that a
 * socket it closes does not wait for a thread that is not there, and a
 * socket it turns keepalive on for starts a thread of its own. */
static void ka_prepare(void)
{
	pthread_mutex_lock(&ka.life);
	pthread_mutex_lock(&ka.lock);
}

static void ka_parent(void)
{
	pthread_mutex_unlock(&ka.lock);
	pthread_mutex_unlock(&ka.life);
}

static void ka_child(void)
{
	free(ka.th);
	free(ka.ents);
	ka.th = NULL;
	ka.ents = NULL;
	ka.n = ka.cap = 0;
	ka.busy = NULL;
	ka_init_cond();
	pthread_mutex_unlock(&ka.lock);
	pthread_mutex_unlock(&ka.life);
}

static void ka_init(void)
{
	ka_init_cond();
	pthread_atfork(ka_prepare, ka_parent, ka_child);
}

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* ka_send posts one keepalive on rs if it is connected and a control slot
 * is free (else it waits for the next period, as Linux's). It first takes
 * the completions that have come, as an rpoll from another thread would:
 * a program in no call for four periods would otherwise have its four
 * control slots held by completed keepalives, and send no more (Linux's
 * thread does not; this one also finds a failed keepalive at once, for
 * SO_ERROR and an rpoll to see). */
static void ka_send(struct rsk *rs)
{
	pthread_mutex_lock(&rs->lock);
	if (rs->phase == P_CONNECTED)
		rs_poll_cq(rs);
	if (rs->phase == P_CONNECTED && rs_ctrl_avail(rs) &&
	    rs_post_ctrl(rs, RSW_MSG(RSW_OP_CTRL, RSW_CTRL_KEEPALIVE)))
		rs->ctrl_seq--; /* not posted: the slot stays free */
	pthread_mutex_unlock(&rs->lock);
}

static void *ka_run(void *arg)
{
	struct ka_thread *self = arg;
	pthread_mutex_lock(&ka.lock);
	while (!self->stop) {
		uint64_t now = now_ms(), next = UINT64_MAX;
		struct rsk *due = NULL;
		for (int i = 0; i < ka.n; i++) {
			struct ka_ent *e = &ka.ents[i];
			if (!due && e->due_ms <= now) {
				due = e->rs;
				e->due_ms = now + (uint64_t)e->secs * 1000;
			}
			if (e->due_ms < next)
				next = e->due_ms;
		}
		if (due) {
			ka.busy = due;
			pthread_mutex_unlock(&ka.lock);
			ka_send(due);
			pthread_mutex_lock(&ka.lock);
			ka.busy = NULL;
			pthread_cond_broadcast(&ka.cond);
			continue;
		}
		if (next == UINT64_MAX) {
			pthread_cond_wait(&ka.cond, &ka.lock);
		} else {
			struct timespec ts = {(time_t)(next / 1000), (long)(next % 1000) * 1000000};
			pthread_cond_timedwait(&ka.cond, &ka.lock, &ts);
		}
	}
	pthread_mutex_unlock(&ka.lock);
	return NULL;
}

/* ka_start runs the service thread with every signal blocked: the
 * program's signals go to its own threads. 0 or an errno. */
static int ka_start(void)
{
	struct ka_thread *t = calloc(1, sizeof(*t));
	if (!t)
		return ENOMEM;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int err = pthread_create(&t->id, NULL, ka_run, t);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		free(t);
		return err;
	}
	ka.th = t;
	return 0;
}

static int ka_find(const struct rsk *rs)
{
	for (int i = 0; i < ka.n; i++)
		if (ka.ents[i].rs == rs)
			return i;
	return -1;
}

unsigned rs_keepalive_default(void)
{
	unsigned v = 0;
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_keepalive_time", "re");
	if (f) {
		if (fscanf(f, "%u", &v) != 1)
			v = 0;
		fclose(f);
	}
	return v ? v : 7200;
}

/* rs_keepalive_set puts rs in the table (add), or only finds it there,
 * with a message due secs from now and every secs after: 0 or an errno. */
int rs_keepalive_set(struct rsk *rs, unsigned secs, int add)
{
	pthread_once(&ka_once, ka_init);
	pthread_mutex_lock(&ka.life);
	pthread_mutex_lock(&ka.lock);
	int err = 0, i = ka_find(rs);
	if (i < 0 && !add) {
		pthread_mutex_unlock(&ka.lock);
		pthread_mutex_unlock(&ka.life);
		return 0;
	}
	if (i < 0 && ka.n == ka.cap) {
		int cap = ka.cap ? ka.cap * 2 : 8;
		struct ka_ent *e = realloc(ka.ents, sizeof(*e) * (size_t)cap);
		if (e) {
			ka.ents = e;
			ka.cap = cap;
		} else {
			err = ENOMEM;
		}
	}
	if (!err && !ka.th)
		err = ka_start();
	if (!err) {
		if (i < 0) {
			i = ka.n++;
			ka.ents[i].rs = rs;
		}
		ka.ents[i].secs = secs;
		ka.ents[i].due_ms = now_ms() + (uint64_t)secs * 1000;
		pthread_cond_broadcast(&ka.cond);
	}
	pthread_mutex_unlock(&ka.lock);
	pthread_mutex_unlock(&ka.life);
	return err;
}

/* rs_keepalive_remove takes rs out of the table, waits until the thread
 * is not posting on it, and ends the thread with the last socket. */
void rs_keepalive_remove(struct rsk *rs)
{
	pthread_once(&ka_once, ka_init);
	pthread_mutex_lock(&ka.life);
	pthread_mutex_lock(&ka.lock);
	int i = ka_find(rs);
	if (i >= 0)
		ka.ents[i] = ka.ents[--ka.n];
	while (ka.busy == rs)
		pthread_cond_wait(&ka.cond, &ka.lock);
	struct ka_thread *t = NULL;
	if (!ka.n && ka.th) {
		t = ka.th;
		ka.th = NULL;
		t->stop = 1;
		free(ka.ents);
		ka.ents = NULL;
		ka.cap = 0;
		pthread_cond_broadcast(&ka.cond);
	}
	pthread_mutex_unlock(&ka.lock);
	if (t) {
		pthread_join(t->id, NULL);
		free(t);
	}
	pthread_mutex_unlock(&ka.life);
}
