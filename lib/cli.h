/*
 * cli.h: what every program's command line shares: the coordd address and
 * task from flags or the environment, sizes with suffixes, and the usage and
 * error conventions (usage to stdout with -h, to stderr with exit 2 on a
 * mistake; errors as "prog: CODE: message").
 */
#ifndef MUSTER_CLI_H
#define MUSTER_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define CLI_COORD_ENV      "MUSTER_COORD"
#define CLI_COORD_DEFAULT  "127.0.0.1:7700"
#define CLI_COORD_PORT     7700

/* -c ADDR, else $MUSTER_COORD, else the default. */
const char *cli_coord_addr(const char *flag);

/* A decimal number from min to max into *v; 0, or -1 when it is not. */
int cli_parse_long(const char *s, long min, long max, long *v);

/* "1048576", "64k", "16M", "1G" (powers of 1024) into *bytes. */
int cli_parse_size(const char *s, size_t *bytes);

/* Splits HOST:PORT (or [V6]:PORT) for a daemon's -l flag; HOST must be
 * a numeric IPv4 or IPv6 address. */
int cli_parse_listen(const char *s, char *host, size_t hostlen, int *port);

/* Writes "prog: CODE: message" to stderr and returns the exit code. */
int cli_fail(enum status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Writes "prog: message" and the synopsis to stderr; returns 2. */
int cli_usage_error(const char *synopsis, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Raises the soft limit on open files to the hard one. */
void cli_raise_nofile(void);

/* Writes the port to path atomically (a temporary file, then rename). */
int cli_write_port_file(const char *path, int port);

#endif
