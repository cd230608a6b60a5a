/*
 * dataset.c: the datasets' state machine: datasets registered, workers
 * that come and go, tasks that fail or end, job clients and their
 * heartbeats, round robin, the scan of idle clients and jobs, and the
 * state's life. Its files, each using only those listed after it:
 *   dataset.c          these operations
 *   dataset_job.c      jobs opened by name, positions, keeping, collecting
 *   dataset_grant.c    tasks made, leasing, delivery, a job's end
 *   dataset_snap.c     the snapshot
 *   dataset_journal.c  records made, committed and applied
 *   dataset_obj.c      the things: find, free, unlink
 *   dataset_lease.c    open leases: the map, lists, delivered ranges
 * (dataset_int.h holds the state and what the files share.)
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

static void ids_add(uint64_t **v, size_t *n, size_t *cap, uint64_t id);
static void rr_settle(struct ds *ds, struct ds_job *j);

enum status
ds_dataset_register(struct ds *ds, json_t *def, struct ds_dataset **out,
    int *created, char *msg, size_t msglen)
{
	json_t *splits = json_object_get(def, "splits"), *v;
	const char *reader = json_string_value(json_object_get(def, "reader"));
	const char *fr = json_string_value(json_object_get(def, "framing"));
	const char *name = json_string_value(json_object_get(def, "name"));
	int skips = json_is_true(json_object_get(def, "reader_skips"));
	enum framing framing = FRAME_LINES;
	struct ds_dataset *d, *byname = NULL;
	uint64_t h;
	size_t i;

	*created = 0;
	if (!json_is_array(splits) || json_array_size(splits) == 0) {
		snprintf(msg, msglen, "splits must be a list of one or more");
		return ST_INVALID_ARGUMENT;
	}
	if (json_array_size(splits) > UINT32_MAX) {
		snprintf(msg, msglen, "too many splits");
		return ST_RESOURCE_EXHAUSTED;
	}
	if (reader == NULL || *reader == '\0') {
		snprintf(msg, msglen, "a dataset needs a reader command");
		return ST_INVALID_ARGUMENT;
	}
	if (fr != NULL && framing_parse(fr, &framing) < 0) {
		snprintf(msg, msglen, "framing %s is not lines, nul or len32",
		    fr);
		return ST_INVALID_ARGUMENT;
	}
	if (name != NULL && !ds_name_ok(name)) {
		snprintf(msg, msglen,
		    "dataset name %s: 1 to 128 of A-Z a-z 0-9 - _ ., not all "
		    "digits",
		    name);
		return ST_INVALID_ARGUMENT;
	}
	h = ds_fp_head(reader, framing, skips);
	json_array_foreach(splits, i, v) {
		const char *s = json_string_value(v);
		size_t n = json_is_string(v) ? json_string_length(v) : 0;
		if (s == NULL || n == 0 || n > DS_SPLIT_MAX ||
		    memchr(s, '\n', n) != NULL || strlen(s) != n) {
			snprintf(msg, msglen,
			    "split %zu: a split is a string of 1 to %d bytes "
			    "with no newline or NUL",
			    i, DS_SPLIT_MAX);
			return ST_INVALID_ARGUMENT;
		}
		h = ds_fnv(h, s, n + 1);
	}
	if (name != NULL)
		byname = ds_dataset_find(ds, name);
	char fp[17];
	snprintf(fp, sizeof(fp), "%016" PRIx64, h);
	for (d = ds->datasets; d != NULL; d = d->next)
		if (strcmp(d->fp, fp) == 0)
			break;
	if (byname != NULL && byname != d) {
		snprintf(msg, msglen,
		    "dataset name %s names dataset %" PRIu64
		    ", of another definition",
		    name, byname->id);
		return ST_ALREADY_EXISTS;
	}
	if (d != NULL) {
		if (name != NULL && d->name == NULL &&
		    (d->name = strdup(name)) != NULL)
			ds_jr_dsname(ds, d);
		*out = d;
		return ST_OK;
	}
	if ((d = calloc(1, sizeof(*d))) == NULL ||
	    (d->splits = calloc(json_array_size(splits), sizeof(char *))) ==
	        NULL)
		goto oom;
	json_array_foreach(splits, i, v) {
		if ((d->splits[i] = strdup(json_string_value(v))) == NULL)
			goto oom;
		d->nsplits++;
	}
	if ((d->reader = strdup(reader)) == NULL ||
	    (name != NULL && (d->name = strdup(name)) == NULL))
		goto oom;
	d->framing = framing;
	d->reader_skips = skips;
	memcpy(d->fp, fp, sizeof(fp));
	d->id = ++ds->next_dataset;
	d->next = ds->datasets;
	ds->datasets = d;
	ds_jr_dataset(ds, d);
	*out = d;
	*created = 1;
	return ST_OK;
oom:
	if (d != NULL)
		ds_dataset_free(d);
	snprintf(msg, msglen, "out of memory");
	return ST_RESOURCE_EXHAUSTED;
}

json_t *
ds_dataset_json(const struct ds_dataset *d)
{
	char id[24];

	snprintf(id, sizeof(id), "%" PRIu64, d->id);
	return json_pack("{s:s,s:o,s:I,s:s,s:s,s:b,s:s}", "id", id, "name",
	    d->name != NULL ? json_string(d->name) : json_null(), "splits",
	    (json_int_t)d->nsplits, "reader", d->reader, "framing",
	    framing_name(d->framing), "reader_skips", d->reader_skips,
	    "fingerprint", d->fp);
}

json_t *
ds_datasets_json(struct ds *ds)
{
	json_t *a = json_array();

	for (struct ds_dataset *d = ds->datasets; d != NULL; d = d->next)
		json_array_insert_new(a, 0, ds_dataset_json(d));
	return json_pack("{s:o}", "datasets", a);
}

enum status
ds_worker_admit(struct ds *ds, const char *name, char *msg, size_t msglen)
{
	struct buf list = {0};

	if (ds->cfg.nstatic == 0 || ds_static_index(ds, name) >= 0)
		return ST_OK;
	for (size_t i = 0; i < ds->cfg.nstatic; i++)
		buf_printf(&list, "%s%s", i > 0 ? "," : "",
		    ds->cfg.static_workers[i]);
	snprintf(msg, msglen,
	    "worker %s is not one of dispatchd's --static-workers (%s): the "
	    "static sharding modes give each listed worker its shard, and "
	    "no other worker may register",
	    name, list.data != NULL ? list.data : "");
	buf_free(&list);
	return ST_FAILED_PRECONDITION;
}

static int
job_has_client(const struct ds_job *j, uint64_t id)
{
	for (struct ds_client *c = j->clients; c != NULL; c = c->next)
		if (c->id == id)
			return 1;
	return 0;
}

/* Removes t from its job once no client is left to hear of its end. */
static void
task_settle(struct ds *ds, struct ds_task *t)
{
	if (t->state != DS_TASK_FAILED || t->nacks > 0)
		return;
	ds_gone(ds, R_TASK_GONE, t->job->id, t->id, 0);
}

static void
task_fail(struct ds *ds, struct ds_task *t)
{
	struct ds_job *j = t->job;
	size_t n = 0;

	if (t->state == DS_TASK_FAILED)
		return;
	t->state = DS_TASK_FAILED;
	free(t->acks);
	t->acks = NULL;
	t->nacks = 0;
	/* Only the clients that were told of t can have read from it. */
	if (j->eff == SHARD_DYNAMIC && t->leases.count > 0 && t->ntold > 0 &&
	    (t->acks = calloc(t->ntold, sizeof(*t->acks))) != NULL) {
		for (size_t i = 0; i < t->ntold; i++)
			if (job_has_client(j, t->told[i]))
				t->acks[n++] = t->told[i];
		t->nacks = n;
	}
	ds_jr_task(ds, t);
	ds_tasks_changed(ds, t->w);
	task_settle(ds, t);
	if (j->rr_target >= 0) {
		/* A pending task that failed: the next one's turn. */
		int any = 0;
		for (struct ds_task *u = j->tasks; u != NULL; u = u->next)
			any |= u->pending && u->state == DS_TASK_RUNNING;
		if (!any) {
			j->rr_target = -1;
			ds_jr_job(ds, j);
		}
	}
	ds_job_check_done(ds, j);
}

/*
 * client no longer reads t: it owes t's end no answer (a client that says
 * so of a running task, such as a --local reader skipping another host's
 * task, is not waited for when t fails).
 */
static void
task_ack(struct ds *ds, struct ds_task *t, uint64_t client)
{
	size_t skips = t->nskips, told = t->ntold, acks = t->nacks;

	if (t->state != DS_TASK_FAILED)
		ids_add(&t->skips, &t->nskips, &t->capskips, client);
	for (size_t i = 0; i < t->ntold; i++)
		if (t->told[i] == client) {
			t->told[i] = t->told[--t->ntold];
			break;
		}
	for (size_t i = 0; i < t->nacks; i++)
		if (t->acks[i] == client) {
			t->acks[i] = t->acks[--t->nacks];
			break;
		}
	if (t->nskips != skips || t->ntold != told || t->nacks != acks)
		ds_jr_task(ds, t);
	task_settle(ds, t);
}

void
ds_client_release(struct ds *ds, struct ds_client *c, int64_t now)
{
	struct ds_job *j = c->job;
	struct ds_task *t, *next;
	uint64_t id = c->id;

	ds_gone(ds, R_CLIENT_GONE, id, 0, now); /* frees c */
	for (t = j->tasks; t != NULL; t = next) {
		next = t->next;
		task_ack(ds, t, id);
	}
	rr_settle(ds, j);
}

static int
ids_has(const uint64_t *v, size_t n, uint64_t id)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == id)
			return 1;
	return 0;
}

static void
ids_add(uint64_t **v, size_t *n, size_t *cap, uint64_t id)
{
	if (ids_has(*v, *n, id))
		return;
	if (vec_grow(v, cap, *n + 1, sizeof(**v)) < 0)
		return;
	(*v)[(*n)++] = id;
}

static void
task_told(struct ds *ds, struct ds_task *t, uint64_t client)
{
	size_t n = t->ntold;

	if (!ids_has(t->skips, t->nskips, client))
		ids_add(&t->told, &t->ntold, &t->captold, client);
	if (t->ntold != n)
		ds_jr_task(ds, t);
}

/* The first pending task of j, if any. */
static struct ds_task *
rr_pending(struct ds_job *j)
{
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		if (t->pending && t->state == DS_TASK_RUNNING)
			return t;
	return NULL;
}

/*
 * The pending-task protocol: a task for a worker that joined a
 * round-robin job is listed from a round every consumer has agreed to
 * stop before. A consumer past the target makes it fail: the next target
 * is further off by twice the last distance.
 */
static void
rr_settle(struct ds *ds, struct ds_job *j)
{
	int64_t target = j->rr_target, delta = j->rr_delta;
	struct ds_task *t;

	while ((t = rr_pending(j)) != NULL) {
		int ready = j->nclients > 0, late = 0;
		if (j->rr_target < 0) {
			j->rr_delta = 1;
			j->rr_target = j->rr_latest + j->rr_delta;
		}
		for (struct ds_client *c = j->clients; c != NULL; c = c->next) {
			int blocked = c->blocked >= 0 &&
			    c->blocked <= j->rr_target &&
			    c->round <= c->blocked;
			if (blocked)
				continue;
			ready = 0;
			if (c->round >= j->rr_target)
				late = 1;
		}
		if (late) {
			j->rr_delta *= 2;
			j->rr_target = j->rr_latest + j->rr_delta;
			break;
		}
		if (!ready)
			break;
		t->pending = 0;
		t->start_round = j->rr_target;
		j->rr_target = -1;
		ds_jr_task(ds, t);
	}
	if (t == NULL)
		j->rr_target = -1;
	if (j->rr_target != target || j->rr_delta != delta)
		ds_jr_job(ds, j);
}

enum status
ds_client_beat(struct ds *ds, struct ds_client *c, json_t *body, int64_t now,
    json_t **reply, char *msg, size_t msglen)
{
	struct ds_job *j = c->job;
	json_t *v, *tasks;
	enum status st;
	size_t i;

	c->last_seen = now;
	if ((st = ds_deliveries(ds, j, json_object_get(body, "delivered"), msg,
	         msglen)) != ST_OK)
		return st;
	json_array_foreach(json_object_get(body, "lost"), i, v) {
		struct ds_task *t;
		if (json_is_integer(v) &&
		    (t = ds_job_task(j, (uint64_t)json_integer_value(v))) !=
		        NULL)
			task_ack(ds, t, c->id);
	}
	if (j->consumers > 0) {
		json_t *r = json_object_get(body, "round");
		json_t *b = json_object_get(body, "blocked_round");
		int64_t round = c->round, blocked = c->blocked;
		if (json_is_integer(r)) {
			c->round = json_integer_value(r);
			if (c->round > j->rr_latest) {
				j->rr_latest = c->round;
				ds_jr_job(ds, j);
			}
		}
		c->blocked = json_is_integer(b) ? json_integer_value(b) : -1;
		if (c->round != round || c->blocked != blocked)
			ds_jr_client(ds, c);
		rr_settle(ds, j);
	}
	ds_job_check_done(ds, j);
	tasks = json_array();
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next) {
		if (t->state == DS_TASK_FAILED || t->pending)
			continue;
		task_told(ds, t, c->id);
		json_array_append_new(tasks,
		    json_pack("{s:I,s:s,s:s,s:s,s:I,s:s}", "id",
		        (json_int_t)t->id, "worker", t->w->name, "address",
		        t->w->address, "host", t->w->host, "starting_round",
		        (json_int_t)t->start_round, "state",
		        ds_task_state_name(t)));
	}
	*reply = json_pack("{s:o,s:b,s:o,s:o}", "tasks", tasks, "finished",
	    j->finished, "error",
	    j->error != NULL ? json_string(j->error) : json_null(),
	    "block_round",
	    j->rr_target >= 0 ? json_integer(j->rr_target) : json_null());
	return *reply != NULL ? ST_OK : ST_RESOURCE_EXHAUSTED;
}

/* Workers. */

void
ds_worker_up(struct ds *ds, const char *name, uint64_t inc, const char *address,
    const char *host)
{
	struct ds_worker *w = ds_worker_find(ds, name);
	char *a = strdup(address), *h = strdup(host != NULL ? host : "");

	if (a == NULL || h == NULL)
		goto oom;
	if (w == NULL) {
		if ((w = calloc(1, sizeof(*w))) == NULL ||
		    (w->name = strdup(name)) == NULL) {
			free(w);
			goto oom;
		}
		w->next = ds->workers;
		ds->workers = w;
	} else if (w->live) {
		ds_worker_down(ds, name, w->inc);
	}
	free(w->address);
	free(w->host);
	w->address = a;
	w->host = h;
	w->inc = inc;
	w->live = 1;
	w->changed = 1;
	ds_jr_worker(ds, w);
	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link)
		ds_task_make(ds, j, w, 1);
	return;
oom:
	free(a);
	free(h);
}

void
ds_worker_down(struct ds *ds, const char *name, uint64_t inc)
{
	struct ds_worker *w = ds_worker_find(ds, name);

	if (w == NULL || !w->live || w->inc != inc)
		return;
	w->live = 0;
	ds_jr_worker(ds, w);
	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link) {
		struct ds_task *t, *next;
		for (t = j->tasks; t != NULL; t = next) {
			next = t->next; /* task_fail may free t */
			if (t->w == w && t->inc == inc)
				task_fail(ds, t);
		}
	}
}

void
ds_worker_forget(struct ds *ds, const char *name)
{
	struct ds_worker *w = ds_worker_find(ds, name);

	if (w != NULL && w->live)
		ds_worker_down(ds, name, w->inc);
}

void
ds_worker_each(struct ds *ds,
    void (*fn)(const char *name, uint64_t inc, void *arg), void *arg)
{
	for (struct ds_worker *w = ds->workers; w != NULL; w = w->next)
		if (w->live)
			fn(w->name, w->inc, arg);
}

int
ds_worker_serves(struct ds *ds, const char *name)
{
	struct ds_worker *w = ds_worker_find(ds, name);

	return w != NULL && w->live;
}

int
ds_worker_changed(struct ds *ds, const char *name, int clear)
{
	struct ds_worker *w = ds_worker_find(ds, name);
	int changed = w != NULL && w->changed;

	if (w != NULL && clear)
		w->changed = 0;
	return changed;
}

json_t *
ds_worker_tasks_json(struct ds *ds, const char *name)
{
	struct ds_worker *w = ds_worker_find(ds, name);
	json_t *a = json_array();

	if (w == NULL || !w->live)
		return a;
	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link)
		for (struct ds_task *t = j->tasks; t != NULL; t = t->next) {
			char id[24];
			if (t->state == DS_TASK_FAILED || t->w != w ||
			    t->inc != w->inc)
				continue;
			snprintf(id, sizeof(id), "%" PRIu64, j->ds->id);
			json_array_append_new(a,
			    json_pack("{s:I,s:I,s:s,s:s,s:s,s:s,s:b,s:I,s:I,"
			              "s:I,s:I,s:I,s:I,s:s}",
			        "id", (json_int_t)t->id, "job",
			        (json_int_t)j->id, "dataset", id, "mode",
			        shard_mode_name(j->eff), "reader",
			        j->ds->reader, "framing",
			        framing_name(j->ds->framing), "reader_skips",
			        j->ds->reader_skips, "repeat",
			        (json_int_t)j->repeat, "seed",
			        (json_int_t)j->seed, "splits",
			        (json_int_t)j->ds->nsplits, "shard_index",
			        (json_int_t)t->shard, "shard_count",
			        (json_int_t)(j->shards > 0 ? j->shards : 1),
			        "consumers", (json_int_t)j->consumers, "secret",
			        j->secret));
		}
	return a;
}

/* Worker-facing calls. */

struct ds_task *
ds_task_of(struct ds *ds, const char *name, uint64_t inc, uint64_t id,
    enum status *st, char *msg, size_t msglen)
{
	*st = ST_OK;
	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link) {
		struct ds_task *t = ds_job_task(j, id);
		if (t == NULL)
			continue;
		if (strcmp(t->w->name, name) != 0) {
			snprintf(msg, msglen, "task %" PRIu64 " is not %s's",
			    id, name);
			*st = ST_NOT_FOUND;
			return NULL;
		}
		if (t->inc != inc || t->state == DS_TASK_FAILED) {
			snprintf(msg, msglen,
			    "task %" PRIu64 " belongs to a failed incarnation "
			    "of %s",
			    id, name);
			*st = ST_ABORTED;
			return NULL;
		}
		return t;
	}
	snprintf(msg, msglen, "no task %" PRIu64, id);
	*st = ST_NOT_FOUND;
	return NULL;
}

enum status
ds_task_end(struct ds *ds, struct ds_task *t, int failed, const char *message)
{
	struct ds_job *j = t->job;

	if (failed) {
		if (j->error == NULL &&
		    (j->error = strdup(message != NULL && *message != '\0' ?
		             message :
		             "a reader failed")) != NULL)
			ds_jr_job(ds, j);
		ds_emit(ds, DS_EV_SPLITS, NULL, j->id);
		return ST_OK;
	}
	if (t->state != DS_TASK_RUNNING)
		return ST_OK;
	t->state = DS_TASK_FINISHED;
	t->read_all = 1;
	ds_jr_task(ds, t);
	if (j->finished_shards != NULL && t->shard < j->shards) {
		j->finished_shards[t->shard] = 1;
		ds_jr_job(ds, j);
	}
	ds_job_check_done(ds, j);
	return ST_OK;
}

void
ds_scan(struct ds *ds, int64_t now)
{
	int64_t ct =
	    ds->cfg.client_timeout_ms > 0 ? ds->cfg.client_timeout_ms : 120000;
	int64_t gt = ds->cfg.gc_timeout_ms > 0 ? ds->cfg.gc_timeout_ms : 300000;
	struct ds_job *j, *jn;

	for (j = ds->jobs; j != NULL; j = jn) {
		struct ds_client *c, *cn;
		jn = j->link;
		for (c = j->clients; c != NULL; c = cn) {
			cn = c->next;
			if (now - c->last_seen >= ct)
				ds_client_release(ds, c, now);
		}
		if (j->nclients == 0 && now - j->idle_since >= gt) {
			if (!ds_job_keeps(j))
				ds_job_collect(ds, j);
			else if (!j->kept)
				ds_job_keep(ds, j);
		}
	}
}

void
ds_view(struct ds *ds, struct ds_view *v)
{
	memset(v, 0, sizeof(*v));
	for (struct ds_dataset *d = ds->datasets; d != NULL; d = d->next)
		v->datasets++;
	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link) {
		v->jobs++;
		v->clients += j->nclients;
		v->leased += j->leases != NULL ? j->leases->count : 0;
		for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
			v->tasks++;
	}
	v->leases = ds->leases;
	v->releases = ds->releases;
	v->collected = ds->collected;
}

struct ds *
ds_new(const struct ds_config *cfg, ds_observer_fn fn, void *arg)
{
	struct ds *ds = calloc(1, sizeof(*ds));

	if (ds == NULL)
		return NULL;
	/* Room for any removal's record (ds_gone() cannot fail). */
	if (buf_reserve(&ds->jbuf, GONE_MAX) < 0) {
		free(ds);
		return NULL;
	}
	ds->cfg = *cfg;
	ds->fn = fn;
	ds->arg = arg;
	return ds;
}

void
ds_free(struct ds *ds)
{
	if (ds == NULL)
		return;
	while (ds->jobs != NULL) {
		struct ds_job *j = ds->jobs;
		ds->jobs = j->link;
		ds_job_free(j);
	}
	while (ds->datasets != NULL) {
		struct ds_dataset *d = ds->datasets;
		ds->datasets = d->next;
		ds_dataset_free(d);
	}
	while (ds->workers != NULL) {
		struct ds_worker *w = ds->workers;
		ds->workers = w->next;
		free(w->name);
		free(w->address);
		free(w->host);
		free(w);
	}
	buf_free(&ds->jbuf);
	free(ds);
}
