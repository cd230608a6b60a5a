/*
 * dispatch_client.h: a connection to dispatchd. Calls send and receive
 * JSON; a failed call's message is the client's last error, and the error
 * body dispatchd sent (a queue's error carries its closure) is handed back.
 * One client per thread.
 */
#ifndef MUSTER_DISPATCH_CLIENT_H
#define MUSTER_DISPATCH_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "buf.h"
#include "http_client.h"
#include "status.h"

struct dispatch_client;

/* How a call may be treated (as coord_call.h's CALL_). */
#define DC_ONCE 0   /* not repeated after a failure that may have landed */
#define DC_REPEAT 1 /* safe to send again */
#define DC_POLL 3   /* a long poll: its reply may come a little late */

/* With MUSTER_TOKEN_FILE set, every request carries its token. */
struct dispatch_client *dispatch_client_new(const char *addr, char *err,
    size_t errlen);
void dispatch_client_free(struct dispatch_client *dc);
/* Calls give up with ST_CANCELLED once fd is readable. */
void dispatch_client_set_cancel(struct dispatch_client *dc, int fd);
const char *dispatch_client_error(const struct dispatch_client *dc);

/*
 * dispatchd's protocol, one typed call per request a worker, a data
 * consumer or an operator (dispatchctl) makes: the one place their paths
 * are written. Each returns ST_OK with a 2xx reply parsed into *reply, or
 * the failure with the error object dispatchd sent in *errbody (when
 * asked for; NULL without one); a reply is the caller's to free. A name
 * of a queue, a worker or a resource that a path cannot carry as it is
 * (1 to 128 letters, digits and "_-.:") is INVALID_ARGUMENT. worker and
 * inc are a worker's name and its incarnation (as registration answered
 * it); wait_ms is how long dispatchd may hold a long poll.
 */
/* POST /v1/workers/W {"slots","address","host"}: a new incarnation. */
enum status dc_register(struct dispatch_client *dc, const char *worker,
    long slots, const char *address, const char *host, int64_t deadline,
    json_t **reply);
/* POST /v1/workers/W/heartbeat: closures to stop, and data tasks. */
enum status dc_heartbeat(struct dispatch_client *dc, const char *worker,
    const char *inc, int64_t wait_ms, int64_t deadline, json_t **reply,
    json_t **errbody);
/*
 * POST /v1/workers/W/take (results NULL) or .../results: closures to run,
 * up to max; results (len bytes of {"results":[...]}) reports ends and,
 * with take, takes up to that many more.
 */
enum status dc_take(struct dispatch_client *dc, const char *worker,
    const char *inc, const char *results, size_t len, long take,
    int64_t wait_ms, int64_t deadline, int how, json_t **reply,
    json_t **errbody);
/* POST /v1/workers/W/resources/R: building, ready or failed. */
enum status dc_resource_state(struct dispatch_client *dc, const char *worker,
    const char *inc, const char *resource, const char *state,
    const char *message, int64_t deadline);
/* DELETE /v1/workers/W: leaves (its closures run elsewhere). */
enum status dc_leave(struct dispatch_client *dc, const char *worker,
    const char *inc, int64_t deadline);
/*
 * POST /v1/workers/W/splits: up to want splits of task's job; lease is
 * the worker's id of the request, which dispatchd answers alike when it
 * comes again. Sent once: the caller repeats it with the same id.
 */
enum status dc_lease(struct dispatch_client *dc, const char *worker,
    const char *inc, uint64_t task, long want, uint64_t lease, int64_t wait_ms,
    int64_t deadline, json_t **reply);
/* POST /v1/workers/W/tasks/T: a task's state or what it delivered. */
enum status dc_task_report(struct dispatch_client *dc, const char *worker,
    const char *inc, uint64_t task, json_t *body, int64_t deadline);
/* POST /v1/jobs: opens a job (or its next iteration) and a client of it.
 * Sent once: each call makes a client. */
enum status dc_job_open(struct dispatch_client *dc, json_t *body,
    int64_t deadline, json_t **reply);
/* POST /v1/clients/C/heartbeat: what the client read and lost. */
enum status dc_client_beat(struct dispatch_client *dc, int64_t client,
    json_t *body, int64_t deadline, json_t **reply);
/* DELETE /v1/clients/C: the client is done with its job. */
enum status dc_client_release(struct dispatch_client *dc, int64_t client,
    int64_t deadline);
/* GET /v1/datasets/D/splits: one split a line, appended to out. */
enum status dc_splits(struct dispatch_client *dc, const char *dataset,
    int64_t deadline, struct buf *out);

/*
 * An operator's calls. Each hands back the reply, or on failure the error
 * body (a queue's error carries its closure). Names of queues and
 * resources go as they are (dispatchctl and dispatchd allow letters,
 * digits and "_-.:"), those of datasets and jobs escaped.
 */
/* GET /v1/limits: the largest closure and request dispatchd takes. */
enum status dc_limits(struct dispatch_client *dc, int64_t deadline,
    json_t **reply, json_t **errbody);
/*
 * POST /v1/queues/Q/closures {"closures":[...]}: the ids of those the
 * queue had room for, the first ones, in order. A full queue holds the
 * request up to 30 s with block, then answers DEADLINE_EXCEEDED; without
 * it, RESOURCE_EXHAUSTED at once.
 */
enum status dc_schedule(struct dispatch_client *dc, const char *queue,
    json_t *closures, int block, int64_t deadline, json_t **reply,
    json_t **errbody);
/* GET /v1/closures/ID: a closure, once it ends or wait_ms has passed. */
enum status dc_closure(struct dispatch_client *dc, uint64_t id, int64_t wait_ms,
    int64_t deadline, json_t **reply, json_t **errbody);
/* POST /v1/closures/ID/cancel */
enum status dc_cancel(struct dispatch_client *dc, uint64_t id, int64_t deadline,
    json_t **reply, json_t **errbody);
/* DELETE /v1/closures/ID: an ended closure and its value. */
enum status dc_forget(struct dispatch_client *dc, uint64_t id, int64_t deadline,
    json_t **reply, json_t **errbody);
/*
 * GET /v1/closures?queue=Q: a page of the queue's closures with ids above
 * after, of one state (dispatchd's word for it, sent as given) or of any
 * (state NULL). dc_closures_more says whether more follow the page, and
 * moves after to where they start.
 */
enum status dc_closures(struct dispatch_client *dc, const char *queue,
    const char *state, uint64_t after, int64_t deadline, json_t **reply,
    json_t **errbody);
int dc_closures_more(json_t *page, uint64_t *after);
/* GET /v1/queues/Q/join: the queue's counts, once done or after wait_ms. */
enum status dc_join(struct dispatch_client *dc, const char *queue,
    int64_t wait_ms, int64_t deadline, json_t **reply, json_t **errbody);
/* GET /v1/queues/Q/done: whether it is done, at once. */
enum status dc_done(struct dispatch_client *dc, const char *queue,
    int64_t deadline, json_t **reply, json_t **errbody);
/* GET /v1/status: queues and workers. */
enum status dc_status(struct dispatch_client *dc, int64_t deadline,
    json_t **reply, json_t **errbody);
/* GET /v1/resources, and /v1/resources/R with its state on each worker. */
enum status dc_resources(struct dispatch_client *dc, int64_t deadline,
    json_t **reply, json_t **errbody);
enum status dc_resource(struct dispatch_client *dc, const char *name,
    int64_t deadline, json_t **reply, json_t **errbody);
/* PUT /v1/resources/R {"argv":[...]}: defines it. */
enum status dc_resource_add(struct dispatch_client *dc, const char *name,
    json_t *argv, int64_t deadline, json_t **reply, json_t **errbody);
/* POST /v1/datasets: registers one (body: its splits, reader, ...). */
enum status dc_dataset_add(struct dispatch_client *dc, json_t *body,
    int64_t deadline, json_t **reply, json_t **errbody);
/* GET /v1/datasets, and /v1/datasets/D (an id or a name). */
enum status dc_datasets(struct dispatch_client *dc, int64_t deadline,
    json_t **reply, json_t **errbody);
enum status dc_dataset(struct dispatch_client *dc, const char *dataset,
    int64_t deadline, json_t **reply, json_t **errbody);
/* GET /v1/jobs, and /v1/jobs/J (an id or a name). */
enum status dc_jobs(struct dispatch_client *dc, int64_t deadline,
    json_t **reply, json_t **errbody);
enum status dc_job(struct dispatch_client *dc, const char *job,
    int64_t deadline, json_t **reply, json_t **errbody);
/* GET /v1/jobs/J/checkpoint: the job's position, to start a read at. */
enum status dc_checkpoint(struct dispatch_client *dc, const char *job,
    int64_t deadline, json_t **reply, json_t **errbody);

/* The wait of one long poll (see coord_poll_wait). */
int64_t dispatch_poll_wait(int64_t deadline, int64_t max_ms,
    int64_t *poll_deadline);
/* Whether a failed long poll should be sent again. */
int dispatch_poll_again(enum status st, int64_t deadline);

#endif
