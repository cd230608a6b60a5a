/*
 * syncpoint.h: where a training command learns the step at which every task
 * checkpoints before a preemption.
 *
 * preemptwatch owns one shared page per task and hands it out over the Unix
 * socket named by MUSTER_SYNC_SOCKET. The command records each step it
 * reaches in the page and reads the protocol's state from it: no system
 * call on the common path. While the protocol runs, steps may not advance:
 * a caller waits (on a futex in the page) until the sync step is known.
 *
 * Ordering: a caller stores its step and then loads the state; the protocol
 * stores FROZEN and then loads the step. Both are sequentially consistent,
 * so either the caller sees FROZEN and waits, or the protocol sees its step:
 * no step is ever taken past the sync point unnoticed.
 */
#ifndef MUSTER_SYNCPOINT_H
#define MUSTER_SYNCPOINT_H

#include <stdatomic.h>
#include <stdint.h>

#define SYNCPOINT_ENV "MUSTER_SYNC_SOCKET"

enum sync_state {
	SYNC_IDLE,      /* no notice */
	SYNC_NOTICE,    /* a notice; the protocol has not started */
	SYNC_FROZEN,    /* the protocol runs; steps wait */
	SYNC_KNOWN,     /* the sync step is known */
	SYNC_FAILED,    /* the protocol failed: no sync step */
};

struct sync_page {
	_Atomic int64_t step;           /* the last step reached, -1 none */
	_Atomic uint32_t state;         /* enum sync_state */
	_Atomic uint32_t seq;           /* futex word, bumped on each change */
	_Atomic int64_t sync_step;      /* when SYNC_KNOWN */
	_Atomic int64_t death_ms;       /* Unix time in ms, 0 when none */
	_Atomic uint32_t reached;       /* a caller was told "this is it" */
};

struct syncpoint_status {
	enum sync_state state;
	int64_t death_ms;               /* 0 when no notice */
	int64_t sync_step;              /* -1 when not known */
	int64_t step;                   /* the last step reached, -1 none */
};

/*
 * The C API for training programs. Each returns -1 with errno set and a
 * message from syncpoint_error() when not running under preemptwatch.
 */

/* 1 when step is the sync point (checkpoint now, then exit), else 0. */
int syncpoint_reached(int64_t step);
int syncpoint_status(struct syncpoint_status *st);
/* Waits up to timeout_ms (-1 forever) for a notice: 1 notice, 0 none. */
int syncpoint_wait_notice(int64_t timeout_ms, struct syncpoint_status *st);
const char *syncpoint_error(void);
const char *syncpoint_state_name(enum sync_state s);

/* The serving side, for preemptwatch. */
struct sync_server;

/* Creates the page and listens on a socket in a fresh private directory. */
struct sync_server *sync_server_new(char *err, size_t errlen);
const char *sync_server_path(const struct sync_server *s);
struct sync_page *sync_server_page(struct sync_server *s);
/* Serves clients until sync_server_free (runs its own thread). */
int sync_server_start(struct sync_server *s);
void sync_server_free(struct sync_server *s);

/* State changes, with a wake-up of every waiter. */
void sync_page_set(struct sync_page *p, enum sync_state st);
/* Freezes steps and returns the last one reached. */
int64_t sync_page_freeze(struct sync_page *p);
void sync_page_reset(struct sync_page *p);

#endif
