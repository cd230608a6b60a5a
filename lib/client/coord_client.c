/*
 * coord_client.c: the connection to coordd, and the key-value calls.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "coord_call.h"
#include "duration.h"
#include "text.h"
#include "token.h"

/* How long one long poll may park on the server before it is re-issued. */
#define POLL_MAX_MS 30000
/* Extra time the HTTP call gets beyond the server-side wait. */
#define POLL_GRACE_MS 2000

/*
 * The cluster's token, from the file MUSTER_TOKEN_FILE names, goes with
 * every request. 0, or -1 with the reason in err.
 */
static int
add_token(struct coord_client *cc, char *err, size_t errlen)
{
	const char *path = getenv("MUSTER_TOKEN_FILE");
	char token[TOKEN_MAX + 1], why[512];
	struct buf h = {0};
	int loose, rc;

	if (path == NULL || *path == '\0')
		return 0;
	if (token_read_file(path, token, sizeof(token), &loose, why,
	        sizeof(why)) < 0) {
		snprintf(err, errlen, "MUSTER_TOKEN_FILE: %s", why);
		return -1;
	}
	rc = buf_printf(&h, "Authorization: Bearer %s", token) < 0 ||
	        http_client_add_header(cc->http, h.data) < 0 ?
	    -1 :
	    0;
	memset(token, 0, sizeof(token));
	if (h.data != NULL)
		memset(h.data, 0, h.len);
	buf_free(&h);
	if (rc < 0)
		snprintf(err, errlen, "out of memory");
	return rc;
}

struct coord_client *
coord_client_new(const char *addr, char *err, size_t errlen)
{
	struct coord_client *cc = calloc(1, sizeof(*cc));

	if (cc == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	cc->peer = "coordd";
	cc->cancel_fd = -1;
	cc->http = http_client_new(addr, CLI_COORD_PORT, err, errlen);
	if (cc->http == NULL) {
		free(cc);
		return NULL;
	}
	if (add_token(cc, err, errlen) < 0) {
		coord_client_free(cc);
		return NULL;
	}
	return cc;
}

int
coord_client_set_task_secret(struct coord_client *cc, const char *secret)
{
	char h[64 + COORD_SECRET_LEN];

	if (secret == NULL || *secret == '\0')
		return 0;
	snprintf(h, sizeof(h), "X-Muster-Task-Secret: %s", secret);
	return http_client_add_header(cc->http, h);
}

void
coord_client_free(struct coord_client *cc)
{
	if (cc == NULL)
		return;
	http_client_free(cc->http);
	free(cc);
}

void
coord_client_set_cancel(struct coord_client *cc, int fd)
{
	cc->cancel_fd = fd;
	http_client_set_cancel(cc->http, fd);
}

const char *
coord_client_error(const struct coord_client *cc)
{
	return cc->err;
}

const char *
coord_client_headers(const struct coord_client *cc)
{
	return http_client_headers(cc->http);
}

const char *
coord_client_addr(const struct coord_client *cc)
{
	return http_client_addr(cc->http);
}

int
coord_client_https(const struct coord_client *cc)
{
	return http_client_https(cc->http);
}

int
coord_client_sockaddr(struct coord_client *cc, struct sockaddr_storage *ss,
    socklen_t *len)
{
	return http_client_sockaddr(cc->http, ss, len, cc->err,
	    sizeof(cc->err));
}

enum status
coord_fail(struct coord_client *cc, enum status st, const char *fmt, ...)
{
	char msg[sizeof(cc->err)];
	va_list ap;

	/* fmt may print the old error: format before overwriting it. */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	memcpy(cc->err, msg, sizeof(msg));
	return st;
}

int
coord_key_path(struct buf *p, const char *base, const char *key,
    const char *suffix)
{
	return buf_puts(p, base) < 0 ||
	        text_url_encode(p, key, strlen(key)) < 0 ||
	        buf_puts(p, suffix) < 0 ?
	    -1 :
	    0;
}

enum status
coord_call(struct coord_client *cc, const char *method, const struct buf *path,
    const void *body, size_t len, const char *ctype, int64_t deadline, int how,
    struct http_resp *resp)
{
	enum status st = coord_reach_wait(cc, how, deadline);

	if (st != ST_OK) {
		memset(resp, 0, sizeof(*resp));
		resp->revision = -1;
		return st;
	}
	return http_client_poll(cc->http, method, path->data, body, len, ctype,
	    deadline, (how & CALL_POLL) == CALL_POLL ? POLL_GRACE_MS : 0,
	    how & CALL_REPEAT, resp, cc->err, sizeof(cc->err));
}

json_t *
coord_parse_reply(struct coord_client *cc, const struct http_resp *resp)
{
	json_error_t jerr;
	json_t *root =
	    json_loadb(resp->body.data != NULL ? resp->body.data : "",
	        resp->body.len, 0, &jerr);

	if (root == NULL)
		coord_fail(cc, ST_INTERNAL, "malformed reply from coordd: %s",
		    jerr.text);
	return root;
}

int64_t
coord_poll_wait(int64_t deadline, int64_t max_ms, int64_t *poll_deadline)
{
	int64_t now = duration_now_ms(), wait = POLL_MAX_MS;

	if (max_ms > 0 && max_ms < wait)
		wait = max_ms;
	if (deadline != HTTP_NO_DEADLINE && deadline - now < wait)
		wait = deadline - now > 0 ? deadline - now : 0;
	*poll_deadline = now + wait;
	return wait;
}

int
coord_poll_again(enum status st, int64_t deadline)
{
	return (st == ST_DEADLINE_EXCEEDED || st == ST_UNAVAILABLE) &&
	    (deadline == HTTP_NO_DEADLINE || duration_now_ms() < deadline - 1);
}

enum status
coord_call_json(struct coord_client *cc, const char *method,
    const struct buf *path, json_t *body, int64_t deadline, int how,
    json_t **reply, struct http_resp *errresp)
{
	struct http_resp resp;
	char *s = NULL;
	enum status st;

	*reply = NULL;
	if (errresp != NULL)
		memset(errresp, 0, sizeof(*errresp));
	if (body != NULL && (s = json_dumps(body, JSON_COMPACT)) == NULL)
		return coord_fail(cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	st = coord_call(cc, method, path, s, s != NULL ? strlen(s) : 0,
	    s != NULL ? "application/json" : NULL, deadline, how, &resp);
	free(s);
	*reply = NULL;
	if (st == ST_OK && (*reply = coord_parse_reply(cc, &resp)) == NULL)
		st = ST_INTERNAL;
	if (errresp != NULL)
		*errresp = resp;
	else
		http_resp_free(&resp);
	return st;
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
		int answered;

		if (wait) {
			w = coord_poll_wait(deadline, 0, &hd);
			snprintf(suffix, sizeof(suffix), "?wait=%" PRId64 "ms",
			    w);
		}
		if (coord_key_path(&path, "/v1/kv/", key, suffix) < 0)
			return coord_fail(cc, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
		st = coord_call(cc, "GET", &path, NULL, 0, NULL, hd,
		    wait ? CALL_POLL : CALL_REPEAT, &resp);
		buf_free(&path);
		if (st == ST_OK) {
			buf_reset(val);
			if (buf_append(val,
			        resp.body.data != NULL ? resp.body.data : "",
			        resp.body.len) < 0) {
				http_resp_free(&resp);
				return coord_fail(cc, ST_RESOURCE_EXHAUSTED,
				    "out of memory");
			}
			if (rev != NULL)
				*rev = resp.revision;
		}
		answered = resp.code != 0;
		http_resp_free(&resp);
		/* A quiet long poll before our own deadline: ask again. */
		if (wait && coord_poll_again(st, deadline))
			continue;
		/* coordd's word that the key did not come; without a reply
		 * at all, the client's own ("no reply from ..."). */
		if (st == ST_DEADLINE_EXCEEDED && answered)
			coord_fail(cc, ST_INTERNAL,
			    "key %s not set before the deadline", key);
		return st;
	}
}

static const char *
mode_arg(enum coord_put_mode mode)
{
	switch (mode) {
	case COORD_PUT_OVERWRITE: return "?mode=overwrite";
	case COORD_PUT_UPDATE: return "?mode=update";
	default: return "";
	}
}

enum status
coord_kv_put(struct coord_client *cc, const char *key, const void *val,
    size_t len, enum coord_put_mode mode, int64_t deadline, int64_t *rev)
{
	struct buf path = {0};
	struct http_resp resp;
	enum status st;

	if (coord_key_path(&path, "/v1/kv/", key, mode_arg(mode)) < 0)
		return coord_fail(cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	/* An overwrite may be repeated; an insert or update may not. */
	st = coord_call(cc, "PUT", &path, val, len, "application/octet-stream",
	    deadline, mode == COORD_PUT_OVERWRITE ? CALL_REPEAT : CALL_ONCE,
	    &resp);
	buf_free(&path);
	if (st == ST_OK && rev != NULL)
		*rev = resp.revision;
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

	if (coord_key_path(&path, "/v1/kv/", key, "?op=add") < 0 ||
	    (body = json_pack("{s:I}", "delta", (json_int_t)delta)) == NULL) {
		buf_free(&path);
		return coord_fail(cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	}
	st = coord_call_json(cc, "POST", &path, body, deadline, CALL_ONCE,
	    &reply, NULL);
	json_decref(body);
	buf_free(&path);
	if (st == ST_OK &&
	    json_unpack(reply, "{s:I,s:I}", "value", &v, "revision", &r) < 0) {
		coord_fail(cc, ST_INTERNAL, "malformed reply to add");
		st = ST_INTERNAL;
	}
	json_decref(reply);
	*value = v;
	if (rev != NULL)
		*rev = r;
	return st;
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
	body = absent ?
	    json_pack("{s:o,s:b}", "value", text_base64_json(val, vlen),
	        "absent", 1) :
	    json_pack("{s:o,s:o}", "value", text_base64_json(val, vlen),
	        "expected", text_base64_json(expect, elen));
	if (body == NULL ||
	    coord_key_path(&path, "/v1/kv/", key, "?op=cas") < 0) {
		json_decref(body);
		buf_free(&path);
		return coord_fail(cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	}
	st = coord_call_json(cc, "POST", &path, body, deadline, CALL_ONCE,
	    &reply, &resp);
	json_decref(body);
	buf_free(&path);
	if (st == ST_OK) {
		json_unpack(reply, "{s:I}", "revision", &r);
		if (rev != NULL)
			*rev = r;
	} else if (st == ST_FAILED_PRECONDITION) {
		json_t *root =
		    json_loadb(resp.body.data != NULL ? resp.body.data : "",
		        resp.body.len, 0, NULL);
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

	if (coord_key_path(&path, "/v1/kv/", key, "") < 0)
		return coord_fail(cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	st = coord_call_json(cc, "DELETE", &path, NULL, deadline, CALL_REPEAT,
	    &reply, NULL);
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
	json_t *all = NULL, *page = NULL;
	struct buf path = {0}, suffix = {0};
	enum status st = ST_OK;

	*reply = NULL;
	/* coordd answers a page at a time: ask for the next one after the
	 * last key, until it says there are no more. */
	for (;;) {
		json_t *entries, *last;
		const char *after = NULL;
		int more;

		if (all != NULL) {
			entries = json_object_get(all, "entries");
			last = json_array_get(entries,
			    json_array_size(entries) - 1);
			after = json_string_value(json_object_get(last, "key"));
		}
		buf_reset(&path);
		buf_reset(&suffix);
		if (buf_printf(&suffix, "?dir=1") < 0 ||
		    (after != NULL &&
		        (buf_printf(&suffix, "&after=") < 0 ||
		            text_url_encode(&suffix, after, strlen(after)) <
		                0)) ||
		    coord_key_path(&path, "/v1/kv/", prefix, suffix.data) < 0) {
			st = coord_fail(cc, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
			break;
		}
		st = coord_call_json(cc, "GET", &path, NULL, deadline,
		    CALL_REPEAT, &page, NULL);
		if (st != ST_OK)
			break;
		entries = json_object_get(page, "entries");
		if (!json_is_array(entries)) {
			st = coord_fail(cc, ST_INTERNAL,
			    "malformed reply to a listing");
			break;
		}
		more = json_is_true(json_object_get(page, "more")) &&
		    json_array_size(entries) > 0;
		if (all == NULL) {
			all = page;
		} else {
			/* The revision is the last page's. */
			json_array_extend(json_object_get(all, "entries"),
			    entries);
			json_object_set(all, "revision",
			    json_object_get(page, "revision"));
			json_decref(page);
		}
		page = NULL;
		if (!more)
			break;
	}
	json_decref(page);
	buf_free(&path);
	buf_free(&suffix);
	if (st != ST_OK) {
		json_decref(all);
		return st;
	}
	json_object_del(all, "more");
	*reply = all;
	return ST_OK;
}

int
coord_kv_value(const json_t *e, struct buf *val)
{
	json_t *v = json_object_get(e, "value");

	if (!json_is_string(v))
		return 0;
	if (text_base64_decode(val, json_string_value(v),
	        json_string_length(v)) < 0)
		return -1;
	return 1;
}

enum status
coord_kv_watch(struct coord_client *cc, const char *prefix, int64_t *since,
    int64_t deadline, json_t **events)
{
	struct buf path = {0};
	json_t *reply;
	int64_t hd, w = coord_poll_wait(deadline, 0, &hd);
	char suffix[128];
	enum status st;

	*events = NULL;
	if (*since >= 0)
		snprintf(suffix, sizeof(suffix),
		    "?wait=%" PRId64 "ms&since=%" PRId64 "%s%s", w, *since,
		    cc->service[0] != '\0' ? "&service=" : "", cc->service);
	else
		snprintf(suffix, sizeof(suffix), "?wait=%" PRId64 "ms", w);
	if (coord_key_path(&path, "/v1/watch/", prefix, suffix) < 0)
		return coord_fail(cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	st = coord_call_json(cc, "GET", &path, NULL, hd, CALL_POLL, &reply,
	    NULL);
	buf_free(&path);
	if (st == ST_OK) {
		json_int_t r;
		json_t *ev = json_object_get(reply, "events");
		const char *svc =
		    json_string_value(json_object_get(reply, "service"));
		if (svc != NULL)
			snprintf(cc->service, sizeof(cc->service), "%s", svc);
		if (json_unpack(reply, "{s:I}", "revision", &r) < 0 ||
		    !json_is_array(ev)) {
			coord_fail(cc, ST_INTERNAL, "malformed reply to watch");
			st = ST_INTERNAL;
		} else {
			*since = r;
			*events = json_incref(ev);
		}
	}
	json_decref(reply);
	return st;
}

enum status
coord_kv_follow(struct coord_client *cc, const char *prefix, int64_t since,
    long count, int64_t deadline, void (*fn)(json_t *ev, void *arg), void *arg,
    long *seen)
{
	*seen = 0;
	for (;;) {
		json_t *events, *ev;
		size_t i;
		enum status st =
		    coord_kv_watch(cc, prefix, &since, deadline, &events);

		if (st == ST_UNAVAILABLE &&
		    (deadline == HTTP_NO_DEADLINE ||
		        duration_now_ms() < deadline)) {
			usleep(100000);
			continue;
		}
		if (st != ST_OK)
			return st;
		json_array_foreach(events, i, ev) {
			fn(ev, arg);
			if (count > 0 && ++*seen >= count) {
				json_decref(events);
				return ST_OK;
			}
		}
		json_decref(events);
		if (deadline != HTTP_NO_DEADLINE &&
		    duration_now_ms() >= deadline)
			return ST_OK;
	}
}

/* GET path's JSON object into *out. */
static enum status
get_json(struct coord_client *cc, const char *path, int64_t deadline,
    json_t **out)
{
	struct buf p = {0};
	enum status st;

	if (buf_puts(&p, path) < 0)
		return coord_fail(cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	st = coord_call_json(cc, "GET", &p, NULL, deadline, CALL_REPEAT, out,
	    NULL);
	buf_free(&p);
	return st;
}

enum status
coord_status(struct coord_client *cc, int64_t deadline, json_t **status)
{
	return get_json(cc, "/v1/tasks", deadline, status);
}

enum status
coord_replicas(struct coord_client *cc, int64_t deadline, json_t **replicas)
{
	enum status st;

	*replicas = NULL;
	st = get_json(cc, "/v1/replicas", deadline, replicas);
	return st == ST_FAILED_PRECONDITION ? ST_OK : st;
}
