/*
 * dispatch_int.h: what dispatch.c (closures) and dispatch_data.c
 * (datasets, jobs, splits) share: the dispatcher, its one lock, and the
 * helpers every route uses.
 */
#ifndef MUSTER_DISPATCH_INT_H
#define MUSTER_DISPATCH_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "buf.h"
#include "commit.h"
#include "dataset.h"
#include "dispatch.h"
#include "http_server.h"
#include "park.h"
#include "route.h"
#include "timer.h"

/* What a parked request waits as. */
enum wait_kind { W_JOIN, W_SCHEDULE, W_TAKE, W_HEARTBEAT, W_LEASE };

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
	uint64_t lease; /* the worker's id of the request, or 0 */
};

struct dispatch {
	pthread_mutex_t mu;
	struct park *park;
	struct cq *cq;
	struct dispatch_config cfg;
	struct park_index *fetchers; /* closure id -> fetches */
	struct park_index *qwait;    /* queue -> joins, dones, schedules */
	struct park_index *beats;    /* worker -> its parked heartbeat */
	struct park_list takers;     /* every worker's parked takes */
	struct ds *ds;               /* datasets, jobs, tasks */
	struct park_index *leasers;  /* job id -> parked split leases */
	/* Reported by the queues, acted on in dispatch_unlock. */
	struct cq_event *events;
	size_t nevents, capevents;
	struct ds_event *dsev; /* the same, of the data side */
	size_t ndsev, capdsev;
	int work; /* closures wait to run */
	struct timer scan, watchdog;
	int stall_logged;
	atomic_int closing;
	/* The state directory (NULL: none); see dispatch_journal.c. */
	struct commit *commit;
	int jlive;       /* changes are journaled (replay is over) */
	struct buf jrec; /* the record being made */
	char jerr[256];
};

/* Compacts the journal when it is due; at the end of a locked section. */
void dispatch_journal_settle(struct dispatch *d);
/* While the state directory cannot be written: refuses req, 1. */
int dispatch_refuse(struct dispatch *d, struct http_req *req);

void dispatch_lock(struct dispatch *d);
/* Acts on what the state reported, then lets the lock go. */
void dispatch_unlock(struct dispatch *d);
int dispatch_closing(struct dispatch *d);
void dispatch_reply_closing(struct http_req *req);
/* req's JSON object body, or NULL (answered). */
json_t *dispatch_body(struct http_req *req);
/* Query argument name as a number in [min, max]: -1 (answered) if bad. */
int dispatch_arg_long(struct http_req *req, const char *name, long def,
    long min, long max, long *v);
struct waitctx *dispatch_ctx_new(enum wait_kind kind);
void dispatch_free_ctx(struct parked *w);
/* Parks req on l with x; NULL (answered) when it cannot. */
struct parked *dispatch_park(struct dispatch *d, struct http_req *req,
    struct park_list *l, int64_t wait, park_fn expire, struct waitctx *x);

/* Closures worker w must stop, as its heartbeat says. */
json_t *dispatch_stops_json(struct cq_worker *w);
/* Answers w's parked heartbeat now. */
void dispatch_answer_beat(struct dispatch *d, struct cq_worker *w);

/* dispatch_data.c */
void dispatch_data_observe(const struct ds_event *ev, void *arg);
/* Acts on the data side's events; 1 when there were any. */
int dispatch_data_events(struct dispatch *d);
/* Worker w's heartbeat reply: closures to stop, and its tasks. */
json_t *dispatch_beat_json(struct dispatch *d, struct cq_worker *w);
void dispatch_data_register(struct dispatch *d, struct cq_worker *w,
    json_t *body);
/* POST /v1/workers/NAME/splits and .../tasks/T. */
void dispatch_data_lease(struct dispatch *d, struct http_req *req,
    struct cq_worker *w, json_t *body, int64_t wait);
void dispatch_data_task(struct dispatch *d, struct http_req *req,
    struct cq_worker *w, const char *task, json_t *body);
void dispatch_data_drain(struct dispatch *d,
    void (*fn)(struct park_list *, void *));
/* The data side's routes: /v1/datasets..., /v1/jobs..., /v1/clients/... */
void dispatch_datasets_route(struct http_req *req, const struct route_match *m,
    void *arg);
void dispatch_jobs_route(struct http_req *req, const struct route_match *m,
    void *arg);
void dispatch_clients_route(struct http_req *req, const struct route_match *m,
    void *arg);

#endif
