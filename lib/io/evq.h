/*
 * evq.h: how a supervisor's threads talk to its main loop, and how that
 * loop stops them.
 *
 * An event queue is a pipe: each event is one write of at most PIPE_BUF
 * bytes, so events from many threads never interleave, and the main loop
 * polls the read end with its other descriptors (signals, timers).
 *
 * A cancel is a pipe too: firing it makes its read end readable for good,
 * which ends every nap and every HTTP call that watches it.
 */
#ifndef MUSTER_EVQ_H
#define MUSTER_EVQ_H

#include <stddef.h>
#include <stdint.h>

struct evq {
	int fd[2];
};

int evq_open(struct evq *q);
void evq_close(struct evq *q);
/* One event of n bytes (n <= PIPE_BUF). */
void evq_post(struct evq *q, const void *ev, size_t n);
/* Reads one event of n bytes; 0, or -1 when none is whole. */
int evq_read(struct evq *q, void *ev, size_t n);
int evq_fd(const struct evq *q);

struct cancel {
	int fd[2];
};

int cancel_open(struct cancel *c);
void cancel_close(struct cancel *c);
void cancel_fire(struct cancel *c);
int cancel_fd(const struct cancel *c);

/*
 * Sleeps ms, or less when fd (a cancel's, -1 for none) becomes readable:
 * then returns -1.
 */
int nap(int fd, int64_t ms);

#endif
