#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "barrier.h"
#include "buf.h"
#include "log.h"
#include "rec.h"
#include "strmap.h"

struct barriers {
	struct registry *reg;
	struct strmap *byid; /* id -> struct barrier */
	struct barrier *pending;
	struct barrier *shutdown;
	bar_observer_fn observe;
	void *arg;
	int64_t settle_until; /* see barriers_set_settle */
	int restarted;        /* and a task showed it was registered before */
	/* Ended barriers in the id map, oldest first (through prev, next):
	 * the first to go when the map is full. */
	struct barrier *ended, *ended_last;
	size_t max;
	unsigned long refused;
};

static void barrier_free(void *p);

struct barriers *
barriers_new(struct registry *r, bar_observer_fn fn, void *arg)
{
	struct barriers *bs = calloc(1, sizeof(*bs));

	if (bs == NULL || (bs->byid = strmap_new()) == NULL) {
		free(bs);
		return NULL;
	}
	bs->reg = r;
	bs->observe = fn;
	bs->arg = arg;
	bs->max = BAR_MAX_DEFAULT;
	return bs;
}

void
barriers_set_limit(struct barriers *bs, size_t max)
{
	bs->max = max > 0 ? max : BAR_MAX_DEFAULT;
}

size_t
barriers_count(const struct barriers *bs)
{
	return strmap_count(bs->byid);
}

unsigned long
barriers_refused(const struct barriers *bs)
{
	return bs->refused;
}

/*
 * Whether a new barrier id may be recorded: the oldest ended barrier is
 * forgotten to make room (a late arrival there starts afresh), and when
 * every one recorded is still pending, the new one is refused.
 */
static int
room_for_one(struct barriers *bs, char *msg, size_t msglen)
{
	while (strmap_count(bs->byid) >= bs->max && bs->ended != NULL) {
		struct barrier *b = bs->ended;

		bs->ended = b->next;
		if (bs->ended != NULL)
			bs->ended->prev = NULL;
		else
			bs->ended_last = NULL;
		strmap_del(bs->byid, b->id, strlen(b->id));
		barrier_free(b);
	}
	if (strmap_count(bs->byid) < bs->max)
		return 1;
	bs->refused++;
	snprintf(msg, msglen,
	    "%zu barriers are pending, the limit (coordd --max-barriers)",
	    strmap_count(bs->byid));
	return 0;
}

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

void
barriers_free(struct barriers *bs)
{
	if (bs == NULL)
		return;
	strmap_free(bs->byid, barrier_free);
	barrier_free(bs->shutdown);
	free(bs);
}

struct barrier *
barriers_find(struct barriers *bs, const char *id)
{
	return strmap_get(bs->byid, id, strlen(id));
}

struct barrier *
barriers_shutdown_barrier(struct barriers *bs)
{
	return bs->shutdown;
}

struct barrier *
barriers_pending(struct barriers *bs)
{
	return bs->pending;
}

int64_t
barriers_next_deadline(struct barriers *bs)
{
	int64_t at = INT64_MAX;

	for (struct barrier *b = bs->pending; b != NULL; b = b->next) {
		if (b->deadline < at)
			at = b->deadline;
		if (b->fix_at != 0 && b->fix_at < at)
			at = b->fix_at;
	}
	return at;
}

void
barriers_set_settle(struct barriers *bs, int64_t until)
{
	bs->settle_until = until;
}

void
barriers_restart_seen(struct barriers *bs)
{
	bs->restarted = 1;
}

static void
unlink_pending(struct barriers *bs, struct barrier *b)
{
	if (b->prev != NULL)
		b->prev->next = b->next;
	else if (bs->pending == b)
		bs->pending = b->next;
	if (b->next != NULL)
		b->next->prev = b->prev;
	b->prev = b->next = NULL;
}

char *
barrier_names(struct barriers *bs, const struct barrier *b, int arrived,
    size_t max)
{
	size_t ntasks = registry_view(bs->reg)->ntasks, n = 0;
	struct buf out = {0};

	for (size_t i = 0; i < ntasks; i++) {
		if (b->at[i] == BAR_NOT_MEMBER ||
		    (b->at[i] == BAR_ARRIVED) != arrived)
			continue;
		if (n++ < max)
			buf_printf(&out, "%s%s", n > 1 ? ", " : "",
			    registry_task(bs->reg, i)->name);
	}
	if (n > max)
		buf_printf(&out, " and %zu more", n - max);
	return buf_take(&out, NULL);
}

/*
 * Ends b with st. The shutdown barrier also disconnects those who made it,
 * and puts the stragglers in error so that their next heartbeat tells them.
 */
static void
complete(struct barriers *bs, struct barrier *b, enum status st,
    const char *msg)
{
	size_t ntasks = registry_view(bs->reg)->ntasks;

	if (b->state != BAR_PENDING)
		return;
	b->state = st == ST_OK ? BAR_PASSED : BAR_FAILED;
	b->result = st;
	free(b->message);
	b->message = strdup(msg != NULL ? msg : "");
	unlink_pending(bs, b);
	if (!b->shutdown) {
		b->prev = bs->ended_last;
		if (bs->ended_last != NULL)
			bs->ended_last->next = b;
		else
			bs->ended = b;
		bs->ended_last = b;
	}
	if (st != ST_OK)
		log_info("barrier %s failed: %s: %s", b->id, status_name(st),
		    msg);
	if (bs->observe != NULL)
		bs->observe(b, bs->arg);
	if (!b->shutdown)
		return;
	for (size_t i = 0; i < ntasks; i++) {
		struct reg_task *t = registry_task(bs->reg, i);

		if (b->at[i] == BAR_ARRIVED && t->state != REG_DISCONNECTED) {
			registry_disconnect(bs->reg, t);
		} else if (b->at[i] == BAR_MEMBER && st != ST_OK &&
		    t->state == REG_CONNECTED) {
			char m[1024];
			snprintf(m, sizeof(m),
			    "the shutdown barrier failed "
			    "before this task arrived: %s",
			    b->message);
			registry_set_error(bs->reg, t, ST_INTERNAL, m, 0, 0);
		}
	}
}

enum status
barrier_result(const struct barrier *b, char *msg, size_t msglen)
{
	snprintf(msg, msglen, "%s", b->message != NULL ? b->message : "");
	return b->result;
}

static struct barrier *
make(struct barriers *bs, const char *id, int64_t deadline)
{
	struct barrier *b = calloc(1, sizeof(*b));

	if (b == NULL || (b->id = strdup(id)) == NULL ||
	    (b->at = calloc(registry_view(bs->reg)->ntasks + 1, 1)) == NULL) {
		barrier_free(b);
		return NULL;
	}
	b->deadline = deadline;
	b->next = bs->pending;
	if (b->next != NULL)
		b->next->prev = b;
	bs->pending = b;
	return b;
}

/* A barrier in the id map; NULL on ENOMEM. */
static struct barrier *
make_named(struct barriers *bs, const char *id, int64_t deadline)
{
	struct barrier *b = make(bs, id, deadline);

	if (b != NULL && strmap_put(bs->byid, id, strlen(id), b) < 0) {
		unlink_pending(bs, b);
		barrier_free(b);
		return NULL;
	}
	return b;
}

static enum bar_verdict answer(enum status *st, char *msg, size_t msglen,
    enum status what, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static enum bar_verdict
answer(enum status *st, char *msg, size_t msglen, enum status what,
    const char *fmt, ...)
{
	va_list ap;

	*st = what;
	va_start(ap, fmt);
	vsnprintf(msg, msglen, fmt, ap);
	va_end(ap);
	return BAR_ANSWER;
}

/* Records t's arrival at b: the answer, or a wait. */
static enum bar_verdict
arrive(struct barriers *bs, struct barrier *b, struct reg_task *t,
    struct barrier **bp, enum status *st, char *msg, size_t msglen)
{
	size_t i = t->index;

	*bp = b;
	if (b->state != BAR_PENDING) {
		*st = barrier_result(b, msg, msglen);
		return BAR_ANSWER;
	}
	if (b->at[i] == BAR_NOT_MEMBER) {
		answer(st, msg, msglen, ST_INVALID_ARGUMENT,
		    "task %s is not a member of barrier %s", t->name, b->id);
		complete(bs, b, ST_INVALID_ARGUMENT, msg);
		return BAR_ANSWER;
	}
	if (b->at[i] == BAR_MEMBER) {
		b->at[i] = BAR_ARRIVED;
		b->arrived++;
	}
	if (b->arrived == b->members) {
		complete(bs, b, ST_OK, NULL);
		*st = barrier_result(b, msg, msglen);
		return BAR_ANSWER;
	}
	return BAR_WAIT;
}

/*
 * A member that cannot come fails b as it is made: one in error (the
 * reference's barriers fail for it), and one that already left this run,
 * which may not register in it again (a listed member would otherwise be
 * waited for until the deadline).
 */
static void
check_member(struct barriers *bs, struct barrier *b, const struct reg_task *o)
{
	long epoch = registry_view(bs->reg)->epoch;
	char m[1024];

	if (o->state == REG_ERROR) {
		snprintf(m, sizeof(m), "task %s is in error: %s: %s", o->name,
		    status_name(o->err), o->errmsg != NULL ? o->errmsg : "");
		complete(bs, b, ST_INTERNAL, m);
	} else if (o->state == REG_DISCONNECTED && !o->recoverable &&
	    o->left_epoch == epoch + 1) {
		snprintf(m, sizeof(m),
		    "task %s already left this run (shut down): it will not "
		    "come to barrier %s",
		    o->name, b->id);
		complete(bs, b, ST_FAILED_PRECONDITION, m);
	}
}

static int
same_members(size_t ntasks, const unsigned char *x, const unsigned char *y)
{
	for (size_t i = 0; i < ntasks; i++)
		if ((x[i] != 0) != (y[i] != 0))
			return 0;
	return 1;
}

enum bar_verdict
barriers_wait(struct barriers *bs, const char *id, struct reg_task *t,
    uint64_t inc, int64_t timeout_ms, const size_t *members, size_t n,
    const char *bad_list, int64_t now, struct barrier **bp, int64_t *until,
    enum status *st, char *msg, size_t msglen)
{
	size_t ntasks = registry_view(bs->reg)->ntasks;
	struct barrier *b = barriers_find(bs, id);
	unsigned char *at = NULL;
	enum bar_verdict v;
	char a[17], c[17];

	*bp = b;
	/* An ended barrier answers its members the same way every time. */
	if (b != NULL && b->state != BAR_PENDING) {
		if (b->at[t->index] != BAR_NOT_MEMBER || b->result != ST_OK) {
			*st = barrier_result(b, msg, msglen);
			return BAR_ANSWER;
		}
		return answer(st, msg, msglen, ST_FAILED_PRECONDITION,
		    "barrier %s has already passed; barrier ids are single-use",
		    id);
	}
	if (t->state == REG_DISCONNECTED && inc != 0 &&
	    now < bs->settle_until) {
		/* Its agent has not registered with this coordd yet: a task
		 * of a job that outlived the coordd before. */
		bs->restarted = 1;
		*until = bs->settle_until;
		return BAR_REGISTER;
	}
	if (t->state != REG_CONNECTED)
		return answer(st, msg, msglen, ST_FAILED_PRECONDITION,
		    "task %s is %s, not connected", t->name,
		    t->state == REG_ERROR ? "in error" : "not registered");
	if (inc != 0 && inc != t->incarnation)
		return answer(st, msg, msglen, ST_ABORTED,
		    "incarnation mismatch for task %s: expected %s, got %s",
		    t->name, task_format_incarnation(t->incarnation, a),
		    task_format_incarnation(inc, c));
	if (bad_list != NULL) {
		answer(st, msg, msglen, ST_INVALID_ARGUMENT, "%s", bad_list);
		if (b != NULL)
			complete(bs, b, ST_INVALID_ARGUMENT, msg);
		return BAR_ANSWER;
	}
	if (members != NULL) {
		if ((at = calloc(ntasks + 1, 1)) == NULL)
			return answer(st, msg, msglen, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
		for (size_t k = 0; k < n; k++)
			at[members[k]] = BAR_MEMBER;
	}
	if (b == NULL) {
		if (timeout_ms <= 0)
			timeout_ms = BAR_TIMEOUT_DEFAULT_MS;
		if (timeout_ms > BAR_TIMEOUT_MAX_MS)
			timeout_ms = BAR_TIMEOUT_MAX_MS;
		if (!room_for_one(bs, msg, msglen)) {
			free(at);
			*st = ST_RESOURCE_EXHAUSTED;
			return BAR_ANSWER;
		}
		if ((b = make_named(bs, id, now + timeout_ms)) == NULL) {
			free(at);
			return answer(st, msg, msglen, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
		}
		/* While tasks may still be registering again, "every
		 * connected task" is every task, for now. */
		if (at == NULL && bs->restarted && now < bs->settle_until &&
		    registry_view(bs->reg)->nconnected < ntasks)
			b->fix_at = bs->settle_until;
		for (size_t i = 0; i < ntasks; i++) {
			int in = at != NULL ? at[i] != 0 :
			    b->fix_at != 0  ? 1 :
			                      registry_task(bs->reg, i)->state ==
			        REG_CONNECTED;
			if (in) {
				b->at[i] = BAR_MEMBER;
				b->members++;
			}
		}
		b->explicit_set = at != NULL;
		for (size_t i = 0; i < ntasks && b->state == BAR_PENDING; i++)
			if (b->at[i] != BAR_NOT_MEMBER)
				check_member(bs, b, registry_task(bs->reg, i));
	} else if ((at != NULL) != b->explicit_set ||
	    (at != NULL && !same_members(ntasks, at, b->at))) {
		free(at);
		answer(st, msg, msglen, ST_INVALID_ARGUMENT,
		    "task %s gave "
		    "barrier %s a different set of tasks than the first caller",
		    t->name, id);
		complete(bs, b, ST_INVALID_ARGUMENT, msg);
		return BAR_ANSWER;
	}
	free(at);
	v = arrive(bs, b, t, bp, st, msg, msglen);
	return v;
}

enum bar_verdict
barriers_shutdown_wait(struct barriers *bs, struct reg_task *t,
    int64_t timeout_ms, int64_t now, struct barrier **bp, enum status *st,
    char *msg, size_t msglen)
{
	struct barrier *b = bs->shutdown;
	size_t ntasks = registry_view(bs->reg)->ntasks;

	if (b == NULL) {
		if ((b = make(bs, "shutdown", now + timeout_ms)) == NULL)
			return answer(st, msg, msglen, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
		bs->shutdown = b;
		b->shutdown = 1;
		b->explicit_set = 1;
		/* Who may still come: a task that failed or already left
		 * will not, and must not hold the others up. */
		for (size_t i = 0; i < ntasks; i++) {
			struct reg_task *o = registry_task(bs->reg, i);
			if (!o->recoverable && o->state == REG_CONNECTED) {
				b->at[i] = BAR_MEMBER;
				b->members++;
			}
		}
	}
	return arrive(bs, b, t, bp, st, msg, msglen);
}

enum status
barriers_cancel(struct barriers *bs, const char *id, const char *by,
    int64_t now, char *msg, size_t msglen)
{
	struct barrier *b = barriers_find(bs, id);

	/* Cancelled before anyone came: later arrivals are told. */
	if (b == NULL && !room_for_one(bs, msg, msglen))
		return ST_RESOURCE_EXHAUSTED;
	if (b == NULL && (b = make_named(bs, id, now)) == NULL) {
		snprintf(msg, msglen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	if (b->state == BAR_PASSED) {
		snprintf(msg, msglen, "barrier %s has already passed", id);
		return ST_FAILED_PRECONDITION;
	}
	if (b->state == BAR_FAILED && b->result != ST_CANCELLED) {
		snprintf(msg, msglen, "barrier %s has already failed: %s: %s",
		    id, status_name(b->result), b->message);
		return ST_FAILED_PRECONDITION;
	}
	snprintf(msg, msglen, "barrier %s was cancelled by %s%s", id,
	    by != NULL ? "task " : "an operator", by != NULL ? by : "");
	complete(bs, b, ST_CANCELLED, msg);
	return ST_OK;
}

void
barriers_task_left(struct barriers *bs, struct reg_task *t)
{
	struct barrier *b, *next;
	char msg[1024];

	for (b = bs->pending; b != NULL; b = next) {
		next = b->next;
		if (b->shutdown || b->at[t->index] == BAR_NOT_MEMBER)
			continue;
		/* It will not come back to it in this run: nobody may pass
		 * a barrier that a member left, nor wait for it in vain. */
		snprintf(msg, sizeof(msg),
		    "task %s left (shut down) while barrier %s was pending",
		    t->name, b->id);
		complete(bs, b, ST_INTERNAL, msg);
	}
}

void
barriers_task_failed(struct barriers *bs, struct reg_task *t)
{
	size_t i = t->index;
	struct barrier *b, *next;
	char msg[1024];

	snprintf(msg, sizeof(msg), "task %s is in error: %s: %s", t->name,
	    status_name(t->err), t->errmsg != NULL ? t->errmsg : "");
	for (b = bs->pending; b != NULL; b = next) {
		next = b->next;
		/*
		 * The shutdown barrier too, as upstream's service has it: a
		 * job that lost a task on its way out did not finish
		 * together, and those leaving are told so (INTERNAL) rather
		 * than that all went well.
		 */
		if (b->at[i] != BAR_NOT_MEMBER)
			complete(bs, b, ST_INTERNAL, msg);
	}
}

/*
 * Makes b's provisional members final: those not connected that have not
 * arrived are dropped. b may pass now.
 */
static void
fix(struct barriers *bs, struct barrier *b)
{
	size_t ntasks = registry_view(bs->reg)->ntasks;

	b->fix_at = 0;
	for (size_t i = 0; i < ntasks; i++) {
		if (b->at[i] == BAR_MEMBER &&
		    registry_task(bs->reg, i)->state != REG_CONNECTED) {
			b->at[i] = BAR_NOT_MEMBER;
			b->members--;
		}
	}
	if (b->members > 0 && b->arrived == b->members)
		complete(bs, b, ST_OK, NULL);
}

void
barriers_all_connected(struct barriers *bs)
{
	struct barrier *b, *next;

	for (b = bs->pending; b != NULL; b = next) {
		next = b->next;
		if (b->fix_at != 0)
			fix(bs, b);
	}
}

void
barriers_expire(struct barriers *bs, int64_t now)
{
	struct barrier *b, *next;

	for (b = bs->pending; b != NULL; b = next) {
		char *missing, msg[1024];

		next = b->next;
		if (b->fix_at != 0 && b->fix_at <= now && b->deadline > now) {
			fix(bs, b);
			continue;
		}
		if (b->deadline > now)
			continue;
		missing = barrier_names(bs, b, 0, 10);
		snprintf(msg, sizeof(msg),
		    "barrier %s timed out; not arrived: %s", b->id,
		    missing != NULL ? missing : "");
		free(missing);
		complete(bs, b, ST_DEADLINE_EXCEEDED, msg);
	}
}

void
barriers_abort(struct barriers *bs, enum status st, const char *msg)
{
	struct barrier *b, *next;

	for (b = bs->pending; b != NULL; b = next) {
		next = b->next;
		complete(bs, b, st, msg);
	}
}

void
barriers_reset(struct barriers *bs, enum status st, const char *msg)
{
	struct strmap *fresh = strmap_new();

	barriers_abort(bs, st, msg);
	if (fresh == NULL)
		return; /* keep the old ids: still correct, if stale */
	strmap_free(bs->byid, barrier_free);
	bs->byid = fresh;
	bs->ended = bs->ended_last = NULL;
	barrier_free(bs->shutdown);
	bs->shutdown = NULL;
}

int
barrier_record(const struct barrier *b, size_t ntasks, struct buf *out)
{
	struct rec_out o = {.b = out};

	rec_put_s(&o, b->id);
	rec_put_u(&o, (uint64_t)b->result);
	rec_put_s(&o, b->message);
	rec_put_blob(&o, b->at, ntasks);
	return o.err ? -1 : 0;
}

int
barriers_restore(struct barriers *bs, struct rec_in *r, char *err,
    size_t errlen)
{
	size_t ntasks = registry_view(bs->reg)->ntasks, n;
	char *id = rec_get_s(r, 256);
	uint64_t result = rec_get_u(r);
	char *msg = rec_get_s(r, 1 << 20);
	const unsigned char *at = rec_get_blob(r, ntasks, &n);
	struct barrier *b;
	int rc = -1;

	if (r->err || id == NULL || n != ntasks || result >= ST_COUNT ||
	    id[0] == '\0') {
		snprintf(err, errlen, "a barrier's record is damaged");
		goto out;
	}
	if ((b = barriers_find(bs, id)) == NULL) {
		if (!room_for_one(bs, err, errlen))
			goto out;
		if ((b = make_named(bs, id, 0)) == NULL) {
			snprintf(err, errlen, "out of memory");
			goto out;
		}
	}
	b->members = 0;
	for (size_t i = 0; i < ntasks; i++) {
		b->at[i] = at[i] <= BAR_ARRIVED ? at[i] : BAR_MEMBER;
		b->members += b->at[i] != BAR_NOT_MEMBER;
	}
	if (b->state == BAR_PENDING) {
		complete(bs, b, (enum status)result, msg);
	} else {
		b->state = result == ST_OK ? BAR_PASSED : BAR_FAILED;
		b->result = (enum status)result;
		free(b->message);
		b->message = msg;
		msg = NULL;
	}
	rc = 0;
out:
	free(id);
	free(msg);
	return rc;
}

struct barrier *
barriers_ended(struct barriers *bs)
{
	return bs->ended;
}
