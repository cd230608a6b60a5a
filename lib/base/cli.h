/*
 * cli.h: what every program's command line shares: the daemons' addresses
 * from flags or the environment, and the usage and error conventions (usage
 * to stdout with -h, to stderr with exit 2 on a mistake; errors as
 * "prog: CODE: message" with the status's exit code).
 */
#ifndef MUSTER_CLI_H
#define MUSTER_CLI_H

#include "status.h"

#define CLI_COORD_ENV "MUSTER_COORD"
#define CLI_COORD_DEFAULT "127.0.0.1:7700"
#define CLI_COORD_PORT 7700

/* -c ADDR, else $MUSTER_COORD, else the default. */
const char *cli_coord_addr(const char *flag);

/* Writes "prog: CODE: message" to stderr and returns the exit code. */
int cli_fail(enum status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Writes "prog: message" and the synopsis to stderr; returns 2. */
int cli_usage_error(const char *synopsis, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
