/*
 * cli.h: what every program's command line shares: the daemons' addresses
 * from flags or the environment, and the usage and error conventions (usage
 * to stdout with -h, to stderr with exit 2 on a mistake; errors as
 * "prog: CODE: message" with the status's exit code).
 */
#ifndef MUSTER_CLI_H
#define MUSTER_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "status.h"

#define CLI_COORD_ENV "MUSTER_COORD"
#define CLI_COORD_DEFAULT "127.0.0.1:7700"
#define CLI_COORD_PORT 7700

/* -c ADDR, else $MUSTER_COORD, else the default. */
const char *cli_coord_addr(const char *flag);

#define CLI_DISPATCH_ENV "MUSTER_DISPATCHER"
#define CLI_DISPATCH_DEFAULT "127.0.0.1:7701"
#define CLI_DISPATCH_PORT 7701

/* -d ADDR, else $MUSTER_DISPATCHER, else the default. */
const char *cli_dispatch_addr(const char *flag);

/* The long options every program takes, last in its table. */
#define CLI_STD_LONGOPTS                          \
	{"help", no_argument, NULL, 'h'},         \
	{                                         \
		"version", no_argument, NULL, 'V' \
	}

/*
 * -h or --help (usage to stdout, exit 0), --version (exit 0), or an
 * option the program does not know: the synopsis to stderr, and 2 to
 * exit with. Call it for every option the program's switch did not take.
 */
int cli_std_option(int c, const char *synopsis);

/*
 * A flag's duration (at least min ms: "above zero" for 1, "of 1s or more"
 * for 1000) or number (min to max): 0, or, after saying what is wrong and
 * the synopsis on stderr, 2 (usage).
 */
int cli_duration_flag(const char *synopsis, const char *flag, const char *arg,
    int64_t min, int64_t *ms);
int cli_number_flag(const char *synopsis, const char *flag, const char *arg,
    long min, long max, long *v);

/* Writes "prog: CODE: message" to stderr and returns the exit code. */
int cli_fail(enum status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * rc; or, when rc is 0 and out did not take all that was written to it (a
 * full disk, a closed pipe, a pipe that would not wait), the exit code of
 * INTERNAL, said on stderr: a program whose output was lost never exits
 * 0. Stdio drops the bytes of a write that failed, and a flush of what
 * came after may succeed: the stream's error flag remembers.
 */
int cli_flushed(FILE *out, int rc);

/* Writes "prog: message" and the synopsis to stderr; returns 2. */
int cli_usage_error(const char *synopsis, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
