/*
 * http_server_req.c: a request as its handler sees it: method, path,
 * headers, decoded query arguments and body; the headers of the reply to
 * come; and its end, once libmicrohttpd and the door thread let go.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "buf.h"
#include "http_server_int.h"
#include "text.h"

const char *
http_req_method(const struct http_req *req)
{
	return req->method;
}

const char *
http_req_path(const struct http_req *req)
{
	return req->path;
}

const char *
http_req_header(const struct http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *
http_req_body(const struct http_req *req, size_t *len)
{
	*len = req->body.len;
	return req->body.data != NULL ? req->body.data : "";
}

void
http_req_set_data(struct http_req *req, void *data)
{
	req->data = data;
}

void *
http_req_data(const struct http_req *req)
{
	return req->data;
}

const char *
http_req_arg(struct http_req *req, const char *name)
{
	const char *raw;
	struct buf b = {0};
	struct arg *a;

	for (a = req->args; a != NULL; a = a->next)
		if (strcmp(a->name, name) == 0)
			return a->value;
	raw =
	    MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
	if (raw == NULL)
		return NULL;
	if (text_url_decode(&b, raw, strlen(raw), 1) < 0 ||
	    (a = calloc(1, sizeof(*a))) == NULL) {
		buf_free(&b);
		return NULL;
	}
	a->name = strdup(name);
	a->value = buf_take(&b, NULL);
	if (a->name == NULL) {
		free(a->value);
		free(a);
		return NULL;
	}
	a->next = req->args;
	req->args = a;
	return a->value;
}

int
http_set_header(struct http_req *req, const char *name, const char *value)
{
	struct hdr *h = calloc(1, sizeof(*h));

	if (h == NULL || (h->name = strdup(name)) == NULL ||
	    (h->value = strdup(value)) == NULL) {
		if (h != NULL)
			free(h->name);
		free(h);
		return -1;
	}
	h->next = req->hdrs;
	req->hdrs = h;
	return 0;
}

void
http_req_free_headers(struct http_req *req)
{
	struct hdr *h, *next;

	for (h = req->hdrs; h != NULL; h = next) {
		next = h->next;
		free(h->name);
		free(h->value);
		free(h);
	}
	req->hdrs = NULL;
}

void
http_req_body_free(struct http_req *req)
{
	atomic_fetch_sub(&req->srv->inflight, (long long)req->counted);
	req->counted = 0;
	buf_free(&req->body);
}

void
http_req_unref(struct http_req *req)
{
	struct arg *a, *next;

	if (atomic_fetch_sub(&req->refs, 1) != 1)
		return;
	http_req_free_headers(req);
	for (a = req->args; a != NULL; a = next) {
		next = a->next;
		free(a->name);
		free(a->value);
		free(a);
	}
	if (req->resp != NULL)
		MHD_destroy_response(req->resp);
	http_shared_release(req->shared);
	http_req_body_free(req);
	free(req);
}
