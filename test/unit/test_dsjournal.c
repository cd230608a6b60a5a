/*
 * The datasets' journal: a long seeded run of every kind of change,
 * recorded; from each snapshot taken on the way, a restore and the later
 * records give the same state again. Bad records and snapshots fail with
 * a message; restored clients and workers time out as usual; and the
 * times of loading a job over a million splits.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "dataset.h"
#include "dsjson.h"
#include "unit.h"

/* Whether the last dsjson_lease found nothing to lease yet. */
static int later;

struct rec {
	void *p;
	size_t n;
};

struct log {
	struct rec *v;
	size_t n, cap;
};

static void
on_event(const struct ds_event *ev, void *arg)
{
	(void)ev;
	(void)arg;
}

static void
on_record(const void *p, size_t n, void *arg)
{
	struct log *l = arg;

	if (l->n == l->cap) {
		l->cap = l->cap != 0 ? l->cap * 2 : 1024;
		l->v = realloc(l->v, l->cap * sizeof(*l->v));
	}
	l->v[l->n].p = malloc(n);
	memcpy(l->v[l->n].p, p, n);
	l->v[l->n++].n = n;
}

static void
log_free(struct log *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].p);
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static char *static_workers[] = {"w:0", "w:1"};

static struct ds *
fresh(void)
{
	struct ds_config cfg = {.client_timeout_ms = 1000,
	    .gc_timeout_ms = 2000,
	    .static_workers = static_workers,
	    .nstatic = 2};

	return ds_new(&cfg, on_event, NULL);
}

static uint64_t rng;

static uint64_t
rnd(uint64_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return n != 0 ? rng % n : 0;
}

static double
secs(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int
add(struct ds *ds, const char *json)
{
	json_t *def = json_loads(json, 0, NULL);
	struct ds_dataset *d = NULL;
	char msg[256];
	int created;
	enum status st;

	st = dsjson_dataset_register(ds, def, &d, &created, msg, sizeof(msg));
	json_decref(def);
	return st == ST_OK ? 0 : -1;
}

static struct ds_job *
open_job(struct ds *ds, json_t *req, int64_t now)
{
	struct ds_job *j = NULL;
	struct ds_client *c;
	char msg[256];
	int created;

	if (dsjson_job_open(ds, req, now, &j, &c, &created, msg, sizeof(msg)) !=
	    ST_OK)
		j = NULL;
	json_decref(req);
	return j;
}

/* The snapshot of ds, which must be taken. */
static struct buf
snap(struct ds *ds)
{
	struct buf b = {0};

	CHECK(ds_snapshot(ds, &b) == 0);
	return b;
}

static int
same(const struct buf *a, const struct buf *b, const char *what)
{
	size_t i = 0;

	if (a->len == b->len && memcmp(a->data, b->data, a->len) == 0)
		return 1;
	while (i < a->len && i < b->len && a->data[i] == b->data[i])
		i++;
	printf("# %s: snapshots of %zu and %zu bytes differ at %zu\n", what,
	    a->len, b->len, i);
	if (getenv("DSJOURNAL_DUMP") != NULL) {
		/* Both, to read side by side. */
		FILE *f = fopen("/tmp/dsjournal.a", "w");
		fwrite(a->data, 1, a->len, f);
		fclose(f);
		f = fopen("/tmp/dsjournal.b", "w");
		fwrite(b->data, 1, b->len, f);
		fclose(f);
	}
	return 0;
}

/* The random run. */

struct run {
	struct ds *ds;
	int64_t now;
	uint64_t jobs[256];
	size_t njobs;
	uint64_t inc[4];
	int resumed;
};

static const char *const names[] = {"w:0", "w:1", "w:2", "w:3"};

static struct ds_job *
pick_job(struct run *r)
{
	char key[24];

	for (int tries = 0; tries < 8 && r->njobs > 0; tries++) {
		struct ds_job *j;
		snprintf(key, sizeof(key), "%" PRIu64, r->jobs[rnd(r->njobs)]);
		if ((j = ds_job_find(r->ds, key)) != NULL)
			return j;
	}
	return NULL;
}

static struct ds_task *
pick_task(struct run *r, int running)
{
	struct ds_job *j = pick_job(r);
	struct ds_task *v[64];
	size_t n = 0;

	if (j == NULL)
		return NULL;
	for (struct ds_task *t = j->tasks; t != NULL && n < 64; t = t->next)
		if (!running || t->state == DS_TASK_RUNNING)
			v[n++] = t;
	return n > 0 ? v[rnd(n)] : NULL;
}

static struct ds_client *
pick_client(struct run *r)
{
	struct ds_job *j = pick_job(r);
	struct ds_client *v[64];
	size_t n = 0;

	if (j == NULL)
		return NULL;
	for (struct ds_client *c = j->clients; c != NULL && n < 64; c = c->next)
		v[n++] = c;
	return n > 0 ? v[rnd(n)] : NULL;
}

/* Some of job j's open seqs, as "delivered" lists. */
static json_t *
some_delivered(struct ds_job *j, struct ds_task *t)
{
	json_t *a = json_array();
	struct ds_lease *l = t != NULL ? t->leases.head : j->queue.head;

	if (t == NULL && l == NULL && j->tasks != NULL)
		l = j->tasks->leases.head;
	for (; l != NULL; l = l->next) {
		uint64_t x = rnd(10), y = x + rnd(6);
		if (rnd(3) == 0)
			continue;
		json_array_append_new(a,
		    json_pack("[I,I,I,I]", (json_int_t)l->seq, (json_int_t)x,
		        (json_int_t)y, (json_int_t)(rnd(3) == 0 ? 10 : -1)));
	}
	if (rnd(8) == 0) /* done already, or never leased */
		json_array_append_new(a,
		    json_pack("[I,I,I,I]", (json_int_t)rnd(50), 0, 10, 10));
	return a;
}

static void
op_open(struct run *r)
{
	static const char *const specs[] = {
	    "{\"dataset\":1}",
	    "{\"dataset\":1,\"name\":\"dyn\",\"seed\":7,\"repeat\":3}",
	    "{\"dataset\":2,\"name\":\"forever\",\"repeat\":0}",
	    "{\"dataset\":2,\"name\":\"files\",\"mode\":\"file\"}",
	    "{\"dataset\":\"small\",\"name\":\"either\","
	    "\"mode\":\"file_or_data\"}",
	    "{\"dataset\":3,\"name\":\"rr\",\"mode\":\"off\",\"consumers\":2,"
	    "\"consumer_index\":0}",
	    "{\"dataset\":3,\"name\":\"rr\",\"mode\":\"off\",\"consumers\":2,"
	    "\"consumer_index\":1}",
	};
	size_t k = rnd(sizeof(specs) / sizeof(specs[0]) + 1);
	struct ds_job *j;
	json_t *req;

	if (k == sizeof(specs) / sizeof(specs[0])) {
		/* A new job from another's position. */
		struct ds_job *from = pick_job(r);
		json_t *cp;
		char msg[256], name[32];
		if (from == NULL ||
		    dsjson_checkpoint(from, &cp, msg, sizeof(msg)) != ST_OK)
			return;
		/* Two names: a state starts one anew, or joins it. */
		snprintf(name, sizeof(name), "resumed%d", r->resumed++ % 2);
		req = json_pack("{s:I,s:s,s:I,s:I,s:o}", "dataset",
		    (json_int_t)from->ds->id, "name", name, "seed",
		    (json_int_t)from->seed, "repeat", (json_int_t)from->repeat,
		    "from_state", cp);
		/* Runs: a new one starts the name anew, the same one joins
		 * (or, from another state, is refused). */
		if (rnd(2) == 0)
			json_object_set_new(req, "run",
			    json_string(rnd(2) == 0 ? "1" : "2"));
	} else {
		req = json_loads(specs[k], 0, NULL);
	}
	if ((j = open_job(r->ds, req, r->now)) != NULL && r->njobs < 256) {
		for (size_t i = 0; i < r->njobs; i++)
			if (r->jobs[i] == j->id)
				return;
		r->jobs[r->njobs++] = j->id;
	}
}

static void
op_lease(struct run *r)
{
	struct ds_task *t = pick_task(r, 1);
	struct buf b = {0};
	char msg[256];
	uint64_t id;

	if (t == NULL)
		return;
	id = rnd(3) == 0 ? 0 : rnd(2) == 0 ? t->lease_id : 1 + rnd(1000000);
	dsjson_lease(r->ds, t, 1 + (long)rnd(4), id, &later, &b, msg,
	    sizeof(msg));
	buf_free(&b);
}

static void
op_beat(struct run *r)
{
	struct ds_client *c = pick_client(r);
	json_t *body, *lost = json_array(), *reply = NULL;
	char msg[256];

	if (c == NULL) {
		json_decref(lost);
		return;
	}
	for (struct ds_task *t = c->job->tasks; t != NULL; t = t->next)
		if (t->state == DS_TASK_FAILED ? rnd(2) == 0 : rnd(20) == 0)
			json_array_append_new(lost,
			    json_integer((json_int_t)t->id));
	body = json_pack("{s:o,s:o}", "delivered", some_delivered(c->job, NULL),
	    "lost", lost);
	if (c->job->consumers > 0) {
		int64_t round = (c->round < 0 ? 0 : c->round) + (int64_t)rnd(3);
		json_object_set_new(body, "round", json_integer(round));
		if (rnd(2) == 0)
			json_object_set_new(body, "blocked_round",
			    json_integer(c->job->rr_target >= 0 ?
			            c->job->rr_target :
			            round + 1));
	}
	CHECK(dsjson_client_beat(r->ds, c, body, r->now, &reply, msg,
	          sizeof(msg)) == ST_OK);
	json_decref(reply);
	json_decref(body);
}

static void
step(struct run *r)
{
	struct ds_task *t;
	struct ds_client *c;
	int k = (int)rnd(100);
	int w = (int)rnd(4);

	r->now += (int64_t)rnd(30);
	if (k < 8) {
		char addr[32];
		snprintf(addr, sizeof(addr), "10.0.0.%d:%d", w, (int)rnd(100));
		ds_worker_up(r->ds, names[w], ++r->inc[w], addr,
		    rnd(2) ? "h1" : "h2");
	} else if (k < 11) {
		ds_worker_down(r->ds, names[w], r->inc[w] - rnd(2));
	} else if (k < 12) {
		ds_worker_forget(r->ds, names[w]);
	} else if (k < 20) {
		op_open(r);
	} else if (k < 45) {
		op_lease(r);
	} else if (k < 55) {
		char msg[256];
		json_t *l;
		if ((t = pick_task(r, 0)) != NULL) {
			l = some_delivered(t->job, t);
			CHECK(dsjson_task_delivered(r->ds, t, l, msg,
			          sizeof(msg)) == ST_OK);
			json_decref(l);
		}
	} else if (k < 80) {
		op_beat(r);
	} else if (k < 83) {
		if ((c = pick_client(r)) != NULL)
			ds_client_release(r->ds, c, r->now);
	} else if (k < 86) {
		if ((t = pick_task(r, 1)) != NULL)
			ds_task_end(r->ds, t, rnd(5) == 0, "boom");
	} else if (k < 88) {
		add(r->ds,
		    "{\"splits\":[\"x\",\"y\"],\"reader\":\"cat\","
		    "\"name\":\"small\"}");
		if (rnd(2)) /* a name for a dataset that had none */
			add(r->ds,
			    "{\"splits\":[\"a\",\"b\",\"c\",\"d\","
			    "\"e\"],\"reader\":\"cat\",\"name\":"
			    "\"five\"}");
		if (rnd(2))
			add(r->ds,
			    "{\"splits\":[\"x\",\"y\",\"z\"],"
			    "\"reader\":\"cat\",\"framing\":\"nul\"}");
	} else if (k < 90) {
		if (rnd(3) == 0)
			r->now += 1500; /* clients time out, jobs go */
		ds_scan(r->ds, r->now);
	} else {
		ds_scan(r->ds, r->now);
	}
}

#define NSNAP 6

struct point {
	struct buf snap;
	size_t nrec;
};

static void
run(struct run *r, struct log *log, struct point *pt, size_t steps)
{
	memset(r, 0, sizeof(*r));
	r->ds = fresh();
	ds_set_journal(r->ds, on_record, log);
	CHECK(add(r->ds,
	          "{\"splits\":[\"a\",\"b\",\"c\",\"d\",\"e\"],"
	          "\"reader\":\"cat\"}") == 0);
	CHECK(add(r->ds,
	          "{\"splits\":[\"f\",\"g\",\"h\"],"
	          "\"reader\":\"cat -n\",\"reader_skips\":true}") == 0);
	CHECK(add(r->ds,
	          "{\"splits\":[\"1\",\"2\"],\"reader\":\"seq\",\"name\":"
	          "\"nums\"}") == 0);
	for (size_t i = 0, p = 0; i < steps; i++) {
		if (p < NSNAP && i == steps * p / NSNAP) {
			pt[p].snap = snap(r->ds);
			pt[p].nrec = log->n;
			p++;
		}
		step(r);
	}
}

static void
replay_seed(uint64_t seed, size_t steps, int quiet)
{
	struct point pt[NSNAP];
	struct log log = {0};
	struct buf end, again;
	struct ds_view v;
	struct run r;
	char err[256];

	rng = seed;
	run(&r, &log, pt, steps);
	end = snap(r.ds);
	ds_view(r.ds, &v);
	/* Every kind of record but the snapshot's counters (types 2 to 14,
	 * their first byte) was made. */
	if (!quiet) {
		printf("# %zu records, snapshot of %zu bytes; %zu jobs, %zu "
		       "tasks, %zu clients, %zu leased, %lu leases, %lu "
		       "releases, %lu collected\n",
		    log.n, end.len, v.jobs, v.tasks, v.clients, v.leased,
		    v.leases, v.releases, v.collected);
		CHECK(v.leases > 100 && v.releases > 0 && v.collected > 0);
		/* Types 2 to 16 but 5 (R_JOB, read but no longer written)
		 * and 15 (a snapshot's end). */
		size_t kinds[32] = {0};
		for (size_t i = 0; i < log.n; i++)
			kinds[*(unsigned char *)log.v[i].p & 31]++;
		printf("# records by type:");
		for (int k = 1; k <= 16; k++)
			printf(" %zu", kinds[k]);
		printf("\n");
		for (int k = 2; k <= 16; k++)
			CHECK(kinds[k] > 0 || k == 5 || k == 15);
	}
	/* From nothing, every record. */
	{
		struct ds *ds = fresh();
		for (size_t i = 0; i < log.n; i++)
			if (ds_apply(ds, log.v[i].p, log.v[i].n, 0, err,
			        sizeof(err)) < 0) {
				printf("# record %zu: %s\n", i, err);
				CHECK(0);
				break;
			}
		again = snap(ds);
		CHECK(same(&end, &again, "replay from nothing"));
		buf_free(&again);
		ds_free(ds);
	}
	for (int p = 0; p < NSNAP; p++) {
		struct ds *ds = fresh();
		int ok = ds_restore(ds, pt[p].snap.data, pt[p].snap.len, 5, err,
		             sizeof(err)) == 0;
		if (!ok)
			printf("# snapshot %d: %s\n", p, err);
		CHECK(ok);
		again = snap(ds);
		CHECK(same(&pt[p].snap, &again, "restore"));
		buf_free(&again);
		for (size_t i = pt[p].nrec; ok && i < log.n; i++)
			if (ds_apply(ds, log.v[i].p, log.v[i].n, 5, err,
			        sizeof(err)) < 0) {
				printf("# snapshot %d, record %zu: %s\n", p, i,
				    err);
				CHECK(0);
				break;
			}
		again = snap(ds);
		CHECK(same(&end, &again, "restore and replay"));
		buf_free(&again);
		ds_free(ds);
	}
	/* A snapshot loads into an empty state only. */
	CHECK(ds_restore(r.ds, end.data, end.len, 0, err, sizeof(err)) < 0);
	for (int p = 0; p < NSNAP; p++)
		buf_free(&pt[p].snap);
	buf_free(&end);
	log_free(&log);
	ds_free(r.ds);
}

static void
replay_gives_the_same_state(void)
{
	static const uint64_t seeds[] = {0x9e3779b97f4a7c15ULL, 1, 77, 4242,
	    0xdeadbeef};

	const char *more = getenv("DSJOURNAL_SEEDS"); /* a longer search */

	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++)
		replay_seed(seeds[i], i == 0 ? 6000 : 3000 + 1000 * i, 0);
	for (long i = 0; more != NULL && i < atol(more) && !unit_failed; i++)
		replay_seed(1000003 * (uint64_t)(i + 1), 2000 + 300 * (i % 20),
		    1);
}

/* Bad data: truncated, mutated, garbage. */

static void
mutate(unsigned char *p, size_t *n, size_t cap)
{
	switch (rnd(5)) {
	case 0: /* truncate */ *n = rnd(*n); break;
	case 1: /* flip a byte or a few */
		for (int i = 0, k = 1 + (int)rnd(3); i<k && * n> 0; i++)
			p[rnd(*n)] ^= (unsigned char)(1 + rnd(255));
		break;
	case 2: /* a big varint somewhere */
		if (*n > 0)
			p[rnd(*n)] = 0xff;
		break;
	case 3: /* bytes after it */
		while (*n < cap && rnd(4) != 0)
			p[(*n)++] = (unsigned char)rnd(256);
		break;
	default: /* garbage */
		*n = rnd(cap);
		for (size_t i = 0; i < *n; i++)
			p[i] = (unsigned char)rnd(256);
	}
}

static void
bad_data_fails_with_a_message(void)
{
	struct point pt[NSNAP];
	struct log log = {0};
	struct run r;
	struct ds *ds;
	char err[256];
	int failed = 0, truncated = 0;

	rng = 0x1234567;
	run(&r, &log, pt, 1500);
	ds = fresh();
	CHECK(ds_restore(ds, pt[3].snap.data, pt[3].snap.len, 0, err,
	          sizeof(err)) == 0);
	for (int i = 0; i < 600; i++) {
		struct rec *x = &log.v[rnd(log.n)];
		size_t cap = x->n + 64, n = x->n;
		unsigned char *p = malloc(cap);
		memcpy(p, x->p, x->n);
		mutate(p, &n, cap);
		err[0] = '\0';
		if (ds_apply(ds, p, n, 0, err, sizeof(err)) < 0) {
			CHECK(err[0] != '\0');
			failed++;
		}
		/* A record cut short is never whole. */
		if (x->n > 1) {
			size_t cut = 1 + rnd(x->n - 1);
			truncated++;
			CHECK(ds_apply(ds, x->p, x->n - cut, 0, err,
			          sizeof(err)) < 0);
		}
		free(p);
		/* And the right records, now and then, to move on. */
		ds_apply(ds, log.v[rnd(log.n)].p, log.v[rnd(log.n)].n, 0, err,
		    sizeof(err));
	}
	/* Whatever the accepted ones made, the state goes on working. */
	{
		struct run m = {.ds = ds, .now = 0};
		for (uint64_t i = 0; i < 64; i++)
			m.jobs[m.njobs++] = i + 1;
		for (int i = 0; i < 2000; i++)
			step(&m);
	}
	ds_free(ds);
	printf("# %d of 600 mutated records refused, %d cut short\n", failed,
	    truncated);
	for (int i = 0; i < 300; i++) {
		struct buf *s = &pt[1 + rnd(NSNAP - 1)].snap;
		size_t cap = s->len + 64, n = s->len;
		unsigned char *p = malloc(cap);
		memcpy(p, s->data, s->len);
		mutate(p, &n, cap);
		ds = fresh();
		err[0] = '\0';
		if (ds_restore(ds, p, n, 0, err, sizeof(err)) < 0)
			CHECK(err[0] != '\0');
		ds_free(ds);
		if (n < s->len) {
			ds = fresh();
			CHECK(ds_restore(ds, s->data, n, 0, err, sizeof(err)) <
			    0);
			ds_free(ds);
		}
		free(p);
	}
	ds = fresh();
	CHECK(ds_apply(ds, "", 0, 0, err, sizeof(err)) < 0 && *err != '\0');
	CHECK(ds_restore(ds, "", 0, 0, err, sizeof(err)) < 0 && *err != '\0');
	ds_free(ds);
	for (int p = 0; p < NSNAP; p++)
		buf_free(&pt[p].snap);
	log_free(&log);
	ds_free(r.ds);
}

static void
count_worker(const char *name, uint64_t inc, void *arg)
{
	if (strcmp(name, "w:2") == 0 && inc == 1)
		(*(int *)arg)++;
}

/* Liveness after a restore: what does not come back times out. */
static void
restored_clients_and_workers_time_out(void)
{
	struct ds *ds = fresh(), *ds2;
	struct ds_job *j;
	struct ds_client *c;
	struct ds_view v;
	struct buf b = {0}, s;
	json_t *reply, *body;
	char msg[256];

	add(ds, "{\"splits\":[\"a\",\"b\",\"c\",\"d\"],\"reader\":\"cat\"}");
	ds_worker_up(ds, "w:2", 1, "127.0.0.1:1", "h");
	j = open_job(ds, json_pack("{s:i}", "dataset", 1), 1000000);
	c = j->clients;
	body = json_object();
	CHECK(dsjson_client_beat(ds, c, body, 1000000, &reply, msg,
	          sizeof(msg)) == ST_OK); /* c is told of the task */
	json_decref(reply);
	CHECK(dsjson_lease(ds, j->tasks, 3, 0, &later, &b, msg, sizeof(msg)) ==
	    ST_OK);
	buf_free(&b);
	s = snap(ds);
	ds_free(ds);

	/* The monotonic clock of another process: far below the old one. */
	ds = fresh();
	CHECK(ds_restore(ds, s.data, s.len, 50, msg, sizeof(msg)) == 0);
	j = ds_job_find(ds, "1");
	ds_view(ds, &v);
	CHECK(j != NULL && j->nclients == 1 && v.leased == 3);
	CHECK(ds_worker_serves(ds, "w:2"));
	{
		int n = 0;
		ds_worker_each(ds, count_worker, &n);
		CHECK(n == 1);
	}
	/* The worker does not come back: its leases wait for the client. */
	ds_worker_down(ds, "w:2", 1);
	CHECK(j->tasks != NULL && j->tasks->state == DS_TASK_FAILED &&
	    j->tasks->nacks == 1 && j->queue.count == 0);
	CHECK(dsjson_client_beat(ds, j->clients, body, 60, &reply, msg,
	          sizeof(msg)) == ST_OK);
	json_decref(reply);
	CHECK(j->queue.count == 0);
	ds_scan(ds, 1049);
	CHECK(j->nclients == 1);
	/* The client does not come back either: it times out, and the
	 * orphaned leases go to the queue; then the job goes. */
	ds_scan(ds, 1060);
	CHECK(j->nclients == 0 && j->tasks == NULL && j->queue.count == 3);
	ds_scan(ds, 3059);
	ds_view(ds, &v);
	CHECK(v.jobs == 1);
	ds_scan(ds, 3060);
	ds_view(ds, &v);
	CHECK(v.jobs == 0);
	ds_free(ds);

	/* One that comes back carries on. */
	ds2 = fresh();
	CHECK(ds_restore(ds2, s.data, s.len, 50, msg, sizeof(msg)) == 0);
	j = ds_job_find(ds2, "1");
	CHECK(dsjson_client_beat(ds2, j->clients, body, 1000, &reply, msg,
	          sizeof(msg)) == ST_OK);
	json_decref(reply);
	ds_scan(ds2, 1100);
	CHECK(j->nclients == 1);
	CHECK(dsjson_lease(ds2, j->tasks, 3, 0, &later, &b, msg, sizeof(msg)) ==
	    ST_OK);
	CHECK(strstr(b.data, "\"seq\":3") != NULL && j->next == 4);
	buf_free(&b);
	ds_free(ds2);
	json_decref(body);
	buf_free(&s);
}

/* A million splits. */

static json_t *
million(void)
{
	json_t *a = json_array();
	char s[64];

	for (int i = 0; i < 1000000; i++) {
		snprintf(s, sizeof(s), "/data/shards/train-%07d-of-1000000.rec",
		    i);
		json_array_append_new(a, json_string(s));
	}
	return json_pack("{s:o,s:s}", "splits", a, "reader", "cat");
}

static void
a_million_splits_load_fast(void)
{
	struct ds *ds = fresh(), *ds2;
	struct ds_dataset *d;
	struct ds_job *j;
	struct log log = {0};
	struct buf b = {0}, s, s2;
	json_t *def = million(), *open = json_array(), *cp;
	char msg[256];
	int created;
	double t0, t1, t2;

	ds_set_journal(ds, on_record, &log);
	CHECK(dsjson_dataset_register(ds, def, &d, &created, msg,
	          sizeof(msg)) == ST_OK);
	{
		/* Why the records are not JSON: jansson on the same list. */
		char *text = json_dumps(def, JSON_COMPACT);
		json_t *back;
		t0 = secs();
		back = json_loads(text, 0, NULL);
		t1 = secs();
		printf("# jansson parses the 1M-split definition (%zu bytes) "
		       "in %.3f s\n",
		    strlen(text), t1 - t0);
		json_decref(back);
		free(text);
	}
	json_decref(def);
	ds_worker_up(ds, "w:2", 1, "127.0.0.1:1", "h");
	/* A position: 600,000 done, 512 open of which 256 leased again. */
	for (int i = 0; i < 512; i++)
		json_array_append_new(open,
		    json_pack("{s:i,s:[[i,i]]}", "seq", 600000 + i, "skip", 0,
		        i % 7));
	cp = json_pack("{s:s,s:i,s:i,s:i,s:o}", "dataset", d->fp, "seed", 3,
	    "repeat", 1, "next", 600512, "open", open);
	j = open_job(ds,
	    json_pack("{s:i,s:s,s:i,s:o}", "dataset", 1, "name", "big", "seed",
	        3, "from_state", cp),
	    0);
	CHECK(j != NULL && j->done == 600000);
	CHECK(dsjson_lease(ds, j->tasks, 256, 9, &later, &b, msg,
	          sizeof(msg)) == ST_OK);
	buf_free(&b);
	t0 = secs();
	s = snap(ds);
	t1 = secs();
	ds2 = fresh();
	CHECK(ds_restore(ds2, s.data, s.len, 0, msg, sizeof(msg)) == 0);
	t2 = secs();
	s2 = snap(ds2);
	CHECK(same(&s, &s2, "a million splits"));
	printf("# 1M splits, 600000 done, 512 open: snapshot %zu bytes in "
	       "%.3f s, restored in %.3f s\n",
	    s.len, t1 - t0, t2 - t1);
	ds_free(ds2);
	buf_free(&s);
	buf_free(&s2);

	/* Leasing the whole of a second job in batches of 256, every seq
	 * done: the records, and their replay. */
	j = open_job(ds, json_pack("{s:i,s:s}", "dataset", 1, "name", "all"),
	    0);
	CHECK(j != NULL);
	t0 = secs();
	while (!j->finished) {
		json_t *dl = json_array();
		struct ds_lease *l;
		if (dsjson_lease(ds, j->tasks, 256, 0, &later, &b, msg,
		        sizeof(msg)) != ST_OK ||
		    later)
			break;
		buf_reset(&b);
		for (l = j->tasks->leases.head; l != NULL; l = l->next)
			json_array_append_new(dl,
			    json_pack("[I,i,i,i]", (json_int_t)l->seq, 0, 1,
			        1));
		CHECK(dsjson_task_delivered(ds, j->tasks, dl, msg,
		          sizeof(msg)) == ST_OK);
		json_decref(dl);
	}
	t1 = secs();
	buf_free(&b);
	CHECK(j->done == 1000000);
	s = snap(ds);
	{
		size_t bytes = 0, first = log.v[0].n;
		double ta, tb, tc;
		ds2 = fresh();
		ta = secs();
		CHECK(ds_apply(ds2, log.v[0].p, log.v[0].n, 0, msg,
		          sizeof(msg)) == 0);
		tb = secs();
		for (size_t i = 1; i < log.n; i++) {
			bytes += log.v[i].n;
			if (ds_apply(ds2, log.v[i].p, log.v[i].n, 0, msg,
			        sizeof(msg)) < 0) {
				printf("# record %zu: %s\n", i, msg);
				CHECK(0);
				break;
			}
		}
		tc = secs();
		s2 = snap(ds2);
		CHECK(same(&s, &s2, "a million splits, replayed"));
		printf("# the dataset's record: %zu bytes, applied in %.3f s\n",
		    first, tb - ta);
		printf("# leasing 1M seqs in batches of 256 and their "
		       "deliveries: %.3f s live; %zu records (%zu bytes) "
		       "replayed in %.3f s\n",
		    t1 - t0, log.n - 1, bytes, tc - tb);
		ds_free(ds2);
		buf_free(&s2);
	}
	buf_free(&s);
	log_free(&log);
	ds_free(ds);
}

UNIT_TESTS(dsjournal_tests) = {
    {"dsjournal: restore and replay give the same state",
        replay_gives_the_same_state},
    {"dsjournal: bad records and snapshots fail with a message",
        bad_data_fails_with_a_message},
    {"dsjournal: restored clients and workers time out as usual",
        restored_clients_and_workers_time_out},
    {"dsjournal: a job over a million splits restores fast",
        a_million_splits_load_fast},
    {NULL, NULL},
};
