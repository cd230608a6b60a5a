/*
 * runner.h: a worker's closure runner, behind workerloop.
 *
 * It registers with dispatchd, keeps a heartbeat parked there (its
 * connection closing is how dispatchd learns at once that the worker
 * died; its reply names closures to stop, and the data tasks it hands the
 * worker's data server), and runs closures in slots, a thread each: a
 * slot takes a closure, builds the resources it needs (once per
 * incarnation, under dir), runs it (a process of its own, or a line to
 * the slot's --serve process) and reports its end together with the
 * request for the next one.
 *
 * When dispatchd fails an incarnation (it did not hear the heartbeat in
 * time, or restarted) the runner stops its closures and registers again.
 * Stopping it stops its closures (TERM, the grace period, KILL), reports
 * them aborted so that they run again at once elsewhere, and leaves.
 */
#ifndef MUSTER_RUNNER_H
#define MUSTER_RUNNER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "dataserve.h"
#include "dispatch_client.h"
#include "status.h"

struct runner_opts {
	const char *addr; /* dispatchd's address */
	const char *task; /* this worker's name, JOB:INDEX */
	const char *host; /* registered, with the data server's address */
	long slots;       /* closures run at once */
	/* Before its first take a slot waits start_delay times the worker's
	 * index, at most start_delay_max (0: no limit). */
	int64_t start_delay, start_delay_max;
	int64_t grace;     /* from TERM to KILL, when a closure is stopped */
	size_t max_output; /* of a closure's stdout; the rest is cut */
	const char *serve; /* a command each slot keeps running; NULL: none */
	const char *dir;   /* resources are built in DIR/INCARNATION/NAME */
	const sigset_t *blocked; /* signals children get unblocked */
	struct dataserve *ds;    /* the worker's data server */
};

/*
 * A runner, not yet registered; NULL when memory ran out. o is copied, but
 * what it points to (strings, the signal set, ds) stays the caller's, and
 * must outlive the runner.
 */
struct runner *runner_new(const struct runner_opts *o);
/*
 * Registers (again) through dc: a new incarnation, its resources built
 * anew and its data tasks handed anew. ST_OK, or dispatchd's status with
 * why in err (ST_CANCELLED when dc's cancel descriptor became readable).
 */
enum status runner_register(struct runner *wk, struct dispatch_client *dc,
    char *err, size_t errlen);
/*
 * Once registered: starts the heartbeat and the slots. ST_OK, or
 * ST_INTERNAL with why in err, and nothing started.
 */
enum status runner_start(struct runner *wk, char *err, size_t errlen);
/*
 * Stops taking work and stops the closures running, reports their ends
 * (aborted, so that they run again at once), leaves through dc, and ends
 * the heartbeat: leaving first, as a heartbeat that closes first looks
 * like a worker that died.
 */
void runner_stop(struct runner *wk, struct dispatch_client *dc);
/* After runner_stop, or a runner_start that failed, or none. */
void runner_free(struct runner *wk);

/*
 * The directory resources are built in: dir and its parents made, or
 * with dir NULL a new one under $TMPDIR (or /tmp) that runner_dir_remove
 * removes (*made set). 0, or -1 with errno and the path it tried in path.
 */
int runner_dir_make(const char *dir, char *path, size_t size, int *made);
/* Removes path and all it holds. */
void runner_dir_remove(const char *path);

#endif
