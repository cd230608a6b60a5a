/*
 * route.h: a daemon's resources as a table. Each route is a path pattern,
 * the methods it takes and its handler; the table answers 404 for a path
 * no route matches and 405 (with Allow) for a method the route does not
 * take, so no handler writes those again.
 *
 * Patterns are literal segments, '*' for any one segment, and a final
 * "**" for the rest of the path, which may be empty: the pattern for keys,
 * "/v1/kv" then "/" and "**", matches "/v1/kv", "/v1/kv/a" and
 * "/v1/kv/a/b".
 */
#ifndef MUSTER_ROUTE_H
#define MUSTER_ROUTE_H

#include <stddef.h>

#include "http_server.h"

enum {
	ROUTE_GET = 1 << 0,
	ROUTE_HEAD = 1 << 1,
	ROUTE_PUT = 1 << 2,
	ROUTE_POST = 1 << 3,
	ROUTE_DELETE = 1 << 4,
};

#define ROUTE_MAX_SEGS 4

/* What a pattern captured: each '*' segment in order, and "**"'s rest. */
struct route_match {
	const char *seg[ROUTE_MAX_SEGS];
	size_t seglen[ROUTE_MAX_SEGS];
	int nseg;
	const char *rest; /* "" when the path ends there */
	unsigned method;  /* the request's ROUTE_ bit */
	const void *op;   /* the route's op */
};

typedef void (
    *route_fn)(struct http_req *req, const struct route_match *m, void *arg);

/*
 * op is the handler's to use: when several routes share a handler (one
 * resource's actions, each a path of its own), it tells them apart, so that
 * no handler matches the path again.
 */
struct route {
	const char *pattern;
	unsigned methods;
	route_fn fn;
	const void *op;
};

/* The ROUTE_ bit of a method name; 0 for others. */
unsigned route_method(const char *method);

/*
 * Finds req's route in the table and calls it, or answers 404 or 405
 * itself. Returns 1 when a route took the request.
 */
int route_dispatch(const struct route *routes, size_t n, struct http_req *req,
    void *arg);

/* A captured segment as a NUL-terminated string into buf (cut to size). */
char *route_seg(const struct route_match *m, int i, char *buf, size_t size);

#endif
