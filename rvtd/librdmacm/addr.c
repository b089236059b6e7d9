/* rdma_getaddrinfo over the system resolver, SRQs on an ID. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

static int copy_sa(struct sockaddr **dst, socklen_t *dlen, const struct sockaddr *src, socklen_t len)
{
	*dst = malloc(len);
	if (!*dst)
		return ENOMEM;
	memcpy(*dst, src, len);
	*dlen = len;
	return 0;
}

RVM_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}

/* rdma_getaddrinfo: one result from getaddrinfo (IPv4 preferred for a
 * wildcard, as the daemon's devices are IPv4 first); RAI_PASSIVE puts the
 * address in ai_src_addr, else in ai_dst_addr with the hints' source. No
 * AF_IB, no route or connect data (RoCE has no SA path records here). */
RVM_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
				const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
	struct rdma_addrinfo h = {0};
	if (hints)
		h = *hints;
	if (!res || (!node && !service && !h.ai_src_addr && !h.ai_dst_addr))
		return rvm_err(EINVAL);
	if (h.ai_family == AF_IB)
		return rvm_err(EAFNOSUPPORT);
	struct rdma_addrinfo *ai = calloc(1, sizeof(*ai));
	if (!ai)
		return rvm_err(ENOMEM);
	ai->ai_flags = h.ai_flags;
	ai->ai_port_space = h.ai_port_space ? h.ai_port_space : RDMA_PS_TCP;
	ai->ai_qp_type = h.ai_qp_type ? h.ai_qp_type
				      : (ai->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC);
	if (h.ai_qp_type == IBV_QPT_UD && !h.ai_port_space)
		ai->ai_port_space = RDMA_PS_UDP;
	int err = 0;
	if (node || service) {
		struct addrinfo gh = {.ai_family = h.ai_family, .ai_socktype = SOCK_STREAM};
		if (h.ai_flags & RAI_PASSIVE)
			gh.ai_flags |= AI_PASSIVE;
		if (h.ai_flags & RAI_NUMERICHOST)
			gh.ai_flags |= AI_NUMERICHOST;
		struct addrinfo *gr = NULL;
		int g = getaddrinfo(node, service, &gh, &gr);
		if (g) {
			rdma_freeaddrinfo(ai);
			return g == EAI_SYSTEM ? -1 : rvm_err(g == EAI_MEMORY ? ENOMEM : EADDRNOTAVAIL);
		}
		struct addrinfo *pick = gr;
		for (struct addrinfo *p = gr; p; p = p->ai_next)
			if (p->ai_family == AF_INET) {
				pick = p;
				break;
			}
		ai->ai_family = pick->ai_family;
		if (h.ai_flags & RAI_PASSIVE)
			err = copy_sa(&ai->ai_src_addr, &ai->ai_src_len, pick->ai_addr, pick->ai_addrlen);
		else
			err = copy_sa(&ai->ai_dst_addr, &ai->ai_dst_len, pick->ai_addr, pick->ai_addrlen);
		freeaddrinfo(gr);
	}
	if (!err && h.ai_src_addr && !ai->ai_src_addr) {
		err = copy_sa(&ai->ai_src_addr, &ai->ai_src_len, h.ai_src_addr, h.ai_src_len);
		if (!ai->ai_family)
			ai->ai_family = h.ai_src_addr->sa_family;
	}
	if (!err && h.ai_dst_addr && !ai->ai_dst_addr) {
		err = copy_sa(&ai->ai_dst_addr, &ai->ai_dst_len, h.ai_dst_addr, h.ai_dst_len);
		if (!ai->ai_family)
			ai->ai_family = h.ai_dst_addr->sa_family;
	}
	if (err) {
		rdma_freeaddrinfo(ai);
		return rvm_err(err);
	}
	*res = ai;
	return 0;
}

RVM_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	if (!id || !attr)
		return rvm_err(EINVAL);
	struct ibv_pd *pd = (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? attr->pd : id->pd;
	if (!pd || (attr->comp_mask & ~IBV_SRQ_INIT_ATTR_PD))
		return rvm_err(pd ? EOPNOTSUPP : EINVAL);
	struct ibv_srq_init_attr a = {.srq_context = attr->srq_context, .attr = attr->attr};
	struct ibv_srq *srq = ibv_create_srq(pd, &a);
	if (!srq)
		return -1;
	id->srq = srq;
	return 0;
}

RVM_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex ax = {.srq_context = attr->srq_context, .attr = attr->attr,
					  .comp_mask = IBV_SRQ_INIT_ATTR_PD, .pd = pd ? pd : id->pd};
	return rdma_create_srq_ex(id, &ax);
}

RVM_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (id && id->srq) {
		ibv_destroy_srq(id->srq);
		id->srq = NULL;
	}
}
