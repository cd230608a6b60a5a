#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "duration.h"
#include "log.h"
#include "rec.h"
#include "registry.h"
#include "strmap.h"

struct registry {
	struct reg_view v;
	struct reg_task *tasks;
	struct strmap *byname;   /* "job:index" -> struct reg_task */
	int used;                /* a task registered this epoch */
	size_t left;             /* tasks that left this epoch, after
	                          * they were connected in it */
	int64_t all_deadline;    /* wait-for-all deadline, 0: unset */
	struct reg_task *failed; /* one that failed this epoch */
	reg_observer_fn observe;
	void *arg;
};

static void say(struct reg_answer *ans, enum reg_reason reason, const char *fmt,
    ...) __attribute__((format(printf, 3, 4)));

static void
say(struct reg_answer *ans, enum reg_reason reason, const char *fmt, ...)
{
	va_list ap;

	ans->reason = reason;
	va_start(ap, fmt);
	vsnprintf(ans->msg, sizeof(ans->msg), fmt, ap);
	va_end(ap);
}

static void
emit(struct registry *r, enum reg_event_type type, struct reg_task *t,
    int propagate)
{
	struct reg_event ev = {.type = type, .task = t, .propagate = propagate};

	if (r->observe != NULL)
		r->observe(&ev, r->arg);
}

const char *
registry_state_name(enum reg_state s)
{
	switch (s) {
	case REG_CONNECTED: return "connected";
	case REG_ERROR: return "error";
	default: return "disconnected";
	}
}

struct registry *
registry_new(const struct registry_config *cfg, reg_observer_fn fn, void *arg,
    char *err, size_t errlen)
{
	struct registry *r = calloc(1, sizeof(*r));
	size_t k = 0;

	if (r == NULL || (r->byname = strmap_new()) == NULL)
		goto nomem;
	r->v.hb_timeout =
	    cfg->heartbeat_timeout_ms > 0 ? cfg->heartbeat_timeout_ms : 10000;
	r->v.register_timeout =
	    cfg->register_timeout_ms > 0 ? cfg->register_timeout_ms : 3600000;
	r->v.service = task_new_incarnation();
	r->observe = fn;
	r->arg = arg;
	if (cfg->cluster.ntasks == 0)
		return r;
	if ((r->tasks = calloc(cfg->cluster.ntasks, sizeof(*r->tasks))) == NULL)
		goto nomem;
	for (size_t j = 0; j < cfg->cluster.njobs; j++) {
		int recov = 0;
		for (size_t i = 0; i < cfg->nrecoverable; i++)
			recov |= strcmp(cfg->recoverable[i],
			             cfg->cluster.jobs[j].name) == 0;
		for (long i = 0; i < cfg->cluster.jobs[j].count; i++, k++) {
			struct reg_task *t = &r->tasks[k];
			char name[TASK_JOB_MAX + 24];

			snprintf(name, sizeof(name), "%s:%ld",
			    cfg->cluster.jobs[j].name, i);
			r->v.ntasks = k + 1;
			if ((t->name = strdup(name)) == NULL ||
			    strmap_put(r->byname, name, strlen(name), t) < 0)
				goto nomem;
			t->index = k;
			t->recoverable = recov;
		}
	}
	return r;
nomem:
	snprintf(err, errlen, "out of memory");
	registry_free(r);
	return NULL;
}

void
registry_free(struct registry *r)
{
	if (r == NULL)
		return;
	for (size_t i = 0; i < r->v.ntasks; i++) {
		free(r->tasks[i].name);
		free(r->tasks[i].errmsg);
	}
	free(r->tasks);
	strmap_free(r->byname, NULL);
	free(r);
}

const struct reg_view *
registry_view(const struct registry *r)
{
	return &r->v;
}

struct reg_task *
registry_task(struct registry *r, size_t i)
{
	return i < r->v.ntasks ? &r->tasks[i] : NULL;
}

struct reg_task *
registry_find(struct registry *r, const char *name)
{
	struct task_name tn;

	return task_parse(name, &tn) < 0 ? NULL : registry_lookup(r, &tn);
}

struct reg_task *
registry_lookup(struct registry *r, const struct task_name *tn)
{
	char buf[TASK_JOB_MAX + 24];

	if (r->v.ntasks == 0)
		return NULL;
	task_format(tn, buf, sizeof(buf));
	return strmap_get(r->byname, buf, strlen(buf));
}

struct reg_task *
registry_failed(const struct registry *r)
{
	return r->failed;
}

int
registry_failed_now(const struct registry *r, const struct reg_task *t)
{
	return t->err_active ||
	    (t->state == REG_ERROR && t->err_epoch == r->v.epoch);
}

int
registry_error_visible(const struct reg_task *t)
{
	return t->err_active && !t->recoverable;
}

/* Whether t came to this run and has left it since. */
static int
left_run(const struct registry *r, const struct reg_task *t)
{
	return t->state == REG_DISCONNECTED && t->left_epoch == r->v.epoch + 1;
}

/*
 * Finds a task whose failure this epoch should stop the others, after the
 * one remembered has registered again or been reset. Every wait-for-all
 * asks; with 10,000 tasks it must not scan them each time.
 */
static void
find_failed(struct registry *r)
{
	r->failed = NULL;
	for (size_t i = 0; i < r->v.ntasks && r->failed == NULL; i++)
		if (registry_failed_now(r, &r->tasks[i]) &&
		    !r->tasks[i].recoverable)
			r->failed = &r->tasks[i];
}

/*
 * The incarnation a task call carries. required 0: it may be absent; 1:
 * it must be there and match a task that is not disconnected; 2: it must
 * be there (registering sets it).
 */
static enum status
check_inc(const struct reg_task *t, const char *s, int required, uint64_t *inc,
    struct reg_answer *ans)
{
	char a[17], b[17];

	*inc = 0;
	if (s == NULL && !required)
		return ST_OK;
	if (task_parse_incarnation(s, inc) < 0 || *inc == 0) {
		say(ans, REG_NO_REASON,
		    "incarnation=%s is not a non-zero 64-bit hex number",
		    s != NULL ? s : "");
		return ST_INVALID_ARGUMENT;
	}
	if (t->state != REG_DISCONNECTED && t->incarnation != *inc &&
	    required < 2) {
		say(ans, REG_NO_REASON,
		    "incarnation mismatch for task %s: "
		    "expected %s, got %s; the task has restarted",
		    t->name, task_format_incarnation(t->incarnation, a),
		    task_format_incarnation(*inc, b));
		return ST_ABORTED;
	}
	return ST_OK;
}

void
registry_set_error(struct registry *r, struct reg_task *t, enum status st,
    const char *msg, int reported, int propagate)
{
	char *copy = strdup(msg);

	if (t->state == REG_CONNECTED)
		r->v.nconnected--;
	t->state = REG_ERROR;
	t->err = st;
	free(t->errmsg);
	t->errmsg = copy;
	t->err_reported = reported;
	t->err_active = propagate;
	t->err_epoch = r->v.epoch;
	if (r->failed == NULL && !t->recoverable)
		r->failed = t;
	log_info("task %s: %s: %s", t->name, status_name(st), msg);
	emit(r, REG_TASK_FAILED, t, propagate && !t->recoverable);
}

void
registry_disconnect(struct registry *r, struct reg_task *t)
{
	/* Only a task that was in this run has left it; one in error is
	 * kept out by its error instead. */
	int was = t->state == REG_CONNECTED;

	if (was) {
		r->v.nconnected--;
		t->left_epoch = r->v.epoch + 1;
		r->left++;
	}
	t->state = REG_DISCONNECTED;
	if (was)
		emit(r, REG_TASK_LEFT, t, 0);
}

enum status
registry_register(struct registry *r, struct reg_task *t, const char *incs,
    int64_t now, struct reg_answer *ans)
{
	uint64_t inc;
	char a[17], b[17];
	enum status st;

	if ((st = check_inc(t, incs, 2, &inc, ans)) != ST_OK)
		return st;
	if (t->state == REG_CONNECTED && t->incarnation != inc &&
	    !t->recoverable) {
		say(ans, REG_FAILED_IN_EPOCH,
		    "task %s registered again with incarnation %s while "
		    "connected as %s: it has restarted. The old incarnation "
		    "counts as failed; the new one joins the next run",
		    t->name, task_format_incarnation(inc, a),
		    task_format_incarnation(t->incarnation, b));
		registry_set_error(r, t, ST_ABORTED, ans->msg, 0, 1);
		/* A restart from outside is a new member of the next run, as
		 * one from preemptwatch itself would be. */
		ans->reason = REG_FAILED_IN_EPOCH;
		return ST_ABORTED;
	}
	if (registry_failed_now(r, t) && !t->recoverable) {
		say(ans, REG_FAILED_IN_EPOCH,
		    "task %s failed in epoch %ld "
		    "(%s: %s); it must be reset, or the job wind down, before "
		    "it registers again",
		    t->name, r->v.epoch, status_name(t->err),
		    t->errmsg != NULL ? t->errmsg : "");
		return ST_ABORTED;
	}
	/*
	 * A task that already left this run (finished, stopped, preempted)
	 * joins the next one: rejoining would revive a run that is winding
	 * down, with its notice and its passed barriers.
	 */
	if (t->state == REG_DISCONNECTED && t->left_epoch == r->v.epoch + 1 &&
	    !t->recoverable) {
		say(ans, REG_RUN_OVER,
		    "task %s already left epoch %ld; it can "
		    "register again once every task has left",
		    t->name, r->v.epoch);
		return ST_FAILED_PRECONDITION;
	}
	if (left_run(r, t))
		r->left--;
	if (t->state != REG_CONNECTED)
		r->v.nconnected++;
	r->used = 1;
	t->err_active = 0;
	if (r->failed == t)
		find_failed(r);
	if (t->state != REG_CONNECTED || t->incarnation != inc)
		log_info("task %s registered (incarnation %s)", t->name,
		    task_format_incarnation(inc, a));
	t->state = REG_CONNECTED;
	t->incarnation = inc;
	t->last_heartbeat = now;
	emit(r, REG_TASK_CONNECTED, t, 0);
	if (r->v.nconnected == r->v.ntasks)
		emit(r, REG_ALL_CONNECTED, t, 0);
	return ST_OK;
}

enum status
registry_heartbeat(struct registry *r, struct reg_task *t, const char *incs,
    int64_t now, struct reg_answer *ans)
{
	uint64_t inc;
	enum status st;

	(void)r;
	if (t->state == REG_ERROR) {
		say(ans, REG_NO_REASON, "task %s is in error: %s", t->name,
		    t->errmsg != NULL ? t->errmsg : "");
		return t->err;
	}
	if (t->state == REG_DISCONNECTED) {
		say(ans, REG_NOT_REGISTERED, "task %s is not registered",
		    t->name);
		return ST_INVALID_ARGUMENT;
	}
	if ((st = check_inc(t, incs, 1, &inc, ans)) != ST_OK)
		return st;
	t->last_heartbeat = now;
	return ST_OK;
}

enum status
registry_may_report(struct registry *r, struct reg_task *t, const char *incs,
    struct reg_answer *ans)
{
	uint64_t inc;

	(void)r;
	if (t->state != REG_CONNECTED) {
		say(ans, REG_NO_REASON,
		    "task %s is %s, not connected: it cannot report an error",
		    t->name, registry_state_name(t->state));
		return ST_FAILED_PRECONDITION;
	}
	return check_inc(t, incs, 1, &inc, ans);
}

enum status
registry_wait_all(struct registry *r, struct reg_task *t, const char *incs,
    int64_t now, int *wait, int64_t *until, struct reg_answer *ans)
{
	uint64_t inc;
	enum status st;

	*wait = 0;
	if (t->state != REG_CONNECTED) {
		say(ans, REG_NO_REASON, "task %s is %s, not connected", t->name,
		    registry_state_name(t->state));
		return ST_FAILED_PRECONDITION;
	}
	if ((st = check_inc(t, incs, 1, &inc, ans)) != ST_OK)
		return st;
	if (r->failed != NULL) {
		struct reg_task *o = r->failed;
		say(ans, REG_NO_REASON, "task %s failed: %s: %s", o->name,
		    status_name(o->err), o->errmsg != NULL ? o->errmsg : "");
		return ST_INTERNAL;
	}
	/* A task that came and already left (its work done, or the run
	 * over for it) was there: the others do not wait for it. */
	if (r->v.nconnected + r->left == r->v.ntasks)
		return ST_OK;
	/* The first caller of the epoch starts the register clock. */
	if (r->all_deadline == 0)
		r->all_deadline = now + r->v.register_timeout;
	*wait = 1;
	*until = r->all_deadline;
	return ST_OK;
}

char *
registry_missing(struct registry *r, size_t max)
{
	struct buf b = {0};
	size_t n = 0;

	for (size_t i = 0; i < r->v.ntasks; i++) {
		if (r->tasks[i].state == REG_CONNECTED)
			continue;
		if (n++ < max)
			buf_printf(&b, "%s%s", n > 1 ? ", " : "",
			    r->tasks[i].name);
	}
	if (n > max)
		buf_printf(&b, " and %zu more", n - max);
	return buf_take(&b, NULL);
}

int
registry_finished_in(const struct reg_task *t, long epoch)
{
	return t->finished && t->left_epoch == epoch + 1;
}

enum status
registry_all_expired(struct registry *r, int64_t now, struct reg_answer *ans)
{
	char d[32], *names;

	if (r->all_deadline == 0 || now < r->all_deadline)
		return ST_OK;
	names = registry_missing(r, 10);
	say(ans, REG_NO_REASON,
	    "tasks %s did not register within the register timeout of %s",
	    names != NULL ? names : "",
	    duration_format(r->v.register_timeout, d, sizeof(d)));
	free(names);
	return ST_DEADLINE_EXCEEDED;
}

enum status
registry_shutdown(struct registry *r, struct reg_task *t, const char *incs,
    int no_barrier, int has_shutdown_barrier, int *barrier,
    struct reg_answer *ans)
{
	uint64_t inc;
	enum status st;

	*barrier = 0;
	if (t->state == REG_DISCONNECTED) {
		say(ans, REG_NO_REASON, "task %s is already disconnected",
		    t->name);
		return ST_FAILED_PRECONDITION;
	}
	if ((st = check_inc(t, incs, 1, &inc, ans)) != ST_OK)
		return st;
	/* Only a clean end of its work: not a leave after a failure or a
	 * preemption, after which it runs again. */
	t->finished = !no_barrier && t->state == REG_CONNECTED;
	if (t->state == REG_ERROR) {
		registry_disconnect(r, t);
		say(ans, REG_NO_REASON,
		    "task %s was in error (%s: %s); disconnected anyway",
		    t->name, status_name(t->err),
		    t->errmsg != NULL ? t->errmsg : "");
		return ST_FAILED_PRECONDITION;
	}
	/* Leaving because the run is over anyway (a failure, a preemption)
	 * is not the end of the work: no barrier. */
	if (!has_shutdown_barrier || t->recoverable || no_barrier) {
		registry_disconnect(r, t);
		log_info("task %s shut down", t->name);
		return ST_OK;
	}
	*barrier = 1;
	return ST_OK;
}

enum status
registry_reset(struct registry *r, struct reg_task *t, struct reg_answer *ans)
{
	/* A task that failed and then left is still in error for the run. */
	if (t->state != REG_ERROR && !registry_failed_now(r, t)) {
		say(ans, REG_NO_REASON,
		    "task %s is %s, not in error: nothing to reset", t->name,
		    registry_state_name(t->state));
		return ST_FAILED_PRECONDITION;
	}
	registry_disconnect(r, t);
	if (left_run(r, t))
		r->left--;
	t->err_active = 0;
	t->left_epoch = 0;
	t->finished = 0;
	/* Reset: not failed now, whatever epoch its error is from. */
	t->err_epoch = -1;
	if (r->failed == t)
		find_failed(r);
	log_info("task %s reset", t->name);
	return ST_OK;
}

void
registry_scan(struct registry *r, int64_t now,
    int64_t (*excused)(const struct reg_task *t, void *arg), void *arg)
{
	char msg[320], a[32], b[32], c[32];

	for (size_t i = 0; i < r->v.ntasks; i++) {
		struct reg_task *t = &r->tasks[i];
		int64_t silent, busy;

		if (t->state != REG_CONNECTED ||
		    now - t->last_heartbeat <= r->v.hb_timeout)
			continue;
		/* Time the service could not have heard it is not silence. */
		busy = excused != NULL ? excused(t, arg) : 0;
		silent = now - t->last_heartbeat - busy;
		if (silent <= r->v.hb_timeout)
			continue;
		snprintf(msg, sizeof(msg),
		    "no heartbeat for %s (timeout %s%s%s): "
		    "the task failed, crashed or was preempted",
		    duration_format(silent, a, sizeof(a)),
		    duration_format(r->v.hb_timeout, b, sizeof(b)),
		    busy * 10 >= r->v.hb_timeout ?
		        "; not counting the service's busy " :
		        "",
		    busy * 10 >= r->v.hb_timeout ?
		        duration_format(busy, c, sizeof(c)) :
		        "");
		registry_set_error(r, t, ST_UNAVAILABLE, msg, 0, 1);
	}
}

/*
 * Once no task is connected the job has wound down: start a new epoch so
 * that the next run of the job finds a clean cluster. Errors stay readable
 * as each task's last error.
 */
void
registry_settle(struct registry *r)
{
	if (r->v.nconnected > 0 || !r->used)
		return;
	/* Tasks in error stay so, for all to see, but may join the new run. */
	for (size_t i = 0; i < r->v.ntasks; i++)
		r->tasks[i].err_active = 0;
	r->failed = NULL;
	r->all_deadline = 0;
	r->used = 0;
	r->left = 0;
	r->v.epoch++;
	emit(r, REG_EPOCH, NULL, 0);
}

int
registry_snapshot(const struct registry *r, struct buf *out)
{
	struct rec_out o = {.b = out};

	rec_put_u(&o, r->v.service);
	rec_put_i(&o, r->v.epoch);
	rec_put_u(&o, (uint64_t)r->used);
	rec_put_u(&o, r->v.ntasks);
	for (size_t i = 0; i < r->v.ntasks; i++) {
		const struct reg_task *t = &r->tasks[i];

		rec_put_u(&o, (uint64_t)t->state);
		rec_put_u(&o, t->incarnation);
		rec_put_u(&o, (uint64_t)t->err);
		rec_put_s(&o, t->errmsg);
		rec_put_u(&o,
		    (uint64_t)(t->err_reported | t->err_active << 1 |
		        t->finished << 2));
		rec_put_i(&o, t->left_epoch);
		rec_put_i(&o, t->err_epoch);
	}
	return o.err ? -1 : 0;
}

int
registry_restore(struct registry *r, struct rec_in *rd, int64_t now, char *err,
    size_t errlen)
{
	uint64_t service = rec_get_u(rd);
	int64_t epoch = rec_get_i(rd);
	uint64_t used = rec_get_u(rd);
	uint64_t n = rec_get_u(rd);
	struct reg_task *v = NULL;

	if (rd->err || n != r->v.ntasks) {
		snprintf(err, errlen,
		    rd->err ?
		        "the task registry's state is damaged" :
		        "the state directory holds %llu tasks; the cluster "
		        "given has %zu: a state directory belongs to one "
		        "cluster",
		    (unsigned long long)n, r->v.ntasks);
		return -1;
	}
	/* Read whole before any of it is taken. */
	if (n > 0 && (v = calloc(n, sizeof(*v))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < n && !rd->err; i++) {
		uint64_t state = rec_get_u(rd), code, flags;

		v[i].incarnation = rec_get_u(rd);
		code = rec_get_u(rd);
		v[i].errmsg = rec_get_s(rd, 1 << 20);
		flags = rec_get_u(rd);
		v[i].left_epoch = (long)rec_get_i(rd);
		v[i].err_epoch = (long)rec_get_i(rd);
		if (state > REG_ERROR || code >= ST_COUNT || flags > 7)
			rd->err = 1;
		v[i].state = (enum reg_state)state;
		v[i].err = (enum status)code;
		v[i].err_reported = (int)(flags & 1);
		v[i].err_active = (int)(flags >> 1 & 1);
		v[i].finished = (int)(flags >> 2 & 1);
	}
	if (rd->err || used > 1 || epoch < 0) {
		for (size_t i = 0; i < n; i++)
			free(v[i].errmsg);
		free(v);
		snprintf(err, errlen, "the task registry's state is damaged");
		return -1;
	}
	r->v.service = service;
	r->v.epoch = (long)epoch;
	r->used = (int)used;
	r->v.nconnected = 0;
	r->left = 0;
	for (size_t i = 0; i < n; i++) {
		struct reg_task *t = &r->tasks[i];

		t->state = v[i].state;
		t->incarnation = v[i].incarnation;
		t->err = v[i].err;
		free(t->errmsg);
		t->errmsg = v[i].errmsg;
		t->err_reported = v[i].err_reported;
		t->err_active = v[i].err_active;
		t->finished = v[i].finished;
		t->left_epoch = v[i].left_epoch;
		t->err_epoch = v[i].err_epoch;
		/* Heard from now: it has a heartbeat timeout to be heard. */
		t->last_heartbeat = now;
		if (t->state == REG_CONNECTED)
			r->v.nconnected++;
		if (left_run(r, t))
			r->left++;
	}
	free(v);
	r->all_deadline = 0;
	find_failed(r);
	return 0;
}

void
registry_heard_all(struct registry *r, int64_t now)
{
	for (size_t i = 0; i < r->v.ntasks; i++)
		r->tasks[i].last_heartbeat = now;
	r->all_deadline = 0;
}
