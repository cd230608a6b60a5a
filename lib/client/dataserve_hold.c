/*
 * dataserve_hold.c: what consumers hold of a task's chunks, under the
 * task's lock: a reply's chunks acknowledged (noted for dispatchd) or given
 * back to the queue, and the holds of consumers that name themselves,
 * kept across their connections until they come back or are known gone.
 * Calls only dataserve_feed.c (dataserve_int.h lists the files).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dataserve_int.h"
#include "vec.h"

/*
 * Notes chunks as acknowledged, for dispatchd: what a consumer delivered
 * counts even if it dies before it says so. A range that follows the
 * last one extends it.
 */
static void
acked_add(struct feed *t, const struct chunk *list)
{
	for (const struct chunk *c = list; c != NULL; c = c->next) {
		struct acked *a =
		    t->nacked > 0 ? &t->acked[t->nacked - 1] : NULL;
		int64_t total = c->h.flags & CHUNK_SPLIT_END ?
		    (int64_t)(c->h.first + c->h.count) :
		    -1;
		if (a != NULL && a->seq == c->h.seq && a->end == c->h.first) {
			a->end += c->h.count;
			a->total = total;
			continue;
		}
		/* Out of memory: the consumer's own report still counts. */
		if (vec_grow(&t->acked, &t->capacked, t->nacked + 1,
		        sizeof(*t->acked)) < 0)
			return;
		t->acked[t->nacked++] = (struct acked){c->h.seq, c->h.first,
		    c->h.first + c->h.count, total};
	}
}

void
dataserve_chunks_ack(struct feed *t, struct chunk *list)
{
	if (t->mode == SHARD_DYNAMIC)
		acked_add(t, list);
	dataserve_chunks_free(t, list);
}

void
dataserve_chunks_give_back(struct feed *t, struct chunk *list)
{
	struct chunk *last;

	if (list == NULL)
		return;
	if (t->dropped) {
		dataserve_chunks_free(t, list);
		return;
	}
	for (last = list; last->next != NULL; last = last->next)
		;
	if ((last->next = t->head) == NULL)
		t->tail = last;
	t->head = list;
}

struct chunk *
dataserve_chunks_copy(const struct chunk *list, int *ok)
{
	struct chunk *copy = NULL, **tail = &copy;

	*ok = 1;
	for (const struct chunk *c = list; c != NULL; c = c->next) {
		struct chunk *one = malloc(sizeof(*one));
		if (one == NULL) {
			*ok = 0;
			break;
		}
		*one = *c;
		one->next = NULL;
		if (one->blk != NULL)
			one->blk->refs++;
		*tail = one;
		tail = &one->next;
	}
	return copy;
}

/* Holds of consumers that name themselves. */

struct hold *
dataserve_hold_find(struct feed *t, const char *id)
{
	struct hold *h;

	for (h = t->holds; h != NULL && strcmp(h->id, id) != 0; h = h->next)
		;
	return h;
}

/*
 * A consumer the task has no room for makes room by the oldest that went
 * away holding nothing, which has only its last request's number to lose;
 * one holding chunks waits for its time (dataserve_holds_expire). The
 * number is kept until then, even once the consumer is gone: a request
 * of its that comes late on a connection it gave up is refused, rather
 * than taken for a first one and its reply lost with the connection.
 */
struct hold *
dataserve_hold_add(struct feed *t, const char *id, long max)
{
	struct hold *h, *oldest = NULL;

	if (t->nholds >= max) {
		for (h = t->holds; h != NULL; h = h->next)
			if (h->conn == 0 && h->n == 0 &&
			    (oldest == NULL || h->away < oldest->away))
				oldest = h;
		if (oldest == NULL)
			return NULL;
		dataserve_hold_forget(t, oldest);
	}
	if ((h = calloc(1, sizeof(*h))) == NULL)
		return NULL;
	memcpy(h->id, id, strlen(id) + 1);
	h->next = t->holds;
	t->holds = h;
	t->nholds++;
	return h;
}

void
dataserve_hold_release(struct feed *t, struct chunk **list, size_t *n,
    int acked)
{
	if (*list == NULL)
		return;
	if (acked)
		dataserve_chunks_ack(t, *list);
	else
		dataserve_chunks_give_back(t, *list);
	t->held -= *n;
	*list = NULL;
	*n = 0;
	pthread_cond_broadcast(&t->more);
}

void
dataserve_hold_forget(struct feed *t, struct hold *h)
{
	struct hold **pp;

	dataserve_hold_release(t, &h->chunks, &h->n, 0);
	for (pp = &t->holds; *pp != h; pp = &(*pp)->next)
		;
	*pp = h->next;
	t->nholds--;
	free(h);
}

/*
 * A connection asks for one consumer of a task at a time, so that the
 * holds it keeps from going away are no more than the connections: one
 * it asked for before is away from now, as if it had closed.
 */
void
dataserve_hold_claim(struct feed *t, struct hold *h, uint64_t conn, int64_t now)
{
	for (struct hold *o = t->holds; o != NULL; o = o->next)
		if (o != h && o->conn == conn) {
			o->conn = 0;
			o->away = now;
		}
	h->conn = conn;
}

void
dataserve_holds_away(struct feed *t, uint64_t conn, int64_t now)
{
	int some = 0;

	for (struct hold *h = t->holds; h != NULL; h = h->next)
		if (h->conn == conn) {
			h->conn = 0;
			h->away = now;
			some = 1;
		}
	/* Waiters learn when the first of them will be gone. */
	if (some)
		pthread_cond_broadcast(&t->more);
}

int64_t
dataserve_holds_expire(struct feed *t, int64_t now, int64_t bound)
{
	int64_t next = INT64_MAX;

	for (struct hold *h = t->holds; h != NULL; h = h->next) {
		if (h->conn != 0 || h->n == 0)
			continue;
		if (now - h->away >= bound)
			dataserve_hold_release(t, &h->chunks, &h->n, 0);
		else if (h->away + bound < next)
			next = h->away + bound;
	}
	return next;
}
