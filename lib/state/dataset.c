/*
 * dataset.c: datasets, jobs, tasks, job clients and split leases.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "dataset.h"
#include "rec.h"
#include "token.h"
#include "vec.h"

/* Open seqs of a job: open addressing, linear probing, no deletes left
 * behind (backward shift). */
struct lease_map {
	struct ds_lease **slot;
	size_t cap, count; /* cap a power of two */
};

struct ds_worker {
	char *name;
	uint64_t inc;
	char *address, *host;
	int changed;
	int live;
	struct ds_worker *next;
};

struct ds {
	struct ds_config cfg;
	ds_observer_fn fn;
	void *arg;
	struct ds_dataset *datasets;
	struct ds_job *jobs;
	struct ds_worker *workers;
	uint64_t next_dataset, next_job, next_task, next_client;
	unsigned long leases, releases, collected;
	ds_journal_fn jfn;
	void *jarg;
	struct buf jbuf;     /* the record being made */
	int applying;        /* in an apply_*: no records from it */
	int replaying;       /* in ds_apply: no events either */
	unsigned long jlost; /* records memory ran out for */
};

/* The longest removal record: its type and two varints. */
#define GONE_MAX 32

/* The journal's records (see "Journal" below). */
enum {
	R_COUNTERS = 1,
	R_DATASET,
	R_DSNAME,
	R_WORKER,
	R_JOB,
	R_JOB_GONE,
	R_TASK,
	R_TASK_GONE,
	R_CLIENT,
	R_CLIENT_GONE,
	R_GRANT,
	R_OPEN,
	R_LEASE,
	R_DONE,
	R_END, /* a snapshot's last: how many records came before */
	R_JOB2 /* R_JOB and its iteration, retirement, start, secret, run,
	        * kept: the one written now (R_JOB is still read) */
};

static void jr_dataset(struct ds *ds, const struct ds_dataset *d);
static void jr_dsname(struct ds *ds, const struct ds_dataset *d);
static void jr_worker(struct ds *ds, const struct ds_worker *w);
static void jr_job(struct ds *ds, const struct ds_job *j);
static void jr_open(struct ds *ds, const struct ds_job *j,
    const struct ds_lease *l);
static void jr_task(struct ds *ds, const struct ds_task *t);
static void jr_client(struct ds *ds, const struct ds_client *c);
static void rec_start(struct ds *ds, struct rec_out *o, int type);
static void enc_ranges(struct rec_out *o, const struct ds_lease *l);
static int commit(struct ds *ds, struct rec_out *o, int64_t now, char *msg,
    size_t msglen);
static void gone(struct ds *ds, int type, uint64_t a, uint64_t b, int64_t now);
static int grant(struct ds *ds, struct ds_task *t, uint64_t id,
    const uint64_t *seqs, size_t n, char *msg, size_t msglen);
static int apply_one(struct ds *ds, struct rec_in *in, int64_t now, char *err,
    size_t errlen);

static int
is_static(enum shard_mode m)
{
	return m == SHARD_FILE || m == SHARD_DATA || m == SHARD_FILE_OR_DATA ||
	    m == SHARD_HINT;
}

static void
emit(struct ds *ds, enum ds_event_type type, const char *worker, uint64_t job)
{
	struct ds_event ev = {type, worker, job};

	if (!ds->replaying)
		ds->fn(&ev, ds->arg);
}

/* The lease map. */

static size_t
hash_seq(uint64_t seq, size_t cap)
{
	seq *= 0x9e3779b97f4a7c15ULL;
	return (size_t)(seq >> 17) & (cap - 1);
}

static struct ds_lease *
map_get(struct lease_map *m, uint64_t seq)
{
	if (m->cap == 0)
		return NULL;
	for (size_t i = hash_seq(seq, m->cap);; i = (i + 1) & (m->cap - 1)) {
		if (m->slot[i] == NULL)
			return NULL;
		if (m->slot[i]->seq == seq)
			return m->slot[i];
	}
}

/* Room in m for n leases, so that the puts up to n cannot fail. */
static int
map_reserve(struct lease_map *m, size_t n)
{
	size_t cap = m->cap != 0 ? m->cap : 64;
	struct ds_lease **s;

	while (n * 2 > cap)
		cap *= 2;
	if (cap == m->cap)
		return 0;
	if ((s = calloc(cap, sizeof(*s))) == NULL)
		return -1;
	for (size_t i = 0; i < m->cap; i++) {
		if (m->slot[i] == NULL)
			continue;
		size_t j = hash_seq(m->slot[i]->seq, cap);
		while (s[j] != NULL)
			j = (j + 1) & (cap - 1);
		s[j] = m->slot[i];
	}
	free(m->slot);
	m->slot = s;
	m->cap = cap;
	return 0;
}

static int
map_put(struct lease_map *m, struct ds_lease *l)
{
	if (map_reserve(m, m->count + 1) < 0)
		return -1;
	size_t i = hash_seq(l->seq, m->cap);
	while (m->slot[i] != NULL)
		i = (i + 1) & (m->cap - 1);
	m->slot[i] = l;
	m->count++;
	return 0;
}

static void
map_del(struct lease_map *m, uint64_t seq)
{
	size_t i = hash_seq(seq, m->cap), j;

	while (m->slot[i] != NULL && m->slot[i]->seq != seq)
		i = (i + 1) & (m->cap - 1);
	if (m->slot[i] == NULL)
		return;
	m->slot[i] = NULL;
	m->count--;
	/* Shift back what the hole would hide from its probe. */
	for (j = (i + 1) & (m->cap - 1); m->slot[j] != NULL;
	     j = (j + 1) & (m->cap - 1)) {
		size_t h = hash_seq(m->slot[j]->seq, m->cap);
		if ((j > i && (h <= i || h > j)) ||
		    (j < i && h <= i && h > j)) {
			m->slot[i] = m->slot[j];
			m->slot[j] = NULL;
			i = j;
		}
	}
}

/* Lease lists. */

static void
list_push(struct ds_lease_list *l, struct ds_lease *x, int front)
{
	x->prev = x->next = NULL;
	if (l->head == NULL) {
		l->head = l->tail = x;
	} else if (front) {
		x->next = l->head;
		l->head->prev = x;
		l->head = x;
	} else {
		x->prev = l->tail;
		l->tail->next = x;
		l->tail = x;
	}
	l->count++;
}

static void
list_unlink(struct ds_lease_list *l, struct ds_lease *x)
{
	if (x->prev != NULL)
		x->prev->next = x->next;
	else
		l->head = x->next;
	if (x->next != NULL)
		x->next->prev = x->prev;
	else
		l->tail = x->prev;
	x->prev = x->next = NULL;
	l->count--;
}

static void
lease_free(struct ds_lease *l)
{
	if (l == NULL)
		return;
	free(l->r);
	free(l);
}

/* Adds [a, b) to what l delivered. */
static int
range_add(struct ds_lease *l, uint64_t a, uint64_t b)
{
	size_t i = 0, j;

	if (a >= b)
		return 0;
	while (i < l->nr && l->r[i].b < a)
		i++;
	/* l->r[i..j) touch [a, b): merge them into one. */
	for (j = i; j < l->nr && l->r[j].a <= b; j++) {
		if (l->r[j].a < a)
			a = l->r[j].a;
		if (l->r[j].b > b)
			b = l->r[j].b;
	}
	if (j == i) {
		if (vec_grow(&l->r, &l->capr, l->nr + 1, sizeof(*l->r)) < 0)
			return -1;
		memmove(l->r + i + 1, l->r + i, (l->nr - i) * sizeof(*l->r));
		l->nr++;
	} else if (j > i + 1) {
		memmove(l->r + i + 1, l->r + j, (l->nr - j) * sizeof(*l->r));
		l->nr -= j - i - 1;
	}
	l->r[i].a = a;
	l->r[i].b = b;
	return 0;
}

static int
lease_complete(const struct ds_lease *l)
{
	if (l->total < 0)
		return 0;
	if (l->total == 0)
		return 1;
	return l->nr == 1 && l->r[0].a == 0 && l->r[0].b >= (uint64_t)l->total;
}

/* Datasets. */

static uint64_t
fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *s = p;

	for (size_t i = 0; i < n; i++) {
		h ^= s[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* A fingerprint's start: what the splits are read with. */
static uint64_t
fp_head(const char *reader, enum framing framing, int skips)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	h = fnv(h, reader, strlen(reader) + 1);
	h = fnv(h, framing_name(framing), strlen(framing_name(framing)) + 1);
	return fnv(h, skips ? "s" : "-", 1);
}

static int
name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 128 || strspn(s, "0123456789") == n)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') &&
		    !(c >= '0' && c <= '9') && c != '-' && c != '_' && c != '.')
			return 0;
	}
	return 1;
}

static void
dataset_free(struct ds_dataset *d)
{
	for (size_t i = 0; i < d->nsplits; i++)
		free(d->splits[i]);
	free(d->splits);
	free(d->reader);
	free(d->name);
	free(d);
}

struct ds_dataset *
ds_dataset_find(struct ds *ds, const char *key)
{
	char *end;
	unsigned long long id = strtoull(key, &end, 10);

	for (struct ds_dataset *d = ds->datasets; d != NULL; d = d->next) {
		if (*key != '\0' && *end == '\0' ?
		        d->id == id :
		        d->name != NULL && strcmp(d->name, key) == 0)
			return d;
	}
	return NULL;
}

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
	if (name != NULL && !name_ok(name)) {
		snprintf(msg, msglen,
		    "dataset name %s: 1 to 128 of A-Z a-z 0-9 - _ ., not all "
		    "digits",
		    name);
		return ST_INVALID_ARGUMENT;
	}
	h = fp_head(reader, framing, skips);
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
		h = fnv(h, s, n + 1);
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
			jr_dsname(ds, d);
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
	jr_dataset(ds, d);
	*out = d;
	*created = 1;
	return ST_OK;
oom:
	if (d != NULL)
		dataset_free(d);
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

/* Tasks. */

static struct ds_worker *
worker_find(struct ds *ds, const char *name)
{
	for (struct ds_worker *w = ds->workers; w != NULL; w = w->next)
		if (strcmp(w->name, name) == 0)
			return w;
	return NULL;
}

static void
tasks_changed(struct ds *ds, struct ds_worker *w)
{
	w->changed = 1;
	emit(ds, DS_EV_TASKS, w->name, 0);
}

static long
static_index(struct ds *ds, const char *name)
{
	for (size_t i = 0; i < ds->cfg.nstatic; i++)
		if (strcmp(ds->cfg.static_workers[i], name) == 0)
			return (long)i;
	return -1;
}

enum status
ds_worker_admit(struct ds *ds, const char *name, char *msg, size_t msglen)
{
	struct buf list = {0};

	if (ds->cfg.nstatic == 0 || static_index(ds, name) >= 0)
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

/* Makes worker w's task in job j, if it should have one. */
static void
task_make(struct ds *ds, struct ds_job *j, struct ds_worker *w, int pending)
{
	struct ds_task *t, **pp;
	long shard = 0;

	if (j->finished || j->kept || !w->live)
		return;
	if (is_static(j->mode)) {
		if ((shard = static_index(ds, w->name)) < 0)
			return;
	}
	if ((t = calloc(1, sizeof(*t))) == NULL)
		return;
	t->id = ++ds->next_task;
	t->job = j;
	t->w = w;
	t->inc = w->inc;
	t->shard = shard;
	t->state = DS_TASK_RUNNING;
	t->pending = pending && j->consumers > 0;
	t->start_round = 0;
	for (pp = &j->tasks; *pp != NULL; pp = &(*pp)->next)
		;
	*pp = t;
	jr_task(ds, t);
	if (t->pending && j->rr_target < 0) {
		j->rr_delta = 1;
		j->rr_target = j->rr_latest + j->rr_delta;
		jr_job(ds, j);
	}
	tasks_changed(ds, w);
}

static void
task_free(struct ds_task *t)
{
	struct ds_lease *l;

	while ((l = t->leases.head) != NULL) {
		list_unlink(&t->leases, l);
		lease_free(l);
	}
	free(t->acks);
	free(t->told);
	free(t->skips);
	free(t->last);
	free(t);
}

/* t's leases go to the front of its job's queue, in order. */
static void
task_release_leases(struct ds *ds, struct ds_task *t)
{
	struct ds_job *j = t->job;
	struct ds_lease *l;

	if (t->leases.count == 0)
		return;
	while ((l = t->leases.tail) != NULL) {
		list_unlink(&t->leases, l);
		l->task = NULL;
		list_push(&j->queue, l, 1);
		ds->releases++;
	}
	emit(ds, DS_EV_SPLITS, NULL, j->id);
}

/* Removes t from its job once no client is left to hear of its end. */
static void
task_settle(struct ds *ds, struct ds_task *t)
{
	if (t->state != DS_TASK_FAILED || t->nacks > 0)
		return;
	gone(ds, R_TASK_GONE, t->job->id, t->id, 0);
}

static void job_check_done(struct ds *ds, struct ds_job *j);

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
	jr_task(ds, t);
	tasks_changed(ds, t->w);
	task_settle(ds, t);
	if (j->rr_target >= 0) {
		/* A pending task that failed: the next one's turn. */
		int any = 0;
		for (struct ds_task *u = j->tasks; u != NULL; u = u->next)
			any |= u->pending && u->state == DS_TASK_RUNNING;
		if (!any) {
			j->rr_target = -1;
			jr_job(ds, j);
		}
	}
	job_check_done(ds, j);
}

/* Jobs. */

static void
job_finish(struct ds *ds, struct ds_job *j)
{
	if (j->finished)
		return;
	j->finished = 1;
	jr_job(ds, j);
	emit(ds, DS_EV_SPLITS, NULL, j->id);
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		tasks_changed(ds, t->w);
}

static void
job_check_done(struct ds *ds, struct ds_job *j)
{
	int running = 0, finished = 0;

	if (j->finished)
		return;
	if (j->eff == SHARD_DYNAMIC) {
		if (j->total != UINT64_MAX && j->done >= j->total)
			job_finish(ds, j);
		return;
	}
	if (j->finished_shards != NULL) {
		for (long i = 0; i < j->shards; i++)
			if (!j->finished_shards[i])
				return;
		job_finish(ds, j);
		return;
	}
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next) {
		running += t->state == DS_TASK_RUNNING;
		finished += t->read_all;
	}
	if (running == 0 && finished > 0)
		job_finish(ds, j);
}

static void
client_unlink(struct ds_job *j, struct ds_client *c)
{
	struct ds_client **pp;

	for (pp = &j->clients; *pp != c; pp = &(*pp)->next)
		;
	*pp = c->next;
	j->nclients--;
}

/*
 * client no longer reads t: it owes t's end no answer (a client that says
 * so of a running task, such as a --local reader skipping another host's
 * task, is not waited for when t fails).
 */
static void ids_add(uint64_t **v, size_t *n, size_t *cap, uint64_t id);

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
		jr_task(ds, t);
	task_settle(ds, t);
}

static void rr_settle(struct ds *ds, struct ds_job *j);

void
ds_client_release(struct ds *ds, struct ds_client *c, int64_t now)
{
	struct ds_job *j = c->job;
	struct ds_task *t, *next;
	uint64_t id = c->id;

	gone(ds, R_CLIENT_GONE, id, 0, now); /* frees c */
	for (t = j->tasks; t != NULL; t = next) {
		next = t->next;
		task_ack(ds, t, id);
	}
	rr_settle(ds, j);
}

/* A run's id: as a name, but digits alone will do (an epoch). */
static int
run_ok(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && n <= 128 &&
	    strspn(s,
	        "0123456789abcdefghijklmnopqrstuvwxyz"
	        "ABCDEFGHIJKLMNOPQRSTUVWXYZ-_.") == n;
}

static void
job_free(struct ds_job *j)
{
	struct ds_lease *l;

	while (j->tasks != NULL) {
		struct ds_task *t = j->tasks;
		j->tasks = t->next;
		task_free(t);
	}
	while (j->clients != NULL) {
		struct ds_client *c = j->clients;
		j->clients = c->next;
		free(c);
	}
	while ((l = j->queue.head) != NULL) {
		list_unlink(&j->queue, l);
		lease_free(l);
	}
	if (j->leases != NULL) {
		free(j->leases->slot);
		free(j->leases);
	}
	free(j->order);
	free(j->finished_shards);
	free(j->name);
	free(j->error);
	free(j->start);
	free(j->run);
	free(j);
}

struct ds_job *
ds_job_find(struct ds *ds, const char *key)
{
	char *end;
	unsigned long long id = strtoull(key, &end, 10);

	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link)
		if (*key != '\0' && *end == '\0' ? j->id == id :
		                                   j->name != NULL &&
		            !j->retired && strcmp(j->name, key) == 0)
			return j;
	return NULL;
}

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
		    map_get(j->leases, (uint64_t)json_integer_value(seq)) !=
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
		if (map_put(j->leases, l) < 0) {
			free(l);
			snprintf(msg, msglen, "out of memory");
			return ST_RESOURCE_EXHAUSTED;
		}
		list_push(&j->queue, l, 0);
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
			if (range_add(l, (uint64_t)json_integer_value(a),
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
			job_free(j);
		snprintf(msg, msglen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	if (token_random(j->secret, sizeof(j->secret)) < 0) {
		job_free(j);
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
	if (is_static(mode)) {
		j->shards = (long)ds->cfg.nstatic;
		if (mode == SHARD_FILE_OR_DATA)
			j->eff = d->nsplits >= ds->cfg.nstatic ? SHARD_FILE :
			                                         SHARD_DATA;
		if ((j->finished_shards = calloc((size_t)j->shards, 1)) ==
		    NULL) {
			job_free(j);
			snprintf(msg, msglen, "out of memory");
			return ST_RESOURCE_EXHAUSTED;
		}
	}
	if (st != NULL && (s = job_restore(j, st, msg, msglen)) != ST_OK) {
		job_free(j);
		return s;
	}
	j->id = ++ds->next_job;
	*out = j;
	return ST_OK;
}

static void job_collect(struct ds *ds, struct ds_job *j);
static void job_unkeep(struct ds *ds, struct ds_job *j);

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
	if (name != NULL && !name_ok(name)) {
		snprintf(msg, msglen,
		    "job name %s: 1 to 128 of A-Z a-z 0-9 - _ ., not all digits",
		    name);
		return ST_INVALID_ARGUMENT;
	}
	if (json_object_get(req, "run") != NULL &&
	    (run == NULL || !run_ok(run) || name == NULL)) {
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
	if (is_static(mode) && ds->cfg.nstatic == 0) {
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
			jr_job(ds, old);
			if (old->nclients == 0)
				job_collect(ds, old);
		}
		j->iteration = iteration;
		j->link = ds->jobs;
		ds->jobs = j;
		*created = 1;
		jr_job(ds, j);
		for (struct ds_lease *l = j->queue.head; l != NULL; l = l->next)
			jr_open(ds, j, l);
		for (struct ds_worker *w = ds->workers; w != NULL; w = w->next)
			task_make(ds, j, w, 0);
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
	jr_client(ds, c);
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

static const char *
task_state_name(const struct ds_task *t)
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
		        "worker", t->w->name, "state", task_state_name(t),
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

struct ds_client *
ds_client_find(struct ds *ds, uint64_t id)
{
	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link)
		for (struct ds_client *c = j->clients; c != NULL; c = c->next)
			if (c->id == id)
				return c;
	return NULL;
}

/* Records that elements [a, b) of seq were delivered (total: -1 or all):
 * R_LEASE, the lease's ranges with [a, b) added, or R_DONE once they
 * cover it. */
static void
delivered(struct ds *ds, struct ds_job *j, uint64_t seq, uint64_t a, uint64_t b,
    int64_t total)
{
	struct ds_lease *l = map_get(j->leases, seq), x = {0};
	struct rec_out o;

	if (l == NULL)
		return; /* done already, or never leased */
	x.total = total >= 0 ? total : l->total;
	if (l->nr > 0 && (x.r = malloc(l->nr * sizeof(*x.r))) == NULL)
		return;
	if (l->nr > 0)
		memcpy(x.r, l->r, l->nr * sizeof(*x.r));
	x.nr = x.capr = l->nr;
	if (range_add(&x, a, b) < 0) {
		free(x.r);
		return;
	}
	if (lease_complete(&x)) {
		rec_start(ds, &o, R_DONE);
		rec_put_u(&o, j->id);
		rec_put_u(&o, seq);
	} else {
		rec_start(ds, &o, R_LEASE);
		rec_put_u(&o, j->id);
		rec_put_u(&o, seq);
		enc_ranges(&o, &x);
	}
	free(x.r);
	(void)commit(ds, &o, 0, NULL, 0);
}

/* What "delivered" lists: [seq, first, end, total] each. */
static int
deliveries(struct ds *ds, struct ds_job *j, json_t *list, char *msg,
    size_t msglen)
{
	json_t *v;
	size_t i;

	json_array_foreach(list, i, v) {
		json_t *s = json_array_get(v, 0), *a = json_array_get(v, 1);
		json_t *b = json_array_get(v, 2), *n = json_array_get(v, 3);
		if (!json_is_integer(s) || !json_is_integer(a) ||
		    !json_is_integer(b) || json_integer_value(s) < 0 ||
		    json_integer_value(a) < 0 ||
		    json_integer_value(b) < json_integer_value(a)) {
			snprintf(msg, msglen,
			    "delivered[%zu] must be [seq, first, end, total]",
			    i);
			return -1;
		}
		if (j->eff == SHARD_DYNAMIC)
			delivered(ds, j, (uint64_t)json_integer_value(s),
			    (uint64_t)json_integer_value(a),
			    (uint64_t)json_integer_value(b),
			    json_is_integer(n) ? json_integer_value(n) : -1);
	}
	return 0;
}

static struct ds_task *
job_task(struct ds_job *j, uint64_t id)
{
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		if (t->id == id)
			return t;
	return NULL;
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
		jr_task(ds, t);
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
		jr_task(ds, t);
	}
	if (t == NULL)
		j->rr_target = -1;
	if (j->rr_target != target || j->rr_delta != delta)
		jr_job(ds, j);
}

enum status
ds_client_beat(struct ds *ds, struct ds_client *c, json_t *body, int64_t now,
    json_t **reply, char *msg, size_t msglen)
{
	struct ds_job *j = c->job;
	json_t *v, *tasks;
	size_t i;

	c->last_seen = now;
	if (deliveries(ds, j, json_object_get(body, "delivered"), msg, msglen) <
	    0)
		return ST_INVALID_ARGUMENT;
	json_array_foreach(json_object_get(body, "lost"), i, v) {
		struct ds_task *t;
		if (json_is_integer(v) &&
		    (t = job_task(j, (uint64_t)json_integer_value(v))) != NULL)
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
				jr_job(ds, j);
			}
		}
		c->blocked = json_is_integer(b) ? json_integer_value(b) : -1;
		if (c->round != round || c->blocked != blocked)
			jr_client(ds, c);
		rr_settle(ds, j);
	}
	job_check_done(ds, j);
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
		        task_state_name(t)));
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
	struct ds_worker *w = worker_find(ds, name);
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
	jr_worker(ds, w);
	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link)
		task_make(ds, j, w, 1);
	return;
oom:
	free(a);
	free(h);
}

void
ds_worker_down(struct ds *ds, const char *name, uint64_t inc)
{
	struct ds_worker *w = worker_find(ds, name);

	if (w == NULL || !w->live || w->inc != inc)
		return;
	w->live = 0;
	jr_worker(ds, w);
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
	struct ds_worker *w = worker_find(ds, name);

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
	struct ds_worker *w = worker_find(ds, name);

	return w != NULL && w->live;
}

int
ds_worker_changed(struct ds *ds, const char *name, int clear)
{
	struct ds_worker *w = worker_find(ds, name);
	int changed = w != NULL && w->changed;

	if (w != NULL && clear)
		w->changed = 0;
	return changed;
}

json_t *
ds_worker_tasks_json(struct ds *ds, const char *name)
{
	struct ds_worker *w = worker_find(ds, name);
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
		struct ds_task *t = job_task(j, id);
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

/* The index in the dataset of the split seq names. */
static int
split_index(struct ds_job *j, uint64_t seq, uint32_t *index)
{
	size_t n = j->ds->nsplits;
	uint64_t epoch = seq / n;

	if (j->seed == 0) {
		*index = (uint32_t)(seq % n);
		return 0;
	}
	if (j->order == NULL || j->order_epoch != epoch) {
		if (j->order == NULL &&
		    (j->order = malloc(n * sizeof(*j->order))) == NULL)
			return -1;
		split_order(j->seed, epoch, j->order, n);
		j->order_epoch = epoch;
	}
	*index = j->order[seq % n];
	return 0;
}

/* s as a JSON string, quoted, onto b. */
static void
json_quote(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const char *run = s;

	buf_append(b, "\"", 1);
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;
		char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		buf_append(b, run, (size_t)(s - run));
		if (c == '"' || c == '\\') {
			e[1] = (char)c;
			buf_append(b, e, 2);
		} else {
			buf_append(b, e, 6);
		}
		run = s + 1;
	}
	buf_append(b, run, (size_t)(s - run));
	buf_append(b, "\"", 1);
}

/* One leased seq's object onto out. */
static void
lease_json(struct ds_job *j, const struct ds_lease *l, int first,
    struct buf *out)
{
	uint32_t index;

	if (split_index(j, l->seq, &index) < 0)
		index = 0;
	buf_printf(out,
	    "%s{\"seq\":%" PRIu64 ",\"index\":%" PRIu32 ",\"epoch\":%" PRIu64
	    ",\"split\":",
	    first ? "" : ",", l->seq, index, l->seq / j->ds->nsplits);
	json_quote(out, j->ds->splits[index]);
	buf_puts(out, ",\"skip\":[");
	for (size_t i = 0; i < l->nr; i++)
		buf_printf(out, "%s[%" PRIu64 ",%" PRIu64 "]", i > 0 ? "," : "",
		    l->r[i].a, l->r[i].b);
	buf_puts(out, "]}");
}

/* The reply to a lease request sent again: its seqs t still holds. */
static void
lease_again(struct ds_task *t, struct buf *out)
{
	int n = 0;

	buf_puts(out, "{\"splits\":[");
	for (size_t i = 0; i < t->nlast; i++) {
		struct ds_lease *l = map_get(t->job->leases, t->last[i]);
		if (l != NULL && l->task == t)
			lease_json(t->job, l, n++ == 0, out);
	}
	buf_puts(out, "],\"end\":false}");
}

enum status
ds_lease(struct ds *ds, struct ds_task *t, long want, uint64_t id, int *later,
    struct buf *out, char *msg, size_t msglen)
{
	struct ds_job *j = t->job;
	uint64_t seqs[DS_WANT_MAX];
	long n = 0;

	*later = 0;
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
		buf_puts(out, "{\"splits\":[],\"end\":true}");
		return ST_OK;
	}
	if (id != 0 && id == t->lease_id) {
		lease_again(t, out);
		return ST_OK;
	}
	if (j->queue.count == 0 && j->next >= j->total) {
		*later = 1;
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
	buf_puts(out, "{\"splits\":[");
	for (long i = 0; i < n; i++)
		lease_json(j, map_get(j->leases, seqs[i]), i == 0, out);
	buf_puts(out, "],\"end\":false}");
	return ST_OK;
}

enum status
ds_task_delivered(struct ds *ds, struct ds_task *t, json_t *list, char *msg,
    size_t msglen)
{
	if (deliveries(ds, t->job, list, msg, msglen) < 0)
		return ST_INVALID_ARGUMENT;
	job_check_done(ds, t->job);
	return ST_OK;
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
			jr_job(ds, j);
		emit(ds, DS_EV_SPLITS, NULL, j->id);
		return ST_OK;
	}
	if (t->state != DS_TASK_RUNNING)
		return ST_OK;
	t->state = DS_TASK_FINISHED;
	t->read_all = 1;
	jr_task(ds, t);
	if (j->finished_shards != NULL && t->shard < j->shards) {
		j->finished_shards[t->shard] = 1;
		jr_job(ds, j);
	}
	job_check_done(ds, j);
	return ST_OK;
}

/* Collection. */

/*
 * Whether an idle job is kept rather than collected: one whose position
 * says what was read and what was not (DYNAMIC), under a name a reader
 * can come back with, and not over. tf.data keeps jobs with visitation
 * guarantees likewise.
 */
static int
job_keeps(const struct ds_job *j)
{
	return j->eff == SHARD_DYNAMIC && j->name != NULL && !j->retired &&
	    !job_ended(j);
}

/*
 * An idle job is kept with its position, but not its tasks: its splits
 * go back to its queue, delivered ranges and all, and workers let go of
 * what they buffered for it. A reader that comes back gets new tasks.
 */
static void
job_keep(struct ds *ds, struct ds_job *j)
{
	while (j->tasks != NULL) {
		struct ds_worker *w = j->tasks->w;
		gone(ds, R_TASK_GONE, j->id, j->tasks->id, 0);
		tasks_changed(ds, w);
	}
	j->kept = 1;
	jr_job(ds, j);
}

/* A kept job read again: tasks on every worker, as for a new one. */
static void
job_unkeep(struct ds *ds, struct ds_job *j)
{
	j->kept = 0;
	jr_job(ds, j);
	for (struct ds_worker *w = ds->workers; w != NULL; w = w->next)
		task_make(ds, j, w, 0);
}

static void
job_collect(struct ds *ds, struct ds_job *j)
{
	job_finish(ds, j);
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		tasks_changed(ds, t->w);
	emit(ds, DS_EV_SPLITS, NULL, j->id);
	gone(ds, R_JOB_GONE, j->id, 0, 0);
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
			if (!job_keeps(j))
				job_collect(ds, j);
			else if (!j->kept)
				job_keep(ds, j);
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
	/* Room for any removal's record (gone() cannot fail). */
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
		job_free(j);
	}
	while (ds->datasets != NULL) {
		struct ds_dataset *d = ds->datasets;
		ds->datasets = d->next;
		dataset_free(d);
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

/*
 * Journal. Each record is a varint type and its fields (rec.h), and says
 * the new state of one thing: a dataset, worker, job, task or client in
 * whole (applied by creating or overwriting it), a lease's delivered
 * ranges, or that a lease, task, client or job is gone. Two records are
 * moves rather than states, so that position is never copied whole: a
 * grant (the seqs a task was given, as runs: each one is the job's next
 * seq or waits in its queue) and a task's end (its leases go to the front
 * of the queue, as task_settle does). A snapshot is a version, the
 * records that make the state from nothing, each after its length, and
 * an end that counts them.
 */

#define DS_SNAP_VERSION 1
#define DS_NAME_MAX 4096
#define DS_TEXT_MAX SIZE_MAX /* bounded by the record itself */

void
ds_set_journal(struct ds *ds, ds_journal_fn fn, void *arg)
{
	ds->jfn = fn;
	ds->jarg = arg;
	ds->jlost = 0;
}

unsigned long
ds_journal_lost(struct ds *ds)
{
	return ds->jlost;
}

static void
enc_dataset(struct rec_out *o, const struct ds_dataset *d)
{
	rec_put_u(o, d->id);
	rec_put_s(o, d->name);
	rec_put_s(o, d->reader);
	rec_put_u(o, (uint64_t)d->framing);
	rec_put_u(o, (uint64_t)d->reader_skips);
	rec_put_s(o, d->fp);
	rec_put_u(o, d->nsplits);
	for (size_t i = 0; i < d->nsplits; i++)
		rec_put_s(o, d->splits[i]);
}

static void
enc_worker(struct rec_out *o, const struct ds_worker *w)
{
	rec_put_s(o, w->name);
	rec_put_u(o, w->inc);
	rec_put_s(o, w->address);
	rec_put_s(o, w->host);
	rec_put_u(o, (uint64_t)w->live);
}

static void
enc_job(struct rec_out *o, const struct ds_job *j)
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

static void
enc_task(struct rec_out *o, const struct ds_task *t)
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

static void
enc_client(struct rec_out *o, const struct ds_client *c)
{
	rec_put_u(o, c->id);
	rec_put_u(o, c->job->id);
	rec_put_i(o, c->index);
	rec_put_i(o, c->round);
	rec_put_i(o, c->blocked);
}

/* A lease's delivered state: total and ranges. */
static void
enc_ranges(struct rec_out *o, const struct ds_lease *l)
{
	rec_put_i(o, l->total);
	rec_put_u(o, l->nr);
	for (size_t i = 0; i < l->nr; i++) {
		rec_put_u(o, l->r[i].a);
		rec_put_u(o, l->r[i].b);
	}
}

static void
enc_open(struct rec_out *o, const struct ds_job *j, const struct ds_lease *l)
{
	rec_put_u(o, j->id);
	rec_put_u(o, l->seq);
	rec_put_u(o, l->task != NULL ? l->task->id : 0);
	enc_ranges(o, l);
}

/* A record begins in ds->jbuf when there is a journal to hear it. */
static int
jr_begin(struct ds *ds, struct rec_out *o, int type)
{
	if (ds->jfn == NULL || ds->applying)
		return 0;
	buf_reset(&ds->jbuf);
	o->b = &ds->jbuf;
	o->err = 0;
	rec_put_u(o, (uint64_t)type);
	return 1;
}

static void
jr_end(struct ds *ds, struct rec_out *o)
{
	if (o->err) {
		/* Told, so that the change's request is answered an error. */
		ds->jlost++;
		ds->jfn(NULL, 0, ds->jarg);
	} else {
		ds->jfn(o->b->data, o->b->len, ds->jarg);
	}
}

static void
jr_dataset(struct ds *ds, const struct ds_dataset *d)
{
	struct rec_out o;

	if (!jr_begin(ds, &o, R_DATASET))
		return;
	enc_dataset(&o, d);
	jr_end(ds, &o);
}

static void
jr_dsname(struct ds *ds, const struct ds_dataset *d)
{
	struct rec_out o;

	if (!jr_begin(ds, &o, R_DSNAME))
		return;
	rec_put_u(&o, d->id);
	rec_put_s(&o, d->name);
	jr_end(ds, &o);
}

static void
jr_worker(struct ds *ds, const struct ds_worker *w)
{
	struct rec_out o;

	if (!jr_begin(ds, &o, R_WORKER))
		return;
	enc_worker(&o, w);
	jr_end(ds, &o);
}

static void
jr_job(struct ds *ds, const struct ds_job *j)
{
	struct rec_out o;

	if (!jr_begin(ds, &o, R_JOB2))
		return;
	enc_job(&o, j);
	jr_end(ds, &o);
}

static void
jr_open(struct ds *ds, const struct ds_job *j, const struct ds_lease *l)
{
	struct rec_out o;

	if (!jr_begin(ds, &o, R_OPEN))
		return;
	enc_open(&o, j, l);
	jr_end(ds, &o);
}

static void
jr_task(struct ds *ds, const struct ds_task *t)
{
	struct rec_out o;

	if (!jr_begin(ds, &o, R_TASK))
		return;
	enc_task(&o, t);
	jr_end(ds, &o);
}

static void
jr_client(struct ds *ds, const struct ds_client *c)
{
	struct rec_out o;

	if (!jr_begin(ds, &o, R_CLIENT))
		return;
	enc_client(&o, c);
	jr_end(ds, &o);
}

/* A record to be committed begins in ds->jbuf. */
static void
rec_start(struct ds *ds, struct rec_out *o, int type)
{
	buf_reset(&ds->jbuf);
	o->b = &ds->jbuf;
	o->err = 0;
	rec_put_u(o, (uint64_t)type);
}

/*
 * The one way leases are granted, delivered and done, and tasks, clients
 * and jobs removed, live and in replay alike: the change is made as a
 * record (rec_start), applied by the function that applies it in replay
 * (apply_one; live, its events are sent), and then handed to the journal.
 * A record that cannot be made or applied (memory ran out) changes
 * nothing: -1, and msg says why.
 */
static int
commit(struct ds *ds, struct rec_out *o, int64_t now, char *msg, size_t msglen)
{
	struct rec_in in;
	char err[256];
	int r;

	if (o->err) {
		snprintf(msg, msglen, "out of memory");
		return -1;
	}
	rec_in_init(&in, o->b->data, o->b->len);
	ds->applying = 1;
	r = apply_one(ds, &in, now, err, sizeof(err));
	ds->applying = 0;
	if (r < 0) {
		snprintf(msg, msglen, "%s", err);
		return -1;
	}
	if (ds->jfn != NULL)
		ds->jfn(o->b->data, o->b->len, ds->jarg);
	return 0;
}

/* Removes a job (R_JOB_GONE job), a task (R_TASK_GONE job task) or a job
 * client (R_CLIENT_GONE client; now is when its job went idle). Cannot
 * fail: the record fits in the room ds_new made, and applies to what
 * exists. */
static void
gone(struct ds *ds, int type, uint64_t a, uint64_t b, int64_t now)
{
	struct rec_out o;

	rec_start(ds, &o, type);
	rec_put_u(&o, a);
	if (type == R_TASK_GONE)
		rec_put_u(&o, b);
	(void)commit(ds, &o, now, NULL, 0);
}

/* Leases seqs to t in reply to lease request id (R_GRANT): the seqs in
 * runs of consecutive ones. */
static int
grant(struct ds *ds, struct ds_task *t, uint64_t id, const uint64_t *seqs,
    size_t n, char *msg, size_t msglen)
{
	struct rec_out o;
	size_t runs = 0;

	rec_start(ds, &o, R_GRANT);
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
	return commit(ds, &o, 0, msg, msglen);
}

/* Snapshots. */

static void
snap_begin(struct rec_out *r, struct buf *tmp, int type)
{
	buf_reset(tmp);
	r->b = tmp;
	r->err = 0;
	rec_put_u(r, (uint64_t)type);
}

static void
snap_end(struct rec_out *o, const struct rec_out *r)
{
	o->err |= r->err;
	rec_put_u(o, r->b->len);
	rec_put_bytes(o, r->b->data, r->b->len);
}

/* The items of a list linked through next at offset off, last first. */
static void **
reversed(void *head, size_t off, size_t *n)
{
	void **v;
	size_t k = 0;

	for (char *p = head; p != NULL; p = *(char **)(p + off))
		k++;
	if ((v = malloc((k + 1) * sizeof(*v))) == NULL)
		return NULL;
	*n = k;
	for (char *p = head; p != NULL; p = *(char **)(p + off))
		v[--k] = p;
	return v;
}

static void
snap_job(struct rec_out *o, struct buf *tmp, const struct ds_job *j)
{
	struct rec_out r;
	void **cv;
	size_t n;

	snap_begin(&r, tmp, R_JOB2);
	enc_job(&r, j);
	snap_end(o, &r);
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next) {
		snap_begin(&r, tmp, R_TASK);
		enc_task(&r, t);
		snap_end(o, &r);
	}
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		for (struct ds_lease *l = t->leases.head; l != NULL;
		     l = l->next) {
			snap_begin(&r, tmp, R_OPEN);
			enc_open(&r, j, l);
			snap_end(o, &r);
		}
	for (struct ds_lease *l = j->queue.head; l != NULL; l = l->next) {
		snap_begin(&r, tmp, R_OPEN);
		enc_open(&r, j, l);
		snap_end(o, &r);
	}
	if ((cv = reversed(j->clients, offsetof(struct ds_client, next), &n)) ==
	    NULL) {
		o->err = 1;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		snap_begin(&r, tmp, R_CLIENT);
		enc_client(&r, cv[i]);
		snap_end(o, &r);
	}
	free(cv);
}

int
ds_snapshot(struct ds *ds, struct buf *out)
{
	struct rec_out o = {out, 0}, r;
	struct buf tmp = {0};
	void **wv, **dv, **jv;
	size_t nw, nd, nj, nrec;

	wv = reversed(ds->workers, offsetof(struct ds_worker, next), &nw);
	dv = reversed(ds->datasets, offsetof(struct ds_dataset, next), &nd);
	jv = reversed(ds->jobs, offsetof(struct ds_job, link), &nj);
	if (wv == NULL || dv == NULL || jv == NULL) {
		o.err = 1;
		goto done;
	}
	rec_put_u(&o, DS_SNAP_VERSION);
	snap_begin(&r, &tmp, R_COUNTERS);
	rec_put_u(&r, ds->next_dataset);
	rec_put_u(&r, ds->next_job);
	rec_put_u(&r, ds->next_task);
	rec_put_u(&r, ds->next_client);
	rec_put_u(&r, ds->leases);
	rec_put_u(&r, ds->releases);
	rec_put_u(&r, ds->collected);
	snap_end(&o, &r);
	for (size_t i = 0; i < nw; i++) {
		snap_begin(&r, &tmp, R_WORKER);
		enc_worker(&r, wv[i]);
		snap_end(&o, &r);
	}
	for (size_t i = 0; i < nd; i++) {
		snap_begin(&r, &tmp, R_DATASET);
		enc_dataset(&r, dv[i]);
		snap_end(&o, &r);
	}
	for (size_t i = 0; i < nj && !o.err; i++)
		snap_job(&o, &tmp, jv[i]);
	/* Cut short at a record's end, it would load: say where it ends. */
	nrec = 1 + nw + nd;
	for (size_t i = 0; i < nj; i++) {
		const struct ds_job *j = jv[i];
		nrec += 1 + j->nclients + j->leases->count;
		for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
			nrec++;
	}
	snap_begin(&r, &tmp, R_END);
	rec_put_u(&r, nrec);
	snap_end(&o, &r);
done:
	free(wv);
	free(dv);
	free(jv);
	buf_free(&tmp);
	return o.err ? -1 : 0;
}

/* Replay. */

static int bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* Whether the record was cut short, bad, or goes on past its fields. */
static int
ended_badly(const struct rec_in *in)
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
	if (ended_badly(in))
		return bad(err, errlen, "counters: a bad record");
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
		bad(err, errlen, "dataset: a bad record");
		goto out;
	}
	if (id == 0 || dataset_by_id(ds, id) != NULL ||
	    (name != NULL &&
	        (!name_ok(name) || ds_dataset_find(ds, name) != NULL))) {
		bad(err, errlen, "dataset %" PRIu64 ": its id or name is taken",
		    id);
		goto out;
	}
	if ((d = calloc(1, sizeof(*d))) == NULL ||
	    (d->splits = calloc((size_t)n, sizeof(char *))) == NULL) {
		bad(err, errlen, "out of memory");
		goto out;
	}
	h = fp_head(reader, (enum framing)framing, (int)skips);
	for (uint64_t i = 0; i < n; i++) {
		size_t len;
		const char *s = rec_get_sv(in, DS_SPLIT_MAX, &len);
		char *c;
		if (s == NULL || len == 0 || memchr(s, '\n', len) != NULL) {
			bad(err, errlen,
			    "dataset %" PRIu64 ": split %" PRIu64 " is bad", id,
			    i);
			goto out;
		}
		if ((c = malloc(len + 1)) == NULL) {
			bad(err, errlen, "out of memory");
			goto out;
		}
		memcpy(c, s, len);
		c[len] = '\0';
		d->splits[d->nsplits++] = c;
		h = fnv(h, c, len + 1);
	}
	snprintf(fpx, sizeof(fpx), "%016" PRIx64, h);
	if (ended_badly(in) || memcmp(fpx, fp, 16) != 0) {
		bad(err, errlen,
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
		dataset_free(d);
	return r;
}

static int
apply_dsname(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t id = rec_get_u(in);
	char *name = rec_get_s(in, DS_NAME_MAX);
	struct ds_dataset *d = dataset_by_id(ds, id);

	if (ended_badly(in) || name == NULL || d == NULL || d->name != NULL ||
	    !name_ok(name) || ds_dataset_find(ds, name) != NULL) {
		free(name);
		return bad(err, errlen,
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

	if (ended_badly(in) || name == NULL || *name == '\0' || addr == NULL ||
	    host == NULL || live > 1)
		goto fail;
	if ((w = worker_find(ds, name)) == NULL) {
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
	w->changed = 1;
	return 0;
fail:
	free(name);
	free(addr);
	free(host);
	return bad(err, errlen, "worker: a bad record");
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
	if (ended_badly(in) || mode > SHARD_HINT || hasfs > 1 || finished > 1 ||
	    iteration == 0 || retired > 1 || kept > 1 ||
	    (secret != NULL && strlen(secret) != 32 && *secret != '\0') ||
	    (run != NULL && !run_ok(run)) ||
	    (mode == SHARD_FILE_OR_DATA ?
	            eff != SHARD_FILE && eff != SHARD_DATA :
	            eff != mode) ||
	    repeat > (1UL << 30) || consumers > 4096 || seed > INT64_MAX ||
	    (int)hasfs != is_static((enum shard_mode)mode) ||
	    (hasfs ? fs == NULL || shards == 0 : shards != 0) || d == NULL ||
	    id == 0 || (name != NULL && !name_ok(name)))
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
				job_free(j);
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
	return bad(err, errlen, "job %" PRIu64 ": a bad record", id);
}

static int
apply_job_gone(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t id = rec_get_u(in);
	struct ds_job *j = job_by_id(ds, id), **pp;

	if (ended_badly(in) || j == NULL)
		return bad(err, errlen, "job %" PRIu64 " to collect: none", id);
	for (pp = &ds->jobs; *pp != j; pp = &(*pp)->link)
		;
	*pp = j->link;
	ds->collected++;
	job_free(j);
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
	if (ended_badly(in) || j == NULL || w == NULL || id == 0 || shard < 0 ||
	    shard > INT32_MAX || state > DS_TASK_FAILED || read_all > 1 ||
	    pending > 1)
		goto fail;
	if ((t = job_task(j, id)) == NULL) {
		struct ds_task **pp;
		for (struct ds_job *k = ds->jobs; k != NULL; k = k->link)
			if (job_task(k, id) != NULL)
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
	t->ntold = t->captold = n[1];
	t->skips = v[2];
	t->nskips = t->capskips = n[2];
	t->last = v[3];
	t->nlast = t->caplast = n[3];
	w->changed = 1;
	return 0;
fail:
	for (int i = 0; i < 4; i++)
		free(v[i]);
	return bad(err, errlen,
	    "task %" PRIu64 " of job %" PRIu64 ": a bad record", id, jid);
}

static int
apply_task_gone(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t jid = rec_get_u(in), id = rec_get_u(in);
	struct ds_job *j = job_by_id(ds, jid);
	struct ds_task *t = j != NULL ? job_task(j, id) : NULL, **pp;

	if (ended_badly(in) || t == NULL)
		return bad(err, errlen,
		    "task %" PRIu64 " of job %" PRIu64 " to end: none", id,
		    jid);
	task_release_leases(ds, t);
	for (pp = &j->tasks; *pp != t; pp = &(*pp)->next)
		;
	*pp = t->next;
	task_free(t);
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

	if (ended_badly(in) || j == NULL || id == 0 || index < 0 ||
	    index > 4095 || (c != NULL && c->job != j))
		return bad(err, errlen,
		    "client %" PRIu64 " of job %" PRIu64 ": a bad record", id,
		    jid);
	if (c == NULL) {
		if ((c = calloc(1, sizeof(*c))) == NULL)
			return bad(err, errlen, "out of memory");
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

	if (ended_badly(in) || c == NULL)
		return bad(err, errlen, "client %" PRIu64 " to release: none",
		    id);
	j = c->job;
	client_unlink(j, c);
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
	return map_get(j->leases, seq);
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
		if (in->err || a >= b || range_add(l, a, b) < 0)
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
	    seq >= j->next || (tid != 0 && (t = job_task(j, tid)) == NULL))
		goto fail;
	if ((l = calloc(1, sizeof(*l))) == NULL)
		goto fail;
	l->seq = seq;
	if (get_ranges(in, l) < 0 || ended_badly(in) ||
	    map_put(j->leases, l) < 0) {
		lease_free(l);
		goto fail;
	}
	l->task = t;
	list_push(t != NULL ? &t->leases : &j->queue, l, 0);
	return 0;
fail:
	return bad(err, errlen,
	    "open seq %" PRIu64 " of job %" PRIu64 ": a bad record", seq, jid);
}

static int
apply_lease(struct ds *ds, struct rec_in *in, char *err, size_t errlen)
{
	uint64_t jid = rec_get_u(in), seq = rec_get_u(in);
	struct ds_job *j;
	struct ds_lease *l = lease_of(ds, jid, seq, &j), x = {0};

	/* Read into x first: a bad record leaves l as it was. */
	if (in->err || l == NULL || get_ranges(in, &x) < 0 || ended_badly(in)) {
		free(x.r);
		return bad(err, errlen,
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

	if (ended_badly(in) || l == NULL)
		return bad(err, errlen,
		    "seq %" PRIu64 " of job %" PRIu64 " done: not open", seq,
		    jid);
	list_unlink(l->task != NULL ? &l->task->leases : &j->queue, l);
	map_del(j->leases, seq);
	lease_free(l);
	j->done++;
	return 0;
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
	uint64_t seqs[DS_WANT_MAX];
	struct ds_lease *made[DS_WANT_MAX];
	size_t n = 0, nmade = 0, used = 0;
	struct ds_job *j = job_by_id(ds, jid);
	struct ds_task *t = j != NULL ? job_task(j, tid) : NULL;

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
	if (ended_badly(in))
		goto fail;
	next = j->next;
	for (size_t i = 0; i < n; i++) {
		struct ds_lease *l = map_get(j->leases, seqs[i]);
		if (l != NULL) {
			if (l->task != NULL)
				goto fail;
			for (size_t k = 0; k < i; k++)
				if (seqs[k] == seqs[i])
					goto fail;
		} else if (seqs[i] == next && next < j->total) {
			next++;
		} else {
			goto fail;
		}
	}
	for (; nmade < next - j->next; nmade++)
		if ((made[nmade] = calloc(1, sizeof(**made))) == NULL)
			goto nomem;
	if (map_reserve(j->leases, j->leases->count + nmade) < 0 ||
	    (id != 0 && last_reserve(t, n) < 0))
		goto nomem;
	t->lease_id = id;
	t->nlast = 0;
	for (size_t i = 0; i < n; i++) {
		struct ds_lease *l = map_get(j->leases, seqs[i]);
		if (l != NULL) {
			list_unlink(&j->queue, l);
		} else {
			l = made[used++];
			l->seq = seqs[i];
			l->total = -1;
			(void)map_put(j->leases, l); /* reserved */
			j->next++;
		}
		l->task = t;
		list_push(&t->leases, l, 0);
		ds->leases++;
		if (id != 0)
			t->last[t->nlast++] = seqs[i];
	}
	return 0;
nomem:
	while (nmade > 0)
		free(made[--nmade]);
	return bad(err, errlen, "grant to task %" PRIu64 ": out of memory",
	    tid);
fail:
	return bad(err, errlen,
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
	default: return bad(err, errlen, "a record of no known type");
	}
}

int
ds_apply(struct ds *ds, const void *rec, size_t len, int64_t now, char *err,
    size_t errlen)
{
	struct rec_in in;
	int r;

	rec_in_init(&in, rec, len);
	ds->applying = ds->replaying = 1;
	r = apply_one(ds, &in, now, err, errlen);
	ds->applying = ds->replaying = 0;
	return r;
}

int
ds_restore(struct ds *ds, const void *p, size_t len, int64_t now, char *err,
    size_t errlen)
{
	struct rec_in in;
	uint64_t version;
	size_t n = 0;
	char e[256];

	if (ds->datasets != NULL || ds->jobs != NULL || ds->workers != NULL)
		return bad(err, errlen, "a snapshot loads into an empty state");
	rec_in_init(&in, p, len);
	if ((version = rec_get_u(&in)) != DS_SNAP_VERSION || in.err)
		return bad(err, errlen, "snapshot: version %" PRIu64 ", not %d",
		    version, DS_SNAP_VERSION);
	for (;;) {
		uint64_t rlen = rec_get_u(&in);
		const void *rec = rlen <= rec_left(&in) ?
		    rec_get_bytes(&in, (size_t)rlen) :
		    NULL;
		struct rec_in r;
		if (rec == NULL)
			return bad(err, errlen,
			    "snapshot: cut short at record %zu", n);
		rec_in_init(&r, rec, (size_t)rlen);
		if (rec_get_u(&r) == R_END) {
			if (rec_get_u(&r) != n || ended_badly(&r) ||
			    rec_left(&in) != 0)
				return bad(err, errlen,
				    "snapshot: its end does not match its %zu "
				    "records",
				    n);
			break;
		}
		if (ds_apply(ds, rec, (size_t)rlen, now, e, sizeof(e)) < 0)
			return bad(err, errlen, "snapshot: record %zu: %s", n,
			    e);
		n++;
	}
	for (struct ds_dataset *d = ds->datasets; d != NULL; d = d->next)
		if (d->id > ds->next_dataset)
			return bad(err, errlen,
			    "snapshot: dataset %" PRIu64 " above its counter",
			    d->id);
	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link) {
		if (j->eff == SHARD_DYNAMIC &&
		    j->done + j->leases->count != j->next)
			return bad(err, errlen,
			    "snapshot: job %" PRIu64 " has %" PRIu64
			    " seqs done and %zu open, but %" PRIu64
			    " leased in all",
			    j->id, j->done, j->leases->count, j->next);
		/* Ids are never given twice. */
		if (j->id > ds->next_job)
			return bad(err, errlen,
			    "snapshot: job %" PRIu64 " above its counter",
			    j->id);
		for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
			if (t->id > ds->next_task)
				return bad(err, errlen,
				    "snapshot: task %" PRIu64
				    " above its counter",
				    t->id);
		for (struct ds_client *c = j->clients; c != NULL; c = c->next)
			if (c->id > ds->next_client)
				return bad(err, errlen,
				    "snapshot: client %" PRIu64
				    " above its counter",
				    c->id);
	}
	return 0;
}
