/*
 * coord.h: the coordination service that coordd serves over HTTP: the task
 * registry, barriers and the key-value store, one lock around them, and the
 * requests parked waiting for them to change.
 */
#ifndef MUSTER_COORD_H
#define MUSTER_COORD_H

#include <stddef.h>

#include "daemon.h"
#include "journal.h"
#include "keypath.h"
#include "kvstore.h"
#include "registry.h"

struct coord;

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
	int64_t max_wait_ms;                 /* 0: PARK_WAIT_DEFAULT_MS */
	int authenticated; /* coordd has a token: tasks need secrets */
};

struct coord *coord_new(const struct coord_config *cfg, char *err,
    size_t errlen);
/* What the daemon skeleton serves: coordd's routes and callbacks. */
void coord_service(struct coord *co, struct daemon_service *svc);
/*
 * Answers every parked request with UNAVAILABLE and Retry-After, and every
 * later one the same way, so clients wait for the next coordd instead of
 * failing; barrier waits, whose state dies with this coordd, get ABORTED.
 * The skeleton calls it on SIGTERM.
 */
void coord_shutdown(struct coord *co);
void coord_free(struct coord *co);

/*
 * Reads the state directory dir back (made if missing; one coordd at a
 * time) and journals every change from then on, compacting the journal
 * into a snapshot once it is over max_bytes (0: 64 MiB) and twice the
 * snapshot; before coord_service.
 * ST_OK, or the error (FAILED_PRECONDITION: another process has it;
 * INTERNAL: it cannot be read, or is damaged) with err filled.
 */
enum status coord_journal_open(struct coord *co, const char *dir,
    enum journal_fsync mode, size_t max_bytes, char *err, size_t errlen);

#endif
