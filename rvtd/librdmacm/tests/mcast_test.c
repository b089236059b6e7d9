/* rdma_leave_multicast waits, as librdmacm over ucma, until the program
 * acknowledged every event it was handed about the join: a leave called
 * while the MULTICAST_JOIN event is held returns only after its ack; with
 * the event acked first, and on a synchronous ID (which holds its last
 * event itself), it returns at once. Prints PASS; run by rvtd/dropin
 * TestRdmacmMcastLeave against rvtd (RVTD_SOCKET), LD_LIBRARY_PATH at
 * build/lib. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#include "check.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void set_sin(struct sockaddr_in *s, const char *ip)
{
	memset(s, 0, sizeof(*s));
	s->sin_family = AF_INET;
	inet_pton(AF_INET, ip, &s->sin_addr);
}

static struct rdma_cm_event *wait_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	CHECK(poll(&p, 1, 10000) == 1);
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(ch, &ev) == 0);
	if (ev->event != want) {
		fprintf(stderr, "FAIL: got %s status %d, want %s\n", rdma_event_str(ev->event),
			ev->status, rdma_event_str(want));
		exit(1);
	}
	return ev;
}

struct leave {
	struct rdma_cm_id *id;
	struct sockaddr_in *group;
	int ret;
	double done;
};

static void *leave_thread(void *p)
{
	struct leave *l = p;
	l->ret = rdma_leave_multicast(l->id, (struct sockaddr *)l->group);
	l->done = now();
	return NULL;
}

/* lost: "mcast_test lost": join 239.1.2.42 from rvt0's address, print
 * "joined", then wait for the MULTICAST_ERROR the daemon sends when the
 * test takes the address away (TestRdmacmMcastError): status
 * -ENETRESET, the join's context; the leave then works. */
static int lost(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0);
	struct sockaddr_in src, group;
	set_sin(&src, "198.18.0.1");
	set_sin(&group, "239.1.2.42");
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&src) == 0);
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&group, (void *)0xabc) == 0);
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_MULTICAST_JOIN));
	printf("joined\n");
	fflush(stdout);
	struct rdma_cm_event *ev = wait_event(ch, RDMA_CM_EVENT_MULTICAST_ERROR);
	CHECK(ev->status == -ENETRESET && ev->param.ud.private_data == (void *)0xabc && ev->id == id);
	rdma_ack_cm_event(ev);
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&group) == 0);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(ch);
	printf("PASS\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "lost") == 0)
		return lost();
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch);
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, (void *)0x77, RDMA_PS_UDP) == 0);
	struct sockaddr_in src, group;
	set_sin(&src, "198.18.0.1");
	set_sin(&group, "239.1.2.40");
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&src) == 0);

	/* 1. The JOIN event held: the leave returns after its ack. */
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&group, (void *)0x99) == 0);
	struct rdma_cm_event *ev = wait_event(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
	CHECK(ev->param.ud.private_data == (void *)0x99);
	struct leave l = {.id = id, .group = &group, .ret = -2};
	pthread_t th;
	CHECK(pthread_create(&th, NULL, leave_thread, &l) == 0);
	usleep(300000);
	double acked = now();
	CHECK(l.done == 0); /* still waiting */
	rdma_ack_cm_event(ev);
	CHECK(pthread_join(th, NULL) == 0);
	CHECK(l.ret == 0 && l.done >= acked && l.done - acked < 1.0);

	/* 2. Acked first: at once; a second leave is EADDRNOTAVAIL. */
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&group, NULL) == 0);
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_MULTICAST_JOIN));
	double t0 = now();
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&group) == 0);
	CHECK(now() - t0 < 1.0);
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&group) == -1 && errno == EADDRNOTAVAIL);

	/* 3. A join whose event was never read: the leave does not wait (the
	 * event is dropped, as ucma drops it), and the next join's event is
	 * its own. */
	CHECK(rdma_join_multicast(id, (struct sockaddr *)&group, (void *)1) == 0);
	t0 = now();
	CHECK(rdma_leave_multicast(id, (struct sockaddr *)&group) == 0);
	CHECK(now() - t0 < 1.0);
	CHECK(rdma_destroy_id(id) == 0);

	/* 4. A synchronous ID: the join reads its own event; the leave
	 * returns at once. */
	struct rdma_cm_id *sid;
	CHECK(rdma_create_id(NULL, &sid, NULL, RDMA_PS_UDP) == 0);
	set_sin(&group, "239.1.2.41");
	CHECK(rdma_bind_addr(sid, (struct sockaddr *)&src) == 0);
	CHECK(rdma_join_multicast(sid, (struct sockaddr *)&group, NULL) == 0);
	t0 = now();
	CHECK(rdma_leave_multicast(sid, (struct sockaddr *)&group) == 0);
	CHECK(now() - t0 < 1.0);
	CHECK(rdma_destroy_id(sid) == 0);
	rdma_destroy_event_channel(ch);
	printf("PASS\n");
	return 0;
}
