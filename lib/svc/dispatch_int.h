/*
 * dispatch_int.h: what the parts of dispatchd's HTTP binding share: the
 * dispatcher, its one lock and event pump, and what each part offers the
 * parts above it. Not for programs: they use dispatch.h.
 */
#ifndef MUSTER_DISPATCH_INT_H
#define MUSTER_DISPATCH_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "buf.h"
#include "commit.h"
#include "dataset.h"
#include "dispatch.h"
#include "dsjson.h"
#include "http_server.h"
#include "journal.h"
#include "park.h"
#include "route.h"
#include "timer.h"

/* What a parked request waits as. */
enum wait_kind { W_JOIN, W_SCHEDULE, W_TAKE, W_HEARTBEAT, W_LEASE, W_FETCH };

struct waitctx {
	enum wait_kind kind;
	struct cq *cq;          /* W_SCHEDULE: */
	struct cq_closure **cs; /* the closures, checked, */
	size_t ncs;             /* how many */
	int block;
	size_t max;          /* W_TAKE */
	struct cq_worker *w; /* W_TAKE, W_HEARTBEAT */
	struct cq_queue *q;
	uint64_t task; /* W_LEASE: the task, its job, */
	uint64_t job;
	uint64_t inc; /* its worker's incarnation */
	long want;
	uint64_t lease;   /* the worker's id of the request, or 0 */
	uint64_t closure; /* W_FETCH: the closure's id */
};

/* What a state machine reported: the queues' (cq) or the data side's. */
struct dispatch_event {
	int data; /* 1: u.ds */
	union {
		struct cq_event cq;
		struct ds_event ds;
	} u;
};

struct dispatch {
	pthread_mutex_t mu;
	struct park *park;
	struct cq *cq;
	struct dispatch_config cfg;
	size_t max_body;             /* of a request, as served: /v1/limits */
	struct park_index *fetchers; /* closure id -> fetches */
	struct park_index *qwait;    /* queue -> joins, dones, schedules */
	struct park_index *beats;    /* worker -> its parked heartbeat */
	struct park_list takers;     /* every worker's parked takes */
	struct ds *ds;               /* datasets, jobs, tasks */
	struct park_index *leasers;  /* job id -> parked split leases */
	/* Reported by the queues and the data side, acted on in
	 * dispatch_unlock's pump through the hooks dispatch_open sets. */
	struct dispatch_event *events;
	size_t nevents, capevents;
	struct dispatch_pump {
		/* One event, in the order reported (may report more). */
		void (*react)(struct dispatch *d,
		    const struct dispatch_event *ev);
		/* None left: what waits for a quiet moment (may report). */
		void (*idle)(struct dispatch *d);
		/* None left after idle: the journal's turn. */
		void (*settled)(struct dispatch *d);
	} pump;
	int work; /* closures wait to run */
	struct timer scan, watchdog;
	int stall_logged;
	atomic_int closing;
	/* The state directory or store (NULL: none); dispatch_journal.c. */
	struct commit *commit;
	int jlive;       /* changes are journaled (replay is over) */
	int standby;     /* a store's replica that does not lead: its
	                  * timers judge nothing, the leader's records do */
	struct buf jrec; /* the record being made */
	char jerr[256];
};

/*
 * The parts, lowest first; each calls only those above it in this list.
 *
 * dispatch_core.c: the lock, the pump, parking, arguments and answers.
 */
void dispatch_lock(struct dispatch *d);
/* Runs the pump (dispatch_pump's hooks), then lets the lock go. */
void dispatch_unlock(struct dispatch *d);
/* The observers of the queues and the data side: queue ev for the pump. */
void dispatch_cq_event(const struct cq_event *ev, void *arg);
void dispatch_ds_event(const struct ds_event *ev, void *arg);
int dispatch_closing(struct dispatch *d);
void dispatch_reply_closing(struct http_req *req);
/* While the state directory cannot be written: refuses req, 1. */
int dispatch_refuse(struct dispatch *d, struct http_req *req);
/* req's JSON object body, or NULL (answered). */
json_t *dispatch_body(struct http_req *req);
/* Query argument name as a number in [min, max]: -1 (answered) if bad. */
int dispatch_arg_long(struct http_req *req, const char *name, long def,
    long min, long max, long *v);
struct waitctx *dispatch_ctx_new(enum wait_kind kind);
/* Frees x and the closures it holds; dispatch_free_ctx, a parked one's. */
void dispatch_ctx_free(struct waitctx *x);
void dispatch_free_ctx(struct parked *w);
/* Parks req on l with x; NULL (answered) when it cannot. */
struct parked *dispatch_park(struct dispatch *d, struct http_req *req,
    struct park_list *l, int64_t wait, park_fn expire, struct waitctx *x);

/*
 * dispatch_journal.c: dispatch_journal_open reads the state directory back
 * (before serving) and journals every change after, as
 * dispatch_store_open does with etcd once elected; dispatch_journal_settle
 * compacts the journal when it is due, at the end of a locked section.
 */
enum status dispatch_journal_open(struct dispatch *d, const char *dir,
    enum journal_fsync mode, size_t max_bytes, char *err, size_t errlen);
/* The same over etcd (--store): the replica stands by, applying the
 * leader's records, until it is elected. */
enum status dispatch_store_open(struct dispatch *d,
    const struct store_config *sc, char *err, size_t errlen);
void dispatch_journal_settle(struct dispatch *d);

/* dispatch_data.c: datasets, jobs and splits. */
/* Job job has seqs to lease, ended or failed: answers its parked leases. */
void dispatch_data_splits(struct dispatch *d, uint64_t job);
void dispatch_data_register(struct dispatch *d, struct cq_worker *w,
    json_t *body);
/* POST /v1/workers/NAME/splits and .../tasks/T. */
void dispatch_data_lease(struct dispatch *d, struct http_req *req,
    struct cq_worker *w, json_t *body, int64_t wait);
void dispatch_data_task(struct dispatch *d, struct http_req *req,
    struct cq_worker *w, const char *task, json_t *body);
/* The data side's routes: /v1/datasets..., /v1/jobs..., /v1/clients/...;
 * the ops of /v1/datasets/ID/splits and /v1/jobs/ID/checkpoint. */
extern const char dispatch_dataset_splits, dispatch_job_checkpoint;
void dispatch_datasets_route(struct http_req *req, const struct route_match *m,
    void *arg);
void dispatch_jobs_route(struct http_req *req, const struct route_match *m,
    void *arg);
void dispatch_clients_route(struct http_req *req, const struct route_match *m,
    void *arg);

/* dispatch_closures.c: queues, closures and resources. */
/* Closure c ended: answers its parked fetches. */
void dispatch_closure_ended(struct dispatch *d, struct cq_closure *c);
/* Queue q changed: answers its parked joins, dones and schedules. */
void dispatch_queue_changed(struct dispatch *d, struct cq_queue *q);
/* Whether joins give up: no worker for --worker-recovery (until when). */
int dispatch_no_workers(struct dispatch *d, int64_t now, int64_t *until);
/* The closures cs[0..n) as a take's reply. */
void dispatch_reply_closures(struct dispatch *d, struct http_req *req,
    struct cq_closure **cs, size_t n);
void dispatch_queue_route(struct http_req *req, const struct route_match *m,
    void *arg);
/* /v1/queues/NAME/{closures,join,done}: the op is one of these. */
extern const struct queue_op dispatch_queue_schedule, dispatch_queue_join,
    dispatch_queue_done;
/* /v1/closures/ID (GET, DELETE) and /v1/closures/ID/cancel. */
void dispatch_closure_route(struct http_req *req, const struct route_match *m,
    void *arg);
extern const struct closure_op dispatch_closure_fetch, dispatch_closure_forget,
    dispatch_closure_cancel;
void dispatch_closures_route(struct http_req *req, const struct route_match *m,
    void *arg);
/* Worker w's resources and their states, or only the one named. */
json_t *dispatch_resource_states(const struct cq_worker *w, const char *only);
void dispatch_resource_route(struct http_req *req, const struct route_match *m,
    void *arg);
void dispatch_resources_route(struct http_req *req, const struct route_match *m,
    void *arg);

/* dispatch_workers.c: workers, their heartbeats, takes and results. */
/* Answers w's parked heartbeat now; gone: w is not registered. */
void dispatch_answer_beat(struct dispatch *d, struct cq_worker *w, int gone);
/* Whether a heartbeat of w's is parked. */
int dispatch_beat_parked(struct dispatch *d, const struct cq_worker *w);
/* Every worker with a heartbeat parked was seen now: it is there. */
void dispatch_beats_seen(struct dispatch *d, int64_t now);
/* Worker w is gone: its parked takes are answered ABORTED. */
void dispatch_takers_gone(struct dispatch *d, struct cq_worker *w);
/* Gives work to parked takes, oldest first, while there is any. */
void dispatch_serve_takers(struct dispatch *d);
/* /v1/workers/NAME[/...]: the op says which of a worker's requests. */
void dispatch_worker_route(struct http_req *req, const struct route_match *m,
    void *arg);
extern const struct worker_op dispatch_worker_register, dispatch_worker_leave,
    dispatch_worker_heartbeat, dispatch_worker_lease, dispatch_worker_task,
    dispatch_worker_take, dispatch_worker_results, dispatch_worker_resource;

#endif
