/* rswire.h against Linux: the conn data of a REQ that Debian 12's rstream
 * (rdma-core 44, Linux rsockets on rxe) sent to ours, captured on the
 * interop TAP (scripts/interop-rvtd.sh, REQ private data after the 36-byte
 * rdma_cm header: `tshark -e infiniband.cm.req.ip_cm.private`), decoded
 * field by field, encoded back byte for byte; and the iomap size scale as
 * a table. Needs no daemon. Prints PASS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../rswire.h"

#include "check.h"

/* 01 02 0180 000000 00 | 00005625f1229000 0000037b 00000002 |
 * 00007fa433abe000 000004ef 00080000 (rstream sets SO_RCVBUF to 512 KiB:
 * a 1 MiB buffer, of which the first half is offered). */
static const uint8_t linux_req[RSW_CONN_LEN] = {
	0x01, 0x02, 0x01, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x56, 0x25, 0xf1, 0x22,
	0x90, 0x00, 0x00, 0x00, 0x03, 0x7b, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x7f, 0xa4,
	0x33, 0xab, 0xe0, 0x00, 0x00, 0x00, 0x04, 0xef, 0x00, 0x08, 0x00, 0x00,
};

int main(void)
{
	struct rsw_conn c;
	CHECK(rsw_conn_decode(linux_req, sizeof(linux_req) - 1, &c) == -1);
	CHECK(rsw_conn_decode(NULL, 40, &c) == -1);
	CHECK(rsw_conn_decode(linux_req, sizeof(linux_req), &c) == 0);
	CHECK(c.version == 1 && c.flags == RSW_FLAG_IOMAP && c.credits == 384 && c.iomap_scale == 0);
	CHECK(c.target_sgl.addr == 0x00005625f1229000ull && c.target_sgl.key == 0x37b &&
	      c.target_sgl.length == RSW_TARGET_SGL_ENTRIES);
	CHECK(c.data_buf.addr == 0x00007fa433abe000ull && c.data_buf.key == 0x4ef &&
	      c.data_buf.length == 512 * 1024);
	uint8_t out[RSW_CONN_LEN];
	rsw_conn_encode(out, &c);
	CHECK(memcmp(out, linux_req, sizeof(out)) == 0);

	/* Immediates: the op in the top three bits. */
	CHECK(RSW_MSG(RSW_OP_DATA, 1000) == 1000);
	CHECK(RSW_MSG(RSW_OP_SGL, 0x10180) == 0x80010180u);
	CHECK(RSW_MSG(RSW_OP_CTRL, RSW_CTRL_SHUTDOWN) == 0xe0000002u);
	CHECK(RSW_MSG_OP(0xc0000001u) == RSW_OP_IOMAP_SGL && RSW_MSG_ARG(0xc0000001u) == 1);
	CHECK(RSW_MSG_ARG(RSW_MSG(RSW_OP_DATA, 0x3fffffffu)) == 0x1fffffffu);

	/* The iomap size scale. */
	static const struct {
		unsigned v;
		uint8_t s;
		unsigned back;
	} scale[] = {{0, 0, 0}, {1, 1, 1}, {128, 128, 128}, {129, 0x80, 128}, {256, 0x81, 256},
		     {300, 0x81, 256}, {1000, 0x83, 768}, {0x7fff, 0xff, 0x7f00}};
	for (size_t i = 0; i < sizeof(scale) / sizeof(scale[0]); i++) {
		if (rsw_iomap_scale(scale[i].v) != scale[i].s ||
		    rsw_iomap_unscale(rsw_iomap_scale(scale[i].v)) != scale[i].back) {
			fprintf(stderr, "FAIL: scale %u -> 0x%x -> %u, want 0x%x -> %u\n", scale[i].v,
				rsw_iomap_scale(scale[i].v), rsw_iomap_unscale(rsw_iomap_scale(scale[i].v)),
				scale[i].s, scale[i].back);
			exit(1);
		}
	}
	printf("PASS\n");
	return 0;
}
