/*
 * http_server_tls.c: HTTPS for the server: the certificate and key it
 * serves with, and the clients' certificates it checks against a trust
 * list (libmicrohttpd's GnuTLS session).
 */
#include <stddef.h>

#include <gnutls/gnutls.h>
#include <microhttpd.h>

#include "http_server_int.h"

void
http_server_tls_options(const struct http_server_config *cfg,
    struct MHD_OptionItem items[4], unsigned *flags)
{
	int n = 0;

	if (cfg->tls_cert != NULL) {
		*flags |= MHD_USE_TLS;
		items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT,
		    0, (void *)cfg->tls_cert};
		items[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY,
		    0, (void *)cfg->tls_key};
		if (cfg->tls_trust != NULL)
			items[n++] =
			    (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST,
			        0, (void *)cfg->tls_trust};
	}
	items[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

int
http_req_peer_verified(const struct http_req *req)
{
	const union MHD_ConnectionInfo *ci;
	unsigned status = 0;
	int rc, v;

	if (req->srv->cfg.tls_trust == NULL)
		return 0;
	if (req->cs != NULL && req->cs->peer != 0)
		return req->cs->peer - 2;
	ci = MHD_get_connection_info(req->conn,
	    MHD_CONNECTION_INFO_GNUTLS_SESSION);
	if (ci == NULL || ci->tls_session == NULL)
		return 0;
	rc = gnutls_certificate_verify_peers2((gnutls_session_t)ci->tls_session,
	    &status);
	if (rc == GNUTLS_E_NO_CERTIFICATE_FOUND)
		v = 0;
	else
		v = rc == 0 && status == 0 ? 1 : -1;
	if (req->cs != NULL)
		req->cs->peer = (signed char)(v + 2);
	return v;
}
