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
const char *dispatch_client_addr(const struct dispatch_client *dc);

/*
 * Sends body (NULL: none; len bytes of JSON) and parses the reply into
 * *reply when it is 2xx (*code: the HTTP status). On failure *errbody, if
 * asked for, gets the error object dispatchd sent, or NULL.
 */
enum status dispatch_call(struct dispatch_client *dc, const char *method,
    const char *path, const char *body, size_t len, int64_t deadline, int how,
    json_t **reply, json_t **errbody, long *code);
/* The same with a JSON body. */
enum status dispatch_call_json(struct dispatch_client *dc, const char *method,
    const char *path, json_t *body, int64_t deadline, int how, json_t **reply,
    json_t **errbody, long *code);

/*
 * dispatchd's protocol, one typed call per request a worker or a data
 * consumer makes: the one place their paths are written. Each returns
 * what dispatch_call returns; a reply is the caller's to free. worker and
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

/* The wait of one long poll (see coord_poll_wait). */
int64_t dispatch_poll_wait(int64_t deadline, int64_t max_ms,
    int64_t *poll_deadline);
/* Whether a failed long poll should be sent again. */
int dispatch_poll_again(enum status st, int64_t deadline);

#endif
