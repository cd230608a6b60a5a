/*
 * status.h: the one error set shared by coordd, its clients and their exit
 * codes. A status travels as a name on the wire ("DEADLINE_EXCEEDED"), as an
 * HTTP status in a reply, and as a process exit code; this header is the only
 * place that maps between the three.
 */
#ifndef MUSTER_STATUS_H
#define MUSTER_STATUS_H

enum status {
	ST_OK = 0,
	ST_NOT_FOUND,
	ST_USAGE,
	ST_INVALID_ARGUMENT,
	ST_DEADLINE_EXCEEDED,
	ST_ALREADY_EXISTS,
	ST_FAILED_PRECONDITION,
	ST_ABORTED,
	ST_CANCELLED,
	ST_UNAVAILABLE,
	ST_INTERNAL,
	ST_UNAUTHENTICATED,
	ST_RESOURCE_EXHAUSTED,
	ST_COUNT
};

/* Canonical name, e.g. "NOT_FOUND"; "USAGE" for ST_USAGE. */
const char *status_name(enum status st);

/* Parses a canonical name; unknown names give ST_INTERNAL. */
enum status status_from_name(const char *name);

/* The HTTP status a server replies with. */
int status_http(enum status st);

/* Best guess from a bare HTTP status, for replies without an error body. */
enum status status_from_http(int http);

/* The process exit code; equal to the enum value by construction. */
int status_exit(enum status st);

#endif
