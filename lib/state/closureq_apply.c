/*
 * closureq_apply.c: the closure queue's changes, as applying a record makes
 * them (closureq_rec.c), live and in replay alike; see closureq_int.h.
 * Each keeps the counters, the lists and the events in step, and none
 * decides anything a record does not say or the state does not fix.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "closureq_int.h"
#include "strmap.h"
#include "vec.h"

void
cq_end(struct cq *cq, struct cq_closure *c, enum cq_state st, int64_t now)
{
	c->state = st;
	cq->last_end = now;
	switch (st) {
	case CQ_READY: cq->v.done++; break;
	case CQ_ABORTED: cq->v.aborted++; break;
	case CQ_CANCELLED:
		cq->v.cancelled++;
		c->q->cancelled++;
		break;
	default: break;
	}
	if (st == CQ_READY)
		c->q->done++;
	cq_emit(cq, CQ_EV_ENDED, c, NULL, NULL);
}

/* The closure ended badly while its worker lived: q's error, if first
 * (and not an independent closure, whose failure is its own). */
void
cq_fail(struct cq *cq, struct cq_closure *c)
{
	c->failed = 1;
	cq->v.failed++;
	c->q->failed++;
	if (c->q->error == NULL && !c->independent)
		c->q->error = c;
}

static void
cancel_queued(struct cq *cq, struct cq_closure *c, int64_t now)
{
	cq_pend_unlink(c);
	c->q->queued--;
	cq->v.queued--;
	cq_end(cq, c, CQ_CANCELLED, now);
}

/* Says why c is cancelled: the error its queue holds. */
static void
cancelled_by_error(struct cq *cq, struct cq_closure *c)
{
	char why[CQ_NAME_MAX + 96];

	snprintf(why, sizeof(why),
	    "cancelled: closure %" PRIu64 " of queue %s failed",
	    c->q->error->id, c->q->name);
	cq_result_clear(cq, &c->res);
	c->res.message = strdup(why);
}

/*
 * A closure that did not finish goes back to the front of its list (it
 * waited longest), or is cancelled when its queue already failed.
 */
void
cq_put_back(struct cq *cq, struct cq_closure *c, int front, int64_t now)
{
	c->q->inflight--;
	cq->v.inflight--;
	if (c->q->error != NULL) {
		cancelled_by_error(cq, c);
		cq_end(cq, c, CQ_CANCELLED, now);
		return;
	}
	c->state = CQ_QUEUED;
	cq_pend_push(cq_pending_for(cq, c), c, front);
	c->q->queued++;
	cq->v.queued++;
	cq->v.put_back++;
	cq_emit(cq, CQ_EV_WORK, NULL, NULL, NULL);
}

void
cq_start(struct cq *cq, struct cq_worker *w, struct cq_closure *c)
{
	cq_pend_unlink(c);
	c->q->queued--;
	cq->v.queued--;
	c->q->inflight++;
	cq->v.inflight++;
	c->state = CQ_RUNNING;
	c->attempts++;
	free(c->last_worker);
	c->last_worker = strdup(w->name);
	cq_run_push(w, c);
	cq_emit(cq, CQ_EV_QUEUE, NULL, c->q, NULL);
}

static void
stop_add(struct cq_worker *w, uint64_t id, long attempt)
{
	if (w->nstop == w->capstop) {
		size_t cap = w->capstop != 0 ? w->capstop * 2 : 8;
		uint64_t *ids = realloc(w->stop, cap * sizeof(*ids));
		if (ids == NULL)
			return;
		w->stop = ids;
		long *at = realloc(w->stop_attempt, cap * sizeof(*at));
		if (at == NULL)
			return;
		w->stop_attempt = at;
		w->capstop = cap;
	}
	w->stop[w->nstop] = id;
	w->stop_attempt[w->nstop++] = attempt;
}

/*
 * Ends running closure c CANCELLED at once; its worker is told to stop it
 * (TERM, its grace, KILL) with its next heartbeat, and a result of that
 * attempt that comes after is stale. The caller emits CQ_EV_STOP for w.
 */
static struct cq_worker *
cancel_running(struct cq *cq, struct cq_closure *c, int64_t now)
{
	struct cq_worker *w = c->worker;

	stop_add(w, c->id, c->attempts);
	cq_run_unlink(c);
	c->q->inflight--;
	cq->v.inflight--;
	cq_end(cq, c, CQ_CANCELLED, now);
	return w;
}

void
cq_cancel_now(struct cq *cq, struct cq_closure *c, int64_t now)
{
	struct cq_queue *q = c->q;

	if (c->state == CQ_QUEUED)
		cancel_queued(cq, c, now);
	else
		cq_emit(cq, CQ_EV_STOP, NULL, NULL, cancel_running(cq, c, now));
	cq_emit(cq, CQ_EV_QUEUE, NULL, q, NULL);
}

struct cancel_ctx {
	struct cq *cq;
	struct cq_queue *q;
	int64_t now;
};

/* Cancels q's closures waiting in l. */
static void
cancel_list(struct cq *cq, struct cq_pending *l, struct cq_queue *q,
    int64_t now)
{
	struct cq_closure *c, *next;

	for (c = l->head; c != NULL; c = next) {
		next = c->next;
		if (c->q == q) {
			cancelled_by_error(cq, c);
			cancel_queued(cq, c, now);
		}
	}
}

static void
cancel_worker_list(const char *k, size_t kl, void *v, void *arg)
{
	struct cancel_ctx *x = arg;
	struct cq_worker *w = v;
	struct cq_closure *c, *next;
	int stopped = 0;

	(void)k;
	(void)kl;
	cancel_list(x->cq, &w->pinned, x->q, x->now);
	for (c = w->run_head; c != NULL; c = next) {
		next = c->next;
		if (c->q == x->q) {
			cancelled_by_error(x->cq, c);
			cancel_running(x->cq, c, x->now);
			stopped = 1;
		}
	}
	if (stopped)
		cq_emit(x->cq, CQ_EV_STOP, NULL, NULL, w);
}

void
cq_cancel_queue(struct cq *cq, struct cq_queue *q, int64_t now)
{
	struct cancel_ctx x = {cq, q, now};

	cancel_list(cq, &cq->pending, q, now);
	strmap_each(cq->workers, cancel_worker_list, &x);
	q->error = NULL;
	cq_emit(cq, CQ_EV_QUEUE, NULL, q, NULL);
}

void
cq_worker_down(struct cq *cq, struct cq_worker *w, const char *why, int death,
    long max_deaths, int64_t now)
{
	struct cq_closure *c;

	if (!w->live)
		return;
	w->live = 0;
	cq_live_changed(cq, -1, now);
	free(w->why);
	w->why = strdup(why);
	if (death) {
		w->deaths++;
		cq->v.deaths++;
	}
	while ((c = w->run_head) != NULL) {
		struct cq_queue *q = c->q;
		cq_run_unlink(c);
		if (death && ++c->deaths >= max_deaths) {
			char m[512];
			q->inflight--;
			cq->v.inflight--;
			snprintf(m, sizeof(m),
			    "closure %" PRIu64 " was running on %ld workers "
			    "that died (the last, %s: %s)",
			    c->id, c->deaths, w->name, why);
			cq_result_clear(cq, &c->res);
			c->res.message = strdup(m);
			cq_fail(cq, c);
			cq_end(cq, c, CQ_ABORTED, now);
		} else {
			cq_put_back(cq, c, 1, now);
		}
		cq_emit(cq, CQ_EV_QUEUE, NULL, q, NULL);
	}
	free(w->stop);
	free(w->stop_attempt);
	w->stop = NULL;
	w->stop_attempt = NULL;
	w->nstop = w->capstop = 0;
	strmap_free(w->resources, cq_resource_state_free);
	w->resources = strmap_new();
	cq_emit(cq, CQ_EV_WORKER_GONE, NULL, NULL, w);
}

static int
retryable(const struct cq_closure *c, const struct cq_result *r)
{
	if (!r->exited || r->message != NULL || c->retries >= c->max_retries)
		return 0;
	for (size_t i = 0; i < c->nretry_exit; i++)
		if (c->retry_exit[i] == r->code)
			return 1;
	return 0;
}

void
cq_attempt_end(struct cq *cq, struct cq_closure *c, int aborted,
    struct cq_result *res, int64_t now)
{
	struct cq_queue *q = c->q;
	struct cq_worker *w = c->worker;

	cq_run_unlink(c);
	if (!aborted) {
		/* It started a closure: whatever ailed it has passed. */
		w->sick_until = 0;
		w->sick_streak = 0;
	}
	if (aborted) {
		cq_put_back(cq, c, 1, now);
	} else if (retryable(c, res)) {
		c->retries++;
		q->retried++;
		cq->v.retried++;
		cq_put_back(cq, c, 0, now);
	} else {
		q->inflight--;
		cq->v.inflight--;
		cq_result_clear(cq, &c->res);
		c->res = *res;
		memset(res, 0, sizeof(*res));
		cq->v.value_bytes += c->res.outlen + c->res.errlen;
		if (!c->res.exited || c->res.code != 0 ||
		    c->res.message != NULL)
			cq_fail(cq, c);
		cq_end(cq, c, CQ_READY, now);
	}
	cq_emit(cq, CQ_EV_QUEUE, NULL, q, NULL);
}

void
cq_drop(struct cq *cq, struct cq_closure *c)
{
	if (c->key != NULL)
		free(strmap_del(c->q->keys, c->key, strlen(c->key)));
	cq->byid[c->id] = NULL;
	cq->v.closures--;
	cq->v.spec_bytes -= c->speclen;
	cq_closure_free(cq, c);
}

int
cq_closure_index(struct cq *cq, struct cq_closure *c)
{
	uint64_t *v = NULL;

	if (cq_byid_grow(cq, c->id) < 0)
		return -1;
	if (c->key != NULL &&
	    ((v = malloc(sizeof(*v))) == NULL ||
	        strmap_put(c->q->keys, c->key, strlen(c->key), v) < 0)) {
		free(v);
		return -1;
	}
	if (v != NULL)
		*v = c->id;
	cq->byid[c->id] = c;
	cq->v.closures++;
	cq->v.spec_bytes += c->speclen;
	if (c->id >= cq->nid)
		cq->nid = c->id + 1;
	return 0;
}
