/*
 * agent.c: the calls a task's agent makes to coordd.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "coord_call.h"
#include "duration.h"
#include "text.h"
#include "token.h"

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
	/* Its requests prove with this that they are its own; without a
	 * random source it goes without (coordd may then refuse it). */
	if (token_random(a->secret, sizeof(a->secret)) < 0)
		a->secret[0] = '\0';
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

	if (task_path(&path, a, verb, extra) < 0 ||
	    (body != NULL && (s = json_dumps(body, JSON_COMPACT)) == NULL)) {
		buf_free(&path);
		return coord_fail(cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	}
	/* Task calls are safe to repeat: coordd answers a repeat alike. */
	st = coord_call(cc, "POST", &path, s, s != NULL ? strlen(s) : 0,
	    s != NULL ? "application/json" : NULL, deadline, how, &resp);
	free(s);
	buf_free(&path);
	if (code != NULL)
		*code = resp.code;
	if (reply != NULL) {
		*reply = NULL;
		if (st == ST_OK &&
		    (*reply = coord_parse_reply(cc, &resp)) == NULL)
			st = ST_INTERNAL;
		else if (st != ST_OK)
			*reply =
			    json_loadb(resp.body.data != NULL ? resp.body.data :
			                                        "",
			        resp.body.len, 0, NULL);
	}
	http_resp_free(&resp);
	return st;
}

enum status
coord_register(struct coord_client *cc, struct coord_agent *a, int64_t deadline)
{
	json_t *reply;
	json_int_t to = 0, iv = 0, epoch = 0, rank = -1, world = 0;
	const char *si = "";
	enum status st = task_call(cc, a, "register", "", NULL, deadline,
	    CALL_REPEAT, &reply, NULL);

	if (st == ST_OK &&
	    json_unpack(reply, "{s:I,s:I,s:s,s?I,s?I,s?I}",
	        "heartbeat_timeout_ms", &to, "heartbeat_interval_ms", &iv,
	        "service_incarnation", &si, "epoch", &epoch, "rank", &rank,
	        "tasks", &world) < 0) {
		coord_fail(cc, ST_INTERNAL, "malformed reply to register");
		st = ST_INTERNAL;
	}
	a->wait_epoch = -1;
	if (st != ST_OK && reply != NULL) {
		const char *reason =
		    json_string_value(json_object_get(reply, "reason"));
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
		a->rank = (long)rank;
		a->world = (long)world;
		snprintf(a->service_incarnation, sizeof(a->service_incarnation),
		    "%s", si);
	}
	json_decref(reply);
	return st;
}

enum status
coord_heartbeat(struct coord_client *cc, const struct coord_agent *a,
    int64_t deadline, int64_t patience_ms, int *not_registered, char *svc)
{
	json_t *reply = NULL;
	struct buf path = {0};
	struct http_resp resp;
	char inc[17];
	enum status st;

	if (buf_printf(&path, "%s/heartbeat?incarnation=%s", a->path,
	        task_format_incarnation(a->incarnation, inc)) < 0)
		return coord_fail(cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	/* Connecting is retried until deadline; an answer is waited for
	 * patience_ms longer. */
	st = http_client_poll(cc->http, "POST", path.data, NULL, 0, NULL,
	    deadline, patience_ms, 1, &resp, cc->err, sizeof(cc->err));
	buf_free(&path);
	if (st != ST_OK && resp.code != 0)
		reply = json_loadb(resp.body.data != NULL ? resp.body.data : "",
		    resp.body.len, 0, NULL);
	http_resp_free(&resp);
	const char *reason =
	    json_string_value(json_object_get(reply, "reason"));

	*not_registered = st == ST_INVALID_ARGUMENT && reason != NULL &&
	    strcmp(reason, "not_registered") == 0;
	if (*not_registered)
		snprintf(svc, 17, "%s",
		    json_string_value(
		        json_object_get(reply, "service_incarnation")) != NULL ?
		        json_string_value(
		            json_object_get(reply, "service_incarnation")) :
		        "");
	json_decref(reply);
	return st;
}

size_t
coord_error_request(const struct coord_client *cc, const struct coord_agent *a,
    enum status code, const char *message, char *buf, size_t size)
{
	json_t *body = json_pack("{s:s,s:s}", "code", status_name(code),
	    "message", message);
	char *s = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
	char inc[17];
	int n = -1;

	if (s != NULL)
		n = snprintf(buf, size,
		    "POST %s/error?incarnation=%s HTTP/1.1\r\nHost: %s\r\n"
		    "%sContent-Type: application/json\r\n"
		    "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
		    a->path, task_format_incarnation(a->incarnation, inc),
		    coord_client_addr(cc), coord_client_headers(cc), strlen(s),
		    s);
	free(s);
	json_decref(body);
	return n > 0 && (size_t)n < size ? (size_t)n : 0;
}

enum status
coord_report_error(struct coord_client *cc, const struct coord_agent *a,
    enum status code, const char *message, int64_t deadline)
{
	json_t *body = json_pack("{s:s,s:s}", "code", status_name(code),
	    "message", message);
	enum status st;

	if (body == NULL)
		return coord_fail(cc, ST_RESOURCE_EXHAUSTED, "out of memory");
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
    void (*progress)(void *, long, long), void *arg, const char *done_key,
    const char *total_key)
{
	for (;;) {
		int64_t hd, w = coord_poll_wait(deadline, poll_ms, &hd);
		char extra[64];
		json_t *reply;
		long code = 0;
		enum status st;

		snprintf(extra, sizeof(extra), "&wait=%" PRId64 "ms%s", w,
		    query);
		st = task_call(cc, a, verb, extra, NULL, hd, CALL_POLL, &reply,
		    &code);
		if (st == ST_UNAVAILABLE && coord_poll_again(st, deadline)) {
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
				coord_fail(cc, ST_INTERNAL,
				    "%ld of %ld tasks after the deadline",
				    (long)done, (long)total);
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
    long *epoch, json_t **finished)
{
	*epoch = -1;
	if (finished != NULL)
		*finished = NULL;
	for (;;) {
		struct buf path = {0};
		struct http_resp resp;
		int64_t hd, w = coord_poll_wait(deadline, 0, &hd);
		json_t *reply;
		json_int_t e = -1;
		enum status st;

		if (buf_printf(&path, "/v1/epoch?after=%ld&wait=%" PRId64 "ms",
		        after, w) < 0)
			return coord_fail(cc, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
		st = coord_call(cc, "GET", &path, NULL, 0, NULL, hd, CALL_POLL,
		    &resp);
		buf_free(&path);
		if (st == ST_OK) {
			reply = coord_parse_reply(cc, &resp);
			json_unpack(reply, "{s:I}", "epoch", &e);
			*epoch = (long)e;
			if (resp.code == 200 && e > after) {
				json_t *done =
				    json_object_get(reply, "finished");
				if (finished != NULL)
					*finished = json_is_array(done) ?
					    json_incref(done) :
					    json_array();
				json_decref(reply);
				http_resp_free(&resp);
				return ST_OK;
			}
			json_decref(reply);
		}
		http_resp_free(&resp);
		if (st != ST_OK && !coord_poll_again(st, deadline))
			return st;
		if (deadline != HTTP_NO_DEADLINE &&
		    duration_now_ms() >= deadline) {
			coord_fail(cc, ST_INTERNAL,
			    "the cluster is still "
			    "in epoch %ld: not every task has left",
			    *epoch);
			return ST_DEADLINE_EXCEEDED;
		}
	}
}

/* GET /v1/errors with wait (0: answered at once); *errors the array. */
static enum status
errors_call(struct coord_client *cc, int64_t wait, int64_t deadline, int how,
    json_t **errors)
{
	struct buf path = {0};
	json_t *reply;
	enum status st;

	*errors = NULL;
	if (buf_printf(&path, "/v1/errors?wait=%" PRId64 "ms", wait) < 0)
		return coord_fail(cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	st = coord_call_json(cc, "GET", &path, NULL, deadline, how, &reply,
	    NULL);
	buf_free(&path);
	if (st == ST_OK) {
		json_t *e = json_object_get(reply, "errors");
		if (!json_is_array(e)) {
			coord_fail(cc, ST_INTERNAL,
			    "malformed reply to error poll");
			st = ST_INTERNAL;
		} else {
			*errors = json_incref(e);
		}
	}
	json_decref(reply);
	return st;
}

enum status
coord_poll_errors(struct coord_client *cc, int64_t deadline, json_t **errors)
{
	int64_t hd, w = coord_poll_wait(deadline, 0, &hd);

	return errors_call(cc, w, hd, CALL_POLL, errors);
}

enum status
coord_errors_now(struct coord_client *cc, int64_t deadline, json_t **errors)
{
	return errors_call(cc, 0, deadline, CALL_REPEAT, errors);
}

static const char *
field(const json_t *e, const char *name, const char *def)
{
	const char *v = json_string_value(json_object_get(e, name));

	return v != NULL ? v : def;
}

void
coord_task_error(const json_t *e, struct coord_task_error *out)
{
	out->task = field(e, "task", "?");
	out->code = field(e, "code", "?");
	out->message = field(e, "message", "");
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
		return coord_fail(cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	if (a->incarnation != 0)
		json_object_set_new(body, "incarnation",
		    json_string(task_format_incarnation(a->incarnation, inc)));
	if (tasks != NULL)
		json_object_set(body, "tasks", tasks);
	for (;;) {
		struct buf path = {0};
		struct http_resp resp;
		int64_t hd, w = coord_poll_wait(deadline, poll_ms, &hd);
		char *s;

		if ((s = json_dumps(body, JSON_COMPACT)) == NULL ||
		    coord_key_path(&path, "/v1/barriers/", id, "") < 0 ||
		    buf_printf(&path, "?wait=%" PRId64 "ms", w) < 0) {
			free(s);
			buf_free(&path);
			json_decref(body);
			return coord_fail(cc, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
		}
		st = coord_call(cc, "POST", &path, s, strlen(s),
		    "application/json", hd, CALL_POLL, &resp);
		free(s);
		buf_free(&path);
		if (st == ST_UNAVAILABLE && coord_poll_again(st, deadline)) {
			http_resp_free(&resp);
			continue;
		}
		if (st == ST_OK && resp.code == 202) {
			json_t *r = coord_parse_reply(cc, &resp);
			json_int_t done = 0, total = 0;
			json_unpack(r, "{s?I,s?I}", "arrived", &done, "total",
			    &total);
			json_decref(r);
			http_resp_free(&resp);
			if (progress != NULL)
				progress(arg, (long)done, (long)total);
			if (deadline != HTTP_NO_DEADLINE &&
			    duration_now_ms() >= deadline) {
				coord_fail(cc, ST_INTERNAL,
				    "barrier %s: "
				    "%ld of %ld tasks by the deadline",
				    id, (long)done, (long)total);
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

	if (coord_key_path(&path, "/v1/barriers/", id, "?task=") < 0 ||
	    text_url_encode(&path, a->task, strlen(a->task)) < 0) {
		buf_free(&path);
		return coord_fail(cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	}
	st = coord_call_json(cc, "DELETE", &path, NULL, deadline, CALL_REPEAT,
	    &reply, NULL);
	buf_free(&path);
	json_decref(reply);
	return st;
}
