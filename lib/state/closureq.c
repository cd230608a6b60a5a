/*
 * closureq.c: the closure queue's operations; see closureq.h. Each checks
 * and decides, and makes its change by committing a record of it
 * (closureq_rec.c), never by changing the state itself; see
 * closureq_int.h.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "closureq_int.h"
#include "duration.h"
#include "errbuf.h"
#include "strmap.h"
#include "task.h"
#include "vec.h"

struct cq_queue *
cq_queue(struct cq *cq, const char *name, int create)
{
	struct cq_queue *q = cq_queue_get(cq, name, 0);

	if (q != NULL || !create || !cq_name_valid(name) ||
	    cq_commit_queue(cq, name) < 0)
		return q;
	return cq_queue_get(cq, name, 0);
}

static char *
dup_or(const char *s, int *nomem)
{
	char *p;

	if (s == NULL)
		return NULL;
	if ((p = strdup(s)) == NULL)
		*nomem = 1;
	return p;
}

struct cq_closure *
cq_closure_new(struct cq *cq, struct cq_spec *s, enum status *st, char *msg,
    size_t msglen)
{
	struct cq_closure *c = NULL;
	int nomem = 0;

	*st = ST_INVALID_ARGUMENT;
	if (s->spec == NULL) {
		*st = ST_RESOURCE_EXHAUSTED;
		errbuf_say(msg, msglen, "out of memory");
		return NULL;
	}
	if (s->nretry_exit > CQ_MAX_RETRY_CODES || s->nneeds > 64) {
		errbuf_say(msg, msglen, "too many retry codes or needs");
		return NULL;
	}
	for (size_t i = 0; i < s->nneeds; i++)
		if (strmap_get(cq->resources, s->needs[i],
		        strlen(s->needs[i])) == NULL) {
			errbuf_say(msg, msglen,
			    "needs: no resource %s (add it with "
			    "dispatchctl resource add)",
			    s->needs[i]);
			goto refused;
		}
	*st = ST_RESOURCE_EXHAUSTED;
	if (s->speclen > cq->cfg.max_spec) {
		errbuf_say(msg, msglen, "the closure is larger than %zu bytes",
		    cq->cfg.max_spec);
		goto refused;
	}
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		errbuf_say(msg, msglen, "out of memory");
		goto refused;
	}
	c->spec = s->spec; /* taken over */
	s->spec = NULL;
	c->speclen = s->speclen;
	c->on = dup_or(s->on, &nomem);
	c->key = dup_or(s->key, &nomem);
	if (s->nneeds > 0 &&
	    (c->needs = calloc(s->nneeds + 1, sizeof(char *))) == NULL)
		nomem = 1;
	for (size_t i = 0; !nomem && c->needs != NULL && i < s->nneeds; i++)
		c->needs[i] = dup_or(s->needs[i], &nomem);
	if (s->nretry_exit > 0)
		memcpy(c->retry_exit, s->retry_exit,
		    s->nretry_exit * sizeof(*c->retry_exit));
	c->nretry_exit = s->nretry_exit;
	c->max_retries = s->max_retries;
	c->independent = s->independent != 0;
	if (nomem) {
		cq_closure_free(cq, c);
		errbuf_say(msg, msglen, "out of memory");
		return NULL;
	}
	*st = ST_OK;
	return c;
refused:
	free(s->spec);
	s->spec = NULL;
	return NULL;
}

void
cq_closure_discard(struct cq *cq, struct cq_closure *c)
{
	if (c != NULL)
		cq_closure_free(cq, c);
}

enum status
cq_enqueue(struct cq *cq, struct cq_queue *q, struct cq_closure *c, int64_t now,
    uint64_t *id, int *dup, char *msg, size_t msglen)
{
	uint64_t *known;
	int rc;

	*dup = 0;
	if (c->key != NULL &&
	    (known = strmap_get(q->keys, c->key, strlen(c->key))) != NULL) {
		*id = *known;
		*dup = 1;
		cq_closure_free(cq, c);
		return ST_OK;
	}
	*id = cq->nid;
	rc = cq_commit_enqueue(cq, c, q, cq->nid, now, msg, msglen);
	cq_closure_free(cq, c);
	return rc < 0 ? ST_RESOURCE_EXHAUSTED : ST_OK;
}

struct cq_closure *
cq_take_error(struct cq *cq, struct cq_queue *q, int64_t now)
{
	struct cq_closure *e = q->error;

	/* Not taken when its record could not be: a later call does. */
	if (e != NULL && cq_commit_take_error(cq, q, now) < 0)
		return NULL;
	return e;
}

size_t
cq_take_stops(struct cq_worker *w, uint64_t **ids, long **attempts)
{
	size_t n = w->nstop;

	*ids = NULL;
	*attempts = NULL;
	if (n == 0)
		return 0;
	if ((*ids = malloc(n * sizeof(**ids))) == NULL ||
	    (*attempts = malloc(n * sizeof(**attempts))) == NULL) {
		free(*ids);
		*ids = NULL;
		return 0; /* the next heartbeat takes them */
	}
	memcpy(*ids, w->stop, n * sizeof(**ids));
	memcpy(*attempts, w->stop_attempt, n * sizeof(**attempts));
	if (cq_commit_stops_taken(w->cq, w) < 0) {
		free(*ids);
		free(*attempts);
		*ids = NULL;
		*attempts = NULL;
		return 0; /* the next heartbeat takes them */
	}
	return n;
}

enum status
cq_cancel(struct cq *cq, struct cq_closure *c, int64_t now)
{
	if (c->state != CQ_QUEUED && c->state != CQ_RUNNING)
		return ST_FAILED_PRECONDITION;
	if (cq_commit_cancel(cq, c, now) < 0)
		return ST_RESOURCE_EXHAUSTED;
	return ST_OK;
}

enum status
cq_forget(struct cq *cq, struct cq_closure *c)
{
	if (c->state == CQ_QUEUED || c->state == CQ_RUNNING)
		return ST_FAILED_PRECONDITION;
	if (c->q->error == c)
		return ST_FAILED_PRECONDITION;
	if (cq_commit_forget(cq, c) < 0)
		return ST_RESOURCE_EXHAUSTED;
	return ST_OK;
}

void
cq_worker_failed(struct cq *cq, struct cq_worker *w, const char *why,
    int64_t now)
{
	if (w->live)
		(void)cq_commit_down(cq, w, 1, why, now);
}

void
cq_worker_leave(struct cq *cq, struct cq_worker *w, int64_t now)
{
	if (w->live)
		(void)cq_commit_down(cq, w, 0, "left", now);
}

struct cq_worker *
cq_register(struct cq *cq, const char *name, long slots, int64_t now, char *msg,
    size_t msglen)
{
	struct cq_worker *w;

	if (!cq_name_valid(name)) {
		errbuf_say(msg, msglen, "%s is not a worker name", name);
		return NULL;
	}
	if ((w = cq_worker_get(cq, name, 0)) != NULL && w->live &&
	    cq_commit_down(cq, w, 1,
	        "it registered again: the incarnation before is gone",
	        now) < 0) {
		errbuf_say(msg, msglen, "out of memory");
		return NULL;
	}
	if (cq_commit_register(cq, name, task_new_incarnation(), slots, now,
	        msg, msglen) < 0)
		return NULL;
	return cq_worker_get(cq, name, 0);
}

enum status
cq_worker_check(const struct cq_worker *w, const char *inc, char *msg,
    size_t msglen)
{
	uint64_t v;

	if (inc == NULL || task_parse_incarnation(inc, &v) < 0) {
		errbuf_say(msg, msglen, "incarnation= must be 16 hex digits");
		return ST_INVALID_ARGUMENT;
	}
	if (!w->live || v != w->inc) {
		errbuf_say(msg, msglen, "%s incarnation %s is not current (%s)",
		    w->name, inc,
		    w->live ? "it registered again" :
		              (w->why != NULL ? w->why : "not registered"));
		return ST_ABORTED;
	}
	return ST_OK;
}

void
cq_seen(struct cq *cq, struct cq_worker *w, int64_t now)
{
	(void)cq;
	w->last_seen = now;
}

void
cq_worker_unhealthy(struct cq *cq, struct cq_worker *w, const char *why,
    int64_t now)
{
	int64_t pause = 2000;

	for (unsigned i = 0; i < w->sick_streak && pause < CQ_SICK_MAX_MS; i++)
		pause *= 2;
	if (pause > CQ_SICK_MAX_MS)
		pause = CQ_SICK_MAX_MS;
	w->sick_until = now + pause;
	if (w->sick_until == 0)
		w->sick_until = 1;
	w->sick_streak++;
	w->start_failures++;
	cq->v.start_failures++;
	free(w->sick_why);
	w->sick_why = strdup(why);
}

/* Up to max of l's closures w may take now, into out. */
static size_t
pick_from(const struct cq_pending *l, const struct cq_worker *w, size_t max,
    struct cq_closure **out)
{
	size_t n = 0;

	for (struct cq_closure *c = l->head; c != NULL && n < max; c = c->next)
		if (cq_may_take(c, w))
			out[n++] = c;
	return n;
}

size_t
cq_take(struct cq *cq, struct cq_worker *w, size_t max, int64_t now,
    struct cq_closure **out)
{
	size_t n;

	if (!w->live || cq_worker_sick(w, now))
		return 0;
	if (max > CQ_TAKE_MAX)
		max = CQ_TAKE_MAX;
	n = pick_from(&w->pinned, w, max, out);
	n += pick_from(&cq->pending, w, max - n, out + n);
	if (n > 0 && cq_commit_take(cq, w, out, n, now) < 0)
		return 0;
	return n;
}

enum status
cq_report(struct cq *cq, struct cq_worker *w, uint64_t id, long attempt,
    int aborted, struct cq_result *res, int64_t now, char *msg, size_t msglen)
{
	struct cq_closure *c = cq_closure(cq, id);

	if (c == NULL || c->state != CQ_RUNNING || c->worker != w ||
	    c->attempts != attempt) {
		cq->v.stale++;
		errbuf_say(msg, msglen,
		    "attempt %ld of closure %" PRIu64 " is not current on %s",
		    attempt, id, w->name);
		return ST_ABORTED;
	}
	if (cq_commit_report(cq, w, c, aborted, res, now, msg, msglen) < 0)
		return ST_RESOURCE_EXHAUSTED;
	/* The record holds the result's bytes: they are taken. */
	free(res->out);
	free(res->err);
	free(res->message);
	memset(res, 0, sizeof(*res));
	return ST_OK;
}

struct scan_ctx {
	struct cq *cq;
	int64_t now;
	struct cq_worker **late;
	size_t n, cap;
};

static void
scan_one(const char *k, size_t kl, void *v, void *arg)
{
	struct scan_ctx *x = arg;
	struct cq_worker *w = v;

	(void)k;
	(void)kl;
	if (w->sick_until != 0 && x->now >= w->sick_until) {
		w->sick_until = 0;
		cq_emit(x->cq, CQ_EV_WORK, NULL, NULL, w);
	}
	if (!w->live || x->now - w->last_seen <= x->cq->cfg.hb_timeout_ms)
		return;
	if (vec_grow(&x->late, &x->cap, x->n + 1, sizeof(*x->late)) < 0)
		return;
	x->late[x->n++] = w;
}

void
cq_scan(struct cq *cq, int64_t now)
{
	struct scan_ctx x = {cq, now, NULL, 0, 0};
	char why[128], d[32];

	strmap_each(cq->workers, scan_one, &x);
	for (size_t i = 0; i < x.n; i++) {
		snprintf(why, sizeof(why), "no heartbeat for %s",
		    duration_format(now - x.late[i]->last_seen, d, sizeof(d)));
		(void)cq_commit_down(cq, x.late[i], 1, why, now);
	}
	free(x.late);
}

void
cq_resource_state(struct cq_worker *w, const char *name, int state,
    const char *message)
{
	(void)cq_commit_resource_state(w->cq, w, name, state, message);
}

enum status
cq_resource_add(struct cq *cq, const char *name, const char *json, char *msg,
    size_t msglen)
{
	const char *old;

	if (!cq_name_valid(name)) {
		errbuf_say(msg, msglen,
		    "%s is not a resource name (letters, digits, _-.:)", name);
		return ST_INVALID_ARGUMENT;
	}
	if ((old = strmap_get(cq->resources, name, strlen(name))) != NULL) {
		if (strcmp(old, json) == 0)
			return ST_OK;
		errbuf_say(msg, msglen,
		    "resource %s exists with another command", name);
		return ST_ALREADY_EXISTS;
	}
	if (cq_commit_resource(cq, name, json, msg, msglen) < 0)
		return ST_RESOURCE_EXHAUSTED;
	return ST_OK;
}
