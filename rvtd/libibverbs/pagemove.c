/* Replacing a range of a program's pages while its other threads run
 * (docs/choices.md, "Writes during registration").
 *
 * Registration moves anonymous private pages into a shared segment: copy
 * them into the segment's mapping, then mremap that mapping over the same
 * addresses. A store another thread makes between the copy and the remap
 * would be lost, so the range is write-protected first: such a store
 * faults, and the SIGSEGV handler below holds the thread until the remap
 * is done, then lets the store run again, now on the new page. Reads go on
 * meanwhile. The handler hands every other fault to the handler that was
 * installed before it (the program's, a sanitizer's, or the default). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "internal.h"

/* The last moves' ranges, for a fault that reaches its handler only after
 * its move has ended (the thread was preempted between the fault and the
 * delivery): retried once, it finds the new page. */
#define MOVE_RING 16

static pthread_mutex_t move_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	uintptr_t lo, hi;
} ring[MOVE_RING];
static unsigned move_seq; /* odd while a move runs on ring[(seq/2) % MOVE_RING] */
static struct sigaction prev_segv;
/* The move count at this thread's last retried fault: a second fault with
 * no move finished since is not ours. */
static __thread unsigned retried_at __attribute__((tls_model("initial-exec"))) = ~0u;

static int in_range(unsigned slot, uintptr_t a)
{
	uintptr_t lo = __atomic_load_n(&ring[slot % MOVE_RING].lo, __ATOMIC_RELAXED);
	uintptr_t hi = __atomic_load_n(&ring[slot % MOVE_RING].hi, __ATOMIC_RELAXED);
	return a >= lo && a < hi;
}

static void chain(int sig, siginfo_t *si, void *uc)
{
	if (prev_segv.sa_flags & SA_SIGINFO) {
		prev_segv.sa_sigaction(sig, si, uc);
	} else if (prev_segv.sa_handler != SIG_DFL && prev_segv.sa_handler != SIG_IGN) {
		prev_segv.sa_handler(sig);
	} else if (si->si_code > 0) {
		/* A fault, with the default action (the kernel ignores "ignore"
		 * for one): the access faults again on return, and the process
		 * ends as it would have without this handler. */
		struct sigaction dfl = {.sa_handler = SIG_DFL};
		sigemptyset(&dfl.sa_mask);
		sigaction(SIGSEGV, &dfl, NULL);
	} else if (prev_segv.sa_handler == SIG_DFL) {
		/* Sent (kill, raise): nothing repeats it, so send it again, to
		 * be taken once this handler returns and unblocks it. */
		struct sigaction dfl = {.sa_handler = SIG_DFL};
		sigemptyset(&dfl.sa_mask);
		sigaction(SIGSEGV, &dfl, NULL);
		raise(SIGSEGV);
	}
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	uintptr_t a = (uintptr_t)si->si_addr;
	unsigned seq = __atomic_load_n(&move_seq, __ATOMIC_ACQUIRE);
	if (si->si_code != SEGV_ACCERR)
		goto other;
	if ((seq & 1) && in_range(seq / 2, a)) {
		while (__atomic_load_n(&move_seq, __ATOMIC_ACQUIRE) == seq)
			sched_yield();
		errno = saved;
		return;
	}
	if (retried_at != seq) {
		for (unsigned i = 0; i < MOVE_RING; i++)
			if (in_range(i, a)) {
				retried_at = seq;
				errno = saved;
				return;
			}
	}
other:
	errno = saved;
	chain(sig, si, uc);
}

/* guard_installed makes on_segv the SIGSEGV handler, chaining to whatever
 * was there, unless it already is (a program may install its own after
 * the library's; it becomes the one chained to). Under move_lock. */
static int guard_installed(void)
{
	struct sigaction cur;
	if (sigaction(SIGSEGV, NULL, &cur))
		return errno;
	if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_segv)
		return 0;
	struct sigaction sa = {.sa_sigaction = on_segv, .sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART};
	sigemptyset(&sa.sa_mask);
	prev_segv = cur;
	if (sigaction(SIGSEGV, &sa, NULL))
		return errno;
	return 0;
}

/* copy_pages copies whole pages, malloc's bytes around the region
 * included: an AddressSanitizer build (make asan) must not take reading
 * those (its redzones) for an overflow, nor a ThreadSanitizer build those
 * of freed blocks for a use after free, and the loop must not become a
 * memcpy call, which ASan intercepts. */
__attribute__((no_sanitize_address, no_sanitize_thread,
	       optimize("no-tree-loop-distribute-patterns"))) static void
copy_pages(void *dst, const void *src, size_t len)
{
	uint64_t *d = dst;
	const uint64_t *s = src;
	for (size_t i = 0; i < len / sizeof(*d); i++)
		d[i] = s[i];
}

int rvc_replace_pages(uintptr_t start, size_t len, void *with)
{
	pthread_mutex_lock(&move_lock);
	int err = guard_installed();
	if (err)
		goto out;
	unsigned seq = move_seq + 1;
	__atomic_store_n(&ring[(seq / 2) % MOVE_RING].lo, start, __ATOMIC_RELAXED);
	__atomic_store_n(&ring[(seq / 2) % MOVE_RING].hi, start + len, __ATOMIC_RELAXED);
	__atomic_store_n(&move_seq, seq, __ATOMIC_RELEASE);
	if (mprotect((void *)start, len, PROT_READ)) {
		err = errno;
	} else {
		copy_pages(with, (void *)start, len);
		if (mremap(with, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)start) == MAP_FAILED) {
			err = errno;
			mprotect((void *)start, len, PROT_READ | PROT_WRITE);
		}
	}
	__atomic_store_n(&move_seq, seq + 1, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&move_lock);
	return err;
}

void rvc_replace_pages_single(uintptr_t start, size_t len, void *with)
{
	copy_pages(with, (void *)start, len);
	if (mremap(with, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)start) == MAP_FAILED)
		munmap(with, len); /* the old pages stay: still correct memory */
}

void rvc_move_lock(void) { pthread_mutex_lock(&move_lock); }
void rvc_move_unlock(void) { pthread_mutex_unlock(&move_lock); }

int rvc_on_own_stack(uintptr_t start, uintptr_t end)
{
	/* The main thread's stack is "[stack]" in /proc/self/maps, never
	 * moved; glibc finds it by reading that file, so skip the call. */
	if (getpid() == gettid())
		return 0;
	pthread_attr_t attr;
	void *base;
	size_t size;
	if (pthread_getattr_np(pthread_self(), &attr))
		return 1; /* cannot tell: do not move */
	int err = pthread_attr_getstack(&attr, &base, &size);
	pthread_attr_destroy(&attr);
	if (err)
		return 1;
	return start < (uintptr_t)base + size && (uintptr_t)base < end;
}
