/*
 * wallclock.h: wall-clock times, as preemption notices carry them: death
 * times in RFC 3339 ("2026-11-21T10:00:00Z", with fractions and offsets)
 * and, from Azure, in the HTTP date format ("Mon, 19 Sep 2016 18:29:47
 * GMT"). Times are Unix milliseconds.
 */
#ifndef MUSTER_WALLCLOCK_H
#define MUSTER_WALLCLOCK_H

#include <stddef.h>
#include <stdint.h>

int64_t wall_now_ms(void);
/* "2026-11-21T10:00:00.250Z" (fraction only when not whole seconds). */
char *wall_format(int64_t ms, char *buf, size_t size);
/* 0, or -1 when s is not an RFC 3339 date-time. */
int wall_parse_rfc3339(const char *s, int64_t *ms);
/* 0, or -1 when s is not an HTTP (RFC 1123) date. */
int wall_parse_http_date(const char *s, int64_t *ms);

#endif
