/*
 * dataserve_feed.c: what the data server's other files stand on: its
 * threads, counted, and a task: its blocks, the queue of chunks cut from
 * them, its rounds, and its life from an object of a heartbeat reply to
 * its drop. Calls no other file of the data server (dataserve_int.h lists
 * them).
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dataserve_int.h"
#include "log.h"
#include "shardmode.h"
#include "splitorder.h"
#include "text.h"

/* Threads, counted so that dataserve_stop can wait for them. */

/* Starts fn(arg) detached; ds->mu held. */
int
dataserve_thread_start(struct dataserve *ds, void *(*fn)(void *), void *arg)
{
	pthread_attr_t a;
	pthread_t th;
	int rc;

	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if ((rc = pthread_create(&th, &a, fn, arg)) == 0)
		ds->threads++;
	pthread_attr_destroy(&a);
	return rc == 0 ? 0 : -1;
}

void
dataserve_thread_done(struct dataserve *ds)
{
	pthread_mutex_lock(&ds->mu);
	if (--ds->threads == 0)
		pthread_cond_broadcast(&ds->idle);
	pthread_mutex_unlock(&ds->mu);
}

void
dataserve_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
}

/* Waits on cv until the monotonic time until (duration_now_ms). */
void
dataserve_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu,
    int64_t until)
{
	struct timespec ts = {until / 1000, (long)(until % 1000) * 1000000};

	pthread_cond_timedwait(cv, mu, &ts);
}

/* Blocks and chunks: under the task's lock. */

/*
 * A block no chunk points into is kept as a spare while the reader runs,
 * for it to fill again: the task's memory grows to its buffer once, and
 * stays there. Memory fresh from the system costs a page fault per page
 * on its first read, more than the read itself.
 */
void
dataserve_block_put(struct feed *t, struct block *b)
{
	if (b == NULL)
		return;
	/* The reader waits for a block to be freed, or for its own to be
	 * left to it alone. */
	pthread_cond_signal(&t->room);
	if (--b->refs > 0)
		return;
	if (t->reading && !t->dropped && b->cap <= SPARE_CAP) {
		b->next = t->spare;
		t->spare = b;
	} else {
		t->mem -= b->cap;
		free(b);
	}
}

/* Frees the spares. */
void
dataserve_spares_free(struct feed *t)
{
	while (t->spare != NULL) {
		struct block *b = t->spare;
		t->spare = b->next;
		t->mem -= b->cap;
		free(b);
	}
}

void
dataserve_chunks_free(struct feed *t, struct chunk *c)
{
	while (c != NULL) {
		struct chunk *next = c->next;
		dataserve_block_put(t, c->blk);
		free(c);
		c = next;
	}
}

void
dataserve_queue_push(struct feed *t, struct chunk *c)
{
	c->next = NULL;
	if (t->tail != NULL)
		t->tail->next = c;
	else
		t->head = c;
	t->tail = c;
}

struct chunk *
dataserve_queue_pop(struct feed *t)
{
	struct chunk *c = t->head;

	if (c != NULL && (t->head = c->next) == NULL)
		t->tail = NULL;
	return c;
}

/* The length of the first element of a chunk's payload. */
static size_t
first_len(enum framing f, const char *p, size_t len)
{
	const char *e;
	uint32_t be;

	if (f == FRAME_LEN32) {
		memcpy(&be, p, 4);
		return 4 + (size_t)ntohl(be);
	}
	e = memchr(p, f == FRAME_LINES ? '\n' : '\0', len);
	return e != NULL ? (size_t)(e - p) + 1 : len;
}

/* The queue's next element, as a chunk of its own; NULL when none. */
struct chunk *
dataserve_queue_take_one(struct feed *t)
{
	struct chunk *c, *one;
	size_t len;

	while ((c = t->head) != NULL && c->h.count == 0) {
		dataserve_queue_pop(t);
		c->next = NULL;
		dataserve_chunks_free(t, c);
	}
	if (c == NULL)
		return NULL;
	if (c->h.count == 1) {
		dataserve_queue_pop(t);
		c->next = NULL;
		return c;
	}
	if ((one = malloc(sizeof(*one))) == NULL)
		return NULL;
	len = first_len(t->framing, c->p, c->h.len);
	*one = *c;
	one->next = NULL;
	one->h.count = 1;
	one->h.len = (uint32_t)len;
	one->h.flags = 0;
	c->blk->refs++;
	c->p += len;
	c->h.len -= (uint32_t)len;
	c->h.first++;
	c->h.count--;
	return one;
}

void
dataserve_round_free(struct feed *t, struct round *r)
{
	struct round **pp;

	for (pp = &t->rounds; *pp != r; pp = &(*pp)->next)
		;
	if ((*pp = r->next) == NULL)
		t->rounds_end = pp;
	for (long i = 0; i < r->have; i++)
		dataserve_chunks_free(t, r->el[i]);
	free(r->el);
	free(r->took);
	free(r);
}

/* Tasks. */

void
dataserve_feed_unref(struct feed *t)
{
	if (atomic_fetch_sub(&t->refs, 1) != 1)
		return;
	dataserve_chunks_free(t, t->head);
	while (t->holds != NULL) {
		struct hold *h = t->holds;
		t->holds = h->next;
		dataserve_chunks_free(t, h->chunks);
		free(h);
	}
	while (t->rounds != NULL)
		dataserve_round_free(t, t->rounds);
	free(t->asked);
	dataserve_spares_free(t);
	close(t->cancel[0]);
	close(t->cancel[1]);
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->more);
	pthread_cond_destroy(&t->room);
	free(t->job);
	free(t->dataset);
	free(t->reader);
	free(t->error);
	free(t->acked);
	free(t);
}

/* Stops t's reader and lets go of the table's hold on it. */
void
dataserve_feed_drop(struct feed *t)
{
	char c = 1;

	log_debug("task %" PRIu64 ": dropped", t->id);
	pthread_mutex_lock(&t->mu);
	t->dropped = 1;
	if (t->pid > 0)
		kill(-t->pid, SIGKILL);
	pthread_cond_broadcast(&t->more);
	pthread_cond_broadcast(&t->room);
	pthread_mutex_unlock(&t->mu);
	(void)!write(t->cancel[1], &c, 1);
	dataserve_feed_unref(t);
}

/* Task t of the table, held (dataserve_feed_unref), or NULL. */
struct feed *
dataserve_feed_get(struct dataserve *ds, uint64_t id)
{
	struct feed *t;

	pthread_mutex_lock(&ds->mu);
	for (t = ds->tasks; t != NULL && t->id != id; t = t->next)
		;
	if (t != NULL)
		atomic_fetch_add(&t->refs, 1);
	pthread_mutex_unlock(&ds->mu);
	return t;
}

/* An id given as a string or a number, as text. */
static char *
id_text(json_t *v)
{
	char *s = NULL;

	if (json_is_string(v))
		return strdup(json_string_value(v));
	if (json_is_integer(v) &&
	    asprintf(&s, "%" JSON_INTEGER_FORMAT, json_integer_value(v)) < 0)
		return NULL;
	return s;
}

json_int_t
dataserve_int_field(json_t *o, const char *name, json_int_t def)
{
	json_t *v = json_object_get(o, name);

	return json_is_integer(v) ? json_integer_value(v) : def;
}

/* Why task object o cannot be read goes to t->bad. */
static void
task_check(struct feed *t, json_t *o)
{
	const char *mode = json_string_value(json_object_get(o, "mode"));
	const char *framing = json_string_value(json_object_get(o, "framing"));

	/* file_or_data is resolved by dispatchd: a task has file or data. */
	if (shard_mode_parse(mode, &t->mode) < 0 ||
	    t->mode == SHARD_FILE_OR_DATA)
		snprintf(t->bad, sizeof(t->bad), "mode %.64s is not served",
		    mode != NULL ? mode : "(none)");
	else if (*t->reader == '\0')
		snprintf(t->bad, sizeof(t->bad), "the task has no reader");
	else if (framing != NULL && framing_parse(framing, &t->framing) < 0)
		snprintf(t->bad, sizeof(t->bad), "framing %.64s is unknown",
		    framing);
	else if (*t->dataset == '\0' && t->mode != SHARD_DYNAMIC)
		snprintf(t->bad, sizeof(t->bad), "the task has no dataset");
	else if (t->shard_count < 1 || t->shard_index < 0 ||
	    t->shard_index >= t->shard_count)
		snprintf(t->bad, sizeof(t->bad), "shard %ld of %ld",
		    t->shard_index, t->shard_count);
	else if (t->consumers < 0 || t->consumers > 65536)
		snprintf(t->bad, sizeof(t->bad), "%ld consumers", t->consumers);
}

/* A task from its object in a heartbeat reply. One that cannot be read
 * keeps why, for its thread to report. */
struct feed *
dataserve_feed_new(struct dataserve *ds, json_t *o)
{
	const char *reader = json_string_value(json_object_get(o, "reader"));
	struct feed *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return NULL;
	if (pipe2(t->cancel, O_CLOEXEC | O_NONBLOCK) < 0) {
		free(t);
		return NULL;
	}
	t->ds = ds;
	atomic_init(&t->refs, 1);
	t->id = (uint64_t)dataserve_int_field(o, "id", 0);
	t->job = id_text(json_object_get(o, "job"));
	t->dataset = id_text(json_object_get(o, "dataset"));
	t->reader = strdup(reader != NULL ? reader : "");
	memcpy(t->inc, ds->inc, sizeof(t->inc));
	t->hb_timeout = ds->hb_timeout;
	t->reader_skips = json_is_true(json_object_get(o, "reader_skips"));
	snprintf(t->secret, sizeof(t->secret), "%s",
	    json_string_value(json_object_get(o, "secret")) != NULL ?
	        json_string_value(json_object_get(o, "secret")) :
	        "");
	t->repeat = (uint64_t)dataserve_int_field(o, "repeat", 1);
	t->seed = (uint64_t)dataserve_int_field(o, "seed", 0);
	t->shard_index = (long)dataserve_int_field(o, "shard_index", 0);
	t->shard_count = (long)dataserve_int_field(o, "shard_count", 1);
	t->consumers = (long)dataserve_int_field(o, "consumers", 0);
	t->buffer = ds->c.buffer;
	t->block = ds->c.buffer < BLOCK_SIZE ? ds->c.buffer : BLOCK_SIZE;
	t->framing = FRAME_LINES;
	if (t->job == NULL)
		t->job = strdup("");
	if (t->dataset == NULL)
		t->dataset = strdup("");
	if (t->job == NULL || t->dataset == NULL || t->reader == NULL) {
		close(t->cancel[0]);
		close(t->cancel[1]);
		free(t->job);
		free(t->dataset);
		free(t->reader);
		free(t);
		return NULL;
	}
	task_check(t, o);
	pthread_mutex_init(&t->mu, NULL);
	dataserve_cond_init(&t->more);
	dataserve_cond_init(&t->room);
	t->rounds_end = &t->rounds;
	if (t->consumers > 0 && t->bad[0] == '\0') {
		/* Without it the task cannot be read: it fails, saying so. */
		t->asked = malloc((size_t)t->consumers * sizeof(*t->asked));
		if (t->asked == NULL)
			snprintf(t->bad, sizeof(t->bad), "out of memory");
		for (long i = 0; t->asked != NULL && i < t->consumers; i++)
			t->asked[i] = -1;
	}
	t->reading = 1;
	return t;
}

/* Text fit for a JSON string: stderr may be any bytes. */
void
dataserve_make_utf8(char *s)
{
	if (text_utf8_valid(s, strlen(s)))
		return;
	for (; *s != '\0'; s++)
		if ((unsigned char)*s >= 0x80)
			*s = '?';
}
