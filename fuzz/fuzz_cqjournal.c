/*
 * The closure queue's journal on bad data. The first byte picks: 0, the
 * rest is a snapshot for cq_restore; else the rest is records (each a
 * byte of length and its bytes) for cq_apply over a small state of two
 * queues, two workers, a resource and closures queued, running and ended.
 * Either way nothing crashes and a refusal says why. Records go to two
 * queues alike, one made live and one made by replaying its records under
 * another limit of deaths: both must hold the same state after every
 * record (one mutator), and what loads snapshots to bytes that load again
 * to the same bytes. Then the state goes on working live (takes, reports,
 * cancels, deaths, forgets), and the follower fed its records holds the
 * same state again.
 */
#include <inttypes.h>

#include "buf.h"
#include "closureq.h"
#include "fuzz.h"

static void
on_event(const struct cq_event *ev, void *arg)
{
	(void)ev;
	(void)arg;
}

static const struct cq_config cfg = {.queue_max = 64, .hb_timeout_ms = 1000};

/* The records a journal would hold, in order. */
struct recs {
	struct buf all; /* each as 4 bytes of length, then its bytes */
};

static void
keep(const void *rec, size_t len, void *arg)
{
	struct recs *rs = arg;
	uint32_t n = (uint32_t)len;

	FUZZ_CHECK(buf_append(&rs->all, &n, sizeof(n)) == 0 &&
	    buf_append(&rs->all, rec, len) == 0);
}

/* A follower holds another limit of deaths: the records carry the one
 * their maker held. */
static const struct cq_config other = {.queue_max = 64,
    .hb_timeout_ms = 1000,
    .max_deaths = 1};

static struct cq *
fresh_of(const struct cq_config *c)
{
	struct cq *cq = cq_new(c, on_event, NULL, 0);

	FUZZ_CHECK(cq != NULL);
	return cq;
}

static struct cq *
fresh(void)
{
	return fresh_of(&cfg);
}

/* Applies every record rs holds to follower. */
static void
follow(struct cq *follower, struct recs *rs)
{
	char err[256];

	for (size_t i = 0; i < rs->all.len;) {
		uint32_t n;
		memcpy(&n, rs->all.data + i, sizeof(n));
		FUZZ_CHECK(cq_apply(follower, rs->all.data + i + sizeof(n), n,
		               0, err, sizeof(err)) == 0);
		i += sizeof(n) + n;
	}
	buf_reset(&rs->all);
}

static void
enqueue(struct cq *cq, const char *queue, const char *key, const char *on)
{
	static const char spec[] = "{\"argv\":[\"true\"]}";
	struct cq_spec s = {.spec = strdup(spec),
	    .speclen = sizeof(spec) - 1,
	    .key = key,
	    .on = on};
	enum status st;
	char msg[256];
	uint64_t id;
	int dup;
	struct cq_closure *c = cq_closure_new(cq, &s, &st, msg, sizeof(msg));

	FUZZ_CHECK(c != NULL);
	FUZZ_CHECK(cq_enqueue(cq, cq_queue(cq, queue, 1), c, 0, &id, &dup, msg,
	               sizeof(msg)) == ST_OK);
}

/* The base state, made live with its records kept in rs. */
static struct cq *
base(struct recs *rs)
{
	struct cq *cq = fresh();
	struct cq_closure *out[4];
	struct cq_result res = {.exited = 1, .code = 3};
	struct cq_worker *w0, *w1;
	char msg[256];

	cq_set_journal(cq, keep, rs);
	FUZZ_CHECK(cq_resource_add(cq, "r", "{\"name\":\"r\",\"argv\":[\"x\"]}",
	               msg, sizeof(msg)) == ST_OK);
	for (int i = 0; i < 6; i++)
		enqueue(cq, i % 2 ? "a" : "b", i == 2 ? "k" : NULL,
		    i == 4 ? "w:1" : NULL);
	w0 = cq_register(cq, "w:0", 2, 0, msg, sizeof(msg));
	w1 = cq_register(cq, "w:1", 2, 0, msg, sizeof(msg));
	FUZZ_CHECK(w0 != NULL && w1 != NULL);
	FUZZ_CHECK(cq_take(cq, w0, 2, 0, out) == 2);
	FUZZ_CHECK(cq_report(cq, w0, out[0]->id, out[0]->attempts, 0, &res, 0,
	               msg, sizeof(msg)) == ST_OK);
	FUZZ_CHECK(cq_take(cq, w1, 1, 0, out) == 1);
	cq_resource_state(w1, "r", CQ_RES_READY, "built");
	return cq;
}

static void
same(struct cq *a, struct cq *b)
{
	struct buf x = {0}, y = {0};

	FUZZ_CHECK(cq_snapshot(a, &x) == 0 && cq_snapshot(b, &y) == 0);
	FUZZ_CHECK(x.len == y.len && memcmp(x.data, y.data, x.len) == 0);
	buf_free(&x);
	buf_free(&y);
}

/* What loaded snapshots to bytes that load to the same bytes. */
static void
round_trip(struct cq *cq)
{
	struct buf a = {0};
	struct cq *again = fresh();
	char err[256];

	FUZZ_CHECK(cq_snapshot(cq, &a) == 0);
	FUZZ_CHECK(cq_restore(again, a.data, a.len, 0, err, sizeof(err)) == 0);
	same(cq, again);
	buf_free(&a);
	cq_free(again);
}

static void
exercise_worker(struct cq_worker *w, void *arg)
{
	struct cq *cq = arg;
	struct cq_closure *out[4];
	struct cq_result res = {.exited = 1};
	char msg[256];
	uint64_t *ids;
	long *ats;
	size_t n;

	if (!w->live)
		return;
	n = cq_take(cq, w, 4, 10, out);
	for (size_t i = 0; i < n; i++)
		if (i % 2 == 0)
			cq_report(cq, w, out[i]->id, out[i]->attempts, 0, &res,
			    10, msg, sizeof(msg));
		else
			cq_cancel(cq, out[i], 10);
	free(res.out);
	n = cq_take_stops(w, &ids, &ats);
	free(ids);
	free(ats);
}

static void
forget_one(struct cq_closure *c, void *arg)
{
	if (c->state != CQ_QUEUED && c->state != CQ_RUNNING)
		cq_forget(arg, c);
}

/* Everything a daemon does, on whatever loaded. */
static void
exercise(struct cq *cq)
{
	struct cq_queue *q;

	cq_each_worker(cq, exercise_worker, cq);
	if ((q = cq_queue(cq, "a", 0)) != NULL)
		cq_take_error(cq, q, 20);
	cq_scan(cq, 5000);
	cq_each_closure(cq, NULL, forget_one, cq);
	FUZZ_CHECK(cq_view(cq)->inflight == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct recs rs = {{0}};
	struct cq *cq, *follower;
	char err[256];

	if (size == 0)
		return 0;
	err[0] = '\0';
	if (data[0] == 0) {
		cq = fresh();
		if (cq_restore(cq, data + 1, size - 1, 0, err, sizeof(err)) <
		    0) {
			FUZZ_CHECK(err[0] != '\0');
			cq_free(cq);
			return 0;
		}
		round_trip(cq);
		exercise(cq);
		cq_free(cq);
		return 0;
	}
	cq = base(&rs);
	follower = fresh_of(&other);
	follow(follower, &rs);
	same(cq, follower);
	for (size_t i = 1; i < size;) {
		size_t n = data[i++];
		int a, b;
		if (n > size - i)
			n = size - i;
		a = cq_apply(cq, data + i, n, 0, err, sizeof(err));
		b = cq_apply(follower, data + i, n, 0, err, sizeof(err));
		FUZZ_CHECK(a == b && (a == 0 || err[0] != '\0'));
		same(cq, follower);
		i += n;
	}
	round_trip(cq);
	/* What the daemon does next, live, and the follower fed its
	 * records: the same state. */
	exercise(cq);
	follow(follower, &rs);
	same(cq, follower);
	buf_free(&rs.all);
	cq_free(follower);
	cq_free(cq);
	return 0;
}
