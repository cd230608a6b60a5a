/*
 * dispatch_workers.c: dispatchd's workers over HTTP: registration,
 * heartbeats (parked until there is something to say: closures to stop, a
 * new list of data tasks), takes (parked until there is work), results,
 * leaving, and the state of their resources. A worker's data requests
 * (split leases, task reports) come in here and go on to dispatch_data.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "dispatch_int.h"
#include "duration.h"
#include "log.h"
#include "park.h"
#include "route.h"
#include "task.h"
#include "text.h"

static json_t *
stops_json(struct cq_worker *w)
{
	uint64_t *ids;
	long *att;
	size_t n = cq_take_stops(w, &ids, &att);
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a,
		    json_pack("{s:I,s:i}", "id", (json_int_t)ids[i], "attempt",
		        (int)att[i]));
	free(ids);
	free(att);
	return json_pack("{s:o}", "stop", a);
}

static json_t *
beat_json(struct dispatch *d, struct cq_worker *w)
{
	json_t *o = stops_json(w);

	if (o != NULL && ds_worker_serves(d->ds, w->name)) {
		ds_worker_changed(d->ds, w->name, 1);
		json_object_set_new(o, "tasks",
		    dsjson_worker_tasks(d->ds, w->name));
	}
	return o;
}

void
dispatch_answer_beat(struct dispatch *d, struct cq_worker *w, int gone)
{
	struct park_list *l =
	    park_index_find(d->beats, w->name, strlen(w->name));

	if (l == NULL)
		return;
	park_list_hold(l);
	for (struct parked *p = l->head; p != NULL; p = l->head) {
		dispatch_free_ctx(p);
		park_take(p);
		if (gone)
			http_reply_error(p->req, ST_ABORTED,
			    "%s is not registered (%s)", w->name,
			    w->why != NULL ? w->why : "left");
		else
			http_reply_json(p->req, 200, beat_json(d, w));
	}
	park_list_release(l);
	if (!gone)
		cq_seen(d->cq, w, duration_now_ms());
}

int
dispatch_beat_parked(struct dispatch *d, const struct cq_worker *w)
{
	struct park_list *l =
	    park_index_find(d->beats, w->name, strlen(w->name));

	return l != NULL && l->head != NULL;
}

static void
beat_seen(struct park_list *l, void *arg)
{
	struct waitctx *x = l->head != NULL ? l->head->ctx : NULL;

	if (x != NULL && x->kind == W_HEARTBEAT)
		cq_seen(NULL, x->w, *(int64_t *)arg);
}

void
dispatch_beats_seen(struct dispatch *d, int64_t now)
{
	park_index_each(d->beats, beat_seen, &now);
}

void
dispatch_takers_gone(struct dispatch *d, struct cq_worker *w)
{
	struct park_list *l = &d->takers;

	for (struct parked *p = l->head, *next; p != NULL; p = next) {
		struct waitctx *x = p->ctx;
		next = p->next;
		if (x->w != w)
			continue;
		dispatch_free_ctx(p);
		park_take(p);
		http_reply_error(p->req, ST_ABORTED,
		    "%s is not registered (%s)", w->name,
		    w->why != NULL ? w->why : "left");
	}
}

#define TAKE_MAX 256

static void
take_expire(struct parked *p)
{
	dispatch_free_ctx(p);
	http_reply(p->req, 200, "application/json", "{\"closures\":[]}", 15);
}

/* Gives work to parked takes, oldest first, while there is any. */
void
dispatch_serve_takers(struct dispatch *d)
{
	struct park_list *l = &d->takers;
	struct cq_closure *cs[TAKE_MAX];
	int64_t now = duration_now_ms();

	for (struct parked *p = l->head, *next; p != NULL; p = next) {
		struct waitctx *x = p->ctx;
		size_t n;
		next = p->next;
		if (!cq_has_work(d->cq, x->w, now))
			continue;
		n = cq_take(d->cq, x->w, x->max, now, cs);
		if (n == 0)
			continue;
		cq_seen(d->cq, x->w, now);
		park_take(p);
		dispatch_reply_closures(d, p->req, cs, n);
		dispatch_free_ctx(p);
	}
}

static void
take(struct dispatch *d, struct http_req *req, struct cq_worker *w, long max,
    int64_t wait)
{
	struct cq_closure *cs[TAKE_MAX];
	size_t n = cq_take(d->cq, w, (size_t)max, duration_now_ms(), cs);
	struct waitctx *x;

	if (n > 0 || wait == 0) {
		dispatch_reply_closures(d, req, cs, n);
		return;
	}
	if ((x = dispatch_ctx_new(W_TAKE)) == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	x->w = w;
	x->max = (size_t)max;
	dispatch_park(d, req, &d->takers, wait, take_expire, x);
}

static void
beat_expire(struct parked *p)
{
	struct waitctx *x = p->ctx;

	cq_seen(NULL, x->w, duration_now_ms());
	http_reply_json(p->req, 200, beat_json(p->obj, x->w));
	dispatch_free_ctx(p);
}

/* The client of a parked heartbeat went away: its worker is gone. */
static void
beat_drop(struct parked *p)
{
	struct waitctx *x = p->ctx;
	struct dispatch *d = p->obj;

	cq_worker_failed(d->cq, x->w, "its connection was lost",
	    duration_now_ms());
	dispatch_free_ctx(p);
}

static void
heartbeat(struct dispatch *d, struct http_req *req, struct cq_worker *w,
    int64_t wait)
{
	struct park_list *l;
	struct waitctx *x;
	struct parked *p;
	int64_t cap = cq_config(d->cq)->hb_timeout_ms / 2;

	if (w->nstop > 0 || wait == 0 || dispatch_beat_parked(d, w) ||
	    ds_worker_changed(d->ds, w->name, 0)) {
		http_reply_json(req, 200, beat_json(d, w));
		return;
	}
	if (wait > cap)
		wait = cap;
	if ((l = park_index_list(d->beats, w->name, strlen(w->name))) == NULL ||
	    (x = dispatch_ctx_new(W_HEARTBEAT)) == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	x->w = w;
	if ((p = dispatch_park(d, req, l, wait, beat_expire, x)) != NULL) {
		p->obj = d;
		p->drop = beat_drop;
	}
}

/*
 * The bytes of base64 string s, in memory of their size: a value is held
 * until it is forgotten, and a buffer grown by doubling would hold up to
 * twice it. -1 when s is not base64, or memory runs out.
 */
static int
decode_value(json_t *s, char **out, size_t *len)
{
	size_t n = json_string_length(s), cap = n / 4 * 3 + 4;
	struct buf b = {malloc(cap), 0, cap};

	if (b.data == NULL ||
	    text_base64_decode(&b, json_string_value(s), n) < 0) {
		buf_free(&b);
		return -1;
	}
	*len = b.len;
	*out = b.data;
	return 0;
}

static int
result_of(json_t *r, struct cq_result *res, char *msg, size_t msglen)
{
	json_t *out = json_object_get(r, "stdout");
	json_t *err = json_object_get(r, "stderr_tail");
	json_t *m = json_object_get(r, "message");

	memset(res, 0, sizeof(*res));
	if (json_is_integer(json_object_get(r, "exit"))) {
		res->exited = 1;
		res->code = (int)json_integer_value(json_object_get(r, "exit"));
	} else if (json_is_integer(json_object_get(r, "signal"))) {
		res->code =
		    (int)json_integer_value(json_object_get(r, "signal"));
	} else {
		snprintf(msg, msglen, "a result needs exit or signal");
		return -1;
	}
	res->truncated = json_is_true(json_object_get(r, "stdout_truncated"));
	if (out != NULL &&
	    (!json_is_string(out) ||
	        decode_value(out, &res->out, &res->outlen) < 0))
		goto bad;
	if (err != NULL &&
	    (!json_is_string(err) ||
	        decode_value(err, &res->err, &res->errlen) < 0))
		goto bad;
	if (json_is_string(m))
		res->message = strdup(json_string_value(m));
	return 0;
bad:
	free(res->out);
	free(res->err);
	memset(res, 0, sizeof(*res));
	snprintf(msg, msglen, "stdout and stderr_tail must be base64");
	return -1;
}

static void
results(struct dispatch *d, struct http_req *req, struct cq_worker *w,
    json_t *body, long takemax, int64_t wait)
{
	json_t *rs = json_object_get(body, "results"), *r;
	json_t *stale = json_array();
	int64_t now = duration_now_ms();
	enum status st;
	char msg[512];
	size_t i;

	if (!json_is_array(rs)) {
		json_decref(stale);
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "results must be an array");
		return;
	}
	json_array_foreach(rs, i, r) {
		json_t *jid = json_object_get(r, "id");
		json_t *jat = json_object_get(r, "attempt");
		int aborted = json_is_true(json_object_get(r, "aborted"));
		const char *sick =
		    json_string_value(json_object_get(r, "unhealthy"));
		struct cq_result res;

		if (!json_is_integer(jid) || !json_is_integer(jat)) {
			json_decref(stale);
			http_reply_error(req, ST_INVALID_ARGUMENT,
			    "results[%zu]: id and attempt must be numbers", i);
			return;
		}
		memset(&res, 0, sizeof(res));
		if (!aborted && result_of(r, &res, msg, sizeof(msg)) < 0) {
			json_decref(stale);
			http_reply_error(req, ST_INVALID_ARGUMENT,
			    "results[%zu]: %s", i, msg);
			return;
		}
		st = cq_report(d->cq, w, (uint64_t)json_integer_value(jid),
		    (long)json_integer_value(jat), aborted, &res, now, msg,
		    sizeof(msg));
		if (st != ST_OK) {
			free(res.out);
			free(res.err);
			free(res.message);
		}
		if (st == ST_RESOURCE_EXHAUSTED) {
			/* Not recorded: the worker keeps it and sends it
			 * again, as after any refused report. */
			json_decref(stale);
			http_reply_error(req, st, "results[%zu]: %s", i, msg);
			return;
		}
		if (st != ST_OK)
			json_array_append(stale, jid);
		/* It could not start the closure, for a reason of its own:
		 * given back (aborted), and the worker rests a while. */
		if (aborted && sick != NULL) {
			char d1[32];
			cq_worker_unhealthy(d->cq, w, sick, now);
			log_info(
			    "worker %s could not start closure %" JSON_INTEGER_FORMAT
			    ": %s; it gets no closure for %s",
			    w->name, json_integer_value(jid), sick,
			    duration_format(w->sick_until - now, d1,
			        sizeof(d1)));
		}
	}
	cq_seen(d->cq, w, now);
	if (takemax > 0 && json_array_size(stale) == 0) {
		json_decref(stale);
		take(d, req, w, takemax, wait);
		return;
	}
	http_reply_json(req, 200,
	    json_pack("{s:o,s:[]}", "stale", stale, "closures"));
}

/* A worker's request, once its worker is found and its incarnation is
 * the current one (registration: before). */
struct worker_call {
	struct dispatch *d;
	struct http_req *req;
	const struct route_match *m;
	const char *name;
	struct cq_worker *w; /* NULL while registering */
	json_t *body;
	int64_t wait, now;
	long max, slots;
};

/* What each of a worker's routes does (the route's op). */
struct worker_op {
	void (*fn)(struct worker_call *c);
	unsigned flags;
};

enum {
	OP_BODY = 1 << 0,   /* takes a JSON object body */
	OP_ALWAYS = 1 << 1, /* goes on while the state directory cannot be
	                     * written (heartbeats, progress reports) */
	OP_NEW = 1 << 2,    /* registration: no worker yet */
	OP_SEEN = 1 << 3,   /* tells that the worker is there */
};

static void
do_register(struct worker_call *c)
{
	struct dispatch *d = c->d;
	json_t *js = json_object_get(c->body, "slots");
	long n = json_is_integer(js) ? (long)json_integer_value(js) : 1;
	char msg[512], inc[17];
	struct cq_worker *w;
	enum status st;

	if (n < 1 || n > 4096) {
		http_reply_error(c->req, ST_INVALID_ARGUMENT,
		    "slots must be 1 to 4096");
		return;
	}
	if ((st = ds_worker_admit(d->ds, c->name, msg, sizeof(msg))) != ST_OK) {
		http_reply_error(c->req, st, "%s", msg);
		return;
	}
	if ((w = cq_register(d->cq, c->name, n, c->now, msg, sizeof(msg))) ==
	    NULL) {
		http_reply_error(c->req, ST_INVALID_ARGUMENT, "%s", msg);
		return;
	}
	dispatch_data_register(d, w, c->body);
	log_debug("worker %s registered (%ld slots)", c->name, n);
	http_reply_json(c->req, 200,
	    json_pack("{s:s,s:I,s:I}", "incarnation",
	        task_format_incarnation(w->inc, inc), "heartbeat_timeout_ms",
	        (json_int_t)cq_config(d->cq)->hb_timeout_ms, "index",
	        (json_int_t)w->index));
}

static void
do_leave(struct worker_call *c)
{
	cq_worker_leave(c->d->cq, c->w, c->now);
	log_debug("worker %s left", c->name);
	http_reply_json(c->req, 200, json_pack("{s:b}", "left", 1));
}

static void
do_heartbeat(struct worker_call *c)
{
	heartbeat(c->d, c->req, c->w, c->wait);
}

static void
do_lease(struct worker_call *c)
{
	dispatch_data_lease(c->d, c->req, c->w, c->body, c->wait);
}

static void
do_task(struct worker_call *c)
{
	char task[32];

	dispatch_data_task(c->d, c->req, c->w,
	    route_seg(c->m, 1, task, sizeof(task)), c->body);
}

static void
do_take(struct worker_call *c)
{
	take(c->d, c->req, c->w, c->max, c->wait);
}

static void
do_results(struct worker_call *c)
{
	results(c->d, c->req, c->w, c->body, c->slots, c->wait);
}

static void
do_resource(struct worker_call *c)
{
	char res[CQ_NAME_MAX + 2];
	const char *s = json_string_value(json_object_get(c->body, "state"));
	int state = -1;

	route_seg(c->m, 1, res, sizeof(res));
	if (s != NULL)
		state = strcmp(s, "building") == 0 ? CQ_RES_BUILDING :
		    strcmp(s, "ready") == 0        ? CQ_RES_READY :
		    strcmp(s, "failed") == 0       ? CQ_RES_FAILED :
		                                     -1;
	if (state < 0 || cq_resource(c->d->cq, res) == NULL) {
		http_reply_error(c->req, ST_INVALID_ARGUMENT,
		    "state must be building, ready or failed, for a known "
		    "resource");
		return;
	}
	cq_resource_state(c->w, res, state,
	    json_string_value(json_object_get(c->body, "message")));
	http_reply_json(c->req, 200, json_pack("{s:b}", "ok", 1));
}

const struct worker_op dispatch_worker_register = {do_register,
    OP_BODY | OP_NEW};
const struct worker_op dispatch_worker_leave = {do_leave, 0};
const struct worker_op dispatch_worker_heartbeat = {do_heartbeat,
    OP_ALWAYS | OP_SEEN};
const struct worker_op dispatch_worker_lease = {do_lease, OP_BODY | OP_SEEN};
const struct worker_op dispatch_worker_task = {do_task, OP_BODY | OP_ALWAYS};
const struct worker_op dispatch_worker_take = {do_take, OP_SEEN};
const struct worker_op dispatch_worker_results = {do_results, OP_BODY};
const struct worker_op dispatch_worker_resource = {do_resource, OP_BODY};

void
dispatch_worker_route(struct http_req *req, const struct route_match *m,
    void *arg)
{
	const struct worker_op *op = m->op;
	char name[CQ_NAME_MAX + 2], msg[512];
	struct worker_call c = {arg, req, m, name, NULL, NULL, 0,
	    duration_now_ms(), 0, 0};
	struct dispatch *d = c.d;
	enum status st;

	route_seg(m, 0, name, sizeof(name));
	if (!cq_name_valid(name)) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "%s is not a worker name", name);
		return;
	}
	if (park_wait_arg(req, "wait", 0, &c.wait) < 0 ||
	    dispatch_arg_long(req, "max", 1, 1, TAKE_MAX, &c.max) < 0 ||
	    dispatch_arg_long(req, "take", 0, 0, TAKE_MAX, &c.slots) < 0)
		return;
	if (!(op->flags & OP_ALWAYS) && dispatch_refuse(d, req))
		return;
	if ((op->flags & OP_BODY) && (c.body = dispatch_body(req)) == NULL)
		return;
	dispatch_lock(d);
	if (dispatch_closing(d)) {
		dispatch_reply_closing(req);
	} else if (op->flags & OP_NEW) {
		op->fn(&c);
	} else if ((c.w = cq_worker(d->cq, name)) == NULL) {
		http_reply_error(req, ST_ABORTED, "%s is not registered", name);
	} else if ((st = cq_worker_check(c.w, http_req_arg(req, "incarnation"),
	                msg, sizeof(msg))) != ST_OK) {
		http_reply_error(req, st, "%s", msg);
	} else {
		if (op->flags & OP_SEEN)
			cq_seen(d->cq, c.w, c.now);
		op->fn(&c);
	}
	dispatch_unlock(d);
	json_decref(c.body);
}
