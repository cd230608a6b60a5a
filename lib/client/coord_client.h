/*
 * coord_client.h: calls to coordd's key-value store, for programs. Each
 * call takes an absolute deadline (duration_now_ms() based, or
 * HTTP_NO_DEADLINE) and returns a status with a message in the client's
 * error buffer. Blocking calls are long polls re-issued until the deadline,
 * so a client outlives a restart of coordd.
 */
#ifndef MUSTER_COORD_CLIENT_H
#define MUSTER_COORD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "buf.h"
#include "http_client.h"
#include "status.h"
#include "task.h"

/* How a put treats a key that exists (or not), as coordd's mode=. */
enum coord_put_mode {
	COORD_PUT_INSERT,       /* only a new key */
	COORD_PUT_OVERWRITE,    /* either */
	COORD_PUT_UPDATE,       /* only an existing key */
};

struct coord_client {
	struct http_client *http;
	char service[17];       /* the coordd a watch's revisions are from */
	char err[1024];
};

/* addr as for http_client_new; NULL (and a message in err) on failure. */
struct coord_client *coord_client_new(const char *addr, char *err,
    size_t errlen);
void coord_client_free(struct coord_client *cc);
/* Calls give up with ST_CANCELLED once fd is readable (see http_client). */
void coord_client_set_cancel(struct coord_client *cc, int fd);

/* The value of key into val; waits for it to appear when wait is set. */
enum status coord_kv_get(struct coord_client *cc, const char *key, int wait,
    int64_t deadline, struct buf *val, int64_t *rev);
enum status coord_kv_put(struct coord_client *cc, const char *key,
    const void *val, size_t len, enum coord_put_mode mode, int64_t deadline,
    int64_t *rev);
enum status coord_kv_add(struct coord_client *cc, const char *key,
    int64_t delta, int64_t deadline, int64_t *value, int64_t *rev);
/*
 * On a mismatch returns ST_FAILED_PRECONDITION and, when the key exists,
 * fills current and sets *has_current.
 */
enum status coord_kv_cas(struct coord_client *cc, const char *key,
    const void *expect, size_t elen, int absent, const void *val,
    size_t vlen, int64_t deadline, int64_t *rev, struct buf *current,
    int *has_current);
enum status coord_kv_delete(struct coord_client *cc, const char *key,
    int64_t deadline, int64_t *deleted, int64_t *rev);
/* The reply object {"revision":R,"entries":[{key,value(base64),...}]}. */
enum status coord_kv_dir(struct coord_client *cc, const char *prefix,
    int64_t deadline, json_t **reply);
/*
 * One long poll for changes under prefix after *since (a negative *since
 * means "from now"). *events gets the array of changes (maybe empty, when
 * the deadline passes quietly) and *since advances past them.
 */
enum status coord_kv_watch(struct coord_client *cc, const char *prefix,
    int64_t *since, int64_t deadline, json_t **events);


/* The cluster side: what an agent (preemptwatch, barrierwait) calls. */
struct coord_agent {
	char task[TASK_JOB_MAX + 24];   /* "job:index" */
	char path[TASK_JOB_MAX + 40];   /* "/v1/tasks/job/index" */
	uint64_t incarnation;           /* 0: not known */
	int64_t heartbeat_timeout_ms;
	int64_t heartbeat_interval_ms;
	char service_incarnation[17];
	long epoch;                     /* the run it registered in */
	long wait_epoch;                /* register refused: wait past this
					 * epoch, then try again; -1 none */
};

/* Fills a from a task name; -1 when it is not one. */
int coord_agent_init(struct coord_agent *a, const char *task,
    uint64_t incarnation);

/*
 * Registers a. When coordd says the task belongs to the next run (it left
 * or failed in this one), a->wait_epoch says which epoch must end first.
 */
enum status coord_register(struct coord_client *cc, struct coord_agent *a,
    int64_t deadline);
/*
 * *not_registered is set when coordd does not know the task as connected;
 * svc (17 bytes) then gets coordd's service incarnation, which tells a
 * restarted coordd from one that moved on without this task.
 */
enum status coord_heartbeat(struct coord_client *cc,
    const struct coord_agent *a, int64_t deadline, int *not_registered,
    char *svc);
enum status coord_report_error(struct coord_client *cc,
    const struct coord_agent *a, enum status code, const char *message,
    int64_t deadline);
/* Waits for every task; progress(arg, connected, total) on long polls. */
enum status coord_wait_all(struct coord_client *cc,
    const struct coord_agent *a, int64_t deadline,
    void (*progress)(void *arg, long done, long total), void *arg);
/* Leaves the cluster; through the shutdown barrier only when barrier. */
enum status coord_shutdown_task(struct coord_client *cc,
    const struct coord_agent *a, int barrier, int64_t deadline);
/* Waits until the cluster's epoch is past after; *epoch gets it. */
enum status coord_wait_epoch(struct coord_client *cc, long after,
    int64_t deadline, long *epoch);
/*
 * One long poll for task errors; *errors gets the array (maybe empty) of
 * {"task","code","message","reported"}.
 */
enum status coord_poll_errors(struct coord_client *cc, int64_t deadline,
    json_t **errors);
/*
 * Waits at barrier id. timeout_ms is the barrier's own timeout (fixed by
 * the first arrival); tasks NULL means all connected tasks. poll_ms bounds
 * each long poll (for progress reports).
 */
enum status coord_barrier_wait(struct coord_client *cc,
    const struct coord_agent *a, const char *id, int64_t timeout_ms,
    json_t *tasks, int64_t deadline, int64_t poll_ms,
    void (*progress)(void *arg, long done, long total), void *arg);
enum status coord_barrier_cancel(struct coord_client *cc,
    const struct coord_agent *a, const char *id, int64_t deadline);
/* The whole cluster status object (GET /v1/tasks). */
enum status coord_status(struct coord_client *cc, int64_t deadline,
    json_t **status);

#endif
