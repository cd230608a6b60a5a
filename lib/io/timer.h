/*
 * timer.h: deadlines for parked requests and periodic checks. A min-heap of
 * timers and one thread that fires them. The heap is guarded by the caller's
 * own mutex, and a timer fires with that mutex held, so a timer and the state
 * change that would cancel it can never race: whoever takes the mutex first
 * wins, and the other finds the timer gone.
 */
#ifndef MUSTER_TIMER_H
#define MUSTER_TIMER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct timer {
	int64_t at;  /* monotonic ms */
	size_t slot; /* position in the heap + 1; 0 when idle */
	void (*fire)(struct timer *t);
};

struct timers;

/* mu guards every call below except timers_new, timers_start, timers_free. */
struct timers *timers_new(pthread_mutex_t *mu);
/*
 * How the thread lets go of mu after firing timers: unlock(arg) must
 * release mu (and may then finish work the fired timers left, such as
 * resuming the requests they answered). Default: pthread_mutex_unlock.
 */
void timers_set_unlock(struct timers *ts, void (*unlock)(void *arg), void *arg);
int timers_start(struct timers *ts);
/* Stops the thread; call without holding mu. */
void timers_stop(struct timers *ts);
void timers_free(struct timers *ts);

/* Arms t for monotonic time at (re-arming moves it). 0, or -1 on ENOMEM. */
int timers_add(struct timers *ts, struct timer *t, int64_t at);
/* Disarms t; harmless when it is not armed. */
void timers_cancel(struct timers *ts, struct timer *t);
size_t timers_count(const struct timers *ts);

#endif
