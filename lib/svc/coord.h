/*
 * coord.h: the coordination service that coordd serves over HTTP: the task
 * registry, barriers and the key-value store, one lock around them, and the
 * requests parked waiting for them to change.
 */
#ifndef MUSTER_COORD_H
#define MUSTER_COORD_H

#include <stddef.h>

#include "daemon.h"
#include "keypath.h"
#include "kvstore.h"
#include "registry.h"

/*
 * Keys under this prefix belong to one run of the job (an epoch): coordd
 * removes them when no task is connected any more.
 */
#define COORD_RUN_PREFIX KEYPATH_RUN

struct coord_config {
	struct kv_limits kv;
	struct registry_config cluster;
	int64_t shutdown_barrier_timeout_ms; /* 0: no shutdown barrier */
	size_t max_barriers;                 /* 0: BAR_MAX_DEFAULT */
};

/*
 * Makes coordd's service from cfg and fills svc with what the daemon
 * skeleton serves and how it frees it (daemon_program.open). Of the
 * skeleton's options it takes the longest wait of a long poll
 * (o->max_wait_ms) and whether there is a token (tasks then need
 * secrets). With o->state_dir, the state directory is read back before
 * serving (made if missing; one coordd at a time) and every change
 * journaled from then on, compacting the journal into a snapshot once it
 * is over o->journal_max (0: 64 MiB) and twice the snapshot.
 * ST_OK, or the error (FAILED_PRECONDITION: another process has the
 * directory; INTERNAL: out of memory, or the directory cannot be read or
 * is damaged) with err filled.
 */
enum status coord_open(const struct coord_config *cfg,
    const struct daemon_options *o, struct daemon_service *svc, char *err,
    size_t errlen);

#endif
