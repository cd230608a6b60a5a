/*
 * readopts.c: the rules between dispatchctl read's options.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "readopts.h"

int
readopts_from_state(struct datapos *pos, const char *file, char *err,
    size_t errlen)
{
	json_error_t je;
	json_t *st = json_load_file(file, 0, &je);
	int rc;

	if (st == NULL) {
		snprintf(err, errlen, "%s", je.text);
		return -1;
	}
	rc = datapos_merge(pos, st, err, errlen);
	json_decref(st);
	return rc;
}

static enum status
usage(char *err, size_t errlen, const char *msg)
{
	snprintf(err, errlen, "%s", msg);
	return ST_USAGE;
}

/* Some tasks only (--local, --host), or in rounds (--consumers). */
static enum status
check_tasks(const struct dataread_opts *o, int local, int index, char *err,
    size_t errlen)
{
	if ((o->consumers > 0) != index)
		return usage(err, errlen,
		    "--consumers and --consumer-index go together");
	if (o->consumers > 0 && o->consumer_index >= o->consumers) {
		snprintf(err, errlen,
		    "--consumer-index %ld is not below --consumers %ld",
		    o->consumer_index, o->consumers);
		return ST_USAGE;
	}
	if (o->consumers > 0 && (local || o->host != NULL))
		return usage(err, errlen,
		    "--local and --host read some tasks only; a round-robin "
		    "read takes every task's turn");
	return ST_OK;
}

enum status
readopts_check(struct dataread_opts *o, int local, int index,
    const struct datapos *pos, char *host, size_t hostlen, char *err,
    size_t errlen)
{
	enum status st;

	if ((st = check_tasks(o, local, index, err, errlen)) != ST_OK)
		return st;
	if (local && o->host == NULL) {
		if (gethostname(host, hostlen) < 0) {
			snprintf(err, errlen, "gethostname: %s",
			    strerror(errno));
			return ST_INTERNAL;
		}
		host[hostlen - 1] = '\0';
		o->host = host;
	}
	if (o->positions && o->mode != NULL &&
	    strcmp(o->mode, "dynamic") != 0) {
		snprintf(err, errlen,
		    "--positions: only dynamic jobs have positions, not mode "
		    "%s",
		    o->mode);
		return ST_USAGE;
	}
	if (o->positions && o->consumers > 0)
		return usage(err, errlen,
		    "--positions: a round-robin read has no position");
	/* Under preemptwatch, every task of one run of the job has it. */
	if (o->run == NULL && o->job != NULL)
		o->run = getenv("MUSTER_EPOCH");
	if (datapos_loaded(pos) && o->job != NULL && o->run == NULL)
		return usage(err, errlen,
		    "--from-state with --job needs --run ID (or "
		    "MUSTER_EPOCH): the readers of one run of the training "
		    "job share the job, a new run starts it anew");
	if (datapos_loaded(pos) &&
	    (o->from_state = datapos_json(pos)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	return ST_OK;
}
