/* rvtd client protocol 1.0 (docs/rvtd-protocol.md): message header, bodies,
 * shared-memory ring layout. Pure declarations and the decoder; no verbs. */
#ifndef RVC_WIRE_H
#define RVC_WIRE_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#define RVC_MAGIC 0x44545652u
#define RVC_MAJOR 1
#define RVC_MINOR 0
#define RVC_MAX_MESSAGE 65536
#define RVC_MAX_FDS 4
#define RVC_HDR_SIZE 24

#define RVC_F_REPLY 1u
#define RVC_F_EVENT 2u

enum rvc_op {
	RVC_OP_HELLO = 0x0001,
	RVC_OP_PROTOCOL_ERROR = 0x0002,
	RVC_OP_LIST_DEVICES = 0x0010,
	RVC_OP_OPEN_DEVICE = 0x0011,
	RVC_OP_CLOSE_DEVICE = 0x0012,
	RVC_OP_QUERY_DEVICE = 0x0013,
	RVC_OP_QUERY_PORT = 0x0014,
	RVC_OP_QUERY_GID = 0x0015,
	RVC_OP_QUERY_PKEY = 0x0016,
	RVC_OP_ALLOC_PD = 0x0020,
	RVC_OP_DEALLOC_PD = 0x0021,
	RVC_OP_SHM_ALLOC = 0x0030,
	RVC_OP_SHM_ATTACH = 0x0031,
	RVC_OP_SHM_FREE = 0x0032,
	RVC_OP_REG_MR = 0x0033,
	RVC_OP_DEREG_MR = 0x0034,
	RVC_OP_ALLOC_MW = 0x0036,
	RVC_OP_DEALLOC_MW = 0x0037,
	RVC_OP_CREATE_COMP_CHANNEL = 0x0040,
	RVC_OP_DESTROY_COMP_CHANNEL = 0x0041,
	RVC_OP_CREATE_CQ = 0x0042,
	RVC_OP_RESIZE_CQ = 0x0043,
	RVC_OP_DESTROY_CQ = 0x0044,
	RVC_OP_CREATE_QP = 0x0050,
	RVC_OP_MODIFY_QP = 0x0051,
	RVC_OP_QUERY_QP = 0x0052,
	RVC_OP_DESTROY_QP = 0x0053,
	RVC_OP_CREATE_SRQ = 0x0058,
	RVC_OP_MODIFY_SRQ = 0x0059,
	RVC_OP_QUERY_SRQ = 0x005a,
	RVC_OP_DESTROY_SRQ = 0x005b,
	RVC_OP_RESIZE_SRQ = 0x005c, /* body: struct rvc_cqe_req (max_wr); reply as create_srq */
	RVC_OP_CREATE_AH = 0x0060,
	RVC_OP_DESTROY_AH = 0x0061,
	RVC_OP_ATTACH_MCAST = 0x0068,
	RVC_OP_DETACH_MCAST = 0x0069,
};

struct rvc_hdr {
	uint32_t length;
	uint16_t opcode;
	uint8_t flags;
	uint8_t nfds;
	uint32_t request_id;
	uint32_t handle;
	uint32_t status;
	uint32_t reserved;
};

struct rvc_hello {
	uint32_t magic;
	uint16_t major, minor;
	uint32_t features;
	uint32_t pid;
	char client[32];
};

struct rvc_hello_reply {
	uint32_t magic;
	uint16_t major, minor;
	uint32_t features;
	uint32_t daemon_pid;
	uint32_t session;
	uint32_t max_message;
	uint32_t page_size;
	uint32_t reserved;
	char daemon[32];
};

struct rvc_protocol_error {
	uint32_t err;
	uint32_t bad_request_id;
	uint16_t bad_opcode;
	uint8_t reserved[6];
	/* tail: text */
};

struct rvc_dev_entry {
	char name[64];
	uint64_t node_guid;
	uint64_t sys_image_guid;
	uint32_t node_type;
	uint32_t transport_type;
};

struct rvc_name { char name[64]; };

struct rvc_handle_reply {
	uint32_t handle;
	uint32_t reserved;
};

struct rvc_query_device_reply {
	char fw_ver[64];
	uint64_t node_guid, sys_image_guid, max_mr_size, page_size_cap, max_msg_size;
	uint32_t vendor_id, vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags,
		max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom,
		max_res_rd_atom, max_qp_init_rd_atom, atomic_cap, max_mw, max_ah, max_srq,
		max_srq_wr, max_srq_sge, max_mcast_grp, max_mcast_qp_attach,
		max_total_mcast_qp_attach, max_inline_data;
	uint16_t max_pkeys;
	uint8_t local_ca_ack_delay;
	uint8_t phys_port_cnt;
};

struct rvc_port_req {
	uint8_t port_num;
	uint8_t reserved[7];
};

struct rvc_query_port_reply {
	uint8_t state, max_mtu, active_mtu, link_layer, active_width, active_speed,
		phys_state, lmc;
	uint32_t gid_tbl_len, port_cap_flags, max_msg_sz;
	uint16_t pkey_tbl_len, lid, sm_lid;
	uint8_t reserved[6];
};

struct rvc_index_req {
	uint8_t port_num;
	uint8_t reserved[3];
	uint32_t index;
};

struct rvc_query_gid_reply {
	uint8_t gid[16];
	uint32_t gid_type; /* enum ibv_gid_type: 2 RoCE v2 */
	uint32_t reserved;
};

struct rvc_query_pkey_reply {
	uint16_t pkey;
	uint8_t reserved[6];
};

struct rvc_size { uint64_t size; };

struct rvc_shm_alloc_reply {
	uint32_t shm;
	uint32_t reserved;
	uint64_t size;
};

#define RVC_MR_SHM 1
#define RVC_MR_VM 2

struct rvc_reg_mr {
	uint32_t kind;
	uint32_t access;
	uint64_t addr;
	uint64_t length;
	uint64_t iova;
	uint32_t shm;
	uint32_t reserved;
	uint64_t shm_offset;
};

struct rvc_reg_mr_reply {
	uint32_t mr, lkey, rkey, reserved;
};

struct rvc_alloc_mw {
	uint8_t type;
	uint8_t reserved[7];
};

struct rvc_alloc_mw_reply {
	uint32_t mw, rkey;
};

struct rvc_create_cq {
	uint32_t cqe, comp_vector, channel, reserved;
	uint64_t cookie;
};

struct rvc_ring_desc {
	uint64_t offset;
	uint32_t entries;
	uint32_t stride;
};

struct rvc_cq_reply {
	uint32_t cq, cqe;
	uint64_t map_size;
	struct rvc_ring_desc ring;
};

struct rvc_cqe_req {
	uint32_t cqe;
	uint32_t reserved;
};

struct rvc_destroy_reply {
	uint32_t comp_events_reported;
	uint32_t async_events_reported;
};

struct rvc_cap {
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data;
};

struct rvc_create_qp {
	uint8_t qp_type;
	uint8_t sq_sig_all;
	uint8_t reserved[2];
	uint32_t send_cq, recv_cq, srq;
	struct rvc_cap cap;
	uint32_t reserved2;
	uint64_t cookie;
};

struct rvc_create_qp_reply {
	uint32_t qp, qp_num;
	struct rvc_cap cap;
	uint32_t reserved;
	uint64_t map_size;
	struct rvc_ring_desc sq, rq;
};

struct rvc_av {
	uint8_t dgid[16];
	uint32_t flow_label;
	uint16_t dlid;
	uint8_t sgid_index, hop_limit, traffic_class, sl, static_rate, port_num;
	uint8_t is_global, src_path_bits;
	uint8_t reserved[2];
};

struct rvc_qp_attr {
	uint32_t qkey, rq_psn, sq_psn, dest_qp_num, qp_access_flags;
	struct rvc_cap cap;
	uint16_t pkey_index;
	uint8_t qp_state, cur_qp_state, path_mtu, path_mig_state, en_sqd_async_notify,
		sq_draining, max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num,
		timeout, retry_cnt, rnr_retry, reserved;
	struct rvc_av ah;
};

struct rvc_modify_qp {
	uint32_t attr_mask;
	uint32_t reserved;
	struct rvc_qp_attr attr;
};

struct rvc_mask_req {
	uint32_t attr_mask;
	uint32_t reserved;
};

struct rvc_query_qp_reply {
	struct rvc_qp_attr attr;
	uint8_t qp_type;
	uint8_t sq_sig_all;
	uint8_t reserved[6];
};

struct rvc_create_srq {
	uint32_t max_wr, max_sge, srq_limit, reserved;
	uint64_t cookie;
};

struct rvc_create_srq_reply {
	uint32_t srq, max_wr, max_sge, reserved;
	uint64_t map_size;
	struct rvc_ring_desc ring;
};

struct rvc_srq_attr {
	uint32_t srq_attr_mask, max_wr, max_sge, srq_limit;
};

struct rvc_mcast {
	uint8_t gid[16];
	uint16_t lid;
	uint8_t reserved[6];
};

struct rvc_comp_event {
	uint64_t cq_cookie;
	uint32_t cq;
	uint32_t reserved;
};

struct rvc_async_event {
	uint64_t element_cookie;
	uint32_t element;
	uint32_t event_type;
};

/* Data-path records (section 7). */
struct rvc_send_wqe {
	uint64_t wr_id;
	uint32_t send_flags;
	uint8_t opcode;
	uint8_t num_sge;
	uint16_t inline_len;
	uint32_t imm_data;
	uint32_t rkey;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t ah;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	uint32_t reserved;
};

struct rvc_recv_wqe {
	uint64_t wr_id;
	uint8_t num_sge;
	uint8_t reserved[7];
};

struct rvc_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

struct rvc_cqe {
	uint64_t wr_id;
	uint8_t status, opcode, sl, dlid_path_bits;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm_data;
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint16_t pkey_index;
	uint16_t slid;
	uint8_t cqe_flags;
	uint8_t reserved[23];
};

static_assert(sizeof(struct rvc_hdr) == 24, "hdr");
static_assert(sizeof(struct rvc_hello) == 48, "hello");
static_assert(sizeof(struct rvc_hello_reply) == 64, "hello reply");
static_assert(sizeof(struct rvc_protocol_error) == 16, "protocol_error");
static_assert(sizeof(struct rvc_dev_entry) == 88, "device entry");
static_assert(sizeof(struct rvc_query_device_reply) == 208, "query_device");
static_assert(sizeof(struct rvc_query_port_reply) == 32, "query_port");
static_assert(sizeof(struct rvc_query_gid_reply) == 24, "query_gid");
static_assert(sizeof(struct rvc_reg_mr) == 48, "reg_mr");
static_assert(sizeof(struct rvc_cq_reply) == 32, "cq reply");
static_assert(sizeof(struct rvc_create_qp) == 48, "create_qp");
static_assert(sizeof(struct rvc_create_qp_reply) == 72, "create_qp reply");
static_assert(sizeof(struct rvc_av) == 32, "av");
static_assert(sizeof(struct rvc_modify_qp) == 96, "modify_qp");
static_assert(offsetof(struct rvc_modify_qp, attr.ah) == 64, "modify_qp ah");
static_assert(sizeof(struct rvc_query_qp_reply) == 96, "query_qp reply");
static_assert(sizeof(struct rvc_send_wqe) == 64, "send wqe");
static_assert(sizeof(struct rvc_recv_wqe) == 16, "recv wqe");
static_assert(sizeof(struct rvc_cqe) == 64, "cqe");
static_assert(sizeof(struct rvc_comp_event) == 16, "comp_event");
static_assert(sizeof(struct rvc_create_srq) == 24, "create_srq");
static_assert(sizeof(struct rvc_create_srq_reply) == 40, "create_srq reply");
static_assert(sizeof(struct rvc_srq_attr) == 16, "srq attr");
static_assert(sizeof(struct rvc_mcast) == 24, "mcast");
static_assert(sizeof(struct rvc_async_event) == 16, "async_event");

/* Ring header (section 7). */
#define RVC_RING_HDR 256
#define RVC_RING_PROD 0
#define RVC_RING_ARM_DONE 4
#define RVC_RING_CONS 64
#define RVC_RING_ARM_REQ 68
#define RVC_RING_FLAGS 128
#define RVC_RING_MAGIC_OFF 192
#define RVC_RING_KIND 196
#define RVC_RING_ENTRIES 200
#define RVC_RING_STRIDE 204
#define RVC_RING_STATUS 208
#define RVC_RING_MAGIC 0x52545652u
#define RVC_NEED_WAKEUP 1u

enum rvc_ring_kind { RVC_RING_SEND = 1, RVC_RING_RECV = 2, RVC_RING_SRQ = 3, RVC_RING_CQ = 4 };

/* A decoded message: the header and where its body lies in the buffer. */
struct rvc_msg {
	struct rvc_hdr hdr;
	const uint8_t *body;
	size_t body_len;
};

/* rvc_decode checks the framing of one received datagram of n bytes that
 * arrived with nfds descriptors (section 2 and 4): 0, or EPROTO. */
int rvc_decode(const uint8_t *buf, size_t n, int nfds, struct rvc_msg *m);

/* rvc_check_reply checks a decoded message as the reply to request (op, id)
 * whose body is fixed bytes plus whole elements of tail bytes (tail 0: no
 * tail) with want_fds descriptors. Returns 0 (m->hdr.status then holds the
 * daemon's errno, 0 on success), or EPROTO. */
int rvc_check_reply(const struct rvc_msg *m, uint16_t op, uint32_t id, size_t fixed,
		    size_t tail, int want_fds);

/* rvc_check_ring checks a ring descriptor from a reply against the size of
 * the memfd it lies in: 0 or EPROTO. */
int rvc_check_ring(const struct rvc_ring_desc *d, uint64_t map_size, uint32_t min_stride);

/* rvc_check_ring_header checks the daemon-written description in a mapped
 * ring header against the reply's descriptor: 0 or EPROTO. */
int rvc_check_ring_header(const uint8_t *hdr, const struct rvc_ring_desc *d, uint32_t kind);

/* rvc_cstr_ok: a char[N] field holds a NUL-terminated string padded with
 * NULs. */
int rvc_cstr_ok(const char *s, size_t n);

#endif
