/*
 * datawire.c: the data path's request line, written by a consumer
 * (client/dataread_task.c, dataread_rr.c) and read by a worker's data
 * server (client/dataserve_server.c): see datawire.h.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datawire.h"
#include "duration.h"
#include "parse.h"

int
dw_request_path(const struct dw_request *r, char *out, size_t size)
{
	int n;
	char sep = '?';
	size_t at;

	switch (r->kind) {
	case DW_HEALTH: n = snprintf(out, size, "/healthz"); break;
	case DW_ELEMENTS:
		n = snprintf(out, size, "/v1/tasks/%" PRIu64 "/elements",
		    r->task);
		break;
	case DW_ROUND:
		n = snprintf(out, size,
		    "/v1/tasks/%" PRIu64 "/rounds/%" PRIu64 "?consumer=%ld",
		    r->task, r->round, r->consumer);
		sep = '&';
		break;
	default: return -1;
	}
	if (n < 0 || (size_t)n >= size)
		return -1;
	at = (size_t)n;
	if (r->kind == DW_ELEMENTS && r->has_max) {
		n = snprintf(out + at, size - at, "%cmax=%zu", sep, r->max);
		if (n < 0 || (size_t)n >= size - at)
			return -1;
		at += (size_t)n;
		sep = '&';
	}
	if (r->kind != DW_HEALTH && r->has_wait) {
		n = snprintf(out + at, size - at, "%cwait=%" PRId64, sep,
		    r->wait_ms);
		if (n < 0 || (size_t)n >= size - at)
			return -1;
	}
	return 0;
}

/* The value of name in query q into out; NULL if absent. One longer than
 * out holds is "?", which no number parses: not a shorter number. */
static const char *
arg(const char *q, const char *name, char *out, size_t size)
{
	size_t nl = strlen(name);

	while (q != NULL && *q != '\0') {
		size_t len = strcspn(q, "&");
		if (len > nl && strncmp(q, name, nl) == 0 && q[nl] == '=') {
			if (len - nl - 1 >= size)
				snprintf(out, size, "?");
			else
				snprintf(out, size, "%.*s", (int)(len - nl - 1),
				    q + nl + 1);
			return out;
		}
		q += len;
		if (*q == '&')
			q++;
	}
	return NULL;
}

/* A decimal number at *p (at least one digit) into *v; advances *p. */
static int
number(const char **p, uint64_t *v)
{
	char *end;

	if (**p < '0' || **p > '9')
		return -1;
	*v = strtoull(*p, &end, 10);
	*p = end;
	return 0;
}

int
dw_request_parse(const char *path, const char *query, struct dw_request *r)
{
	const char *p = path;
	char v[64];
	long n;

	memset(r, 0, sizeof(*r));
	r->consumer = -1;
	if (strcmp(p, "/healthz") == 0) {
		r->kind = DW_HEALTH;
		return DW_OK;
	}
	if (strncmp(p, "/v1/tasks/", 10) != 0)
		return DW_NO_SUCH;
	p += 10;
	if (number(&p, &r->task) < 0)
		return DW_NO_SUCH;
	if (strcmp(p, "/elements") == 0) {
		r->kind = DW_ELEMENTS;
	} else if (strncmp(p, "/rounds/", 8) == 0) {
		p += 8;
		if (number(&p, &r->round) < 0 || *p != '\0')
			return DW_NO_SUCH;
		r->kind = DW_ROUND;
		if (arg(query, "consumer", v, sizeof(v)) != NULL &&
		    parse_long(v, 0, LONG_MAX, &n) == 0)
			r->consumer = n;
	} else {
		return DW_NO_SUCH;
	}
	if (r->kind == DW_ELEMENTS && arg(query, "max", v, sizeof(v)) != NULL) {
		if (parse_size(v, &r->max) < 0)
			return DW_BAD_MAX;
		r->has_max = 1;
	}
	if (arg(query, "wait", v, sizeof(v)) != NULL) {
		if (parse_long(v, 0, LONG_MAX, &n) == 0)
			r->wait_ms = n;
		else if (duration_parse(v, &r->wait_ms) < 0 || r->wait_ms < 0)
			return DW_BAD_WAIT;
		r->has_wait = 1;
	}
	return DW_OK;
}
