/*
 * dataset_job.c: jobs: opening one by name (joining it, or its next
 * iteration), restoring a position, keeping an idle one, collecting it,
 * and what the daemon shows of them (JSON views and checkpoints).
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
#include "vec.h"

static void job_unkeep(struct ds *ds, struct ds_job *j);

/* A position's text, the same for the same position whoever wrote it:
 * joins compare them. NULL: out of memory. */
static char *
state_text(json_t *st)
{
	return json_dumps(st, JSON_COMPACT | JSON_SORT_KEYS);
}

static int
job_ended(const struct ds_job *j)
{
	return j->finished || j->error != NULL;
}

static int
json_long(json_t *o, const char *key, long def, long min, long max, long *v,
    char *msg, size_t msglen)
{
	json_t *x = json_object_get(o, key);

	*v = def;
	if (x == NULL || json_is_null(x))
		return 0;
	if (!json_is_integer(x) || json_integer_value(x) < min ||
	    json_integer_value(x) > max) {
		snprintf(msg, msglen, "%s must be a number from %ld to %ld",
		    key, min, max);
		return -1;
	}
	*v = (long)json_integer_value(x);
	return 0;
}

/* Sets a new job's position from a checkpoint. */
static enum status
job_restore(struct ds_job *j, json_t *st, char *msg, size_t msglen)
{
	json_t *open = json_object_get(st, "open"), *o, *r;
	json_t *next = json_object_get(st, "next");
	const char *fp = json_string_value(json_object_get(st, "dataset"));
	size_t i, k;

	if (j->eff != SHARD_DYNAMIC) {
		snprintf(msg, msglen, "from_state needs mode dynamic");
		return ST_INVALID_ARGUMENT;
	}
	if (json_integer_value(json_object_get(st, "seed")) !=
	        (json_int_t)j->seed ||
	    json_integer_value(json_object_get(st, "repeat")) !=
	        (json_int_t)j->repeat) {
		snprintf(msg, msglen,
		    "the state is of a job with seed %" JSON_INTEGER_FORMAT
		    " and repeat %" JSON_INTEGER_FORMAT
		    ": read it with those (this job: seed %" PRIu64
		    ", repeat %ld)",
		    json_integer_value(json_object_get(st, "seed")),
		    json_integer_value(json_object_get(st, "repeat")), j->seed,
		    j->repeat);
		return ST_FAILED_PRECONDITION;
	}
	if (fp == NULL || strcmp(fp, j->ds->fp) != 0) {
		snprintf(msg, msglen,
		    "the state is of dataset %s, not of dataset %" PRIu64
		    " (%s)",
		    fp != NULL ? fp : "?", j->ds->id, j->ds->fp);
		return ST_FAILED_PRECONDITION;
	}
	if (!json_is_integer(next) || json_integer_value(next) < 0 ||
	    (uint64_t)json_integer_value(next) > j->total ||
	    (open != NULL && !json_is_array(open))) {
		snprintf(msg, msglen,
		    "from_state: next must be a seq of the job, open a list");
		return ST_INVALID_ARGUMENT;
	}
	j->next = (uint64_t)json_integer_value(next);
	json_array_foreach(open, i, o) {
		json_t *seq = json_object_get(o, "seq");
		struct ds_lease *l;
		if (!json_is_integer(seq) || json_integer_value(seq) < 0 ||
		    (uint64_t)json_integer_value(seq) >= j->next ||
		    ds_map_get(j->leases, (uint64_t)json_integer_value(seq)) !=
		        NULL) {
			snprintf(msg, msglen,
			    "from_state: open[%zu] needs a seq below next, "
			    "once",
			    i);
			return ST_INVALID_ARGUMENT;
		}
		if ((l = calloc(1, sizeof(*l))) == NULL) {
			snprintf(msg, msglen, "out of memory");
			return ST_RESOURCE_EXHAUSTED;
		}
		l->seq = (uint64_t)json_integer_value(seq);
		l->total = -1;
		if (ds_map_put(j->leases, l) < 0) {
			free(l);
			snprintf(msg, msglen, "out of memory");
			return ST_RESOURCE_EXHAUSTED;
		}
		ds_list_push(&j->queue, l, 0);
		json_array_foreach(json_object_get(o, "skip"), k, r) {
			json_t *a = json_array_get(r, 0),
			       *b = json_array_get(r, 1);
			if (!json_is_integer(a) || !json_is_integer(b) ||
			    json_integer_value(a) < 0 ||
			    json_integer_value(b) < json_integer_value(a)) {
				snprintf(msg, msglen,
				    "from_state: open[%zu].skip[%zu] must be "
				    "[first, end]",
				    i, k);
				return ST_INVALID_ARGUMENT;
			}
			if (span_add(&l->r, &l->nr, &l->capr,
			        (uint64_t)json_integer_value(a),
			        (uint64_t)json_integer_value(b)) < 0) {
				snprintf(msg, msglen, "out of memory");
				return ST_RESOURCE_EXHAUSTED;
			}
		}
	}
	j->done = j->next - j->queue.count;
	return ST_OK;
}

static enum status
job_make(struct ds *ds, json_t *req, struct ds_dataset *d, enum shard_mode mode,
    const char *name, long repeat, uint64_t seed, long consumers,
    struct ds_job **out, char *msg, size_t msglen)
{
	struct ds_job *j = calloc(1, sizeof(*j));
	json_t *st = json_object_get(req, "from_state");
	const char *run = json_string_value(json_object_get(req, "run"));
	enum status s;

	if (st != NULL && json_is_null(st))
		st = NULL;
	if (j == NULL || (name != NULL && (j->name = strdup(name)) == NULL) ||
	    (j->leases = calloc(1, sizeof(*j->leases))) == NULL ||
	    (st != NULL && (j->start = state_text(st)) == NULL) ||
	    (run != NULL && (j->run = strdup(run)) == NULL)) {
		if (j != NULL)
			ds_job_free(j);
		snprintf(msg, msglen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	if (token_random(j->secret, sizeof(j->secret)) < 0) {
		ds_job_free(j);
		snprintf(msg, msglen, "no random bytes for the job's secret");
		return ST_INTERNAL;
	}
	j->iteration = 1;
	j->ds = d;
	j->mode = j->eff = mode;
	j->repeat = repeat;
	j->seed = seed;
	j->consumers = consumers;
	j->rr_target = -1;
	j->rr_latest = -1;
	j->total = repeat == 0 ? UINT64_MAX : (uint64_t)repeat * d->nsplits;
	if (ds_is_static(mode)) {
		j->shards = (long)ds->cfg.nstatic;
		if (mode == SHARD_FILE_OR_DATA)
			j->eff = d->nsplits >= ds->cfg.nstatic ? SHARD_FILE :
			                                         SHARD_DATA;
		if ((j->finished_shards = calloc((size_t)j->shards, 1)) ==
		    NULL) {
			ds_job_free(j);
			snprintf(msg, msglen, "out of memory");
			return ST_RESOURCE_EXHAUSTED;
		}
	}
	if (st != NULL && (s = job_restore(j, st, msg, msglen)) != ST_OK) {
		ds_job_free(j);
		return s;
	}
	j->id = ++ds->next_job;
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
job_anew(const struct ds_job *j, json_t *req)
{
	const char *run = json_string_value(json_object_get(req, "run"));
	json_t *st = json_object_get(req, "from_state");
	char *text;
	int same;

	if (st != NULL && json_is_null(st))
		st = NULL;
	if (run == NULL && job_ended(j))
		return ANEW;
	if (run != NULL && (j->run == NULL || strcmp(run, j->run) != 0))
		return ANEW;
	if (st == NULL)
		return JOIN;
	if ((text = state_text(st)) == NULL)
		return NOMEM;
	same = j->start != NULL && strcmp(text, j->start) == 0;
	free(text);
	return same ? JOIN : CONFLICT;
}

enum status
ds_job_open(struct ds *ds, json_t *req, int64_t now, struct ds_job **job,
    struct ds_client **client, int *created, char *msg, size_t msglen)
{
	json_t *jd = json_object_get(req, "dataset");
	const char *mname = json_string_value(json_object_get(req, "mode"));
	const char *name = json_string_value(json_object_get(req, "name"));
	char key[32];
	struct ds_dataset *d;
	struct ds_job *j, *old = NULL;
	struct ds_client *c;
	enum shard_mode mode = SHARD_DYNAMIC;
	long repeat, consumers, index, seedl;
	const char *run = json_string_value(json_object_get(req, "run"));
	uint64_t iteration = 1;
	enum status s;
	int anew = JOIN;

	*created = 0;
	if (json_is_integer(jd))
		snprintf(key, sizeof(key), "%" JSON_INTEGER_FORMAT,
		    json_integer_value(jd));
	else if (json_is_string(jd))
		snprintf(key, sizeof(key), "%.31s", json_string_value(jd));
	else {
		snprintf(msg, msglen, "a job needs a dataset");
		return ST_INVALID_ARGUMENT;
	}
	if ((d = ds_dataset_find(ds, key)) == NULL) {
		snprintf(msg, msglen, "no dataset %s", key);
		return ST_NOT_FOUND;
	}
	if (mname != NULL && shard_mode_parse(mname, &mode) < 0) {
		snprintf(msg, msglen,
		    "mode %s is not off, dynamic, file, data, file_or_data or "
		    "hint",
		    mname);
		return ST_INVALID_ARGUMENT;
	}
	if (json_long(req, "repeat", 1, 0, 1L << 30, &repeat, msg, msglen) <
	        0 ||
	    json_long(req, "consumers", 0, 0, 4096, &consumers, msg, msglen) <
	        0 ||
	    json_long(req, "consumer_index", 0, 0, 4095, &index, msg, msglen) <
	        0 ||
	    json_long(req, "seed", 0, 0, INT64_MAX, &seedl, msg, msglen) < 0)
		return ST_INVALID_ARGUMENT;
	if (name != NULL && !ds_name_ok(name)) {
		snprintf(msg, msglen,
		    "job name %s: 1 to 128 of A-Z a-z 0-9 - _ ., not all digits",
		    name);
		return ST_INVALID_ARGUMENT;
	}
	if (json_object_get(req, "run") != NULL &&
	    (run == NULL || !ds_run_ok(run) || name == NULL)) {
		snprintf(msg, msglen,
		    "run: 1 to 128 of A-Z a-z 0-9 - _ ., with a job name");
		return ST_INVALID_ARGUMENT;
	}
	if (consumers > 0 && (name == NULL || mode == SHARD_DYNAMIC)) {
		snprintf(msg, msglen,
		    "round-robin reads (consumers) need a job name and a mode "
		    "other than dynamic");
		return ST_INVALID_ARGUMENT;
	}
	if (consumers > 0 && index >= consumers) {
		snprintf(msg, msglen, "consumer_index %ld is not below %ld",
		    index, consumers);
		return ST_INVALID_ARGUMENT;
	}
	if (ds_is_static(mode) && ds->cfg.nstatic == 0) {
		snprintf(msg, msglen,
		    "static sharding (mode %s) needs dispatchd "
		    "--static-workers",
		    shard_mode_name(mode));
		return ST_FAILED_PRECONDITION;
	}
	/* Nothing changes before every refusal is past: the client first. */
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		snprintf(msg, msglen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	j = name != NULL ? ds_job_find(ds, name) : NULL;
	if (j != NULL && (anew = job_anew(j, req)) == NOMEM) {
		free(c);
		snprintf(msg, msglen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	if (j != NULL && anew == CONFLICT) {
		free(c);
		snprintf(msg, msglen,
		    "job %s%s%s started from another state: the readers of a "
		    "run resume from the same states (a new run, with its "
		    "own id, starts the name anew)",
		    name, j->run != NULL ? " of run " : "",
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
	if (j != NULL) {
		const char *what = j->ds != d  ? "dataset" :
		    j->mode != mode            ? "mode" :
		    j->repeat != repeat        ? "repeat" :
		    j->seed != (uint64_t)seedl ? "seed" :
		    j->consumers != consumers  ? "consumers" :
		                                 NULL;
		if (what != NULL) {
			free(c);
			snprintf(msg, msglen,
			    "job %s exists with dataset %" PRIu64
			    ", mode %s, repeat %ld, seed %" PRIu64
			    ", consumers %ld: its %s differs",
			    name, j->ds->id, shard_mode_name(j->mode),
			    j->repeat, j->seed, j->consumers, what);
			return ST_INVALID_ARGUMENT;
		}
		if (j->kept)
			job_unkeep(ds, j);
	} else {
		if ((s = job_make(ds, req, d, mode, name, repeat,
		         (uint64_t)seedl, consumers, &j, msg, msglen)) !=
		    ST_OK) {
			free(c);
			return s;
		}
		if (old != NULL) {
			/* Retired before the new one is recorded, which
			 * replay finds the name free for. */
			old->retired = 1;
			ds_jr_job(ds, old);
			if (old->nclients == 0)
				ds_job_collect(ds, old);
		}
		j->iteration = iteration;
		j->link = ds->jobs;
		ds->jobs = j;
		*created = 1;
		ds_jr_job(ds, j);
		for (struct ds_lease *l = j->queue.head; l != NULL; l = l->next)
			ds_jr_open(ds, j, l);
		for (struct ds_worker *w = ds->workers; w != NULL; w = w->next)
			ds_task_make(ds, j, w, 0);
	}
	c->id = ++ds->next_client;
	c->job = j;
	c->last_seen = now;
	c->index = index;
	c->round = -1;
	c->blocked = -1;
	c->next = j->clients;
	j->clients = c;
	j->nclients++;
	j->idle_since = 0;
	ds_jr_client(ds, c);
	*job = j;
	*client = c;
	return ST_OK;
}

static json_t *
ranges_json(const struct ds_lease *l)
{
	json_t *a = json_array();

	for (size_t i = 0; i < l->nr; i++)
		json_array_append_new(a,
		    json_pack("[I,I]", (json_int_t)l->r[i].a,
		        (json_int_t)l->r[i].b));
	return a;
}

const char *
ds_task_state_name(const struct ds_task *t)
{
	return t->state == DS_TASK_RUNNING ?
	    (t->pending ? "pending" : "running") :
	    t->state == DS_TASK_FINISHED ? "finished" :
	                                   "failed";
}

json_t *
ds_job_json(const struct ds_job *j)
{
	json_t *tasks = json_array();
	size_t leased = j->leases != NULL ? j->leases->count : 0;

	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		json_array_append_new(tasks,
		    json_pack("{s:I,s:s,s:s,s:I}", "id", (json_int_t)t->id,
		        "worker", t->w->name, "state", ds_task_state_name(t),
		        "leased", (json_int_t)t->leases.count));
	return json_pack("{s:I,s:o,s:I,s:b,s:b,s:o,s:I,s:s,s:I,s:I,s:o,s:I,s:b,"
	                 "s:o,s:I,s:o,s:I,s:o,s:o}",
	    "id", (json_int_t)j->id, "name",
	    j->name != NULL ? json_string(j->name) : json_null(), "iteration",
	    (json_int_t)j->iteration, "retired", j->retired, "kept", j->kept,
	    "run", j->run != NULL ? json_string(j->run) : json_null(),
	    "dataset", (json_int_t)j->ds->id, "mode", shard_mode_name(j->mode),
	    "repeat", (json_int_t)j->repeat, "seed", (json_int_t)j->seed,
	    "consumers",
	    j->consumers > 0 ? json_integer(j->consumers) : json_null(),
	    "clients", (json_int_t)j->nclients, "finished", j->finished,
	    "error", j->error != NULL ? json_string(j->error) : json_null(),
	    "splits", (json_int_t)j->ds->nsplits, "done",
	    j->eff == SHARD_DYNAMIC ? json_integer((json_int_t)j->done) :
	                              json_null(),
	    "leased", (json_int_t)leased, "next",
	    j->eff == SHARD_DYNAMIC ? json_integer((json_int_t)j->next) :
	                              json_null(),
	    "tasks", tasks);
}

json_t *
ds_job_start(const struct ds_job *j)
{
	if (j->eff != SHARD_DYNAMIC)
		return NULL;
	if (j->start != NULL)
		return json_loads(j->start, 0, NULL);
	return json_pack("{s:i,s:s,s:s,s:I,s:I,s:i,s:i,s:[]}", "version", 1,
	    "dataset", j->ds->fp, "mode", "dynamic", "repeat",
	    (json_int_t)j->repeat, "seed", (json_int_t)j->seed, "next", 0,
	    "done", 0, "open");
}

json_t *
ds_jobs_json(struct ds *ds)
{
	json_t *a = json_array();

	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link)
		json_array_insert_new(a, 0, ds_job_json(j));
	return json_pack("{s:o}", "jobs", a);
}

static int
lease_cmp(const void *a, const void *b)
{
	const struct ds_lease *x = *(struct ds_lease *const *)a;
	const struct ds_lease *y = *(struct ds_lease *const *)b;

	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

enum status
ds_checkpoint(const struct ds_job *j, json_t **out, char *msg, size_t msglen)
{
	struct lease_map *m = j->leases;
	struct ds_lease **v;
	json_t *open;
	size_t n = 0;

	if (j->eff != SHARD_DYNAMIC) {
		snprintf(msg, msglen,
		    "job %" PRIu64 " reads in mode %s: only dynamic jobs have "
		    "a position to resume from",
		    j->id, shard_mode_name(j->mode));
		return ST_FAILED_PRECONDITION;
	}
	if ((v = calloc(m->count + 1, sizeof(*v))) == NULL ||
	    (open = json_array()) == NULL) {
		free(v);
		snprintf(msg, msglen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	for (size_t i = 0; i < m->cap; i++)
		if (m->slot[i] != NULL)
			v[n++] = m->slot[i];
	qsort(v, n, sizeof(*v), lease_cmp);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(open,
		    json_pack("{s:I,s:o}", "seq", (json_int_t)v[i]->seq, "skip",
		        ranges_json(v[i])));
	free(v);
	*out = json_pack("{s:i,s:s,s:s,s:I,s:I,s:I,s:I,s:o}", "version", 1,
	    "dataset", j->ds->fp, "mode", shard_mode_name(j->mode), "repeat",
	    (json_int_t)j->repeat, "seed", (json_int_t)j->seed, "next",
	    (json_int_t)j->next, "done", (json_int_t)j->done, "open", open);
	return *out != NULL ? ST_OK : ST_RESOURCE_EXHAUSTED;
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
	while (j->tasks != NULL) {
		struct ds_worker *w = j->tasks->w;
		ds_gone(ds, R_TASK_GONE, j->id, j->tasks->id, 0);
		ds_tasks_changed(ds, w);
	}
	j->kept = 1;
	ds_jr_job(ds, j);
}

/* A kept job read again: tasks on every worker, as for a new one. */
static void
job_unkeep(struct ds *ds, struct ds_job *j)
{
	j->kept = 0;
	ds_jr_job(ds, j);
	for (struct ds_worker *w = ds->workers; w != NULL; w = w->next)
		ds_task_make(ds, j, w, 0);
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
