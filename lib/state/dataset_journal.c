/*
 * dataset_journal.c: the datasets' journal: records made (ds_enc_*), every
 * change made as its record and applied from it (ds_commit, and ds_put_*
 * for the whole-thing records), and applied in replay alike (apply_*,
 * ds_apply).
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "dataset_int.h"
#include "errbuf.h"
#include "rec.h"

static int apply_one(struct ds *ds, struct rec_in *in, int64_t now, char *err,
    size_t errlen);

void
ds_set_journal(struct ds *ds, ds_journal_fn fn, void *arg)
{
	ds->jfn = fn;
	ds->jarg = arg;
}

static void
enc_dataset(struct rec_out *o, uint64_t id, const struct ds_dataset_def *d,
    const char *fp)
{
	rec_put_u(o, id);
	rec_put_s(o, d->name);
	rec_put_s(o, d->reader);
	rec_put_u(o, (uint64_t)d->framing);
	rec_put_u(o, (uint64_t)d->reader_skips);
	rec_put_s(o, fp);
	rec_put_u(o, d->nsplits);
	for (size_t i = 0; i < d->nsplits; i++)
		rec_put_s(o, d->splits[i]);
}

void
ds_enc_dataset(struct rec_out *o, const struct ds_dataset *d)
{
	struct ds_dataset_def def = {(const char *const *)d->splits, d->nsplits,
	    d->reader, d->framing, d->reader_skips, d->name};

	enc_dataset(o, d->id, &def, d->fp);
}

static void
enc_worker(struct rec_out *o, const char *name, uint64_t inc,
    const char *address, const char *host, int live)
{
	rec_put_s(o, name);
	rec_put_u(o, inc);
	rec_put_s(o, address);
	rec_put_s(o, host);
	rec_put_u(o, (uint64_t)live);
}

void
ds_enc_worker(struct rec_out *o, const struct ds_worker *w)
{
	enc_worker(o, w->name, w->inc, w->address, w->host, w->live);
}

void
ds_enc_job(struct rec_out *o, const struct ds_job *j)
{
	rec_put_u(o, j->id);
	rec_put_s(o, j->name);
	rec_put_u(o, j->ds->id);
	rec_put_u(o, (uint64_t)j->mode);
	rec_put_u(o, (uint64_t)j->eff);
	rec_put_u(o, (uint64_t)j->repeat);
	rec_put_u(o, j->seed);
	rec_put_u(o, (uint64_t)j->consumers);
	rec_put_u(o, (uint64_t)j->shards);
	rec_put_u(o, (uint64_t)j->finished);
	rec_put_s(o, j->error);
	rec_put_u(o, j->next);
	rec_put_u(o, j->done);
	rec_put_i(o, j->rr_latest);
	rec_put_i(o, j->rr_target);
	rec_put_i(o, j->rr_delta);
	rec_put_u(o, j->finished_shards != NULL);
	if (j->finished_shards != NULL)
		rec_put_bytes(o, j->finished_shards, (size_t)j->shards);
	/* R_JOB2's. */
	rec_put_u(o, j->iteration);
	rec_put_u(o, (uint64_t)j->retired);
	rec_put_s(o, j->start);
	rec_put_s(o, j->secret);
	rec_put_s(o, j->run);
	rec_put_u(o, (uint64_t)j->kept);
}

static void
enc_ids(struct rec_out *o, const uint64_t *v, size_t n)
{
	rec_put_u(o, n);
	for (size_t i = 0; i < n; i++)
		rec_put_u(o, v[i]);
}

void
ds_enc_task(struct rec_out *o, const struct ds_task *t)
{
	rec_put_u(o, t->job->id);
	rec_put_u(o, t->id);
	rec_put_s(o, t->w->name);
	rec_put_u(o, t->inc);
	rec_put_i(o, t->shard);
	rec_put_u(o, (uint64_t)t->state);
	rec_put_u(o, (uint64_t)t->read_all);
	rec_put_u(o, (uint64_t)t->pending);
	rec_put_i(o, t->start_round);
	rec_put_u(o, t->lease_id);
	enc_ids(o, t->acks, t->nacks);
	enc_ids(o, t->told, t->ntold);
	enc_ids(o, t->skips, t->nskips);
	enc_ids(o, t->last, t->nlast);
}

void
ds_enc_client(struct rec_out *o, const struct ds_client *c)
{
	rec_put_u(o, c->id);
	rec_put_u(o, c->job->id);
	rec_put_i(o, c->index);
	rec_put_i(o, c->round);
	rec_put_i(o, c->blocked);
}

/* A lease's delivered state: total and ranges. */
void
ds_enc_ranges(struct rec_out *o, const struct ds_lease *l)
{
	rec_put_i(o, l->total);
	rec_put_u(o, l->nr);
	for (size_t i = 0; i < l->nr; i++) {
		rec_put_u(o, l->r[i].a);
		rec_put_u(o, l->r[i].b);
	}
}

void
ds_enc_open(struct rec_out *o, const struct ds_job *j, const struct ds_lease *l)
{
	rec_put_u(o, j->id);
	rec_put_u(o, l->seq);
	rec_put_u(o, l->task != NULL ? l->task->id : 0);
	ds_enc_ranges(o, l);
}

/* A record of type begins in b (emptied first): ds->jbuf for the
 * journal's, a snapshot's scratch buffer for its records. */
void
ds_rec_begin(struct rec_out *o, struct buf *b, int type)
{
	buf_reset(b);
	o->b = b;
	o->err = 0;
	rec_put_u(o, (uint64_t)type);
}

/*
 * The one way the state changes, live and in replay alike: the change is
 * made as a record (ds_rec_begin), applied by the function that applies
 * it in replay (apply_one; live, its events are sent), and then handed to
 * the journal. A record that cannot be made or applied (memory ran out)
 * changes nothing: -1, and msg says why.
 */
int
ds_commit(struct ds *ds, struct rec_out *o, int64_t now, char *msg,
    size_t msglen)
{
	struct rec_in in;
	char err[256];
	int r;

	if (o->err) {
		snprintf(msg, msglen, "out of memory");
		return -1;
	}
	rec_in_init(&in, o->b->data, o->b->len);
	r = apply_one(ds, &in, now, err, sizeof(err));
	if (r < 0) {
		snprintf(msg, msglen, "%s", err);
		return -1;
	}
	if (ds->jfn != NULL)
		ds->jfn(o->b->data, o->b->len, ds->jarg);
	return 0;
}

/*
 * The changes: each makes the record of a thing as it is to be and
 * commits it. -1: memory ran out, and nothing changed.
 */

int
ds_put_dataset(struct ds *ds, uint64_t id, const struct ds_dataset_def *def,
    const char *fp)
{
	struct rec_out o;

	ds_rec_begin(&o, &ds->jbuf, R_DATASET);
	enc_dataset(&o, id, def, fp);
	return ds_commit(ds, &o, 0, NULL, 0);
}

int
ds_put_dsname(struct ds *ds, const struct ds_dataset *d, const char *name)
{
	struct rec_out o;

	ds_rec_begin(&o, &ds->jbuf, R_DSNAME);
	rec_put_u(&o, d->id);
	rec_put_s(&o, name);
	return ds_commit(ds, &o, 0, NULL, 0);
}

int
ds_put_worker(struct ds *ds, const char *name, uint64_t inc,
    const char *address, const char *host, int live)
{
	struct rec_out o;

	ds_rec_begin(&o, &ds->jbuf, R_WORKER);
	enc_worker(&o, name, inc, address, host, live);
	return ds_commit(ds, &o, 0, NULL, 0);
}

/* now: when a new job's idleness starts (its first client ends it). */
int
ds_put_job(struct ds *ds, const struct ds_job *x, int64_t now)
{
	struct rec_out o;

	ds_rec_begin(&o, &ds->jbuf, R_JOB2);
	ds_enc_job(&o, x);
	return ds_commit(ds, &o, now, NULL, 0);
}

int
ds_put_open(struct ds *ds, const struct ds_job *j, const struct ds_lease *l)
{
	struct rec_out o;

	ds_rec_begin(&o, &ds->jbuf, R_OPEN);
	ds_enc_open(&o, j, l);
	return ds_commit(ds, &o, 0, NULL, 0);
}

int
ds_put_task(struct ds *ds, const struct ds_task *x)
{
	struct rec_out o;

	ds_rec_begin(&o, &ds->jbuf, R_TASK);
	ds_enc_task(&o, x);
	return ds_commit(ds, &o, 0, NULL, 0);
}

/* now: when the client was last seen. */
int
ds_put_client(struct ds *ds, const struct ds_client *x, int64_t now)
{
	struct rec_out o;

	ds_rec_begin(&o, &ds->jbuf, R_CLIENT);
	ds_enc_client(&o, x);
	return ds_commit(ds, &o, now, NULL, 0);
}

/* Removes a job (R_JOB_GONE job), a task (R_TASK_GONE job task) or a job
 * client (R_CLIENT_GONE client; now is when its job went idle). Cannot
 * fail: the record fits in the room ds_new made, and applies to what
 * exists. */
void
ds_gone(struct ds *ds, int type, uint64_t a, uint64_t b, int64_t now)
{
	struct rec_out o;

	ds_rec_begin(&o, &ds->jbuf, type);
	rec_put_u(&o, a);
	if (type == R_TASK_GONE)
		rec_put_u(&o, b);
	(void)ds_commit(ds, &o, now, NULL, 0);
}

/* Whether the record was cut short, bad, or goes on past its fields. */
int
ds_ended_badly(const struct rec_in *in)
{
	return in->err || in->p != in->end;
}

static struct ds_job *
job_by_id(struct ds *ds, uint64_t id)
{
	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link)
		if (j->id == id)
			return j;
	return NULL;
}

static struct ds_dataset *
dataset_by_id(struct ds *ds, uint64_t id)
{
	for (struct ds_dataset *d = ds->datasets; d != NULL; d = d->next)
		if (d->id == id)
			return d;
	return NULL;
}

static int
apply_counters(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t v[7];

	for (int i = 0; i < 7; i++)
		v[i] = rec_get_u(in);
	if (ds_ended_badly(in))
		return errbuf_say(err, errlen, "counters: a bad record");
	ds->next_dataset = v[0];
	ds->next_job = v[1];
	ds->next_task = v[2];
	ds->next_client = v[3];
	ds->leases = (unsigned long)v[4];
	ds->releases = (unsigned long)v[5];
	ds->collected = (unsigned long)v[6];
	return 0;
}

static int
apply_dataset(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t id = rec_get_u(in);
	char *name = rec_get_s(in, DS_NAME_MAX);
	char *reader = rec_get_s(in, DS_TEXT_MAX);
	uint64_t framing = rec_get_u(in), skips = rec_get_u(in), n, h;
	size_t fplen;
	const char *fp = rec_get_sv(in, 16, &fplen);
	struct ds_dataset *d = NULL;
	char fpx[17];
	int r = -1;

	n = rec_get_u(in);
	if (in->err || n == 0 || n > UINT32_MAX || n > rec_left(in) / 2 ||
	    reader == NULL || *reader == '\0' || framing > FRAME_LEN32 ||
	    skips > 1 || fp == NULL || fplen != 16) {
		errbuf_say(err, errlen, "dataset: a bad record");
		goto out;
	}
	if (id == 0 || dataset_by_id(ds, id) != NULL ||
	    (name != NULL &&
	        (!ds_name_ok(name) || ds_dataset_find(ds, name) != NULL))) {
		errbuf_say(err, errlen,
		    "dataset %" PRIu64 ": its id or name is taken", id);
		goto out;
	}
	if ((d = calloc(1, sizeof(*d))) == NULL ||
	    (d->splits = calloc((size_t)n, sizeof(char *))) == NULL) {
		errbuf_say(err, errlen, "out of memory");
		goto out;
	}
	h = ds_fp_head(reader, (enum framing)framing, (int)skips);
	for (uint64_t i = 0; i < n; i++) {
		size_t len;
		const char *s = rec_get_sv(in, DS_SPLIT_MAX, &len);
		char *c;
		if (s == NULL || len == 0 || memchr(s, '\n', len) != NULL) {
			errbuf_say(err, errlen,
			    "dataset %" PRIu64 ": split %" PRIu64 " is bad", id,
			    i);
			goto out;
		}
		if ((c = malloc(len + 1)) == NULL) {
			errbuf_say(err, errlen, "out of memory");
			goto out;
		}
		memcpy(c, s, len);
		c[len] = '\0';
		d->splits[d->nsplits++] = c;
		h = ds_fnv(h, c, len + 1);
	}
	snprintf(fpx, sizeof(fpx), "%016" PRIx64, h);
	if (ds_ended_badly(in) || memcmp(fpx, fp, 16) != 0) {
		errbuf_say(err, errlen,
		    "dataset %" PRIu64 ": a bad record, or splits that do not "
		    "match its fingerprint",
		    id);
		goto out;
	}
	d->id = id;
	d->name = name;
	d->reader = reader;
	name = reader = NULL;
	d->framing = (enum framing)framing;
	d->reader_skips = (int)skips;
	memcpy(d->fp, fpx, sizeof(fpx));
	d->next = ds->datasets;
	ds->datasets = d;
	if (id > ds->next_dataset)
		ds->next_dataset = id;
	d = NULL;
	r = 0;
out:
	free(name);
	free(reader);
	if (d != NULL)
		ds_dataset_free(d);
	return r;
}

static int
apply_dsname(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t id = rec_get_u(in);
	char *name = rec_get_s(in, DS_NAME_MAX);
	struct ds_dataset *d = dataset_by_id(ds, id);

	if (ds_ended_badly(in) || name == NULL || d == NULL ||
	    d->name != NULL || !ds_name_ok(name) ||
	    ds_dataset_find(ds, name) != NULL) {
		free(name);
		return errbuf_say(err, errlen,
		    "dataset %" PRIu64 ": a name it cannot take", id);
	}
	d->name = name;
	return 0;
}

static int
apply_worker(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	char *name = rec_get_s(in, DS_TEXT_MAX);
	uint64_t inc = rec_get_u(in);
	char *addr = rec_get_s(in, DS_TEXT_MAX);
	char *host = rec_get_s(in, DS_TEXT_MAX);
	uint64_t live = rec_get_u(in);
	struct ds_worker *w;

	if (ds_ended_badly(in) || name == NULL || *name == '\0' ||
	    addr == NULL || host == NULL || live > 1)
		goto fail;
	if ((w = ds_worker_find(ds, name)) == NULL) {
		if ((w = calloc(1, sizeof(*w))) == NULL)
			goto fail;
		w->name = name;
		w->next = ds->workers;
		ds->workers = w;
	} else {
		free(name);
	}
	free(w->address);
	free(w->host);
	w->address = addr;
	w->host = host;
	w->inc = inc;
	w->live = (int)live;
	/* A worker that comes up hears of its tasks; restored, every one. */
	if (live || ds->replaying)
		w->changed = 1;
	return 0;
fail:
	free(name);
	free(addr);
	free(host);
	return errbuf_say(err, errlen, "worker: a bad record");
}

static int
same_name(const char *a, const char *b)
{
	return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

/* A job's record: R_JOB, or R_JOB2 (v2) with the fields after. */
static int
apply_job(struct ds *ds, struct rec_in *in, int v2, int64_t now, char *err,
    size_t errlen)
{
	uint64_t id = rec_get_u(in);
	char *name = rec_get_s(in, DS_NAME_MAX);
	uint64_t dsid = rec_get_u(in), mode = rec_get_u(in);
	uint64_t eff = rec_get_u(in), repeat = rec_get_u(in);
	uint64_t seed = rec_get_u(in), consumers = rec_get_u(in);
	uint64_t shards = rec_get_u(in), finished = rec_get_u(in);
	char *error = rec_get_s(in, DS_TEXT_MAX);
	uint64_t next = rec_get_u(in), done = rec_get_u(in);
	int64_t latest = rec_get_i(in), target = rec_get_i(in);
	int64_t delta = rec_get_i(in);
	uint64_t hasfs = rec_get_u(in);
	const unsigned char *fs = NULL;
	struct ds_dataset *d = dataset_by_id(ds, dsid);
	struct ds_job *j;

	uint64_t iteration = 1, retired = 0, kept = 0;
	char *start = NULL, *secret = NULL, *run = NULL;

	if (!in->err && hasfs == 1 && shards <= rec_left(in))
		fs = rec_get_bytes(in, (size_t)shards);
	if (v2) {
		iteration = rec_get_u(in);
		retired = rec_get_u(in);
		start = rec_get_s(in, DS_TEXT_MAX);
		secret = rec_get_s(in, 32);
		run = rec_get_s(in, DS_NAME_MAX);
		kept = rec_get_u(in);
	}
	if (ds_ended_badly(in) || mode > SHARD_HINT || hasfs > 1 ||
	    finished > 1 || iteration == 0 || retired > 1 || kept > 1 ||
	    (secret != NULL && strlen(secret) != 32 && *secret != '\0') ||
	    (run != NULL && !ds_run_ok(run)) ||
	    (mode == SHARD_FILE_OR_DATA ?
	            eff != SHARD_FILE && eff != SHARD_DATA :
	            eff != mode) ||
	    repeat > (1UL << 30) || consumers > 4096 || seed > INT64_MAX ||
	    (int)hasfs != ds_is_static((enum shard_mode)mode) ||
	    (hasfs ? fs == NULL || shards == 0 : shards != 0) || d == NULL ||
	    id == 0 || (name != NULL && !ds_name_ok(name)))
		goto fail;
	if ((j = job_by_id(ds, id)) != NULL) {
		if (j->ds != d || j->mode != (enum shard_mode)mode ||
		    j->eff != (enum shard_mode)eff ||
		    j->repeat != (long)repeat || j->seed != seed ||
		    j->consumers != (long)consumers ||
		    j->shards != (long)shards || !same_name(j->name, name))
			goto fail;
		free(name);
	} else {
		uint64_t total =
		    repeat == 0 ? UINT64_MAX : repeat * (uint64_t)d->nsplits;
		if ((name != NULL && !retired &&
		        ds_job_find(ds, name) != NULL) ||
		    next > total || done > next)
			goto fail;
		if ((j = calloc(1, sizeof(*j))) == NULL ||
		    (j->leases = calloc(1, sizeof(*j->leases))) == NULL ||
		    (hasfs &&
		        (j->finished_shards = calloc((size_t)shards, 1)) ==
		            NULL)) {
			if (j != NULL)
				ds_job_free(j);
			goto fail;
		}
		j->id = id;
		j->name = name;
		j->ds = d;
		j->mode = (enum shard_mode)mode;
		j->eff = (enum shard_mode)eff;
		j->repeat = (long)repeat;
		j->seed = seed;
		j->consumers = (long)consumers;
		j->shards = (long)shards;
		j->total = total;
		j->next = next;
		j->done = done;
		j->idle_since = now;
		j->link = ds->jobs;
		ds->jobs = j;
		if (id > ds->next_job)
			ds->next_job = id;
	}
	j->finished = (int)finished;
	free(j->error);
	j->error = error;
	j->iteration = iteration;
	j->retired = (int)retired;
	free(j->start);
	j->start = start;
	snprintf(j->secret, sizeof(j->secret), "%s",
	    secret != NULL ? secret : "");
	free(secret);
	free(j->run);
	j->run = run;
	j->kept = (int)kept;
	j->rr_latest = latest;
	j->rr_target = target;
	j->rr_delta = delta;
	if (fs != NULL)
		memcpy(j->finished_shards, fs, (size_t)shards);
	return 0;
fail:
	free(name);
	free(error);
	free(start);
	free(secret);
	free(run);
	return errbuf_say(err, errlen, "job %" PRIu64 ": a bad record", id);
}

static int
apply_job_gone(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t id = rec_get_u(in);
	struct ds_job *j = job_by_id(ds, id), **pp;

	if (ds_ended_badly(in) || j == NULL)
		return errbuf_say(err, errlen,
		    "job %" PRIu64 " to collect: none", id);
	for (pp = &ds->jobs; *pp != j; pp = &(*pp)->link)
		;
	*pp = j->link;
	ds->collected++;
	ds_job_free(j);
	return 0;
}

/* A list of ids, *v allocated (NULL when empty). */
static int
get_ids(struct rec_in *in, uint64_t **v, size_t *n)
{
	uint64_t k = rec_get_u(in);

	*v = NULL;
	*n = 0;
	if (in->err || k > rec_left(in))
		return in->err = 1, -1;
	if (k == 0)
		return 0;
	if ((*v = malloc((size_t)k * sizeof(**v))) == NULL)
		return in->err = 1, -1;
	for (uint64_t i = 0; i < k; i++)
		(*v)[i] = rec_get_u(in);
	*n = (size_t)k;
	return in->err ? -1 : 0;
}

static int
apply_task(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t jid = rec_get_u(in), id = rec_get_u(in);
	size_t wlen;
	const char *wname = rec_get_sv(in, DS_TEXT_MAX, &wlen);
	uint64_t inc = rec_get_u(in);
	int64_t shard = rec_get_i(in);
	uint64_t state = rec_get_u(in), read_all = rec_get_u(in);
	uint64_t pending = rec_get_u(in);
	int64_t start = rec_get_i(in);
	uint64_t lease_id = rec_get_u(in);
	uint64_t *v[4] = {NULL, NULL, NULL, NULL};
	size_t n[4] = {0, 0, 0, 0};
	struct ds_job *j = job_by_id(ds, jid);
	struct ds_worker *w = NULL;
	struct ds_task *t;

	for (int i = 0; i < 4; i++)
		if (get_ids(in, &v[i], &n[i]) < 0)
			break;
	for (w = ds->workers; wname != NULL && w != NULL; w = w->next)
		if (strlen(w->name) == wlen &&
		    memcmp(w->name, wname, wlen) == 0)
			break;
	if (ds_ended_badly(in) || j == NULL || w == NULL || id == 0 ||
	    shard < 0 || shard > INT32_MAX || state > DS_TASK_FAILED ||
	    read_all > 1 || pending > 1)
		goto fail;
	if ((t = ds_job_task(j, id)) == NULL) {
		struct ds_task **pp;
		for (struct ds_job *k = ds->jobs; k != NULL; k = k->link)
			if (ds_job_task(k, id) != NULL)
				goto fail;
		if ((t = calloc(1, sizeof(*t))) == NULL)
			goto fail;
		t->id = id;
		t->job = j;
		for (pp = &j->tasks; *pp != NULL; pp = &(*pp)->next)
			;
		*pp = t;
		if (id > ds->next_task)
			ds->next_task = id;
	}
	t->w = w;
	t->inc = inc;
	t->shard = (long)shard;
	t->state = (enum ds_task_state)state;
	t->read_all = (int)read_all;
	t->pending = (int)pending;
	t->start_round = start;
	t->lease_id = lease_id;
	free(t->acks);
	free(t->told);
	free(t->skips);
	free(t->last);
	t->acks = v[0];
	t->nacks = n[0];
	t->told = v[1];
	t->ntold = n[1];
	t->skips = v[2];
	t->nskips = n[2];
	t->last = v[3];
	t->nlast = t->caplast = n[3];
	/* Restored, a worker hears of its tasks; live, the change that made
	 * the record says whether it must (ds_tasks_changed). */
	if (ds->replaying)
		w->changed = 1;
	return 0;
fail:
	for (int i = 0; i < 4; i++)
		free(v[i]);
	return errbuf_say(err, errlen,
	    "task %" PRIu64 " of job %" PRIu64 ": a bad record", id, jid);
}

static int
apply_task_gone(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t jid = rec_get_u(in), id = rec_get_u(in);
	struct ds_job *j = job_by_id(ds, jid);
	struct ds_task *t = j != NULL ? ds_job_task(j, id) : NULL, **pp;

	if (ds_ended_badly(in) || t == NULL)
		return errbuf_say(err, errlen,
		    "task %" PRIu64 " of job %" PRIu64 " to end: none", id,
		    jid);
	ds_task_release_leases(ds, t);
	for (pp = &j->tasks; *pp != t; pp = &(*pp)->next)
		;
	*pp = t->next;
	ds_task_free(t);
	return 0;
}

static int
apply_client(struct ds *ds, struct rec_in *in, int64_t now, char *err,
    size_t errlen)
{
	uint64_t id = rec_get_u(in), jid = rec_get_u(in);
	int64_t index = rec_get_i(in), round = rec_get_i(in);
	int64_t blocked = rec_get_i(in);
	struct ds_job *j = job_by_id(ds, jid);
	struct ds_client *c = ds_client_find(ds, id);

	if (ds_ended_badly(in) || j == NULL || id == 0 || index < 0 ||
	    index > 4095 || (c != NULL && c->job != j))
		return errbuf_say(err, errlen,
		    "client %" PRIu64 " of job %" PRIu64 ": a bad record", id,
		    jid);
	if (c == NULL) {
		if ((c = calloc(1, sizeof(*c))) == NULL)
			return errbuf_say(err, errlen, "out of memory");
		c->id = id;
		c->job = j;
		c->next = j->clients;
		j->clients = c;
		j->nclients++;
		j->idle_since = 0;
		if (id > ds->next_client)
			ds->next_client = id;
	}
	c->last_seen = now;
	c->index = (long)index;
	c->round = round;
	c->blocked = blocked;
	return 0;
}

static int
apply_client_gone(struct ds *ds, struct rec_in *in, int64_t now, char *err,
    size_t errlen)
{
	uint64_t id = rec_get_u(in);
	struct ds_client *c = ds_client_find(ds, id);
	struct ds_job *j;

	if (ds_ended_badly(in) || c == NULL)
		return errbuf_say(err, errlen,
		    "client %" PRIu64 " to release: none", id);
	j = c->job;
	ds_client_unlink(j, c);
	if (j->nclients == 0)
		j->idle_since = now;
	free(c);
	return 0;
}

/* The open lease seq of dynamic job jid, for the records that name one. */
static struct ds_lease *
lease_of(struct ds *ds, uint64_t jid, uint64_t seq, struct ds_job **jp)
{
	struct ds_job *j = job_by_id(ds, jid);

	*jp = j;
	if (j == NULL || j->eff != SHARD_DYNAMIC)
		return NULL;
	return ds_map_get(j->leases, seq);
}

/* A lease's total and ranges, as enc_ranges wrote them. */
static int
get_ranges(struct rec_in *in, struct ds_lease *l)
{
	int64_t total = rec_get_i(in);
	uint64_t n = rec_get_u(in);

	if (in->err || total < -1 || n > rec_left(in) / 2)
		return in->err = 1, -1;
	l->nr = 0;
	l->total = total;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t a = rec_get_u(in), b = rec_get_u(in);
		if (in->err || a >= b ||
		    span_add(&l->r, &l->nr, &l->capr, a, b) < 0)
			return in->err = 1, -1;
	}
	return 0;
}

static int
apply_open(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t jid = rec_get_u(in), seq = rec_get_u(in);
	uint64_t tid = rec_get_u(in);
	struct ds_job *j;
	struct ds_lease *l = lease_of(ds, jid, seq, &j);
	struct ds_task *t = NULL;

	if (in->err || j == NULL || j->eff != SHARD_DYNAMIC || l != NULL ||
	    seq >= j->next || (tid != 0 && (t = ds_job_task(j, tid)) == NULL))
		goto fail;
	if ((l = calloc(1, sizeof(*l))) == NULL)
		goto fail;
	l->seq = seq;
	if (get_ranges(in, l) < 0 || ds_ended_badly(in) ||
	    ds_map_put(j->leases, l) < 0) {
		ds_lease_free(l);
		goto fail;
	}
	l->task = t;
	ds_list_push(t != NULL ? &t->leases : &j->queue, l, 0);
	return 0;
fail:
	return errbuf_say(err, errlen,
	    "open seq %" PRIu64 " of job %" PRIu64 ": a bad record", seq, jid);
}

static int
apply_lease(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t jid = rec_get_u(in), seq = rec_get_u(in);
	struct ds_job *j;
	struct ds_lease *l = lease_of(ds, jid, seq, &j), x = {0};

	/* Read into x first: a bad record leaves l as it was. */
	if (in->err || l == NULL || get_ranges(in, &x) < 0 ||
	    ds_ended_badly(in)) {
		free(x.r);
		return errbuf_say(err, errlen,
		    "delivered of seq %" PRIu64 " of job %" PRIu64
		    ": a bad record, or no such lease",
		    seq, jid);
	}
	free(l->r);
	l->r = x.r;
	l->nr = x.nr;
	l->capr = x.capr;
	l->total = x.total;
	return 0;
}

static int
apply_done(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t jid = rec_get_u(in), seq = rec_get_u(in);
	struct ds_job *j;
	struct ds_lease *l = lease_of(ds, jid, seq, &j);

	if (ds_ended_badly(in) || l == NULL)
		return errbuf_say(err, errlen,
		    "seq %" PRIu64 " of job %" PRIu64 " done: not open", seq,
		    jid);
	ds_list_unlink(l->task != NULL ? &l->task->leases : &j->queue, l);
	ds_map_del(j->leases, seq);
	ds_lease_free(l);
	j->done++;
	return 0;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* Room in t's list of last leased seqs for n. */
static int
last_reserve(struct ds_task *t, size_t n)
{
	uint64_t *v;

	if (n <= t->caplast)
		return 0;
	if ((v = realloc(t->last, n * sizeof(*v))) == NULL)
		return -1;
	t->last = v;
	t->caplast = n;
	return 0;
}

/* R_GRANT: job, task, lease request id, and runs of seqs (first, count),
 * each waiting in the job's queue or the next new one. Checked and its
 * memory found first: a grant is whole or not at all. */
static int
apply_grant(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t jid = rec_get_u(in), tid = rec_get_u(in);
	uint64_t id = rec_get_u(in), runs = rec_get_u(in), next;
	uint64_t seqs[DS_WANT_MAX], waiting[DS_WANT_MAX];
	struct ds_lease *made[DS_WANT_MAX];
	size_t n = 0, nwaiting = 0, nmade = 0, used = 0;
	struct ds_job *j = job_by_id(ds, jid);
	struct ds_task *t = j != NULL ? ds_job_task(j, tid) : NULL;

	if (in->err || runs > DS_WANT_MAX || t == NULL ||
	    j->eff != SHARD_DYNAMIC)
		goto fail;
	for (uint64_t i = 0; i < runs; i++) {
		uint64_t first = rec_get_u(in), count = rec_get_u(in);
		if (in->err || count > DS_WANT_MAX - n ||
		    first > UINT64_MAX - count)
			goto fail;
		for (uint64_t k = 0; k < count; k++)
			seqs[n++] = first + k;
	}
	if (ds_ended_badly(in))
		goto fail;
	next = j->next;
	for (size_t i = 0; i < n; i++) {
		struct ds_lease *l = ds_map_get(j->leases, seqs[i]);
		if (l != NULL && l->task == NULL)
			waiting[nwaiting++] = seqs[i];
		else if (l == NULL && seqs[i] == next && next < j->total)
			next++;
		else
			goto fail;
	}
	/* None of the waiting ones twice. */
	qsort(waiting, nwaiting, sizeof(*waiting), cmp_u64);
	for (size_t i = 1; i < nwaiting; i++)
		if (waiting[i] == waiting[i - 1])
			goto fail;
	for (; nmade < next - j->next; nmade++)
		if ((made[nmade] = calloc(1, sizeof(**made))) == NULL)
			goto nomem;
	if (ds_map_reserve(j->leases, j->leases->count + nmade) < 0 ||
	    (id != 0 && last_reserve(t, n) < 0))
		goto nomem;
	t->lease_id = id;
	t->nlast = 0;
	for (size_t i = 0; i < n; i++) {
		struct ds_lease *l = ds_map_get(j->leases, seqs[i]);
		if (l != NULL) {
			ds_list_unlink(&j->queue, l);
		} else {
			l = made[used++];
			l->seq = seqs[i];
			l->total = -1;
			(void)ds_map_put(j->leases, l); /* reserved */
			j->next++;
		}
		l->task = t;
		ds_list_push(&t->leases, l, 0);
		ds->leases++;
		if (id != 0)
			t->last[t->nlast++] = seqs[i];
	}
	return 0;
nomem:
	while (nmade > 0)
		free(made[--nmade]);
	return errbuf_say(err, errlen,
	    "grant to task %" PRIu64 ": out of memory", tid);
fail:
	return errbuf_say(err, errlen,
	    "grant to task %" PRIu64 " of job %" PRIu64
	    ": a bad record, or seqs neither next nor waiting",
	    tid, jid);
}

static int
apply_one(struct ds *ds, struct rec_in *in, int64_t now, char *err,
    size_t errlen)
{
	uint64_t type = rec_get_u(in);

	switch (in->err ? 0 : type) {
	case R_COUNTERS: return apply_counters(ds, in, err, errlen);
	case R_DATASET: return apply_dataset(ds, in, err, errlen);
	case R_DSNAME: return apply_dsname(ds, in, err, errlen);
	case R_WORKER: return apply_worker(ds, in, err, errlen);
	case R_JOB: return apply_job(ds, in, 0, now, err, errlen);
	case R_JOB2: return apply_job(ds, in, 1, now, err, errlen);
	case R_JOB_GONE: return apply_job_gone(ds, in, err, errlen);
	case R_TASK: return apply_task(ds, in, err, errlen);
	case R_TASK_GONE: return apply_task_gone(ds, in, err, errlen);
	case R_CLIENT: return apply_client(ds, in, now, err, errlen);
	case R_CLIENT_GONE: return apply_client_gone(ds, in, now, err, errlen);
	case R_GRANT: return apply_grant(ds, in, err, errlen);
	case R_OPEN: return apply_open(ds, in, err, errlen);
	case R_LEASE: return apply_lease(ds, in, err, errlen);
	case R_DONE: return apply_done(ds, in, err, errlen);
	default: return errbuf_say(err, errlen, "a record of no known type");
	}
}

int
ds_apply(struct ds *ds, const void *rec, size_t len, int64_t now, char *err,
    size_t errlen)
{
	struct rec_in in;
	int r;

	rec_in_init(&in, rec, len);
	ds->replaying = 1;
	r = apply_one(ds, &in, now, err, errlen);
	ds->replaying = 0;
	return r;
}
