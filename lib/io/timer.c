#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "duration.h"
#include "timer.h"
#include "vec.h"

struct timers {
	pthread_mutex_t *mu;
	pthread_cond_t cv;
	pthread_t thread;
	int running, stopping;
	struct timer **heap;
	size_t len, cap;
	void (*unlock)(void *arg);
	void *unlock_arg;
};

static void
place(struct timers *ts, size_t i, struct timer *t)
{
	ts->heap[i] = t;
	t->slot = i + 1;
}

static void
sift_up(struct timers *ts, size_t i)
{
	struct timer *t = ts->heap[i];

	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (ts->heap[parent]->at <= t->at)
			break;
		place(ts, i, ts->heap[parent]);
		i = parent;
	}
	place(ts, i, t);
}

static void
sift_down(struct timers *ts, size_t i)
{
	struct timer *t = ts->heap[i];

	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= ts->len)
			break;
		if (c + 1 < ts->len && ts->heap[c + 1]->at < ts->heap[c]->at)
			c++;
		if (t->at <= ts->heap[c]->at)
			break;
		place(ts, i, ts->heap[c]);
		i = c;
	}
	place(ts, i, t);
}

struct timers *
timers_new(pthread_mutex_t *mu)
{
	struct timers *ts = calloc(1, sizeof(*ts));
	pthread_condattr_t ca;

	if (ts == NULL)
		return NULL;
	ts->mu = mu;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ts->cv, &ca);
	pthread_condattr_destroy(&ca);
	return ts;
}

int
timers_add(struct timers *ts, struct timer *t, int64_t at)
{
	if (t->slot != 0)
		timers_cancel(ts, t);
	if (vec_grow(&ts->heap, &ts->cap, ts->len + 1, sizeof(*ts->heap)) < 0)
		return -1;
	t->at = at;
	place(ts, ts->len++, t);
	sift_up(ts, ts->len - 1);
	/* Only a new earliest deadline changes how long the thread sleeps. */
	if (ts->heap[0] == t)
		pthread_cond_signal(&ts->cv);
	return 0;
}

void
timers_cancel(struct timers *ts, struct timer *t)
{
	size_t i;
	struct timer *last;

	if (t->slot == 0)
		return;
	i = t->slot - 1;
	t->slot = 0;
	last = ts->heap[--ts->len];
	if (i == ts->len)
		return;
	place(ts, i, last);
	if (i > 0 && ts->heap[(i - 1) / 2]->at > last->at)
		sift_up(ts, i);
	else
		sift_down(ts, i);
}

size_t
timers_count(const struct timers *ts)
{
	return ts->len;
}

void
timers_set_unlock(struct timers *ts, void (*unlock)(void *arg), void *arg)
{
	ts->unlock = unlock;
	ts->unlock_arg = arg;
}

static void *
run(void *arg)
{
	struct timers *ts = arg;

	pthread_mutex_lock(ts->mu);
	while (!ts->stopping) {
		int64_t now = duration_now_ms();
		int fired = 0;

		while (ts->len > 0 && ts->heap[0]->at <= now) {
			struct timer *t = ts->heap[0];
			timers_cancel(ts, t);
			t->fire(t);
			fired = 1;
		}
		if (fired && ts->unlock != NULL) {
			/* Let the owner finish what the timers began, outside
			 * the lock, then look at the heap again. */
			ts->unlock(ts->unlock_arg);
			pthread_mutex_lock(ts->mu);
			continue;
		}
		if (ts->len == 0) {
			pthread_cond_wait(&ts->cv, ts->mu);
		} else {
			int64_t at = ts->heap[0]->at;
			struct timespec ts_at = {
			    .tv_sec = at / 1000,
			    .tv_nsec = (at % 1000) * 1000000,
			};
			pthread_cond_timedwait(&ts->cv, ts->mu, &ts_at);
		}
	}
	pthread_mutex_unlock(ts->mu);
	return NULL;
}

int
timers_start(struct timers *ts)
{
	if (pthread_create(&ts->thread, NULL, run, ts) != 0)
		return -1;
	ts->running = 1;
	return 0;
}

void
timers_stop(struct timers *ts)
{
	if (!ts->running)
		return;
	pthread_mutex_lock(ts->mu);
	ts->stopping = 1;
	pthread_cond_signal(&ts->cv);
	pthread_mutex_unlock(ts->mu);
	pthread_join(ts->thread, NULL);
	ts->running = 0;
}

void
timers_free(struct timers *ts)
{
	if (ts == NULL)
		return;
	timers_stop(ts);
	pthread_cond_destroy(&ts->cv);
	free(ts->heap);
	free(ts);
}
