/*
 * log.h: the one way programs and the library report to people. Lines go to
 * stderr as "prog: message"; debug lines only with -v.
 *
 * A daemon must never stall on its log: a reader that stops reading (a
 * paused terminal, a stuck log shipper) would otherwise freeze whoever
 * logs, lock and all. log_async() hands lines to a thread of their own
 * through a bounded queue; when the queue is full a line is dropped and
 * counted, and the writer says how many it lost once it catches up.
 */
#ifndef MUSTER_LOG_H
#define MUSTER_LOG_H

#include <stdint.h>

void log_init(const char *prog, int verbose);
const char *log_prog(void);
int log_verbose(void);

void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * From now on lines are queued (up to max_bytes) and written by a thread.
 * 0, or -1 when the thread cannot start (lines then stay synchronous).
 */
int log_async(unsigned long max_bytes);
/* Writes what is queued, for at most timeout_ms, and stops the thread. */
void log_flush(int64_t timeout_ms);
/* Lines dropped because the sink did not keep up. */
unsigned long log_dropped(void);
/* Bytes waiting in the queue. */
unsigned long log_queued_bytes(void);

#endif
