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
#include "journal.h"

struct dispatch;

struct dispatch_config {
	struct cq_config cq;
	struct ds_config ds;
	int64_t worker_recovery_ms; /* 0: 1 h */
	int64_t watchdog_ms;        /* 0: no watchdog */
	int64_t max_wait_ms;        /* 0: PARK_WAIT_DEFAULT_MS */
	size_t max_batch;           /* closures per schedule request */
	size_t max_body;            /* bytes of a request's body, as served */
};

struct dispatch *dispatch_new(const struct dispatch_config *cfg, char *err,
    size_t errlen);
void dispatch_service(struct dispatch *d, struct daemon_service *svc);
/* Answers everything parked with UNAVAILABLE and Retry-After. */
void dispatch_shutdown(struct dispatch *d);
void dispatch_free(struct dispatch *d);

/*
 * Reads the state directory dir back (made if missing; one dispatchd at a
 * time) and journals every change from then on, compacting past max_bytes
 * (0: 64 MiB); before dispatch_service. ST_OK, or the error
 * (FAILED_PRECONDITION: another process has it; INTERNAL: it cannot be
 * read, or is damaged) with err filled.
 */
enum status dispatch_journal_open(struct dispatch *d, const char *dir,
    enum journal_fsync mode, size_t max_bytes, char *err, size_t errlen);

#endif
