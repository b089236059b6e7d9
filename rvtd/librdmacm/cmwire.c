/* The cm_event record decoder (fuzzed by rvtd/dropin's
 * TestCMEventDecoderRandom through tests/event_harness.c). */
#include <errno.h>
#include <string.h>
#include "cmwire.h"

static int zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

int rvm_addr_ok(const struct rvm_addr *a)
{
	if (!zero(a->reserved, sizeof(a->reserved)))
		return 0;
	switch (a->family) {
	case 0:
		return a->port == 0 && zero(a->addr, sizeof(a->addr));
	case 2:
		return memcmp(a->addr, v4mapped, sizeof(v4mapped)) == 0;
	case 10:
		return 1;
	}
	return 0;
}

int rvm_decode_event(const uint8_t *buf, size_t n, struct rvm_event *ev)
{
	if (n != RVM_EVENT_SIZE)
		return EPROTO;
	memcpy(ev, buf, sizeof(*ev));
	if (ev->id == 0 || ev->event > RVM_EVENT_MAX)
		return EPROTO;
	if (ev->srq > 1 || ev->ud > 1 || ev->ah.is_global > 1)
		return EPROTO;
	if (!zero(ev->reserved, sizeof(ev->reserved)) || !zero(ev->ah.reserved, sizeof(ev->ah.reserved)))
		return EPROTO;
	if (!rvm_addr_ok(&ev->src_addr) || !rvm_addr_ok(&ev->dst_addr))
		return EPROTO;
	/* private_data_len is a u8: at most 255 of the 256 bytes. */
	if (!zero(ev->private_data + ev->private_data_len, RVM_PRIVATE_MAX - ev->private_data_len))
		return EPROTO;
	return 0;
}
