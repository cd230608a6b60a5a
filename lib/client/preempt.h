/*
 * preempt.h: the preemption sync protocol, as the reference's preemption
 * sync manager runs it, over coordd.
 *
 * A task that gets a notice publishes the death time under
 * PREEMPT_NOTICE_KEY (the first notice wins). Every task waits for that
 * key; once the death time is within the protocol window, each freezes its
 * steps, posts its current step under PREEMPT_COUNTER_DIR/TASK, meets the
 * others at barrier PREEMPT_BARRIER (of every task of the cluster, so that
 * one in error fails it), reads every step, checks that no task is in
 * error, and takes max+1 as the sync point. The sync point is written
 * once, under PREEMPT_SYNC_KEY, by the first task to decide; every task
 * takes the value written there, so that all have one step however late
 * each read the counters. Each then records what it knows under
 * PREEMPT_SYNCED_DIR/TASK. All keys are under the run's prefix, so coordd
 * drops them when the job has wound down.
 */
#ifndef MUSTER_PREEMPT_H
#define MUSTER_PREEMPT_H

#include <stddef.h>
#include <stdint.h>

#include "agent.h"
#include "coord_client.h"
#include "session.h"
#include "sync_page.h"

#define PREEMPT_NOTICE_KEY "muster/preemption/notice"
#define PREEMPT_COUNTER_DIR "muster/preemption/counter"
#define PREEMPT_SYNC_KEY "muster/preemption/sync_step"
#define PREEMPT_SYNCED_DIR "muster/preemption/synced"
#define PREEMPT_BARRIER "muster.preemption"

/* Publishes a notice (RFC 3339 death time). A notice already there wins:
 * *death_ms then gets its time. */
enum status preempt_publish(struct coord_client *cc, int64_t *death_ms,
    int64_t deadline);

/*
 * Runs steps 2 to 6 of the protocol for agent a, with page frozen for the
 * duration. A command that has reached no step yet is waited for until
 * first_step_until_ms (wall clock; cancel_fd readable ends the wait), and
 * counted as having none, not as step 0. Every task of the job must take
 * part, none may be in error, and at least one must have a step. On
 * success *sync_step is the cluster's one sync step and the page says so;
 * on failure the barrier is cancelled so nobody waits for this task, the
 * page says SYNC_FAILED, and the status and the client's last error say
 * why: ST_INTERNAL when a task is in error (or left while the others
 * waited), which is a failure of the cluster, not of the protocol.
 */
enum status preempt_sync(struct coord_client *cc, const struct coord_agent *a,
    struct sync_page *page, int64_t barrier_timeout_ms,
    int64_t first_step_until_ms, int cancel_fd, int64_t *sync_step);

/* What the watcher thread of a session needs. */
struct preempt_watch {
	struct session *s;
	struct sync_page *page;
	int64_t notice_grace_ms; /* the death time of a notice
					 * that gives none: now + this */
	int64_t window_ms;       /* start this long before it */
	int64_t grace_ms;        /* the command stops this long before */
	int64_t barrier_timeout_ms;
};

/*
 * A thread of the session (arg: struct preempt_watch): waits for the
 * cluster's notice (SESSION_DEATH with the death time), then, within the
 * window before the death time and once every task is there, runs the
 * protocol (SESSION_SYNCED: st says how, value is the sync step).
 */
void *preempt_watcher(void *arg);

#endif
