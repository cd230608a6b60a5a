#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_client.h"
#include "duration.h"
#include "text.h"

/* How long one long poll may park on the server before it is re-issued. */
#define POLL_MAX_MS 30000
/* Extra time the HTTP call gets beyond the server-side wait. */
#define POLL_GRACE_MS 2000

struct coord_client *
coord_client_new(const char *addr, char *err, size_t errlen)
{
	struct coord_client *cc = calloc(1, sizeof(*cc));

	if (cc == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	cc->http = http_client_new(addr, 7700, err, errlen);
	if (cc->http == NULL) {
		free(cc);
		return NULL;
	}
	return cc;
}

void
coord_client_free(struct coord_client *cc)
{
	if (cc == NULL)
		return;
	http_client_free(cc->http);
	free(cc);
}

/* "/v1/kv/" + percent-encoded key + suffix. */
static int
kv_path(struct buf *p, const char *base, const char *key, const char *suffix)
{
	return buf_puts(p, base) < 0 ||
	    text_url_encode(p, key, strlen(key)) < 0 ||
	    buf_puts(p, suffix) < 0 ? -1 : 0;
}

static enum status
nomem(struct coord_client *cc)
{
	snprintf(cc->err, sizeof(cc->err), "out of memory");
	return ST_RESOURCE_EXHAUSTED;
}

static enum status
call(struct coord_client *cc, const char *method, const struct buf *path,
    const void *body, size_t len, const char *ctype, int64_t deadline,
    int idempotent, struct http_resp *resp)
{
	return http_client_do(cc->http, method, path->data, body, len, ctype,
	    deadline, idempotent, resp, cc->err, sizeof(cc->err));
}

static json_t *
parse_reply(struct coord_client *cc, const struct http_resp *resp)
{
	json_error_t jerr;
	json_t *root = json_loadb(resp->body.data != NULL ? resp->body.data :
	    "", resp->body.len, 0, &jerr);

	if (root == NULL)
		snprintf(cc->err, sizeof(cc->err), "malformed reply from "
		    "coordd: %s", jerr.text);
	return root;
}

/* The wait a long poll asks of the server, and the HTTP deadline for it. */
static int64_t
poll_wait(int64_t deadline, int64_t *http_deadline)
{
	int64_t now = duration_now_ms(), wait = POLL_MAX_MS;

	if (deadline != HTTP_NO_DEADLINE && deadline - now < wait)
		wait = deadline - now > 0 ? deadline - now : 0;
	*http_deadline = now + wait + POLL_GRACE_MS;
	return wait;
}

enum status
coord_kv_get(struct coord_client *cc, const char *key, int wait,
    int64_t deadline, struct buf *val, int64_t *rev)
{
	for (;;) {
		struct buf path = {0};
		struct http_resp resp;
		int64_t hd = deadline, w = 0;
		char suffix[64] = "";
		enum status st;

		if (wait) {
			w = poll_wait(deadline, &hd);
			snprintf(suffix, sizeof(suffix), "?wait=%" PRId64 "ms",
			    w);
		}
		if (kv_path(&path, "/v1/kv/", key, suffix) < 0)
			return nomem(cc);
		st = call(cc, "GET", &path, NULL, 0, NULL, hd, 1, &resp);
		buf_free(&path);
		if (st == ST_OK) {
			buf_reset(val);
			if (buf_append(val, resp.body.data != NULL ?
			    resp.body.data : "", resp.body.len) < 0) {
				http_resp_free(&resp);
				return nomem(cc);
			}
			if (rev != NULL)
				*rev = resp.revision;
		}
		http_resp_free(&resp);
		/* A quiet long poll before our own deadline: ask again. */
		if (st == ST_DEADLINE_EXCEEDED && wait &&
		    (deadline == HTTP_NO_DEADLINE ||
		    duration_now_ms() < deadline - 1))
			continue;
		if (st == ST_DEADLINE_EXCEEDED)
			snprintf(cc->err, sizeof(cc->err), "key %s not set "
			    "before the deadline", key);
		return st;
	}
}

static const char *
mode_arg(enum kv_mode mode)
{
	switch (mode) {
	case KV_OVERWRITE: return "?mode=overwrite";
	case KV_UPDATE: return "?mode=update";
	default: return "";
	}
}

enum status
coord_kv_put(struct coord_client *cc, const char *key, const void *val,
    size_t len, enum kv_mode mode, int64_t deadline, int64_t *rev)
{
	struct buf path = {0};
	struct http_resp resp;
	enum status st;

	if (kv_path(&path, "/v1/kv/", key, mode_arg(mode)) < 0)
		return nomem(cc);
	/* An overwrite may be repeated; an insert or update may not. */
	st = call(cc, "PUT", &path, val, len, "application/octet-stream",
	    deadline, mode == KV_OVERWRITE, &resp);
	buf_free(&path);
	if (st == ST_OK && rev != NULL)
		*rev = resp.revision;
	http_resp_free(&resp);
	return st;
}

/* Sends a JSON body and parses the JSON reply into *reply (when OK). */
static enum status
call_json(struct coord_client *cc, const char *method, const struct buf *path,
    json_t *body, int64_t deadline, int idempotent, json_t **reply,
    struct http_resp *errresp)
{
	struct http_resp resp;
	char *s = NULL;
	enum status st;

	if (body != NULL && (s = json_dumps(body, JSON_COMPACT)) == NULL)
		return nomem(cc);
	st = call(cc, method, path, s, s != NULL ? strlen(s) : 0,
	    s != NULL ? "application/json" : NULL, deadline, idempotent, &resp);
	free(s);
	*reply = NULL;
	if (st == ST_OK && (*reply = parse_reply(cc, &resp)) == NULL)
		st = ST_INTERNAL;
	if (errresp != NULL)
		*errresp = resp;
	else
		http_resp_free(&resp);
	return st;
}

enum status
coord_kv_add(struct coord_client *cc, const char *key, int64_t delta,
    int64_t deadline, int64_t *value, int64_t *rev)
{
	struct buf path = {0};
	json_t *body, *reply;
	json_int_t v = 0, r = 0;
	enum status st;

	if (kv_path(&path, "/v1/kv/", key, "?op=add") < 0 ||
	    (body = json_pack("{s:I}", "delta", (json_int_t)delta)) == NULL) {
		buf_free(&path);
		return nomem(cc);
	}
	st = call_json(cc, "POST", &path, body, deadline, 0, &reply, NULL);
	json_decref(body);
	buf_free(&path);
	if (st == ST_OK && json_unpack(reply, "{s:I,s:I}", "value", &v,
	    "revision", &r) < 0) {
		snprintf(cc->err, sizeof(cc->err), "malformed reply to add");
		st = ST_INTERNAL;
	}
	json_decref(reply);
	*value = v;
	if (rev != NULL)
		*rev = r;
	return st;
}

static json_t *
b64(const void *p, size_t n)
{
	struct buf b = {0};
	json_t *s;

	if (text_base64_encode(&b, p, n) < 0)
		return NULL;
	s = json_stringn(b.data != NULL ? b.data : "", b.len);
	buf_free(&b);
	return s;
}

enum status
coord_kv_cas(struct coord_client *cc, const char *key, const void *expect,
    size_t elen, int absent, const void *val, size_t vlen, int64_t deadline,
    int64_t *rev, struct buf *current, int *has_current)
{
	struct buf path = {0};
	struct http_resp resp;
	json_t *body, *reply = NULL;
	json_int_t r = 0;
	enum status st;

	*has_current = 0;
	body = absent ? json_pack("{s:o,s:b}", "value", b64(val, vlen),
	    "absent", 1) : json_pack("{s:o,s:o}", "value", b64(val, vlen),
	    "expected", b64(expect, elen));
	if (body == NULL || kv_path(&path, "/v1/kv/", key, "?op=cas") < 0) {
		json_decref(body);
		buf_free(&path);
		return nomem(cc);
	}
	st = call_json(cc, "POST", &path, body, deadline, 0, &reply, &resp);
	json_decref(body);
	buf_free(&path);
	if (st == ST_OK) {
		json_unpack(reply, "{s:I}", "revision", &r);
		if (rev != NULL)
			*rev = r;
	} else if (st == ST_FAILED_PRECONDITION) {
		json_t *root = json_loadb(resp.body.data != NULL ?
		    resp.body.data : "", resp.body.len, 0, NULL);
		json_t *cur = json_object_get(root, "current");
		if (json_is_string(cur)) {
			buf_reset(current);
			if (text_base64_decode(current, json_string_value(cur),
			    json_string_length(cur)) == 0)
				*has_current = 1;
		}
		json_decref(root);
	}
	json_decref(reply);
	http_resp_free(&resp);
	return st;
}

enum status
coord_kv_delete(struct coord_client *cc, const char *key, int64_t deadline,
    int64_t *deleted, int64_t *rev)
{
	struct buf path = {0};
	json_t *reply;
	json_int_t n = 0, r = 0;
	enum status st;

	if (kv_path(&path, "/v1/kv/", key, "") < 0)
		return nomem(cc);
	st = call_json(cc, "DELETE", &path, NULL, deadline, 1, &reply, NULL);
	buf_free(&path);
	if (st == ST_OK)
		json_unpack(reply, "{s:I,s:I}", "deleted", &n, "revision", &r);
	json_decref(reply);
	*deleted = n;
	if (rev != NULL)
		*rev = r;
	return st;
}

enum status
coord_kv_dir(struct coord_client *cc, const char *prefix, int64_t deadline,
    json_t **reply)
{
	struct buf path = {0};
	enum status st;

	if (kv_path(&path, "/v1/kv/", prefix, "?dir=1") < 0)
		return nomem(cc);
	st = call_json(cc, "GET", &path, NULL, deadline, 1, reply, NULL);
	buf_free(&path);
	return st;
}

enum status
coord_kv_watch(struct coord_client *cc, const char *prefix, int64_t *since,
    int64_t deadline, json_t **events)
{
	struct buf path = {0};
	json_t *reply;
	int64_t hd, w = poll_wait(deadline, &hd);
	char suffix[96];
	enum status st;

	*events = NULL;
	if (*since >= 0)
		snprintf(suffix, sizeof(suffix), "?wait=%" PRId64 "ms&since=%"
		    PRId64, w, *since);
	else
		snprintf(suffix, sizeof(suffix), "?wait=%" PRId64 "ms", w);
	if (kv_path(&path, "/v1/watch/", prefix, suffix) < 0)
		return nomem(cc);
	st = call_json(cc, "GET", &path, NULL, hd, 1, &reply, NULL);
	buf_free(&path);
	if (st == ST_OK) {
		json_int_t r;
		json_t *ev = json_object_get(reply, "events");
		if (json_unpack(reply, "{s:I}", "revision", &r) < 0 ||
		    !json_is_array(ev)) {
			snprintf(cc->err, sizeof(cc->err), "malformed reply to "
			    "watch");
			st = ST_INTERNAL;
		} else {
			*since = r;
			*events = json_incref(ev);
		}
	}
	json_decref(reply);
	return st;
}
