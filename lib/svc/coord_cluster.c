/*
 * coord_cluster.c: the task registry of the coordination service.
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
 * Tasks go DISCONNECTED -> CONNECTED (register) -> ERROR (reported, or no
 * heartbeat within the timeout) -> DISCONNECTED (reset). A long poll that
 * ends before its answer is ready gets 202 with progress, and is re-issued.
 *
 * Unlike upstream, coordd outlives the job: when no task is connected any
 * more the cluster starts a new epoch, in which errored tasks are
 * disconnected and barrier ids are free again, so a restarted job can
 * register without anyone resetting tasks by hand.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "duration.h"
#include "log.h"

#define POLL_DEFAULT_MS 30000

static const char *
state_name(enum task_state s)
{
	switch (s) {
	case TASK_CONNECTED: return "connected";
	case TASK_ERROR: return "error";
	default: return "disconnected";
	}
}

struct task *
coord_task(struct coord *co, const char *name)
{
	struct task_name tn;
	char buf[TASK_JOB_MAX + 24];

	if (co->cl.byname == NULL || task_parse(name, &tn) < 0)
		return NULL;
	task_format(&tn, buf, sizeof(buf));
	return strmap_get(co->cl.byname, buf, strlen(buf));
}

static json_t *
error_json(const struct task *t)
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

	for (size_t i = 0; arr != NULL && i < co->cl.ntasks; i++) {
		struct task *t = &co->cl.tasks[i];
		if (t->err_active && !t->recoverable)
			json_array_append_new(arr, error_json(t));
	}
	return json_pack("{s:o}", "errors", arr);
}

static void
reply_json(struct http_req *req, int code, json_t *obj)
{
	if (obj == NULL)
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	else
		http_reply_json(req, code, obj);
}


/*
 * Puts t in error. The error reaches the others (error pollers, wait-all)
 * unless t is recoverable or propagate is off; the barriers t belongs to
 * fail either way, since they cannot pass without it.
 */
void
coord_task_set_error(struct coord *co, struct task *t, enum status st,
    const char *msg, int reported, int propagate)
{
	char *copy = strdup(msg);

	if (t->state == TASK_CONNECTED)
		co->cl.nconnected--;
	t->state = TASK_ERROR;
	t->err = st;
	free(t->errmsg);
	t->errmsg = copy;
	t->err_reported = reported;
	t->err_active = propagate;
	t->err_epoch = co->cl.epoch;
	if (co->cl.failed == NULL && !t->recoverable)
		co->cl.failed = t;
	log_info("task %s: %s: %s", t->name, status_name(st), msg);
	coord_barriers_task_failed(co, t);
	if (t->recoverable || !propagate)
		return;
	if (co->cl.error_waiters.head != NULL) {
		coord_answer_all(&co->cl.error_waiters, ST_OK, NULL,
		    errors_json(co));
	}
	if (co->cl.all_waiters.head != NULL) {
		char m[1024];
		snprintf(m, sizeof(m), "task %s failed: %s: %s", t->name,
		    status_name(st), msg);
		coord_answer_all(&co->cl.all_waiters, ST_INTERNAL, m, NULL);
	}
}

/* Whether t failed in the current epoch (and was not reset since). */
static int
failed_now(const struct cluster *cl, const struct task *t)
{
	return t->err_active || (t->state == TASK_ERROR &&
	    t->err_epoch == cl->epoch);
}

/*
 * Finds a task whose failure this epoch should stop the others, after the
 * one remembered has registered again or been reset. Every wait-for-all
 * asks; with 10,000 tasks it must not scan them each time.
 */
static void
find_failed(struct cluster *cl)
{
	cl->failed = NULL;
	for (size_t i = 0; i < cl->ntasks && cl->failed == NULL; i++)
		if (failed_now(cl, &cl->tasks[i]) && !cl->tasks[i].recoverable)
			cl->failed = &cl->tasks[i];
}

void
coord_task_disconnect(struct coord *co, struct task *t)
{
	/* Only a task that was in this run has left it; one in error is
	 * kept out by its error instead. */
	if (t->state == TASK_CONNECTED) {
		co->cl.nconnected--;
		t->left_epoch = co->cl.epoch + 1;
	}
	t->state = TASK_DISCONNECTED;
}

/*
 * Once no task is connected the job has wound down: start a new epoch so
 * that the next run of the job finds a clean cluster. Errors stay readable
 * as each task's last error.
 */
void
coord_cluster_settle(struct coord *co)
{
	struct cluster *cl = &co->cl;
	int64_t rev;
	size_t n;

	if (cl->nconnected > 0 || !cl->used)
		return;
	/* Tasks in error stay so, for all to see, but may join the new run. */
	for (size_t i = 0; i < cl->ntasks; i++)
		cl->tasks[i].err_active = 0;
	cl->failed = NULL;
	coord_barriers_free(co);
	cl->barriers = strmap_new();
	cl->all_deadline = 0;
	cl->used = 0;
	cl->epoch++;
	/* The run's own keys (the preemption notice, step counters) go
	 * with it; the next run must not act on them. */
	n = kv_delete(co->kv, COORD_RUN_PREFIX, strlen(COORD_RUN_PREFIX), &rev);
	log_info("no task connected: epoch %ld begins (%zu keys under %s/ "
	    "removed)", cl->epoch, n, COORD_RUN_PREFIX);
	if (cl->epoch_waiters.head != NULL)
		coord_answer_all(&cl->epoch_waiters, ST_OK, NULL,
		    json_pack("{s:i}", "epoch", (int)cl->epoch));
}

static void
scan_fire(struct timer *tm)
{
	struct coord *co = (struct coord *)((char *)tm -
	    offsetof(struct coord, cl.scan));
	struct cluster *cl = &co->cl;
	int64_t now = duration_now_ms();
	char msg[256], a[32], b[32];

	for (size_t i = 0; i < cl->ntasks; i++) {
		struct task *t = &cl->tasks[i];
		if (t->state != TASK_CONNECTED ||
		    now - t->last_heartbeat <= cl->hb_timeout)
			continue;
		snprintf(msg, sizeof(msg), "no heartbeat for %s (timeout %s): "
		    "the task failed, crashed or was preempted",
		    duration_format(now - t->last_heartbeat, a, sizeof(a)),
		    duration_format(cl->hb_timeout, b, sizeof(b)));
		coord_task_set_error(co, t, ST_UNAVAILABLE, msg, 0, 1);
	}
	coord_cluster_settle(co);
	/* A fifth of the timeout: detection within 1.2 timeouts, which
	 * leaves room under 1.25 for a timer that fires a little late. */
	timers_add(co->timers, &cl->scan, now + (cl->hb_timeout / 5 > 0 ?
	    cl->hb_timeout / 5 : 1));
}

int
coord_cluster_init(struct coord *co, const struct coord_config *cfg,
    char *err, size_t errlen)
{
	struct cluster *cl = &co->cl;
	size_t k = 0;

	cl->hb_timeout = cfg->heartbeat_timeout_ms > 0 ?
	    cfg->heartbeat_timeout_ms : 10000;
	cl->register_timeout = cfg->register_timeout_ms > 0 ?
	    cfg->register_timeout_ms : 3600000;
	cl->shutdown_timeout = cfg->shutdown_barrier_timeout_ms;
	cl->service_incarnation = task_new_incarnation();
	if ((cl->barriers = strmap_new()) == NULL ||
	    (cl->byname = strmap_new()) == NULL)
		goto nomem;
	if (cfg->cluster.ntasks == 0)
		return 0;
	cl->tasks = calloc(cfg->cluster.ntasks, sizeof(*cl->tasks));
	if (cl->tasks == NULL)
		goto nomem;
	for (size_t j = 0; j < cfg->cluster.njobs; j++) {
		int recov = 0;
		for (size_t r = 0; r < cfg->nrecoverable; r++)
			recov |= strcmp(cfg->recoverable[r],
			    cfg->cluster.jobs[j].name) == 0;
		for (long i = 0; i < cfg->cluster.jobs[j].count; i++, k++) {
			struct task *t = &cl->tasks[k];
			char name[TASK_JOB_MAX + 24];
			snprintf(name, sizeof(name), "%s:%ld",
			    cfg->cluster.jobs[j].name, i);
			if ((t->name = strdup(name)) == NULL ||
			    strmap_put(cl->byname, name, strlen(name), t) < 0) {
				cl->ntasks = k + 1;
				goto nomem;
			}
			t->recoverable = recov;
		}
	}
	cl->ntasks = k;
	cl->scan.fire = scan_fire;
	pthread_mutex_lock(&co->mu);
	timers_add(co->timers, &cl->scan, duration_now_ms() +
	    cl->hb_timeout / 5);
	pthread_mutex_unlock(&co->mu);
	return 0;
nomem:
	snprintf(err, errlen, "out of memory");
	return -1;
}

void
coord_cluster_free(struct coord *co)
{
	struct cluster *cl = &co->cl;

	coord_barriers_free(co);
	for (size_t i = 0; i < cl->ntasks; i++) {
		free(cl->tasks[i].name);
		free(cl->tasks[i].errmsg);
	}
	free(cl->tasks);
	strmap_free(cl->byname, NULL);
}

void
coord_cluster_shutdown(struct coord *co)
{
	struct waitlist *lists[] = {&co->cl.error_waiters, &co->cl.all_waiters,
	    &co->cl.epoch_waiters};

	for (size_t i = 0; i < 3; i++) {
		while (lists[i]->head != NULL) {
			struct waiter *w = lists[i]->head;
			waiter_unlink(w);
			coord_reply_closing(w->req);
			waiter_free(w);
		}
	}
	coord_barriers_shutdown(co);
	timers_cancel(co->timers, &co->cl.scan);
}

static json_t *
task_json(const struct cluster *cl, const struct task *t, int64_t now)
{
	char inc[17];
	json_t *o = json_pack("{s:s,s:s,s:b}", "task", t->name, "state",
	    state_name(t->state), "recoverable", t->recoverable);

	if (o == NULL)
		return NULL;
	(void)cl;
	json_object_set_new(o, "incarnation", t->incarnation != 0 ?
	    json_string(task_format_incarnation(t->incarnation, inc)) :
	    json_null());
	json_object_set_new(o, "heartbeat_age_ms", t->state == TASK_CONNECTED ?
	    json_integer(now - t->last_heartbeat) : json_null());
	json_object_set_new(o, "error", t->errmsg != NULL ? error_json(t) :
	    json_null());
	return o;
}

json_t *
coord_status_json(struct coord *co)
{
	struct cluster *cl = &co->cl;
	int64_t now = duration_now_ms();
	json_t *tasks = json_array();
	char inc[17];

	for (size_t i = 0; tasks != NULL && i < cl->ntasks; i++)
		json_array_append_new(tasks, task_json(cl, &cl->tasks[i], now));
	return json_pack("{s:s,s:i,s:I,s:I,s:I,s:o,s:o,s:I,s:I}",
	    "service_incarnation", task_format_incarnation(
	    cl->service_incarnation, inc), "epoch", (int)cl->epoch,
	    "heartbeat_timeout_ms", (json_int_t)cl->hb_timeout,
	    "connected", (json_int_t)cl->nconnected,
	    "total", (json_int_t)cl->ntasks, "tasks", tasks,
	    "barriers", coord_barriers_json(co),
	    "keys", (json_int_t)kv_count(co->kv),
	    "revision", (json_int_t)kv_revision(co->kv));
}

/* Checks the incarnation argument against t; replies and returns -1. */
static int
check_incarnation(struct http_req *req, struct task *t, uint64_t *inc,
    int required)
{
	const char *s = http_req_arg(req, "incarnation");
	char a[17], b[17];

	*inc = 0;
	if (s == NULL && !required)
		return 0;
	if (task_parse_incarnation(s, inc) < 0 || *inc == 0) {
		http_reply_error(req, ST_INVALID_ARGUMENT, "incarnation=%s is "
		    "not a non-zero 64-bit hex number", s != NULL ? s : "");
		return -1;
	}
	if (t->state != TASK_DISCONNECTED && t->incarnation != *inc &&
	    required < 2) {
		http_reply_error(req, ST_ABORTED, "incarnation mismatch for "
		    "task %s: expected %s, got %s; the task has restarted",
		    t->name, task_format_incarnation(t->incarnation, a),
		    task_format_incarnation(*inc, b));
		return -1;
	}
	return 0;
}

static void
reply_not_registered(struct coord *co, struct http_req *req, struct task *t)
{
	char inc[17];

	http_reply_error_json(req, ST_INVALID_ARGUMENT, json_pack("{s:s,s:s}",
	    "reason", "not_registered", "service_incarnation",
	    task_format_incarnation(co->cl.service_incarnation, inc)),
	    "task %s is not registered", t->name);
}

static void
reply_task_error(struct http_req *req, struct task *t)
{
	http_reply_error(req, t->err, "task %s is in error: %s", t->name,
	    t->errmsg != NULL ? t->errmsg : "");
}

static void
do_register(struct coord *co, struct http_req *req, struct task *t)
{
	struct cluster *cl = &co->cl;
	uint64_t inc;
	char a[17], b[17], msg[512];

	if (check_incarnation(req, t, &inc, 2) < 0)
		return;
	if (t->state == TASK_CONNECTED && t->incarnation != inc &&
	    !t->recoverable) {
		snprintf(msg, sizeof(msg), "task %s registered again with "
		    "incarnation %s while connected as %s: it has likely "
		    "restarted", t->name, task_format_incarnation(inc, a),
		    task_format_incarnation(t->incarnation, b));
		coord_task_set_error(co, t, ST_ABORTED, msg, 0, 1);
		http_reply_error(req, ST_ABORTED, "%s", msg);
		return;
	}
	if (failed_now(cl, t) && !t->recoverable) {
		http_reply_error_json(req, ST_ABORTED, json_pack("{s:s,s:i}",
		    "reason", "failed_in_epoch", "epoch", (int)cl->epoch),
		    "task %s failed in epoch %ld (%s: %s); it must be reset, or "
		    "the job wind down, before it registers again", t->name,
		    cl->epoch, status_name(t->err), t->errmsg != NULL ?
		    t->errmsg : "");
		return;
	}
	/*
	 * A task that already left this run (finished, stopped, preempted)
	 * joins the next one: rejoining would revive a run that is winding
	 * down, with its notice and its passed barriers.
	 */
	if (t->state == TASK_DISCONNECTED && t->left_epoch == cl->epoch + 1 &&
	    !t->recoverable) {
		http_reply_error_json(req, ST_FAILED_PRECONDITION,
		    json_pack("{s:s,s:i}", "reason", "run_over", "epoch",
		    (int)cl->epoch), "task %s already left epoch %ld; it can "
		    "register again once every task has left", t->name,
		    cl->epoch);
		return;
	}
	if (t->state != TASK_CONNECTED)
		cl->nconnected++;
	cl->used = 1;
	t->err_active = 0;
	if (cl->failed == t)
		find_failed(cl);
	if (t->state != TASK_CONNECTED || t->incarnation != inc)
		log_info("task %s registered (incarnation %s)", t->name,
		    task_format_incarnation(inc, a));
	t->state = TASK_CONNECTED;
	t->incarnation = inc;
	t->last_heartbeat = duration_now_ms();
	reply_json(req, 200, json_pack("{s:s,s:s,s:I,s:I,s:s,s:I,s:i}", "task",
	    t->name, "incarnation", task_format_incarnation(inc, a),
	    "heartbeat_timeout_ms", (json_int_t)cl->hb_timeout,
	    "heartbeat_interval_ms", (json_int_t)(cl->hb_timeout / 2),
	    "service_incarnation", task_format_incarnation(
	    cl->service_incarnation, b), "tasks", (json_int_t)cl->ntasks,
	    "epoch", (int)cl->epoch));
	if (cl->nconnected == cl->ntasks && cl->all_waiters.head != NULL) {
		coord_answer_all(&cl->all_waiters, ST_OK, NULL, json_pack("{s:I}",
		    "tasks", (json_int_t)cl->ntasks));
	}
}

static void
do_heartbeat(struct coord *co, struct http_req *req, struct task *t)
{
	uint64_t inc;

	if (t->state == TASK_ERROR) {
		reply_task_error(req, t);
		return;
	}
	if (t->state == TASK_DISCONNECTED) {
		reply_not_registered(co, req, t);
		return;
	}
	if (check_incarnation(req, t, &inc, 1) < 0)
		return;
	t->last_heartbeat = duration_now_ms();
	http_reply(req, 200, "application/json", "{}", 2);
}

static void
do_report_error(struct coord *co, struct http_req *req, struct task *t)
{
	size_t len;
	const char *body = http_req_body(req, &len);
	const char *code = NULL, *msg = NULL;
	json_t *root;
	json_error_t jerr;
	enum status st;
	uint64_t inc;

	if (t->state != TASK_CONNECTED) {
		http_reply_error(req, ST_FAILED_PRECONDITION, "task %s is %s, "
		    "not connected: it cannot report an error", t->name,
		    state_name(t->state));
		return;
	}
	if (check_incarnation(req, t, &inc, 1) < 0)
		return;
	root = json_loadb(body, len, 0, &jerr);
	if (root == NULL || json_unpack(root, "{s?s,s?s}", "code", &code,
	    "message", &msg) < 0) {
		http_reply_error(req, ST_INVALID_ARGUMENT, "request body must "
		    "be {\"code\":CODE,\"message\":TEXT}: %s", root == NULL ?
		    jerr.text : "wrong field types");
		json_decref(root);
		return;
	}
	st = code != NULL ? status_from_name(code) : ST_INTERNAL;
	if (st == ST_OK)
		st = ST_INTERNAL;
	coord_task_set_error(co, t, st, msg != NULL ? msg : "error reported",
	    1, 1);
	json_decref(root);
	http_reply(req, 200, "application/json", "{}", 2);
}

static void
all_expired(struct waiter *w)
{
	struct cluster *cl = &w->co->cl;
	int64_t now = duration_now_ms();

	if (cl->all_deadline != 0 && now >= cl->all_deadline) {
		struct buf b = {0};
		size_t n = 0;
		char d[32];
		for (size_t i = 0; i < cl->ntasks; i++) {
			if (cl->tasks[i].state == TASK_CONNECTED)
				continue;
			if (n++ < 10)
				buf_printf(&b, "%s%s", n > 1 ? ", " : "",
				    cl->tasks[i].name);
		}
		if (n > 10)
			buf_printf(&b, " and %zu more", n - 10);
		http_reply_error(w->req, ST_DEADLINE_EXCEEDED, "tasks %s did "
		    "not register within the register timeout of %s",
		    b.data != NULL ? b.data : "", duration_format(
		    cl->register_timeout, d, sizeof(d)));
		buf_free(&b);
	} else {
		reply_json(w->req, 202, json_pack("{s:s,s:I,s:I}", "state",
		    "waiting", "connected", (json_int_t)cl->nconnected,
		    "total", (json_int_t)cl->ntasks));
	}
	waiter_free(w);
}

static void
do_wait_all(struct coord *co, struct http_req *req, struct task *t)
{
	struct cluster *cl = &co->cl;
	int64_t wait, now = duration_now_ms();
	uint64_t inc;

	if (coord_arg_duration(req, "wait", POLL_DEFAULT_MS, &wait) < 0)
		return;
	if (t->state != TASK_CONNECTED) {
		http_reply_error(req, ST_FAILED_PRECONDITION, "task %s is %s, "
		    "not connected", t->name, state_name(t->state));
		return;
	}
	if (check_incarnation(req, t, &inc, 1) < 0)
		return;
	if (cl->failed != NULL) {
		struct task *o = cl->failed;
		http_reply_error(req, ST_INTERNAL, "task %s failed: %s: %s",
		    o->name, status_name(o->err), o->errmsg != NULL ?
		    o->errmsg : "");
		return;
	}
	if (cl->nconnected == cl->ntasks) {
		reply_json(req, 200, json_pack("{s:I}", "tasks",
		    (json_int_t)cl->ntasks));
		return;
	}
	/* The first caller of the epoch starts the register clock. */
	if (cl->all_deadline == 0)
		cl->all_deadline = now + cl->register_timeout;
	if (cl->all_deadline - now < wait)
		wait = cl->all_deadline - now;
	if (waiter_park(co, req, &cl->all_waiters, wait > 0 ? wait : 0,
	    all_expired, t->name, strlen(t->name)) == NULL)
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
}

static void
do_shutdown(struct coord *co, struct http_req *req, struct task *t)
{
	struct cluster *cl = &co->cl;
	int64_t wait;
	uint64_t inc;

	if (coord_arg_duration(req, "wait", POLL_DEFAULT_MS, &wait) < 0)
		return;
	if (t->state == TASK_DISCONNECTED) {
		http_reply_error(req, ST_FAILED_PRECONDITION, "task %s is "
		    "already disconnected", t->name);
		return;
	}
	if (check_incarnation(req, t, &inc, 1) < 0)
		return;
	if (t->state == TASK_ERROR) {
		coord_task_disconnect(co, t);
		http_reply_error(req, ST_FAILED_PRECONDITION, "task %s was in "
		    "error (%s: %s); disconnected anyway", t->name,
		    status_name(t->err), t->errmsg != NULL ? t->errmsg : "");
		return;
	}
	/* barrier=0: leaving because the run is over anyway (a failure, a
	 * preemption), not because the work is done. */
	if (cl->shutdown_timeout <= 0 || t->recoverable ||
	    (http_req_arg(req, "barrier") != NULL &&
	    strcmp(http_req_arg(req, "barrier"), "0") == 0)) {
		coord_task_disconnect(co, t);
		log_info("task %s shut down", t->name);
		http_reply(req, 200, "application/json", "{}", 2);
		return;
	}
	if (cl->shutdown == NULL) {
		cl->shutdown = coord_barrier_new(co, "shutdown",
		    cl->shutdown_timeout);
		if (cl->shutdown == NULL) {
			http_reply_error(req, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
			return;
		}
		cl->shutdown->shutdown = 1;
		/* Who may still come: a task that failed or already left
		 * will not, and must not hold the others up. */
		for (size_t i = 0; i < cl->ntasks; i++) {
			if (!cl->tasks[i].recoverable &&
			    cl->tasks[i].state == TASK_CONNECTED) {
				cl->shutdown->at[i] = 1;
				cl->shutdown->members++;
			}
		}
		cl->shutdown->explicit_set = 1;
	}
	coord_barrier_arrive(co, req, cl->shutdown, t, wait);
}

static void
do_reset(struct coord *co, struct http_req *req, struct task *t)
{
	/* A task that failed and then left is still in error for the run. */
	if (t->state != TASK_ERROR && !failed_now(&co->cl, t)) {
		http_reply_error(req, ST_FAILED_PRECONDITION, "task %s is %s, "
		    "not in error: nothing to reset", t->name,
		    state_name(t->state));
		return;
	}
	coord_task_disconnect(co, t);
	t->err_active = 0;
	t->left_epoch = 0;
	/* Reset: not failed now, whatever epoch its error is from. */
	t->err_epoch = -1;
	if (co->cl.failed == t)
		find_failed(&co->cl);
	log_info("task %s reset", t->name);
	http_reply(req, 200, "application/json", "{}", 2);
}

void
coord_tasks_route(struct coord *co, struct http_req *req, const char *rest)
{
	const char *method = http_req_method(req);
	char job[TASK_JOB_MAX + 1], verb[32], name[TASK_JOB_MAX + 24];
	const char *slash, *slash2;
	struct task *t;
	size_t jl;

	if (*rest == '\0') {
		if (strcmp(method, "GET") != 0)
			goto bad_method;
		pthread_mutex_lock(&co->mu);
		reply_json(req, 200, coord_status_json(co));
		pthread_mutex_unlock(&co->mu);
		return;
	}
	/* JOB/INDEX[/VERB] */
	slash = strchr(rest, '/');
	jl = slash != NULL ? (size_t)(slash - rest) : 0;
	if (slash == NULL || jl == 0 || jl > TASK_JOB_MAX) {
		http_reply_error(req, ST_NOT_FOUND, "no such resource: "
		    "/v1/tasks/%s (want /v1/tasks/JOB/INDEX[/VERB])", rest);
		return;
	}
	memcpy(job, rest, jl);
	job[jl] = '\0';
	slash2 = strchr(slash + 1, '/');
	snprintf(name, sizeof(name), "%s:%.*s", job, slash2 != NULL ?
	    (int)(slash2 - slash - 1) : (int)strlen(slash + 1), slash + 1);
	snprintf(verb, sizeof(verb), "%s", slash2 != NULL ? slash2 + 1 : "");

	pthread_mutex_lock(&co->mu);
	if ((t = coord_task(co, name)) == NULL) {
		if (co->cl.ntasks == 0)
			http_reply_error(req, ST_INVALID_ARGUMENT, "unknown task "
			    "%s: coordd runs without --cluster", name);
		else
			http_reply_error(req, ST_INVALID_ARGUMENT, "unknown task "
			    "%s: not in the cluster", name);
	} else if (verb[0] == '\0') {
		if (strcmp(method, "GET") != 0) {
			pthread_mutex_unlock(&co->mu);
			goto bad_method;
		}
		reply_json(req, 200, task_json(&co->cl, t, duration_now_ms()));
	} else if (strcmp(method, "POST") != 0) {
		pthread_mutex_unlock(&co->mu);
		goto bad_method;
	} else if (co->closing) {
		coord_reply_closing(req);
	} else if (strcmp(verb, "register") == 0) {
		do_register(co, req, t);
	} else if (strcmp(verb, "heartbeat") == 0) {
		do_heartbeat(co, req, t);
	} else if (strcmp(verb, "error") == 0) {
		do_report_error(co, req, t);
	} else if (strcmp(verb, "wait-all") == 0) {
		do_wait_all(co, req, t);
	} else if (strcmp(verb, "shutdown") == 0) {
		do_shutdown(co, req, t);
	} else if (strcmp(verb, "reset") == 0) {
		do_reset(co, req, t);
	} else {
		http_reply_error(req, ST_NOT_FOUND, "no such task action: %s "
		    "(register, heartbeat, error, wait-all, shutdown, reset)",
		    verb);
	}
	coord_cluster_settle(co);
	pthread_mutex_unlock(&co->mu);
	return;
bad_method:
	http_set_header(req, "Allow", *rest == '\0' || strchr(rest, '/') ==
	    strrchr(rest, '/') ? "GET" : "POST");
	http_reply_error_http(req, 405, ST_INVALID_ARGUMENT,
	    "method %s not allowed on %s", method, http_req_path(req));
}

static void
epoch_expired(struct waiter *w)
{
	reply_json(w->req, 202, json_pack("{s:i}", "epoch",
	    (int)w->co->cl.epoch));
	waiter_free(w);
}

/*
 * GET /v1/epoch?after=E&wait=DUR: the current epoch, once it is past E. A
 * task restarting with the whole job waits here for everyone to leave.
 */
void
coord_epoch_route(struct coord *co, struct http_req *req)
{
	const char *after_s = http_req_arg(req, "after");
	int64_t wait;
	long after = -1;
	char *end;

	if (strcmp(http_req_method(req), "GET") != 0) {
		http_set_header(req, "Allow", "GET");
		http_reply_error_http(req, 405, ST_INVALID_ARGUMENT,
		    "method %s not allowed on /v1/epoch", http_req_method(req));
		return;
	}
	if (coord_arg_duration(req, "wait", 0, &wait) < 0)
		return;
	if (after_s != NULL) {
		after = strtol(after_s, &end, 10);
		if (*after_s == '\0' || *end != '\0' || after < 0) {
			http_reply_error(req, ST_INVALID_ARGUMENT, "after=%s is "
			    "not an epoch", after_s);
			return;
		}
	}
	pthread_mutex_lock(&co->mu);
	if (co->cl.epoch > after || wait <= 0)
		reply_json(req, co->cl.epoch > after ? 200 : 202,
		    json_pack("{s:i}", "epoch", (int)co->cl.epoch));
	else if (co->closing)
		coord_reply_closing(req);
	else if (waiter_park(co, req, &co->cl.epoch_waiters, wait,
	    epoch_expired, "", 0) == NULL)
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	pthread_mutex_unlock(&co->mu);
}

static void
errors_expired(struct waiter *w)
{
	reply_json(w->req, 200, errors_json(w->co));
	waiter_free(w);
}

void
coord_errors_route(struct coord *co, struct http_req *req)
{
	int64_t wait;
	json_t *errs;

	if (strcmp(http_req_method(req), "GET") != 0) {
		http_set_header(req, "Allow", "GET");
		http_reply_error_http(req, 405, ST_INVALID_ARGUMENT,
		    "method %s not allowed on /v1/errors",
		    http_req_method(req));
		return;
	}
	if (coord_arg_duration(req, "wait", 0, &wait) < 0)
		return;
	pthread_mutex_lock(&co->mu);
	errs = errors_json(co);
	if (errs == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	} else if (json_array_size(json_object_get(errs, "errors")) > 0 ||
	    wait <= 0) {
		reply_json(req, 200, errs);
		errs = NULL;
	} else if (co->closing) {
		coord_reply_closing(req);
	} else if (waiter_park(co, req, &co->cl.error_waiters, wait,
	    errors_expired, "", 0) == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	}
	json_decref(errs);
	pthread_mutex_unlock(&co->mu);
}
