/*
 * barrier.h: barriers over a task registry, as the reference's
 * WaitAtBarrier and CancelBarrier describe them, with no network and no
 * clock of their own.
 *
 * The first arrival fixes the deadline and the members (the tasks given,
 * which may be every task of the cluster, or every connected task). A
 * barrier ends once: passed when every member has arrived, or failed
 * (deadline, a member in error or that already left the run, conflicting
 * member lists, a caller outside the members, cancel). A member may ask again and
 * gets the same answer; anyone else reusing an ended id is told it is
 * single-use. The shutdown barrier is one more, of the connected tasks
 * that are not recoverable, which a failed straggler does not hold up.
 *
 * The caller locks and passes the time in; each barrier that ends goes to
 * the observer, which may answer its waiters but must not call back here.
 */
#ifndef MUSTER_BARRIER_H
#define MUSTER_BARRIER_H

#include <stddef.h>
#include <stdint.h>

#include "registry.h"
#include "status.h"

enum bar_state { BAR_PENDING, BAR_PASSED, BAR_FAILED };

/* Per task of the registry, by index. */
enum { BAR_NOT_MEMBER = 0, BAR_MEMBER = 1, BAR_ARRIVED = 2 };

struct barrier {
	char *id;
	enum bar_state state;
	enum status result;
	char *message;
	unsigned char *at; /* per task: enum above */
	size_t members, arrived;
	int explicit_set;            /* members were listed */
	int shutdown;                /* the shutdown barrier */
	int64_t deadline;            /* monotonic ms */
	int64_t fix_at;              /* members provisional until then;
	                              * 0: fixed (barriers_set_settle) */
	struct barrier *prev, *next; /* on the pending list */
	void *udata;                 /* the caller's: its waiters */
};

struct barriers;

typedef void (*bar_observer_fn)(struct barrier *b, void *arg);

/* Barrier ids recorded at most, pending or ended (--max-barriers). */
#define BAR_MAX_DEFAULT 100000

/* Barriers that wait this long by default, and at most. */
#define BAR_TIMEOUT_DEFAULT_MS 600000
#define BAR_TIMEOUT_MAX_MS (366LL * 24 * 3600 * 1000)

struct barriers *barriers_new(struct registry *r, bar_observer_fn fn,
    void *arg);
/* Frees every barrier; none may be pending (see barriers_reset). */
void barriers_free(struct barriers *bs);

/*
 * At most max barrier ids are recorded: past that the oldest ended one
 * is forgotten, and a new id is refused (RESOURCE_EXHAUSTED) while all
 * are pending.
 */
void barriers_set_limit(struct barriers *bs, size_t max);
size_t barriers_count(const struct barriers *bs);
unsigned long barriers_refused(const struct barriers *bs);

struct barrier *barriers_find(struct barriers *bs, const char *id);
struct barrier *barriers_shutdown_barrier(struct barriers *bs);
/* The pending ones, newest first, through b->next. */
struct barrier *barriers_pending(struct barriers *bs);
/* The earliest deadline of a pending barrier, or INT64_MAX. */
int64_t barriers_next_deadline(struct barriers *bs);

/* What an arrival comes to. */
enum bar_verdict {
	BAR_ANSWER,   /* *st and msg are the answer */
	BAR_WAIT,     /* wait at *bp until it ends */
	BAR_REGISTER, /* the caller's task is not connected yet: wait for it
	               * to register, at most until *until */
};

/*
 * After a restart of coordd the tasks of a job that outlived it register
 * again one by one, within a heartbeat timeout. Until `until`, a task
 * that asks with its incarnation but is not registered yet waits for its
 * agent to register (BAR_REGISTER) instead of being refused; and once a
 * task has shown that the job outlived a coordd before (such an arrival,
 * or barriers_restart_seen: a heartbeat of a task not registered here), a
 * barrier of "every connected task" is not fixed to those connected so
 * far: its members stay every task of the cluster until all are
 * connected, or until `until` passes and those still away (and not
 * arrived) are dropped. A coordd that started afresh, with no such task,
 * fixes the members at the first arrival as ever.
 */
void barriers_set_settle(struct barriers *bs, int64_t until);
void barriers_restart_seen(struct barriers *bs);

/*
 * Task t waits at barrier id. members (count n) are the task indices the
 * caller listed, NULL for none; bad_list, when set, says why the list did
 * not resolve. On BAR_ANSWER, *st and msg are the answer (*st ST_OK: it
 * passed); on BAR_WAIT, *bp is the barrier to wait on.
 */
enum bar_verdict barriers_wait(struct barriers *bs, const char *id,
    struct reg_task *t, uint64_t inc, int64_t timeout_ms, const size_t *members,
    size_t n, const char *bad_list, int64_t now, struct barrier **bp,
    int64_t *until, enum status *st, char *msg, size_t msglen);

/* Task t arrives at the shutdown barrier (made at the first arrival). */
enum bar_verdict barriers_shutdown_wait(struct barriers *bs, struct reg_task *t,
    int64_t timeout_ms, int64_t now, struct barrier **bp, enum status *st,
    char *msg, size_t msglen);

/* Cancels barrier id, for current and future arrivals; by is the task
 * that does, or NULL for an operator. */
enum status barriers_cancel(struct barriers *bs, const char *id, const char *by,
    int64_t now, char *msg, size_t msglen);

/* The answer a member of an ended barrier gets. */
enum status barrier_result(const struct barrier *b, char *msg, size_t msglen);

/* t went into error: the barriers it belongs to fail. */
void barriers_task_failed(struct barriers *bs, struct reg_task *t);
/* t left the run (shut down): the barriers it belongs to fail too. */
void barriers_task_left(struct barriers *bs, struct reg_task *t);
/* Every task is connected: provisional member sets are final. */
void barriers_all_connected(struct barriers *bs);
/* Ends every pending barrier whose deadline is past, and fixes the
 * members of those still provisional when their fix_at comes. */
void barriers_expire(struct barriers *bs, int64_t now);
/* Ends every pending barrier with st and msg, and forgets them all. */
void barriers_reset(struct barriers *bs, enum status st, const char *msg);
/* Ends every pending barrier with st and msg. */
void barriers_abort(struct barriers *bs, enum status st, const char *msg);

/* The names of members that have (arrived) or not arrived, up to max. */
char *barrier_names(struct barriers *bs, const struct barrier *b, int arrived,
    size_t max);

/*
 * What a restart keeps of barriers: the ended ones of the epoch, each as
 * barrier_record writes it (id, result, message, who belonged and who
 * arrived); barriers_restore makes one ended barrier from a record (0, or
 * -1 with err filled). barriers_ended: the ended ones, oldest first,
 * through next. Pending barriers are not kept: their waiters are gone
 * with the connections, and arrive again.
 */
struct buf;
struct rec_in;
int barrier_record(const struct barrier *b, size_t ntasks, struct buf *out);
int barriers_restore(struct barriers *bs, struct rec_in *r, char *err,
    size_t errlen);
struct barrier *barriers_ended(struct barriers *bs);

#endif
