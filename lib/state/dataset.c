/*
 * dataset.c: the datasets' state machine: datasets registered, workers
 * that come and go, tasks that fail or end, job clients and their
 * heartbeats, round robin, the scan of idle clients and jobs, and the
 * state's life. Every change is made as a record and applied from it
 * (dataset_journal.c: ds_commit), as replay applies it. Its files, each
 * using only those listed after it:
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

static void rr_settle(struct ds *ds, struct ds_job *j);

static enum status
nomem(char *msg, size_t msglen)
{
	snprintf(msg, msglen, "out of memory");
	return ST_RESOURCE_EXHAUSTED;
}

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
		    ds_put_dsname(ds, d, def->name) < 0)
			return nomem(msg, msglen);
		*out = d;
		return ST_OK;
	}
	if (ds_put_dataset(ds, ds->next_dataset + 1, def, fp) < 0)
		return nomem(msg, msglen);
	*out = ds->datasets;
	*created = 1;
	return ST_OK;
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

static int
ids_has(const uint64_t *v, size_t n, uint64_t id)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == id)
			return 1;
	return 0;
}

/*
 * Points *v to a copy of its *n ids with id added (add) or taken out (the
 * last taking its place), for the record of a task as it is to be: 1; 0
 * when that would change nothing (*v is as it was); -1 when memory ran
 * out.
 */
static int
ids_edit(uint64_t **v, size_t *n, uint64_t id, int add)
{
	size_t i;
	uint64_t *c;

	for (i = 0; i < *n && (*v)[i] != id; i++)
		;
	if ((i < *n) == add)
		return 0;
	if ((c = malloc((*n + 1) * sizeof(*c))) == NULL)
		return -1;
	if (*n > 0)
		memcpy(c, *v, *n * sizeof(*c));
	if (add)
		c[(*n)++] = id;
	else
		c[i] = c[--*n];
	*v = c;
	return 1;
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
	struct ds_task x = *t;
	int r;

	if (t->state == DS_TASK_FAILED)
		return;
	x.state = DS_TASK_FAILED;
	x.acks = NULL;
	x.nacks = 0;
	/* Only the clients that were told of t can have read from it. */
	if (j->eff == SHARD_DYNAMIC && t->leases.count > 0 && t->ntold > 0 &&
	    (x.acks = calloc(t->ntold, sizeof(*x.acks))) != NULL) {
		for (size_t i = 0; i < t->ntold; i++)
			if (job_has_client(j, t->told[i]))
				x.acks[x.nacks++] = t->told[i];
	}
	r = ds_put_task(ds, &x);
	free(x.acks);
	if (r < 0)
		return;
	ds_tasks_changed(ds, t->w);
	task_settle(ds, t);
	if (j->rr_target >= 0) {
		/* A pending task that failed: the next one's turn. */
		int any = 0;
		for (struct ds_task *u = j->tasks; u != NULL; u = u->next)
			any |= u->pending && u->state == DS_TASK_RUNNING;
		if (!any) {
			struct ds_job y = *j;
			y.rr_target = -1;
			(void)ds_put_job(ds, &y, 0);
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
task_forget_client(struct ds *ds, struct ds_task *t, uint64_t client)
{
	struct ds_task x = *t;
	int skips = 0, told, acks;

	if (t->state != DS_TASK_FAILED)
		skips = ids_edit(&x.skips, &x.nskips, client, 1);
	told = ids_edit(&x.told, &x.ntold, client, 0);
	acks = ids_edit(&x.acks, &x.nacks, client, 0);
	if (skips >= 0 && told >= 0 && acks >= 0 && (skips || told || acks))
		(void)ds_put_task(ds, &x);
	if (skips > 0)
		free(x.skips);
	if (told > 0)
		free(x.told);
	if (acks > 0)
		free(x.acks);
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
		task_forget_client(ds, t, id);
	}
	rr_settle(ds, j);
}

static void
task_told(struct ds *ds, struct ds_task *t, uint64_t client)
{
	struct ds_task x = *t;

	if (ids_has(t->skips, t->nskips, client) ||
	    ids_edit(&x.told, &x.ntold, client, 1) <= 0)
		return;
	(void)ds_put_task(ds, &x);
	free(x.told);
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
		struct ds_task x = *t;
		int ready = j->nclients > 0, late = 0;
		if (target < 0) {
			delta = 1;
			target = j->rr_latest + delta;
		}
		for (struct ds_client *c = j->clients; c != NULL; c = c->next) {
			int blocked = c->blocked >= 0 && c->blocked <= target &&
			    c->round <= c->blocked;
			if (blocked)
				continue;
			ready = 0;
			if (c->round >= target)
				late = 1;
		}
		if (late) {
			delta *= 2;
			target = j->rr_latest + delta;
			break;
		}
		if (!ready)
			break;
		x.pending = 0;
		x.start_round = target;
		if (ds_put_task(ds, &x) < 0)
			break;
		target = -1;
	}
	if (t == NULL)
		target = -1;
	if (target != j->rr_target || delta != j->rr_delta) {
		struct ds_job y = *j;
		y.rr_target = target;
		y.rr_delta = delta;
		(void)ds_put_job(ds, &y, 0);
	}
}

enum status
ds_client_beat(struct ds *ds, struct ds_client *c, const struct ds_beat *b,
    int64_t now, char *msg, size_t msglen)
{
	struct ds_job *j = c->job;
	enum status st;

	c->last_seen = now; /* liveness, not durable */
	if ((st = ds_deliveries(ds, j, b->delivered, b->ndelivered, msg,
	         msglen)) != ST_OK)
		return st;
	if (b->cut)
		return ST_INVALID_ARGUMENT;
	for (size_t i = 0; i < b->nlost; i++) {
		struct ds_task *t = ds_job_task(j, b->lost[i]);
		if (t != NULL)
			task_forget_client(ds, t, c->id);
	}
	if (j->consumers > 0) {
		struct ds_client x = *c;
		if (b->has_round) {
			x.round = b->round;
			if (x.round > j->rr_latest) {
				struct ds_job y = *j;
				y.rr_latest = x.round;
				(void)ds_put_job(ds, &y, 0);
			}
		}
		x.blocked = b->blocked;
		if (x.round != c->round || x.blocked != c->blocked)
			(void)ds_put_client(ds, &x, now);
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

	if (w != NULL && w->live)
		ds_worker_down(ds, name, w->inc);
	if (ds_put_worker(ds, name, inc, address, host != NULL ? host : "", 1) <
	    0)
		return;
	w = ds_worker_find(ds, name);
	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link)
		ds_task_make(ds, j, w, 1);
}

void
ds_worker_down(struct ds *ds, const char *name, uint64_t inc)
{
	struct ds_worker *w = ds_worker_find(ds, name);

	if (w == NULL || !w->live || w->inc != inc)
		return;
	if (ds_put_worker(ds, w->name, w->inc, w->address, w->host, 0) < 0)
		return;
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
	struct ds_job *j = t->job, y;
	struct ds_task x;
	int r;

	if (failed) {
		y = *j;
		if (j->error == NULL &&
		    (y.error = strdup(message != NULL && *message != '\0' ?
		             message :
		             "a reader failed")) != NULL) {
			(void)ds_put_job(ds, &y, 0);
			free(y.error);
		}
		ds_emit(ds, DS_EV_SPLITS, NULL, j->id);
		return ST_OK;
	}
	if (t->state != DS_TASK_RUNNING)
		return ST_OK;
	/* The job's shard before the task: a refused end is sent again,
	 * and finds the task still running. */
	if (j->finished_shards != NULL && t->shard < j->shards &&
	    !j->finished_shards[t->shard]) {
		y = *j;
		if ((y.finished_shards = malloc((size_t)j->shards)) == NULL)
			return ST_RESOURCE_EXHAUSTED;
		memcpy(y.finished_shards, j->finished_shards,
		    (size_t)j->shards);
		y.finished_shards[t->shard] = 1;
		r = ds_put_job(ds, &y, 0);
		free(y.finished_shards);
		if (r < 0)
			return ST_RESOURCE_EXHAUSTED;
	}
	x = *t;
	x.state = DS_TASK_FINISHED;
	x.read_all = 1;
	if (ds_put_task(ds, &x) < 0)
		return ST_RESOURCE_EXHAUSTED;
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
ds_heard_all(struct ds *ds, int64_t now)
{
	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link) {
		for (struct ds_client *c = j->clients; c != NULL; c = c->next)
			c->last_seen = now;
		if (j->nclients == 0)
			j->idle_since = now;
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
