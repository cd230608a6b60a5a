/*
 * parse.h: numbers, sizes and listen addresses as people type them on a
 * command line or in a query string. Each returns 0, or -1 when the text is
 * not what was asked for; nothing is half-parsed.
 */
#ifndef MUSTER_PARSE_H
#define MUSTER_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* A decimal number from min to max into *v. */
int parse_long(const char *s, long min, long max, long *v);

/* A decimal int64 (optional sign) into *v, with no overflow. */
int parse_int64(const char *s, int64_t *v);

/* "1048576", "64k", "16M", "1G" (powers of 1024) into *bytes. */
int parse_size(const char *s, size_t *bytes);

/*
 * HOST:PORT (or [V6]:PORT) for a daemon's -l flag into host and *port.
 * HOST must be a numeric IPv4 or IPv6 address: no resolver surprises.
 */
int parse_listen(const char *s, char *host, size_t hostlen, int *port);

#endif
