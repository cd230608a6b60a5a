/*
 * readopts.h: what a read of a job (dispatchctl read) takes from its
 * options beyond their values: the positions of --from-state files,
 * merged, and the rules the options keep between them, with what the
 * host and the environment fill in.
 */
#ifndef MUSTER_READOPTS_H
#define MUSTER_READOPTS_H

#include <stddef.h>

#include "datapos.h"
#include "dataread.h"
#include "status.h"

/*
 * Adds the position in file to pos: a checkpoint, or the position a
 * consumer saved from a positioned stream. Several are merged: the
 * positions of a job's consumers make the job's. 0, or -1 with err.
 */
int readopts_from_state(struct datapos *pos, const char *file, char *err,
    size_t errlen);

/*
 * Checks o once every option is in: local (--local) and index
 * (--consumer-index given) with it, pos its --from-state. --local names
 * this host (into host), a run comes from MUSTER_EPOCH when not given,
 * and the position becomes o->from_state (the caller's to free).
 * ST_USAGE when the options do not go together, or another failure; err
 * says why.
 */
enum status readopts_check(struct dataread_opts *o, int local, int index,
    const struct datapos *pos, char *host, size_t hostlen, char *err,
    size_t errlen);

#endif
