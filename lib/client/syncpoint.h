/*
 * syncpoint.h: the C API a training program uses to learn the step at
 * which every task checkpoints before a preemption. Link with
 * libmuster-syncpoint (or the client archive); the program must run under
 * preemptwatch, which hands out the page this API reads.
 *
 * Every step, the program calls syncpoint_reached(sp, step): no system
 * call on the common path, a few nanoseconds. While the tasks agree on the
 * sync step, the call waits (on a futex in the page) until it is known.
 */
#ifndef MUSTER_SYNCPOINT_H
#define MUSTER_SYNCPOINT_H

#include <stddef.h>
#include <stdint.h>

#define SYNCPOINT_ENV "MUSTER_SYNC_SOCKET"

enum sync_state {
	SYNC_IDLE,   /* no notice */
	SYNC_NOTICE, /* a notice; the protocol has not started */
	SYNC_FROZEN, /* the protocol runs; steps wait */
	SYNC_KNOWN,  /* the sync step is known */
	SYNC_FAILED, /* the protocol failed: no sync step */
};

/* What syncpoint_reached answers. */
enum {
	SYNCPOINT_NO = 0,   /* go on training */
	SYNCPOINT_YES = 1,  /* this is the sync step: checkpoint, then exit */
	SYNCPOINT_PAST = 2, /* the sync step is already behind this one (the
	                     * task was late to report its first step):
	                     * checkpoint now and exit, knowing it is not at
	                     * the step the others save at */
};

struct syncpoint_status {
	enum sync_state state;
	int64_t death_ms;  /* Unix ms; 0 when no notice */
	int64_t sync_step; /* -1 when not known */
	int64_t step;      /* the last step reached, -1 none */
	int answered;      /* SYNCPOINT_YES or _PAST once a step was told
	                    * so, else 0 */
};

struct syncpoint;

/*
 * Maps this task's page from the preemptwatch named by MUSTER_SYNC_SOCKET.
 * NULL, with errno set and the reason in err, when not running under
 * preemptwatch or it cannot be reached.
 */
struct syncpoint *syncpoint_open(char *err, size_t errlen);
void syncpoint_close(struct syncpoint *sp);

/*
 * Records step; SYNCPOINT_YES when it is the sync step (checkpoint now,
 * then exit), SYNCPOINT_PAST when the sync step is already behind it
 * (checkpoint now too), else SYNCPOINT_NO. Any value but NO means: save
 * and exit.
 */
int syncpoint_reached(struct syncpoint *sp, int64_t step);
void syncpoint_status(struct syncpoint *sp, struct syncpoint_status *st);
/* Waits up to timeout_ms (-1 forever) for a notice: 1 notice, 0 none. */
int syncpoint_wait_notice(struct syncpoint *sp, int64_t timeout_ms,
    struct syncpoint_status *st);
const char *syncpoint_state_name(enum sync_state s);

#endif
