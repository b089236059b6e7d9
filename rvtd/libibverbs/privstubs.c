/* IBVERBS_PRIVATE_34: the provider interface of rdma-core 34-56. No
 * provider runs here, but programs such as perftest link the mlx5 and efa
 * providers' direct-verbs libraries (libmlx5.so.1, libefa.so.1), which the
 * loader refuses unless these names exist. verbs_register_driver_34 runs in
 * their constructors and registers nothing; the rest are reached only
 * through a provider's device, which never exists here, and fail. The
 * names are the imports of Debian 12's libmlx5.so.1 and libefa.so.1
 * (readelf --dyn-syms). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include "internal.h"

RVC_EXPORT bool verbs_allow_disassociate_destroy;

RVC_EXPORT void verbs_register_driver_34(const void *ops)
{
	(void)ops;
}

static int private_stub(const char *name)
{
	rvc_warn("%s: a provider-private verb, not served over rvtd", name);
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

#define STUB(name) \
	RVC_EXPORT int name(void) { return private_stub(#name); }

STUB(__verbs_log)
STUB(_verbs_init_and_alloc_context)
STUB(execute_ioctl)
STUB(ibv_cmd_advise_mr)
STUB(ibv_cmd_alloc_dm)
STUB(ibv_cmd_alloc_mw)
STUB(ibv_cmd_alloc_pd)
STUB(ibv_cmd_attach_mcast)
STUB(ibv_cmd_close_xrcd)
STUB(ibv_cmd_create_ah)
STUB(ibv_cmd_create_counters)
STUB(ibv_cmd_create_cq_ex)
STUB(ibv_cmd_create_flow)
STUB(ibv_cmd_create_flow_action_esp)
STUB(ibv_cmd_create_qp_ex)
STUB(ibv_cmd_create_qp_ex2)
STUB(ibv_cmd_create_rwq_ind_table)
STUB(ibv_cmd_create_srq)
STUB(ibv_cmd_create_srq_ex)
STUB(ibv_cmd_create_wq)
STUB(ibv_cmd_dealloc_mw)
STUB(ibv_cmd_dealloc_pd)
STUB(ibv_cmd_dereg_mr)
STUB(ibv_cmd_destroy_ah)
STUB(ibv_cmd_destroy_counters)
STUB(ibv_cmd_destroy_cq)
STUB(ibv_cmd_destroy_flow)
STUB(ibv_cmd_destroy_flow_action)
STUB(ibv_cmd_destroy_qp)
STUB(ibv_cmd_destroy_rwq_ind_table)
STUB(ibv_cmd_destroy_srq)
STUB(ibv_cmd_destroy_wq)
STUB(ibv_cmd_detach_mcast)
STUB(ibv_cmd_free_dm)
STUB(ibv_cmd_get_context)
STUB(ibv_cmd_modify_cq)
STUB(ibv_cmd_modify_flow_action_esp)
STUB(ibv_cmd_modify_qp)
STUB(ibv_cmd_modify_qp_ex)
STUB(ibv_cmd_modify_srq)
STUB(ibv_cmd_modify_wq)
STUB(ibv_cmd_open_qp)
STUB(ibv_cmd_open_xrcd)
STUB(ibv_cmd_query_context)
STUB(ibv_cmd_query_device_any)
STUB(ibv_cmd_query_mr)
STUB(ibv_cmd_query_port)
STUB(ibv_cmd_query_qp)
STUB(ibv_cmd_query_srq)
STUB(ibv_cmd_read_counters)
STUB(ibv_cmd_reg_dm_mr)
STUB(ibv_cmd_reg_dmabuf_mr)
STUB(ibv_cmd_reg_mr)
STUB(ibv_cmd_rereg_mr)
STUB(ibv_cmd_resize_cq)
STUB(verbs_init_cq)
STUB(verbs_open_device)
STUB(verbs_set_ops)
STUB(verbs_uninit_context)

/* The Ethernet address and VLAN behind a GID, for providers (verbs.h). */
RVC_EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
					   uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid)
{
	(void)context, (void)attr, (void)eth_mac, (void)vid;
	return private_stub(__func__);
}
