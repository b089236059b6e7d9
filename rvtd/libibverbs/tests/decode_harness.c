/* Fuzz harness of the library's decoder (wire.c), built with ASan and
 * UBSan. Reads records from stdin: u32 length, u8 nfds, then length bytes;
 * for each it runs rvc_decode and rvc_check_reply against every opcode
 * layout the library expects, plus the ring checks on the body, and writes
 * one line "decode check" (0 or an errno) per record. rvtd/dropin's
 * FuzzDecoder drives it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "wire.h"

static const struct { uint16_t op; size_t fixed, tail; int fds; } layouts[] = {
	{RVC_OP_HELLO, sizeof(struct rvc_hello_reply), 0, 0},
	{RVC_OP_LIST_DEVICES, 0, sizeof(struct rvc_dev_entry), 0},
	{RVC_OP_OPEN_DEVICE, sizeof(struct rvc_handle_reply), 0, 1},
	{RVC_OP_QUERY_DEVICE, sizeof(struct rvc_query_device_reply), 0, 0},
	{RVC_OP_QUERY_PORT, sizeof(struct rvc_query_port_reply), 0, 0},
	{RVC_OP_QUERY_GID, sizeof(struct rvc_query_gid_reply), 0, 0},
	{RVC_OP_SHM_ALLOC, sizeof(struct rvc_shm_alloc_reply), 0, 1},
	{RVC_OP_REG_MR, sizeof(struct rvc_reg_mr_reply), 0, 0},
	{RVC_OP_CREATE_CQ, sizeof(struct rvc_cq_reply), 0, 1},
	{RVC_OP_CREATE_QP, sizeof(struct rvc_create_qp_reply), 0, 2},
	{RVC_OP_QUERY_QP, sizeof(struct rvc_query_qp_reply), 0, 0},
	{RVC_OP_DESTROY_QP, sizeof(struct rvc_destroy_reply), 0, 0},
	{RVC_OP_CLOSE_DEVICE, 0, 0, 0},
};

int main(void)
{
	static uint8_t buf[RVC_MAX_MESSAGE + 16];
	for (;;) {
		uint32_t len;
		uint8_t nfds;
		if (fread(&len, 4, 1, stdin) != 1 || fread(&nfds, 1, 1, stdin) != 1)
			return 0;
		if (len > RVC_MAX_MESSAGE + 8)
			return 2;
		/* An exact-size heap copy, so ASan sees any read past the end. */
		uint8_t *msg = malloc(len ? len : 1);
		if (len && fread(msg, 1, len, stdin) != len)
			return 2;
		memcpy(buf, msg, len);
		struct rvc_msg m;
		int d = rvc_decode(msg, len, nfds, &m);
		int c = -1;
		if (d == 0) {
			c = 0;
			for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
				int r = rvc_check_reply(&m, layouts[i].op, m.hdr.request_id,
							layouts[i].fixed, layouts[i].tail, layouts[i].fds);
				if (r == 0 && m.hdr.opcode == layouts[i].op)
					c = 1; /* accepted as this opcode's reply */
				if (r == 0 && m.hdr.status == 0 && layouts[i].op == RVC_OP_CREATE_CQ) {
					struct rvc_cq_reply cr;
					memcpy(&cr, m.body, sizeof(cr));
					(void)rvc_check_ring(&cr.ring, cr.map_size, 64);
				}
				if (r == 0 && m.hdr.status == 0 && layouts[i].op == RVC_OP_LIST_DEVICES) {
					for (size_t k = 0; k + sizeof(struct rvc_dev_entry) <= m.body_len;
					     k += sizeof(struct rvc_dev_entry))
						(void)rvc_cstr_ok((const char *)m.body + k, 64);
				}
			}
		}
		free(msg);
		printf("%d %d\n", d, c);
		fflush(stdout);
	}
}
