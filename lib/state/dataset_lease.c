/*
 * dataset_lease.c: a dynamic job's open splits: the map of open seqs, the
 * lists of leases (a task's, the job's queue) and the ranges of each that
 * were delivered, and the views of them. Plain structures: no records, no
 * events.
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

/* The lease map. */

static size_t
hash_seq(uint64_t seq, size_t cap)
{
	seq *= 0x9e3779b97f4a7c15ULL;
	return (size_t)(seq >> 17) & (cap - 1);
}

struct ds_lease *
ds_map_get(struct lease_map *m, uint64_t seq)
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
int
ds_map_reserve(struct lease_map *m, size_t n)
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

int
ds_map_put(struct lease_map *m, struct ds_lease *l)
{
	if (ds_map_reserve(m, m->count + 1) < 0)
		return -1;
	size_t i = hash_seq(l->seq, m->cap);
	while (m->slot[i] != NULL)
		i = (i + 1) & (m->cap - 1);
	m->slot[i] = l;
	m->count++;
	return 0;
}

void
ds_map_del(struct lease_map *m, uint64_t seq)
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

void
ds_list_push(struct ds_lease_list *l, struct ds_lease *x, int front)
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

void
ds_list_unlink(struct ds_lease_list *l, struct ds_lease *x)
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

void
ds_lease_free(struct ds_lease *l)
{
	if (l == NULL)
		return;
	free(l->r);
	free(l);
}

size_t
ds_job_leased(const struct ds_job *j)
{
	return j->leases != NULL ? j->leases->count : 0;
}

static int
lease_cmp(const void *a, const void *b)
{
	const struct ds_lease *x = *(const struct ds_lease *const *)a;
	const struct ds_lease *y = *(const struct ds_lease *const *)b;

	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

const struct ds_lease **
ds_job_open_leases(const struct ds_job *j, size_t *n)
{
	const struct lease_map *m = j->leases;
	const struct ds_lease **v;

	*n = 0;
	if ((v = calloc(ds_job_leased(j) + 1, sizeof(*v))) == NULL)
		return NULL;
	for (size_t i = 0; m != NULL && i < m->cap; i++)
		if (m->slot[i] != NULL)
			v[(*n)++] = m->slot[i];
	qsort(v, *n, sizeof(*v), lease_cmp);
	return v;
}
