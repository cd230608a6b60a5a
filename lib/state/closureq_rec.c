/*
 * closureq_rec.c: the closure queue's records, one encoder and one decoder
 * each, and cq_commit, which applies a record's bytes with the function
 * cq_apply applies them with; see closureq_int.h.
 *
 * A record of version 2 is "CQR\2" and one change: a tag byte and its
 * fields in rec.h's codec (closureq_snap.c tells it, and the items of
 * version 1 and of snapshots):
 *
 *	E enqueued: id, then a closure's spec (queue spec on key,
 *	  n x need, n x retry code, max_retries)
 *	M queue made: name
 *	T taken: worker, n x id (each starts on the worker, in that order)
 *	P attempt ended: worker id attempt aborted, and unless aborted
 *	  exited code out truncated err message
 *	C cancelled: id
 *	X a queue's error taken (its closures cancelled): queue
 *	F forgotten: id
 *	G registered (down before): worker incarnation slots
 *	D down: worker death why max-deaths (the limit the deaths of its
 *	  closures were held to)
 *	K stops taken: worker
 *	Y a resource's state on a worker: worker name state message
 *	R resource: name json
 *
 * A record says what was decided, and applying it works out the rest
 * from the state, so it applies only to the state it was made on: one that
 * does not fit (a closure that is not there or not in the state the record
 * needs) is refused and changes nothing.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "closureq_int.h"
#include "errbuf.h"
#include "strmap.h"

static struct rec_out
begin(struct cq *cq, int tag)
{
	struct rec_out o = {&cq->jbuf, 0};

	buf_reset(&cq->jbuf);
	rec_put_bytes(&o, "CQR\2", 4);
	rec_put_tag(&o, (unsigned char)tag);
	return o;
}

static int apply_v2(struct cq *cq, struct dec *d, int64_t now);

/*
 * Applies the record o holds as cq_apply would, then hands it to the
 * journal. 0, or -1 with msg when memory ran out making or applying it.
 */
static int
commit(struct cq *cq, struct rec_out *o, int64_t now, char *msg, size_t msglen)
{
	char err[256];
	struct dec d;

	if (o->err) {
		errbuf_say(msg, msglen, "out of memory");
		return -1;
	}
	cq_dec_init(&d, cq->jbuf.data, cq->jbuf.len, err, sizeof(err));
	rec_get_bytes(&d.in, 4);
	if (apply_v2(cq, &d, now) < 0) {
		/* Only memory can fail a record made on the state it is
		 * applied to; anything else is a fault of ours. */
		if (d.nomem)
			errbuf_say(msg, msglen, "out of memory");
		else
			errbuf_say(msg, msglen, "internal: %s", err);
		return -1;
	}
	if (cq->jfn != NULL)
		cq->jfn(cq->jbuf.data, cq->jbuf.len, cq->jarg);
	return 0;
}

int
cq_commit_enqueue(struct cq *cq, const struct cq_closure *c,
    const struct cq_queue *q, uint64_t id, int64_t now, char *msg,
    size_t msglen)
{
	struct rec_out o = begin(cq, 'E');

	rec_put_u(&o, id);
	cq_enc_spec(&o, c, q->name);
	/* Flags, after the spec (a record of before them has none): 1, an
	 * independent closure. */
	if (c->independent)
		rec_put_u(&o, 1);
	return commit(cq, &o, now, msg, msglen);
}

int
cq_commit_take(struct cq *cq, const struct cq_worker *w,
    struct cq_closure *const *cs, size_t n, int64_t now)
{
	struct rec_out o = begin(cq, 'T');

	rec_put_s(&o, w->name);
	rec_put_u(&o, n);
	for (size_t i = 0; i < n; i++)
		rec_put_u(&o, cs[i]->id);
	return commit(cq, &o, now, NULL, 0);
}

int
cq_commit_report(struct cq *cq, const struct cq_worker *w,
    const struct cq_closure *c, int aborted, const struct cq_result *res,
    int64_t now, char *msg, size_t msglen)
{
	struct rec_out o = begin(cq, 'P');

	rec_put_s(&o, w->name);
	rec_put_u(&o, c->id);
	rec_put_i(&o, c->attempts);
	rec_put_u(&o, (uint64_t)(aborted != 0));
	if (!aborted) {
		rec_put_u(&o, (uint64_t)(res->exited != 0));
		rec_put_i(&o, res->code);
		rec_put_sn(&o, res->out, res->outlen);
		rec_put_u(&o, (uint64_t)(res->truncated != 0));
		rec_put_sn(&o, res->err, res->errlen);
		rec_put_s(&o, res->message);
	}
	return commit(cq, &o, now, msg, msglen);
}

static int
commit_id(struct cq *cq, int tag, uint64_t id, int64_t now)
{
	struct rec_out o = begin(cq, tag);

	rec_put_u(&o, id);
	return commit(cq, &o, now, NULL, 0);
}

int
cq_commit_cancel(struct cq *cq, const struct cq_closure *c, int64_t now)
{
	return commit_id(cq, 'C', c->id, now);
}

int
cq_commit_forget(struct cq *cq, const struct cq_closure *c)
{
	return commit_id(cq, 'F', c->id, 0);
}

static int
commit_name(struct cq *cq, int tag, const char *name, int64_t now)
{
	struct rec_out o = begin(cq, tag);

	rec_put_s(&o, name);
	return commit(cq, &o, now, NULL, 0);
}

int
cq_commit_take_error(struct cq *cq, const struct cq_queue *q, int64_t now)
{
	return commit_name(cq, 'X', q->name, now);
}

int
cq_commit_queue(struct cq *cq, const char *name)
{
	return commit_name(cq, 'M', name, 0);
}

int
cq_commit_stops_taken(struct cq *cq, const struct cq_worker *w)
{
	return commit_name(cq, 'K', w->name, 0);
}

int
cq_commit_down(struct cq *cq, const struct cq_worker *w, int death,
    const char *why, int64_t now)
{
	struct rec_out o = begin(cq, 'D');

	rec_put_s(&o, w->name);
	rec_put_u(&o, (uint64_t)(death != 0));
	rec_put_s(&o, why);
	rec_put_i(&o, cq->cfg.max_deaths);
	return commit(cq, &o, now, NULL, 0);
}

int
cq_commit_register(struct cq *cq, const char *name, uint64_t inc, long slots,
    int64_t now, char *msg, size_t msglen)
{
	struct rec_out o = begin(cq, 'G');

	rec_put_s(&o, name);
	rec_put_u(&o, inc);
	rec_put_i(&o, slots);
	return commit(cq, &o, now, msg, msglen);
}

int
cq_commit_resource_state(struct cq *cq, const struct cq_worker *w,
    const char *name, int state, const char *message)
{
	struct rec_out o = begin(cq, 'Y');

	rec_put_s(&o, w->name);
	rec_put_s(&o, name);
	rec_put_u(&o, (uint64_t)state);
	rec_put_s(&o, message);
	return commit(cq, &o, 0, NULL, 0);
}

int
cq_commit_resource(struct cq *cq, const char *name, const char *json, char *msg,
    size_t msglen)
{
	struct rec_out o = begin(cq, 'R');

	rec_put_s(&o, name);
	rec_put_s(&o, json);
	return commit(cq, &o, 0, msg, msglen);
}

/* Applying. Each reads its fields to the record's end first (bytes that
 * do not decode are refused), then checks that the record fits the state
 * (a misfit is skipped in replay), and only then changes it. */

/* A record that decodes but does not fit the state: d says why. */
#define misfit(d, ...) ((d)->misfit = 1, cq_dbad((d), __VA_ARGS__))

static int
get_end(struct dec *d)
{
	if (cq_dcheck(d) < 0)
		return -1;
	if (rec_left(&d->in) != 0)
		return cq_dbad(d, "bytes past the record's end");
	return 0;
}

static int
get_id(struct dec *d, uint64_t *id)
{
	if (cq_get_max(d, id, CQ_ID_MAX, "a closure id") < 0)
		return -1;
	return *id == 0 ? cq_dbad(d, "closure id 0") : 0;
}

/* The worker name decoded (a name span), once the record is whole. */
static struct cq_worker *
worker_of(struct cq *cq, struct dec *d, const struct sview *name)
{
	char nm[CQ_NAME_MAX + 1];
	struct cq_worker *w = cq_worker_get(cq, cq_sview_name(name, nm), 0);

	if (w == NULL)
		misfit(d, "no worker %s", nm);
	return w;
}

static struct cq_closure *
closure_of(struct cq *cq, struct dec *d, uint64_t id)
{
	struct cq_closure *c = cq_closure(cq, id);

	if (c == NULL)
		misfit(d, "no closure %" PRIu64, id);
	return c;
}

static int
a_enqueue(struct cq *cq, struct dec *d)
{
	char nm[CQ_NAME_MAX + 1];
	struct cq_queue *q;
	struct cq_closure *c;
	struct jspec x;
	uint64_t id, flags = 0;

	if (get_id(d, &id) < 0 || cq_dec_spec(d, &x) < 0 ||
	    (rec_left(&d->in) > 0 &&
	        cq_get_max(d, &flags, 1, "a closure's flags") < 0) ||
	    get_end(d) < 0)
		return -1;
	if (id >= cq->nid + CQ_ID_STEP)
		return cq_dbad(d, "the next id leaps to %" PRIu64, id);
	if (id < cq->nid)
		return misfit(d, "closure %" PRIu64 " is not the next id", id);
	q = cq_queue_get(cq, cq_sview_name(&x.queue, nm), 0);
	if (q != NULL && x.key.set &&
	    strmap_get(q->keys, x.key.p, x.key.n) != NULL)
		return misfit(d, "queue %s holds the key already", nm);
	if ((c = cq_spec_closure(cq, &x, id, d)) == NULL)
		return -1;
	c->independent = (flags & 1) != 0;
	if (cq_closure_index(cq, c) < 0) {
		cq_closure_free(cq, c);
		return cq_dec_nomem(d);
	}
	q = c->q;
	c->state = CQ_QUEUED;
	cq_pend_push(cq_pending_for(cq, c), c, 0);
	q->queued++;
	q->scheduled++;
	cq->v.queued++;
	cq_emit(cq, CQ_EV_WORK, NULL, NULL, NULL);
	return 0;
}

static int
a_take(struct cq *cq, struct dec *d)
{
	struct sview name;
	struct cq_worker *w;
	struct dec ids, again; /* the ids, read twice more */
	uint64_t n, id;

	if (cq_get_span(d, &name, SPAN_NAME, 1, "a worker's name") < 0 ||
	    cq_get_count(d, &n, CQ_TAKE_MAX, "closures") < 0)
		return -1;
	ids = again = *d;
	for (uint64_t i = 0; i < n; i++)
		if (get_id(d, &id) < 0)
			return -1;
	if (get_end(d) < 0 || (w = worker_of(cq, d, &name)) == NULL)
		return -1;
	if (!w->live)
		return misfit(d, "worker %s is down", w->name);
	for (uint64_t i = 0; i < n; i++) {
		struct cq_closure *c;
		get_id(&ids, &id);
		if ((c = closure_of(cq, d, id)) == NULL)
			return -1;
		if (!cq_may_take(c, w))
			return misfit(d,
			    "closure %" PRIu64 " is not for %s now", c->id,
			    w->name);
	}
	for (uint64_t i = 0; i < n; i++) {
		struct cq_closure *c;
		get_id(&again, &id);
		if ((c = cq_closure(cq, id))->state == CQ_QUEUED) /* once */
			cq_start(cq, w, c);
	}
	return 0;
}

static int
a_report(struct cq *cq, struct dec *d, int64_t now)
{
	struct sview name, out = {0}, err = {0}, message = {0};
	struct cq_result res = {0};
	struct cq_worker *w;
	struct cq_closure *c;
	int aborted, nomem = 0;
	long attempt;
	int64_t code = 0;
	uint64_t id;

	if (cq_get_span(d, &name, SPAN_NAME, 1, "a worker's name") < 0 ||
	    get_id(d, &id) < 0 ||
	    cq_get_long(d, &attempt, 0, LONG_MAX, "an attempt") < 0 ||
	    cq_get_flag(d, &aborted) < 0)
		return -1;
	if (!aborted &&
	    (cq_get_flag(d, &res.exited) < 0 ||
	        cq_get_int(d, &code, INT_MIN, INT_MAX, "a code") < 0 ||
	        cq_get_span(d, &out, SPAN_BYTES, 0, "stdout") < 0 ||
	        cq_get_flag(d, &res.truncated) < 0 ||
	        cq_get_span(d, &err, SPAN_BYTES, 0, "stderr") < 0 ||
	        cq_get_span(d, &message, SPAN_TEXT, 0, "a message") < 0))
		return -1;
	if (get_end(d) < 0 || (w = worker_of(cq, d, &name)) == NULL ||
	    (c = closure_of(cq, d, id)) == NULL)
		return -1;
	if (c->state != CQ_RUNNING || c->worker != w || c->attempts != attempt)
		return misfit(d,
		    "attempt %ld of closure %" PRIu64 " is not current on %s",
		    attempt, c->id, w->name);
	res.code = (int)code;
	res.out = cq_sview_dup(&out, &nomem);
	res.outlen = res.out != NULL ? out.n : 0;
	res.err = cq_sview_dup(&err, &nomem);
	res.errlen = res.err != NULL ? err.n : 0;
	res.message = cq_sview_dup(&message, &nomem);
	if (!nomem)
		cq_attempt_end(cq, c, aborted, &res, now);
	/* What the closure's end did not take (a retry, a give-back). */
	free(res.out);
	free(res.err);
	free(res.message);
	return nomem ? cq_dec_nomem(d) : 0;
}

/* C: a closure cancelled; F: a closure forgotten. */
static int
a_closure(struct cq *cq, struct dec *d, int tag, int64_t now)
{
	struct cq_closure *c;
	uint64_t id;

	if (get_id(d, &id) < 0 || get_end(d) < 0 ||
	    (c = closure_of(cq, d, id)) == NULL)
		return -1;
	if (tag == 'C') {
		if (c->state != CQ_QUEUED && c->state != CQ_RUNNING)
			return misfit(d, "closure %" PRIu64 " ended", c->id);
		cq_cancel_now(cq, c, now);
		return 0;
	}
	if (c->state == CQ_QUEUED || c->state == CQ_RUNNING || c->q->error == c)
		return misfit(d, "closure %" PRIu64 " is not to be forgotten",
		    c->id);
	cq_drop(cq, c);
	return 0;
}

/* M: a queue made; X: a queue's error taken. */
static int
a_queue(struct cq *cq, struct dec *d, int tag, int64_t now)
{
	char nm[CQ_NAME_MAX + 1];
	struct sview name;
	struct cq_queue *q;

	if (cq_get_span(d, &name, SPAN_NAME, 1, "a queue's name") < 0 ||
	    get_end(d) < 0)
		return -1;
	cq_sview_name(&name, nm);
	if (tag == 'M') {
		if (cq_queue_get(cq, nm, 1) == NULL)
			return cq_dec_nomem(d);
		return 0;
	}
	if ((q = cq_queue_get(cq, nm, 0)) == NULL || q->error == NULL)
		return misfit(d, "queue %s holds no error", nm);
	cq_cancel_queue(cq, q, now);
	return 0;
}

static int
a_register(struct cq *cq, struct dec *d, int64_t now)
{
	char nm[CQ_NAME_MAX + 1];
	struct sview name;
	struct cq_worker *w;
	uint64_t inc;
	long slots;

	if (cq_get_span(d, &name, SPAN_NAME, 1, "a worker's name") < 0 ||
	    cq_get_u(d, &inc) < 0 ||
	    cq_get_long(d, &slots, 0, LONG_MAX, "slots") < 0 || get_end(d) < 0)
		return -1;
	if ((w = cq_worker_get(cq, cq_sview_name(&name, nm), 0)) != NULL &&
	    w->live)
		return misfit(d, "worker %s is live", nm);
	if (w == NULL && (w = cq_worker_get(cq, nm, 1)) == NULL)
		return cq_dec_nomem(d);
	if (w->resources == NULL && (w->resources = strmap_new()) == NULL)
		return cq_dec_nomem(d);
	w->inc = inc;
	w->live = 1;
	/* A new process: whatever ailed the last one may be gone. */
	w->sick_until = 0;
	w->sick_streak = 0;
	w->slots = slots;
	w->last_seen = now;
	w->incarnations++;
	cq_live_changed(cq, 1, now);
	cq_emit(cq, CQ_EV_WORK, NULL, NULL, w);
	return 0;
}

/* D: down, with the limit of deaths the daemon that decided it had, so
 * that a replay under other flags ends the same closures. */
static int
a_down(struct cq *cq, struct dec *d, int64_t now)
{
	struct sview name, s;
	struct cq_worker *w;
	int death, nomem = 0;
	long max_deaths;
	char *why;

	if (cq_get_span(d, &name, SPAN_NAME, 1, "a worker's name") < 0 ||
	    cq_get_flag(d, &death) < 0 ||
	    cq_get_span(d, &s, SPAN_TEXT, 1, "why") < 0 ||
	    cq_get_long(d, &max_deaths, 1, LONG_MAX, "the limit of deaths") <
	        0 ||
	    get_end(d) < 0 || (w = worker_of(cq, d, &name)) == NULL)
		return -1;
	if (!w->live)
		return misfit(d, "worker %s is down already", w->name);
	if ((why = cq_sview_dup(&s, &nomem)) == NULL)
		return cq_dec_nomem(d);
	cq_worker_down(cq, w, why, death, max_deaths, now);
	free(why);
	return 0;
}

static int
a_stops_taken(struct cq *cq, struct dec *d)
{
	struct sview name;
	struct cq_worker *w;

	if (cq_get_span(d, &name, SPAN_NAME, 1, "a worker's name") < 0 ||
	    get_end(d) < 0 || (w = worker_of(cq, d, &name)) == NULL)
		return -1;
	free(w->stop);
	free(w->stop_attempt);
	w->stop = NULL;
	w->stop_attempt = NULL;
	w->nstop = w->capstop = 0;
	return 0;
}

static int
a_resource_state(struct cq *cq, struct dec *d)
{
	struct sview wname, name, message;
	struct cq_worker *w;
	struct cq_resource_state *s;
	uint64_t state;
	char *m;
	int nomem = 0;

	if (cq_get_span(d, &wname, SPAN_NAME, 1, "a worker's name") < 0 ||
	    cq_get_span(d, &name, SPAN_NAME, 1, "a resource's name") < 0 ||
	    cq_get_max(d, &state, CQ_RES_FAILED, "a resource's state") < 0 ||
	    cq_get_span(d, &message, SPAN_TEXT, 0, "a message") < 0 ||
	    get_end(d) < 0 || (w = worker_of(cq, d, &wname)) == NULL)
		return -1;
	if (w->resources == NULL)
		return cq_dec_nomem(d);
	m = cq_sview_dup(&message, &nomem);
	if (nomem)
		return cq_dec_nomem(d);
	if ((s = strmap_get(w->resources, name.p, name.n)) == NULL &&
	    ((s = calloc(1, sizeof(*s))) == NULL ||
	        strmap_put(w->resources, name.p, name.n, s) < 0)) {
		free(s);
		free(m);
		return cq_dec_nomem(d);
	}
	s->state = (int)state;
	free(s->message);
	s->message = m;
	return 0;
}

static int
a_resource(struct cq *cq, struct dec *d)
{
	struct sview name, json;
	char *text, *old;
	int nomem = 0;

	if (cq_get_span(d, &name, SPAN_NAME, 1, "a resource's name") < 0 ||
	    cq_get_span(d, &json, SPAN_TEXT, 1, "a resource") < 0 ||
	    get_end(d) < 0)
		return -1;
	old = strmap_get(cq->resources, name.p, name.n);
	if (old != NULL &&
	    (strlen(old) != json.n || memcmp(old, json.p, json.n) != 0))
		return misfit(d, "the resource exists with another command");
	if (old != NULL)
		return 0;
	if ((text = cq_sview_dup(&json, &nomem)) == NULL ||
	    strmap_put(cq->resources, name.p, name.n, text) < 0) {
		free(text);
		return cq_dec_nomem(d);
	}
	return 0;
}

static int
apply_v2(struct cq *cq, struct dec *d, int64_t now)
{
	int tag = rec_get_tag(&d->in);

	switch (tag) {
	case 'E': return a_enqueue(cq, d);
	case 'M':
	case 'X': return a_queue(cq, d, tag, now);
	case 'T': return a_take(cq, d);
	case 'P': return a_report(cq, d, now);
	case 'C':
	case 'F': return a_closure(cq, d, tag, now);
	case 'G': return a_register(cq, d, now);
	case 'D': return a_down(cq, d, now);
	case 'K': return a_stops_taken(cq, d);
	case 'Y': return a_resource_state(cq, d);
	case 'R': return a_resource(cq, d);
	case -1: return cq_dbad(d, "no change in the record");
	default:
		d->in.p--;
		return cq_dbad(d, "no change is tagged 0x%02x", tag);
	}
}

int
cq_apply(struct cq *cq, const void *rec, size_t len, int64_t now, char *err,
    size_t errlen)
{
	const unsigned char *p = rec;
	struct dec d;
	int rc;

	if (len >= 4 && memcmp(p, "CQR\1", 4) == 0)
		return cq_apply_v1(cq, rec, len, now, err, errlen);
	cq_dec_init(&d, rec, len, err, errlen);
	if (len < 4 || memcmp(p, "CQR", 3) != 0)
		return cq_dbad(&d, "not a closure queue record");
	if (p[3] != 2)
		return cq_dbad(&d, "version %u, not 1 or 2", p[3]);
	rec_get_bytes(&d.in, 4);
	cq->replaying = 1;
	rc = apply_v2(cq, &d, now);
	cq->replaying = 0;
	if (rc < 0 && d.misfit) {
		/* One before it never got written: the state goes on without
		 * this change, as it went on without that one. */
		cq->v.misfits++;
		return 0;
	}
	return rc;
}

void
cq_set_journal(struct cq *cq, cq_journal_fn fn, void *arg)
{
	cq->jfn = fn;
	cq->jarg = arg;
}
