/* rsockets (SOCK_STREAM over RC) as Linux librdmacm's rsocket.c puts them
 * on the wire; the facts and their sources are in docs/rsockets.md. This
 * header holds the wire constants and the two layouts that cross the
 * wire (the connection data in the CM private data, and the 16-byte SGE
 * and 24-byte iomap entry that one side RDMA-writes into the other's
 * memory), so that rsocket.c and the tests share one definition. */
#ifndef RVM_RSWIRE_H
#define RVM_RSWIRE_H

#include <stdint.h>
#include <string.h>

/* The immediate data of every message: the op in bits 31-29, its
 * argument (a byte count, a credit sequence number, a control code or an
 * iomap index) in bits 28-0. The immediate travels big-endian. */
enum rsw_op {
	RSW_OP_DATA = 0,
	RSW_OP_WRITE = 2, /* riowrite's plain RDMA WRITE: never on the wire as an immediate */
	RSW_OP_SGL = 4,
	RSW_OP_IOMAP_SGL = 6,
	RSW_OP_CTRL = 7,
};
#define RSW_MSG(op, arg) (((uint32_t)(op) << 29) | ((uint32_t)(arg) & 0x1fffffffu))
#define RSW_MSG_OP(m) ((uint32_t)(m) >> 29)
#define RSW_MSG_ARG(m) ((uint32_t)(m) & 0x1fffffffu)

enum rsw_ctrl {
	RSW_CTRL_DISCONNECT = 0,
	RSW_CTRL_KEEPALIVE = 1,
	RSW_CTRL_SHUTDOWN = 2,
};

/* Connection data, 40 bytes at the start of the CM private data (for
 * AF_INET/AF_INET6 IDs): every multi-byte field big-endian. */
enum {
	RSW_CONN_VERSION = 0,	   /* u8, 1 */
	RSW_CONN_FLAGS = 1,	   /* u8 */
	RSW_CONN_CREDITS = 2,	   /* u16: the sender's receive queue depth */
	RSW_CONN_IOMAP_SCALE = 7,  /* u8, after three reserved bytes */
	RSW_CONN_TARGET_SGL = 8,   /* SGE: where the peer writes buffer updates; length = entries */
	RSW_CONN_DATA_BUF = 24,	   /* SGE: the first receive buffer the peer may write */
	RSW_CONN_LEN = 40,
};
#define RSW_FLAG_NET 0x01   /* the sender's host order is big-endian */
#define RSW_FLAG_IOMAP 0x02 /* an iomap table follows the target SGL */

/* An SGE in the wire form of the conn data: addr u64, key u32, length u32. */
enum { RSW_SGE_ADDR = 0, RSW_SGE_KEY = 8, RSW_SGE_LENGTH = 12, RSW_SGE_LEN = 16 };

/* What one side writes into the other's target SGL and iomap table: in
 * the receiver's host order (the writer swaps when RSW_FLAG_NET differs). */
struct rsw_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};
struct rsw_iomap {
	uint64_t offset;
	struct rsw_sge sge;
};
_Static_assert(sizeof(struct rsw_sge) == RSW_SGE_LEN, "rsw_sge is 16 bytes on the wire");
_Static_assert(sizeof(struct rsw_iomap) == 24, "rsw_iomap is 24 bytes on the wire");

#define RSW_TARGET_SGL_ENTRIES 2 /* entries we offer the peer in our target SGL */

/* The iomap size travels as an 8-bit scale: values up to 128 as they are,
 * larger ones as 0x80 | (value >> 8). */
static inline uint8_t rsw_iomap_scale(unsigned v)
{
	return (uint8_t)(v <= 128 ? v : (0x80u | (v >> 8)));
}
static inline unsigned rsw_iomap_unscale(uint8_t s)
{
	return s <= 128 ? s : (unsigned)(s & 0x7fu) << 8;
}

static inline void rsw_put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void rsw_put32(uint8_t *p, uint32_t v)
{
	rsw_put16(p, (uint16_t)(v >> 16));
	rsw_put16(p + 2, (uint16_t)v);
}
static inline void rsw_put64(uint8_t *p, uint64_t v)
{
	rsw_put32(p, (uint32_t)(v >> 32));
	rsw_put32(p + 4, (uint32_t)v);
}
static inline uint16_t rsw_get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint32_t rsw_get32(const uint8_t *p) { return (uint32_t)rsw_get16(p) << 16 | rsw_get16(p + 2); }
static inline uint64_t rsw_get64(const uint8_t *p) { return (uint64_t)rsw_get32(p) << 32 | rsw_get32(p + 4); }

static inline void rsw_put_sge(uint8_t *p, const struct rsw_sge *s)
{
	rsw_put64(p + RSW_SGE_ADDR, s->addr);
	rsw_put32(p + RSW_SGE_KEY, s->key);
	rsw_put32(p + RSW_SGE_LENGTH, s->length);
}
static inline void rsw_get_sge(const uint8_t *p, struct rsw_sge *s)
{
	s->addr = rsw_get64(p + RSW_SGE_ADDR);
	s->key = rsw_get32(p + RSW_SGE_KEY);
	s->length = rsw_get32(p + RSW_SGE_LENGTH);
}

/* The conn data as fields. */
struct rsw_conn {
	uint8_t version, flags, iomap_scale;
	uint16_t credits;
	struct rsw_sge target_sgl, data_buf;
};

static inline void rsw_conn_encode(uint8_t *p, const struct rsw_conn *c)
{
	memset(p, 0, RSW_CONN_LEN);
	p[RSW_CONN_VERSION] = c->version;
	p[RSW_CONN_FLAGS] = c->flags;
	rsw_put16(p + RSW_CONN_CREDITS, c->credits);
	p[RSW_CONN_IOMAP_SCALE] = c->iomap_scale;
	rsw_put_sge(p + RSW_CONN_TARGET_SGL, &c->target_sgl);
	rsw_put_sge(p + RSW_CONN_DATA_BUF, &c->data_buf);
}

/* 0, or -1 for data too short to be conn data. */
static inline int rsw_conn_decode(const uint8_t *p, size_t len, struct rsw_conn *c)
{
	if (!p || len < RSW_CONN_LEN)
		return -1;
	c->version = p[RSW_CONN_VERSION];
	c->flags = p[RSW_CONN_FLAGS];
	c->credits = rsw_get16(p + RSW_CONN_CREDITS);
	c->iomap_scale = p[RSW_CONN_IOMAP_SCALE];
	rsw_get_sge(p + RSW_CONN_TARGET_SGL, &c->target_sgl);
	rsw_get_sge(p + RSW_CONN_DATA_BUF, &c->data_buf);
	return 0;
}

#endif
