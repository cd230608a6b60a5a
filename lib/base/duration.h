/*
 * duration.h: durations as people write them ("500ms", "30s", "1h30m",
 * "1.5s"; a bare number means seconds), in milliseconds, and the monotonic
 * clock every deadline is measured on.
 */
#ifndef MUSTER_DURATION_H
#define MUSTER_DURATION_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Parses s into *ms. Returns 0, or -1 when s is not a duration. */
int duration_parse(const char *s, int64_t *ms);

/* Writes the shortest exact form ("1h30m", "250ms", "0s") into buf. */
char *duration_format(int64_t ms, char *buf, size_t size);

/* Milliseconds on the monotonic clock. */
int64_t duration_now_ms(void);

/* The CLOCK_REALTIME time ms from now: the deadline pthread_cond_timedwait
 * and pthread_mutex_timedlock take. */
struct timespec duration_realtime_in(int64_t ms);

#endif
