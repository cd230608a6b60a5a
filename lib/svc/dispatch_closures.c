/*
 * dispatch_closures.c: dispatchd's closure queues over HTTP: scheduling
 * into a queue (waiting while it is full), joins and dones, a closure's
 * value (waiting until it ends), cancel, listings, and resources.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "closurestate.h"
#include "dispatch_int.h"
#include "duration.h"
#include "errbuf.h"
#include "log.h"
#include "park.h"
#include "route.h"
#include "strmap.h"
#include "text.h"

static void
closure_idkey(uint64_t id, char *buf, size_t size)
{
	snprintf(buf, size, "%" PRIu64, id);
}

static json_t *
value_json(const struct cq_closure *c, int with_output)
{
	json_t *o = json_object();
	const char *phase = c->state == CQ_QUEUED ? "queued" :
	    c->state == CQ_RUNNING                ? "running" :
	                                            "ended";

	if (o == NULL)
		return NULL;
	json_object_set_new(o, "id", json_integer((json_int_t)c->id));
	json_object_set_new(o, "queue", json_string(c->q->name));
	json_object_set_new(o, "state", json_string(cq_state_name(c->state)));
	json_object_set_new(o, "phase", json_string(phase));
	json_object_set_new(o, "attempts", json_integer(c->attempts));
	json_object_set_new(o, "retries", json_integer(c->retries));
	json_object_set_new(o, "worker_deaths", json_integer(c->deaths));
	if (c->independent)
		json_object_set_new(o, "independent", json_true());
	json_object_set_new(o, "worker",
	    c->last_worker != NULL ? json_string(c->last_worker) : json_null());
	if (c->state == CQ_READY) {
		if (c->res.exited) {
			json_object_set_new(o, "exit",
			    json_integer(c->res.code));
			json_object_set_new(o, "signal", json_null());
		} else {
			json_object_set_new(o, "exit", json_null());
			json_object_set_new(o, "signal",
			    json_integer(c->res.code));
		}
		json_object_set_new(o, "failed", json_boolean(c->failed));
		if (with_output) {
			json_object_set_new(o, "stdout",
			    text_base64_json(c->res.out, c->res.outlen));
			json_object_set_new(o, "stdout_truncated",
			    json_boolean(c->res.truncated));
			json_object_set_new(o, "stderr_tail",
			    text_base64_json(c->res.err, c->res.errlen));
		}
	}
	if (c->res.message != NULL)
		json_object_set_new(o, "message", json_string(c->res.message));
	if (c->on != NULL)
		json_object_set_new(o, "on", json_string(c->on));
	if (c->key != NULL)
		json_object_set_new(o, "key", json_string(c->key));
	return o;
}

/* "closure 7 failed on worker:1: exited with status 3". */
static void
error_text(const struct cq_closure *c, char *buf, size_t size)
{
	char how[128];

	if (c->res.message != NULL)
		snprintf(how, sizeof(how), "%s", c->res.message);
	else if (c->res.exited)
		snprintf(how, sizeof(how), "exited with status %d",
		    c->res.code);
	else
		snprintf(how, sizeof(how), "killed by signal %d (%s)",
		    c->res.code, strsignal(c->res.code));
	snprintf(buf, size, "closure %" PRIu64 " of queue %s failed on %s: %s",
	    c->id, c->q->name, c->last_worker != NULL ? c->last_worker : "?",
	    how);
}

/* The queue's error, answered to req: INTERNAL, with the closure. */
static void
reply_queue_error(struct http_req *req, const struct cq_closure *c)
{
	char msg[768];
	json_t *extra = json_object();

	error_text(c, msg, sizeof(msg));
	json_object_set_new(extra, "closure", value_json(c, 1));
	http_reply_error_json(req, ST_INTERNAL, extra, "%s", msg);
}

void
dispatch_closure_ended(struct dispatch *d, struct cq_closure *c)
{
	char key[24];
	struct park_list *l;
	struct http_shared *sh;

	closure_idkey(c->id, key, sizeof(key));
	if ((l = park_index_find(d->fetchers, key, strlen(key))) == NULL)
		return;
	sh = http_shared_json(200, value_json(c, 1));
	if (sh == NULL)
		return;
	park_list_hold(l);
	for (struct parked *p = l->head; p != NULL; p = l->head) {
		dispatch_free_ctx(p);
		park_take(p);
		http_reply_shared(p->req, sh);
	}
	park_list_release(l);
	http_shared_release(sh);
}

/* Whether q's joins give up: no worker for --worker-recovery. */
int
dispatch_no_workers(struct dispatch *d, int64_t now, int64_t *until)
{
	int64_t since = cq_no_worker_since(d->cq);

	if (since == 0)
		return 0;
	*until = since + d->cfg.worker_recovery_ms;
	return now >= *until;
}

/* Reading a closure from a request. */

/* Whether argv is not a non-empty array of strings without NUL (msg). */
static int
argv_bad(json_t *argv, char *msg, size_t msglen)
{
	json_t *v;
	size_t i;

	if (!json_is_array(argv) || json_array_size(argv) == 0) {
		errbuf_say(msg, msglen,
		    "argv must be a non-empty array of strings");
		return 1;
	}
	json_array_foreach(argv, i, v)
		if (!json_is_string(v) ||
		    json_string_length(v) != strlen(json_string_value(v))) {
			errbuf_say(msg, msglen,
			    "argv[%zu] must be a string without NUL", i);
			return 1;
		}
	return 0;
}

/* What a closure's item holds for the worker to run it, checked. */
static int
run_fields_bad(json_t *item, char *msg, size_t msglen)
{
	json_t *argv = json_object_get(item, "argv");
	json_t *env = json_object_get(item, "env");
	json_t *in = json_object_get(item, "stdin");
	json_t *to = json_object_get(item, "timeout_ms");
	json_t *v;
	const char *k;

	if (argv_bad(argv, msg, msglen))
		return 1;
	if (json_string_length(json_array_get(argv, 0)) == 0) {
		errbuf_say(msg, msglen, "argv[0] must not be empty");
		return 1;
	}
	if (env != NULL) {
		if (!json_is_object(env)) {
			errbuf_say(msg, msglen,
			    "env must be an object of strings");
			return 1;
		}
		json_object_foreach(env, k, v) {
			if (*k == '\0' || strchr(k, '=') != NULL ||
			    !json_is_string(v) ||
			    json_string_length(v) !=
			        strlen(json_string_value(v))) {
				errbuf_say(msg, msglen,
				    "env: %s is not NAME=value without NUL", k);
				return 1;
			}
		}
	}
	if (in != NULL) {
		struct buf b = {0};
		int bad = !json_is_string(in) ||
		    text_base64_decode(&b, json_string_value(in),
		        json_string_length(in)) < 0;
		buf_free(&b);
		if (bad) {
			errbuf_say(msg, msglen, "stdin must be base64");
			return 1;
		}
	}
	if (to != NULL &&
	    (!json_is_integer(to) || json_integer_value(to) < 0)) {
		errbuf_say(msg, msglen,
		    "timeout_ms must be a whole number >= 0");
		return 1;
	}
	return 0;
}

/* Room for what a cq_spec points at, beside the item's strings. */
struct spec_room {
	const char *needs[64];
	int codes[CQ_MAX_RETRY_CODES];
};

/*
 * s from item ({"argv":[...], "env":{...}, "stdin": base64, "timeout_ms",
 * "retry_exit":[...], "max_retries", "on", "needs":[...], "key",
 * "independent"}), its strings the item's; -1 with msg when a field is
 * bad.
 */
static int
spec_of(json_t *item, struct cq_spec *s, struct spec_room *r, char *msg,
    size_t msglen)
{
	json_t *codes = json_object_get(item, "retry_exit");
	json_t *mr = json_object_get(item, "max_retries");
	json_t *on = json_object_get(item, "on");
	json_t *needs = json_object_get(item, "needs");
	json_t *key = json_object_get(item, "key");
	json_t *ind = json_object_get(item, "independent");
	json_t *v;
	size_t i;

	memset(s, 0, sizeof(*s));
	if (!json_is_object(item)) {
		errbuf_say(msg, msglen, "a closure must be an object");
		return -1;
	}
	if (run_fields_bad(item, msg, msglen))
		return -1;
	if (codes != NULL) {
		if (!json_is_array(codes) ||
		    json_array_size(codes) > CQ_MAX_RETRY_CODES) {
			errbuf_say(msg, msglen,
			    "retry_exit must be an array of at "
			    "most %d exit codes",
			    CQ_MAX_RETRY_CODES);
			return -1;
		}
		json_array_foreach(codes, i, v) {
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
			    json_integer_value(v) > 255) {
				errbuf_say(msg, msglen,
				    "retry_exit: exit codes are 1 to 255");
				return -1;
			}
			r->codes[s->nretry_exit++] = (int)json_integer_value(v);
		}
		s->retry_exit = r->codes;
		s->max_retries = 3;
	}
	if (ind != NULL) {
		if (!json_is_boolean(ind)) {
			errbuf_say(msg, msglen,
			    "independent must be true or false");
			return -1;
		}
		s->independent = json_is_true(ind);
	}
	if (mr != NULL) {
		if (!json_is_integer(mr) || json_integer_value(mr) < 0 ||
		    json_integer_value(mr) > 1000000) {
			errbuf_say(msg, msglen,
			    "max_retries must be 0 to 1000000");
			return -1;
		}
		s->max_retries = (long)json_integer_value(mr);
	}
	if (on != NULL) {
		if (!json_is_string(on) ||
		    !cq_name_valid(json_string_value(on))) {
			errbuf_say(msg, msglen,
			    "on must name a worker (JOB:INDEX)");
			return -1;
		}
		s->on = json_string_value(on);
	}
	if (key != NULL) {
		if (!json_is_string(key) || json_string_length(key) == 0 ||
		    json_string_length(key) > 1024) {
			errbuf_say(msg, msglen,
			    "key must be a string of 1 to 1024 "
			    "bytes");
			return -1;
		}
		s->key = json_string_value(key);
	}
	if (needs != NULL) {
		if (!json_is_array(needs) || json_array_size(needs) > 64) {
			errbuf_say(msg, msglen,
			    "needs must be an array of at most 64 "
			    "resource names");
			return -1;
		}
		json_array_foreach(needs, i, v) {
			if (!json_is_string(v)) {
				errbuf_say(msg, msglen,
				    "needs: no resource (not a string) (add "
				    "it with dispatchctl resource add)");
				return -1;
			}
			r->needs[s->nneeds++] = json_string_value(v);
		}
		s->needs = r->needs;
	}
	return 0;
}

/* A closure of item, not yet in a queue; NULL (st, msg) when it is bad. */
static struct cq_closure *
closure_of(struct dispatch *d, json_t *item, enum status *st, char *msg,
    size_t msglen)
{
	struct spec_room r;
	struct cq_spec s;

	*st = ST_INVALID_ARGUMENT;
	if (spec_of(item, &s, &r, msg, msglen) < 0)
		return NULL;
	/* Out of memory when NULL: cq_closure_new says so. */
	s.spec = json_dumps(item, JSON_COMPACT);
	s.speclen = s.spec != NULL ? strlen(s.spec) : 0;
	return cq_closure_new(d->cq, &s, st, msg, msglen);
}

/* Schedules. */

/*
 * Tries to schedule what x holds into q for req: 1 when answered, 0 when
 * it must wait (a full queue with block set).
 */
static int
try_schedule(struct dispatch *d, struct http_req *req, struct cq_queue *q,
    struct waitctx *x)
{
	size_t n = x->ncs, room, i;
	int64_t now = duration_now_ms();
	struct cq_closure *e;
	json_t *ids;
	size_t dups = 0;
	char msg[512];

	if ((e = cq_take_error(d->cq, q, now)) != NULL) {
		reply_queue_error(req, e);
		return 1;
	}
	room = cq_room(d->cq, q);
	if (room == 0) {
		if (x->block)
			return 0;
		http_reply_error(req, ST_RESOURCE_EXHAUSTED,
		    "queue %s is full (%zu closures queued, --queue-max)",
		    q->name, q->queued);
		return 1;
	}
	if (n > room)
		n = room;
	/* As many as the store has room for; a full store is refused at
	 * once, block or not: only forgets make room. */
	room = cq_store_room(d->cq);
	for (i = 0; i < n && x->cs[i]->speclen <= room; i++)
		room -= x->cs[i]->speclen;
	if (i == 0) {
		const struct cq_view *v = cq_view(d->cq);
		http_reply_error(req, ST_RESOURCE_EXHAUSTED,
		    "dispatchd holds %zu bytes of closures and values, "
		    "--max-store-bytes %zu: forget some (dispatchctl forget)",
		    v->value_bytes + v->spec_bytes,
		    cq_config(d->cq)->max_store);
		return 1;
	}
	n = i;
	ids = json_array();
	for (i = 0; i < n; i++) {
		uint64_t id;
		int dup;
		enum status st = cq_enqueue(d->cq, q, x->cs[i], now, &id, &dup,
		    msg, sizeof(msg));
		x->cs[i] = NULL; /* taken over, even when it failed */
		if (st != ST_OK) {
			/* Checked before: only memory can run out here. */
			json_decref(ids);
			http_reply_error(req, st, "closure %zu: %s", i, msg);
			return 1;
		}
		dups += dup;
		json_array_append_new(ids, json_integer((json_int_t)id));
	}
	http_reply_json(req, 200,
	    json_pack("{s:o,s:I}", "ids", ids, "duplicates", (json_int_t)dups));
	return 1;
}

static void
schedule_expire(struct parked *p)
{
	struct waitctx *x = p->ctx;

	http_reply_error(p->req, ST_DEADLINE_EXCEEDED,
	    "queue %s stayed full (%zu closures queued)", x->q->name,
	    x->q->queued);
	dispatch_free_ctx(p);
}

/* {"done","queued","inflight","closures":{...}}: where q stands, and
 * how many of the closures ever scheduled on it ended, and how. */
static json_t *
queue_counts(const struct cq_queue *q)
{
	return json_pack("{s:b,s:I,s:I,s:{s:I,s:I,s:I,s:I}}", "done",
	    cq_idle(q), "queued", (json_int_t)q->queued, "inflight",
	    (json_int_t)q->inflight, "closures", "scheduled",
	    (json_int_t)q->scheduled, "done", (json_int_t)q->done, "failed",
	    (json_int_t)q->failed, "cancelled", (json_int_t)q->cancelled);
}

/*
 * A join whose queue has not ended yet: UNAVAILABLE once no worker has
 * been there for --worker-recovery, else 202 with the counts.
 */
static void
reply_join_pending(struct dispatch *d, struct http_req *req, struct cq_queue *q)
{
	int64_t until;

	if (dispatch_no_workers(d, duration_now_ms(), &until) && !cq_idle(q))
		http_reply_error(req, ST_UNAVAILABLE,
		    "no worker for %" PRId64 " ms (--worker-recovery); queue "
		    "%s has %zu queued, %zu in flight",
		    d->cfg.worker_recovery_ms, q->name, q->queued, q->inflight);
	else
		http_reply_json(req, 202, queue_counts(q));
}

static void
join_expire(struct parked *p)
{
	struct waitctx *x = p->ctx;

	reply_join_pending(p->obj, p->req, x->q);
	dispatch_free_ctx(p);
}

/*
 * Answers q's waiters in the order they came, as far as they can be: the
 * first one to find q's error reports it (what is in flight is cancelled
 * then), and it is cleared for the rest.
 */
void
dispatch_queue_changed(struct dispatch *d, struct cq_queue *q)
{
	struct park_list *l =
	    park_index_find(d->qwait, q->name, strlen(q->name));
	int64_t now = duration_now_ms(), until;

	if (l == NULL)
		return;
	park_list_hold(l);
	for (struct parked *p = l->head, *next; p != NULL; p = next) {
		struct waitctx *x = p->ctx;
		struct cq_closure *e;

		next = p->next;
		if ((e = cq_take_error(d->cq, q, now)) != NULL) {
			park_take(p);
			reply_queue_error(p->req, e);
			dispatch_free_ctx(p);
			continue;
		}
		switch (x->kind) {
		case W_JOIN:
			if (cq_idle(q)) {
				park_take(p);
				http_reply_json(p->req, 200, queue_counts(q));
				dispatch_free_ctx(p);
			} else if (dispatch_no_workers(d, now, &until)) {
				park_take(p);
				join_expire(p);
			}
			break;
		case W_SCHEDULE:
			if (cq_room(d->cq, q) > 0) {
				park_take(p);
				try_schedule(d, p->req, q, x);
				dispatch_free_ctx(p);
			}
			break;
		default: break;
		}
	}
	park_list_release(l);
}

static struct park_list *
qwait_list(struct dispatch *d, struct http_req *req, struct cq_queue *q)
{
	struct park_list *l =
	    park_index_list(d->qwait, q->name, strlen(q->name));

	if (l == NULL)
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	return l;
}

/* Every closure of the body made and checked, before any is taken. */
static int
prepare(struct dispatch *d, struct http_req *req, json_t *items,
    struct waitctx *x)
{
	size_t i;
	json_t *item;

	if (!json_is_array(items) || json_array_size(items) == 0) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "closures must be a non-empty array");
		return -1;
	}
	if (json_array_size(items) > d->cfg.max_batch) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED,
		    "at most %zu closures a request", d->cfg.max_batch);
		return -1;
	}
	if ((x->cs = calloc(json_array_size(items), sizeof(*x->cs))) == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return -1;
	}
	x->cq = d->cq;
	json_array_foreach(items, i, item) {
		char msg[512];
		enum status st;
		if ((x->cs[i] = closure_of(d, item, &st, msg, sizeof(msg))) ==
		    NULL) {
			http_reply_error(req, st, "closure %zu: %s", i, msg);
			return -1;
		}
		x->ncs = i + 1;
	}
	return 0;
}

static void
schedule_route(struct dispatch *d, struct http_req *req, struct cq_queue *q)
{
	struct waitctx *x;
	struct park_list *l;
	struct parked *p;
	json_t *body;
	long block;
	int64_t wait;

	if (dispatch_arg_long(req, "block", 1, 0, 1, &block) < 0 ||
	    park_wait_arg(req, "wait", PARK_WAIT_DEFAULT_MS, &wait) < 0)
		return;
	if ((body = dispatch_body(req)) == NULL)
		return;
	if ((x = dispatch_ctx_new(W_SCHEDULE)) == NULL) {
		json_decref(body);
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	x->block = (int)block;
	x->q = q;
	if (prepare(d, req, json_object_get(body, "closures"), x) < 0 ||
	    try_schedule(d, req, q, x) || (l = qwait_list(d, req, q)) == NULL) {
		json_decref(body);
		dispatch_ctx_free(x);
		return;
	}
	json_decref(body);
	if ((p = dispatch_park(d, req, l, wait, schedule_expire, x)) != NULL)
		p->obj = d;
}

/* GET .../join (parked until the queue ends) and .../done (at once). */
static void
join_route(struct dispatch *d, struct http_req *req, struct cq_queue *q,
    int is_done)
{
	int64_t wait, now = duration_now_ms(), until = 0;
	struct cq_closure *e;
	struct waitctx *x;
	struct park_list *l;
	struct parked *p;

	if (park_wait_arg(req, "wait", 0, &wait) < 0)
		return;
	if ((e = cq_take_error(d->cq, q, now)) != NULL) {
		reply_queue_error(req, e);
		return;
	}
	if (is_done || cq_idle(q)) {
		http_reply_json(req, 200, queue_counts(q));
		return;
	}
	if (dispatch_no_workers(d, now, &until) || wait == 0) {
		reply_join_pending(d, req, q);
		return;
	}
	if (until > 0 && until - now < wait)
		wait = until - now;
	if ((x = dispatch_ctx_new(W_JOIN)) == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	x->q = q;
	if ((l = qwait_list(d, req, q)) == NULL) {
		free(x);
		return;
	}
	p = dispatch_park(d, req, l, wait, join_expire, x);
	if (p != NULL)
		p->obj = d;
}

static void
do_schedule(struct dispatch *d, struct http_req *req, struct cq_queue *q)
{
	schedule_route(d, req, q);
}

static void
do_join(struct dispatch *d, struct http_req *req, struct cq_queue *q)
{
	join_route(d, req, q, 0);
}

static void
do_done(struct dispatch *d, struct http_req *req, struct cq_queue *q)
{
	join_route(d, req, q, 1);
}

/* What each of a queue's routes does (the route's op). */
struct queue_op {
	void (
	    *fn)(struct dispatch *d, struct http_req *req, struct cq_queue *q);
};

const struct queue_op dispatch_queue_schedule = {do_schedule};
const struct queue_op dispatch_queue_join = {do_join};
const struct queue_op dispatch_queue_done = {do_done};

void
dispatch_queue_route(struct http_req *req, const struct route_match *m,
    void *arg)
{
	const struct queue_op *op = m->op;
	struct dispatch *d = arg;
	char name[CQ_NAME_MAX + 2];
	struct cq_queue *q;

	route_seg(m, 0, name, sizeof(name));
	if (!cq_name_valid(name)) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "%s is not a queue name (letters, digits, _-.:)", name);
		return;
	}
	if (m->method == ROUTE_POST && dispatch_refuse(d, req))
		return; /* the state directory cannot be written */
	dispatch_lock(d);
	if (dispatch_closing(d))
		dispatch_reply_closing(req);
	else if ((q = cq_queue(d->cq, name, 1)) == NULL)
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	else
		op->fn(d, req, q);
	dispatch_unlock(d);
}

/* Closures. */

static void
fetch_expire(struct parked *p)
{
	struct dispatch *d = p->obj;
	struct waitctx *x = p->ctx;
	uint64_t id = x->closure;
	struct cq_closure *c = cq_closure(d->cq, id);

	dispatch_free_ctx(p);
	if (c == NULL)
		http_reply_error(p->req, ST_NOT_FOUND,
		    "closure %" PRIu64 " was forgotten", id);
	else
		http_reply_json(p->req, 200, value_json(c, 1));
}

static int
closure_arg(struct http_req *req, const struct route_match *m, uint64_t *id)
{
	char s[32], *end;

	route_seg(m, 0, s, sizeof(s));
	*id = strtoull(s, &end, 10);
	if (s[0] < '1' || s[0] > '9' || *end != '\0') {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "%s is not a closure id", s);
		return -1;
	}
	return 0;
}

/* GET: its value, once it ended (waiting up to wait=). */
static void
do_fetch(struct dispatch *d, struct http_req *req, struct cq_closure *c,
    int64_t wait)
{
	struct park_list *l;
	struct waitctx *x;
	struct parked *p;
	char key[24];

	if ((c->state != CQ_QUEUED && c->state != CQ_RUNNING) || wait == 0 ||
	    dispatch_closing(d)) {
		http_reply_json(req, 200, value_json(c, 1));
		return;
	}
	closure_idkey(c->id, key, sizeof(key));
	if ((l = park_index_list(d->fetchers, key, strlen(key))) == NULL ||
	    (x = dispatch_ctx_new(W_FETCH)) == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	x->closure = c->id;
	if ((p = dispatch_park(d, req, l, wait, fetch_expire, x)) != NULL)
		p->obj = d;
}

/* DELETE: forgets it, once it ended. */
static void
do_forget(struct dispatch *d, struct http_req *req, struct cq_closure *c,
    int64_t wait)
{
	uint64_t id = c->id;
	enum status st;

	(void)wait;
	if ((st = cq_forget(d->cq, c)) == ST_RESOURCE_EXHAUSTED)
		http_reply_error(req, st, "out of memory");
	else if (st != ST_OK)
		http_reply_error(req, ST_FAILED_PRECONDITION,
		    "closure %" PRIu64 " has not ended, or is its queue's "
		    "error not yet reported",
		    id);
	else
		http_reply_json(req, 200,
		    json_pack("{s:I}", "forgotten", (json_int_t)id));
}

/* POST .../cancel */
static void
do_cancel(struct dispatch *d, struct http_req *req, struct cq_closure *c,
    int64_t wait)
{
	enum status st;

	(void)wait;
	if ((st = cq_cancel(d->cq, c, duration_now_ms())) ==
	    ST_RESOURCE_EXHAUSTED)
		http_reply_error(req, st, "out of memory");
	else if (st != ST_OK)
		http_reply_error(req, ST_FAILED_PRECONDITION,
		    "closure %" PRIu64 " has ended (%s)", c->id,
		    cq_state_name(c->state));
	else
		http_reply_json(req, 200, value_json(c, 0));
}

/* What each of a closure's routes does (the route's op). */
struct closure_op {
	void (*fn)(struct dispatch *d, struct http_req *req,
	    struct cq_closure *c, int64_t wait);
};

const struct closure_op dispatch_closure_fetch = {do_fetch};
const struct closure_op dispatch_closure_forget = {do_forget};
const struct closure_op dispatch_closure_cancel = {do_cancel};

void
dispatch_closure_route(struct http_req *req, const struct route_match *m,
    void *arg)
{
	const struct closure_op *op = m->op;
	struct dispatch *d = arg;
	struct cq_closure *c;
	uint64_t id;
	int64_t wait;

	if (closure_arg(req, m, &id) < 0 ||
	    park_wait_arg(req, "wait", 0, &wait) < 0)
		return;
	if (m->method != ROUTE_GET && dispatch_refuse(d, req))
		return; /* the state directory cannot be written */
	dispatch_lock(d);
	if ((c = cq_closure(d->cq, id)) == NULL)
		http_reply_error(req, ST_NOT_FOUND, "no closure %" PRIu64, id);
	else
		op->fn(d, req, c, wait);
	dispatch_unlock(d);
}

/*
 * A list of closures is paged: LS_LIMIT closures at most (limit=), and at
 * most LS_SCAN ids looked at, so that no reply is built for long under
 * the lock, nor held large (eight lists of 100,000 closures took 565 MB).
 */
#define LS_LIMIT 1000
#define LS_LIMIT_MAX 10000
#define LS_SCAN 100000

struct ls_ctx {
	json_t *a;
	unsigned states; /* closurestate.h's; 0: any */
	size_t n, limit;
};

/* c's state as closurestate.h names it. */
static unsigned
state_bit(const struct cq_closure *c)
{
	switch (c->state) {
	case CQ_QUEUED: return CLOSURE_QUEUED;
	case CQ_RUNNING: return CLOSURE_RUNNING;
	case CQ_READY: return CLOSURE_READY;
	case CQ_ABORTED: return CLOSURE_ABORTED;
	case CQ_CANCELLED: return CLOSURE_CANCELLED;
	}
	return 0;
}

static int
ls_one(struct cq_closure *c, void *arg)
{
	struct ls_ctx *x = arg;

	if (x->states != 0 && (state_bit(c) & x->states) == 0)
		return 0;
	json_array_append_new(x->a, value_json(c, 0));
	return ++x->n >= x->limit;
}

void
dispatch_closures_route(struct http_req *req, const struct route_match *m,
    void *arg)
{
	struct dispatch *d = arg;
	const char *qn = http_req_arg(req, "queue");
	const char *st = http_req_arg(req, "state");
	const char *af = http_req_arg(req, "after");
	struct ls_ctx x = {NULL, 0, 0, LS_LIMIT};
	struct cq_queue *q = NULL;
	uint64_t after = 0, next;
	long limit;
	char *end;
	int more;

	(void)m;
	if (dispatch_arg_long(req, "limit", LS_LIMIT, 1, LS_LIMIT_MAX, &limit) <
	    0)
		return;
	x.limit = (size_t)limit;
	if (af != NULL) {
		after = strtoull(af, &end, 10);
		if (*af < '0' || *af > '9' || *end != '\0') {
			http_reply_error(req, ST_INVALID_ARGUMENT,
			    "after=%s is not a closure id", af);
			return;
		}
	}
	if ((x.a = json_array()) == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	if (st != NULL && (x.states = closure_states_parse(st)) == 0) {
		json_decref(x.a);
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "state=%s: one of " CLOSURE_STATE_NAMES, st);
		return;
	}
	dispatch_lock(d);
	if (qn != NULL && (q = cq_queue(d->cq, qn, 0)) == NULL) {
		json_decref(x.a);
		http_reply_error(req, ST_NOT_FOUND, "no queue %s", qn);
	} else {
		json_t *o;
		next = cq_each_closure_after(d->cq, q, after, LS_SCAN, ls_one,
		    &x, &more);
		o = json_pack("{s:o,s:b}", "closures", x.a, "more", more);
		if (more)
			json_object_set_new(o, "next",
			    json_integer((json_int_t)next));
		http_reply_json(req, 200, o);
	}
	dispatch_unlock(d);
}

/* Resources. */

struct res_ctx {
	json_t *o;
	const char *only; /* one resource, or NULL */
};

static void
res_state_json(const char *k, size_t kl, void *v, void *arg)
{
	struct res_ctx *x = arg;
	struct cq_resource_state *s = v;
	static const char *names[] = {"building", "ready", "failed"};

	if (x->only != NULL &&
	    (strlen(x->only) != kl || memcmp(x->only, k, kl) != 0))
		return;
	json_t *o = json_pack("{s:s}", "state", names[s->state]);
	if (s->message != NULL)
		json_object_set_new(o, "message", json_string(s->message));
	json_object_setn_new(x->o, k, kl, o);
}

json_t *
dispatch_resource_states(const struct cq_worker *w, const char *only)
{
	json_t *o = json_object();
	struct res_ctx x = {o, only};

	strmap_each(w->resources, res_state_json, &x);
	return o;
}

static void
res_workers(struct cq_worker *w, void *arg)
{
	struct res_ctx *x = arg;
	json_t *o = dispatch_resource_states(w, x->only);
	json_t *s = json_object_get(o, x->only);
	if (s != NULL)
		json_object_set(x->o, w->name, s);
	else if (w->live)
		json_object_set_new(x->o, w->name,
		    json_pack("{s:s}", "state", "not built"));
	json_decref(o);
}

/* Adds resource name running argv: its JSON is made here, and held whole. */
static enum status
resource_add(struct dispatch *d, const char *name, json_t *argv, char *msg,
    size_t msglen)
{
	enum status st;
	json_t *o;
	char *text;

	if (!cq_name_valid(name)) {
		errbuf_say(msg, msglen,
		    "%s is not a resource name (letters, digits, _-.:)", name);
		return ST_INVALID_ARGUMENT;
	}
	if (argv_bad(argv, msg, msglen))
		return ST_INVALID_ARGUMENT;
	o = json_pack("{s:s,s:O}", "name", name, "argv", argv);
	text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (text == NULL) {
		errbuf_say(msg, msglen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	st = cq_resource_add(d->cq, name, text, msg, msglen);
	free(text);
	return st;
}

void
dispatch_resource_route(struct http_req *req, const struct route_match *m,
    void *arg)
{
	struct dispatch *d = arg;
	char name[CQ_NAME_MAX + 2], msg[512];
	const char *def;
	json_t *body;
	enum status st;

	route_seg(m, 0, name, sizeof(name));
	if (m->method == ROUTE_PUT) {
		if (dispatch_refuse(d, req) ||
		    (body = dispatch_body(req)) == NULL)
			return;
		dispatch_lock(d);
		st = resource_add(d, name, json_object_get(body, "argv"), msg,
		    sizeof(msg));
		if (st != ST_OK)
			http_reply_error(req, st, "%s", msg);
		else
			http_reply_json(req, 200,
			    json_loads(cq_resource(d->cq, name), 0, NULL));
		dispatch_unlock(d);
		json_decref(body);
		return;
	}
	dispatch_lock(d);
	if ((def = cq_resource(d->cq, name)) == NULL) {
		http_reply_error(req, ST_NOT_FOUND, "no resource %s", name);
	} else {
		json_t *o = json_loads(def, 0, NULL), *ws = json_object();
		struct res_ctx x = {ws, name};
		cq_each_worker(d->cq, res_workers, &x);
		json_object_set_new(o, "workers", ws);
		http_reply_json(req, 200, o);
	}
	dispatch_unlock(d);
}

static void
res_list_one(const char *name, const char *json, void *arg)
{
	(void)name;
	json_array_append_new(arg, json_loads(json, 0, NULL));
}

void
dispatch_resources_route(struct http_req *req, const struct route_match *m,
    void *arg)
{
	struct dispatch *d = arg;
	json_t *a = json_array();

	(void)m;
	dispatch_lock(d);
	cq_each_resource(d->cq, res_list_one, a);
	http_reply_json(req, 200, json_pack("{s:o}", "resources", a));
	dispatch_unlock(d);
}

/* Workers. */

/* {"closures":[{"id","attempt","queue","spec":{...},"resources":[...]}]} */
void
dispatch_reply_closures(struct dispatch *d, struct http_req *req,
    struct cq_closure **cs, size_t n)
{
	struct buf b = {0};

	buf_puts(&b, "{\"closures\":[");
	for (size_t i = 0; i < n; i++) {
		struct cq_closure *c = cs[i];
		buf_printf(&b,
		    "%s{\"id\":%" PRIu64 ",\"attempt\":%ld,\"queue\":\"%s\","
		    "\"spec\":",
		    i > 0 ? "," : "", c->id, c->attempts, c->q->name);
		buf_append(&b, c->spec, c->speclen);
		buf_puts(&b, ",\"resources\":[");
		for (size_t j = 0; c->needs != NULL && c->needs[j] != NULL;
		     j++) {
			const char *r = cq_resource(d->cq, c->needs[j]);
			if (j > 0)
				buf_puts(&b, ",");
			buf_puts(&b, r != NULL ? r : "null");
		}
		buf_puts(&b, "]}");
	}
	if (buf_puts(&b, "]}") < 0) {
		buf_free(&b);
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	http_reply(req, 200, "application/json", b.data, b.len);
	buf_free(&b);
}
