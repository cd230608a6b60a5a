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
 * (dataset_int.h holds the state and what the files share.) What requests
 * and replies look like is svc/dsjson.c's.
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
ds_dataset_register(struct ds *ds, const struct ds_dataset_def *def,
    struct ds_dataset **out, int *created, char *msg, size_t msglen)
{
	uint64_t h = ds_fp_head(def->reader, def->framing, def->reader_skips);
	struct ds_dataset *d, *byname = NULL;
	char fp[17];

	*created = 0;
	for (size_t i = 0; i < def->nsplits; i++)
		h = ds_fnv(h, def->splits[i], strlen(def->splits[i]) + 1);
	if (def->name != NULL)
		byname = ds_dataset_find(ds, def->name);
	snprintf(fp, sizeof(fp), "%016" PRIx64, h);
	for (d = ds->datasets; d != NULL; d = d->next)
		if (strcmp(d->fp, fp) == 0)
			break;
	if (byname != NULL && byname != d) {
		snprintf(msg, msglen,
		    "dataset name %s names dataset %" PRIu64
		    ", of another definition",
		    def->name, byname->id);
		return ST_ALREADY_EXISTS;
	}
	if (d != NULL) {
		if (def->name != NULL && d->name == NULL &&
		    (d->name = strdup(def->name)) != NULL)
			ds_jr_dsname(ds, d);
		*out = d;
		return ST_OK;
	}
	if ((d = calloc(1, sizeof(*d))) == NULL ||
	    (d->splits = calloc(def->nsplits, sizeof(char *))) == NULL)
		goto oom;
	for (size_t i = 0; i < def->nsplits; i++) {
		if ((d->splits[i] = strdup(def->splits[i])) == NULL)
			goto oom;
		d->nsplits++;
	}
	if ((d->reader = strdup(def->reader)) == NULL ||
	    (def->name != NULL && (d->name = strdup(def->name)) == NULL))
		goto oom;
	d->framing = def->framing;
	d->reader_skips = def->reader_skips;
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
ds_client_beat(struct ds *ds, struct ds_client *c, const struct ds_beat *b,
    int64_t now, char *msg, size_t msglen)
{
	struct ds_job *j = c->job;
	enum status st;

	c->last_seen = now;
	if ((st = ds_deliveries(ds, j, b->delivered, b->ndelivered, msg,
	         msglen)) != ST_OK)
		return st;
	if (b->cut)
		return ST_INVALID_ARGUMENT;
	for (size_t i = 0; i < b->nlost; i++) {
		struct ds_task *t = ds_job_task(j, b->lost[i]);
		if (t != NULL)
			task_ack(ds, t, c->id);
	}
	if (j->consumers > 0) {
		int64_t round = c->round, blocked = c->blocked;
		if (b->has_round) {
			c->round = b->round;
			if (c->round > j->rr_latest) {
				j->rr_latest = c->round;
				ds_jr_job(ds, j);
			}
		}
		c->blocked = b->blocked;
		if (c->round != round || c->blocked != blocked)
			ds_jr_client(ds, c);
		rr_settle(ds, j);
	}
	ds_job_check_done(ds, j);
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		if (ds_task_listed(t))
			task_told(ds, t, c->id);
	return ST_OK;
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
		v->leased += ds_job_leased(j);
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
