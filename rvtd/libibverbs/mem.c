/* Protection domains and memory registration (docs/choices.md, "drop-in
 * libibverbs: registering malloc'd memory"). A region inside anonymous
 * private writable pages is moved, page by page, into an rvtd shared-memory
 * segment mapped over the same addresses (kind 1, zero copy); anything else
 * is registered for process_vm_readv/writev (kind 2). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>
#include "internal.h"

struct rvc_seg {
	struct rvc_seg *next;     /* the context's list (mr_lock) */
	struct rvc_seg *gnext;    /* the process's list (seg_registry) */
	uintptr_t start;
	size_t len;
	uint32_t handle;
	int refs;
	int memfd; /* the segment's file, for seg_unshare (-1: none) */
};

/* fork(): registered memory behaves as with rdma-core on a kernel with
 * fork-safe pinning (IBV_FORK_UNNEEDED): the child gets a private copy of
 * every page, the parent keeps its registrations. Kind-2 regions are the
 * kernel's copy-on-write memory already; shared segments (MAP_SHARED) are
 * turned into private copies in the child by an atfork handler. That needs
 * the process's segments in one list: the only process-wide state here
 * besides what the ABI forces. */
static pthread_mutex_t seg_registry = PTHREAD_MUTEX_INITIALIZER;
static struct rvc_seg *all_segs;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* No page move is half done at fork: the child would keep the range
 * write-protected, with nobody to finish the move. */
static void fork_prepare(void)
{
	rvc_move_lock();
	pthread_mutex_lock(&seg_registry);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&seg_registry);
	rvc_move_unlock();
}

static void fork_child(void)
{
	/* One thread here: an unguarded copy loses nothing; a private
	 * mapping of the file would show the parent's later writes. */
	for (struct rvc_seg *s = all_segs; s; s = s->gnext) {
		void *tmp = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				 -1, 0);
		if (tmp != MAP_FAILED)
			rvc_replace_pages_single(s->start, s->len, tmp);
		if (s->memfd >= 0)
			close(s->memfd); /* the file is the parent's now */
		s->memfd = -1;
	}
	pthread_mutex_unlock(&seg_registry);
	rvc_move_unlock();
}

static void install_atfork(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

static void registry_add(struct rvc_seg *s)
{
	pthread_once(&atfork_once, install_atfork);
	pthread_mutex_lock(&seg_registry);
	s->gnext = all_segs;
	all_segs = s;
	pthread_mutex_unlock(&seg_registry);
}

static void registry_del(struct rvc_seg *s)
{
	pthread_mutex_lock(&seg_registry);
	for (struct rvc_seg **pp = &all_segs; *pp; pp = &(*pp)->gnext)
		if (*pp == s) {
			*pp = s->gnext;
			break;
		}
	pthread_mutex_unlock(&seg_registry);
}

/* Nothing to do: fork is safe without it (above), as rdma-core says of
 * kernels where ibv_is_fork_initialized is IBV_FORK_UNNEEDED. */
RVC_EXPORT int ibv_fork_init(void)
{
	return 0;
}

RVC_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

RVC_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct rvc_context *rc = to_rctx(ctx);
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	struct rvc_handle_reply r;
	int err = rvc_call(&rc->conn, RVC_OP_ALLOC_PD, rc->dev_handle, NULL, 0, NULL, 0, &r,
			   sizeof(r), 0, 0, 0, NULL);
	if (err) {
		free(pd);
		errno = err;
		return NULL;
	}
	pd->context = ctx;
	pd->handle = r.handle;
	return pd;
}

RVC_EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct rvc_context *rc = to_rctx(pd->context);
	int err = rvc_call(&rc->conn, RVC_OP_DEALLOC_PD, pd->handle, NULL, 0, NULL, 0, NULL, 0, 0, 0,
			   0, NULL);
	if (err)
		return err;
	free(pd);
	return 0;
}

/* anon_private reports whether [start, end) lies wholly in anonymous private
 * writable mappings (the heap, malloc's mmaps, anonymous mmap). */
static int anon_private(uintptr_t start, uintptr_t end)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return 0;
	char line[512];
	uintptr_t at = start;
	while (at < end && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, off, inode;
		char perms[8], dev[16], path[256] = "";
		int n = sscanf(line, "%lx-%lx %7s %lx %15s %lu %255s", &lo, &hi, perms, &off, dev,
			       &inode, path);
		if (n < 6 || hi <= at)
			continue;
		if (lo > at)
			break; /* a hole */
		/* A region given back by seg_unshare is a private mapping of a
		 * deleted memfd: as private as anonymous memory. */
		int unshared = inode != 0 && strncmp(path, "/memfd:", 7) == 0;
		if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p' ||
		    (inode != 0 && !unshared) || (path[0] && strcmp(path, "[heap]") != 0 && !unshared))
			break;
		at = hi;
	}
	fclose(f);
	return at >= end;
}

/* move_to_segment replaces the pages [start, start+len) by the memfd's
 * pages holding the same bytes, losing no store of another thread. */
static int move_to_segment(uintptr_t start, size_t len, int memfd)
{
	void *tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (tmp == MAP_FAILED)
		return errno;
	int err = rvc_replace_pages(start, len, tmp);
	if (err)
		munmap(tmp, len);
	return err;
}

/* seg_unshare gives a segment's pages back to private memory while other
 * threads may be writing to them (malloc'd objects beside the region:
 * rping's rdma_cm_id shares a page with its buffers, and its CM thread
 * counts an event there while the main thread deregisters). A plain
 * copy would lose such a write: it copies the page, then maps the copy,
 * and a store between the two is gone. A private (copy-on-write) mapping of the
 * segment's own file over the same addresses is one mmap: a store before
 * it is in the file, which the private mapping shows; one after it goes
 * to the private page. Nothing writes the file afterwards (the region is
 * deregistered, the daemon frees its side). Should that mmap fail, a
 * guarded copy does the same. A segment without its file is a fork
 * child's, whose pages are private already. */
static void seg_unshare(struct rvc_seg *s)
{
	if (s->memfd < 0)
		return;
	if (mmap((void *)s->start, s->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED,
		 s->memfd, 0) == MAP_FAILED) {
		void *tmp = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				 -1, 0);
		if (tmp != MAP_FAILED && rvc_replace_pages(s->start, s->len, tmp))
			munmap(tmp, s->len); /* the shared pages stay: still correct memory */
	}
	close(s->memfd);
	s->memfd = -1;
}

static void seg_free_locked(struct rvc_context *rc, struct rvc_seg *s)
{
	for (struct rvc_seg **pp = &rc->segs; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	registry_del(s);
	seg_unshare(s);
	rvc_call(&rc->conn, RVC_OP_SHM_FREE, s->handle, NULL, 0, NULL, 0, NULL, 0, 0, 0, 0, NULL);
	free(s);
}

/* seg_for finds or makes the segment holding [addr, addr+len): NULL with
 * *err 0 when the region cannot be shared (use kind 2). */
static struct rvc_seg *seg_for(struct rvc_context *rc, uintptr_t addr, size_t len, int *err)
{
	size_t pg = rc->conn.page_size ? rc->conn.page_size : (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t start = addr & ~(uintptr_t)(pg - 1);
	uintptr_t end = (addr + len + pg - 1) & ~(uintptr_t)(pg - 1);
	*err = 0;
	for (struct rvc_seg *s = rc->segs; s; s = s->next) {
		if (start >= s->start && end <= s->start + s->len) {
			s->refs++;
			return s;
		}
		if (start < s->start + s->len && s->start < end)
			return NULL; /* overlaps a segment partly: kind 2 */
	}
	/* The registering thread's own stack cannot be write-protected while
	 * it runs on it. */
	if (!anon_private(start, end) || rvc_on_own_stack(start, end))
		return NULL;
	struct rvc_size req = {.size = end - start};
	struct rvc_shm_alloc_reply r;
	struct rvc_reply rep;
	*err = rvc_call(&rc->conn, RVC_OP_SHM_ALLOC, rc->dev_handle, &req, sizeof(req), NULL, 0, &r,
			sizeof(r), 0, 0, 1, &rep);
	if (*err)
		return NULL;
	int memfd = rep.fds[0];
	if (r.size < end - start) {
		close(memfd);
		*err = EPROTO;
		return NULL;
	}
	struct rvc_seg *s = calloc(1, sizeof(*s));
	if (s)
		s->memfd = -1;
	if (!s || (*err = move_to_segment(start, end - start, memfd))) {
		if (!s)
			*err = ENOMEM;
		close(memfd);
		free(s);
		rvc_call(&rc->conn, RVC_OP_SHM_FREE, r.shm, NULL, 0, NULL, 0, NULL, 0, 0, 0, 0, NULL);
		return NULL;
	}
	fcntl(memfd, F_SETFD, FD_CLOEXEC);
	s->memfd = memfd; /* for seg_unshare */
	s->start = start;
	s->len = end - start;
	s->handle = r.shm;
	s->refs = 1;
	s->next = rc->segs;
	rc->segs = s;
	registry_add(s);
	return s;
}

static int vm_allowed(struct rvc_context *rc)
{
	if (!rc->ptracer_set) {
		/* Yama ptrace_scope 1: let the daemon read and write us. */
		prctl(PR_SET_PTRACER, (unsigned long)rc->conn.daemon_pid, 0, 0, 0);
		rc->ptracer_set = 1;
	}
	return 0;
}

static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	struct rvc_context *rc = to_rctx(pd->context);
	if (!length) {
		errno = EINVAL;
		return NULL;
	}
	struct rvc_mr *m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	const char *mode = getenv("RVTD_MR");
	int force_vm = mode && !strcmp(mode, "vm");
	/* Optional access flags (relaxed ordering, ...) are hints a device
	 * may ignore, as rdma-core drops the ones a provider lacks. */
	access &= ~IBV_ACCESS_OPTIONAL_RANGE;
	struct rvc_reg_mr req = {.access = (uint32_t)access, .addr = (uintptr_t)addr,
				 .length = length, .iova = iova};
	int err = 0;
	pthread_mutex_lock(&rc->mr_lock);
	struct rvc_seg *s = force_vm ? NULL : seg_for(rc, (uintptr_t)addr, length, &err);
	if (err)
		goto fail;
	if (s) {
		req.kind = RVC_MR_SHM;
		req.shm = s->handle;
		req.shm_offset = (uintptr_t)addr - s->start;
	} else {
		req.kind = RVC_MR_VM;
		vm_allowed(rc);
	}
	struct rvc_reg_mr_reply r;
	err = rvc_call(&rc->conn, RVC_OP_REG_MR, pd->handle, &req, sizeof(req), NULL, 0, &r,
		       sizeof(r), 0, 0, 0, NULL);
	if (err) {
		if (s && --s->refs == 0)
			seg_free_locked(rc, s);
		if (req.kind == RVC_MR_VM && err == EOPNOTSUPP)
			rvc_warn("ibv_reg_mr(%p, %zu): this rvtd does not serve process_vm "
				 "registration (reg_mr kind 2), which this region needs (%s)", addr,
				 length, force_vm ? "RVTD_MR=vm" :
				 "not anonymous private memory the library can move into shared memory");
		else if (req.kind == RVC_MR_VM && err == EPERM)
			rvc_warn("ibv_reg_mr(%p, %zu): rvtd (pid %u) may not read this process: run it "
				 "as the same user, and see PR_SET_PTRACER and "
				 "/proc/sys/kernel/yama/ptrace_scope", addr, length, rc->conn.daemon_pid);
		goto fail;
	}
	pthread_mutex_unlock(&rc->mr_lock);
	m->seg = s;
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = r.mr;
	m->mr.lkey = r.lkey;
	m->mr.rkey = r.rkey;
	return &m->mr;
fail:
	pthread_mutex_unlock(&rc->mr_lock);
	free(m);
	errno = err;
	return NULL;
}

#undef ibv_reg_mr
#undef ibv_reg_mr_iova
RVC_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg(pd, addr, length, (uintptr_t)addr, access);
}

RVC_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
					  uint64_t iova, int access)
{
	return reg(pd, addr, length, iova, access);
}

RVC_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
					   uint64_t iova, unsigned int access)
{
	return reg(pd, addr, length, iova, (int)access);
}

RVC_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
					    uint64_t iova, int fd, int access)
{
	(void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

RVC_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
			    size_t length, int access)
{
	(void)mr, (void)flags, (void)pd, (void)addr, (void)length, (void)access;
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT;
}

RVC_EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct rvc_mr *m = rvc_container_of(mr, struct rvc_mr, mr);
	struct rvc_context *rc = to_rctx(mr->context);
	int err = rvc_call(&rc->conn, RVC_OP_DEREG_MR, mr->handle, NULL, 0, NULL, 0, NULL, 0, 0, 0,
			   0, NULL);
	if (err)
		return err;
	pthread_mutex_lock(&rc->mr_lock);
	if (m->seg && --m->seg->refs == 0)
		seg_free_locked(rc, m->seg);
	pthread_mutex_unlock(&rc->mr_lock);
	free(m);
	return 0;
}

void rvc_release_segments(struct rvc_context *rc)
{
	pthread_mutex_lock(&rc->mr_lock);
	while (rc->segs) {
		struct rvc_seg *s = rc->segs;
		rc->segs = s->next;
		registry_del(s);
		seg_unshare(s);
		free(s);
	}
	pthread_mutex_unlock(&rc->mr_lock);
}
