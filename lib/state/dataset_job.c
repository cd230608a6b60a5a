/*
 * dataset_job.c: jobs: opening one by name (joining it, or its next
 * iteration), starting one from a position, keeping an idle one, and
 * collecting it.
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
#include "token.h"

static int job_unkeep(struct ds *ds, struct ds_job *j);

static int
job_ended(const struct ds_job *j)
{
	return j->finished || j->error != NULL;
}

static enum status
nomem(char *msg, size_t msglen)
{
	snprintf(msg, msglen, "out of memory");
	return ST_RESOURCE_EXHAUSTED;
}

/* Sets a new job's position from p: its next seq, and its open ones
 * waiting in its queue. */
static enum status
job_restore(struct ds_job *j, const struct ds_position *p, char *msg,
    size_t msglen)
{
	if (j->eff != SHARD_DYNAMIC) {
		snprintf(msg, msglen, "from_state needs mode dynamic");
		return ST_INVALID_ARGUMENT;
	}
	if (p->seed != (int64_t)j->seed || p->repeat != (int64_t)j->repeat) {
		snprintf(msg, msglen,
		    "the state is of a job with seed %" PRId64
		    " and repeat %" PRId64
		    ": read it with those (this job: seed %" PRIu64
		    ", repeat %ld)",
		    p->seed, p->repeat, j->seed, j->repeat);
		return ST_FAILED_PRECONDITION;
	}
	if (p->dataset == NULL || strcmp(p->dataset, j->ds->fp) != 0) {
		snprintf(msg, msglen,
		    "the state is of dataset %s, not of dataset %" PRIu64
		    " (%s)",
		    p->dataset != NULL ? p->dataset : "?", j->ds->id,
		    j->ds->fp);
		return ST_FAILED_PRECONDITION;
	}
	if (p->next < 0 || (uint64_t)p->next > j->total || p->open_bad) {
		snprintf(msg, msglen,
		    "from_state: next must be a seq of the job, open a list");
		return ST_INVALID_ARGUMENT;
	}
	j->next = (uint64_t)p->next;
	for (size_t i = 0; i < p->nopen; i++) {
		const struct ds_open_seq *o = &p->open[i];
		struct ds_lease *l;
		if (o->seq < 0 || (uint64_t)o->seq >= j->next ||
		    ds_map_get(j->leases, (uint64_t)o->seq) != NULL) {
			snprintf(msg, msglen,
			    "from_state: open[%zu] needs a seq below next, "
			    "once",
			    i);
			return ST_INVALID_ARGUMENT;
		}
		if ((l = calloc(1, sizeof(*l))) == NULL)
			return nomem(msg, msglen);
		l->seq = (uint64_t)o->seq;
		l->total = -1;
		if (ds_map_put(j->leases, l) < 0) {
			free(l);
			return nomem(msg, msglen);
		}
		ds_list_push(&j->queue, l, 0);
		for (size_t k = 0; k < o->nskip; k++)
			if (span_add(&l->r, &l->nr, &l->capr, o->skip[k].a,
			        o->skip[k].b) < 0)
				return nomem(msg, msglen);
		if (o->skip_bad) {
			snprintf(msg, msglen,
			    "from_state: open[%zu].skip[%zu] must be "
			    "[first, end]",
			    i, o->nskip);
			return ST_INVALID_ARGUMENT;
		}
	}
	j->done = j->next - j->queue.count;
	return ST_OK;
}

/* A new job as req asks, made apart from the state: job_make makes it
 * there from its records. */
static enum status
job_draft(struct ds *ds, const struct ds_job_req *req, struct ds_job **out,
    char *msg, size_t msglen)
{
	struct ds_job *j = calloc(1, sizeof(*j));
	struct ds_dataset *d = req->dataset;
	const struct ds_position *from = req->from;
	enum status s;

	if (j == NULL ||
	    (req->name != NULL && (j->name = strdup(req->name)) == NULL) ||
	    (j->leases = calloc(1, sizeof(*j->leases))) == NULL ||
	    (from != NULL &&
	        (from->text == NULL ||
	            (j->start = strdup(from->text)) == NULL)) ||
	    (req->run != NULL && (j->run = strdup(req->run)) == NULL)) {
		if (j != NULL)
			ds_job_free(j);
		return nomem(msg, msglen);
	}
	if (token_random(j->secret, sizeof(j->secret)) < 0) {
		ds_job_free(j);
		snprintf(msg, msglen, "no random bytes for the job's secret");
		return ST_INTERNAL;
	}
	j->iteration = 1;
	j->ds = d;
	j->mode = j->eff = req->mode;
	j->repeat = req->repeat;
	j->seed = req->seed;
	j->consumers = req->consumers;
	j->rr_target = -1;
	j->rr_latest = -1;
	j->total =
	    req->repeat == 0 ? UINT64_MAX : (uint64_t)req->repeat * d->nsplits;
	if (ds_is_static(req->mode)) {
		j->shards = (long)ds->cfg.nstatic;
		if (req->mode == SHARD_FILE_OR_DATA)
			j->eff = d->nsplits >= ds->cfg.nstatic ? SHARD_FILE :
			                                         SHARD_DATA;
		if ((j->finished_shards = calloc((size_t)j->shards, 1)) ==
		    NULL) {
			ds_job_free(j);
			return nomem(msg, msglen);
		}
	}
	if (from != NULL && (s = job_restore(j, from, msg, msglen)) != ST_OK) {
		ds_job_free(j);
		return s;
	}
	j->id = ds->next_job + 1;
	*out = j;
	return ST_OK;
}

/* What a reader of a name does with the job that has it. */
enum { JOIN, ANEW, CONFLICT, NOMEM };

/*
 * A run (one start of the whole training job, all its readers) reads a
 * name once: a reader of another run starts the name anew, one of the
 * same run joins, even a job it has read to the end (its other readers
 * may have read it all), and must resume from the state the run's job
 * started from (CONFLICT otherwise). Without a run a reader joins, with
 * the job's state or none, unless the job has ended: then the name is
 * read anew.
 */
static int
job_anew(const struct ds_job *j, const struct ds_job_req *req)
{
	const struct ds_position *from = req->from;

	if (req->run == NULL && job_ended(j))
		return ANEW;
	if (req->run != NULL &&
	    (j->run == NULL || strcmp(req->run, j->run) != 0))
		return ANEW;
	if (from == NULL)
		return JOIN;
	if (from->text == NULL)
		return NOMEM;
	return j->start != NULL && strcmp(from->text, j->start) == 0 ? JOIN :
	                                                               CONFLICT;
}

/*
 * Makes in the state the job draft describes, from its record and those of
 * its open seqs (R_OPEN), and frees draft. old, the job that had its
 * name, is retired first, which replay finds the name free for. NULL:
 * memory ran out, and the job was not made.
 */
static struct ds_job *
job_make(struct ds *ds, struct ds_job *draft, struct ds_job *old, int64_t now)
{
	struct ds_job *j = NULL;

	if (old != NULL) {
		struct ds_job x = *old;
		x.retired = 1;
		if (ds_put_job(ds, &x, 0) < 0)
			goto done;
		if (old->nclients == 0)
			ds_job_collect(ds, old);
	}
	if (ds_put_job(ds, draft, now) < 0)
		goto done;
	j = ds->jobs;
	for (struct ds_lease *l = draft->queue.head; l != NULL; l = l->next)
		if (ds_put_open(ds, j, l) < 0) {
			/* Not a position half made: none. */
			ds_gone(ds, R_JOB_GONE, j->id, 0, 0);
			j = NULL;
			break;
		}
done:
	ds_job_free(draft);
	return j;
}

/* What of job j a reader asks for otherwise (the first), or NULL. */
static const char *
job_differs(const struct ds_job *j, const struct ds_job_req *req)
{
	return j->ds != req->dataset       ? "dataset" :
	    j->mode != req->mode           ? "mode" :
	    j->repeat != req->repeat       ? "repeat" :
	    j->seed != req->seed           ? "seed" :
	    j->consumers != req->consumers ? "consumers" :
	                                     NULL;
}

enum status
ds_job_open(struct ds *ds, const struct ds_job_req *req, int64_t now,
    struct ds_job **job, struct ds_client **client, int *created, char *msg,
    size_t msglen)
{
	struct ds_job *j, *old = NULL, *draft;
	struct ds_client x = {0};
	const char *what;
	uint64_t iteration = 1;
	enum status s;
	int anew = JOIN;

	*created = 0;
	if (ds_is_static(req->mode) && ds->cfg.nstatic == 0) {
		snprintf(msg, msglen,
		    "static sharding (mode %s) needs dispatchd "
		    "--static-workers",
		    shard_mode_name(req->mode));
		return ST_FAILED_PRECONDITION;
	}
	/* Nothing changes before every refusal is past. */
	j = req->name != NULL ? ds_job_find(ds, req->name) : NULL;
	if (j != NULL && (anew = job_anew(j, req)) == NOMEM)
		return nomem(msg, msglen);
	if (j != NULL && anew == CONFLICT) {
		snprintf(msg, msglen,
		    "job %s%s%s started from another state: the readers of a "
		    "run resume from the same states (a new run, with its "
		    "own id, starts the name anew)",
		    req->name, j->run != NULL ? " of run " : "",
		    j->run != NULL ? j->run : "");
		return ST_ALREADY_EXISTS;
	}
	if (j != NULL && anew == ANEW) {
		/* Its next iteration: the name is read anew, as tf.data's
		 * repetitions, or from another state. Never an empty read of
		 * what is over; the readers of the one it replaces, if any,
		 * read on from it, under its id. It is retired once the new
		 * one is made: a refused reader leaves it as it was. */
		old = j;
		iteration = j->iteration + 1;
		j = NULL;
	}
	if (j != NULL && (what = job_differs(j, req)) != NULL) {
		snprintf(msg, msglen,
		    "job %s exists with dataset %" PRIu64
		    ", mode %s, repeat %ld, seed %" PRIu64
		    ", consumers %ld: its %s differs",
		    req->name, j->ds->id, shard_mode_name(j->mode), j->repeat,
		    j->seed, j->consumers, what);
		return ST_INVALID_ARGUMENT;
	}
	if (j != NULL) {
		if (j->kept && job_unkeep(ds, j) < 0)
			return nomem(msg, msglen);
	} else {
		if ((s = job_draft(ds, req, &draft, msg, msglen)) != ST_OK)
			return s;
		draft->iteration = iteration;
		if ((j = job_make(ds, draft, old, now)) == NULL)
			return nomem(msg, msglen);
		*created = 1;
		for (struct ds_worker *w = ds->workers; w != NULL; w = w->next)
			ds_task_make(ds, j, w, 0);
	}
	x.id = ds->next_client + 1;
	x.job = j;
	x.index = req->index;
	x.round = -1;
	x.blocked = -1;
	if (ds_put_client(ds, &x, now) < 0)
		return nomem(msg, msglen);
	*job = j;
	*client = j->clients;
	return ST_OK;
}

/* Collection. */

/*
 * Whether an idle job is kept rather than collected: one whose position
 * says what was read and what was not (DYNAMIC), under a name a reader
 * can come back with, and not over. tf.data keeps jobs with visitation
 * guarantees likewise.
 */
int
ds_job_keeps(const struct ds_job *j)
{
	return j->eff == SHARD_DYNAMIC && j->name != NULL && !j->retired &&
	    !job_ended(j);
}

/*
 * An idle job is kept with its position, but not its tasks: its splits
 * go back to its queue, delivered ranges and all, and workers let go of
 * what they buffered for it. A reader that comes back gets new tasks.
 */
void
ds_job_keep(struct ds *ds, struct ds_job *j)
{
	struct ds_job x;

	while (j->tasks != NULL) {
		struct ds_worker *w = j->tasks->w;
		ds_gone(ds, R_TASK_GONE, j->id, j->tasks->id, 0);
		ds_tasks_changed(ds, w);
	}
	x = *j;
	x.kept = 1;
	(void)ds_put_job(ds, &x, 0);
}

/* A kept job read again: tasks on every worker, as for a new one. */
static int
job_unkeep(struct ds *ds, struct ds_job *j)
{
	struct ds_job x = *j;

	x.kept = 0;
	if (ds_put_job(ds, &x, 0) < 0)
		return -1;
	for (struct ds_worker *w = ds->workers; w != NULL; w = w->next)
		ds_task_make(ds, j, w, 0);
	return 0;
}

void
ds_job_collect(struct ds *ds, struct ds_job *j)
{
	ds_job_finish(ds, j);
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		ds_tasks_changed(ds, t->w);
	ds_emit(ds, DS_EV_SPLITS, NULL, j->id);
	ds_gone(ds, R_JOB_GONE, j->id, 0, 0);
}
