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

struct dispatch;

struct dispatch_config {
	struct cq_config cq;
	struct ds_config ds;
	int64_t worker_recovery_ms; /* 0: 1 h */
	int64_t watchdog_ms;        /* 0: no watchdog */
	int64_t max_wait_ms;        /* 0: PARK_WAIT_DEFAULT_MS */
	size_t max_batch;           /* closures per schedule request */
};

struct dispatch *dispatch_new(const struct dispatch_config *cfg, char *err,
    size_t errlen);
void dispatch_service(struct dispatch *d, struct daemon_service *svc);
/* Answers everything parked with UNAVAILABLE and Retry-After. */
void dispatch_shutdown(struct dispatch *d);
void dispatch_free(struct dispatch *d);

#endif
