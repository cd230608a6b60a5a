/*
 * dataset.c: datasets, jobs, tasks, job clients and split leases.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "dataset.h"

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
};

static const char *const mode_names[] = {"off", "dynamic", "file", "data",
    "file_or_data", "hint"};

const char *
ds_mode_name(enum ds_mode m)
{
	return (size_t)m < sizeof(mode_names) / sizeof(mode_names[0]) ?
	    mode_names[m] :
	    "?";
}

int
ds_mode_parse(const char *s, enum ds_mode *m)
{
	for (size_t i = 0; i < sizeof(mode_names) / sizeof(mode_names[0]); i++)
		if (strcmp(s, mode_names[i]) == 0) {
			*m = (enum ds_mode)i;
			return 0;
		}
	return -1;
}

static int
is_static(enum ds_mode m)
{
	return m == DS_FILE || m == DS_DATA || m == DS_FILE_OR_DATA ||
	    m == DS_HINT;
}

static void
emit(struct ds *ds, enum ds_event_type type, const char *worker, uint64_t job)
{
	struct ds_event ev = {type, worker, job};

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

static int
map_put(struct lease_map *m, struct ds_lease *l)
{
	if ((m->count + 1) * 2 > m->cap) {
		size_t cap = m->cap != 0 ? m->cap * 2 : 64;
		struct ds_lease **s = calloc(cap, sizeof(*s));
		if (s == NULL)
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
	}
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
		if (l->nr == l->capr) {
			size_t cap = l->capr != 0 ? l->capr * 2 : 4;
			struct ds_range *r = realloc(l->r, cap * sizeof(*r));
			if (r == NULL)
				return -1;
			l->r = r;
			l->capr = cap;
		}
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
	uint64_t h = 0xcbf29ce484222325ULL;
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
	h = fnv(h, reader, strlen(reader) + 1);
	h = fnv(h, framing_name(framing), strlen(framing_name(framing)) + 1);
	h = fnv(h, skips ? "s" : "-", 1);
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
		if (name != NULL && d->name == NULL)
			d->name = strdup(name);
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

	if (j->finished || !w->live)
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
	if (t->pending && j->rr_target < 0) {
		j->rr_delta = 1;
		j->rr_target = j->rr_latest + j->rr_delta;
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
	struct ds_task **pp;

	if (t->state != DS_TASK_FAILED || t->nacks > 0)
		return;
	task_release_leases(ds, t);
	for (pp = &t->job->tasks; *pp != t; pp = &(*pp)->next)
		;
	*pp = t->next;
	task_free(t);
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
	if (j->eff == DS_DYNAMIC && t->leases.count > 0 && t->ntold > 0 &&
	    (t->acks = calloc(t->ntold, sizeof(*t->acks))) != NULL) {
		for (size_t i = 0; i < t->ntold; i++)
			if (job_has_client(j, t->told[i]))
				t->acks[n++] = t->told[i];
		t->nacks = n;
	}
	tasks_changed(ds, t->w);
	task_settle(ds, t);
	if (j->rr_target >= 0) {
		/* A pending task that failed: the next one's turn. */
		int any = 0;
		for (struct ds_task *u = j->tasks; u != NULL; u = u->next)
			any |= u->pending && u->state == DS_TASK_RUNNING;
		if (!any)
			j->rr_target = -1;
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
	if (j->eff == DS_DYNAMIC) {
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
	task_settle(ds, t);
}

static void rr_settle(struct ds_job *j);

void
ds_client_release(struct ds *ds, struct ds_client *c, int64_t now)
{
	struct ds_job *j = c->job;
	struct ds_task *t, *next;

	client_unlink(j, c);
	for (t = j->tasks; t != NULL; t = next) {
		next = t->next;
		task_ack(ds, t, c->id);
	}
	if (j->nclients == 0)
		j->idle_since = now;
	free(c);
	rr_settle(j);
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
	free(j);
}

struct ds_job *
ds_job_find(struct ds *ds, const char *key)
{
	char *end;
	unsigned long long id = strtoull(key, &end, 10);

	for (struct ds_job *j = ds->jobs; j != NULL; j = j->link)
		if (*key != '\0' && *end == '\0' ?
		        j->id == id :
		        j->name != NULL && strcmp(j->name, key) == 0)
			return j;
	return NULL;
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

	if (j->eff != DS_DYNAMIC) {
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
job_make(struct ds *ds, json_t *req, struct ds_dataset *d, enum ds_mode mode,
    const char *name, long repeat, uint64_t seed, long consumers,
    struct ds_job **out, char *msg, size_t msglen)
{
	struct ds_job *j = calloc(1, sizeof(*j));
	json_t *st = json_object_get(req, "from_state");
	enum status s;

	if (j == NULL || (name != NULL && (j->name = strdup(name)) == NULL) ||
	    (j->leases = calloc(1, sizeof(*j->leases))) == NULL) {
		if (j != NULL)
			job_free(j);
		snprintf(msg, msglen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
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
		if (mode == DS_FILE_OR_DATA)
			j->eff =
			    d->nsplits >= ds->cfg.nstatic ? DS_FILE : DS_DATA;
		if ((j->finished_shards = calloc((size_t)j->shards, 1)) ==
		    NULL) {
			job_free(j);
			snprintf(msg, msglen, "out of memory");
			return ST_RESOURCE_EXHAUSTED;
		}
	}
	if (st != NULL && !json_is_null(st) &&
	    (s = job_restore(j, st, msg, msglen)) != ST_OK) {
		job_free(j);
		return s;
	}
	j->id = ++ds->next_job;
	*out = j;
	return ST_OK;
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
	struct ds_job *j;
	struct ds_client *c;
	enum ds_mode mode = DS_DYNAMIC;
	long repeat, consumers, index, seedl;
	enum status s;

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
	if (mname != NULL && ds_mode_parse(mname, &mode) < 0) {
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
	if (consumers > 0 && (name == NULL || mode == DS_DYNAMIC)) {
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
		    ds_mode_name(mode));
		return ST_FAILED_PRECONDITION;
	}
	j = name != NULL ? ds_job_find(ds, name) : NULL;
	if (j != NULL) {
		const char *what = j->ds != d  ? "dataset" :
		    j->mode != mode            ? "mode" :
		    j->repeat != repeat        ? "repeat" :
		    j->seed != (uint64_t)seedl ? "seed" :
		    j->consumers != consumers  ? "consumers" :
		                                 NULL;
		if (what == NULL &&
		    json_object_get(req, "from_state") != NULL &&
		    !json_is_null(json_object_get(req, "from_state"))) {
			snprintf(msg, msglen,
			    "job %s exists: a state starts a new job only",
			    name);
			return ST_ALREADY_EXISTS;
		}
		if (what != NULL) {
			snprintf(msg, msglen,
			    "job %s exists with dataset %" PRIu64
			    ", mode %s, repeat %ld, seed %" PRIu64
			    ", consumers %ld: its %s differs",
			    name, j->ds->id, ds_mode_name(j->mode), j->repeat,
			    j->seed, j->consumers, what);
			return ST_INVALID_ARGUMENT;
		}
	} else {
		if ((s = job_make(ds, req, d, mode, name, repeat,
		         (uint64_t)seedl, consumers, &j, msg, msglen)) != ST_OK)
			return s;
		j->link = ds->jobs;
		ds->jobs = j;
		*created = 1;
		for (struct ds_worker *w = ds->workers; w != NULL; w = w->next)
			task_make(ds, j, w, 0);
	}
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		snprintf(msg, msglen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
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
	return json_pack("{s:I,s:o,s:I,s:s,s:I,s:I,s:o,s:I,s:b,s:o,s:I,s:o,"
	                 "s:I,s:o,s:o}",
	    "id", (json_int_t)j->id, "name",
	    j->name != NULL ? json_string(j->name) : json_null(), "dataset",
	    (json_int_t)j->ds->id, "mode", ds_mode_name(j->mode), "repeat",
	    (json_int_t)j->repeat, "seed", (json_int_t)j->seed, "consumers",
	    j->consumers > 0 ? json_integer(j->consumers) : json_null(),
	    "clients", (json_int_t)j->nclients, "finished", j->finished,
	    "error", j->error != NULL ? json_string(j->error) : json_null(),
	    "splits", (json_int_t)j->ds->nsplits, "done",
	    j->eff == DS_DYNAMIC ? json_integer((json_int_t)j->done) :
	                           json_null(),
	    "leased", (json_int_t)leased, "next",
	    j->eff == DS_DYNAMIC ? json_integer((json_int_t)j->next) :
	                           json_null(),
	    "tasks", tasks);
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

	if (j->eff != DS_DYNAMIC) {
		snprintf(msg, msglen,
		    "job %" PRIu64 " reads in mode %s: only dynamic jobs have "
		    "a position to resume from",
		    j->id, ds_mode_name(j->mode));
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
	    "dataset", j->ds->fp, "mode", ds_mode_name(j->mode), "repeat",
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

/* Records that elements [a, b) of seq were delivered (total: -1 or all). */
static void
delivered(struct ds_job *j, uint64_t seq, uint64_t a, uint64_t b, int64_t total)
{
	struct ds_lease *l = map_get(j->leases, seq);

	if (l == NULL)
		return; /* done already, or never leased */
	if (range_add(l, a, b) < 0)
		return;
	if (total >= 0)
		l->total = total;
	if (!lease_complete(l))
		return;
	list_unlink(l->task != NULL ? &l->task->leases : &j->queue, l);
	map_del(j->leases, seq);
	lease_free(l);
	j->done++;
}

/* What "delivered" lists: [seq, first, end, total] each. */
static int
deliveries(struct ds_job *j, json_t *list, char *msg, size_t msglen)
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
		if (j->eff == DS_DYNAMIC)
			delivered(j, (uint64_t)json_integer_value(s),
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
	if (*n == *cap) {
		size_t c = *cap != 0 ? *cap * 2 : 4;
		uint64_t *x = realloc(*v, c * sizeof(*x));
		if (x == NULL)
			return;
		*v = x;
		*cap = c;
	}
	(*v)[(*n)++] = id;
}

static void
task_told(struct ds_task *t, uint64_t client)
{
	if (!ids_has(t->skips, t->nskips, client))
		ids_add(&t->told, &t->ntold, &t->captold, client);
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
rr_settle(struct ds_job *j)
{
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
			return;
		}
		if (!ready)
			return;
		t->pending = 0;
		t->start_round = j->rr_target;
		j->rr_target = -1;
	}
	j->rr_target = -1;
}

enum status
ds_client_beat(struct ds *ds, struct ds_client *c, json_t *body, int64_t now,
    json_t **reply, char *msg, size_t msglen)
{
	struct ds_job *j = c->job;
	json_t *v, *tasks;
	size_t i;

	c->last_seen = now;
	if (deliveries(j, json_object_get(body, "delivered"), msg, msglen) < 0)
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
		if (json_is_integer(r)) {
			c->round = json_integer_value(r);
			if (c->round > j->rr_latest)
				j->rr_latest = c->round;
		}
		c->blocked = json_is_integer(b) ? json_integer_value(b) : -1;
		rr_settle(j);
	}
	job_check_done(ds, j);
	tasks = json_array();
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next) {
		if (t->state == DS_TASK_FAILED || t->pending)
			continue;
		task_told(t, c->id);
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
			              "s:I,s:I,s:I,s:I}",
			        "id", (json_int_t)t->id, "job",
			        (json_int_t)j->id, "dataset", id, "mode",
			        ds_mode_name(j->eff), "reader", j->ds->reader,
			        "framing", framing_name(j->ds->framing),
			        "reader_skips", j->ds->reader_skips, "repeat",
			        (json_int_t)j->repeat, "seed",
			        (json_int_t)j->seed, "splits",
			        (json_int_t)j->ds->nsplits, "shard_index",
			        (json_int_t)t->shard, "shard_count",
			        (json_int_t)(j->shards > 0 ? j->shards : 1),
			        "consumers", (json_int_t)j->consumers));
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

/* seq was given in reply to the task's last lease request. */
static void
last_add(struct ds_task *t, uint64_t seq)
{
	if (t->nlast == t->caplast) {
		size_t cap = t->caplast != 0 ? t->caplast * 2 : 16;
		uint64_t *v = realloc(t->last, cap * sizeof(*v));
		if (v == NULL)
			return;
		t->last = v;
		t->caplast = cap;
	}
	t->last[t->nlast++] = seq;
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
ds_lease(struct ds *ds, struct ds_task *t, long want, uint64_t id,
    struct buf *out, char *msg, size_t msglen)
{
	struct ds_job *j = t->job;
	long n = 0;

	if (j->error != NULL) {
		snprintf(msg, msglen, "job %" PRIu64 " failed: %s", j->id,
		    j->error);
		return ST_FAILED_PRECONDITION;
	}
	if (j->eff != DS_DYNAMIC) {
		snprintf(msg, msglen,
		    "job %" PRIu64 " reads in mode %s: it leases no splits",
		    j->id, ds_mode_name(j->eff));
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
	if (j->queue.count == 0 && j->next >= j->total)
		return ST_UNAVAILABLE;
	t->lease_id = id;
	t->nlast = 0;
	buf_puts(out, "{\"splits\":[");
	while (n < want) {
		struct ds_lease *l = j->queue.head;
		if (l != NULL) {
			list_unlink(&j->queue, l);
		} else if (j->next < j->total) {
			if ((l = calloc(1, sizeof(*l))) == NULL)
				break;
			l->seq = j->next;
			l->total = -1;
			if (map_put(j->leases, l) < 0) {
				free(l);
				break;
			}
			j->next++;
		} else {
			break;
		}
		l->task = t;
		list_push(&t->leases, l, 0);
		ds->leases++;
		if (id != 0)
			last_add(t, l->seq);
		lease_json(j, l, n == 0, out);
		n++;
	}
	buf_puts(out, "],\"end\":false}");
	return ST_OK;
}

enum status
ds_task_delivered(struct ds *ds, struct ds_task *t, json_t *list, char *msg,
    size_t msglen)
{
	if (deliveries(t->job, list, msg, msglen) < 0)
		return ST_INVALID_ARGUMENT;
	job_check_done(ds, t->job);
	return ST_OK;
}

enum status
ds_task_end(struct ds *ds, struct ds_task *t, int failed, const char *message)
{
	struct ds_job *j = t->job;

	if (failed) {
		if (j->error == NULL)
			j->error = strdup(message != NULL && *message != '\0' ?
			        message :
			        "a reader failed");
		emit(ds, DS_EV_SPLITS, NULL, j->id);
		return ST_OK;
	}
	if (t->state != DS_TASK_RUNNING)
		return ST_OK;
	t->state = DS_TASK_FINISHED;
	t->read_all = 1;
	if (j->finished_shards != NULL && t->shard < j->shards)
		j->finished_shards[t->shard] = 1;
	job_check_done(ds, j);
	return ST_OK;
}

/* Collection. */

static void
job_collect(struct ds *ds, struct ds_job *j)
{
	struct ds_job **pp;

	job_finish(ds, j);
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		tasks_changed(ds, t->w);
	emit(ds, DS_EV_SPLITS, NULL, j->id);
	for (pp = &ds->jobs; *pp != j; pp = &(*pp)->link)
		;
	*pp = j->link;
	ds->collected++;
	job_free(j);
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
		if (j->nclients == 0 && now - j->idle_since >= gt)
			job_collect(ds, j);
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
	free(ds);
}
