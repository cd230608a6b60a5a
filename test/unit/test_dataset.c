/*
 * Datasets, jobs and split leases as a state machine: the split order,
 * registration by fingerprint, delivered ranges, a dead worker's splits
 * leased again with what to skip, checkpoints, collection, and the
 * reference's pending-task example for round-robin reads, step by step.
 */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "dataset.h"
#include "dsjson.h"
#include "splitorder.h"
#include "unit.h"

/* Whether the last dsjson_lease found nothing to lease yet. */
static int later;

static int nevents;

static void
on_event(const struct ds_event *ev, void *arg)
{
	(void)ev;
	(void)arg;
	nevents++;
}

static struct ds *
fresh(void)
{
	struct ds_config cfg = {.client_timeout_ms = 1000,
	    .gc_timeout_ms = 2000};

	return ds_new(&cfg, on_event, NULL);
}

static struct ds_dataset *
add(struct ds *ds, const char *json)
{
	json_t *def = json_loads(json, 0, NULL);
	struct ds_dataset *d = NULL;
	char msg[256];
	int created;

	if (dsjson_dataset_register(ds, def, &d, &created, msg, sizeof(msg)) !=
	    ST_OK)
		d = NULL;
	json_decref(def);
	return d;
}

static struct ds_job *
open_job(struct ds *ds, const char *json, struct ds_client **c, int64_t now)
{
	json_t *req = json_loads(json, 0, NULL);
	struct ds_job *j = NULL;
	char msg[256];
	int created;

	if (dsjson_job_open(ds, req, now, &j, c, &created, msg, sizeof(msg)) !=
	    ST_OK)
		j = NULL;
	json_decref(req);
	return j;
}

static void
split_order_is_a_permutation(void)
{
	uint32_t a[100], b[100], c[100];
	int seen[100] = {0};

	split_order(0, 3, a, 100);
	for (int i = 0; i < 100; i++)
		CHECK(a[i] == (uint32_t)i);
	split_order(42, 1, a, 100);
	split_order(42, 1, b, 100);
	split_order(42, 2, c, 100);
	CHECK(memcmp(a, b, sizeof(a)) == 0);
	CHECK(memcmp(a, c, sizeof(a)) != 0);
	for (int i = 0; i < 100; i++)
		seen[a[i]]++;
	for (int i = 0; i < 100; i++)
		CHECK(seen[i] == 1);
}

static void
registered_by_fingerprint(void)
{
	struct ds *ds = fresh();
	struct ds_dataset *d1 = add(ds,
	    "{\"splits\":[\"a\",\"b\"],"
	    "\"reader\":\"cat\",\"name\":\"n\"}");
	struct ds_dataset *d2 = add(ds,
	    "{\"splits\":[\"a\",\"b\"],"
	    "\"reader\":\"cat\"}");
	struct ds_dataset *d3 = add(ds,
	    "{\"splits\":[\"a\",\"b\"],"
	    "\"reader\":\"cat\",\"framing\":\"nul\"}");

	CHECK(d1 != NULL && d1 == d2);
	CHECK(d3 != NULL && d3 != d1);
	CHECK(ds_dataset_find(ds, "n") == d1);
	/* A name of another definition, a bad split, no reader. */
	CHECK(
	    add(ds, "{\"splits\":[\"c\"],\"reader\":\"cat\",\"name\":\"n\"}") ==
	    NULL);
	CHECK(add(ds, "{\"splits\":[\"a\\nb\"],\"reader\":\"cat\"}") == NULL);
	CHECK(add(ds, "{\"splits\":[\"\"],\"reader\":\"cat\"}") == NULL);
	CHECK(add(ds, "{\"splits\":[],\"reader\":\"cat\"}") == NULL);
	CHECK(add(ds, "{\"splits\":[\"a\"]}") == NULL);
	ds_free(ds);
}

static json_t *
lease(struct ds *ds, struct ds_task *t, long want)
{
	struct buf b = {0};
	char msg[256];
	json_t *j = NULL;

	if (dsjson_lease(ds, t, want, 0, &later, &b, msg, sizeof(msg)) ==
	        ST_OK &&
	    !later)
		j = json_loadb(b.data, b.len, 0, NULL);
	buf_free(&b);
	return j;
}

static void
beat(struct ds *ds, struct ds_client *c, const char *json, int64_t now,
    json_t **reply)
{
	json_t *body = json_loads(json, 0, NULL), *r = NULL;
	char msg[256];

	CHECK(dsjson_client_beat(ds, c, body, now, &r, msg, sizeof(msg)) ==
	    ST_OK);
	json_decref(body);
	if (reply != NULL)
		*reply = r;
	else
		json_decref(r);
}

static void
dead_workers_splits_come_back_with_skips(void)
{
	struct ds *ds = fresh();
	struct ds_client *c;
	struct ds_job *j;
	struct ds_task *t1, *t2;
	json_t *l, *s;
	enum status st;
	char msg[256];

	add(ds, "{\"splits\":[\"a\",\"b\",\"c\"],\"reader\":\"cat\"}");
	ds_worker_up(ds, "w:0", 1, "127.0.0.1:1", "h");
	j = open_job(ds, "{\"dataset\":\"1\",\"mode\":\"dynamic\"}", &c, 0);
	CHECK(j != NULL && j->tasks != NULL);
	beat(ds, c, "{}", 0, NULL); /* c is told of the task */
	t1 = ds_task_of(ds, "w:0", 1, j->tasks->id, &st, msg, sizeof(msg));
	CHECK(t1 != NULL);
	l = lease(ds, t1, 2);
	CHECK(json_array_size(json_object_get(l, "splits")) == 2);
	json_decref(l);
	/* Elements 0-2 and 5-6 of seq 0 went out, in two pieces each. */
	beat(ds, c, "{\"delivered\":[[0,0,2,-1],[0,5,7,-1],[0,2,3,-1]]}", 1,
	    NULL);
	ds_worker_up(ds, "w:0", 2, "127.0.0.1:2", "h"); /* came back */
	t2 = NULL;
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		if (t->inc == 2)
			t2 = t;
	CHECK(t2 != NULL);
	/* Held until the client says it stopped reading the dead task:
	 * meanwhile t2 gets only the split no one had. */
	l = lease(ds, t2, 5);
	s = json_object_get(l, "splits");
	CHECK(json_array_size(s) == 1);
	CHECK(json_integer_value(
	          json_object_get(json_array_get(s, 0), "seq")) == 2);
	json_decref(l);
	CHECK(j->queue.count == 0);
	beat(ds, c, "{\"lost\":[1]}", 3, NULL);
	CHECK(j->queue.count == 2);
	l = lease(ds, t2, 5);
	s = json_object_get(l, "splits");
	CHECK(json_array_size(s) == 2);
	CHECK(json_array_size(json_object_get(json_array_get(s, 0), "skip")) ==
	    2);
	json_decref(l);
	/* Seq 0 carries what to skip: [0,3) and [5,7). */
	{
		char buf[64];
		json_t *cp;
		CHECK(dsjson_checkpoint(j, &cp, buf, sizeof(buf)) == ST_OK);
		s = json_object_get(cp, "open");
		CHECK(json_array_size(s) == 3);
		json_t *sk = json_object_get(json_array_get(s, 0), "skip");
		CHECK(json_array_size(sk) == 2);
		CHECK(json_integer_value(
		          json_array_get(json_array_get(sk, 0), 1)) == 3);
		CHECK(json_integer_value(
		          json_array_get(json_array_get(sk, 1), 0)) == 5);
		json_decref(cp);
	}
	/* Done once the ranges cover the split's total. */
	beat(ds, c,
	    "{\"delivered\":[[0,3,5,-1],[0,7,8,8],[1,0,0,0],[2,0,1,1]]}", 4,
	    NULL);
	CHECK(j->done == 3);
	CHECK(j->finished);
	ds_free(ds);
}

/* A lease request sent again after its reply was lost gets that reply. */
static void
lease_sent_again(void)
{
	struct ds *ds = fresh();
	struct ds_client *c;
	struct ds_job *j;
	struct buf a = {0}, b = {0}, x = {0};
	char msg[256];

	add(ds, "{\"splits\":[\"a\",\"b\",\"c\",\"d\"],\"reader\":\"cat\"}");
	ds_worker_up(ds, "w:0", 1, "127.0.0.1:1", "h");
	j = open_job(ds, "{\"dataset\":\"1\"}", &c, 0);
	CHECK(dsjson_lease(ds, j->tasks, 2, 7, &later, &a, msg, sizeof(msg)) ==
	    ST_OK);
	CHECK(dsjson_lease(ds, j->tasks, 2, 7, &later, &b, msg, sizeof(msg)) ==
	    ST_OK);
	CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
	CHECK(j->next == 2);
	CHECK(dsjson_lease(ds, j->tasks, 2, 8, &later, &x, msg, sizeof(msg)) ==
	    ST_OK);
	CHECK(j->next == 4 && strstr(x.data, "\"seq\":2") != NULL);
	buf_free(&a);
	buf_free(&b);
	buf_free(&x);
	ds_free(ds);
}

static void
checkpoint_and_resume(void)
{
	struct ds *ds = fresh();
	struct ds_client *c, *c2;
	struct ds_job *j, *j2;
	json_t *cp, *req;
	char msg[256];
	int created;

	add(ds, "{\"splits\":[\"a\",\"b\",\"c\",\"d\"],\"reader\":\"cat\"}");
	ds_worker_up(ds, "w:0", 1, "127.0.0.1:1", "h");
	j = open_job(ds, "{\"dataset\":\"1\",\"name\":\"ck\",\"seed\":9}", &c,
	    0);
	json_decref(lease(ds, j->tasks, 3));
	beat(ds, c, "{\"delivered\":[[0,0,4,4],[1,0,2,-1]]}", 1, NULL);
	CHECK(dsjson_checkpoint(j, &cp, msg, sizeof(msg)) == ST_OK);
	CHECK(json_integer_value(json_object_get(cp, "next")) == 3);
	req = json_pack("{s:s,s:I,s:O}", "dataset", "1", "seed", 9,
	    "from_state", cp);
	CHECK(dsjson_job_open(ds, req, 2, &j2, &c2, &created, msg,
	          sizeof(msg)) == ST_OK);
	CHECK(j2->next == 3 && j2->done == 1 && j2->queue.count == 2);
	json_decref(req);
	json_decref(cp);
	ds_free(ds);
}

static void
named_jobs_and_collection(void)
{
	struct ds *ds = fresh();
	struct ds_client *c1, *c2, *c3;
	struct ds_job *j;

	add(ds, "{\"splits\":[\"a\"],\"reader\":\"cat\"}");
	/* A worker that left gets no task in a new job. */
	ds_worker_up(ds, "w:0", 1, "127.0.0.1:1", "h");
	ds_worker_down(ds, "w:0", 1);
	j = open_job(ds, "{\"dataset\":\"1\",\"name\":\"x\",\"mode\":\"off\"}",
	    &c1, 0);
	CHECK(j != NULL && j->tasks == NULL);
	CHECK(
	    open_job(ds, "{\"dataset\":\"1\",\"name\":\"x\",\"mode\":\"off\"}",
	        &c2, 0) == j);
	CHECK(
	    open_job(ds, "{\"dataset\":\"1\",\"name\":\"x\"}", &c3, 0) == NULL);
	CHECK(j->nclients == 2);
	/* Clients time out at 1 s; the job goes 2 s later. */
	ds_scan(ds, 500);
	CHECK(ds_job_find(ds, "x") == j && j->nclients == 2);
	ds_scan(ds, 1000);
	CHECK(ds_job_find(ds, "x") == j && j->nclients == 0);
	ds_scan(ds, 2999);
	CHECK(ds_job_find(ds, "x") != NULL);
	ds_scan(ds, 3000);
	CHECK(ds_job_find(ds, "x") == NULL);
	ds_free(ds);
}

static int64_t
block_round(json_t *r)
{
	json_t *b = json_object_get(r, "block_round");

	return json_is_integer(b) ? json_integer_value(b) : -1;
}

/* The reference's example, step by step. */
static void
pending_task_protocol(void)
{
	struct ds *ds = fresh();
	struct ds_client *c1, *c2;
	struct ds_job *j;
	struct ds_task *t;
	json_t *r;

	add(ds, "{\"splits\":[\"a\"],\"reader\":\"cat\"}");
	ds_worker_up(ds, "w:0", 1, "127.0.0.1:1", "h");
	j = open_job(ds,
	    "{\"dataset\":\"1\",\"name\":\"rr\",\"mode\":\"off\","
	    "\"consumers\":2,\"consumer_index\":0}",
	    &c1, 0);
	CHECK(j != NULL);
	CHECK(open_job(ds,
	          "{\"dataset\":\"1\",\"name\":\"rr\",\"mode\":\"off\","
	          "\"consumers\":2,\"consumer_index\":1}",
	          &c2, 0) == j);
	/* 1. Both consumers are on round 50. */
	beat(ds, c1, "{\"round\":50}", 1, NULL);
	beat(ds, c2, "{\"round\":50}", 1, NULL);
	/* 2. A worker joins: its task is pending, target 51. */
	ds_worker_up(ds, "w:1", 1, "127.0.0.1:2", "h");
	t = j->tasks->next;
	CHECK(t != NULL && t->pending);
	/* 3. Consumer 1 is told to block round 51. */
	beat(ds, c1, "{\"round\":50}", 3, &r);
	CHECK(block_round(r) == 51);
	CHECK(json_array_size(json_object_get(r, "tasks")) == 1);
	json_decref(r);
	/* 4. Consumer 2 is on 51 already: too late; the target is 53. */
	beat(ds, c2, "{\"round\":51}", 4, &r);
	CHECK(block_round(r) == 53);
	json_decref(r);
	/* 5. Consumer 1 blocked 51: it is told 53, and is ready for it. */
	beat(ds, c1, "{\"round\":50,\"blocked_round\":51}", 5, &r);
	CHECK(block_round(r) == 53);
	CHECK(t->pending);
	json_decref(r);
	/* 6. Consumer 2 on 52, blocked at 53: the task is listed from 53. */
	beat(ds, c2, "{\"round\":52,\"blocked_round\":53}", 6, &r);
	CHECK(!t->pending && t->start_round == 53);
	CHECK(block_round(r) == -1);
	CHECK(json_array_size(json_object_get(r, "tasks")) == 2);
	json_decref(r);
	/* 7. Consumer 1 gets the list too, and no block. */
	beat(ds, c1, "{\"round\":51,\"blocked_round\":53}", 7, &r);
	CHECK(block_round(r) == -1);
	CHECK(json_array_size(json_object_get(r, "tasks")) == 2);
	json_decref(r);
	ds_free(ds);
}

/* A reader refused for its state leaves the job of the name as it was:
 * its run's readers join it still. */
static void
refused_reader_keeps_the_job(void)
{
	struct ds *ds = fresh();
	struct ds_client *c1, *c2, *c3;
	struct ds_job *j, *j3;

	add(ds, "{\"splits\":[\"a\",\"b\"],\"reader\":\"cat\"}");
	ds_worker_up(ds, "w:0", 1, "127.0.0.1:1", "h");
	j = open_job(ds, "{\"dataset\":\"1\",\"name\":\"x\",\"run\":\"r1\"}",
	    &c1, 0);
	CHECK(j != NULL);
	CHECK(open_job(ds,
	          "{\"dataset\":\"1\",\"name\":\"x\",\"run\":\"r2\","
	          "\"from_state\":{\"version\":1,\"next\":\"bad\"}}",
	          &c2, 1) == NULL);
	CHECK(ds_job_find(ds, "x") == j && !j->retired);
	j3 = open_job(ds, "{\"dataset\":\"1\",\"name\":\"x\",\"run\":\"r1\"}",
	    &c3, 2);
	CHECK(j3 == j && j->nclients == 2);
	ds_free(ds);
}

UNIT_TESTS(dataset_tests) = {
    {"split order: identity at seed 0, a permutation of seed and epoch",
        split_order_is_a_permutation},
    {"datasets registered by fingerprint, names, bad definitions",
        registered_by_fingerprint},
    {"a dead worker's splits are leased again with what to skip",
        dead_workers_splits_come_back_with_skips},
    {"a lease request sent again gets the same splits", lease_sent_again},
    {"a checkpoint starts a new job where the old one was",
        checkpoint_and_resume},
    {"named jobs are shared; clients time out; idle jobs are collected",
        named_jobs_and_collection},
    {"a reader refused for its state leaves the job of the name as it was",
        refused_reader_keeps_the_job},
    {"round robin: the reference's pending-task example",
        pending_task_protocol},
    {NULL, NULL},
};
