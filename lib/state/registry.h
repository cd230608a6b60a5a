/*
 * registry.h: the task registry of a cluster, as a state machine with no
 * network and no clock of its own. Tasks go DISCONNECTED -> CONNECTED
 * (register) -> ERROR (reported, or no heartbeat within the timeout) ->
 * DISCONNECTED (reset), as the reference agent describes them; each has an
 * incarnation, so a restarted task is told from the one before it.
 *
 * Unlike upstream, the registry outlives the job: once no task is connected
 * any more a new epoch begins, in which errored tasks may register again,
 * so a restarted job needs nobody to reset tasks by hand.
 *
 * Not thread-safe: the caller holds one lock around every call, and passes
 * the monotonic time in. Changes others must hear of (a task failed, every
 * task is there, a new epoch) go to the observer, which must not call back
 * into the registry: it queues what to do, and does it after the call.
 */
#ifndef MUSTER_REGISTRY_H
#define MUSTER_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "task.h"

enum reg_state { REG_DISCONNECTED, REG_CONNECTED, REG_ERROR };

struct reg_task {
	char *name; /* "worker:3" */
	size_t index;
	enum reg_state state;
	int recoverable;        /* failures stay its own */
	uint64_t incarnation;   /* 0: never registered */
	int64_t last_heartbeat; /* monotonic ms */
	enum status err;        /* the error while in REG_ERROR, */
	char *errmsg;           /* and after, as the last error */
	int err_reported;       /* reported by the task itself */
	int err_active;         /* an error of this epoch, not reset */
	long left_epoch;        /* epoch + 1 it last left, 0 never */
	int finished;           /* and it left then because its work was
	                         * done (a shutdown not cut short by a
	                         * failure or a preemption) */
	long err_epoch;         /* the epoch of its last error */
};

#define REG_MAX_RECOVERABLE 32

struct registry_config {
	struct cluster_spec cluster; /* ntasks 0: no cluster */
	char recoverable[REG_MAX_RECOVERABLE][TASK_JOB_MAX];
	size_t nrecoverable;
	int64_t heartbeat_timeout_ms; /* 0: 10 s */
	int64_t register_timeout_ms;  /* 0: 1 h */
};

enum reg_event_type {
	REG_TASK_FAILED,    /* task went into error */
	REG_TASK_CONNECTED, /* task registered */
	REG_TASK_LEFT,      /* a connected task left (shut down) */
	REG_ALL_CONNECTED,  /* every task is connected */
	REG_EPOCH,          /* no task connected any more: a new epoch */
};

struct reg_event {
	enum reg_event_type type;
	struct reg_task *task;
	int propagate; /* REG_TASK_FAILED: the others must hear */
};

typedef void (*reg_observer_fn)(const struct reg_event *ev, void *arg);

/* Why a call was refused, for clients that act on it. */
enum reg_reason {
	REG_NO_REASON,
	REG_NOT_REGISTERED,  /* heartbeat of a task coordd does not know */
	REG_RUN_OVER,        /* it left this run: wait for the next */
	REG_FAILED_IN_EPOCH, /* it failed in this run: wait for the next */
};

/* What a call answers besides its status. */
struct reg_answer {
	enum reg_reason reason;
	char msg[1024];
};

struct registry;

struct registry *registry_new(const struct registry_config *cfg,
    reg_observer_fn fn, void *arg, char *err, size_t errlen);
void registry_free(struct registry *r);

/* What the registry counts, for reading. */
struct reg_view {
	size_t ntasks;
	size_t nconnected;
	long epoch;       /* runs of the job so far */
	uint64_t service; /* this registry's incarnation */
	int64_t hb_timeout, register_timeout;
};

const struct reg_view *registry_view(const struct registry *r);
struct reg_task *registry_task(struct registry *r, size_t i);
/* By name, in either spelling; NULL when not in the cluster. */
struct reg_task *registry_find(struct registry *r, const char *name);
/* By a name parsed already. */
struct reg_task *registry_lookup(struct registry *r,
    const struct task_name *tn);
const char *registry_state_name(enum reg_state s);

/* A non-recoverable task that failed in this epoch, or NULL. */
struct reg_task *registry_failed(const struct registry *r);
/* Whether t failed in the current epoch (and was not reset since). */
int registry_failed_now(const struct registry *r, const struct reg_task *t);
/* Whether t's error is one every task should hear of. */
int registry_error_visible(const struct reg_task *t);

/*
 * The task calls. inc is the incarnation as the caller sent it (16 hex
 * digits; NULL when absent), checked at the point upstream checks it: a
 * malformed one is INVALID_ARGUMENT, another task's ABORTED.
 */
enum status registry_register(struct registry *r, struct reg_task *t,
    const char *inc, int64_t now, struct reg_answer *ans);
enum status registry_heartbeat(struct registry *r, struct reg_task *t,
    const char *inc, int64_t now, struct reg_answer *ans);
/* Whether t may report an error now (the error itself: set_error). */
enum status registry_may_report(struct registry *r, struct reg_task *t,
    const char *inc, struct reg_answer *ans);

/*
 * Wait for all tasks. ST_OK with *wait 0: everyone is there, or came and
 * left already this epoch (a task that finished first); ST_OK with *wait
 * 1: park until *until (the register deadline, started by the first
 * caller of the epoch); anything else is the answer.
 */
enum status registry_wait_all(struct registry *r, struct reg_task *t,
    const char *inc, int64_t now, int *wait, int64_t *until,
    struct reg_answer *ans);
/* At a wait-all deadline: DEADLINE_EXCEEDED once the register timeout
 * has passed (naming who is missing), else ST_OK: still waiting. */
enum status registry_all_expired(struct registry *r, int64_t now,
    struct reg_answer *ans);

/*
 * Shutdown. ST_OK with *barrier 0: disconnected; with *barrier 1: the
 * caller takes t through the shutdown barrier (no_barrier asks to leave
 * at once, the run being over anyway). A shutdown without no_barrier is
 * the end of the task's work: t->finished says so once it has left.
 */
enum status registry_shutdown(struct registry *r, struct reg_task *t,
    const char *inc, int no_barrier, int has_shutdown_barrier, int *barrier,
    struct reg_answer *ans);
enum status registry_reset(struct registry *r, struct reg_task *t,
    struct reg_answer *ans);

/* Puts t in error; see struct reg_event. */
void registry_set_error(struct registry *r, struct reg_task *t, enum status st,
    const char *msg, int reported, int propagate);
void registry_disconnect(struct registry *r, struct reg_task *t);

/*
 * Fails every connected task silent for longer than the timeout. Its
 * silence does not count what excused(t) says (ms the service was too
 * busy to hear t since its last heartbeat); excused may be NULL.
 */
void registry_scan(struct registry *r, int64_t now,
    int64_t (*excused)(const struct reg_task *t, void *arg), void *arg);
/* Starts a new epoch when no task is connected any more. */
void registry_settle(struct registry *r);

/* The names of tasks not connected, up to max, "a, b and 3 more". */
char *registry_missing(struct registry *r, size_t max);
/* Whether t left epoch because its work was done: it will not come to
 * the next run. */
int registry_finished_in(const struct reg_task *t, long epoch);

/*
 * What a restart keeps: the service incarnation, the epoch, and each
 * task's state, incarnation and errors, appended to out. registry_restore
 * reads it back (over whatever is there; tasks connected then count as
 * heard from at now, so that one that does not come back within the
 * heartbeat timeout fails as usual). 0, or -1 (out of memory; damaged
 * data or another cluster, err filled).
 */
struct buf;
struct rec_in;
int registry_snapshot(const struct registry *r, struct buf *out);
int registry_restore(struct registry *r, struct rec_in *rd, int64_t now,
    char *err, size_t errlen);
/* Every task counts as heard from at now: a replica that takes over gives
 * each a heartbeat timeout to be heard, as a restart does. */
void registry_heard_all(struct registry *r, int64_t now);

#endif
