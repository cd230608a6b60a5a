/*
 * dispatch.c: dispatchd's service. Requests are parsed here and applied to
 * the closure queues under d->mu; what must wait is parked; every locked
 * section ends with dispatch_unlock, which acts on what the queues
 * reported (closures that ended wake their fetchers, a queue that changed
 * settles its waiters, new work goes to parked takes, closures to stop go
 * out on their workers' heartbeats), then lets the lock go.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "dispatch_int.h"
#include "duration.h"
#include "log.h"
#include "park.h"
#include "route.h"
#include "strmap.h"
#include "task.h"
#include "text.h"
#include "timer.h"
#include "vec.h"

static void settle_queue(struct dispatch *d, struct cq_queue *q);
static void serve_takers(struct dispatch *d);

void
dispatch_lock(struct dispatch *d)
{
	pthread_mutex_lock(&d->mu);
}

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
dispatch_reply_closing(struct http_req *req)
{
	http_set_header(req, "Retry-After", "1");
	http_reply_error(req, ST_UNAVAILABLE, "dispatchd is shutting down");
}

static void
ctx_free(struct waitctx *x)
{
	if (x == NULL)
		return;
	for (size_t i = 0; i < x->ncs; i++)
		cq_closure_discard(x->cq, x->cs[i]);
	free(x->cs);
	free(x);
}

void
dispatch_free_ctx(struct parked *w)
{
	ctx_free(w->ctx);
	w->ctx = NULL;
}

struct parked *
dispatch_park(struct dispatch *d, struct http_req *req, struct park_list *l,
    int64_t wait, park_fn expire, struct waitctx *x)
{
	struct parked *w = park_add(d->park, req, l, wait, expire, "", 0);

	if (w == NULL) {
		ctx_free(x);
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return NULL;
	}
	w->ctx = x;
	w->drop = dispatch_free_ctx;
	return w;
}

struct waitctx *
dispatch_ctx_new(enum wait_kind kind)
{
	struct waitctx *x = calloc(1, sizeof(*x));

	if (x != NULL)
		x->kind = kind;
	return x;
}

static void
observe(const struct cq_event *ev, void *arg)
{
	struct dispatch *d = arg;

	if (ev->type == CQ_EV_WORK) {
		d->work = 1;
		return;
	}
	if (vec_grow(&d->events, &d->capevents, d->nevents + 1,
	        sizeof(*d->events)) < 0) {
		log_info("internal: out of memory; an event is lost");
		return;
	}
	d->events[d->nevents++] = *ev;
}

static void
answer_fetchers(struct dispatch *d, struct cq_closure *c)
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
	for (struct parked *w = l->head; w != NULL; w = l->head) {
		dispatch_free_ctx(w);
		park_take(w);
		http_reply_shared(w->req, sh);
	}
	park_list_release(l);
	http_shared_release(sh);
}

json_t *
dispatch_stops_json(struct cq_worker *w)
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

static void
answer_beat(struct dispatch *d, struct cq_worker *w, int gone)
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
			http_reply_json(p->req, 200, dispatch_beat_json(d, w));
	}
	park_list_release(l);
	if (!gone)
		cq_seen(d->cq, w, duration_now_ms());
	w->hb_parked = 0;
}

void
dispatch_answer_beat(struct dispatch *d, struct cq_worker *w)
{
	answer_beat(d, w, 0);
}

static void
answer_takers_of(struct dispatch *d, struct cq_worker *w)
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

/* Whether q's joins give up: no worker for --worker-recovery. */
static int
no_workers(struct dispatch *d, int64_t now, int64_t *until)
{
	int64_t since = cq_no_worker_since(d->cq);

	if (since == 0)
		return 0;
	*until = since + d->cfg.worker_recovery_ms;
	return now >= *until;
}

void
dispatch_unlock(struct dispatch *d)
{
	for (int round = 0; round < 1000; round++) {
		size_t n = d->nevents;
		if (dispatch_data_events(d))
			continue;
		if (n == 0 && !d->work)
			break;
		for (size_t i = 0; i < d->nevents; i++) {
			struct cq_event ev = d->events[i];
			switch (ev.type) {
			case CQ_EV_ENDED: answer_fetchers(d, ev.c); break;
			case CQ_EV_QUEUE: settle_queue(d, ev.q); break;
			case CQ_EV_STOP: answer_beat(d, ev.w, 0); break;
			case CQ_EV_WORKER_GONE:
				/* Live again: it registered anew, and the data
				 * side dropped the old incarnation then. */
				if (!ev.w->live)
					ds_worker_down(d->ds, ev.w->name,
					    ev.w->inc);
				answer_beat(d, ev.w, 1);
				answer_takers_of(d, ev.w);
				break;
			case CQ_EV_WORK: break;
			}
		}
		/* Events acted on may have reported more: keep those. */
		memmove(d->events, d->events + n,
		    (d->nevents - n) * sizeof(*d->events));
		d->nevents -= n;
		if (d->work) {
			d->work = 0;
			serve_takers(d);
		}
	}
	dispatch_journal_settle(d);
	park_unlock(d->park);
}

static void
unlock_cb(void *arg)
{
	dispatch_unlock(arg);
}

int
dispatch_closing(struct dispatch *d)
{
	return atomic_load(&d->closing);
}

int
dispatch_arg_long(struct http_req *req, const char *name, long def, long min,
    long max, long *v)
{
	const char *s = http_req_arg(req, name);
	char *end;

	*v = def;
	if (s == NULL)
		return 0;
	*v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || *v < min || *v > max) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "%s=%s is not a number from %ld to %ld", name, s, min, max);
		return -1;
	}
	return 0;
}

json_t *
dispatch_body(struct http_req *req)
{
	size_t len;
	const char *body = http_req_body(req, &len);
	json_error_t e;
	json_t *j;

	if (body == NULL || len == 0) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "the request needs a JSON body");
		return NULL;
	}
	if ((j = json_loadb(body, len, 0, &e)) == NULL || !json_is_object(j)) {
		json_decref(j);
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "the body is not a JSON object: %s",
		    j == NULL ? e.text : "not an object");
		return NULL;
	}
	return j;
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
schedule_expire(struct parked *w)
{
	struct waitctx *x = w->ctx;

	http_reply_error(w->req, ST_DEADLINE_EXCEEDED,
	    "queue %s stayed full (%zu closures queued)", x->q->name,
	    x->q->queued);
	dispatch_free_ctx(w);
}

/* {"done","queued","inflight"}: where q stands. */
static json_t *
queue_counts(const struct cq_queue *q)
{
	return json_pack("{s:b,s:I,s:I}", "done", cq_idle(q), "queued",
	    (json_int_t)q->queued, "inflight", (json_int_t)q->inflight);
}

/*
 * A join whose queue has not ended yet: UNAVAILABLE once no worker has
 * been there for --worker-recovery, else 202 with the counts.
 */
static void
reply_join_pending(struct dispatch *d, struct http_req *req, struct cq_queue *q)
{
	int64_t until;

	if (no_workers(d, duration_now_ms(), &until) && !cq_idle(q))
		http_reply_error(req, ST_UNAVAILABLE,
		    "no worker for %" PRId64 " ms (--worker-recovery); queue "
		    "%s has %zu queued, %zu in flight",
		    d->cfg.worker_recovery_ms, q->name, q->queued, q->inflight);
	else
		http_reply_json(req, 202, queue_counts(q));
}

static void
join_expire(struct parked *w)
{
	struct waitctx *x = w->ctx;

	reply_join_pending(w->obj, w->req, x->q);
	dispatch_free_ctx(w);
}

/*
 * Answers q's waiters in the order they came, as far as they can be: the
 * first one to find q's error reports it (what is in flight is cancelled
 * then), and it is cleared for the rest.
 */
static void
settle_queue(struct dispatch *d, struct cq_queue *q)
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
			} else if (no_workers(d, now, &until)) {
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
		if ((x->cs[i] = cq_closure_new(d->cq, item, &st, msg,
		         sizeof(msg))) == NULL) {
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
	struct parked *w;
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
		ctx_free(x);
		return;
	}
	json_decref(body);
	if ((w = dispatch_park(d, req, l, wait, schedule_expire, x)) != NULL)
		w->obj = d;
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
	struct parked *w;

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
	if (no_workers(d, now, &until) || wait == 0) {
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
	w = dispatch_park(d, req, l, wait, join_expire, x);
	if (w != NULL)
		w->obj = d;
}

static void
queue_route(struct http_req *req, const struct route_match *m, void *arg)
{
	struct dispatch *d = arg;
	char name[CQ_NAME_MAX + 2];
	struct cq_queue *q;
	const char *what = m->nseg > 1 ? m->seg[1] : "";
	size_t wl = m->nseg > 1 ? m->seglen[1] : 0;

	route_seg(m, 0, name, sizeof(name));
	if (!cq_name_valid(name)) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "%s is not a queue name (letters, digits, _-.:)", name);
		return;
	}
	if (m->method == ROUTE_POST && dispatch_refuse(d, req))
		return; /* the state directory cannot be written */
	dispatch_lock(d);
	if (dispatch_closing(d)) {
		dispatch_reply_closing(req);
	} else if ((q = cq_queue(d->cq, name, 1)) == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	} else if (wl == 8 && memcmp(what, "closures", 8) == 0 &&
	    m->method == ROUTE_POST) {
		schedule_route(d, req, q);
	} else if (wl == 4 && memcmp(what, "join", 4) == 0 &&
	    m->method == ROUTE_GET) {
		join_route(d, req, q, 0);
	} else if (wl == 4 && memcmp(what, "done", 4) == 0 &&
	    m->method == ROUTE_GET) {
		join_route(d, req, q, 1);
	} else {
		http_reply_error(req, ST_NOT_FOUND, "no such resource");
	}
	dispatch_unlock(d);
}

/* Closures. */

static void
fetch_expire(struct parked *w)
{
	struct dispatch *d = w->obj;
	struct cq_closure *c = cq_closure(d->cq, (uint64_t)w->limit);

	dispatch_free_ctx(w);
	if (c == NULL)
		http_reply_error(w->req, ST_NOT_FOUND,
		    "closure %" PRId64 " was forgotten", w->limit);
	else
		http_reply_json(w->req, 200, value_json(c, 1));
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

static void
closure_route(struct http_req *req, const struct route_match *m, void *arg)
{
	struct dispatch *d = arg;
	struct cq_closure *c;
	uint64_t id;
	int64_t wait;
	char key[24];

	if (closure_arg(req, m, &id) < 0 ||
	    park_wait_arg(req, "wait", 0, &wait) < 0)
		return;
	if (m->method != ROUTE_GET && dispatch_refuse(d, req))
		return; /* the state directory cannot be written */
	dispatch_lock(d);
	if ((c = cq_closure(d->cq, id)) == NULL) {
		http_reply_error(req, ST_NOT_FOUND, "no closure %" PRIu64, id);
	} else if (m->nseg == 2) { /* POST .../cancel */
		if (m->seglen[1] != 6 || memcmp(m->seg[1], "cancel", 6) != 0)
			http_reply_error(req, ST_NOT_FOUND, "no such resource");
		else if (cq_cancel(d->cq, c, duration_now_ms()) != ST_OK)
			http_reply_error(req, ST_FAILED_PRECONDITION,
			    "closure %" PRIu64 " has ended (%s)", id,
			    cq_state_name(c->state));
		else
			http_reply_json(req, 200, value_json(c, 0));
	} else if (m->method == ROUTE_DELETE) {
		if (cq_forget(d->cq, c) != ST_OK)
			http_reply_error(req, ST_FAILED_PRECONDITION,
			    "closure %" PRIu64 " has not ended, or is its "
			    "queue's error not yet reported",
			    id);
		else
			http_reply_json(req, 200,
			    json_pack("{s:I}", "forgotten", (json_int_t)id));
	} else if (c->state == CQ_QUEUED || c->state == CQ_RUNNING) {
		if (wait == 0 || dispatch_closing(d)) {
			http_reply_json(req, 200, value_json(c, 1));
		} else {
			struct park_list *l;
			closure_idkey(id, key, sizeof(key));
			l = park_index_list(d->fetchers, key, strlen(key));
			if (l == NULL) {
				http_reply_error(req, ST_RESOURCE_EXHAUSTED,
				    "out of memory");
			} else {
				struct parked *w = dispatch_park(d, req, l,
				    wait, fetch_expire, NULL);
				if (w != NULL) {
					w->obj = d;
					w->limit = (int64_t)id;
				}
			}
		}
	} else {
		http_reply_json(req, 200, value_json(c, 1));
	}
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
	int state; /* -1: any */
	size_t n, limit;
};

static int
ls_one(struct cq_closure *c, void *arg)
{
	struct ls_ctx *x = arg;

	if (x->state >= 0 && (int)c->state != x->state)
		return 0;
	json_array_append_new(x->a, value_json(c, 0));
	return ++x->n >= x->limit;
}

static void
closures_route(struct http_req *req, const struct route_match *m, void *arg)
{
	struct dispatch *d = arg;
	const char *qn = http_req_arg(req, "queue");
	const char *st = http_req_arg(req, "state");
	const char *af = http_req_arg(req, "after");
	struct ls_ctx x = {NULL, -1, 0, LS_LIMIT};
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
	if (st != NULL) {
		static const char *names[] = {"queued", "running", "ready",
		    "aborted", "cancelled"};
		for (int i = 0; i < 5; i++)
			if (strcmp(st, names[i]) == 0)
				x.state = i;
		if (x.state < 0) {
			json_decref(x.a);
			http_reply_error(req, ST_INVALID_ARGUMENT,
			    "state=%s: one of queued, running, ready, "
			    "aborted, cancelled",
			    st);
			return;
		}
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

/* Status. */

static void
queue_json(struct cq_queue *q, void *arg)
{
	json_t *a = arg;

	json_array_append_new(a,
	    json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o}", "name", q->name,
	        "queued", (json_int_t)q->queued, "inflight",
	        (json_int_t)q->inflight, "scheduled", (json_int_t)q->scheduled,
	        "done", (json_int_t)q->done, "failed", (json_int_t)q->failed,
	        "cancelled", (json_int_t)q->cancelled, "retried",
	        (json_int_t)q->retried, "error",
	        q->error != NULL ? json_integer((json_int_t)q->error->id) :
	                           json_null()));
}

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

struct workers_ctx {
	json_t *a;
	int64_t now;
};

static void
worker_json(struct cq_worker *w, void *arg)
{
	struct workers_ctx *x = arg;
	json_t *run = json_array(), *res = json_object();
	struct res_ctx rx = {res, NULL};
	char inc[17];

	for (struct cq_closure *c = w->run_head; c != NULL; c = c->next)
		json_array_append_new(run, json_integer((json_int_t)c->id));
	strmap_each(w->resources, res_state_json, &rx);
	json_t *o = json_pack("{s:s,s:b,s:I,s:I,s:o,s:I,s:I,s:o,s:I}", "name",
	    w->name, "live", w->live, "slots", (json_int_t)w->slots, "running",
	    (json_int_t)w->running, "closures", run, "incarnations",
	    (json_int_t)w->incarnations, "deaths", (json_int_t)w->deaths,
	    "resources", res, "pinned", (json_int_t)w->pinned.count);
	if (w->live)
		json_object_set_new(o, "incarnation",
		    json_string(task_format_incarnation(w->inc, inc)));
	if (w->why != NULL)
		json_object_set_new(o, "last_failure", json_string(w->why));
	json_object_set_new(o, "healthy",
	    json_boolean(!cq_worker_sick(w, x->now)));
	json_object_set_new(o, "start_failures",
	    json_integer((json_int_t)w->start_failures));
	if (cq_worker_sick(w, x->now))
		json_object_set_new(o, "unhealthy",
		    json_pack("{s:s,s:I}", "message",
		        w->sick_why != NULL ? w->sick_why : "?", "retry_in_ms",
		        (json_int_t)(w->sick_until - x->now)));
	json_array_append_new(x->a, o);
}

static json_t *
status_json(struct dispatch *d)
{
	const struct cq_view *v = cq_view(d->cq);
	json_t *qs = json_array(), *ws = json_array();
	struct workers_ctx wx = {ws, duration_now_ms()};

	cq_each_queue(d->cq, queue_json, qs);
	cq_each_worker(d->cq, worker_json, &wx);
	return json_pack(
	    "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:o}",
	    "store_bytes", (json_int_t)(v->value_bytes + v->spec_bytes),
	    "max_store_bytes", (json_int_t)cq_config(d->cq)->max_store,
	    "queued", (json_int_t)v->queued, "inflight",
	    (json_int_t)v->inflight, "closures", (json_int_t)v->closures,
	    "done", (json_int_t)v->done, "failed", (json_int_t)v->failed,
	    "retried", (json_int_t)v->retried, "cancelled",
	    (json_int_t)v->cancelled, "aborted", (json_int_t)v->aborted,
	    "workers_live", (json_int_t)v->workers_live, "worker_deaths",
	    (json_int_t)v->deaths, "queues", qs, "workers", ws);
}

static void
status_route(struct http_req *req, const struct route_match *m, void *arg)
{
	struct dispatch *d = arg;

	(void)m;
	dispatch_lock(d);
	http_reply_json(req, 200, status_json(d));
	dispatch_unlock(d);
}

/*
 * What dispatchd takes, so that a client stops reading its input there
 * instead of holding all of it first (a --stdin of /dev/zero).
 */
static void
limits_route(struct http_req *req, const struct route_match *m, void *arg)
{
	struct dispatch *d = arg;
	const struct cq_config *c = cq_config(d->cq);

	(void)m;
	http_reply_json(req, 200,
	    json_pack("{s:I,s:I,s:I,s:I}", "max_closure_size",
	        (json_int_t)c->max_spec, "max_batch",
	        (json_int_t)d->cfg.max_batch, "max_request_bytes",
	        (json_int_t)d->cfg.max_body, "queue_max",
	        (json_int_t)c->queue_max));
}

/* Resources. */

static void
res_workers(struct cq_worker *w, void *arg)
{
	struct res_ctx *x = arg;
	json_t *o = json_object();
	struct res_ctx rx = {o, x->only};

	strmap_each(w->resources, res_state_json, &rx);
	json_t *s = json_object_get(o, x->only);
	if (s != NULL)
		json_object_set(x->o, w->name, s);
	else if (w->live)
		json_object_set_new(x->o, w->name,
		    json_pack("{s:s}", "state", "not built"));
	json_decref(o);
}

static void
resource_route(struct http_req *req, const struct route_match *m, void *arg)
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
		st = cq_resource_add(d->cq, name, json_object_get(body, "argv"),
		    msg, sizeof(msg));
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

static void
resources_route(struct http_req *req, const struct route_match *m, void *arg)
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
static void
reply_closures(struct dispatch *d, struct http_req *req, struct cq_closure **cs,
    size_t n)
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

#define TAKE_MAX 256

static void
take_expire(struct parked *w)
{
	dispatch_free_ctx(w);
	http_reply(w->req, 200, "application/json", "{\"closures\":[]}", 15);
}

/* Gives work to parked takes, oldest first, while there is any. */
static void
serve_takers(struct dispatch *d)
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
		reply_closures(d, p->req, cs, n);
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
		reply_closures(d, req, cs, n);
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
beat_expire(struct parked *w)
{
	struct waitctx *x = w->ctx;

	x->w->hb_parked = 0;
	cq_seen(NULL, x->w, duration_now_ms());
	http_reply_json(w->req, 200, dispatch_beat_json(w->obj, x->w));
	dispatch_free_ctx(w);
}

/* The client of a parked heartbeat went away: its worker is gone. */
static void
beat_drop(struct parked *p)
{
	struct waitctx *x = p->ctx;
	struct dispatch *d = p->obj;

	x->w->hb_parked = 0;
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

	if (w->nstop > 0 || wait == 0 || w->hb_parked ||
	    ds_worker_changed(d->ds, w->name, 0)) {
		http_reply_json(req, 200, dispatch_beat_json(d, w));
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
		w->hb_parked = 1;
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
		if (cq_report(d->cq, w, (uint64_t)json_integer_value(jid),
		        (long)json_integer_value(jat), aborted, &res, now, msg,
		        sizeof(msg)) != ST_OK) {
			json_array_append(stale, jid);
			free(res.out);
			free(res.err);
			free(res.message);
		}
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

static void
worker_route(struct http_req *req, const struct route_match *m, void *arg)
{
	struct dispatch *d = arg;
	char name[CQ_NAME_MAX + 2], msg[512], inc[17];
	const char *what = m->nseg > 1 ? m->seg[1] : "";
	size_t wl = m->nseg > 1 ? m->seglen[1] : 0;
	struct cq_worker *w;
	json_t *body = NULL;
	int64_t wait, now = duration_now_ms();
	long max, slots;
	enum status st;

	route_seg(m, 0, name, sizeof(name));
	if (!cq_name_valid(name)) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "%s is not a worker name", name);
		return;
	}
	if (park_wait_arg(req, "wait", 0, &wait) < 0 ||
	    dispatch_arg_long(req, "max", 1, 1, TAKE_MAX, &max) < 0 ||
	    dispatch_arg_long(req, "take", 0, 0, TAKE_MAX, &slots) < 0)
		return;
	/* Heartbeats and progress reports go on: the rest is refused while
	 * the state directory cannot be written. */
	if (!(wl == 9 && memcmp(what, "heartbeat", 9) == 0) &&
	    !(wl == 5 && memcmp(what, "tasks", 5) == 0) &&
	    dispatch_refuse(d, req))
		return;
	if (m->method == ROUTE_POST &&
	    (m->nseg == 1 || (wl == 7 && memcmp(what, "results", 7) == 0) ||
	        (wl == 6 && memcmp(what, "splits", 6) == 0) || m->nseg == 3)) {
		if ((body = dispatch_body(req)) == NULL)
			return;
	}
	dispatch_lock(d);
	if (dispatch_closing(d)) {
		dispatch_reply_closing(req);
		goto out;
	}
	if (m->nseg == 1 && m->method == ROUTE_POST) {
		json_t *js = json_object_get(body, "slots");
		long n = json_is_integer(js) ? (long)json_integer_value(js) : 1;
		if (n < 1 || n > 4096) {
			http_reply_error(req, ST_INVALID_ARGUMENT,
			    "slots must be 1 to 4096");
			goto out;
		}
		if ((st = ds_worker_admit(d->ds, name, msg, sizeof(msg))) !=
		    ST_OK) {
			http_reply_error(req, st, "%s", msg);
			goto out;
		}
		if ((w = cq_register(d->cq, name, n, now, msg, sizeof(msg))) ==
		    NULL) {
			http_reply_error(req, ST_INVALID_ARGUMENT, "%s", msg);
			goto out;
		}
		dispatch_data_register(d, w, body);
		log_debug("worker %s registered (%ld slots)", name, n);
		http_reply_json(req, 200,
		    json_pack("{s:s,s:I,s:I}", "incarnation",
		        task_format_incarnation(w->inc, inc),
		        "heartbeat_timeout_ms",
		        (json_int_t)cq_config(d->cq)->hb_timeout_ms, "index",
		        (json_int_t)w->index));
		goto out;
	}
	if ((w = cq_worker(d->cq, name)) == NULL) {
		http_reply_error(req, ST_ABORTED, "%s is not registered", name);
		goto out;
	}
	if ((st = cq_worker_check(w, http_req_arg(req, "incarnation"), msg,
	         sizeof(msg))) != ST_OK) {
		http_reply_error(req, st, "%s", msg);
		goto out;
	}
	if (m->nseg == 1 && m->method == ROUTE_DELETE) {
		cq_worker_leave(d->cq, w, now);
		log_debug("worker %s left", name);
		http_reply_json(req, 200, json_pack("{s:b}", "left", 1));
	} else if (wl == 9 && memcmp(what, "heartbeat", 9) == 0) {
		cq_seen(d->cq, w, now);
		heartbeat(d, req, w, wait);
	} else if (wl == 6 && memcmp(what, "splits", 6) == 0) {
		cq_seen(d->cq, w, now);
		dispatch_data_lease(d, req, w, body, wait);
	} else if (wl == 5 && memcmp(what, "tasks", 5) == 0 && m->nseg == 3) {
		char task[32];
		route_seg(m, 2, task, sizeof(task));
		dispatch_data_task(d, req, w, task, body);
	} else if (wl == 4 && memcmp(what, "take", 4) == 0) {
		cq_seen(d->cq, w, now);
		take(d, req, w, max, wait);
	} else if (wl == 7 && memcmp(what, "results", 7) == 0) {
		results(d, req, w, body, slots, wait);
	} else if (wl == 9 && memcmp(what, "resources", 9) == 0 &&
	    m->nseg == 3) {
		char res[CQ_NAME_MAX + 2];
		const char *s =
		    json_string_value(json_object_get(body, "state"));
		int state = -1;
		route_seg(m, 2, res, sizeof(res));
		if (s != NULL)
			state = strcmp(s, "building") == 0 ? CQ_RES_BUILDING :
			    strcmp(s, "ready") == 0        ? CQ_RES_READY :
			    strcmp(s, "failed") == 0       ? CQ_RES_FAILED :
			                                     -1;
		if (state < 0 || cq_resource(d->cq, res) == NULL) {
			http_reply_error(req, ST_INVALID_ARGUMENT,
			    "state must be building, ready or failed, for a "
			    "known resource");
		} else {
			cq_resource_state(w, res, state,
			    json_string_value(
			        json_object_get(body, "message")));
			http_reply_json(req, 200, json_pack("{s:b}", "ok", 1));
		}
	} else {
		http_reply_error(req, ST_NOT_FOUND, "no such resource");
	}
out:
	dispatch_unlock(d);
	json_decref(body);
}

static void
workers_route(struct http_req *req, const struct route_match *m, void *arg)
{
	struct dispatch *d = arg;
	json_t *a = json_array();
	struct workers_ctx wx = {a, duration_now_ms()};

	(void)m;
	dispatch_lock(d);
	cq_each_worker(d->cq, worker_json, &wx);
	http_reply_json(req, 200, json_pack("{s:o}", "workers", a));
	dispatch_unlock(d);
}

/* Timers. */

static void
mark_queue(struct cq_queue *q, void *arg)
{
	struct dispatch *d = arg;
	struct cq_event ev = {CQ_EV_QUEUE, NULL, q, NULL};

	observe(&ev, d);
}

static void
scan(struct timer *t)
{
	struct dispatch *d =
	    (struct dispatch *)((char *)t - offsetof(struct dispatch, scan));
	int64_t now = duration_now_ms(), hb = cq_config(d->cq)->hb_timeout_ms,
	        until;

	cq_scan(d->cq, now);
	ds_scan(d->ds, now);
	/* Joins give up once no worker has been there long enough. */
	if (no_workers(d, now, &until))
		cq_each_queue(d->cq, mark_queue, d);
	timers_add(park_timers(d->park), &d->scan,
	    now + (hb / 5 > 0 ? hb / 5 : 1));
}

static void
log_worker(struct cq_worker *w, void *arg)
{
	(void)arg;
	log_info("watchdog: worker %s: %s, %zu running, %zu pinned, %lu "
	         "deaths%s%s",
	    w->name, w->live ? "live" : "down", w->running, w->pinned.count,
	    w->deaths, w->why != NULL ? ", last failure: " : "",
	    w->why != NULL ? w->why : "");
}

static void
log_queue(struct cq_queue *q, void *arg)
{
	(void)arg;
	log_info("watchdog: queue %s: %zu queued, %zu in flight, %lu done, %lu "
	         "failed%s",
	    q->name, q->queued, q->inflight, q->done, q->failed,
	    q->error != NULL ? ", an error to report" : "");
}

static void
watchdog(struct timer *t)
{
	struct dispatch *d = (struct dispatch *)((char *)t -
	    offsetof(struct dispatch, watchdog));
	int64_t now = duration_now_ms();
	const struct cq_view *v = cq_view(d->cq);
	char dur[32];

	if (v->inflight > 0 && now - cq_last_end(d->cq) >= d->cfg.watchdog_ms) {
		if (!d->stall_logged) {
			log_info(
			    "watchdog: no closure ended for %s with %zu in "
			    "flight",
			    duration_format(now - cq_last_end(d->cq), dur,
			        sizeof(dur)),
			    v->inflight);
			cq_each_queue(d->cq, log_queue, NULL);
			cq_each_worker(d->cq, log_worker, NULL);
			d->stall_logged = 1;
		}
	} else {
		d->stall_logged = 0;
	}
	timers_add(park_timers(d->park), &d->watchdog,
	    now + d->cfg.watchdog_ms / 4 + 1);
}

/* The service. */

struct dispatch *
dispatch_new(const struct dispatch_config *cfg, char *err, size_t errlen)
{
	struct dispatch *d = calloc(1, sizeof(*d));
	int64_t now = duration_now_ms();

	if (d == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&d->mu, NULL);
	d->cfg = *cfg;
	if (d->cfg.worker_recovery_ms == 0)
		d->cfg.worker_recovery_ms = 3600 * 1000;
	if (d->cfg.max_batch == 0)
		d->cfg.max_batch = 100000;

	if ((d->park = park_new(&d->mu, err, errlen)) == NULL)
		goto fail;
	if ((d->fetchers = park_index_new()) == NULL ||
	    (d->qwait = park_index_new()) == NULL ||
	    (d->beats = park_index_new()) == NULL ||
	    (d->leasers = park_index_new()) == NULL ||
	    (d->ds = ds_new(&cfg->ds, dispatch_data_observe, d)) == NULL ||
	    (d->cq = cq_new(&cfg->cq, observe, d, now)) == NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	/* As dispatchd sets it: a schedule of many closures, or a value. */
	if (d->cfg.max_body == 0)
		d->cfg.max_body =
		    cq_config(d->cq)->max_spec / 3 * 4 + (64u << 20);
	park_set_max_wait(d->park, cfg->max_wait_ms);
	d->scan.fire = scan;
	d->watchdog.fire = watchdog;
	dispatch_lock(d);
	park_set_unlock(d->park, unlock_cb, d);
	timers_add(park_timers(d->park), &d->scan, now + 100);
	if (d->cfg.watchdog_ms > 0)
		timers_add(park_timers(d->park), &d->watchdog,
		    now + d->cfg.watchdog_ms / 4 + 1);
	dispatch_unlock(d);
	return d;
fail:
	dispatch_free(d);
	return NULL;
}

static void
drain(struct park_list *l, void *arg)
{
	(void)arg;
	park_list_hold(l);
	while (l->head != NULL) {
		struct parked *w = l->head;
		struct waitctx *x = w->ctx;
		if (x != NULL && x->kind == W_HEARTBEAT)
			x->w->hb_parked = 0;
		dispatch_free_ctx(w);
		park_take(w);
		dispatch_reply_closing(w->req);
	}
	park_list_release(l);
}

void
dispatch_shutdown(struct dispatch *d)
{
	dispatch_lock(d);
	atomic_store(&d->closing, 1);
	park_index_each(d->fetchers, drain, NULL);
	park_index_each(d->qwait, drain, NULL);
	park_index_each(d->beats, drain, NULL);
	park_index_each(d->leasers, drain, NULL);
	drain(&d->takers, NULL);
	dispatch_unlock(d);
	if (d->commit != NULL)
		commit_detach(d->commit);
}

void
dispatch_free(struct dispatch *d)
{
	if (d == NULL)
		return;
	park_free(d->park);
	park_index_free(d->fetchers);
	park_index_free(d->qwait);
	park_index_free(d->beats);
	park_index_free(d->leasers);
	if (d->commit != NULL && commit_free(d->commit) < 0)
		log_info("some changes could not be written to the state "
		         "directory before exit");
	buf_free(&d->jrec);
	cq_free(d->cq);
	ds_free(d->ds);
	free(d->events);
	free(d->dsev);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

static void
metrics(struct buf *b, void *arg)
{
	struct dispatch *d = arg;
	const struct cq_view *v;

	dispatch_lock(d);
	v = cq_view(d->cq);
	buf_printf(b,
	    "# HELP muster_dispatch_queued Closures waiting for a worker.\n"
	    "# TYPE muster_dispatch_queued gauge\nmuster_dispatch_queued %zu\n"
	    "# HELP muster_dispatch_inflight Closures running on a worker.\n"
	    "# TYPE muster_dispatch_inflight gauge\n"
	    "muster_dispatch_inflight %zu\n"
	    "# HELP muster_dispatch_closures Closures held (values "
	    "included).\n# TYPE muster_dispatch_closures gauge\n"
	    "muster_dispatch_closures %zu\n"
	    "# HELP muster_dispatch_value_bytes Bytes of values held.\n"
	    "# TYPE muster_dispatch_value_bytes gauge\n"
	    "muster_dispatch_value_bytes %zu\n"
	    "# HELP muster_dispatch_store_bytes Bytes of closures and "
	    "values held (--max-store-bytes).\n"
	    "# TYPE muster_dispatch_store_bytes gauge\n"
	    "muster_dispatch_store_bytes %zu\n"
	    "# HELP muster_dispatch_done_total Closures that ran to an end.\n"
	    "# TYPE muster_dispatch_done_total counter\n"
	    "muster_dispatch_done_total %lu\n"
	    "# HELP muster_dispatch_failed_total Closures that ended badly.\n"
	    "# TYPE muster_dispatch_failed_total counter\n"
	    "muster_dispatch_failed_total %lu\n"
	    "# HELP muster_dispatch_retried_total Retries (--retry-exit).\n"
	    "# TYPE muster_dispatch_retried_total counter\n"
	    "muster_dispatch_retried_total %lu\n"
	    "# HELP muster_dispatch_cancelled_total Closures cancelled.\n"
	    "# TYPE muster_dispatch_cancelled_total counter\n"
	    "muster_dispatch_cancelled_total %lu\n"
	    "# HELP muster_dispatch_aborted_total Closures given up after "
	    "killing workers.\n# TYPE muster_dispatch_aborted_total counter\n"
	    "muster_dispatch_aborted_total %lu\n"
	    "# HELP muster_dispatch_requeued_total Attempts put back (worker "
	    "lost or preempted).\n# TYPE muster_dispatch_requeued_total "
	    "counter\nmuster_dispatch_requeued_total %lu\n"
	    "# HELP muster_dispatch_stale_total Results of superseded "
	    "attempts, dropped.\n# TYPE muster_dispatch_stale_total counter\n"
	    "muster_dispatch_stale_total %lu\n"
	    "# HELP muster_dispatch_start_failures_total Closures a worker "
	    "could not start and gave back.\n"
	    "# TYPE muster_dispatch_start_failures_total counter\n"
	    "muster_dispatch_start_failures_total %lu\n"
	    "# HELP muster_dispatch_workers Workers known.\n"
	    "# TYPE muster_dispatch_workers gauge\n"
	    "muster_dispatch_workers %zu\n"
	    "# HELP muster_dispatch_workers_live Workers registered and "
	    "heard from.\n# TYPE muster_dispatch_workers_live gauge\n"
	    "muster_dispatch_workers_live %zu\n"
	    "# HELP muster_dispatch_worker_deaths_total Workers failed.\n"
	    "# TYPE muster_dispatch_worker_deaths_total counter\n"
	    "muster_dispatch_worker_deaths_total %lu\n",
	    v->queued, v->inflight, v->closures, v->value_bytes,
	    v->value_bytes + v->spec_bytes, v->done, v->failed, v->retried,
	    v->cancelled, v->aborted, v->put_back, v->stale, v->start_failures,
	    v->workers, v->workers_live, v->deaths);
	{
		struct ds_view dv;
		ds_view(d->ds, &dv);
		buf_printf(b,
		    "# HELP muster_data_datasets Datasets registered.\n"
		    "# TYPE muster_data_datasets gauge\n"
		    "muster_data_datasets %zu\n"
		    "# HELP muster_data_jobs Jobs not collected.\n"
		    "# TYPE muster_data_jobs gauge\nmuster_data_jobs %zu\n"
		    "# HELP muster_data_tasks Tasks of those jobs.\n"
		    "# TYPE muster_data_tasks gauge\nmuster_data_tasks %zu\n"
		    "# HELP muster_data_job_clients Consumers holding a job.\n"
		    "# TYPE muster_data_job_clients gauge\n"
		    "muster_data_job_clients %zu\n"
		    "# HELP muster_data_splits_open Splits leased and not yet "
		    "all delivered.\n# TYPE muster_data_splits_open gauge\n"
		    "muster_data_splits_open %zu\n"
		    "# HELP muster_data_leases_total Splits leased.\n"
		    "# TYPE muster_data_leases_total counter\n"
		    "muster_data_leases_total %lu\n"
		    "# HELP muster_data_released_total Splits of dead workers "
		    "put back to lease again.\n"
		    "# TYPE muster_data_released_total counter\n"
		    "muster_data_released_total %lu\n"
		    "# HELP muster_data_jobs_collected_total Jobs collected.\n"
		    "# TYPE muster_data_jobs_collected_total counter\n"
		    "muster_data_jobs_collected_total %lu\n",
		    dv.datasets, dv.jobs, dv.tasks, dv.clients, dv.leased,
		    dv.leases, dv.releases, dv.collected);
	}
	dispatch_unlock(d);
}

static int
health(void *arg, char *why, size_t len)
{
	struct dispatch *d = arg;

	if (daemon_health_lock(&d->mu, "dispatchd", why, len) < 0)
		return -1;
	dispatch_unlock(d);
	return 0;
}

static void
shutdown_cb(void *arg)
{
	dispatch_shutdown(arg);
}

static void
gone_cb(struct http_req *req, void *arg)
{
	struct dispatch *d = arg;

	park_gone(d->park, req);
}

static const struct route routes[] = {
    {"/v1/queues/*/*", ROUTE_GET | ROUTE_POST, queue_route},
    {"/v1/closures", ROUTE_GET, closures_route},
    {"/v1/closures/*", ROUTE_GET | ROUTE_DELETE, closure_route},
    {"/v1/closures/*/*", ROUTE_POST, closure_route},
    {"/v1/status", ROUTE_GET, status_route},
    {"/v1/limits", ROUTE_GET, limits_route},
    {"/v1/workers", ROUTE_GET, workers_route},
    {"/v1/workers/*", ROUTE_POST | ROUTE_DELETE, worker_route},
    {"/v1/workers/*/*", ROUTE_POST, worker_route},
    {"/v1/workers/*/*/*", ROUTE_POST, worker_route},
    {"/v1/resources", ROUTE_GET, resources_route},
    {"/v1/datasets", ROUTE_GET | ROUTE_POST, dispatch_datasets_route},
    {"/v1/datasets/*", ROUTE_GET, dispatch_datasets_route},
    {"/v1/datasets/*/splits", ROUTE_GET, dispatch_datasets_route},
    {"/v1/jobs", ROUTE_GET | ROUTE_POST, dispatch_jobs_route},
    {"/v1/jobs/*", ROUTE_GET, dispatch_jobs_route},
    {"/v1/jobs/*/checkpoint", ROUTE_GET, dispatch_jobs_route},
    {"/v1/clients/*", ROUTE_DELETE, dispatch_clients_route},
    {"/v1/clients/*/heartbeat", ROUTE_POST, dispatch_clients_route},
    {"/v1/resources/*", ROUTE_GET | ROUTE_PUT, resource_route},
};

void
dispatch_service(struct dispatch *d, struct daemon_service *svc)
{
	memset(svc, 0, sizeof(*svc));
	svc->name = "dispatchd";
	svc->routes = routes;
	svc->nroutes = sizeof(routes) / sizeof(routes[0]);
	svc->arg = d;
	svc->metrics = metrics;
	svc->health = health;
	svc->shutdown = shutdown_cb;
	svc->gone = gone_cb;
	svc->commit = d->commit;
}
