/*
 * dispatch_opts.h: dispatchctl's command line: its synopsis, the man
 * page's SYNOPSIS, and each verb's options and operands into what its
 * calls take, with their checks. Every parser returns 0, or the exit code,
 * the mistake said on stderr with the synopsis (-h and --version exit).
 * A verb's argv[0] is the verb (or its sub-verb, for those that have
 * one).
 */
#ifndef MUSTER_DISPATCH_OPTS_H
#define MUSTER_DISPATCH_OPTS_H

#include <stddef.h>
#include <stdint.h>

#include "dataread.h"
#include "dispatch_sched.h"

extern const char dispatch_opts_synopsis[];

/*
 * The options before the verb: -d (NULL: none), -q ("default" without),
 * --json. The verb is argv[optind].
 */
int dispatch_opts_main(int argc, char **argv, const char **addr,
    const char **queue, int *json);

/* schedule's options into s (after dispatch_sched_init), and its command. */
int dispatch_opts_schedule(int argc, char **argv, struct dispatch_sched *s);

/*
 * --timeout as a deadline (HTTP_NO_DEADLINE without), and ls's --state
 * (state NULL: the verb takes none). The operands start at optind.
 */
int dispatch_opts_wait(int argc, char **argv, int64_t *deadline,
    const char **state);

/* arg as a closure's id: 0 when it is not one. */
uint64_t dispatch_opts_id(const char *arg);
/* argv[first..argc) are closure ids, at least one. */
int dispatch_opts_ids(int first, int argc, char **argv);

/* resource NAME ...: the name, argv[1], before its sub-verb is known. */
int dispatch_opts_resource(int argc, char **argv);

/* dataset add's options; splits and reader are required. */
struct dispatch_opts_dataset {
	const char *splits, *reader, *framing, *name;
	int skips; /* --reader-skips */
};
int dispatch_opts_dataset(int argc, char **argv,
    struct dispatch_opts_dataset *d);

/* checkpoint --job NAME. */
int dispatch_opts_checkpoint(int argc, char **argv, const char **job);

/* splits range START END [STEP], and splits bytes FILE SIZE. */
int dispatch_opts_range(int argc, char **argv, int64_t *start, int64_t *end,
    int64_t *step);
int dispatch_opts_bytes(int argc, char **argv, size_t *size);

/*
 * read D's options into r->o, the defaults first, checked together
 * (readopts_check); --local's host is kept in r. r->o.from_state is the
 * caller's to free (also on failure).
 */
struct dispatch_opts_read {
	struct dataread_opts o;
	char host[256];
};
int dispatch_opts_read(int argc, char **argv, struct dispatch_opts_read *r);

#endif
