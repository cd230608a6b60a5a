/*
 * dispatch_client.c: calls to dispatchd, on the coordd client's connection
 * handling (token, retries, TLS).
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "coord_call.h"
#include "dispatch_client.h"

struct dispatch_client {
	struct coord_client *cc;
};

struct dispatch_client *
dispatch_client_new(const char *addr, char *err, size_t errlen)
{
	struct dispatch_client *dc = calloc(1, sizeof(*dc));

	if (dc == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if ((dc->cc = coord_client_new(addr, err, errlen)) == NULL) {
		free(dc);
		return NULL;
	}
	return dc;
}

void
dispatch_client_free(struct dispatch_client *dc)
{
	if (dc == NULL)
		return;
	coord_client_free(dc->cc);
	free(dc);
}

void
dispatch_client_set_cancel(struct dispatch_client *dc, int fd)
{
	coord_client_set_cancel(dc->cc, fd);
}

const char *
dispatch_client_error(const struct dispatch_client *dc)
{
	return coord_client_error(dc->cc);
}

const char *
dispatch_client_addr(const struct dispatch_client *dc)
{
	return coord_client_addr(dc->cc);
}

enum status
dispatch_call(struct dispatch_client *dc, const char *method, const char *path,
    const char *body, size_t len, int64_t deadline, int how, json_t **reply,
    json_t **errbody, long *code)
{
	struct buf p = {0};
	struct http_resp resp;
	enum status st;

	*reply = NULL;
	if (errbody != NULL)
		*errbody = NULL;
	if (buf_puts(&p, path) < 0)
		return coord_fail(dc->cc, ST_RESOURCE_EXHAUSTED,
		    "out of memory");
	st = coord_call(dc->cc, method, &p, body, len,
	    body != NULL ? "application/json" : NULL, deadline, how, &resp);
	buf_free(&p);
	if (code != NULL)
		*code = resp.code;
	if (st == ST_OK) {
		json_error_t e;
		*reply =
		    json_loadb(resp.body.data != NULL ? resp.body.data : "",
		        resp.body.len, 0, &e);
		if (*reply == NULL)
			st = coord_fail(dc->cc, ST_INTERNAL,
			    "malformed reply from dispatchd: %s", e.text);
	} else if (errbody != NULL && resp.body.len > 0) {
		*errbody = json_loadb(resp.body.data, resp.body.len, 0, NULL);
	}
	http_resp_free(&resp);
	return st;
}

enum status
dispatch_call_json(struct dispatch_client *dc, const char *method,
    const char *path, json_t *body, int64_t deadline, int how, json_t **reply,
    json_t **errbody, long *code)
{
	char *s = NULL;
	enum status st;

	if (body != NULL && (s = json_dumps(body, JSON_COMPACT)) == NULL) {
		*reply = NULL;
		if (errbody != NULL)
			*errbody = NULL;
		return coord_fail(dc->cc, ST_RESOURCE_EXHAUSTED,
		    "out of memory");
	}
	st = dispatch_call(dc, method, path, s, s != NULL ? strlen(s) : 0,
	    deadline, how, reply, errbody, code);
	free(s);
	return st;
}

int64_t
dispatch_poll_wait(int64_t deadline, int64_t max_ms, int64_t *poll_deadline)
{
	return coord_poll_wait(deadline, max_ms, poll_deadline);
}

int
dispatch_poll_again(enum status st, int64_t deadline)
{
	return coord_poll_again(st, deadline);
}
