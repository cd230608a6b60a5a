/*
 * agent.h: what a task's agent (preemptwatch, barrierwait) asks of coordd:
 * register the task, heartbeat, report errors, wait for the cluster,
 * barriers, leave. The calls are those of the reference agent; errors are
 * the client's last error (coord_client_error).
 */
#ifndef MUSTER_AGENT_H
#define MUSTER_AGENT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "coord_client.h"
#include "status.h"
#include "task.h"

struct coord_agent {
	char task[TASK_JOB_MAX + 24]; /* "job:index" */
	char path[TASK_JOB_MAX + 40]; /* "/v1/tasks/job/index" */
	uint64_t incarnation;         /* 0: not known */
	int64_t heartbeat_timeout_ms;
	int64_t heartbeat_interval_ms;
	char service_incarnation[17];
	long epoch;      /* the run it registered in */
	long rank;       /* its place among all tasks, from 0 */
	long world;      /* how many tasks the cluster has */
	long wait_epoch; /* register refused: wait past this epoch, then
			  * try again; -1 none */
	/* The task's own secret: it registers with it, and every request
	 * of its clients carries it (coord_client_set_task_secret). */
	char secret[COORD_SECRET_LEN + 1];
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
 * Tries to reach coordd until deadline, then waits patience_ms more for
 * its answer (a stalled coordd answers late, it has not gone).
 * *not_registered is set when coordd does not know the task as connected;
 * svc (17 bytes) then gets coordd's service incarnation, which tells a
 * restarted coordd from one that moved on without this task.
 */
enum status coord_heartbeat(struct coord_client *cc,
    const struct coord_agent *a, int64_t deadline, int64_t patience_ms,
    int *not_registered, char *svc);
/*
 * The raw HTTP request of coord_report_error, for a process that may not
 * use the client (a guard forked from a threaded one): its length, or 0
 * when it does not fit in size.
 */
size_t coord_error_request(const struct coord_client *cc,
    const struct coord_agent *a, enum status code, const char *message,
    char *buf, size_t size);
enum status coord_report_error(struct coord_client *cc,
    const struct coord_agent *a, enum status code, const char *message,
    int64_t deadline);
/* Waits for every task; progress(arg, connected, total) on long polls. */
enum status coord_wait_all(struct coord_client *cc, const struct coord_agent *a,
    int64_t deadline, void (*progress)(void *arg, long done, long total),
    void *arg);
/* Leaves the cluster; through the shutdown barrier only when barrier. */
enum status coord_shutdown_task(struct coord_client *cc,
    const struct coord_agent *a, int barrier, int64_t deadline);
/*
 * Waits until the cluster's epoch is past after; *epoch gets it, and
 * *finished (when not NULL) the array of the tasks that left epoch after
 * because their work was done: they will not come to the next run.
 */
enum status coord_wait_epoch(struct coord_client *cc, long after,
    int64_t deadline, long *epoch, json_t **finished);
/*
 * One long poll for task errors; *errors gets the array (maybe empty) of
 * {"task","code","message","reported"}.
 */
enum status coord_poll_errors(struct coord_client *cc, int64_t deadline,
    json_t **errors);
/* The same errors as they are now, without waiting for one. */
enum status coord_errors_now(struct coord_client *cc, int64_t deadline,
    json_t **errors);
/* The fields of one of those errors, "?" (task, code) or "" (message)
 * for one it lacks; they live as long as e. */
struct coord_task_error {
	const char *task, *code, *message;
};
void coord_task_error(const json_t *e, struct coord_task_error *out);
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

#endif
