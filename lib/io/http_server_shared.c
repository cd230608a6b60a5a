/*
 * http_server_shared.c: replies built once and sent to many parked
 * requests, and responses over a blob's bytes, sent without a copy.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "blob.h"
#include "http_server_int.h"

static void
unref_blob(void *cls)
{
	blob_unref(cls);
}

struct MHD_Response *
http_blob_response(struct blob *b)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer_with_free_callback_cls(b->len,
	        b->data, unref_blob, b);

	if (r != NULL)
		blob_ref(b);
	return r;
}

/* A shared reply over the response r (NULL: out of memory). */
static struct http_shared *
shared_of(int http_status, const char *ctype, struct MHD_Response *r)
{
	struct http_shared *sh;

	if (r == NULL)
		return NULL;
	if ((sh = calloc(1, sizeof(*sh))) == NULL) {
		MHD_destroy_response(r);
		return NULL;
	}
	sh->mhd = r;
	if (ctype != NULL)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	sh->code = (unsigned)http_status;
	atomic_init(&sh->refs, 1);
	return sh;
}

struct http_shared *
http_shared_new(int http_status, const char *ctype, const void *body,
    size_t len)
{
	return shared_of(http_status, ctype,
	    MHD_create_response_from_buffer(len, (void *)body,
	        MHD_RESPMEM_MUST_COPY));
}

struct http_shared *
http_shared_json(int http_status, json_t *obj)
{
	char *s = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
	struct http_shared *sh;

	json_decref(obj);
	if (s == NULL)
		return NULL;
	sh = http_shared_new(http_status, "application/json", s, strlen(s));
	free(s);
	return sh;
}

struct http_shared *
http_shared_blob(int http_status, const char *ctype, struct blob *b)
{
	return shared_of(http_status, ctype, http_blob_response(b));
}

int
http_shared_header(struct http_shared *sh, const char *name, const char *value)
{
	return MHD_add_response_header(sh->mhd, name, value) == MHD_YES ? 0 :
	                                                                  -1;
}

void
http_shared_release(struct http_shared *sh)
{
	if (sh != NULL && atomic_fetch_sub(&sh->refs, 1) == 1) {
		MHD_destroy_response(sh->mhd);
		free(sh);
	}
}
