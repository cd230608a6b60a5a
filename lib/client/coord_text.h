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

#endif
