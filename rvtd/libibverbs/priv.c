/* The private interface librdmacm.so.1 (rvtd/librdmacm) uses: a session
 * with rvtd through this library's connection code, and the daemon handles
 * behind our verbs objects. Version node RVTD_PRIVATE_1; no other program
 * should bind to it. The prototypes are repeated in
 * rvtd/librdmacm/internal.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "internal.h"

/* rvtd_priv_session_open opens a session asking for protocol minor version
 * minor; NULL with *err set when the daemon cannot be reached (a message on
 * stderr, as ibv_get_device_list prints). *agreed is the minor the daemon
 * agreed to. */
RVC_EXPORT void *rvtd_priv_session_open(const char *who, uint16_t minor, uint16_t *agreed, int *err)
{
	struct rvc_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		*err = ENOMEM;
		return NULL;
	}
	*err = rvc_connect_ex(c, 0, minor, who);
	if (*err) {
		free(c);
		return NULL;
	}
	*agreed = c->minor;
	return c;
}

RVC_EXPORT void rvtd_priv_session_close(void *s)
{
	if (!s)
		return;
	rvc_disconnect(s);
	free(s);
}

/* rvtd_priv_call: one request, one reply (rvc_call). The reply's body must
 * be exactly fixed bytes (tail 0) or fixed plus whole tail elements, at most
 * cap copied to out; *outlen is the length copied. Exactly want_fds
 * descriptors must come with a successful reply; they are stored in fds
 * (the caller owns them). Returns 0 or a positive errno. */
RVC_EXPORT int rvtd_priv_call(void *s, uint16_t op, uint32_t handle, const void *req,
			      size_t reqlen, void *out, size_t fixed, size_t tail, size_t cap,
			      size_t *outlen, int want_fds, int *fds)
{
	struct rvc_reply rep = {0};
	if (want_fds > RVC_MAX_FDS)
		return EINVAL;
	int err = rvc_call(s, op, handle, req, reqlen, NULL, 0, out, fixed, tail, cap, want_fds,
			   &rep);
	if (err)
		return err;
	if (outlen)
		*outlen = rep.len;
	for (int i = 0; i < rep.nfds; i++) {
		if (fds)
			fds[i] = rep.fds[i];
		else
			close(rep.fds[i]);
	}
	return 0;
}

/* The session behind an ibv_context of this library, and the daemon's
 * handles of its objects (0 for an object of another library). */
RVC_EXPORT void *rvtd_priv_context_session(struct ibv_context *ctx)
{
	return ctx ? &to_rctx(ctx)->conn : NULL;
}

RVC_EXPORT uint32_t rvtd_priv_pd_handle(struct ibv_pd *pd) { return pd ? pd->handle : 0; }

RVC_EXPORT uint32_t rvtd_priv_qp_handle(struct ibv_qp *qp) { return qp ? qp->handle : 0; }
