/*
 * closureq_snap.c: the closure queue's snapshots, written and read, and
 * the records of version 1, which said what each object a call changed
 * now was; see closureq_int.h.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "closureq_int.h"
#include "errbuf.h"
#include "strmap.h"
#include "vec.h"

/*
 * A snapshot is "CQS" and a version byte, a record of version 1 "CQR" and
 * one (records of version 2 are closureq_rec.c's); then items, each a tag byte and its fields in rec.h's
 * codec: unsigned numbers as LEB128 varints, signed ones zigzagged first,
 * strings and bytes as a varint of their length + 1 (0: NULL) and the
 * bytes.
 *
 *	W worker: name index inc live slots incarnations deaths why,
 *	  n x (resource state message), n x (stop id, attempt)
 *	N closure, new: id queue spec on key, n x need, n x retry code,
 *	  max_retries, then what S has after its id
 *	S closure, now: id state front retries attempts deaths worker
 *	  last_worker failed exited code out truncated err message
 *	Q queue: name scheduled done failed cancelled retried error
 *	I independent closure (just after its N): id
 *	F forgotten closure: id
 *	R resource: name json
 *	V counters: next-id done failed retried cancelled aborted deaths
 *	  put_back
 *
 * A snapshot holds V, R, W, then every closure as N (ended ones by id,
 * then each list in order), then Q: names sorted, so that one state gives
 * one snapshot. A record of version 1 held W items, then N and S in the
 * order the closures changed (a closure's place in its list follows from
 * it), then Q, F or R, and V last.
 */
#define J_VERSION 1

/* A strmap's entries, sorted by key. */
struct kv {
	const char *k;
	size_t kl;
	void *v;
};

struct kvs {
	struct kv *a;
	size_t n, cap;
	int err;
};

static void
kvs_add(const char *k, size_t kl, void *v, void *arg)
{
	struct kvs *s = arg;

	if (vec_grow(&s->a, &s->cap, s->n + 1, sizeof(*s->a)) < 0) {
		s->err = 1;
		return;
	}
	s->a[s->n++] = (struct kv){k, kl, v};
}

static int
kv_cmp(const void *pa, const void *pb)
{
	const struct kv *a = pa, *b = pb;
	int r = memcmp(a->k, b->k, a->kl < b->kl ? a->kl : b->kl);

	if (r != 0)
		return r;
	return a->kl < b->kl ? -1 : a->kl > b->kl;
}

static int
sorted(const struct strmap *m, struct kvs *s)
{
	strmap_each(m, kvs_add, s);
	if (s->err)
		return -1;
	if (s->n > 1)
		qsort(s->a, s->n, sizeof(*s->a), kv_cmp);
	return 0;
}

static void
enc_worker(struct rec_out *e, const struct cq_worker *w)
{
	struct kvs rs = {0};

	rec_put_tag(e, 'W');
	rec_put_s(e, w->name);
	rec_put_i(e, w->index);
	rec_put_u(e, w->inc);
	rec_put_u(e, (uint64_t)w->live);
	rec_put_i(e, w->slots);
	rec_put_u(e, w->incarnations);
	rec_put_u(e, w->deaths);
	rec_put_s(e, w->why);
	if (w->resources != NULL && sorted(w->resources, &rs) < 0)
		e->err = 1;
	rec_put_u(e, rs.n);
	for (size_t i = 0; i < rs.n; i++) {
		const struct cq_resource_state *s = rs.a[i].v;
		rec_put_sn(e, rs.a[i].k, rs.a[i].kl);
		rec_put_u(e, (uint64_t)s->state);
		rec_put_s(e, s->message);
	}
	free(rs.a);
	rec_put_u(e, w->nstop);
	for (size_t i = 0; i < w->nstop; i++) {
		rec_put_u(e, w->stop[i]);
		rec_put_i(e, w->stop_attempt[i]);
	}
}

static void
enc_closure(struct rec_out *e, const struct cq_closure *c)
{
	rec_put_tag(e, 'N');
	rec_put_u(e, c->id);
	cq_enc_spec(e, c, c->q->name);
	rec_put_u(e, (uint64_t)c->state);
	rec_put_u(e, 0); /* at the back of its list (version 1: or front) */
	rec_put_i(e, c->retries);
	rec_put_i(e, c->attempts);
	rec_put_i(e, c->deaths);
	rec_put_s(e, c->worker != NULL ? c->worker->name : NULL);
	rec_put_s(e, c->last_worker);
	rec_put_u(e, (uint64_t)c->failed);
	rec_put_u(e, (uint64_t)c->res.exited);
	rec_put_i(e, c->res.code);
	rec_put_sn(e, c->res.out, c->res.outlen);
	rec_put_u(e, (uint64_t)c->res.truncated);
	rec_put_sn(e, c->res.err, c->res.errlen);
	rec_put_s(e, c->res.message);
	if (c->independent) {
		rec_put_tag(e, 'I');
		rec_put_u(e, c->id);
	}
}

static void
enc_queue(struct rec_out *e, const struct cq_queue *q)
{
	rec_put_tag(e, 'Q');
	rec_put_s(e, q->name);
	rec_put_u(e, q->scheduled);
	rec_put_u(e, q->done);
	rec_put_u(e, q->failed);
	rec_put_u(e, q->cancelled);
	rec_put_u(e, q->retried);
	rec_put_u(e, q->error != NULL ? q->error->id : 0);
}

static void
enc_counts(struct rec_out *e, const struct cq *cq)
{
	rec_put_tag(e, 'V');
	rec_put_u(e, cq->nid);
	rec_put_u(e, cq->v.done);
	rec_put_u(e, cq->v.failed);
	rec_put_u(e, cq->v.retried);
	rec_put_u(e, cq->v.cancelled);
	rec_put_u(e, cq->v.aborted);
	rec_put_u(e, cq->v.deaths);
	rec_put_u(e, cq->v.put_back);
}

/* A worker's running closures, oldest first (as taking them pushed them). */
static void
enc_running(struct rec_out *e, const struct cq_worker *w,
    struct cq_closure ***tmp, size_t *cap)
{
	size_t n = 0;

	if (w->running > *cap) {
		struct cq_closure **t = realloc(*tmp, w->running * sizeof(*t));
		if (t == NULL) {
			e->err = 1;
			return;
		}
		*tmp = t;
		*cap = w->running;
	}
	for (struct cq_closure *c = w->run_head; c != NULL && n < *cap;
	     c = c->next)
		(*tmp)[n++] = c;
	while (n > 0)
		enc_closure(e, (*tmp)[--n]);
}

int
cq_snapshot(struct cq *cq, struct buf *out)
{
	struct rec_out e = {out, 0};
	struct kvs ws = {0}, qs = {0}, rs = {0};
	struct cq_closure **tmp = NULL;
	size_t cap = 0;

	if (sorted(cq->workers, &ws) < 0 || sorted(cq->queues, &qs) < 0 ||
	    sorted(cq->resources, &rs) < 0) {
		e.err = 1;
		goto out;
	}
	rec_put_bytes(&e, "CQS\1", 4);
	enc_counts(&e, cq);
	for (size_t i = 0; i < rs.n; i++) {
		rec_put_tag(&e, 'R');
		rec_put_sn(&e, rs.a[i].k, rs.a[i].kl);
		rec_put_s(&e, rs.a[i].v);
	}
	for (size_t i = 0; i < ws.n; i++)
		enc_worker(&e, ws.a[i].v);
	for (size_t i = 1; i < cq->nbyid; i++) {
		struct cq_closure *c = cq->byid[i];
		if (c != NULL && c->state != CQ_QUEUED &&
		    c->state != CQ_RUNNING)
			enc_closure(&e, c);
	}
	for (struct cq_closure *c = cq->pending.head; c != NULL; c = c->next)
		enc_closure(&e, c);
	for (size_t i = 0; i < ws.n; i++) {
		struct cq_worker *w = ws.a[i].v;
		for (struct cq_closure *c = w->pinned.head; c != NULL;
		     c = c->next)
			enc_closure(&e, c);
		enc_running(&e, w, &tmp, &cap);
	}
	for (size_t i = 0; i < qs.n; i++)
		enc_queue(&e, qs.a[i].v);
out:
	free(tmp);
	free(ws.a);
	free(qs.a);
	free(rs.a);
	return e.err ? -1 : 0;
}

struct jworker {
	struct sview name, why;
	long index, slots;
	uint64_t inc, nres, nstop;
	int live;
	unsigned long incarnations, deaths;
	struct dec res, stops; /* where the lists begin */
};

static int
get_resource_state(struct dec *d, struct sview *name, uint64_t *state,
    struct sview *msg)
{
	if (cq_get_span(d, name, SPAN_NAME, 1, "a resource's name") < 0 ||
	    cq_get_max(d, state, CQ_RES_FAILED, "a resource's state") < 0 ||
	    cq_get_span(d, msg, SPAN_TEXT, 0, "a resource's message") < 0)
		return -1;
	return 0;
}

static int
get_stop(struct dec *d, uint64_t *id, long *attempt)
{
	if (cq_get_max(d, id, CQ_ID_MAX, "a stop's closure") < 0 ||
	    cq_get_long(d, attempt, 0, LONG_MAX, "a stop's attempt") < 0)
		return -1;
	return 0;
}

static int
dec_worker(struct dec *d, struct jworker *x)
{
	struct sview s;
	uint64_t u;
	long l;

	if (cq_get_span(d, &x->name, SPAN_NAME, 1, "a worker's name") < 0 ||
	    cq_get_long(d, &x->index, LONG_MIN, LONG_MAX, "an index") < 0 ||
	    cq_get_u(d, &x->inc) < 0 || cq_get_flag(d, &x->live) < 0 ||
	    cq_get_long(d, &x->slots, 0, LONG_MAX, "slots") < 0 ||
	    cq_get_ulong(d, &x->incarnations) < 0 ||
	    cq_get_ulong(d, &x->deaths) < 0 ||
	    cq_get_span(d, &x->why, SPAN_TEXT, 0, "why") < 0 ||
	    cq_get_count(d, &x->nres, UINT64_MAX, "resources") < 0)
		return -1;
	x->res = *d;
	for (uint64_t i = 0; i < x->nres; i++)
		if (get_resource_state(d, &s, &u, &s) < 0)
			return -1;
	if (cq_get_count(d, &x->nstop, UINT64_MAX, "stops") < 0)
		return -1;
	x->stops = *d;
	for (uint64_t i = 0; i < x->nstop; i++)
		if (get_stop(d, &u, &l) < 0)
			return -1;
	return 0;
}

struct jclosure {
	uint64_t id;
	int full;
	struct jspec spec; /* when full */
	uint64_t state;
	int front, failed, exited, truncated;
	long retries, attempts, deaths;
	struct sview worker, last_worker, out, err, message;
	int code;
};

static int
dec_closure(struct dec *d, struct jclosure *x, int full)
{
	int64_t code;

	x->full = full;
	if (cq_get_max(d, &x->id, CQ_ID_MAX, "a closure id") < 0)
		return -1;
	if (x->id == 0)
		return cq_dbad(d, "closure id 0");
	if (full && cq_dec_spec(d, &x->spec) < 0)
		return -1;
	if (cq_get_max(d, &x->state, CQ_CANCELLED, "a state") < 0 ||
	    cq_get_flag(d, &x->front) < 0 ||
	    cq_get_long(d, &x->retries, 0, LONG_MAX, "retries") < 0 ||
	    cq_get_long(d, &x->attempts, 0, LONG_MAX, "attempts") < 0 ||
	    cq_get_long(d, &x->deaths, 0, LONG_MAX, "deaths") < 0 ||
	    cq_get_span(d, &x->worker, SPAN_NAME, 0, "a worker") < 0 ||
	    cq_get_span(d, &x->last_worker, SPAN_NAME, 0, "the last worker") <
	        0 ||
	    cq_get_flag(d, &x->failed) < 0 || cq_get_flag(d, &x->exited) < 0 ||
	    cq_get_int(d, &code, INT_MIN, INT_MAX, "a code") < 0 ||
	    cq_get_span(d, &x->out, SPAN_BYTES, 0, "stdout") < 0 ||
	    cq_get_flag(d, &x->truncated) < 0 ||
	    cq_get_span(d, &x->err, SPAN_BYTES, 0, "stderr") < 0 ||
	    cq_get_span(d, &x->message, SPAN_TEXT, 0, "a message") < 0)
		return -1;
	x->code = (int)code;
	if ((x->state == CQ_RUNNING) != x->worker.set)
		return cq_dbad(d, "closure %" PRIu64 " %s a worker", x->id,
		    x->worker.set ? "does not run, yet names" : "runs without");
	return 0;
}

struct jqueue {
	struct sview name;
	unsigned long scheduled, done, failed, cancelled, retried;
	uint64_t error;
};

static int
dec_queue(struct dec *d, struct jqueue *x)
{
	if (cq_get_span(d, &x->name, SPAN_NAME, 1, "a queue's name") < 0 ||
	    cq_get_ulong(d, &x->scheduled) < 0 ||
	    cq_get_ulong(d, &x->done) < 0 || cq_get_ulong(d, &x->failed) < 0 ||
	    cq_get_ulong(d, &x->cancelled) < 0 ||
	    cq_get_ulong(d, &x->retried) < 0 ||
	    cq_get_max(d, &x->error, CQ_ID_MAX, "a queue's error") < 0)
		return -1;
	return 0;
}

struct jcounts {
	uint64_t nid;
	unsigned long done, failed, retried, cancelled, aborted, deaths,
	    put_back;
};

static int
dec_counts(struct dec *d, struct jcounts *x)
{
	if (cq_get_max(d, &x->nid, CQ_ID_MAX, "the next id") < 0 ||
	    cq_get_ulong(d, &x->done) < 0 || cq_get_ulong(d, &x->failed) < 0 ||
	    cq_get_ulong(d, &x->retried) < 0 ||
	    cq_get_ulong(d, &x->cancelled) < 0 ||
	    cq_get_ulong(d, &x->aborted) < 0 ||
	    cq_get_ulong(d, &x->deaths) < 0 ||
	    cq_get_ulong(d, &x->put_back) < 0)
		return -1;
	if (x->nid == 0)
		return cq_dbad(d, "the next id is 0");
	return 0;
}

/* Applying: closures move between lists as their state says. */

static void
j_detach(struct cq *cq, struct cq_closure *c)
{
	if (c->state == CQ_QUEUED && c->list != NULL) {
		cq_pend_unlink(c);
		c->q->queued--;
		cq->v.queued--;
	} else if (c->state == CQ_RUNNING && c->worker != NULL) {
		cq_run_unlink(c);
		c->q->inflight--;
		cq->v.inflight--;
	}
}

static void
j_attach(struct cq *cq, struct cq_closure *c, enum cq_state st, int front,
    struct cq_worker *w, int64_t now)
{
	c->state = st;
	switch (st) {
	case CQ_QUEUED:
		cq_pend_push(cq_pending_for(cq, c), c, front);
		c->q->queued++;
		cq->v.queued++;
		break;
	case CQ_RUNNING:
		cq_run_push(w, c);
		c->q->inflight++;
		cq->v.inflight++;
		break;
	default: cq->last_end = now; break;
	}
}

static int
apply_worker(struct cq *cq, struct jworker *x, int64_t now, struct dec *d)
{
	char nm[CQ_NAME_MAX + 1];
	struct cq_worker *w = cq_worker_get(cq, cq_sview_name(&x->name, nm), 1);
	struct strmap *m = strmap_new();
	uint64_t *stop = NULL;
	long *at = NULL;
	int nomem = 0;

	if (w == NULL || m == NULL)
		goto nomem;
	for (uint64_t i = 0; i < x->nres; i++) {
		struct sview name, msg;
		uint64_t state;
		struct cq_resource_state *s;
		get_resource_state(&x->res, &name, &state, &msg);
		if (strmap_get(m, name.p, name.n) != NULL) {
			strmap_free(m, cq_resource_state_free);
			return cq_dbad(d, "worker %s has a resource twice", nm);
		}
		if ((s = calloc(1, sizeof(*s))) == NULL)
			goto nomem;
		s->state = (int)state;
		s->message = cq_sview_dup(&msg, &nomem);
		if (nomem || strmap_put(m, name.p, name.n, s) < 0) {
			cq_resource_state_free(s);
			goto nomem;
		}
	}
	if (x->nstop > 0 &&
	    ((stop = malloc(x->nstop * sizeof(*stop))) == NULL ||
	        (at = malloc(x->nstop * sizeof(*at))) == NULL))
		goto nomem;
	for (uint64_t i = 0; i < x->nstop; i++)
		get_stop(&x->stops, &stop[i], &at[i]);
	free(w->why);
	w->why = cq_sview_dup(&x->why, &nomem);
	if (nomem)
		goto nomem;
	strmap_free(w->resources, cq_resource_state_free);
	w->resources = m;
	free(w->stop);
	free(w->stop_attempt);
	w->stop = stop;
	w->stop_attempt = at;
	w->nstop = w->capstop = (size_t)x->nstop;
	if (x->live != w->live)
		cq_live_changed(cq, x->live ? 1 : -1, now);
	w->live = x->live;
	w->index = x->index;
	w->inc = x->inc;
	w->slots = x->slots;
	w->incarnations = x->incarnations;
	w->deaths = x->deaths;
	w->last_seen = now;
	return 0;
nomem:
	strmap_free(m, cq_resource_state_free);
	free(stop);
	free(at);
	return cq_dec_nomem(d);
}

static void apply_forget(struct cq *cq, uint64_t id);

/* A new closure from x, in no list yet; NULL (d says why) when it cannot. */
static struct cq_closure *
j_closure_new(struct cq *cq, struct jclosure *x, struct dec *d)
{
	struct cq_closure *c = cq_spec_closure(cq, &x->spec, x->id, d);
	uint64_t *old;

	if (c == NULL)
		return NULL;
	/* A key is free again once its closure is forgotten: it was. */
	if (c->key != NULL &&
	    (old = strmap_get(c->q->keys, c->key, strlen(c->key))) != NULL)
		apply_forget(cq, *old);
	if (cq_closure_index(cq, c) < 0) {
		cq_closure_free(cq, c);
		cq_dec_nomem(d);
		return NULL;
	}
	return c;
}

static int
apply_closure(struct cq *cq, struct jclosure *x, int64_t now, struct dec *d)
{
	char nm[CQ_NAME_MAX + 1];
	struct cq_closure *c;
	struct cq_worker *w = NULL;
	int fresh = 0, nomem = 0;

	if (x->full) {
		if ((c = j_closure_new(cq, x, d)) == NULL)
			return -1;
		fresh = 1;
	} else if ((c = cq_closure(cq, x->id)) == NULL) {
		return 0; /* forgotten since, or its first record never came */
	}
	if (x->state == CQ_RUNNING &&
	    (w = cq_worker_get(cq, cq_sview_name(&x->worker, nm), 1)) == NULL)
		return cq_dec_nomem(d);
	if (fresh || c->state != (enum cq_state)x->state || c->worker != w) {
		j_detach(cq, c);
		j_attach(cq, c, (enum cq_state)x->state, x->front, w, now);
	}
	c->retries = x->retries;
	c->attempts = x->attempts;
	c->deaths = x->deaths;
	c->failed = x->failed;
	free(c->last_worker);
	c->last_worker = cq_sview_dup(&x->last_worker, &nomem);
	cq_result_clear(cq, &c->res);
	c->res.exited = x->exited;
	c->res.code = x->code;
	c->res.truncated = x->truncated;
	c->res.out = cq_sview_dup(&x->out, &nomem);
	c->res.outlen = c->res.out != NULL ? x->out.n : 0;
	c->res.err = cq_sview_dup(&x->err, &nomem);
	c->res.errlen = c->res.err != NULL ? x->err.n : 0;
	c->res.message = cq_sview_dup(&x->message, &nomem);
	cq->v.value_bytes += c->res.outlen + c->res.errlen;
	return nomem ? cq_dec_nomem(d) : 0;
}

static int
apply_queue(struct cq *cq, struct jqueue *x, struct dec *d)
{
	char nm[CQ_NAME_MAX + 1];
	struct cq_queue *q = cq_queue_get(cq, cq_sview_name(&x->name, nm), 1);
	struct cq_closure *e = NULL;

	if (q == NULL)
		return cq_dec_nomem(d);
	/* Gone (its own record never came): the error is lost with it. */
	if (x->error != 0 && (e = cq_closure(cq, x->error)) != NULL &&
	    e->q != q)
		return cq_dbad(d,
		    "queue %s's error, closure %" PRIu64 ", is another queue's",
		    nm, x->error);
	q->error = e;
	q->scheduled = x->scheduled;
	q->done = x->done;
	q->failed = x->failed;
	q->cancelled = x->cancelled;
	q->retried = x->retried;
	return 0;
}

static int
apply_counts(struct cq *cq, struct jcounts *x, struct dec *d)
{
	if (x->nid < cq->nbyid)
		return cq_dbad(d, "the next id %" PRIu64 " is one in use",
		    x->nid);
	cq->nid = x->nid;
	cq->v.done = x->done;
	cq->v.failed = x->failed;
	cq->v.retried = x->retried;
	cq->v.cancelled = x->cancelled;
	cq->v.aborted = x->aborted;
	cq->v.deaths = x->deaths;
	cq->v.put_back = x->put_back;
	return 0;
}

static void
apply_forget(struct cq *cq, uint64_t id)
{
	struct cq_closure *c = cq_closure(cq, id);

	if (c == NULL)
		return;
	j_detach(cq, c);
	if (c->q->error == c)
		c->q->error = NULL;
	cq_drop(cq, c);
}

/* A resource's JSON is svc's: the state holds its text as it came. */
static int
apply_resource(struct cq *cq, struct sview *name, struct sview *json,
    struct dec *d)
{
	char *text, *old;
	int nomem = 0;

	if ((text = cq_sview_dup(json, &nomem)) == NULL)
		return cq_dec_nomem(d);
	old = strmap_get(cq->resources, name->p, name->n);
	if (strmap_put(cq->resources, name->p, name->n, text) < 0) {
		free(text);
		return cq_dec_nomem(d);
	}
	free(old);
	return 0;
}

/*
 * Closures left running on a worker that is not live (a record of their
 * own never came) go back to the front of the queue, as on its death.
 */
static void
settle_one(struct cq_worker *w, void *arg)
{
	while (!w->live && w->run_head != NULL) {
		struct cq_closure *c = w->run_head;
		j_detach(arg, c);
		j_attach(arg, c, CQ_QUEUED, 1, NULL, 0);
	}
}

static void
j_settle(struct cq *cq)
{
	cq_each_worker(cq, settle_one, cq);
}

union jitem {
	struct jworker w;
	struct jclosure c;
	struct jqueue q;
	struct jcounts v;
};

/* One item at d; applied unless dry. */
static int
j_item(struct cq *cq, struct dec *d, int dry, int64_t now, uint64_t *maxid,
    uint64_t *nid)
{
	union jitem x;
	struct sview name, json;
	uint64_t id;
	int tag = rec_get_tag(&d->in);

	if (tag < 0)
		return cq_dcheck(d);
	switch (tag) {
	case 'W':
		if (dec_worker(d, &x.w) < 0)
			return -1;
		return dry ? 0 : apply_worker(cq, &x.w, now, d);
	case 'N':
	case 'S':
		if (dec_closure(d, &x.c, tag == 'N') < 0)
			return -1;
		if (tag == 'N' && x.c.id > *maxid)
			*maxid = x.c.id;
		return dry ? 0 : apply_closure(cq, &x.c, now, d);
	case 'Q':
		if (dec_queue(d, &x.q) < 0)
			return -1;
		return dry ? 0 : apply_queue(cq, &x.q, d);
	case 'F':
		if (cq_get_max(d, &id, CQ_ID_MAX, "a closure id") < 0)
			return -1;
		if (!dry)
			apply_forget(cq, id);
		return 0;
	case 'I':
		if (cq_get_max(d, &id, CQ_ID_MAX, "a closure id") < 0)
			return -1;
		if (!dry) {
			struct cq_closure *c = cq_closure(cq, id);
			if (c == NULL)
				return cq_dbad(d,
				    "independent: no closure %" PRIu64, id);
			c->independent = 1;
		}
		return 0;
	case 'R':
		if (cq_get_span(d, &name, SPAN_NAME, 1, "a resource's name") <
		        0 ||
		    cq_get_span(d, &json, SPAN_TEXT, 1, "a resource") < 0)
			return -1;
		return dry ? 0 : apply_resource(cq, &name, &json, d);
	case 'V':
		if (dec_counts(d, &x.v) < 0)
			return -1;
		if (*nid != 0)
			return cq_dbad(d, "counters twice");
		*nid = x.v.nid;
		return dry ? 0 : apply_counts(cq, &x.v, d);
	default: d->in.p--; return cq_dbad(d, "no item is tagged 0x%02x", tag);
	}
}

/*
 * Reads p: checks it all when dry, else applies it. Closures may not
 * reach past the next id the counters give, nor a record take more than
 * CQ_ID_STEP ids at once.
 */
static int
j_items(struct cq *cq, const void *p, size_t len, const char *magic, int dry,
    int64_t now, char *err, size_t errlen)
{
	struct dec d;
	uint64_t maxid = 0, nid = 0;

	cq_dec_init(&d, p, len, err, errlen);
	if (len < 4 || memcmp(p, magic, 3) != 0)
		return cq_dbad(&d, "not a %s",
		    magic[2] == 'S' ? "closure queue snapshot" :
		                      "closure queue record");
	if (d.start[3] != J_VERSION)
		return cq_dbad(&d, "version %u, not %d", d.start[3], J_VERSION);
	rec_get_bytes(&d.in, 4);
	while (rec_left(&d.in) > 0)
		if (j_item(cq, &d, dry, now, &maxid, &nid) < 0)
			return -1;
	if (!dry)
		return 0;
	if (nid == 0)
		return cq_dbad(&d, "no counters");
	if (maxid >= nid)
		return cq_dbad(&d, "closure %" PRIu64 " is past the next id",
		    maxid);
	if (magic[2] == 'R' && nid > cq->nid + CQ_ID_STEP)
		return cq_dbad(&d, "the next id leaps to %" PRIu64, nid);
	return 0;
}

/*
 * Loads p (a version 1 record, or a snapshot): checks it whole before
 * applying any of it, then applies it as replay does (no events) and puts
 * back what workers that are not live were running. A snapshot starts the
 * queue's clocks anew.
 */
static int
j_load(struct cq *cq, const void *p, size_t len, const char *magic, int64_t now,
    char *err, size_t errlen)
{
	int rc;

	if (j_items(cq, p, len, magic, 1, now, err, errlen) < 0)
		return -1;
	cq->replaying = 1;
	rc = j_items(cq, p, len, magic, 0, now, err, errlen);
	j_settle(cq);
	cq->replaying = 0;
	if (magic[2] == 'S') {
		cq->last_end = now;
		cq->no_worker_since = now;
	}
	return rc;
}

int
cq_apply_v1(struct cq *cq, const void *rec, size_t len, int64_t now, char *err,
    size_t errlen)
{
	return j_load(cq, rec, len, "CQR", now, err, errlen);
}

int
cq_restore(struct cq *cq, const void *p, size_t len, int64_t now, char *err,
    size_t errlen)
{
	if (cq->nbyid != 1 || cq->nid != 1 || strmap_count(cq->queues) != 0 ||
	    strmap_count(cq->workers) != 0 ||
	    strmap_count(cq->resources) != 0) {
		errbuf_say(err, errlen,
		    "a snapshot loads into an empty queue only");
		return -1;
	}
	return j_load(cq, p, len, "CQS", now, err, errlen);
}
