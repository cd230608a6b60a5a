/*
 * dataset.h: dispatchd's datasets, jobs, tasks and job clients, as a state
 * machine with no network and no clock of its own (the tf.data service
 * dispatcher's state, for shell readers).
 *
 * A dataset is a list of splits and a reader command, registered by
 * fingerprint. A job is one reading of it in a processing mode; a task is
 * one worker's part of a job; a job client is one consumer's hold on a
 * job. In DYNAMIC mode splits are leased to tasks by sequence number
 * (epoch * splits + position) and consumers report the ranges of each
 * split's elements they delivered: a seq is done when they cover the
 * split. A dead worker's unfinished seqs are leased again, with the
 * ranges already delivered to skip, once every consumer of the job has
 * said it stopped reading from that worker.
 *
 * Not thread-safe: the caller holds one lock and passes the monotonic time
 * in. What others must hear of goes to the observer, which must not call
 * back in.
 */
#ifndef MUSTER_DATASET_H
#define MUSTER_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "shardmode.h"
#include "span.h"
#include "splitorder.h"
#include "status.h"

#define DS_SPLIT_MAX 4096
#define DS_WANT_MAX 1024

struct ds_dataset {
	uint64_t id;
	char *name; /* an alias, or NULL */
	char **splits;
	size_t nsplits;
	char *reader;
	enum framing framing;
	int reader_skips;
	char fp[17]; /* fingerprint, hex */
	struct ds_dataset *next;
};

/* A worker that serves data, as it last registered. */
struct ds_worker {
	char *name;
	uint64_t inc;
	char *address, *host;
	int changed; /* its task list, since its heartbeat last said it */
	int live;
	struct ds_worker *next;
};

struct ds_task;

/* A leased seq of a DYNAMIC job, until its elements are all delivered. */
struct ds_lease {
	uint64_t seq;
	struct ds_task *task; /* holding it; NULL when waiting to be leased */
	struct span *r;       /* delivered (span.h) */
	size_t nr, capr;
	int64_t total;                /* elements in the split, -1 unknown */
	struct ds_lease *prev, *next; /* its task's list, or the job's queue */
};

struct ds_lease_list {
	struct ds_lease *head, *tail;
	size_t count;
};

enum ds_task_state { DS_TASK_RUNNING, DS_TASK_FINISHED, DS_TASK_FAILED };

struct ds_job;

struct ds_task {
	uint64_t id;
	struct ds_job *job;
	struct ds_worker *w; /* its worker (name, address, host) */
	uint64_t inc;        /* the incarnation it belongs to */
	long shard;          /* static modes: the worker's index; else 0 */
	enum ds_task_state state;
	int read_all;        /* the worker read all of it */
	int pending;         /* round robin: not listed yet */
	int64_t start_round; /* round robin: listed from this round */
	struct ds_lease_list leases;
	uint64_t *acks; /* failed: clients yet to say they stopped reading */
	size_t nacks;
	uint64_t *told; /* clients whose heartbeats listed it */
	size_t ntold;
	uint64_t *skips; /* clients that said they do not read it */
	size_t nskips;
	uint64_t lease_id; /* its worker's last lease request, */
	uint64_t *last;    /* and the seqs it was given */
	size_t nlast, caplast;
	struct ds_task *next; /* in its job */
};

struct ds_client {
	uint64_t id;
	struct ds_job *job;
	int64_t last_seen;
	long index;      /* round robin: consumer index */
	int64_t round;   /* the round it reads next, -1 not said */
	int64_t blocked; /* it will not read this round or later; -1 none */
	struct ds_client *next; /* in its job */
	/* The elements its reader says it wrote: a statistic the service
	 * keeps from heartbeats for status pages, not state (no record,
	 * no snapshot; a daemon started again counts anew). */
	uint64_t written;
};

struct ds_job {
	uint64_t id;
	uint64_t elements;  /* its clients' written, summed: a statistic too */
	char *name;         /* NULL: anonymous */
	uint64_t iteration; /* of its name: 1, 2, ... */
	int retired;        /* ended, and its name read anew by a newer one */
	char *start;        /* where it began: a position's text; NULL: at 0 */
	char *run;          /* the run of the training job that read it */
	int kept;           /* idle past the GC timeout: kept, without tasks */
	char secret[33];    /* consumers show it to workers' data servers */
	struct ds_dataset *ds;
	enum shard_mode mode; /* as asked */
	enum shard_mode eff;  /* FILE_OR_DATA resolved */
	long repeat;          /* epochs; 0: for ever */
	uint64_t seed;
	long consumers; /* round robin; 0: none */
	long shards;    /* static modes: the worker list's length */
	int finished;
	char *error;
	struct ds_task *tasks;
	struct ds_client *clients;
	size_t nclients;
	int64_t idle_since; /* no client since then; 0 while it has one */
	/* DYNAMIC */
	uint64_t next;              /* the next seq never leased */
	uint64_t total;             /* seqs in all; UINT64_MAX for ever */
	uint64_t done;              /* seqs delivered */
	struct ds_lease_list queue; /* to lease again, first */
	struct lease_map *leases;   /* seq -> lease, every open one */
	uint32_t *order;            /* split_order of order_epoch */
	uint64_t order_epoch;
	/* round robin: the pending-task protocol */
	int64_t rr_latest; /* the highest round reported */
	int64_t rr_target; /* for the first pending task, -1 none */
	int64_t rr_delta;
	unsigned char *finished_shards; /* static modes */
	struct ds_job *link;            /* every job */
};

struct ds_config {
	int64_t client_timeout_ms; /* 0: 2 min */
	int64_t gc_timeout_ms;     /* 0: 5 min */
	char **static_workers;     /* the static modes' workers, in order */
	size_t nstatic;
};

enum ds_event_type {
	DS_EV_TASKS, /* worker's task list changed */
	DS_EV_SPLITS /* job has seqs to lease, ended or failed */
};

struct ds_event {
	enum ds_event_type type;
	const char *worker; /* DS_EV_TASKS */
	uint64_t job;       /* DS_EV_SPLITS */
};

typedef void (*ds_observer_fn)(const struct ds_event *ev, void *arg);

struct ds;

struct ds *ds_new(const struct ds_config *cfg, ds_observer_fn fn, void *arg);
void ds_free(struct ds *ds);

/* Whether s may name a dataset or a job: 1 to 128 of A-Z a-z 0-9 - _ .,
 * not all digits. */
int ds_name_ok(const char *s);
/* Whether s may be a run's id: as a name, but digits alone will do. */
int ds_run_ok(const char *s);

/* A dataset as a request defines it (svc/dsjson checks its shape). */
struct ds_dataset_def {
	const char *const *splits; /* 1 to 4,294,967,295 */
	size_t nsplits;
	const char *reader;
	enum framing framing;
	int reader_skips;
	const char *name; /* NULL: none */
};

/* Registers what def describes, or finds the dataset with its
 * fingerprint (and gives it def's name, if it had none). */
enum status ds_dataset_register(struct ds *ds, const struct ds_dataset_def *def,
    struct ds_dataset **out, int *created, char *msg, size_t msglen);
/* By id ("3") or name; NULL when none. */
struct ds_dataset *ds_dataset_find(struct ds *ds, const char *key);
/* Every dataset, the newest first (through next). */
const struct ds_dataset *ds_datasets(const struct ds *ds);

/*
 * A DYNAMIC job's position to start from, as a reader gives it
 * (--from-state): what was read up to next, and the seqs below it still
 * open, with the ranges of their elements delivered. What a request gave
 * badly is marked, for the job's checks to refuse in their turn: a
 * reader that joins a job compares the text alone.
 */
struct ds_open_seq {
	int64_t seq;             /* -1: not a seq */
	const struct span *skip; /* delivered, each [a, b) with a <= b */
	size_t nskip;
	int skip_bad; /* skip went on with one that is not [first, end] */
};

struct ds_position {
	const char *text;     /* as its job keeps it; NULL: none made */
	const char *dataset;  /* its dataset's fingerprint; NULL: none */
	int64_t seed, repeat; /* of its job; 0: not numbers */
	int64_t next;         /* -1: not a seq */
	int open_bad;         /* open is not a list */
	const struct ds_open_seq *open;
	size_t nopen;
};

/* A reader's request for a job (svc/dsjson checks its shape). */
struct ds_job_req {
	struct ds_dataset *dataset;
	enum shard_mode mode;
	const char *name; /* NULL: anonymous */
	const char *run;  /* NULL: none */
	long repeat;      /* epochs; 0: for ever */
	uint64_t seed;
	long consumers, index;          /* round robin; 0: none */
	const struct ds_position *from; /* NULL: from the start */
};

/*
 * GetOrCreateJob and a job client for it. A name is read anew (its next
 * iteration: the job that had it gives it up) by a reader of another run
 * than its job's, or, without a run, once its job has ended (finished or
 * failed). The readers of one run join its job, and must give the state
 * it started from.
 */
enum status ds_job_open(struct ds *ds, const struct ds_job_req *req,
    int64_t now, struct ds_job **job, struct ds_client **client, int *created,
    char *msg, size_t msglen);
struct ds_job *ds_job_find(struct ds *ds, const char *key);
/* Every job, the newest first (through link). */
const struct ds_job *ds_jobs(const struct ds *ds);
/* How many seqs of a DYNAMIC job are open (leased, or waiting to be). */
size_t ds_job_leased(const struct ds_job *j);
/*
 * A DYNAMIC job's open leases, by seq, in an array of *n the caller
 * frees; NULL when memory ran out.
 */
const struct ds_lease **ds_job_open_leases(const struct ds_job *j, size_t *n);
/* The index in j's dataset of the split seq names (seed's order). */
uint32_t ds_split_index(struct ds_job *j, uint64_t seq);

struct ds_client *ds_client_find(struct ds *ds, uint64_t id);

/* Elements [first, end) of seq were delivered; total: all of them, or
 * -1 when not known yet. */
struct ds_delivery {
	uint64_t seq, first, end;
	int64_t total;
};

/* A client's heartbeat, as svc/dsjson reads it. */
struct ds_beat {
	const struct ds_delivery *delivered;
	size_t ndelivered;
	/* The request's list went on with one that is not a delivery: those
	 * before it are recorded, and the beat goes no further
	 * (ST_INVALID_ARGUMENT, for the caller to say why). */
	int cut;
	const uint64_t *lost; /* tasks it stopped reading */
	size_t nlost;
	int has_round; /* round robin: the round it reads next, */
	int64_t round;
	int64_t blocked; /* and the first it will not read; -1: none */
};

/*
 * A client's heartbeat; the caller answers with the job's tasks
 * ds_task_listed lists, its end or error, and its rr_target.
 */
enum status ds_client_beat(struct ds *ds, struct ds_client *c,
    const struct ds_beat *b, int64_t now, char *msg, size_t msglen);
/* Whether a client's heartbeat lists t (told of it, from then on). */
int ds_task_listed(const struct ds_task *t);
void ds_client_release(struct ds *ds, struct ds_client *c, int64_t now);

/*
 * Whether worker name may register: with static workers, only those
 * listed (as upstream's worker addresses); ST_FAILED_PRECONDITION, and
 * why in msg, otherwise.
 */
enum status ds_worker_admit(struct ds *ds, const char *name, char *msg,
    size_t msglen);
/* A worker (that serves data at address) came, or came back. */
void ds_worker_up(struct ds *ds, const char *name, uint64_t inc,
    const char *address, const char *host);
/* Its incarnation inc is gone: its tasks fail. */
void ds_worker_down(struct ds *ds, const char *name, uint64_t inc);
/* name registered again and serves no data now: its tasks fail. */
void ds_worker_forget(struct ds *ds, const char *name);
/*
 * Each worker that serves data (as registered, or as restored: the caller
 * downs those that do not come back). fn must not call back in.
 */
void ds_worker_each(struct ds *ds,
    void (*fn)(const char *name, uint64_t inc, void *arg), void *arg);
/* By name; NULL when none. */
struct ds_worker *ds_worker_find(struct ds *ds, const char *name);
/*
 * Whether name serves data; its task list, as the heartbeat says it, is
 * the tasks of its incarnation that have not failed.
 */
int ds_worker_serves(struct ds *ds, const char *name);
/* Whether name's task list changed since it was last cleared. */
int ds_worker_changed(struct ds *ds, const char *name, int clear);

/* Task id of worker name (its incarnation inc); NULL, msg says why. */
struct ds_task *ds_task_of(struct ds *ds, const char *name, uint64_t inc,
    uint64_t id, enum status *st, char *msg, size_t msglen);

/* What a lease request gets. */
struct ds_leased {
	int later; /* nothing to lease yet, and the job goes on */
	int end;   /* the job is over */
	size_t n;
	struct ds_lease *v[DS_WANT_MAX]; /* valid until the next change */
};

/*
 * Leases up to want (at most DS_WANT_MAX) seqs to t, into out. With
 * nothing to lease yet and the job going on, out->later is set: the
 * caller waits for DS_EV_SPLITS. A request sent again after its reply was
 * lost (the same id, not 0) gets the seqs of that reply again, those
 * still open.
 */
enum status ds_lease(struct ds *ds, struct ds_task *t, long want, uint64_t id,
    struct ds_leased *out, char *msg, size_t msglen);
/*
 * The ranges of t's splits its consumers acknowledged (asked for more
 * after): what a consumer that died before reporting had delivered.
 */
enum status ds_task_delivered(struct ds *ds, struct ds_task *t,
    const struct ds_delivery *v, size_t n, char *msg, size_t msglen);
/* The worker read all of t (finished), or t failed with message. */
enum status ds_task_end(struct ds *ds, struct ds_task *t, int failed,
    const char *message);

/* Client timeouts and job collection. */
void ds_scan(struct ds *ds, int64_t now);

struct ds_view {
	size_t datasets, jobs, tasks, clients, leased;
	unsigned long leases, releases, collected;
};
void ds_view(struct ds *ds, struct ds_view *v);

/*
 * The state on disk (--state-dir). Durable are the datasets, the workers'
 * registrations, the jobs with their position (next seq, open leases and
 * their delivered ranges, the last lease request of each task), tasks,
 * job clients and the ids; liveness is not: a restored client was last
 * seen at now and an idle job is idle since now, so that those that do not
 * come back time out as usual. A worker's tasks are restored as they were:
 * the caller times out the workers that do not come back (ds_worker_down).
 */

/*
 * Called with each durable change as one record (at most a few hundred
 * bytes, but for a dataset's definition), in the order made, under the
 * caller's lock, once the change is applied from it: a change that memory
 * ran out to make or apply a record for is not made. Cannot refuse.
 */
typedef void (*ds_journal_fn)(const void *rec, size_t len, void *arg);
void ds_set_journal(struct ds *ds, ds_journal_fn fn, void *arg);
/* The whole durable state appended to out. 0 or -1 (ENOMEM). */
int ds_snapshot(struct ds *ds, struct buf *out);
/*
 * Loads a snapshot into an empty ds (ds_new, same config). 0, or -1 with
 * err filled: bad data never crashes, and a ds that failed to load holds
 * part of it, to be freed.
 */
int ds_restore(struct ds *ds, const void *p, size_t len, int64_t now, char *err,
    size_t errlen);
/* Applies one record in replay. 0, or -1 with err filled. */
int ds_apply(struct ds *ds, const void *rec, size_t len, int64_t now, char *err,
    size_t errlen);
/* Liveness starts over at now, as after ds_restore: for a standby that
 * takes over, with records applied over a long time. */
void ds_heard_all(struct ds *ds, int64_t now);

#endif
