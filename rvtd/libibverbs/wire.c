/* The decoder of rvtd messages: framing checks any received datagram must
 * pass before the library trusts it (fuzzed by rvtd/dropin). */
#include <errno.h>
#include <string.h>
#include "wire.h"

int rvc_cstr_ok(const char *s, size_t n)
{
	const char *nul = memchr(s, 0, n);
	if (!nul)
		return 0;
	for (const char *p = nul; p < s + n; p++)
		if (*p)
			return 0;
	return 1;
}

int rvc_decode(const uint8_t *buf, size_t n, int nfds, struct rvc_msg *m)
{
	if (n < RVC_HDR_SIZE || n > RVC_MAX_MESSAGE)
		return EPROTO;
	memcpy(&m->hdr, buf, sizeof(m->hdr));
	const struct rvc_hdr *h = &m->hdr;
	if (h->length != n || h->reserved != 0)
		return EPROTO;
	if (h->flags & ~(RVC_F_REPLY | RVC_F_EVENT))
		return EPROTO;
	if ((h->flags & RVC_F_REPLY) && (h->flags & RVC_F_EVENT))
		return EPROTO;
	if (!(h->flags & (RVC_F_REPLY | RVC_F_EVENT)))
		return EPROTO; /* the daemon sends no requests */
	if (h->nfds > RVC_MAX_FDS || h->nfds != nfds)
		return EPROTO;
	if (h->status != 0 && (n != RVC_HDR_SIZE || h->nfds != 0))
		return EPROTO;
	m->body = buf + RVC_HDR_SIZE;
	m->body_len = n - RVC_HDR_SIZE;
	return 0;
}

int rvc_check_reply(const struct rvc_msg *m, uint16_t op, uint32_t id, size_t fixed,
		    size_t tail, int want_fds)
{
	const struct rvc_hdr *h = &m->hdr;
	if (!(h->flags & RVC_F_REPLY) || h->opcode != op || h->request_id != id)
		return EPROTO;
	if (h->status != 0)
		return 0;
	if (h->nfds != want_fds)
		return EPROTO;
	if (m->body_len < fixed)
		return EPROTO;
	if (tail == 0 ? m->body_len != fixed : (m->body_len - fixed) % tail != 0)
		return EPROTO;
	return 0;
}

static int pow2(uint32_t x) { return x && !(x & (x - 1)); }

int rvc_check_ring(const struct rvc_ring_desc *d, uint64_t map_size, uint32_t min_stride)
{
	if (!pow2(d->entries) || !pow2(d->stride) || d->stride < min_stride)
		return EPROTO;
	if (d->entries > (1u << 24) || d->stride > (1u << 16))
		return EPROTO;
	if (d->offset % 64 != 0 || d->offset > map_size)
		return EPROTO;
	uint64_t need = RVC_RING_HDR + (uint64_t)d->entries * d->stride;
	if (need > map_size - d->offset)
		return EPROTO;
	return 0;
}

int rvc_check_ring_header(const uint8_t *hdr, const struct rvc_ring_desc *d, uint32_t kind)
{
	uint32_t w[4];
	memcpy(w, hdr + RVC_RING_MAGIC_OFF, sizeof(w));
	if (w[0] != RVC_RING_MAGIC || w[1] != kind || w[2] != d->entries || w[3] != d->stride)
		return EPROTO;
	return 0;
}
