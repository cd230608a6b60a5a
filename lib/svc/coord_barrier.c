/*
 * coord_barrier.c: barriers, as the reference's WaitAtBarrier and
 * CancelBarrier describe them.
 *
 *   POST   /v1/barriers/ID?wait=DUR   {"task":T,"incarnation":HEX,
 *                                      "timeout_ms":N,"tasks":[T,...]}
 *   DELETE /v1/barriers/ID?task=T     cancel
 *   GET    /v1/barriers               barriers in flight
 *
 * The first arrival fixes the deadline and the members (the tasks given,
 * or every connected task). A barrier ends once: passed when every member
 * has arrived, or failed (timeout, a member in error, conflicting member
 * lists, a caller outside the members, cancel). A member may ask again and
 * gets the same answer; anyone else reusing an ended id gets
 * FAILED_PRECONDITION.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "duration.h"
#include "log.h"

#define POLL_DEFAULT_MS 30000

static void
barrier_free(void *p)
{
	struct barrier *b = p;

	if (b == NULL)
		return;
	free(b->id);
	free(b->message);
	free(b->at);
	free(b);
}

static void
unlink_pending(struct coord *co, struct barrier *b)
{
	if (b->prev != NULL)
		b->prev->next = b->next;
	else if (co->cl.pending == b)
		co->cl.pending = b->next;
	if (b->next != NULL)
		b->next->prev = b->prev;
	b->prev = b->next = NULL;
}

char *
coord_barrier_names(struct coord *co, const struct barrier *b, int arrived,
    size_t max)
{
	struct buf out = {0};
	size_t n = 0;

	for (size_t i = 0; i < co->cl.ntasks; i++) {
		if (b->at[i] == 0 || (b->at[i] == 2) != arrived)
			continue;
		if (n++ < max)
			buf_printf(&out, "%s%s", n > 1 ? ", " : "",
			    co->cl.tasks[i].name);
	}
	if (n > max)
		buf_printf(&out, " and %zu more", n - max);
	return buf_take(&out, NULL);
}

static void
reply_result(struct barrier *b, struct http_req *req)
{
	if (b->result == ST_OK)
		http_reply_json(req, 200, json_pack("{s:s,s:s}", "barrier",
		    b->id, "state", "passed"));
	else
		http_reply_error(req, b->result, "%s", b->message);
}

/*
 * Ends b with st and answers everyone parked on it. The shutdown barrier
 * also disconnects those who made it, and puts the stragglers in error so
 * that their next heartbeat tells them.
 */
void
coord_barrier_complete(struct barrier *b, enum status st, const char *msg)
{
	struct coord *co = b->co;

	if (b->state != BARRIER_PENDING)
		return;
	b->state = st == ST_OK ? BARRIER_PASSED : BARRIER_FAILED;
	b->result = st;
	free(b->message);
	b->message = strdup(msg != NULL ? msg : "");
	timers_cancel(co->timers, &b->timer);
	unlink_pending(co, b);
	if (st != ST_OK)
		log_info("barrier %s failed: %s: %s", b->id, status_name(st),
		    msg);
	coord_answer_all(&b->waiters, b->result, b->message,
	    b->result == ST_OK ? json_pack("{s:s,s:s}", "barrier", b->id,
	    "state", "passed") : NULL);
	if (!b->shutdown)
		return;
	for (size_t i = 0; i < co->cl.ntasks; i++) {
		struct task *t = &co->cl.tasks[i];
		if (b->at[i] == 2 && t->state != TASK_DISCONNECTED)
			coord_task_disconnect(co, t);
		else if (b->at[i] == 1 && st != ST_OK &&
		    t->state == TASK_CONNECTED) {
			char m[1024];
			snprintf(m, sizeof(m), "the shutdown barrier failed "
			    "before this task arrived: %s", b->message);
			coord_task_set_error(co, t, ST_INTERNAL, m, 0, 0);
		}
	}
}

static void
deadline_fire(struct timer *tm)
{
	struct barrier *b = (struct barrier *)tm;
	char *missing = coord_barrier_names(b->co, b, 0, 10);
	char msg[1024];

	snprintf(msg, sizeof(msg), "barrier %s timed out; not arrived: %s",
	    b->id, missing != NULL ? missing : "");
	free(missing);
	coord_barrier_complete(b, ST_DEADLINE_EXCEEDED, msg);
	coord_cluster_settle(b->co);
}

struct barrier *
coord_barrier_new(struct coord *co, const char *id, int64_t timeout_ms)
{
	struct barrier *b = calloc(1, sizeof(*b));

	if (b == NULL || (b->id = strdup(id)) == NULL ||
	    (b->at = calloc(co->cl.ntasks + 1, 1)) == NULL ||
	    timers_add(co->timers, &b->timer, duration_now_ms() +
	    timeout_ms) < 0) {
		barrier_free(b);
		return NULL;
	}
	b->co = co;
	b->timer.fire = deadline_fire;
	b->next = co->cl.pending;
	if (b->next != NULL)
		b->next->prev = b;
	co->cl.pending = b;
	return b;
}

static void
poll_expired(struct waiter *w)
{
	struct barrier *b = w->obj;

	/* Whoever ends a barrier answers its waiters first: b is alive. */
	if (b->state == BARRIER_PENDING)
		http_reply_json(w->req, 202, json_pack("{s:s,s:s,s:I,s:I}",
		    "barrier", b->id, "state", "waiting", "arrived",
		    (json_int_t)b->arrived, "total", (json_int_t)b->members));
	else
		reply_result(b, w->req);
	waiter_free(w);
}

/* Records t's arrival at b and answers or parks req. */
void
coord_barrier_arrive(struct coord *co, struct http_req *req,
    struct barrier *b, struct task *t, int64_t wait)
{
	size_t i = (size_t)(t - co->cl.tasks);
	int64_t left = b->timer.at - duration_now_ms();
	struct waiter *w;

	if (b->state != BARRIER_PENDING) {
		reply_result(b, req);
		return;
	}
	if (b->at[i] == 0) {
		char msg[512];
		snprintf(msg, sizeof(msg), "task %s is not a member of barrier "
		    "%s", t->name, b->id);
		coord_barrier_complete(b, ST_INVALID_ARGUMENT, msg);
		http_reply_error(req, ST_INVALID_ARGUMENT, "%s", msg);
		return;
	}
	if (b->at[i] == 1) {
		b->at[i] = 2;
		b->arrived++;
	}
	if (b->arrived == b->members) {
		coord_barrier_complete(b, ST_OK, NULL);
		reply_result(b, req);
		return;
	}
	if (left < wait)
		wait = left > 0 ? left : 0;
	w = waiter_park(co, req, &b->waiters, wait, poll_expired, b->id,
	    strlen(b->id));
	if (w == NULL)
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	else
		w->obj = b;
}

void
coord_barriers_task_failed(struct coord *co, struct task *t)
{
	size_t i = (size_t)(t - co->cl.tasks);
	struct barrier *b, *next;
	char msg[1024];

	snprintf(msg, sizeof(msg), "task %s is in error: %s: %s", t->name,
	    status_name(t->err), t->errmsg != NULL ? t->errmsg : "");
	for (b = co->cl.pending; b != NULL; b = next) {
		next = b->next;
		/* A failed straggler does not hold up the shutdown barrier. */
		if (b->shutdown && b->at[i] == 1) {
			b->at[i] = 0;
			b->members--;
			if (b->arrived == b->members)
				coord_barrier_complete(b, ST_OK, NULL);
			continue;
		}
		if (b->at[i] != 0 && !b->shutdown)
			coord_barrier_complete(b, ST_INTERNAL, msg);
	}
}

static void
abort_one(const char *k, size_t kl, void *v, void *arg)
{
	(void)k;
	(void)kl;
	(void)arg;
	coord_barrier_complete(v, ST_ABORTED, "coordd is shutting down");
}

void
coord_barriers_shutdown(struct coord *co)
{
	strmap_each(co->cl.barriers, abort_one, NULL);
	if (co->cl.shutdown != NULL)
		coord_barrier_complete(co->cl.shutdown, ST_ABORTED,
		    "coordd is shutting down");
}

static void
end_one(const char *k, size_t kl, void *v, void *arg)
{
	(void)k;
	(void)kl;
	(void)arg;
	coord_barrier_complete(v, ST_ABORTED, "the cluster was reset");
}

void
coord_barriers_free(struct coord *co)
{
	if (co->cl.barriers != NULL) {
		strmap_each(co->cl.barriers, end_one, NULL);
		strmap_free(co->cl.barriers, barrier_free);
		co->cl.barriers = NULL;
	}
	if (co->cl.shutdown != NULL) {
		coord_barrier_complete(co->cl.shutdown, ST_ABORTED,
		    "the cluster was reset");
		barrier_free(co->cl.shutdown);
		co->cl.shutdown = NULL;
	}
}

json_t *
coord_barriers_json(struct coord *co)
{
	json_t *arr = json_array();
	int64_t now = duration_now_ms();

	for (struct barrier *b = co->cl.pending; arr != NULL && b != NULL;
	    b = b->next) {
		json_t *in = json_array(), *out = json_array();
		for (size_t i = 0; i < co->cl.ntasks; i++) {
			if (b->at[i] == 2)
				json_array_append_new(in,
				    json_string(co->cl.tasks[i].name));
			else if (b->at[i] == 1)
				json_array_append_new(out,
				    json_string(co->cl.tasks[i].name));
		}
		json_array_append_new(arr, json_pack("{s:s,s:I,s:I,s:o,s:o,s:I}",
		    "id", b->id, "arrived", (json_int_t)b->arrived, "total",
		    (json_int_t)b->members, "tasks_arrived", in,
		    "tasks_waiting", out, "deadline_in_ms",
		    (json_int_t)(b->timer.at - now)));
	}
	return arr;
}

static int
same_members(struct coord *co, const unsigned char *x, const unsigned char *y)
{
	for (size_t i = 0; i < co->cl.ntasks; i++)
		if ((x[i] != 0) != (y[i] != 0))
			return 0;
	return 1;
}

/* Members from a JSON list of names into at[]; -1 and msg on a bad one. */
static int
members_from(struct coord *co, json_t *list, unsigned char *at,
    size_t *count, char *msg, size_t msglen)
{
	size_t i;
	json_t *v;

	*count = 0;
	json_array_foreach(list, i, v) {
		struct task *t = json_is_string(v) ? coord_task(co,
		    json_string_value(v)) : NULL;
		if (t == NULL) {
			snprintf(msg, msglen, "task %s is not in the cluster",
			    json_is_string(v) ? json_string_value(v) : "?");
			return -1;
		}
		if (at[t - co->cl.tasks] == 0) {
			at[t - co->cl.tasks] = 1;
			(*count)++;
		}
	}
	return 0;
}

static void
wait_route(struct coord *co, struct http_req *req, const char *id)
{
	size_t len;
	const char *body = http_req_body(req, &len);
	const char *tname = NULL, *incs = NULL;
	json_int_t timeout = 0;
	json_t *root, *list = NULL;
	json_error_t jerr;
	struct barrier *b;
	struct task *t;
	uint64_t inc = 0;
	int64_t wait;
	char msg[512], a[17], c[17];
	unsigned char *at = NULL;
	size_t n = 0;

	if (coord_arg_duration(req, "wait", POLL_DEFAULT_MS, &wait) < 0)
		return;
	root = json_loadb(body, len, 0, &jerr);
	if (root == NULL || json_unpack_ex(root, &jerr, 0, "{s:s,s?s,s?I,s?o}",
	    "task", &tname, "incarnation", &incs, "timeout_ms", &timeout,
	    "tasks", &list) < 0 || (list != NULL && !json_is_array(list)) ||
	    timeout < 0 || (incs != NULL &&
	    task_parse_incarnation(incs, &inc) < 0)) {
		http_reply_error(req, ST_INVALID_ARGUMENT, "request body must "
		    "be {\"task\":T,\"incarnation\":HEX,\"timeout_ms\":N,"
		    "\"tasks\":[...]}: %s", root == NULL ? jerr.text :
		    "bad field");
		json_decref(root);
		return;
	}
	pthread_mutex_lock(&co->mu);
	if (co->closing) {
		/* Nothing may park once shutdown has drained the waiters. */
		coord_reply_closing(req);
		goto out;
	}
	if ((t = coord_task(co, tname)) == NULL) {
		http_reply_error(req, ST_INVALID_ARGUMENT, "task %s is not in "
		    "the cluster", tname);
		goto out;
	}
	b = strmap_get(co->cl.barriers, id, strlen(id));
	/* An ended barrier answers its members the same way every time. */
	if (b != NULL && b->state != BARRIER_PENDING) {
		if (b->at[t - co->cl.tasks] != 0 || b->result != ST_OK)
			reply_result(b, req);
		else
			http_reply_error(req, ST_FAILED_PRECONDITION, "barrier "
			    "%s has already passed; barrier ids are single-use",
			    id);
		goto out;
	}
	if (t->state != TASK_CONNECTED) {
		http_reply_error(req, ST_FAILED_PRECONDITION, "task %s is %s, "
		    "not connected", tname, t->state == TASK_ERROR ?
		    "in error" : "not registered");
		goto out;
	}
	if (inc != 0 && inc != t->incarnation) {
		http_reply_error(req, ST_ABORTED, "incarnation mismatch for "
		    "task %s: expected %s, got %s", tname,
		    task_format_incarnation(t->incarnation, a),
		    task_format_incarnation(inc, c));
		goto out;
	}
	if (list != NULL) {
		if ((at = calloc(co->cl.ntasks + 1, 1)) == NULL) {
			http_reply_error(req, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
			goto out;
		}
		if (members_from(co, list, at, &n, msg, sizeof(msg)) < 0) {
			if (b != NULL)
				coord_barrier_complete(b, ST_INVALID_ARGUMENT,
				    msg);
			http_reply_error(req, ST_INVALID_ARGUMENT, "%s", msg);
			goto out;
		}
	}
	if (b == NULL) {
		if (timeout == 0)
			timeout = 600000;
		if (timeout > COORD_MAX_WAIT_MS)
			timeout = COORD_MAX_WAIT_MS;
		b = coord_barrier_new(co, id, timeout);
		if (b == NULL || strmap_put(co->cl.barriers, id, strlen(id),
		    b) < 0) {
			if (b != NULL) {
				timers_cancel(co->timers, &b->timer);
				unlink_pending(co, b);
				barrier_free(b);
			}
			http_reply_error(req, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
			goto out;
		}
		if (at != NULL) {
			memcpy(b->at, at, co->cl.ntasks);
			b->members = n;
			b->explicit_set = 1;
		} else {
			for (size_t i = 0; i < co->cl.ntasks; i++) {
				if (co->cl.tasks[i].state == TASK_CONNECTED) {
					b->at[i] = 1;
					b->members++;
				}
			}
		}
		for (size_t i = 0; i < co->cl.ntasks; i++) {
			struct task *o = &co->cl.tasks[i];
			if (b->at[i] != 0 && o->state == TASK_ERROR) {
				snprintf(msg, sizeof(msg), "task %s is in error:"
				    " %s: %s", o->name, status_name(o->err),
				    o->errmsg != NULL ? o->errmsg : "");
				coord_barrier_complete(b, ST_INTERNAL, msg);
				break;
			}
		}
	} else if ((at != NULL) != b->explicit_set ||
	    (at != NULL && !same_members(co, at, b->at))) {
		snprintf(msg, sizeof(msg), "task %s gave barrier %s a different "
		    "set of tasks than the first caller", tname, id);
		coord_barrier_complete(b, ST_INVALID_ARGUMENT, msg);
		http_reply_error(req, ST_INVALID_ARGUMENT, "%s", msg);
		goto out;
	}
	coord_barrier_arrive(co, req, b, t, wait);
out:
	pthread_mutex_unlock(&co->mu);
	free(at);
	json_decref(root);
}

static void
cancel_route(struct coord *co, struct http_req *req, const char *id)
{
	const char *tname = http_req_arg(req, "task");
	struct barrier *b;

	pthread_mutex_lock(&co->mu);
	if (co->closing) {
		coord_reply_closing(req);
		goto out;
	}
	if (tname == NULL || coord_task(co, tname) == NULL) {
		http_reply_error(req, ST_INVALID_ARGUMENT, "task=%s is not in "
		    "the cluster", tname != NULL ? tname : "");
		goto out;
	}
	b = strmap_get(co->cl.barriers, id, strlen(id));
	if (b == NULL) {
		/* Cancelled before anyone came: later arrivals are told. */
		b = coord_barrier_new(co, id, 0);
		if (b == NULL || strmap_put(co->cl.barriers, id, strlen(id),
		    b) < 0) {
			http_reply_error(req, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
			goto out;
		}
	}
	if (b->state == BARRIER_PASSED) {
		http_reply_error(req, ST_FAILED_PRECONDITION, "barrier %s has "
		    "already passed", id);
		goto out;
	}
	if (b->state == BARRIER_FAILED && b->result != ST_CANCELLED) {
		http_reply_error(req, ST_FAILED_PRECONDITION, "barrier %s has "
		    "already failed: %s: %s", id, status_name(b->result),
		    b->message);
		goto out;
	}
	{
		char msg[512];
		snprintf(msg, sizeof(msg), "barrier %s was cancelled by task %s",
		    id, tname);
		coord_barrier_complete(b, ST_CANCELLED, msg);
	}
	http_reply_json(req, 200, json_pack("{s:s,s:s}", "barrier", id,
	    "state", "cancelled"));
out:
	pthread_mutex_unlock(&co->mu);
}

static int
valid_id(const char *id)
{
	if (*id == '\0' || strlen(id) > 256)
		return 0;
	for (const char *p = id; *p != '\0'; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || strchr("_-.:", *p) != NULL))
			return 0;
	return 1;
}

void
coord_barriers_route(struct coord *co, struct http_req *req,
    const char *rest)
{
	const char *method = http_req_method(req);

	if (*rest == '\0') {
		if (strcmp(method, "GET") != 0) {
			http_set_header(req, "Allow", "GET");
			http_reply_error_http(req, 405, ST_INVALID_ARGUMENT,
			    "method %s not allowed on /v1/barriers", method);
			return;
		}
		pthread_mutex_lock(&co->mu);
		http_reply_json(req, 200, json_pack("{s:o}", "barriers",
		    coord_barriers_json(co)));
		pthread_mutex_unlock(&co->mu);
		return;
	}
	if (!valid_id(rest)) {
		http_reply_error(req, ST_INVALID_ARGUMENT, "barrier id must be "
		    "1 to 256 of [A-Za-z0-9_.:-]");
		return;
	}
	if (co->cl.ntasks == 0) {
		http_reply_error(req, ST_FAILED_PRECONDITION, "barriers need "
		    "a cluster: coordd runs without --cluster");
		return;
	}
	if (strcmp(method, "POST") == 0) {
		wait_route(co, req, rest);
	} else if (strcmp(method, "DELETE") == 0) {
		cancel_route(co, req, rest);
	} else {
		http_set_header(req, "Allow", "POST, DELETE");
		http_reply_error_http(req, 405, ST_INVALID_ARGUMENT,
		    "method %s not allowed on barriers", method);
	}
}
