/*
 * closureq.h: dispatchd's closures, queues and workers, as a state machine
 * with no network and no clock of its own (ClusterCoordinator's
 * _CoordinatedClosureQueue, Worker and RemoteValue, for command lines).
 *
 * A closure is a command line with optional stdin and environment. It is
 * QUEUED, then RUNNING on one worker (an attempt), then READY (it ran to an
 * end, whatever its status), ABORTED (given up without a value: it took
 * down --max-worker-deaths workers) or CANCELLED. A closure whose worker
 * dies goes back to the front of the pending list; a result that comes
 * from an attempt other than the current one is stale and dropped (fenced
 * by attempt number and worker incarnation).
 *
 * A queue's first error (a closure that ended badly while its worker lived,
 * past its retries) is kept until a schedule, join or done takes it: that
 * call cancels every closure of the queue, queued or in flight (its worker
 * is told to stop it), reports the error once and clears it.
 *
 * Not thread-safe: the caller holds one lock around every call and passes
 * the monotonic time in. What others must hear of goes to the observer,
 * which must not call back in: it notes what to do, and does it after.
 */
#ifndef MUSTER_CLOSUREQ_H
#define MUSTER_CLOSUREQ_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "status.h"

enum cq_state { CQ_QUEUED, CQ_RUNNING, CQ_READY, CQ_ABORTED, CQ_CANCELLED };

#define CQ_QUEUE_MAX_DEFAULT 262144
#define CQ_MAX_DEATHS_DEFAULT 3
#define CQ_NAME_MAX 128
#define CQ_MAX_RETRY_CODES 16

/* What a closure's attempt ended with, as the worker says. */
struct cq_result {
	int exited; /* 1: exited with code; 0: killed by signal */
	int code;   /* exit status, or the signal */
	char *out;  /* stdout's bytes, up to the worker's cap */
	size_t outlen;
	int truncated; /* stdout was longer than the cap */
	char *err;     /* the tail of stderr */
	size_t errlen;
	char *message; /* why, when the command could not run as asked */
};

struct cq_queue;
struct cq_worker;

struct cq_closure {
	uint64_t id;
	struct cq_queue *q;
	enum cq_state state;
	char *spec; /* JSON for the worker: argv, env, stdin, timeout_ms */
	size_t speclen;
	char *on;     /* pinned to this worker, or NULL */
	char *key;    /* idempotency key, or NULL */
	char **needs; /* resources, NULL-terminated, or NULL */
	int retry_exit[CQ_MAX_RETRY_CODES];
	size_t nretry_exit;
	long max_retries, retries;
	long attempts;            /* attempts started */
	long deaths;              /* workers that died running it */
	struct cq_worker *worker; /* while RUNNING */
	char *last_worker;        /* the worker of the last attempt */
	struct cq_result res;     /* READY; ABORTED: res.message */
	int failed;               /* counted as its queue's error */
	int independent; /* its failure is its own, not its queue's error */
	struct cq_closure *prev, *next; /* pending or running list */
	struct cq_pending *list;        /* the pending list it is on */
};

/* A list of closures waiting to run (all workers', or one's pinned). */
struct cq_pending {
	struct cq_closure *head, *tail;
	size_t count;
};

struct cq_queue {
	char *name;
	size_t queued, inflight;
	struct cq_closure *error; /* the first error, not yet reported */
	struct strmap *keys;      /* idempotency key -> closure id */
	unsigned long scheduled, done, failed, cancelled, retried;
};

struct cq_resource_state {
	int state; /* CQ_RES_ */
	char *message;
};

enum { CQ_RES_BUILDING, CQ_RES_READY, CQ_RES_FAILED };

struct cq_worker {
	char *name;
	long index;        /* the INDEX of JOB:INDEX, else 0 */
	uint64_t inc;      /* its current incarnation */
	int live;          /* registered and not failed */
	long slots;        /* closures it runs at once */
	int64_t last_seen; /* monotonic ms */
	size_t running;
	struct cq_closure *run_head;
	struct cq_pending pinned; /* closures pinned to it */
	uint64_t *stop;           /* closure ids it must stop */
	long *stop_attempt;
	size_t nstop, capstop;
	struct strmap *resources; /* name -> struct cq_resource_state */
	unsigned long incarnations, deaths;
	char *why; /* why it last failed */
	/* It could not start a closure (a failure of its own): no work for
	 * it until then (monotonic ms; 0: healthy). Not journaled. */
	int64_t sick_until;
	unsigned sick_streak; /* such failures in a row */
	char *sick_why;       /* the last one */
	unsigned long start_failures;
	struct cq *cq;
};

struct cq_config {
	size_t queue_max;      /* per queue; 0: CQ_QUEUE_MAX_DEFAULT */
	long max_deaths;       /* 0: CQ_MAX_DEATHS_DEFAULT */
	int64_t hb_timeout_ms; /* 0: 10 s */
	size_t max_spec;       /* bytes of one closure's JSON; 0: 64 MiB */
	size_t max_store;      /* bytes of closures and values held; 0: 1 GiB */
};

enum cq_event_type {
	CQ_EV_ENDED,       /* closure c reached an end state */
	CQ_EV_WORK,        /* closures wait to run (for w, if set) */
	CQ_EV_QUEUE,       /* queue q changed: room, idle or an error */
	CQ_EV_STOP,        /* worker w has closures to stop */
	CQ_EV_WORKER_GONE, /* worker w failed or left: answer its calls */
};

struct cq_event {
	enum cq_event_type type;
	struct cq_closure *c;
	struct cq_queue *q;
	struct cq_worker *w;
};

typedef void (*cq_observer_fn)(const struct cq_event *ev, void *arg);

struct cq;

struct cq *cq_new(const struct cq_config *cfg, cq_observer_fn fn, void *arg,
    int64_t now);
void cq_free(struct cq *cq);
const struct cq_config *cq_config(const struct cq *cq);
const char *cq_state_name(enum cq_state s);

/* A queue by name, made when create is set; NULL when missing or bad. */
struct cq_queue *cq_queue(struct cq *cq, const char *name, int create);
/* Whether name may name a queue, a worker or a resource. */
int cq_name_valid(const char *name);
/* Calls fn for each queue. */
void cq_each_queue(struct cq *cq, void (*fn)(struct cq_queue *q, void *arg),
    void *arg);
/* How many more closures q takes now. */
size_t cq_room(const struct cq *cq, const struct cq_queue *q);
/*
 * Bytes of closures the store takes before max_store: what is held is
 * every closure's spec and every value (stdout and stderr tail) until it
 * is forgotten. A value may take it past the cap (a closure scheduled
 * under it still ends); then there is no room until forgets make some.
 */
size_t cq_store_room(const struct cq *cq);
/* A new closure, as its request said it (the caller checked each field). */
struct cq_spec {
	/* JSON for the worker (argv, env, stdin, timeout_ms), from malloc:
	 * cq_closure_new takes it over, whatever it answers. */
	char *spec;
	size_t speclen;
	const char *on;  /* a worker's name, or NULL */
	const char *key; /* 1 to 1024 bytes, or NULL */
	const char *const *needs;
	size_t nneeds; /* at most 64 */
	const int *retry_exit;
	size_t nretry_exit; /* at most CQ_MAX_RETRY_CODES */
	long max_retries;
	/* A failure is the closure's own value: its queue holds no error
	 * for it, and nothing else of the queue is cancelled. */
	int independent;
};
/*
 * A closure of what s says, in no queue yet; NULL when it needs a
 * resource there is not (INVALID_ARGUMENT in *st, msg says why), or when
 * it is too large or memory runs out (RESOURCE_EXHAUSTED).
 */
struct cq_closure *cq_closure_new(struct cq *cq, struct cq_spec *s,
    enum status *st, char *msg, size_t msglen);
/* Frees a closure cq_closure_new made that was never enqueued. */
void cq_closure_discard(struct cq *cq, struct cq_closure *c);
/*
 * Puts c at the back of q, taking it over. When q saw c's key before, c
 * is freed instead and *id is that closure's, with *dup set. The caller
 * has checked for room and for q's error.
 */
enum status cq_enqueue(struct cq *cq, struct cq_queue *q, struct cq_closure *c,
    int64_t now, uint64_t *id, int *dup, char *msg, size_t msglen);
/*
 * The closure whose error q holds, or NULL when there is none. Every
 * closure of q still queued or running is cancelled at once (a running
 * one's worker gets it on its stop list), with a message naming the
 * error, and the error is cleared.
 */
struct cq_closure *cq_take_error(struct cq *cq, struct cq_queue *q,
    int64_t now);
/* Whether q has nothing queued and nothing in flight. */
int cq_idle(const struct cq_queue *q);

struct cq_closure *cq_closure(struct cq *cq, uint64_t id);
/* Cancels c (queued or running); FAILED_PRECONDITION once it ended. */
enum status cq_cancel(struct cq *cq, struct cq_closure *c, int64_t now);
/* Drops an ended closure and its value; FAILED_PRECONDITION before. */
enum status cq_forget(struct cq *cq, struct cq_closure *c);
/* Calls fn for each closure of q (all queues when q is NULL), by id. */
void cq_each_closure(struct cq *cq, struct cq_queue *q,
    void (*fn)(struct cq_closure *c, void *arg), void *arg);
/*
 * A page of cq_each_closure: the closures with ids past after, by id,
 * until fn returns non-zero or max ids were looked at. Returns the last id
 * looked at (the next page's after), with *more set when there are ids
 * past it.
 */
uint64_t cq_each_closure_after(struct cq *cq, struct cq_queue *q,
    uint64_t after, size_t max, int (*fn)(struct cq_closure *c, void *arg),
    void *arg, int *more);

/* Counters, for /metrics and status. */
struct cq_view {
	size_t queued, inflight, closures, workers_live, workers;
	unsigned long done, failed, retried, cancelled, aborted, deaths;
	unsigned long put_back, stale;
	unsigned long start_failures; /* closures given back unstarted */
	size_t value_bytes;
	size_t spec_bytes; /* of the closures held, their commands and stdin */
	unsigned long misfits; /* records cq_apply skipped: they did not fit */
};
const struct cq_view *cq_view(const struct cq *cq);

/*
 * Workers. Registering a name whose worker still lives fails that one
 * first (it restarted: its closures run again elsewhere).
 */
struct cq_worker *cq_register(struct cq *cq, const char *name, long slots,
    int64_t now, char *msg, size_t msglen);
struct cq_worker *cq_worker(struct cq *cq, const char *name);
void cq_each_worker(struct cq *cq, void (*fn)(struct cq_worker *w, void *arg),
    void *arg);
/* ST_OK when inc is w's live incarnation; else ABORTED with why. */
enum status cq_worker_check(const struct cq_worker *w, const char *inc,
    char *msg, size_t msglen);
/* w was heard from. */
void cq_seen(struct cq *cq, struct cq_worker *w, int64_t now);
/*
 * Up to max closures for w to run now (pinned to it first, then the
 * rest), each RUNNING on w with a new attempt. Returns how many.
 */
size_t cq_take(struct cq *cq, struct cq_worker *w, size_t max, int64_t now,
    struct cq_closure **out);
/* Whether w could take a closure now. */
int cq_has_work(const struct cq *cq, const struct cq_worker *w, int64_t now);
/*
 * w could not start a closure for a reason of its own (no file
 * descriptors, no memory, no fork; not the closure's command), and gave
 * it back (cq_report, aborted). It gets no closure for a while: 2 s, then
 * twice as long each time in a row, up to CQ_SICK_MAX_MS; cq_scan hands
 * it work again after that, and a closure that ends there (any status)
 * makes it healthy.
 */
void cq_worker_unhealthy(struct cq *cq, struct cq_worker *w, const char *why,
    int64_t now);
/* Whether w is kept from work now, as cq_worker_unhealthy said. */
int cq_worker_sick(const struct cq_worker *w, int64_t now);
#define CQ_SICK_MAX_MS 30000

/*
 * w reports attempt of closure id. aborted: the worker stopped it (it is
 * being preempted) and it goes back to the queue at once. Else res holds
 * the end (its strings are taken over). ST_OK when accepted; ABORTED when
 * stale (the attempt is not the current one on w), res then untouched.
 */
enum status cq_report(struct cq *cq, struct cq_worker *w, uint64_t id,
    long attempt, int aborted, struct cq_result *res, int64_t now, char *msg,
    size_t msglen);
/* w failed (why): its closures go back to the queue. */
void cq_worker_failed(struct cq *cq, struct cq_worker *w, const char *why,
    int64_t now);
/* w leaves: the same, without counting a death against its closures. */
void cq_worker_leave(struct cq *cq, struct cq_worker *w, int64_t now);
/* Fails every live worker unheard of for longer than the timeout (a
 * caller holding a worker's heartbeat says it is there with cq_seen
 * first), and hands work again to those unhealthy long enough. */
void cq_scan(struct cq *cq, int64_t now);
/* Empties w's stop list into the arrays (the caller frees them). */
size_t cq_take_stops(struct cq_worker *w, uint64_t **ids, long **attempts);
/* Notes the state of a resource on w. */
void cq_resource_state(struct cq_worker *w, const char *name, int state,
    const char *message);

/*
 * Resources: a command every worker runs once before closures need it,
 * held as the JSON the caller gives ({"name","argv"}). Adding one again
 * with the same JSON is ST_OK; with other JSON, ALREADY_EXISTS.
 */
enum status cq_resource_add(struct cq *cq, const char *name, const char *json,
    char *msg, size_t msglen);
/* Its JSON ({"name","argv"}), or NULL when there is no such resource. */
const char *cq_resource(const struct cq *cq, const char *name);
void cq_each_resource(struct cq *cq,
    void (*fn)(const char *name, const char *json, void *arg), void *arg);

/* When (monotonic ms) a closure last ended, or cq_new ran. */
int64_t cq_last_end(const struct cq *cq);
/* The monotonic ms since when no worker has been live; 0 when one is. */
int64_t cq_no_worker_since(const struct cq *cq);

/*
 * The journal. Every durable change (closures, queues and their keys and
 * errors, workers, their resources' states and stop lists, resources, the
 * counters but stale) is made by a record of what was decided (a closure
 * enqueued, taken, ended; a worker registered, down), applied as cq_apply
 * applies it and then handed to fn, under the caller's lock, in the order
 * made: one mutator, so a second cq fed the same records holds the same
 * state. cq_take_stops and cq_resource_state make records too. fn cannot
 * refuse. When memory for a record runs out, the change is not made.
 * Set it after cq_restore and cq_apply: they write no records. Times,
 * health and the stale counter are not kept.
 */
typedef void (*cq_journal_fn)(const void *rec, size_t len, void *arg);
void cq_set_journal(struct cq *cq, cq_journal_fn fn, void *arg);
/*
 * The whole durable state, appended to out; the same state gives the same
 * bytes. 0, or -1 when memory runs out.
 */
int cq_snapshot(struct cq *cq, struct buf *out);
/*
 * Loads a snapshot into an empty cq (new, of the same config), without
 * telling the observer. Monotonic times do not survive a restart: every
 * time becomes now, so a live worker has a heartbeat timeout from now to
 * be heard from, after which cq_scan fails it and its closures run again.
 * 0, or -1 with err filled when p is not a snapshot or not a consistent
 * one (cq is then partly loaded: free it).
 */
int cq_restore(struct cq *cq, const void *p, size_t len, int64_t now, char *err,
    size_t errlen);
/*
 * Applies one record, as cq_restore does a snapshot; the observer is not
 * told. A record that does not decode changes nothing (-1). One that does
 * not fit the state it applies to (a closure that is not there, or not in
 * the state the record needs: a record before it never got written) is
 * skipped whole and counted (cq_view's misfits), and the state goes on
 * without it. Records of version 1 (written before records
 * said what was decided) said what each object they named now was: they
 * apply too, and one written after a record that never got written still
 * applies (a closure the state does not hold is skipped, a queue's error
 * that is gone is dropped, closures left running on a worker that is down
 * go back to the queue). 0, or -1 with err filled.
 */
int cq_apply(struct cq *cq, const void *rec, size_t len, int64_t now, char *err,
    size_t errlen);
/*
 * Times start over at now, as after cq_restore: a standby that takes over
 * (records applied over a long time) judges no worker dead for the time it
 * stood by, and waits for closures and workers from now.
 */
void cq_heard_all(struct cq *cq, int64_t now);

#endif
