/*
 * coord_text.h: what coordd says of the cluster, as text for people: the
 * status of GET /v1/tasks (coord_status) as kvctl status shows it.
 */
#ifndef MUSTER_COORD_TEXT_H
#define MUSTER_COORD_TEXT_H

#include <jansson.h>

#include "buf.h"

/*
 * Appends the cluster at a glance to out: a line of counts, a table of the
 * tasks (a recoverable one marked with *), a line per barrier in flight.
 * 0, or -1 when memory runs out.
 */
int coord_text_status(const json_t *status, struct buf *out);
/*
 * Appends a daemon's replicas (coord_replicas) to out: which leads and
 * since when, and a row per replica with its role, the records it has
 * applied and how many it is behind; now_ms is the wall clock. 0, or -1
 * when memory runs out.
 */
int coord_text_replicas(const json_t *replicas, int64_t now_ms,
    struct buf *out);

#endif
