/*
 * coord_tasks.c: the task registry over HTTP.
 *
 *   GET  /v1/tasks                              every task, barriers, counts
 *   GET  /v1/tasks/JOB/INDEX                    one task
 *   POST /v1/tasks/JOB/INDEX/register?incarnation=HEX
 *   POST /v1/tasks/JOB/INDEX/heartbeat?incarnation=HEX
 *   POST /v1/tasks/JOB/INDEX/error?incarnation=HEX   {"code":C,"message":M}
 *   POST /v1/tasks/JOB/INDEX/wait-all?incarnation=HEX&wait=DUR
 *   POST /v1/tasks/JOB/INDEX/shutdown?incarnation=HEX&wait=DUR[&barrier=0]
 *   POST /v1/tasks/JOB/INDEX/reset
 *   GET  /v1/errors?wait=DUR                    errors to propagate
 *   GET  /v1/epoch?after=E&wait=DUR             the epoch, once past E
 *
 * A long poll that ends before its answer is ready gets 202 with progress,
 * and is re-issued.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "duration.h"
#include "log.h"
#include "parse.h"
#include "task.h"
#include "token.h"

#define POLL_DEFAULT_MS 30000

static json_t *
error_json(const struct reg_task *t)
{
	return json_pack("{s:s,s:s,s:s,s:b}", "task", t->name, "code",
	    status_name(t->err), "message", t->errmsg != NULL ? t->errmsg : "",
	    "reported", t->err_reported);
}

/*
 * The errors every task should hear of: those of non-recoverable tasks in
 * this epoch, until reset. A failed task that then disconnects stays on
 * the list, so a poller between two polls cannot miss it.
 */
static json_t *
errors_json(struct coord *co)
{
	json_t *arr = json_array();
	size_t n = co->rv->ntasks;

	for (size_t i = 0; arr != NULL && i < n; i++) {
		struct reg_task *t = registry_task(co->reg, i);
		if (registry_error_visible(t))
			json_array_append_new(arr, error_json(t));
	}
	return json_pack("{s:o}", "errors", arr);
}

static json_t *
task_json(const struct reg_task *t, int64_t now)
{
	char inc[17];
	json_t *o = json_pack("{s:s,s:s,s:b}", "task", t->name, "state",
	    registry_state_name(t->state), "recoverable", t->recoverable);

	if (o == NULL)
		return NULL;
	json_object_set_new(o, "incarnation",
	    t->incarnation != 0 ?
	        json_string(task_format_incarnation(t->incarnation, inc)) :
	        json_null());
	json_object_set_new(o, "heartbeat_age_ms",
	    t->state == REG_CONNECTED ? json_integer(now - t->last_heartbeat) :
	                                json_null());
	json_object_set_new(o, "error",
	    t->errmsg != NULL ? error_json(t) : json_null());
	return o;
}

static json_t *epoch_json(struct coord *co, long after);

void
coord_tasks_react(struct coord *co, const struct reg_event *ev)
{
	const struct reg_task *t = ev->task;
	char m[1024];
	int64_t rev;
	size_t n;

	switch (ev->type) {
	case REG_TASK_FAILED:
		/* Its barriers fail whether or not the others hear of it:
		 * they cannot pass without it. */
		barriers_task_failed(co->bars, ev->task);
		if (!ev->propagate)
			break;
		coord_answer_all(&co->error_waiters, ST_OK, NULL,
		    co->error_waiters.head != NULL ? errors_json(co) : NULL);
		snprintf(m, sizeof(m), "task %s failed: %s: %s", t->name,
		    status_name(t->err), t->errmsg != NULL ? t->errmsg : "");
		coord_answer_all(&co->all_waiters, ST_INTERNAL, m, NULL);
		break;
	case REG_TASK_CONNECTED: coord_barriers_rejoined(co, ev->task); break;
	case REG_TASK_LEFT: barriers_task_left(co->bars, ev->task); break;
	case REG_ALL_CONNECTED:
		barriers_all_connected(co->bars);
		coord_answer_all(&co->all_waiters, ST_OK, NULL,
		    co->all_waiters.head != NULL ?
		        json_pack("{s:I}", "tasks",
		            (json_int_t)co->rv->ntasks) :
		        NULL);
		break;
	case REG_EPOCH:
		barriers_reset(co->bars, ST_ABORTED, "the cluster was reset");
		/* The run's own keys (the preemption notice, step counters)
		 * go with it; the next run must not act on them. */
		n = kv_delete(co->kv, COORD_RUN_PREFIX,
		    strlen(COORD_RUN_PREFIX), &rev);
		log_info("no task connected: epoch %ld begins (%zu keys under "
		         "%s/ removed)",
		    co->rv->epoch, n, COORD_RUN_PREFIX);
		/* Each waited past the epoch that just ended. */
		coord_answer_all(&co->epoch_waiters, ST_OK, NULL,
		    co->epoch_waiters.head != NULL ?
		        epoch_json(co, co->rv->epoch - 1) :
		        NULL);
		break;
	}
}

/* A scan more than this late counts as time coordd stood still. */
#define SCAN_LATE_MS 100

static void
coord_heard(struct coord *co, const struct reg_task *t)
{
	struct http_server *srv = atomic_load(&co->srv);
	struct coord_heard *h = &co->heard[t->index];

	if (srv != NULL)
		http_attention(srv, &h->attn);
	else
		h->attn.worker = -1;
	h->stalled = co->stalled;
}

/*
 * How long coordd could not have heard t since its last heartbeat: the
 * worker thread that reads t's connection was busy in handlers, or the
 * whole process stood still.
 */
static int64_t
excused(const struct reg_task *t, void *arg)
{
	struct coord *co = arg;
	struct http_server *srv = atomic_load(&co->srv);
	const struct coord_heard *h = &co->heard[t->index];
	int64_t busy = co->stalled - h->stalled;

	if (srv != NULL)
		busy += http_attention_lost(srv, &h->attn, duration_now_ms());
	return busy;
}

void
coord_tasks_scan(struct timer *tm)
{
	struct coord *co =
	    (struct coord *)((char *)tm - offsetof(struct coord, scan));
	int64_t now = duration_now_ms(), hb = co->rv->hb_timeout;
	int64_t late = tm->at > 0 ? now - tm->at : 0;

	/* A scan that ran late found coordd itself stopped (starved of CPU,
	 * stopped by a signal): heartbeats may wait unread meanwhile. */
	if (late > SCAN_LATE_MS)
		co->stalled += late;
	registry_scan(co->reg, now, excused, co);
	/* A fifth of the timeout: detection within 1.2 timeouts, which
	 * leaves room under 1.25 for a timer that fires a little late. */
	timers_add(park_timers(co->park), &co->scan,
	    now + (hb / 5 > 0 ? hb / 5 : 1));
}

static void
drain_closing(struct park_list *l)
{
	while (l->head != NULL) {
		struct parked *w = l->head;
		park_take(w);
		coord_reply_closing(w->req);
	}
}

void
coord_tasks_shutdown(struct coord *co)
{
	drain_closing(&co->error_waiters);
	drain_closing(&co->all_waiters);
	drain_closing(&co->epoch_waiters);
	coord_barriers_drain_rejoins(co);
	barriers_abort(co->bars, ST_ABORTED, "coordd is shutting down");
	timers_cancel(park_timers(co->park), &co->scan);
}

/*
 * A snapshot of the whole cluster, taken under the lock and turned into
 * JSON outside it: with 10,000 tasks the JSON is what takes time.
 */
struct task_snap {
	const char *name; /* lives as long as the registry */
	enum reg_state state;
	int recoverable, reported;
	uint64_t inc;
	int64_t age;
	enum status err;
	char *errmsg;
};

struct bar_snap {
	char *id;
	size_t arrived, members;
	int64_t deadline_in;
	unsigned char *at;
};

struct snap {
	struct task_snap *tasks;
	size_t ntasks;
	struct bar_snap *bars;
	size_t nbars;
	uint64_t service;
	long epoch;
	int64_t hb_timeout;
	size_t connected, keys;
	int64_t revision;
};

static void
snap_free(struct snap *s)
{
	for (size_t i = 0; i < s->ntasks; i++)
		free(s->tasks[i].errmsg);
	for (size_t i = 0; i < s->nbars; i++) {
		free(s->bars[i].id);
		free(s->bars[i].at);
	}
	free(s->tasks);
	free(s->bars);
}

/* Takes the barriers in flight; -1 on ENOMEM. */
static int
snap_barriers(struct coord *co, struct snap *s, int64_t now)
{
	size_t ntasks = co->rv->ntasks, n = 0;

	for (struct barrier *b = barriers_pending(co->bars); b != NULL;
	     b = b->next)
		n++;
	if (n > 0 && (s->bars = calloc(n, sizeof(*s->bars))) == NULL)
		return -1;
	for (struct barrier *b = barriers_pending(co->bars); b != NULL;
	     b = b->next) {
		struct bar_snap *x = &s->bars[s->nbars++];
		x->id = strdup(b->id);
		x->at = malloc(ntasks + 1);
		if (x->id == NULL || x->at == NULL)
			return -1;
		memcpy(x->at, b->at, ntasks);
		x->arrived = b->arrived;
		x->members = b->members;
		x->deadline_in = b->deadline - now;
	}
	return 0;
}

static int
snap_take(struct coord *co, struct snap *s, int tasks)
{
	int64_t now = duration_now_ms();
	size_t n = co->rv->ntasks;

	memset(s, 0, sizeof(*s));
	s->service = co->rv->service;
	s->epoch = co->rv->epoch;
	s->hb_timeout = co->rv->hb_timeout;
	s->connected = co->rv->nconnected;
	s->keys = kv_count(co->kv);
	s->revision = kv_revision(co->kv);
	if (!tasks || n == 0)
		return snap_barriers(co, s, now);
	s->ntasks = n;
	if ((s->tasks = calloc(n, sizeof(*s->tasks))) == NULL) {
		s->ntasks = 0;
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		const struct reg_task *t = registry_task(co->reg, i);
		struct task_snap *x = &s->tasks[i];

		x->name = t->name;
		x->state = t->state;
		x->recoverable = t->recoverable;
		x->inc = t->incarnation;
		x->age = now - t->last_heartbeat;
		x->err = t->err;
		x->reported = t->err_reported;
		if (t->errmsg != NULL &&
		    (x->errmsg = strdup(t->errmsg)) == NULL)
			return -1;
	}
	return snap_barriers(co, s, now);
}

static json_t *
snap_barriers_json(const struct snap *s, struct coord *co)
{
	json_t *arr = json_array();
	size_t ntasks = co->rv->ntasks;

	for (size_t k = 0; arr != NULL && k < s->nbars; k++) {
		const struct bar_snap *b = &s->bars[k];
		json_t *in = json_array(), *out = json_array();

		for (size_t i = 0; i < ntasks; i++) {
			const char *name = registry_task(co->reg, i)->name;
			if (b->at[i] == BAR_ARRIVED)
				json_array_append_new(in, json_string(name));
			else if (b->at[i] == BAR_MEMBER)
				json_array_append_new(out, json_string(name));
		}
		json_array_append_new(arr,
		    json_pack("{s:s,s:I,s:I,s:o,s:o,s:I}", "id", b->id,
		        "arrived", (json_int_t)b->arrived, "total",
		        (json_int_t)b->members, "tasks_arrived", in,
		        "tasks_waiting", out, "deadline_in_ms",
		        (json_int_t)b->deadline_in));
	}
	return arr;
}

static json_t *
snap_json(const struct snap *s, struct coord *co)
{
	json_t *tasks = json_array();
	char inc[17];

	for (size_t i = 0; tasks != NULL && i < s->ntasks; i++) {
		const struct task_snap *t = &s->tasks[i];
		json_t *o = json_pack("{s:s,s:s,s:b}", "task", t->name, "state",
		    registry_state_name(t->state), "recoverable",
		    t->recoverable);

		if (o == NULL)
			continue;
		json_object_set_new(o, "incarnation",
		    t->inc != 0 ?
		        json_string(task_format_incarnation(t->inc, inc)) :
		        json_null());
		json_object_set_new(o, "heartbeat_age_ms",
		    t->state == REG_CONNECTED ? json_integer(t->age) :
		                                json_null());
		json_object_set_new(o, "error",
		    t->errmsg != NULL ?
		        json_pack("{s:s,s:s,s:s,s:b}", "task", t->name, "code",
		            status_name(t->err), "message", t->errmsg,
		            "reported", t->reported) :
		        json_null());
		json_array_append_new(tasks, o);
	}
	return json_pack("{s:s,s:i,s:I,s:I,s:I,s:o,s:o,s:I,s:I}",
	    "service_incarnation", task_format_incarnation(s->service, inc),
	    "epoch", (int)s->epoch, "heartbeat_timeout_ms",
	    (json_int_t)s->hb_timeout, "connected", (json_int_t)s->connected,
	    "total", (json_int_t)s->ntasks, "tasks", tasks, "barriers",
	    snap_barriers_json(s, co), "keys", (json_int_t)s->keys, "revision",
	    (json_int_t)s->revision);
}

/* GET /v1/tasks (whole) or GET /v1/barriers (barriers only). */
static void
reply_status(struct coord *co, struct http_req *req, int whole)
{
	struct snap s;
	int rc;

	coord_lock(co);
	rc = snap_take(co, &s, whole);
	coord_unlock(co);
	if (rc < 0)
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	else if (whole)
		http_reply_json(req, 200, snap_json(&s, co));
	else
		http_reply_json(req, 200,
		    json_pack("{s:o}", "barriers", snap_barriers_json(&s, co)));
	snap_free(&s);
}

void
coord_barriers_status_route(struct http_req *req, const struct route_match *m,
    void *arg)
{
	(void)m;
	reply_status(arg, req, 0);
}

static void
reply_refused(struct coord *co, struct http_req *req, enum status st,
    const struct reg_answer *ans)
{
	char inc[17];

	switch (ans->reason) {
	case REG_NOT_REGISTERED:
		http_reply_error_json(req, st,
		    json_pack("{s:s,s:s}", "reason", "not_registered",
		        "service_incarnation",
		        task_format_incarnation(co->rv->service, inc)),
		    "%s", ans->msg);
		break;
	case REG_RUN_OVER:
	case REG_FAILED_IN_EPOCH:
		http_reply_error_json(req, st,
		    json_pack("{s:s,s:i}", "reason",
		        ans->reason == REG_RUN_OVER ? "run_over" :
		                                      "failed_in_epoch",
		        "epoch", (int)co->rv->epoch),
		    "%s", ans->msg);
		break;
	default: http_reply_error(req, st, "%s", ans->msg);
	}
}

static void
do_register(struct coord *co, struct http_req *req, struct reg_task *t)
{
	struct reg_answer ans = {0};
	char a[17], b[17];
	int64_t hb = co->rv->hb_timeout;
	const char *incs = http_req_arg(req, "incarnation");
	const char *secret = http_req_header(req, COORD_SECRET_HEADER);
	struct coord_secret *bound = &co->secret[t->index];
	uint64_t inc = 0;
	enum status st;
	int again;

	if (secret != NULL &&
	    (!token_valid(secret, strlen(secret)) ||
	        strlen(secret) > COORD_SECRET_MAX)) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    COORD_SECRET_HEADER " must be %d to %d printable "
		                        "characters without spaces",
		    TOKEN_MIN, COORD_SECRET_MAX);
		return;
	}
	if (secret == NULL && co->authenticated) {
		http_reply_error(req, ST_UNAUTHENTICATED,
		    "with a token, a task registers with a secret of its own "
		    "(" COORD_SECRET_HEADER ")");
		return;
	}
	/* The same registration again (its reply was lost): only with the
	 * secret it was made with, or anyone could take it over. */
	again = incs != NULL && task_parse_incarnation(incs, &inc) == 0 &&
	    t->state == REG_CONNECTED && t->incarnation == inc;
	if (again && !coord_task_proven(co, req, t, 0))
		return;
	st = registry_register(co->reg, t, incs, duration_now_ms(), &ans);
	if (st != ST_OK) {
		reply_refused(co, req, st, &ans);
		return;
	}
	co->shutdown_said[t->index].set = 0;
	if (!again) {
		bound->len = secret != NULL ? strlen(secret) : 0;
		memcpy(bound->v, secret != NULL ? secret : "", bound->len);
		bound->v[bound->len] = '\0';
	}
	coord_heard(co, t);
	http_reply_json(req, 200,
	    json_pack("{s:s,s:s,s:I,s:I,s:s,s:I,s:I,s:i}", "task", t->name,
	        "incarnation", task_format_incarnation(t->incarnation, a),
	        "heartbeat_timeout_ms", (json_int_t)hb, "heartbeat_interval_ms",
	        (json_int_t)(hb / 2), "service_incarnation",
	        task_format_incarnation(co->rv->service, b), "tasks",
	        (json_int_t)co->rv->ntasks, "rank", (json_int_t)t->index,
	        "epoch", (int)co->rv->epoch));
}

static void
do_heartbeat(struct coord *co, struct http_req *req, struct reg_task *t)
{
	struct reg_answer ans = {0};
	enum status st = registry_heartbeat(co->reg, t,
	    http_req_arg(req, "incarnation"), duration_now_ms(), &ans);

	if (st != ST_OK) {
		/* A task that heartbeats here without having registered here
		 * registered with a coordd before this one. */
		if (ans.reason == REG_NOT_REGISTERED)
			barriers_restart_seen(co->bars);
		reply_refused(co, req, st, &ans);
		return;
	}
	coord_heard(co, t);
	http_reply(req, 200, "application/json", "{}", 2);
}

static void
do_report_error(struct coord *co, struct http_req *req, struct reg_task *t)
{
	struct reg_answer ans = {0};
	size_t len;
	const char *body = http_req_body(req, &len);
	const char *code = NULL, *msg = NULL;
	json_t *root;
	json_error_t jerr;
	enum status st;

	if ((st = registry_may_report(co->reg, t,
	         http_req_arg(req, "incarnation"), &ans)) != ST_OK) {
		reply_refused(co, req, st, &ans);
		return;
	}
	root = json_loadb(body, len, 0, &jerr);
	if (root == NULL ||
	    json_unpack(root, "{s?s,s?s}", "code", &code, "message", &msg) <
	        0) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "request body must be {\"code\":CODE,\"message\":TEXT}: %s",
		    root == NULL ? jerr.text : "wrong field types");
		json_decref(root);
		return;
	}
	st = code != NULL ? status_from_name(code) : ST_INTERNAL;
	if (st == ST_OK)
		st = ST_INTERNAL;
	registry_set_error(co->reg, t, st, msg != NULL ? msg : "error reported",
	    1, 1);
	json_decref(root);
	http_reply(req, 200, "application/json", "{}", 2);
}

static void
all_expired(struct parked *w)
{
	struct coord *co = w->obj;
	struct reg_answer ans = {0};
	enum status st = registry_all_expired(co->reg, duration_now_ms(), &ans);

	if (st != ST_OK)
		http_reply_error(w->req, st, "%s", ans.msg);
	else
		http_reply_json(w->req, 202,
		    json_pack("{s:s,s:I,s:I}", "state", "waiting", "connected",
		        (json_int_t)co->rv->nconnected, "total",
		        (json_int_t)co->rv->ntasks));
}

static void
do_wait_all(struct coord *co, struct http_req *req, struct reg_task *t)
{
	struct reg_answer ans = {0};
	int64_t now = duration_now_ms(), until = 0, wait;
	int park = 0;
	struct parked *w;
	enum status st;

	if (park_wait_arg(req, "wait", POLL_DEFAULT_MS, &wait) < 0)
		return;
	st = registry_wait_all(co->reg, t, http_req_arg(req, "incarnation"),
	    now, &park, &until, &ans);
	if (st != ST_OK) {
		reply_refused(co, req, st, &ans);
		return;
	}
	if (!park) {
		http_reply_json(req, 200,
		    json_pack("{s:I}", "tasks", (json_int_t)co->rv->ntasks));
		return;
	}
	if (until - now < wait)
		wait = until - now;
	w = coord_park(co, req, &co->all_waiters, wait > 0 ? wait : 0,
	    all_expired, t->name, strlen(t->name));
	if (w != NULL)
		w->obj = co;
}

static void
do_shutdown(struct coord *co, struct http_req *req, struct reg_task *t)
{
	const char *b0 = http_req_arg(req, "barrier");
	struct reg_answer ans = {0};
	struct barrier *b;
	char msg[1024];
	int barrier;
	int64_t now = duration_now_ms(), wait;
	enum status st;

	if (park_wait_arg(req, "wait", POLL_DEFAULT_MS, &wait) < 0)
		return;
	/*
	 * A task that went through the shutdown barrier and asks again (its
	 * long poll ended as the barrier did) gets the barrier's answer, not
	 * "already disconnected": the answer must not be lost.
	 */
	if (t->state == REG_DISCONNECTED && co->shutdown_said[t->index].set) {
		const struct coord_said *said = &co->shutdown_said[t->index];
		coord_barrier_reply(req, "shutdown", said->st, said->msg);
		return;
	}
	st = registry_shutdown(co->reg, t, http_req_arg(req, "incarnation"),
	    b0 != NULL && strcmp(b0, "0") == 0, co->shutdown_timeout > 0,
	    &barrier, &ans);
	if (st != ST_OK) {
		reply_refused(co, req, st, &ans);
		return;
	}
	if (!barrier) {
		http_reply(req, 200, "application/json", "{}", 2);
		return;
	}
	if (barriers_shutdown_wait(co->bars, t, co->shutdown_timeout, now, &b,
	        &st, msg, sizeof(msg)) == BAR_ANSWER)
		coord_barrier_reply(req, "shutdown", st, msg);
	else
		coord_barrier_park(co, req, b, wait, now);
}

static void
do_reset(struct coord *co, struct http_req *req, struct reg_task *t)
{
	struct reg_answer ans = {0};
	enum status st = registry_reset(co->reg, t, &ans);

	if (st != ST_OK) {
		reply_refused(co, req, st, &ans);
		return;
	}
	http_reply(req, 200, "application/json", "{}", 2);
}

void
coord_tasks_status_route(struct http_req *req, const struct route_match *m,
    void *arg)
{
	(void)m;
	reply_status(arg, req, 1);
}

/* What each of a task's routes does (the route's op). */
struct task_op {
	void (*fn)(struct coord *co, struct http_req *req, struct reg_task *t);
	unsigned flags;
};

enum {
	T_GET = 1 << 0,      /* reads the task: no proof, nothing changes */
	T_BEAT = 1 << 1,     /* a heartbeat: goes on while the state
	                      * directory cannot be written, changes nothing
	                      * to journal but through events */
	T_REGISTER = 1 << 2, /* proves who it is by itself */
	T_OPERATOR = 1 << 3, /* an operator may ask it without a secret */
};

static void
do_get(struct coord *co, struct http_req *req, struct reg_task *t)
{
	(void)co;
	http_reply_json(req, 200, task_json(t, duration_now_ms()));
}

const struct task_op coord_task_get = {do_get, T_GET};
const struct task_op coord_task_register = {do_register, T_REGISTER};
const struct task_op coord_task_heartbeat = {do_heartbeat, T_BEAT};
const struct task_op coord_task_error = {do_report_error, 0};
const struct task_op coord_task_wait_all = {do_wait_all, 0};
const struct task_op coord_task_shutdown = {do_shutdown, 0};
const struct task_op coord_task_reset = {do_reset, T_OPERATOR};

/* GET /v1/tasks/JOB/INDEX, POST /v1/tasks/JOB/INDEX/VERB. */
void
coord_task_route(struct http_req *req, const struct route_match *m, void *arg)
{
	const struct task_op *op = m->op;
	struct coord *co = arg;
	char job[TASK_JOB_MAX + 1], index[24];
	struct task_name tn;
	struct reg_task *t = NULL;
	int named;

	route_seg(m, 0, job, sizeof(job));
	route_seg(m, 1, index, sizeof(index));
	/* The segments as they are, not joined to be split again: every
	 * heartbeat comes this way. An over-long one names no task. */
	named = m->seglen[0] <= TASK_JOB_MAX && m->seglen[1] < sizeof(index) &&
	    task_parse_parts(job, strlen(job), index, &tn) == 0;
	coord_lock(co);
	/* A call other than a heartbeat may change the tasks' state without
	 * an event (a reset of a task in error): journaled if it differs. */
	if (!(op->flags & (T_GET | T_BEAT)))
		co->ctl_dirty = 1;
	if (named)
		t = registry_lookup(co->reg, &tn);
	if (t == NULL) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "unknown task %s:%s: %s", job, index,
		    co->rv->ntasks == 0 ? "coordd runs without --cluster" :
		                          "not in the cluster");
	} else if (op->flags & T_GET) {
		op->fn(co, req, t);
	} else if (coord_closing(co)) {
		coord_reply_closing(req);
	} else if (!(op->flags & T_BEAT) && coord_refuse(co, req)) {
		/* answered: the state directory cannot be written */
	} else if ((op->flags & T_REGISTER) ||
	    coord_task_proven(co, req, t, (op->flags & T_OPERATOR) != 0)) {
		op->fn(co, req, t);
	}
	coord_unlock(co);
}

static void
epoch_expired(struct parked *w)
{
	struct coord *co = w->obj;

	http_reply_json(w->req, 202,
	    json_pack("{s:i}", "epoch", (int)co->rv->epoch));
}

/*
 * {"epoch":E,"finished":[...]}: the tasks that left epoch after because
 * their work was done. They will not come to a run after it, so a task
 * waiting to run again knows not to wait for them.
 */
static json_t *
epoch_json(struct coord *co, long after)
{
	json_t *done = json_array();

	for (size_t i = 0; done != NULL && after >= 0 && i < co->rv->ntasks;
	     i++) {
		const struct reg_task *t = registry_task(co->reg, i);
		if (registry_finished_in(t, after))
			json_array_append_new(done, json_string(t->name));
	}
	return json_pack("{s:i,s:o}", "epoch", (int)co->rv->epoch, "finished",
	    done);
}

/*
 * GET /v1/epoch?after=E&wait=DUR: the current epoch, once it is past E,
 * and the tasks that finished their work in E. A task restarting with the
 * whole job waits here for everyone to leave.
 */
void
coord_epoch_route(struct coord *co, struct http_req *req)
{
	const char *after_s = http_req_arg(req, "after");
	int64_t wait;
	long after = -1, epoch;

	if (park_wait_arg(req, "wait", 0, &wait) < 0)
		return;
	if (after_s != NULL && parse_long(after_s, 0, LONG_MAX, &after) < 0) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "after=%s is not an epoch", after_s);
		return;
	}
	coord_lock(co);
	epoch = co->rv->epoch;
	if (epoch > after) {
		http_reply_json(req, 200, epoch_json(co, after));
	} else if (wait <= 0) {
		http_reply_json(req, 202,
		    json_pack("{s:i}", "epoch", (int)epoch));
	} else if (coord_closing(co)) {
		coord_reply_closing(req);
	} else {
		struct parked *w = coord_park(co, req, &co->epoch_waiters, wait,
		    epoch_expired, "", 0);
		if (w != NULL)
			w->obj = co;
	}
	coord_unlock(co);
}

static void
errors_expired(struct parked *w)
{
	http_reply_json(w->req, 200, errors_json(w->obj));
}

void
coord_errors_route(struct coord *co, struct http_req *req)
{
	int64_t wait;
	json_t *errs;

	if (park_wait_arg(req, "wait", 0, &wait) < 0)
		return;
	coord_lock(co);
	errs = errors_json(co);
	if (errs == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	} else if (json_array_size(json_object_get(errs, "errors")) > 0 ||
	    wait <= 0) {
		http_reply_json(req, 200, errs);
		errs = NULL;
	} else if (coord_closing(co)) {
		coord_reply_closing(req);
	} else {
		struct parked *w = coord_park(co, req, &co->error_waiters, wait,
		    errors_expired, "", 0);
		if (w != NULL)
			w->obj = co;
	}
	json_decref(errs);
	coord_unlock(co);
}
