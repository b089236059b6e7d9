/* The drop-in librdmacm's API in one process, both ends on two channels:
 * rdma_getaddrinfo, bind to port 0, resolve with device and path, a
 * rejected request with private data both ways, an accepted one with
 * library-made CQs and a SEND, rdma_migrate_id, options, what is not
 * served. Prints PASS; run by rvtd/dropin TestRdmacmC against rvtd
 * (RVTD_SOCKET) with LD_LIBRARY_PATH at build/lib. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "check.h"

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

/* late_reader calls rdma_get_cm_event on a channel destroyed already, as
 * rping's CM thread does when its program tears down between two events;
 * it sets *returned if the call ever returns. */
static volatile int late_returned;

static void *late_reader(void *arg)
{
	struct rdma_cm_event *ev;
	rdma_get_cm_event(arg, &ev);
	late_returned = 1;
	return NULL;
}

static void set_sin(struct sockaddr_in *s, const char *ip, int port)
{
	memset(s, 0, sizeof(*s));
	s->sin_family = AF_INET;
	s->sin_port = htons(port);
	inet_pton(AF_INET, ip, &s->sin_addr);
}

/* resolve: a client ID from rvt1's address to the server's, resolved. */
static struct rdma_cm_id *resolve(struct rdma_event_channel *ch, struct sockaddr_in *dst)
{
	struct rdma_cm_id *id;
	struct sockaddr_in src;
	set_sin(&src, "198.18.0.2", 0);
	CHECK(rdma_create_id(ch, &id, (void *)0x1234, RDMA_PS_TCP) == 0);
	CHECK(id->verbs == NULL);
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)dst, 2000) == 0);
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(id->verbs && strcmp(ibv_get_device_name(id->verbs->device), "rvt1") == 0);
	CHECK(rdma_get_src_port(id) != 0 && rdma_get_dst_port(id) == dst->sin_port);
	CHECK(rdma_resolve_route(id, 2000) == 0);
	struct rdma_cm_event *ev = wait_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK(ev->id == id && id->context == (void *)0x1234);
	rdma_ack_cm_event(ev);
	CHECK(id->route.num_paths == 1 && id->route.path_rec);
	return id;
}

int main(void)
{
	/* rdma_getaddrinfo */
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_UDP}, *ai;
	CHECK(rdma_getaddrinfo("198.18.0.1", "7999", &hints, &ai) == 0);
	CHECK(ai->ai_src_addr && !ai->ai_dst_addr && ai->ai_qp_type == IBV_QPT_UD &&
	      ai->ai_port_space == RDMA_PS_UDP && ai->ai_family == AF_INET);
	CHECK(((struct sockaddr_in *)ai->ai_src_addr)->sin_port == htons(7999));
	rdma_freeaddrinfo(ai);
	hints.ai_flags = 0;
	hints.ai_port_space = 0;
	CHECK(rdma_getaddrinfo("198.18.0.1", NULL, &hints, &ai) == 0);
	CHECK(ai->ai_dst_addr && !ai->ai_src_addr && ai->ai_qp_type == IBV_QPT_RC);
	rdma_freeaddrinfo(ai);
	CHECK(rdma_getaddrinfo(NULL, NULL, NULL, &ai) == -1 && errno == EINVAL);
	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED") == 0);

	int n = 0;
	struct ibv_context **devs = rdma_get_devices(&n);
	CHECK(devs && n == 2 && devs[2] == NULL);
	rdma_free_devices(devs);

	/* A listener on rvt0, port chosen by the daemon. */
	struct rdma_event_channel *sch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	CHECK(sch && cch && sch->fd >= 0 && cch->fd >= 0);
	struct rdma_cm_id *lid;
	CHECK(rdma_create_id(sch, &lid, (void *)0x5678, RDMA_PS_TCP) == 0);
	struct sockaddr_in a;
	set_sin(&a, "198.18.0.1", 0);
	CHECK(rdma_bind_addr(lid, (struct sockaddr *)&a) == 0);
	CHECK(lid->verbs && strcmp(ibv_get_device_name(lid->verbs->device), "rvt0") == 0);
	CHECK(rdma_listen(lid, 4) == 0);
	a.sin_port = rdma_get_src_port(lid);
	CHECK(a.sin_port != 0);
	uint8_t tos = 32;
	CHECK(rdma_set_option(lid, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)) == 0);
	CHECK(rdma_set_option(lid, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &tos, sizeof(tos)) == -1);
	CHECK(rdma_join_multicast(lid, (struct sockaddr *)&a, NULL) == -1 && errno == EINVAL); /* not UD */

	/* 1. Rejected, with private data both ways (no QP: by number). */
	struct rdma_cm_id *cid = resolve(cch, &a);
	struct rdma_conn_param cp = {.private_data = "hello", .private_data_len = 6,
				     .responder_resources = 1, .initiator_depth = 1,
				     .retry_count = 7, .rnr_retry_count = 7, .qp_num = 0x4242};
	CHECK(rdma_connect(cid, &cp) == 0);
	struct rdma_cm_event *ev = wait_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(ev->listen_id == lid && ev->id != lid && ev->id->context == (void *)0x5678);
	CHECK(ev->param.conn.private_data_len >= 6 &&
	      memcmp(ev->param.conn.private_data, "hello", 6) == 0);
	CHECK(ev->param.conn.qp_num == 0x4242);
	struct rdma_cm_id *nid = ev->id;
	CHECK(nid->verbs == lid->verbs);
	struct sockaddr_in *peer = (struct sockaddr_in *)rdma_get_peer_addr(nid);
	CHECK(peer->sin_family == AF_INET && peer->sin_addr.s_addr == inet_addr("198.18.0.2"));
	CHECK(rdma_reject(nid, "nope", 5) == 0);
	CHECK(rdma_destroy_id(nid) == 0); /* before the ack, as programs do */
	rdma_ack_cm_event(ev);
	ev = wait_event(cch, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->status == 28 && ev->id == cid);
	CHECK(ev->param.conn.private_data && memcmp(ev->param.conn.private_data, "nope", 5) == 0);
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(cid) == 0);

	/* 2. Accepted, QPs through the library, CQs it makes. */
	cid = resolve(cch, &a);
	struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					      .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	CHECK(rdma_create_qp(cid, NULL, &qa) == 0);
	CHECK(cid->qp && cid->pd && cid->send_cq && cid->recv_cq && cid->qp->send_cq == cid->send_cq);
	cp.qp_num = 0;
	CHECK(rdma_connect(cid, &cp) == 0);
	ev = wait_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	nid = ev->id;
	rdma_ack_cm_event(ev);
	struct ibv_qp_init_attr qb = qa;
	qb.send_cq = qb.recv_cq = NULL; /* rdma_create_qp filled in the client's */
	CHECK(rdma_create_qp(nid, NULL, &qb) == 0);
	static char rbuf[64], sbuf[64] = "through the drop-in librdmacm";
	struct ibv_mr *rmr = ibv_reg_mr(nid->pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *smr = ibv_reg_mr(cid->pd, sbuf, sizeof(sbuf), 0);
	CHECK(rmr && smr);
	CHECK(rdma_post_recv(nid, NULL, rbuf, sizeof(rbuf), rmr) == 0);
	struct rdma_conn_param ap = {.private_data = "welcome", .private_data_len = 8,
				     .responder_resources = 1, .initiator_depth = 1,
				     .rnr_retry_count = 7};
	CHECK(rdma_accept(nid, &ap) == 0);
	ev = wait_event(cch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->id == cid && memcmp(ev->param.conn.private_data, "welcome", 8) == 0);
	rdma_ack_cm_event(ev);
	rdma_ack_cm_event(wait_event(sch, RDMA_CM_EVENT_ESTABLISHED));
	CHECK(rdma_post_send(cid, NULL, sbuf, 30, smr, 0) == 0);
	struct ibv_wc wc;
	int got;
	while ((got = ibv_poll_cq(cid->send_cq, 1, &wc)) == 0)
		;
	CHECK(got == 1 && wc.status == IBV_WC_SUCCESS);
	while ((got = ibv_poll_cq(nid->recv_cq, 1, &wc)) == 0)
		;
	CHECK(got == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 30);
	CHECK(strcmp(rbuf, "through the drop-in librdmacm") == 0);

	/* rdma_migrate_id: the server's connection to a channel of its own. */
	struct rdma_event_channel *mch = rdma_create_event_channel();
	CHECK(mch && rdma_migrate_id(nid, mch) == 0 && nid->channel == mch);
	CHECK(rdma_disconnect(cid) == 0);
	rdma_ack_cm_event(wait_event(mch, RDMA_CM_EVENT_DISCONNECTED));
	CHECK(rdma_disconnect(nid) == 0);
	rdma_ack_cm_event(wait_event(cch, RDMA_CM_EVENT_DISCONNECTED));
	CHECK(rdma_notify(nid, IBV_EVENT_PATH_MIG) == -1 && errno == EINVAL);

	ibv_dereg_mr(rmr);
	ibv_dereg_mr(smr);
	rdma_destroy_qp(cid);
	rdma_destroy_qp(nid);
	CHECK(rdma_destroy_id(cid) == 0 && rdma_destroy_id(nid) == 0 && rdma_destroy_id(lid) == 0);
	rdma_destroy_event_channel(mch);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);

	/* A read of a destroyed channel blocks (a thread that comes to it
	 * after the destroy, as one blocked in it during the destroy): it
	 * does not fail, and it does not read whatever file took the
	 * channel's descriptor number since. The thread stays blocked until
	 * the process ends (cancelling it, as rping does, trips a false
	 * report of GCC's AddressSanitizer in this instrumented program). */
	int reused = open("/", O_RDONLY | O_DIRECTORY); /* most likely the old number */
	CHECK(reused >= 0);
	pthread_t late;
	CHECK(pthread_create(&late, NULL, late_reader, sch) == 0);
	CHECK(pthread_detach(late) == 0);
	usleep(200 * 1000);
	CHECK(!late_returned);
	close(reused);
	printf("PASS\n");
	return 0;
}
