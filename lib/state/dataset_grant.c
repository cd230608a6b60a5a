/*
 * dataset_grant.c: tasks made for a job on a worker, leasing a dynamic
 * job's splits (the leases a reply lists: svc/dsjson writes it) and what
 * is delivered of them, and a job's end once every task of it has ended.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "dataset_int.h"
#include "rec.h"

static int grant(struct ds *ds, struct ds_task *t, uint64_t id,
    const uint64_t *seqs, size_t n, char *msg, size_t msglen);

/* Makes worker w's task in job j, if it should have one. */
void
ds_task_make(struct ds *ds, struct ds_job *j, struct ds_worker *w, int pending)
{
	struct ds_task x = {0};
	long shard = 0;

	if (j->finished || j->kept || !w->live)
		return;
	if (ds_is_static(j->mode)) {
		if ((shard = ds_static_index(ds, w->name)) < 0)
			return;
	}
	x.id = ds->next_task + 1;
	x.job = j;
	x.w = w;
	x.inc = w->inc;
	x.shard = shard;
	x.state = DS_TASK_RUNNING;
	x.pending = pending && j->consumers > 0;
	x.start_round = 0;
	if (ds_put_task(ds, &x) < 0)
		return;
	if (x.pending && j->rr_target < 0) {
		struct ds_job y = *j;
		y.rr_delta = 1;
		y.rr_target = j->rr_latest + y.rr_delta;
		(void)ds_put_job(ds, &y, 0);
	}
	ds_tasks_changed(ds, w);
}

/* Jobs. */

void
ds_job_finish(struct ds *ds, struct ds_job *j)
{
	struct ds_job x = *j;

	if (j->finished)
		return;
	x.finished = 1;
	if (ds_put_job(ds, &x, 0) < 0)
		return;
	ds_emit(ds, DS_EV_SPLITS, NULL, j->id);
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		ds_tasks_changed(ds, t->w);
}

void
ds_job_check_done(struct ds *ds, struct ds_job *j)
{
	int running = 0, finished = 0;

	if (j->finished)
		return;
	if (j->eff == SHARD_DYNAMIC) {
		if (j->total != UINT64_MAX && j->done >= j->total)
			ds_job_finish(ds, j);
		return;
	}
	if (j->finished_shards != NULL) {
		for (long i = 0; i < j->shards; i++)
			if (!j->finished_shards[i])
				return;
		ds_job_finish(ds, j);
		return;
	}
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next) {
		running += t->state == DS_TASK_RUNNING;
		finished += t->read_all;
	}
	if (running == 0 && finished > 0)
		ds_job_finish(ds, j);
}

/* Records that elements [a, b) of seq were delivered (total: -1 or all):
 * R_LEASE, the lease's ranges with [a, b) added, or R_DONE once they
 * cover it. -1: memory ran out, and nothing changed. */
static int
delivered(struct ds *ds, struct ds_job *j, uint64_t seq, uint64_t a, uint64_t b,
    int64_t total)
{
	struct ds_lease *l = ds_map_get(j->leases, seq), x = {0};
	struct rec_out o;

	if (l == NULL)
		return 0; /* done already, or never leased */
	x.total = total >= 0 ? total : l->total;
	if (l->nr > 0 && (x.r = malloc(l->nr * sizeof(*x.r))) == NULL)
		return -1;
	if (l->nr > 0)
		memcpy(x.r, l->r, l->nr * sizeof(*x.r));
	x.nr = x.capr = l->nr;
	if (span_add(&x.r, &x.nr, &x.capr, a, b) < 0) {
		free(x.r);
		return -1;
	}
	if (span_whole(x.r, x.nr, x.total)) {
		ds_rec_begin(&o, &ds->jbuf, R_DONE);
		rec_put_u(&o, j->id);
		rec_put_u(&o, seq);
	} else {
		ds_rec_begin(&o, &ds->jbuf, R_LEASE);
		rec_put_u(&o, j->id);
		rec_put_u(&o, seq);
		ds_enc_ranges(&o, &x);
	}
	free(x.r);
	return ds_commit(ds, &o, 0, NULL, 0);
}

/* Deliveries v[0..n) of j. ST_OK, or ST_UNAVAILABLE when memory ran
 * out (what was recorded stays; the rest is to be sent again, and a range
 * sent twice is recorded once). */
enum status
ds_deliveries(struct ds *ds, struct ds_job *j, const struct ds_delivery *v,
    size_t n, char *msg, size_t msglen)
{
	for (size_t i = 0; i < n && j->eff == SHARD_DYNAMIC; i++)
		if (delivered(ds, j, v[i].seq, v[i].first, v[i].end,
		        v[i].total) < 0) {
			snprintf(msg, msglen,
			    "out of memory recording delivered[%zu]: send it "
			    "again",
			    i);
			return ST_UNAVAILABLE;
		}
	return ST_OK;
}

uint32_t
ds_split_index(struct ds_job *j, uint64_t seq)
{
	size_t n = j->ds->nsplits;
	uint64_t epoch = seq / n;

	if (j->seed == 0)
		return (uint32_t)(seq % n);
	if (j->order == NULL || j->order_epoch != epoch) {
		/* Out of memory: the first split, as good as any. */
		if (j->order == NULL &&
		    (j->order = malloc(n * sizeof(*j->order))) == NULL)
			return 0;
		split_order(j->seed, epoch, j->order, n);
		j->order_epoch = epoch;
	}
	return j->order[seq % n];
}

/* The reply to a lease request sent again: its seqs t still holds. */
static void
lease_again(struct ds_task *t, struct ds_leased *out)
{
	for (size_t i = 0; i < t->nlast; i++) {
		struct ds_lease *l = ds_map_get(t->job->leases, t->last[i]);
		if (l != NULL && l->task == t)
			out->v[out->n++] = l;
	}
}

enum status
ds_lease(struct ds *ds, struct ds_task *t, long want, uint64_t id,
    struct ds_leased *out, char *msg, size_t msglen)
{
	struct ds_job *j = t->job;
	uint64_t seqs[DS_WANT_MAX];
	long n = 0;

	out->later = out->end = 0;
	out->n = 0;
	if (want > DS_WANT_MAX)
		want = DS_WANT_MAX;
	if (j->error != NULL) {
		snprintf(msg, msglen, "job %" PRIu64 " failed: %s", j->id,
		    j->error);
		return ST_FAILED_PRECONDITION;
	}
	if (j->eff != SHARD_DYNAMIC) {
		snprintf(msg, msglen,
		    "job %" PRIu64 " reads in mode %s: it leases no splits",
		    j->id, shard_mode_name(j->eff));
		return ST_FAILED_PRECONDITION;
	}
	if (j->finished) {
		out->end = 1;
		return ST_OK;
	}
	if (id != 0 && id == t->lease_id) {
		lease_again(t, out);
		return ST_OK;
	}
	if (j->queue.count == 0 && j->next >= j->total) {
		out->later = 1;
		return ST_OK;
	}
	/* The queue's first, then new ones. */
	for (struct ds_lease *l = j->queue.head; l != NULL && n < want;
	     l = l->next)
		seqs[n++] = l->seq;
	for (uint64_t s = j->next; s < j->total && n < want; s++)
		seqs[n++] = s;
	if (grant(ds, t, id, seqs, (size_t)n, msg, msglen) < 0)
		return ST_RESOURCE_EXHAUSTED;
	for (long i = 0; i < n; i++)
		out->v[out->n++] = ds_map_get(j->leases, seqs[i]);
	return ST_OK;
}

enum status
ds_task_delivered(struct ds *ds, struct ds_task *t, const struct ds_delivery *v,
    size_t n, char *msg, size_t msglen)
{
	enum status st = ds_deliveries(ds, t->job, v, n, msg, msglen);

	ds_job_check_done(ds, t->job);
	return st;
}

/* Leases seqs to t in reply to lease request id (R_GRANT): the seqs in
 * runs of consecutive ones. */
static int
grant(struct ds *ds, struct ds_task *t, uint64_t id, const uint64_t *seqs,
    size_t n, char *msg, size_t msglen)
{
	struct rec_out o;
	size_t runs = 0;

	ds_rec_begin(&o, &ds->jbuf, R_GRANT);
	rec_put_u(&o, t->job->id);
	rec_put_u(&o, t->id);
	rec_put_u(&o, id);
	for (size_t i = 0; i < n; i++)
		runs += i == 0 || seqs[i] != seqs[i - 1] + 1;
	rec_put_u(&o, runs);
	for (size_t i = 0, k; i < n; i = k) {
		for (k = i + 1; k < n && seqs[k] == seqs[k - 1] + 1; k++)
			;
		rec_put_u(&o, seqs[i]);
		rec_put_u(&o, k - i);
	}
	return ds_commit(ds, &o, 0, msg, msglen);
}
