/*
 * dsjson.h: dispatchd's data side in JSON, its one codec: the requests of
 * datasets, jobs, job clients and a worker's leases and reports read into
 * dataset.h's structs for the state machine, and its state written as the
 * replies. Each call is the state's of the same name (ds_*) over JSON,
 * with the caller holding the state's lock.
 */
#ifndef MUSTER_DSJSON_H
#define MUSTER_DSJSON_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "buf.h"
#include "dataset.h"
#include "status.h"

/*
 * ds_dataset_register, from def ({"splits":[...], "reader", "framing",
 * "reader_skips", "name"}).
 */
enum status dsjson_dataset_register(struct ds *ds, json_t *def,
    struct ds_dataset **out, int *created, char *msg, size_t msglen);
json_t *dsjson_dataset(const struct ds_dataset *d);
json_t *dsjson_datasets(const struct ds *ds);

/*
 * ds_job_open, from req ({"dataset", "mode", "name", "repeat", "seed",
 * "consumers", "consumer_index", "from_state", "run"}).
 */
enum status dsjson_job_open(struct ds *ds, json_t *req, int64_t now,
    struct ds_job **job, struct ds_client **client, int *created, char *msg,
    size_t msglen);
json_t *dsjson_job(const struct ds_job *j);
json_t *dsjson_jobs(const struct ds *ds);
/* Where a DYNAMIC job began, as a position (NULL otherwise). */
json_t *dsjson_job_start(const struct ds_job *j);
/* A DYNAMIC job's position, for --from-state. */
enum status dsjson_checkpoint(const struct ds_job *j, json_t **out, char *msg,
    size_t msglen);

/*
 * ds_client_beat, from body ("delivered", "lost", "round",
 * "blocked_round"; NULL: none of them); *reply gets the answer.
 */
enum status dsjson_client_beat(struct ds *ds, struct ds_client *c, json_t *body,
    int64_t now, json_t **reply, char *msg, size_t msglen);

/* Worker name's task list, as its heartbeat says it. */
json_t *dsjson_worker_tasks(struct ds *ds, const char *name);
/*
 * ds_lease: out gets {"splits":[...], "end"} as JSON text; *later is set
 * (and nothing written) when there is nothing to lease yet.
 */
enum status dsjson_lease(struct ds *ds, struct ds_task *t, long want,
    uint64_t id, int *later, struct buf *out, char *msg, size_t msglen);
/* ds_task_delivered, from list ([seq, first, end, total] each). */
enum status dsjson_task_delivered(struct ds *ds, struct ds_task *t,
    json_t *list, char *msg, size_t msglen);

#endif
