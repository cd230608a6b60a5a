/*
 * dispatch.h: the work dispatcher that dispatchd serves over HTTP: the
 * closure queues and their workers (closureq), one lock around them, and
 * the requests parked waiting for them (fetches, joins, schedules held by a
 * full queue, workers' takes and heartbeats).
 */
#ifndef MUSTER_DISPATCH_H
#define MUSTER_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "closureq.h"
#include "daemon.h"
#include "dataset.h"

struct dispatch_config {
	struct cq_config cq;
	struct ds_config ds;
	int64_t worker_recovery_ms; /* 0: 1 h */
	int64_t watchdog_ms;        /* 0: no watchdog */
	size_t max_batch;           /* closures per schedule request */
};

/*
 * Makes dispatchd's service from cfg and fills svc with what the daemon
 * skeleton serves and how it frees it (daemon_program.open). Of the
 * skeleton's options it takes the longest wait of a long poll
 * (o->max_wait_ms) and the limit on a request's body (o->max_body, which
 * /v1/limits tells). With o->state_dir, the state directory is read back
 * before serving (made if missing; one dispatchd at a time) and every
 * change journaled from then on, compacting past o->journal_max (0:
 * 64 MiB). ST_OK, or the error (FAILED_PRECONDITION: another process has
 * the directory; INTERNAL: out of memory, or the directory cannot be read
 * or is damaged) with err filled.
 */
enum status dispatch_open(const struct dispatch_config *cfg,
    const struct daemon_options *o, struct daemon_service *svc, char *err,
    size_t errlen);

#endif
