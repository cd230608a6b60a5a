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

void
coord_client_set_cancel(struct coord_client *cc, int fd)
{
	http_client_set_cancel(cc->http, fd);
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

/* How a call may be treated: repeated after a failure, and as a long
 * poll whose reply may arrive a little after its deadline. */
#define CALL_ONCE    0
#define CALL_REPEAT  1
#define CALL_POLL    3

static enum status
call(struct coord_client *cc, const char *method, const struct buf *path,
    const void *body, size_t len, const char *ctype, int64_t deadline,
    int how, struct http_resp *resp)
{
	return http_client_poll(cc->http, method, path->data, body, len, ctype,
	    deadline, how == CALL_POLL ? POLL_GRACE_MS : 0, how & CALL_REPEAT,
	    resp, cc->err, sizeof(cc->err));
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

/*
 * The wait one long poll asks of the server (at most max_ms, never past
 * the caller's deadline), and the deadline of that poll.
 */
static int64_t
poll_wait(int64_t deadline, int64_t max_ms, int64_t *poll_deadline)
{
	int64_t now = duration_now_ms(), wait = POLL_MAX_MS;

	if (max_ms > 0 && max_ms < wait)
		wait = max_ms;
	if (deadline != HTTP_NO_DEADLINE && deadline - now < wait)
		wait = deadline - now > 0 ? deadline - now : 0;
	*poll_deadline = now + wait;
	return wait;
}

/* Whether a failed long poll should be sent again: time is left, and the
 * failure is coordd being away or the poll itself running out. */
static int
poll_again(enum status st, int64_t deadline)
{
	return (st == ST_DEADLINE_EXCEEDED || st == ST_UNAVAILABLE) &&
	    (deadline == HTTP_NO_DEADLINE || duration_now_ms() < deadline - 1);
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
			w = poll_wait(deadline, 0, &hd);
			snprintf(suffix, sizeof(suffix), "?wait=%" PRId64 "ms",
			    w);
		}
		if (kv_path(&path, "/v1/kv/", key, suffix) < 0)
			return nomem(cc);
		st = call(cc, "GET", &path, NULL, 0, NULL, hd, wait ? CALL_POLL :
		    CALL_REPEAT, &resp);
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
		if (wait && poll_again(st, deadline))
			continue;
		if (st == ST_DEADLINE_EXCEEDED)
			snprintf(cc->err, sizeof(cc->err), "key %s not set "
			    "before the deadline", key);
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

	if (kv_path(&path, "/v1/kv/", key, mode_arg(mode)) < 0)
		return nomem(cc);
	/* An overwrite may be repeated; an insert or update may not. */
	st = call(cc, "PUT", &path, val, len, "application/octet-stream",
	    deadline, mode == COORD_PUT_OVERWRITE ? CALL_REPEAT : CALL_ONCE, &resp);
	buf_free(&path);
	if (st == ST_OK && rev != NULL)
		*rev = resp.revision;
	http_resp_free(&resp);
	return st;
}

/* Sends a JSON body and parses the JSON reply into *reply (when OK). */
static enum status
call_json(struct coord_client *cc, const char *method, const struct buf *path,
    json_t *body, int64_t deadline, int how, json_t **reply,
    struct http_resp *errresp)
{
	struct http_resp resp;
	char *s = NULL;
	enum status st;

	*reply = NULL;
	if (errresp != NULL)
		memset(errresp, 0, sizeof(*errresp));
	if (body != NULL && (s = json_dumps(body, JSON_COMPACT)) == NULL)
		return nomem(cc);
	st = call(cc, method, path, s, s != NULL ? strlen(s) : 0,
	    s != NULL ? "application/json" : NULL, deadline, how, &resp);
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
	st = call_json(cc, "POST", &path, body, deadline, CALL_ONCE, &reply,
	    NULL);
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
	body = absent ? json_pack("{s:o,s:b}", "value", text_base64_json(val, vlen),
	    "absent", 1) : json_pack("{s:o,s:o}", "value", text_base64_json(val, vlen),
	    "expected", text_base64_json(expect, elen));
	if (body == NULL || kv_path(&path, "/v1/kv/", key, "?op=cas") < 0) {
		json_decref(body);
		buf_free(&path);
		return nomem(cc);
	}
	st = call_json(cc, "POST", &path, body, deadline, CALL_ONCE, &reply,
	    &resp);
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
	st = call_json(cc, "DELETE", &path, NULL, deadline, CALL_REPEAT, &reply,
	    NULL);
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
	st = call_json(cc, "GET", &path, NULL, deadline, CALL_REPEAT, reply,
	    NULL);
	buf_free(&path);
	return st;
}

enum status
coord_kv_watch(struct coord_client *cc, const char *prefix, int64_t *since,
    int64_t deadline, json_t **events)
{
	struct buf path = {0};
	json_t *reply;
	int64_t hd, w = poll_wait(deadline, 0, &hd);
	char suffix[128];
	enum status st;

	*events = NULL;
	if (*since >= 0)
		snprintf(suffix, sizeof(suffix), "?wait=%" PRId64 "ms&since=%"
		    PRId64 "%s%s", w, *since, cc->service[0] != '\0' ?
		    "&service=" : "", cc->service);
	else
		snprintf(suffix, sizeof(suffix), "?wait=%" PRId64 "ms", w);
	if (kv_path(&path, "/v1/watch/", prefix, suffix) < 0)
		return nomem(cc);
	st = call_json(cc, "GET", &path, NULL, hd, CALL_POLL, &reply, NULL);
	buf_free(&path);
	if (st == ST_OK) {
		json_int_t r;
		json_t *ev = json_object_get(reply, "events");
		const char *svc = json_string_value(json_object_get(reply,
		    "service"));
		if (svc != NULL)
			snprintf(cc->service, sizeof(cc->service), "%s", svc);
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

int
coord_agent_init(struct coord_agent *a, const char *task, uint64_t incarnation)
{
	struct task_name tn;

	memset(a, 0, sizeof(*a));
	if (task_parse(task, &tn) < 0)
		return -1;
	task_format(&tn, a->task, sizeof(a->task));
	snprintf(a->path, sizeof(a->path), "/v1/tasks/%s/%ld", tn.job,
	    tn.index);
	a->incarnation = incarnation;
	return 0;
}

/* "/v1/tasks/J/I/verb?incarnation=HEX" plus extra query. */
static int
task_path(struct buf *p, const struct coord_agent *a, const char *verb,
    const char *extra)
{
	char inc[17];

	return buf_printf(p, "%s/%s?incarnation=%s%s", a->path, verb,
	    task_format_incarnation(a->incarnation, inc), extra);
}

static enum status
task_call(struct coord_client *cc, const struct coord_agent *a,
    const char *verb, const char *extra, json_t *body, int64_t deadline,
    int how, json_t **reply, long *code)
{
	struct buf path = {0};
	struct http_resp resp;
	char *s = NULL;
	enum status st;

	if (task_path(&path, a, verb, extra) < 0 || (body != NULL &&
	    (s = json_dumps(body, JSON_COMPACT)) == NULL)) {
		buf_free(&path);
		return nomem(cc);
	}
	/* Task calls are safe to repeat: coordd answers a repeat alike. */
	st = call(cc, "POST", &path, s, s != NULL ? strlen(s) : 0,
	    s != NULL ? "application/json" : NULL, deadline, how, &resp);
	free(s);
	buf_free(&path);
	if (code != NULL)
		*code = resp.code;
	if (reply != NULL) {
		*reply = NULL;
		if (st == ST_OK && (*reply = parse_reply(cc, &resp)) == NULL)
			st = ST_INTERNAL;
		else if (st != ST_OK)
			*reply = json_loadb(resp.body.data != NULL ?
			    resp.body.data : "", resp.body.len, 0, NULL);
	}
	http_resp_free(&resp);
	return st;
}

enum status
coord_register(struct coord_client *cc, struct coord_agent *a,
    int64_t deadline)
{
	json_t *reply;
	json_int_t to = 0, iv = 0, epoch = 0;
	const char *si = "";
	enum status st = task_call(cc, a, "register", "", NULL, deadline,
	    CALL_REPEAT, &reply, NULL);

	if (st == ST_OK && json_unpack(reply, "{s:I,s:I,s:s,s?I}",
	    "heartbeat_timeout_ms", &to, "heartbeat_interval_ms", &iv,
	    "service_incarnation", &si, "epoch", &epoch) < 0) {
		snprintf(cc->err, sizeof(cc->err), "malformed reply to "
		    "register");
		st = ST_INTERNAL;
	}
	a->wait_epoch = -1;
	if (st != ST_OK && reply != NULL) {
		const char *reason = json_string_value(json_object_get(reply,
		    "reason"));
		json_t *e = json_object_get(reply, "epoch");
		if (reason != NULL && json_is_integer(e) &&
		    (strcmp(reason, "run_over") == 0 ||
		    strcmp(reason, "failed_in_epoch") == 0))
			a->wait_epoch = (long)json_integer_value(e);
	}
	if (st == ST_OK) {
		a->heartbeat_timeout_ms = to;
		a->heartbeat_interval_ms = iv > 0 ? iv : 1;
		a->epoch = (long)epoch;
		snprintf(a->service_incarnation, sizeof(a->service_incarnation),
		    "%s", si);
	}
	json_decref(reply);
	return st;
}

enum status
coord_heartbeat(struct coord_client *cc, const struct coord_agent *a,
    int64_t deadline, int *not_registered, char *svc)
{
	json_t *reply;
	enum status st = task_call(cc, a, "heartbeat", "", NULL, deadline,
	    CALL_REPEAT, &reply, NULL);
	const char *reason = json_string_value(json_object_get(reply,
	    "reason"));

	*not_registered = st == ST_INVALID_ARGUMENT && reason != NULL &&
	    strcmp(reason, "not_registered") == 0;
	if (*not_registered)
		snprintf(svc, 17, "%s", json_string_value(json_object_get(reply,
		    "service_incarnation")) != NULL ? json_string_value(
		    json_object_get(reply, "service_incarnation")) : "");
	json_decref(reply);
	return st;
}

enum status
coord_report_error(struct coord_client *cc, const struct coord_agent *a,
    enum status code, const char *message, int64_t deadline)
{
	json_t *body = json_pack("{s:s,s:s}", "code", status_name(code),
	    "message", message);
	enum status st;

	if (body == NULL)
		return nomem(cc);
	st = task_call(cc, a, "error", "", body, deadline, CALL_REPEAT, NULL,
	    NULL);
	json_decref(body);
	return st;
}

/*
 * Repeats a long-polled task call while coordd answers 202 (still
 * waiting), reporting the progress it sends.
 */
static enum status
long_task_call(struct coord_client *cc, const struct coord_agent *a,
    const char *verb, const char *query, int64_t deadline, int64_t poll_ms,
    void (*progress)(void *, long, long), void *arg,
    const char *done_key, const char *total_key)
{
	for (;;) {
		int64_t hd, w = poll_wait(deadline, poll_ms, &hd);
		char extra[64];
		json_t *reply;
		long code = 0;
		enum status st;

		snprintf(extra, sizeof(extra), "&wait=%" PRId64 "ms%s", w, query);
		st = task_call(cc, a, verb, extra, NULL, hd, CALL_POLL, &reply,
		    &code);
		if (st == ST_UNAVAILABLE && poll_again(st, deadline)) {
			json_decref(reply);
			continue;
		}
		if (st == ST_OK && code == 202) {
			json_int_t done = 0, total = 0;
			json_unpack(reply, "{s?I,s?I}", done_key, &done,
			    total_key, &total);
			json_decref(reply);
			if (progress != NULL)
				progress(arg, (long)done, (long)total);
			if (deadline != HTTP_NO_DEADLINE &&
			    duration_now_ms() >= deadline) {
				snprintf(cc->err, sizeof(cc->err), "%ld of %ld "
				    "tasks after the deadline", (long)done,
				    (long)total);
				return ST_DEADLINE_EXCEEDED;
			}
			continue;
		}
		json_decref(reply);
		return st;
	}
}

enum status
coord_wait_all(struct coord_client *cc, const struct coord_agent *a,
    int64_t deadline, void (*progress)(void *arg, long done, long total),
    void *arg)
{
	return long_task_call(cc, a, "wait-all", "", deadline, 0, progress, arg,
	    "connected", "total");
}

enum status
coord_shutdown_task(struct coord_client *cc, const struct coord_agent *a,
    int barrier, int64_t deadline)
{
	return long_task_call(cc, a, "shutdown", barrier ? "" : "&barrier=0",
	    deadline, 0, NULL, NULL, "arrived", "total");
}

enum status
coord_wait_epoch(struct coord_client *cc, long after, int64_t deadline,
    long *epoch)
{
	*epoch = -1;
	for (;;) {
		struct buf path = {0};
		struct http_resp resp;
		int64_t hd, w = poll_wait(deadline, 0, &hd);
		json_t *reply;
		json_int_t e = -1;
		enum status st;

		if (buf_printf(&path, "/v1/epoch?after=%ld&wait=%" PRId64 "ms",
		    after, w) < 0)
			return nomem(cc);
		st = call(cc, "GET", &path, NULL, 0, NULL, hd, CALL_POLL, &resp);
		buf_free(&path);
		if (st == ST_OK) {
			reply = parse_reply(cc, &resp);
			json_unpack(reply, "{s:I}", "epoch", &e);
			json_decref(reply);
			*epoch = (long)e;
			if (resp.code == 200 && e > after) {
				http_resp_free(&resp);
				return ST_OK;
			}
		}
		http_resp_free(&resp);
		if (st != ST_OK && !poll_again(st, deadline))
			return st;
		if (deadline != HTTP_NO_DEADLINE &&
		    duration_now_ms() >= deadline) {
			snprintf(cc->err, sizeof(cc->err), "the cluster is still "
			    "in epoch %ld: not every task has left", *epoch);
			return ST_DEADLINE_EXCEEDED;
		}
	}
}

enum status
coord_poll_errors(struct coord_client *cc, int64_t deadline, json_t **errors)
{
	struct buf path = {0};
	json_t *reply;
	int64_t hd, w = poll_wait(deadline, 0, &hd);
	enum status st;

	*errors = NULL;
	if (buf_printf(&path, "/v1/errors?wait=%" PRId64 "ms", w) < 0)
		return nomem(cc);
	st = call_json(cc, "GET", &path, NULL, hd, CALL_POLL, &reply, NULL);
	buf_free(&path);
	if (st == ST_OK) {
		json_t *e = json_object_get(reply, "errors");
		if (!json_is_array(e)) {
			snprintf(cc->err, sizeof(cc->err), "malformed reply to "
			    "error poll");
			st = ST_INTERNAL;
		} else {
			*errors = json_incref(e);
		}
	}
	json_decref(reply);
	return st;
}

enum status
coord_barrier_wait(struct coord_client *cc, const struct coord_agent *a,
    const char *id, int64_t timeout_ms, json_t *tasks, int64_t deadline,
    int64_t poll_ms, void (*progress)(void *arg, long done, long total),
    void *arg)
{
	char inc[17];
	json_t *body = json_pack("{s:s,s:I}", "task", a->task, "timeout_ms",
	    (json_int_t)timeout_ms);
	enum status st;

	if (body == NULL)
		return nomem(cc);
	if (a->incarnation != 0)
		json_object_set_new(body, "incarnation", json_string(
		    task_format_incarnation(a->incarnation, inc)));
	if (tasks != NULL)
		json_object_set(body, "tasks", tasks);
	for (;;) {
		struct buf path = {0};
		struct http_resp resp;
		int64_t hd, w = poll_wait(deadline, poll_ms, &hd);
		char *s;

		if ((s = json_dumps(body, JSON_COMPACT)) == NULL ||
		    kv_path(&path, "/v1/barriers/", id, "") < 0 ||
		    buf_printf(&path, "?wait=%" PRId64 "ms", w) < 0) {
			free(s);
			buf_free(&path);
			json_decref(body);
			return nomem(cc);
		}
		st = call(cc, "POST", &path, s, strlen(s), "application/json",
		    hd, CALL_POLL, &resp);
		free(s);
		buf_free(&path);
		if (st == ST_UNAVAILABLE && poll_again(st, deadline)) {
			http_resp_free(&resp);
			continue;
		}
		if (st == ST_OK && resp.code == 202) {
			json_t *r = parse_reply(cc, &resp);
			json_int_t done = 0, total = 0;
			json_unpack(r, "{s?I,s?I}", "arrived", &done, "total",
			    &total);
			json_decref(r);
			http_resp_free(&resp);
			if (progress != NULL)
				progress(arg, (long)done, (long)total);
			if (deadline != HTTP_NO_DEADLINE &&
			    duration_now_ms() >= deadline) {
				snprintf(cc->err, sizeof(cc->err), "barrier %s: "
				    "%ld of %ld tasks by the deadline", id,
				    (long)done, (long)total);
				st = ST_DEADLINE_EXCEEDED;
				break;
			}
			continue;
		}
		http_resp_free(&resp);
		break;
	}
	json_decref(body);
	return st;
}

enum status
coord_barrier_cancel(struct coord_client *cc, const struct coord_agent *a,
    const char *id, int64_t deadline)
{
	struct buf path = {0};
	json_t *reply;
	enum status st;

	if (kv_path(&path, "/v1/barriers/", id, "?task=") < 0 ||
	    text_url_encode(&path, a->task, strlen(a->task)) < 0) {
		buf_free(&path);
		return nomem(cc);
	}
	st = call_json(cc, "DELETE", &path, NULL, deadline, CALL_REPEAT, &reply,
	    NULL);
	buf_free(&path);
	json_decref(reply);
	return st;
}

enum status
coord_status(struct coord_client *cc, int64_t deadline, json_t **status)
{
	struct buf path = {0};
	enum status st;

	if (buf_puts(&path, "/v1/tasks") < 0)
		return nomem(cc);
	st = call_json(cc, "GET", &path, NULL, deadline, CALL_REPEAT, status,
	    NULL);
	buf_free(&path);
	return st;
}
