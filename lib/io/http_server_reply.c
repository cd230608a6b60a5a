/*
 * http_server_reply.c: replies. Each takes its request over and resumes it
 * if it was parked; a second reply to one request is logged and dropped.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>
#include <microhttpd.h>

#include "http_server_int.h"
#include "log.h"
#include "text.h"

static int
second_reply(struct http_req *req)
{
	if (req->resp == NULL && req->shared == NULL)
		return 0;
	log_info("internal: second reply to %s %s", req->method, req->path);
	return 1;
}

void
http_reply_shared(struct http_req *req, struct http_shared *sh)
{
	if (second_reply(req))
		return;
	atomic_fetch_add(&sh->refs, 1);
	req->shared = sh;
	http_req_free_headers(req);
	http_req_resume(req);
}

/* Sets r (NULL: out of memory) as req's reply, and resumes it. */
static void
set_reply(struct http_req *req, int http_status, const char *ctype,
    struct MHD_Response *r)
{
	struct hdr *h;

	if (r == NULL) {
		/* Out of memory: closing the connection is all that is left. */
		r = MHD_create_response_from_buffer(0, (void *)"",
		    MHD_RESPMEM_PERSISTENT);
		http_status = 500;
	}
	if (ctype != NULL)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	for (h = req->hdrs; h != NULL; h = h->next)
		MHD_add_response_header(r, h->name, h->value);
	http_req_free_headers(req);
	req->resp = r;
	req->code = (unsigned)http_status;
	http_req_resume(req);
}

void
http_reply(struct http_req *req, int http_status, const char *ctype,
    const void *body, size_t len)
{
	if (!second_reply(req))
		set_reply(req, http_status, ctype,
		    MHD_create_response_from_buffer(len, (void *)body,
		        MHD_RESPMEM_MUST_COPY));
}

void
http_reply_blob(struct http_req *req, int http_status, const char *ctype,
    struct blob *b)
{
	if (!second_reply(req))
		set_reply(req, http_status, ctype, http_blob_response(b));
}

void
http_reply_json(struct http_req *req, int http_status, json_t *obj)
{
	char *s = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;

	json_decref(obj);
	if (s == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	http_reply(req, http_status, "application/json", s, strlen(s));
	free(s);
}

static void
vreply_error(struct http_req *req, int http, enum status st, json_t *extra,
    const char *fmt, va_list ap)
{
	char msg[1024];
	json_t *obj;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* Messages may quote user input: keep the JSON valid whatever it is. */
	if (!text_utf8_valid(msg, strlen(msg)))
		snprintf(msg, sizeof(msg), "%s (message not UTF-8)",
		    status_name(st));
	obj = json_pack("{s:{s:s,s:s}}", "error", "code", status_name(st),
	    "message", msg);
	if (obj != NULL && extra != NULL)
		json_object_update(obj, extra);
	json_decref(extra);
	if (obj == NULL) {
		http_reply(req, http, "text/plain", msg, strlen(msg));
		return;
	}
	http_reply_json(req, http, obj);
}

void
http_reply_error(struct http_req *req, enum status st, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreply_error(req, status_http(st), st, NULL, fmt, ap);
	va_end(ap);
}

void
http_reply_error_http(struct http_req *req, int http_status, enum status st,
    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreply_error(req, http_status, st, NULL, fmt, ap);
	va_end(ap);
}

void
http_reply_error_json(struct http_req *req, enum status st, json_t *extra,
    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreply_error(req, status_http(st), st, extra, fmt, ap);
	va_end(ap);
}
