/*
 * The closure queue's journal: a long seeded run of every operation, with
 * every record kept, comes back whole from any snapshot plus the records
 * after it; damaged bytes are refused without a crash; workers must be
 * heard from again after a restore.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "closureq.h"
#include "strmap.h"
#include "task.h"
#include "unit.h"

#define TRUE "{\"argv\":[\"true\"]}"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t
rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dull;
}

static size_t
pick(size_t n)
{
	return n != 0 ? (size_t)(rnd() % n) : 0;
}

static void
quiet(const struct cq_event *ev, void *arg)
{
	(void)ev;
	(*(long *)arg)++;
}

/* The records a journal would hold, in order. */
struct recs {
	struct buf *r;
	size_t n, cap;
};

static void
keep(const void *rec, size_t len, void *arg)
{
	struct recs *rs = arg;

	if (rs->n == rs->cap) {
		rs->cap = rs->cap != 0 ? rs->cap * 2 : 256;
		rs->r = realloc(rs->r, rs->cap * sizeof(*rs->r));
	}
	memset(&rs->r[rs->n], 0, sizeof(rs->r[rs->n]));
	buf_append(&rs->r[rs->n++], rec, len);
}

static void
recs_free(struct recs *rs)
{
	for (size_t i = 0; i < rs->n; i++)
		buf_free(&rs->r[i]);
	free(rs->r);
}

static const struct cq_config cfg = {
    .queue_max = 400,
    .max_deaths = 3,
    .hb_timeout_ms = 1000,
};

static const char *queues[] = {"q0", "q1", "q2"};
static const char *workers[] = {"w:0", "w:1", "w:2", "w:3", "solo"};
static const char *resources[] = {"r0", "r1"};

/* A closure of spec (JSON for the worker) with what else is set. */
static struct cq_closure *
closure(struct cq *cq, const char *spec, const char *key, const char *on,
    const char *need, int retry_code, long max_retries)
{
	struct cq_spec s = {.spec = strdup(spec),
	    .speclen = strlen(spec),
	    .key = key,
	    .on = on,
	    .max_retries = max_retries};
	enum status st;
	char msg[256];

	if (need != NULL) {
		s.needs = &need;
		s.nneeds = 1;
	}
	if (retry_code != 0) {
		s.retry_exit = &retry_code;
		s.nretry_exit = 1;
	}
	return cq_closure_new(cq, &s, &st, msg, sizeof(msg));
}

static struct cq_closure *
random_closure(struct cq *cq, uint64_t maxid, int want)
{
	for (int tries = 0; tries < 20 && maxid > 0; tries++) {
		struct cq_closure *c = cq_closure(cq, 1 + pick(maxid));
		if (c != NULL && (want < 0 || (int)c->state == want))
			return c;
	}
	return NULL;
}

static void
op_enqueue(struct cq *cq, int64_t now, uint64_t *maxid)
{
	struct cq_queue *q = cq_queue(cq, queues[pick(3)], 1);
	struct cq_closure *c;
	char spec[64], key[16], msg[256];
	int retry = 0;
	long max_retries = 0;
	uint64_t id;
	int dup;

	if (q->error != NULL || cq_room(cq, q) == 0) {
		cq_take_error(cq, q, now);
		return;
	}
	snprintf(spec, sizeof(spec), "{\"argv\":[\"echo\",\"%zu\"]}",
	    pick(1000));
	snprintf(key, sizeof(key), "k%zu", pick(40));
	int keyed = pick(3) == 0;
	if (pick(3) == 0) {
		retry = 3;
		max_retries = (long)pick(3);
	}
	const char *on = pick(8) == 0 ? workers[pick(5)] : NULL;
	const char *need =
	    pick(6) == 0 && cq_resource(cq, "r0") != NULL ? "r0" : NULL;
	c = closure(cq, spec, keyed ? key : NULL, on, need, retry, max_retries);
	CHECK(c != NULL);
	if (c == NULL)
		return;
	/* Some fail on their own, the queue holding no error for them. */
	c->independent = pick(4) == 0;
	CHECK(cq_enqueue(cq, q, c, now, &id, &dup, msg, sizeof(msg)) == ST_OK);
	if (id > *maxid)
		*maxid = id;
}

static void
op_report(struct cq *cq, int64_t now, uint64_t maxid)
{
	struct cq_closure *c = random_closure(cq, maxid, CQ_RUNNING);
	struct cq_result res = {0};
	char msg[256];
	long attempt;
	int aborted = 0;

	if (c == NULL)
		return;
	attempt = c->attempts - (pick(10) == 0);
	switch (pick(16)) {
	case 0: aborted = 1; break;
	case 1:
	case 4:
	case 5:
		res.exited = 1;
		res.code = 3;
		break;
	case 2:
		res.exited = 1;
		res.code = 1;
		res.err = strdup("bad\n");
		res.errlen = 4;
		break;
	case 3:
		res.code = 9;
		res.message = strdup("killed");
		break;
	default:
		res.exited = 1;
		res.out = malloc(5);
		memcpy(res.out, "o\0k\n", 5);
		res.outlen = 5;
		res.truncated = (int)pick(2);
		break;
	}
	if (cq_report(cq, c->worker, c->id, attempt, aborted, &res, now, msg,
	        sizeof(msg)) != ST_OK) {
		free(res.out);
		free(res.err);
		free(res.message);
	}
}

/* One random operation on cq at now. */
static void
op(struct cq *cq, int64_t *now, uint64_t *maxid)
{
	struct cq_worker *w = cq_worker(cq, workers[pick(5)]);
	struct cq_closure *c, *out[4];
	char msg[256];
	uint64_t *ids;
	long *ats;

	*now += (int64_t)pick(60);
	switch (pick(20)) {
	case 0:
	case 1:
	case 2:
	case 3:
	case 4: op_enqueue(cq, *now, maxid); break;
	case 5:
		if (w == NULL || !w->live || pick(4) == 0)
			cq_register(cq, workers[pick(5)], 1 + (long)pick(3),
			    *now, msg, sizeof(msg));
		break;
	case 6:
	case 7:
	case 8:
		if (w != NULL) {
			cq_seen(cq, w, *now);
			cq_take(cq, w, 1 + pick(3), *now, out);
		}
		break;
	case 9:
	case 10:
	case 11: op_report(cq, *now, *maxid); break;
	case 12:
		if ((c = random_closure(cq, *maxid, -1)) != NULL)
			cq_cancel(cq, c, *now);
		break;
	case 13:
		if ((c = random_closure(cq, *maxid, -1)) != NULL)
			cq_forget(cq, c);
		break;
	case 14:
		if (pick(3) != 0)
			break;
		if (w != NULL && pick(2) == 0)
			cq_worker_failed(cq, w, "it crashed", *now);
		else if (w != NULL)
			cq_worker_leave(cq, w, *now);
		break;
	case 15:
		for (size_t i = 0; i < 5; i++)
			if ((w = cq_worker(cq, workers[i])) != NULL &&
			    pick(3) != 0)
				cq_seen(cq, w, *now);
		*now += (int64_t)pick(700);
		cq_scan(cq, *now);
		break;
	case 16: {
		const char *r = resources[pick(2)];
		char json[64];
		snprintf(json, sizeof(json),
		    "{\"name\":\"%s\",\"argv\":[\"make\",\"it\"]}", r);
		cq_resource_add(cq, r, json, msg, sizeof(msg));
		break;
	}
	case 17:
		if (w != NULL && w->live && cq_resource(cq, "r1") != NULL)
			cq_resource_state(w, "r1", (int)pick(3),
			    pick(2) ? "log" : NULL);
		break;
	case 18:
		if (w != NULL) {
			cq_take_stops(w, &ids, &ats);
			free(ids);
			free(ats);
		}
		break;
	case 19:
		cq_take_error(cq, cq_queue(cq, queues[pick(3)], 1), *now);
		break;
	}
}

/* What cq_snapshot leaves out but follows from the state: it must match. */
static int
same_view(struct cq *a, struct cq *b)
{
	const struct cq_view *x = cq_view(a), *y = cq_view(b);

	return x->queued == y->queued && x->inflight == y->inflight &&
	    x->closures == y->closures && x->workers_live == y->workers_live &&
	    x->workers == y->workers && x->done == y->done &&
	    x->failed == y->failed && x->retried == y->retried &&
	    x->cancelled == y->cancelled && x->aborted == y->aborted &&
	    x->deaths == y->deaths && x->put_back == y->put_back &&
	    x->value_bytes == y->value_bytes && x->spec_bytes == y->spec_bytes;
}

/* Each key of a's closures names the same closure in b's queue. */
struct keys {
	struct cq *b;
	int same;
};

static void
same_key(struct cq_closure *c, void *arg)
{
	struct keys *k = arg;
	struct cq_queue *q = cq_queue(k->b, c->q->name, 0);
	uint64_t *id;

	if (c->key == NULL)
		return;
	id = q != NULL ? strmap_get(q->keys, c->key, strlen(c->key)) : NULL;
	if (id == NULL || *id != c->id)
		k->same = 0;
}

static int
same_state(struct cq *a, struct cq *b)
{
	struct keys k = {b, 1};
	struct buf x = {0}, y = {0};
	int same;

	CHECK(cq_snapshot(a, &x) == 0 && cq_snapshot(b, &y) == 0);
	same = x.len == y.len && memcmp(x.data, y.data, x.len) == 0;
	for (size_t i = 0; i < 3; i++) {
		struct cq_queue *p = cq_queue(a, queues[i], 0);
		struct cq_queue *q = cq_queue(b, queues[i], 0);
		if ((p == NULL) != (q == NULL))
			same = 0;
		else if (p != NULL &&
		    (p->queued != q->queued || p->inflight != q->inflight ||
		        strmap_count(p->keys) != strmap_count(q->keys)))
			same = 0;
	}
	cq_each_closure(a, NULL, same_key, &k);
	same = same && k.same;
	buf_free(&x);
	buf_free(&y);
	return same && same_view(a, b);
}

#define NPOINTS 6

struct run {
	struct cq *cq;
	struct recs rs;
	struct buf snap[NPOINTS];
	size_t at[NPOINTS]; /* records before each snapshot */
	long events;
};

/* The seeded run every test here starts from. */
static void
run(struct run *r, int steps)
{
	int64_t now = 1000;
	uint64_t maxid = 0;
	int p = 0;

	memset(r, 0, sizeof(*r));
	rng = 0x9e3779b97f4a7c15ull;
	r->cq = cq_new(&cfg, quiet, &r->events, now);
	cq_set_journal(r->cq, keep, &r->rs);
	for (int i = 0; i < steps; i++) {
		if (p < NPOINTS && i == steps / NPOINTS * p) {
			r->at[p] = r->rs.n;
			CHECK(cq_snapshot(r->cq, &r->snap[p++]) == 0);
		}
		op(r->cq, &now, &maxid);
	}
	for (size_t i = 0; i < 5; i++) {
		struct cq_worker *w = cq_worker(r->cq, workers[i]);
		struct cq_closure *out[2];
		if (w != NULL)
			cq_take(r->cq, w, 2, now, out);
	}
}

static void
run_free(struct run *r)
{
	for (int p = 0; p < NPOINTS; p++)
		buf_free(&r->snap[p]);
	recs_free(&r->rs);
	cq_free(r->cq);
}

static void
replay_matches_from_every_snapshot(void)
{
	const struct cq_view *v;
	struct run r;
	char err[256];
	long ev = 0;

	run(&r, 6000);
	CHECK(cq_view(r.cq)->closures > 100);
	v = cq_view(r.cq);
	printf("# %zu records, %zu closures (%zu queued, %zu running), "
	       "final snapshot %zu bytes\n",
	    r.rs.n, v->closures, v->queued, v->inflight,
	    r.snap[NPOINTS - 1].len);
	printf("# done %lu, failed %lu, retried %lu, cancelled %lu, "
	       "aborted %lu, deaths %lu, put back %lu, stale %lu, events %ld\n",
	    v->done, v->failed, v->retried, v->cancelled, v->aborted, v->deaths,
	    v->put_back, v->stale, r.events);
	CHECK(v->done > 0 && v->failed > 0 && v->retried > 0 &&
	    v->cancelled > 0 && v->aborted > 0 && v->put_back > 0);
	for (int p = 0; p < NPOINTS; p++) {
		struct cq *cq = cq_new(&cfg, quiet, &ev, 5);
		int ok = cq_restore(cq, r.snap[p].data, r.snap[p].len, 5, err,
		             sizeof(err)) == 0;
		if (!ok)
			printf("# restore %d: %s\n", p, err);
		CHECK(ok);
		for (size_t i = r.at[p]; ok && i < r.rs.n; i++) {
			ok = cq_apply(cq, r.rs.r[i].data, r.rs.r[i].len, 5, err,
			         sizeof(err)) == 0;
			if (!ok)
				printf("# snapshot %d, record %zu: %s\n", p, i,
				    err);
		}
		CHECK(ok);
		CHECK(same_state(r.cq, cq));
		cq_free(cq);
	}
	run_free(&r);
}

/* A copy fed each record as it comes stays equal after every operation. */
static void
a_copy_fed_each_record_keeps_in_step(void)
{
	struct recs rs = {0};
	long ev = 0;
	int64_t now = 1000;
	uint64_t maxid = 0;
	struct cq *cq = cq_new(&cfg, quiet, &ev, now);
	struct cq *copy = cq_new(&cfg, quiet, &ev, 5);
	size_t applied = 0;
	char err[256];
	int ok = 1;

	rng = 0x1234567887654321ull;
	cq_set_journal(cq, keep, &rs);
	for (int i = 0; i < 4000 && ok; i++) {
		op(cq, &now, &maxid);
		for (; applied < rs.n && ok; applied++)
			if (cq_apply(copy, rs.r[applied].data,
			        rs.r[applied].len, 5, err, sizeof(err)) < 0) {
				printf("# step %d: %s\n", i, err);
				ok = 0;
			}
		if (ok && !same_state(cq, copy)) {
			printf("# step %d: the copy differs\n", i);
			ok = 0;
		}
	}
	CHECK(ok);
	cq_free(cq);
	cq_free(copy);
	recs_free(&rs);
}

/* What the view counts agrees with the closures and workers. */
struct tally {
	size_t queued, running, closures;
	int odd;
};

static void
tally_one(struct cq_closure *c, void *arg)
{
	struct tally *t = arg;

	t->closures++;
	if (c->state == CQ_QUEUED)
		t->queued++;
	if (c->state == CQ_RUNNING) {
		t->running++;
		if (c->worker == NULL || !c->worker->live)
			t->odd = 1;
	}
}

static int
consistent(struct cq *cq)
{
	struct tally t = {0};
	const struct cq_view *v = cq_view(cq);

	cq_each_closure(cq, NULL, tally_one, &t);
	return !t.odd && t.queued == v->queued && t.running == v->inflight &&
	    t.closures == v->closures;
}

/*
 * A record that never got written (the daemon goes on with internal
 * changes while its journal is broken) leaves older states: the rest
 * still applies, and what comes out holds together.
 */
static void
a_lost_record_leaves_older_states(void)
{
	struct run r;
	char err[256];
	long ev = 0;
	int failed = 0, odd = 0;
	unsigned long misfits = 0;

	run(&r, 2000);
	for (int trial = 0; trial < 300; trial++) {
		struct cq *cq = cq_new(&cfg, quiet, &ev, 5);
		size_t lost = pick(r.rs.n);
		for (size_t i = 0; i < r.rs.n; i++)
			if (i != lost &&
			    cq_apply(cq, r.rs.r[i].data, r.rs.r[i].len, 5, err,
			        sizeof(err)) < 0) {
				printf("# without record %zu, record %zu: %s\n",
				    lost, i, err);
				failed++;
			}
		odd += !consistent(cq);
		misfits += cq_view(cq)->misfits;
		cq_scan(cq, 5 + cfg.hb_timeout_ms + 1);
		odd += !consistent(cq) || cq_view(cq)->inflight != 0;
		cq_free(cq);
	}
	CHECK(failed == 0);
	CHECK(odd == 0);
	/* Some records did not fit without the lost one, and were counted. */
	printf("# %lu records skipped in 300 replays\n", misfits);
	CHECK(misfits > 0);
	run_free(&r);
}

/*
 * A worker's death ends its closures by the limit of deaths of the
 * daemon that saw it die: a replay under another --max-worker-deaths
 * holds the same state.
 */
static void
replay_under_another_limit_of_deaths(void)
{
	struct cq_config one = cfg, many = cfg;
	struct recs rs = {0};
	long ev = 0;
	struct cq *cq, *re;
	struct cq_closure *out[1];
	struct cq_worker *w;
	char msg[256], err[256];
	uint64_t id;
	int dup;

	one.max_deaths = 1;
	many.max_deaths = 5;
	cq = cq_new(&one, quiet, &ev, 0);
	re = cq_new(&many, quiet, &ev, 0);
	cq_set_journal(cq, keep, &rs);
	cq_enqueue(cq, cq_queue(cq, "q", 1),
	    closure(cq, TRUE, NULL, NULL, NULL, 0, 0), 0, &id, &dup, msg,
	    sizeof(msg));
	w = cq_register(cq, "w:0", 1, 0, msg, sizeof(msg));
	CHECK(cq_take(cq, w, 1, 0, out) == 1);
	cq_worker_failed(cq, w, "killed", 10);
	CHECK(cq_closure(cq, id)->state == CQ_ABORTED);
	for (size_t i = 0; i < rs.n; i++)
		CHECK(cq_apply(re, rs.r[i].data, rs.r[i].len, 10, err,
		          sizeof(err)) == 0);
	CHECK(cq_closure(re, id) != NULL &&
	    cq_closure(re, id)->state == CQ_ABORTED);
	CHECK(same_state(cq, re));
	recs_free(&rs);
	cq_free(cq);
	cq_free(re);
}

static void
every_operation_writes_its_record(void)
{
	struct recs rs = {0};
	long ev = 0;
	struct cq *cq = cq_new(&cfg, quiet, &ev, 0);
	struct cq_closure *c, *out[1];
	struct cq_worker *w;
	char msg[256];
	uint64_t id, *ids;
	long *ats;
	int dup;
	size_t n;

	/* Without a journal, nothing is kept. */
	c = closure(cq, TRUE, NULL, NULL, NULL, 0, 0);
	cq_enqueue(cq, cq_queue(cq, "a", 1), c, 0, &id, &dup, msg, sizeof(msg));
	cq_set_journal(cq, keep, &rs);
	n = rs.n;
	cq_queue(cq, "b", 1);
	CHECK(rs.n == ++n);
	cq_queue(cq, "b", 1);
	CHECK(rs.n == n);
	w = cq_register(cq, "w:0", 1, 0, msg, sizeof(msg));
	CHECK(rs.n == ++n);
	CHECK(cq_take(cq, w, 1, 0, out) == 1 && rs.n == ++n);
	CHECK(cq_cancel(cq, out[0], 0) == ST_OK && rs.n == ++n);
	CHECK(cq_take_stops(w, &ids, &ats) == 1 && rs.n == ++n);
	free(ids);
	free(ats);
	CHECK(cq_forget(cq, out[0]) == ST_OK && rs.n == ++n);
	c = closure(cq, TRUE, NULL, NULL, NULL, 0, 0);
	cq_enqueue(cq, cq_queue(cq, "a", 1), c, 0, &id, &dup, msg, sizeof(msg));
	CHECK(rs.n == ++n);
	cq_take(cq, w, 1, 0, out);
	CHECK(rs.n == ++n);
	cq_seen(cq, w, 10);
	CHECK(rs.n == n);
	cq_scan(cq, 5000);
	CHECK(rs.n == ++n && !w->live);
	CHECK(cq_resource_add(cq, "r", "{\"name\":\"r\",\"argv\":[\"true\"]}",
	          msg, sizeof(msg)) == ST_OK &&
	    rs.n == ++n);
	cq_resource_state(w, "r", CQ_RES_READY, NULL);
	CHECK(rs.n == ++n);
	cq_free(cq);
	recs_free(&rs);
}

/* A copy of b with one random change: a byte, a cut, garbage. */
static void
mutate(const struct buf *b, struct buf *out)
{
	buf_reset(out);
	buf_append(out, b->data, b->len);
	switch (pick(5)) {
	case 0: out->data[pick(out->len)] ^= (char)(1 + pick(255)); break;
	case 1: out->len = pick(out->len); break;
	case 2:
		for (size_t i = 4; i < out->len; i++)
			out->data[i] = (char)rnd();
		break;
	case 3: out->data[4 + pick(out->len - 4)] = (char)0xff; break;
	default:
		for (int k = 0; k < 3; k++)
			out->data[pick(out->len)] = (char)rnd();
		break;
	}
}

static void
damage_is_refused(void)
{
	struct run r;
	struct buf m = {0};
	char err[256];
	long ev = 0;
	int refused = 0;

	run(&r, 1500);
	struct cq *cq = cq_new(&cfg, quiet, &ev, 5);
	CHECK(cq_restore(cq, r.snap[NPOINTS - 1].data, r.snap[NPOINTS - 1].len,
	          5, err, sizeof(err)) == 0);
	for (int i = 0; i < 600; i++) {
		mutate(&r.rs.r[pick(r.rs.n)], &m);
		err[0] = '\0';
		if (cq_apply(cq, m.data, m.len, 5, err, sizeof(err)) < 0) {
			refused++;
			CHECK(err[0] != '\0');
		}
	}
	printf("# %d of 600 damaged records refused\n", refused);
	CHECK(refused > 300);
	cq_free(cq);
	for (int i = 0; i < 200; i++) {
		cq = cq_new(&cfg, quiet, &ev, 5);
		mutate(&r.snap[1 + pick(NPOINTS - 1)], &m);
		err[0] = '\0';
		if (cq_restore(cq, m.data, m.len, 5, err, sizeof(err)) < 0)
			CHECK(err[0] != '\0');
		cq_free(cq);
	}
	cq = cq_new(&cfg, quiet, &ev, 5);
	CHECK(cq_restore(cq, "", 0, 5, err, sizeof(err)) < 0);
	CHECK(cq_apply(cq, "CQS\1", 4, 5, err, sizeof(err)) < 0);
	CHECK(cq_apply(cq, r.snap[1].data, r.snap[1].len, 5, err, sizeof(err)) <
	    0);
	CHECK(cq_restore(cq, r.snap[1].data, r.snap[1].len, 5, err,
	          sizeof(err)) == 0);
	CHECK(cq_restore(cq, r.snap[1].data, r.snap[1].len, 5, err,
	          sizeof(err)) < 0);
	cq_free(cq);
	buf_free(&m);
	run_free(&r);
}

static void
workers_must_beat_again_after_a_restore(void)
{
	long ev = 0;
	struct cq *cq = cq_new(&cfg, quiet, &ev, 0), *re;
	struct cq_worker *w0, *w1;
	struct cq_closure *c, *out[2];
	struct cq_result res = {.exited = 1};
	struct buf snap = {0};
	char msg[256], inc[17];
	uint64_t id0, id1;
	int dup;

	for (int i = 0; i < 2; i++) {
		c = closure(cq, TRUE, NULL, NULL, NULL, 0, 0);
		cq_enqueue(cq, cq_queue(cq, "q", 1), c, 0, i ? &id1 : &id0,
		    &dup, msg, sizeof(msg));
	}
	w0 = cq_register(cq, "w:0", 1, 0, msg, sizeof(msg));
	w1 = cq_register(cq, "w:1", 1, 0, msg, sizeof(msg));
	CHECK(cq_take(cq, w0, 1, 0, out) == 1 && out[0]->id == id0);
	CHECK(cq_take(cq, w1, 1, 0, out) == 1 && out[0]->id == id1);
	task_format_incarnation(w0->inc, inc);
	CHECK(cq_snapshot(cq, &snap) == 0);
	cq_free(cq);

	/* Another process: its clock has nothing to do with the first's. */
	re = cq_new(&cfg, quiet, &ev, 7000000);
	CHECK(cq_restore(re, snap.data, snap.len, 7000000, msg, sizeof(msg)) ==
	    0);
	w0 = cq_worker(re, "w:0");
	w1 = cq_worker(re, "w:1");
	CHECK(w0 != NULL && w1 != NULL && w0->live && w1->live);
	CHECK(cq_view(re)->workers_live == 2 && cq_view(re)->inflight == 2);
	CHECK(cq_worker_check(w0, inc, msg, sizeof(msg)) == ST_OK);
	cq_scan(re, 7000500);
	CHECK(w0->live && w1->live);
	cq_seen(re, w0, 7000800);
	cq_scan(re, 7001500);
	CHECK(w0->live && !w1->live);
	c = cq_closure(re, id1);
	CHECK(c->state == CQ_QUEUED && c->deaths == 1);
	c = cq_closure(re, id0);
	CHECK(c->state == CQ_RUNNING && c->worker == w0);
	CHECK(cq_report(re, w0, id0, 1, 0, &res, 7001600, msg, sizeof(msg)) ==
	    ST_OK);
	CHECK(c->state == CQ_READY && cq_view(re)->done == 1);
	cq_free(re);
	buf_free(&snap);
}

/*
 * The schedule, join or done that takes a queue's error cancels its
 * closures in flight at once (upstream's cancellation of inflight
 * closures), not only those queued; a copy fed the records agrees.
 */
/*
 * n closures in queue q0 of cq (journaled into rs), the first taken by
 * w:0 and the second by w:1; w:0's exits with status 3, so q0 holds an
 * error while w:1's runs. Their ids in id.
 */
static struct cq_queue *
one_failed_one_running(struct cq *cq, struct recs *rs, int n, uint64_t *id,
    struct cq_worker **w0, struct cq_worker **w1)
{
	struct cq_closure *c, *out[1];
	struct cq_queue *q;
	struct cq_result bad = {.exited = 1, .code = 3};
	char msg[256];
	int dup;

	cq_set_journal(cq, keep, rs);
	q = cq_queue(cq, "q0", 1);
	for (int i = 0; i < n; i++) {
		c = closure(cq, TRUE, NULL, NULL, NULL, 0, 0);
		cq_enqueue(cq, q, c, 0, &id[i], &dup, msg, sizeof(msg));
	}
	*w0 = cq_register(cq, "w:0", 1, 0, msg, sizeof(msg));
	*w1 = cq_register(cq, "w:1", 1, 0, msg, sizeof(msg));
	CHECK(cq_take(cq, *w0, 1, 0, out) == 1 && out[0]->id == id[0]);
	CHECK(cq_take(cq, *w1, 1, 0, out) == 1 && out[0]->id == id[1]);
	CHECK(cq_report(cq, *w0, id[0], 1, 0, &bad, 10, msg, sizeof(msg)) ==
	    ST_OK);
	return q;
}

static void
error_cancels_what_is_in_flight(void)
{
	long ev = 0;
	struct recs rs = {0};
	struct cq *cq = cq_new(&cfg, quiet, &ev, 0);
	struct cq *re = cq_new(&cfg, quiet, &ev, 0);
	struct cq_worker *w0, *w1;
	struct cq_closure *c, *e;
	struct cq_queue *q;
	struct cq_result late = {.exited = 1};
	char msg[256], want[64];
	uint64_t id[3], *ids;
	long *ats;
	size_t n;

	q = one_failed_one_running(cq, &rs, 3, id, &w0, &w1);
	CHECK(q->error != NULL && q->inflight == 1);
	e = cq_take_error(cq, q, 20);
	CHECK(e != NULL && e->id == id[0] && q->error == NULL);
	CHECK(q->inflight == 0 && q->queued == 0 && w1->running == 0);
	CHECK(cq_view(cq)->inflight == 0 && cq_view(cq)->cancelled == 2);
	snprintf(want, sizeof(want), "closure %" PRIu64 " of queue q0 failed",
	    id[0]);
	for (int i = 1; i < 3; i++) {
		c = cq_closure(cq, id[i]);
		CHECK(c->state == CQ_CANCELLED && c->res.message != NULL &&
		    strstr(c->res.message, want) != NULL);
	}
	/* Its worker is told to stop it; a result that comes after is
	 * stale. */
	n = cq_take_stops(w1, &ids, &ats);
	CHECK(n == 1 && ids[0] == id[1] && ats[0] == 1);
	free(ids);
	free(ats);
	CHECK(cq_report(cq, w1, id[1], 1, 0, &late, 30, msg, sizeof(msg)) ==
	    ST_ABORTED);
	CHECK(cq_take_error(cq, q, 40) == NULL);
	for (size_t i = 0; i < rs.n; i++)
		CHECK(cq_apply(re, rs.r[i].data, rs.r[i].len, 50, msg,
		          sizeof(msg)) == 0);
	CHECK(same_state(cq, re));
	recs_free(&rs);
	cq_free(cq);
	cq_free(re);
}

/* A closure given back while its queue holds an error is cancelled,
 * saying why, as those the taking of the error cancels. */
static void
given_back_after_an_error_says_why(void)
{
	long ev = 0;
	struct recs rs = {0};
	struct cq *cq = cq_new(&cfg, quiet, &ev, 0);
	struct cq *re = cq_new(&cfg, quiet, &ev, 0);
	struct cq_worker *w0, *w1;
	struct cq_closure *c;
	struct cq_queue *q;
	struct cq_result none = {0};
	char msg[256], want[64];
	uint64_t id[2];

	q = one_failed_one_running(cq, &rs, 2, id, &w0, &w1);
	CHECK(cq_report(cq, w1, id[1], 1, 1, &none, 20, msg, sizeof(msg)) ==
	    ST_OK);
	snprintf(want, sizeof(want), "closure %" PRIu64 " of queue q0 failed",
	    id[0]);
	c = cq_closure(cq, id[1]);
	CHECK(c->state == CQ_CANCELLED && c->res.message != NULL &&
	    strstr(c->res.message, want) != NULL);
	CHECK(cq_take_error(cq, q, 30) != NULL);
	for (size_t i = 0; i < rs.n; i++)
		CHECK(cq_apply(re, rs.r[i].data, rs.r[i].len, 50, msg,
		          sizeof(msg)) == 0);
	CHECK(same_state(cq, re));
	recs_free(&rs);
	cq_free(cq);
	cq_free(re);
}

static double
ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 +
	    (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

static void
snapshot_of_100000_closures(void)
{
	long ev = 0;
	struct cq_config big = cfg;
	struct cq *cq, *re;
	struct cq_queue *q;
	struct buf snap = {0};
	struct timespec t0;
	double wrote, read;
	char msg[256];
	int ok = 1;

	big.queue_max = 200000;
	cq = cq_new(&big, quiet, &ev, 0);
	q = cq_queue(cq, "bulk", 1);
	for (int i = 0; i < 100000 && ok; i++) {
		char spec[96];
		uint64_t id;
		int dup;
		snprintf(spec, sizeof(spec),
		    "{\"argv\":[\"python3\",\"step.py\",\"%d\"],"
		    "\"timeout_ms\":60000}",
		    i);
		struct cq_closure *c =
		    closure(cq, spec, NULL, NULL, NULL, 0, 0);
		ok = c != NULL &&
		    cq_enqueue(cq, q, c, 0, &id, &dup, msg, sizeof(msg)) ==
		        ST_OK;
	}
	CHECK(ok);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(cq_snapshot(cq, &snap) == 0);
	wrote = ms_since(&t0);
	re = cq_new(&big, quiet, &ev, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(cq_restore(re, snap.data, snap.len, 0, msg, sizeof(msg)) == 0);
	read = ms_since(&t0);
	CHECK(cq_view(re)->queued == 100000);
	CHECK(same_state(cq, re));
	printf("# 100000 closures: snapshot of %zu bytes written in %.1f ms, "
	       "restored in %.1f ms\n",
	    snap.len, wrote, read);
	buf_free(&snap);
	cq_free(cq);
	cq_free(re);
}

UNIT_TESTS(cqjournal_tests) = {
    {"closureq_journal: every operation writes its record",
        every_operation_writes_its_record},
    {"closureq_journal: a copy fed each record keeps in step",
        a_copy_fed_each_record_keeps_in_step},
    {"closureq_journal: a snapshot and the records after it give the state "
     "back",
        replay_matches_from_every_snapshot},
    {"closureq_journal: a lost record leaves older states",
        a_lost_record_leaves_older_states},
    {"closureq_journal: a replay under another limit of deaths ends the "
     "same closures",
        replay_under_another_limit_of_deaths},
    {"closureq_journal: damaged records and snapshots are refused",
        damage_is_refused},
    {"closureq_journal: workers must beat again after a restore",
        workers_must_beat_again_after_a_restore},
    {"closureq: a queue's error cancels its closures in flight at once",
        error_cancels_what_is_in_flight},
    {"closureq: a closure given back while its queue holds an error is "
     "cancelled, saying why",
        given_back_after_an_error_says_why},
    {"closureq_journal: a snapshot of 100000 closures",
        snapshot_of_100000_closures},
    {NULL, NULL},
};
