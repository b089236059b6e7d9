/* rvtd protocol 1.1, section 9 (the connection manager): message bodies and
 * the 384-byte cm_event record, as docs/rvtd-protocol.md lays them out. Pure
 * declarations and the record decoder; no verbs. */
#ifndef RVM_CMWIRE_H
#define RVM_CMWIRE_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define RVM_MINOR 1
#define RVM_EVENT_SIZE 384
#define RVM_PRIVATE_MAX 256

enum rvm_op {
	RVM_OP_CREATE_EVENT_CHANNEL = 0x0400,
	RVM_OP_DESTROY_EVENT_CHANNEL = 0x0401,
	RVM_OP_CREATE_ID = 0x0402,
	RVM_OP_DESTROY_ID = 0x0403,
	RVM_OP_BIND_ADDR = 0x0404,
	RVM_OP_RESOLVE_ADDR = 0x0405,
	RVM_OP_RESOLVE_ROUTE = 0x0406,
	RVM_OP_QUERY = 0x0407,
	RVM_OP_LISTEN = 0x0408,
	RVM_OP_CONNECT = 0x0409,
	RVM_OP_ACCEPT = 0x040a,
	RVM_OP_REJECT = 0x040b,
	RVM_OP_DISCONNECT = 0x040c,
	RVM_OP_INIT_QP_ATTR = 0x040d,
	RVM_OP_ESTABLISH = 0x040e,
	RVM_OP_NOTIFY = 0x040f,
	RVM_OP_JOIN_MULTICAST = 0x0410,
	RVM_OP_LEAVE_MULTICAST = 0x0411,
	RVM_OP_SET_OPTION = 0x0412,
	RVM_OP_MIGRATE_ID = 0x0413,
};

/* cm_addr: port in host order, address in network order, IPv4 mapped. */
struct rvm_addr {
	uint16_t family; /* 0, 2 (AF_INET), 10 (AF_INET6) */
	uint16_t port;
	uint8_t reserved[4];
	uint8_t addr[16];
};

struct rvm_u32 {
	uint32_t v;
	uint32_t reserved;
};

struct rvm_create_id {
	uint64_t context;
	uint16_t port_space;
	uint8_t qp_type;
	uint8_t reserved[5];
};

struct rvm_resolve_addr {
	struct rvm_addr src, dst;
	uint32_t timeout_ms;
	uint32_t reserved;
};

struct rvm_query_reply {
	struct rvm_addr src_addr, dst_addr;
	uint8_t sgid[16], dgid[16];
	uint64_t node_guid;
	char device_name[64];
	uint32_t device;
	uint16_t pkey;
	uint8_t port_num, num_paths, sgid_index, hop_limit, traffic_class, mtu;
	uint32_t flow_label;
	uint8_t packet_life_time, sl, state, qp_type;
	uint16_t port_space;
	uint8_t reserved[2];
};

struct rvm_conn_param {
	uint32_t qp, qp_num, qkey;
	uint8_t responder_resources, initiator_depth, flow_control, retry_count,
		rnr_retry_count, srq;
	uint8_t reserved[6];
	/* tail: private data */
};

struct rvm_reject {
	uint16_t reason;
	uint8_t reserved[6];
	/* tail: private data */
};

struct rvm_init_qp_attr {
	uint8_t qp_state;
	uint8_t reserved[7];
};

struct rvm_ah {
	uint8_t dgid[16];
	uint32_t flow_label;
	uint16_t dlid;
	uint8_t sgid_index, hop_limit, traffic_class, sl, static_rate, port_num, is_global,
		src_path_bits;
	uint8_t reserved[2];
};

struct rvm_qp_attr {
	uint32_t attr_mask;
	uint32_t reserved;
	uint32_t qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
	uint16_t pkey_index;
	uint8_t qp_state, cur_qp_state, path_mtu, path_mig_state, en_sqd_async_notify,
		sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout,
		retry_cnt, rnr_retry;
	uint8_t reserved2;
	struct rvm_ah ah;
};

struct rvm_set_option {
	uint32_t level, optname;
	uint64_t value;
};

/* The event record as received (little-endian, host order on x86-64). */
struct rvm_event {
	uint64_t context;
	uint32_t id, listen_id, event;
	int32_t status;
	uint32_t qp_num, qkey;
	uint8_t responder_resources, initiator_depth, flow_control, retry_count,
		rnr_retry_count, srq, private_data_len, ud;
	struct rvm_addr src_addr, dst_addr;
	struct rvm_ah ah;
	uint8_t reserved[8];
	uint8_t private_data[RVM_PRIVATE_MAX];
};

static_assert(sizeof(struct rvm_addr) == 24, "cm_addr");
static_assert(sizeof(struct rvm_create_id) == 16, "cm_create_id");
static_assert(sizeof(struct rvm_resolve_addr) == 56, "cm_resolve_addr");
static_assert(sizeof(struct rvm_query_reply) == 176, "cm_query reply");
static_assert(offsetof(struct rvm_query_reply, device) == 152, "cm_query device");
static_assert(offsetof(struct rvm_query_reply, flow_label) == 164, "cm_query flow_label");
static_assert(sizeof(struct rvm_conn_param) == 24, "cm_connect");
static_assert(sizeof(struct rvm_reject) == 8, "cm_reject");
static_assert(sizeof(struct rvm_qp_attr) == 96, "cm_init_qp_attr reply");
static_assert(offsetof(struct rvm_qp_attr, ah) == 64, "cm_init_qp_attr ah");
static_assert(sizeof(struct rvm_set_option) == 16, "cm_set_option");
static_assert(sizeof(struct rvm_event) == RVM_EVENT_SIZE, "cm_event");
static_assert(offsetof(struct rvm_event, src_addr) == 40, "cm_event src_addr");
static_assert(offsetof(struct rvm_event, ah) == 88, "cm_event ah_attr");
static_assert(offsetof(struct rvm_event, private_data) == 128, "cm_event private_data");

#define RVM_EVENT_MAX 15 /* RDMA_CM_EVENT_TIMEWAIT_EXIT */

/* rvm_decode_event checks one record read from an event channel (n bytes)
 * and copies it to ev: 0, or EPROTO for a record the protocol does not
 * allow (wrong size, unknown event, private_data_len past the field, bytes
 * past it not zero, a bad address family, a bool not 0 or 1, a reserved
 * byte set, an ID handle 0). */
int rvm_decode_event(const uint8_t *buf, size_t n, struct rvm_event *ev);
/* rvm_addr_ok: family 0 (all zero), 2 (an IPv4-mapped address) or 10. */
int rvm_addr_ok(const struct rvm_addr *a);

#endif
