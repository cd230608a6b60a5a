/*
 * dataset_obj.c: the things of the datasets' state (datasets, workers,
 * jobs, tasks, clients): finding, freeing and unlinking them, and the
 * events the state sends. No records: the journal's apply and the
 * operations both use these.
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

int
ds_is_static(enum shard_mode m)
{
	return m == SHARD_FILE || m == SHARD_DATA || m == SHARD_FILE_OR_DATA ||
	    m == SHARD_HINT;
}

void
ds_emit(struct ds *ds, enum ds_event_type type, const char *worker,
    uint64_t job)
{
	struct ds_event ev = {type, worker, job};

	if (!ds->replaying)
		ds->fn(&ev, ds->arg);
}

/* Datasets. */

uint64_t
ds_fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *s = p;

	for (size_t i = 0; i < n; i++) {
		h ^= s[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* A fingerprint's start: what the splits are read with. */
uint64_t
ds_fp_head(const char *reader, enum framing framing, int skips)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	h = ds_fnv(h, reader, strlen(reader) + 1);
	h = ds_fnv(h, framing_name(framing), strlen(framing_name(framing)) + 1);
	return ds_fnv(h, skips ? "s" : "-", 1);
}

int
ds_name_ok(const char *s)
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

void
ds_dataset_free(struct ds_dataset *d)
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

const struct ds_dataset *
ds_datasets(const struct ds *ds)
{
	return ds->datasets;
}

/* Tasks. */

struct ds_worker *
ds_worker_find(struct ds *ds, const char *name)
{
	for (struct ds_worker *w = ds->workers; w != NULL; w = w->next)
		if (strcmp(w->name, name) == 0)
			return w;
	return NULL;
}

void
ds_tasks_changed(struct ds *ds, struct ds_worker *w)
{
	w->changed = 1;
	ds_emit(ds, DS_EV_TASKS, w->name, 0);
}

long
ds_static_index(struct ds *ds, const char *name)
{
	for (size_t i = 0; i < ds->cfg.nstatic; i++)
		if (strcmp(ds->cfg.static_workers[i], name) == 0)
			return (long)i;
	return -1;
}

int
ds_task_listed(const struct ds_task *t)
{
	return t->state != DS_TASK_FAILED && !t->pending;
}

void
ds_task_free(struct ds_task *t)
{
	struct ds_lease *l;

	while ((l = t->leases.head) != NULL) {
		ds_list_unlink(&t->leases, l);
		ds_lease_free(l);
	}
	free(t->acks);
	free(t->told);
	free(t->skips);
	free(t->last);
	free(t);
}

/* t's leases go to the front of its job's queue, in order. */
void
ds_task_release_leases(struct ds *ds, struct ds_task *t)
{
	struct ds_job *j = t->job;
	struct ds_lease *l;

	if (t->leases.count == 0)
		return;
	while ((l = t->leases.tail) != NULL) {
		ds_list_unlink(&t->leases, l);
		l->task = NULL;
		ds_list_push(&j->queue, l, 1);
		ds->releases++;
	}
	ds_emit(ds, DS_EV_SPLITS, NULL, j->id);
}

void
ds_client_unlink(struct ds_job *j, struct ds_client *c)
{
	struct ds_client **pp;

	for (pp = &j->clients; *pp != c; pp = &(*pp)->next)
		;
	*pp = c->next;
	j->nclients--;
}

/* Digits alone: an epoch. */
int
ds_run_ok(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && n <= 128 &&
	    strspn(s,
	        "0123456789abcdefghijklmnopqrstuvwxyz"
	        "ABCDEFGHIJKLMNOPQRSTUVWXYZ-_.") == n;
}

void
ds_job_free(struct ds_job *j)
{
	struct ds_lease *l;

	while (j->tasks != NULL) {
		struct ds_task *t = j->tasks;
		j->tasks = t->next;
		ds_task_free(t);
	}
	while (j->clients != NULL) {
		struct ds_client *c = j->clients;
		j->clients = c->next;
		free(c);
	}
	while ((l = j->queue.head) != NULL) {
		ds_list_unlink(&j->queue, l);
		ds_lease_free(l);
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

const struct ds_job *
ds_jobs(const struct ds *ds)
{
	return ds->jobs;
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

struct ds_task *
ds_job_task(struct ds_job *j, uint64_t id)
{
	for (struct ds_task *t = j->tasks; t != NULL; t = t->next)
		if (t->id == id)
			return t;
	return NULL;
}
