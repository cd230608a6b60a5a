/*
 * dispatch_sched.h: closures for one of dispatchd's queues, made from a
 * command line (dispatchctl schedule): one closure, or one for each line
 * of input, the line taking the place of {} in the arguments and the key
 * (or, with no {} in the arguments, added as the last one). Lines are
 * sent in batches no larger than dispatchd takes, and a batch is sent
 * again while the queue stays full; each closure's id is written as
 * dispatchd gives it.
 *
 * Calls that talk to dispatchd fail with err saying why and *errbody
 * dispatchd's error body when it sent one (a queue's error carries its
 * closure), else NULL.
 */
#ifndef MUSTER_DISPATCH_SCHED_H
#define MUSTER_DISPATCH_SCHED_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "dispatch_client.h"
#include "status.h"

struct dispatch_sched {
	/* The caller's to set, after dispatch_sched_init: */
	char **cmd; /* COMMAND [ARG...] */
	int ncmd;
	const char *in;  /* every closure's stdin: a file, "-" ours; NULL */
	const char *key; /* NULL: none */
	int each;        /* a closure a line */
	int block;       /* wait while the queue is full (the default) */
	/* The calls': */
	struct dispatch_client *dc;
	const char *queue;
	FILE *ids;      /* each closure's id, a line */
	json_t *common; /* the fields every closure shares */
	json_t *env, *codes, *needs;
	size_t max_closure, max_request; /* dispatchd's limits (bytes) */
};

/* Nothing set yet: 0, or -1 when memory runs out (free it all the same). */
int dispatch_sched_init(struct dispatch_sched *s, struct dispatch_client *dc,
    const char *queue, FILE *ids);
void dispatch_sched_free(struct dispatch_sched *s);

/* What every closure gets (one call for each --needs, --retry-exit). */
void dispatch_sched_timeout(struct dispatch_sched *s, int64_t ms);
void dispatch_sched_max_retries(struct dispatch_sched *s, long n);
void dispatch_sched_retry_exit(struct dispatch_sched *s, long code);
/* A failure is the closure's own, not its queue's error (--independent). */
void dispatch_sched_independent(struct dispatch_sched *s);
/* 0, or -1 when resource is not UTF-8. */
int dispatch_sched_needs(struct dispatch_sched *s, const char *resource);
/* NAME=value: 0, -1 when it is not that, -2 when it is not UTF-8. */
int dispatch_sched_env(struct dispatch_sched *s, const char *nv);
/* The task it runs on, JOB:INDEX: 0, or -1 when it is not a task name. */
int dispatch_sched_on(struct dispatch_sched *s, const char *task);

/* Whether s holds {}, which a line takes the place of. */
int dispatch_sched_braces(const char *s);

/* Schedules the closure, or with each one for each line of lines. */
enum status dispatch_sched_run(struct dispatch_sched *s, FILE *lines,
    json_t **errbody, char *err, size_t errlen);

#endif
