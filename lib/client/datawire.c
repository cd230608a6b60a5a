/*
 * datawire.c: the data path's request line and chunk headers, written
 * by a consumer (client/dataread_source.c, dataread_rr.c) or a worker's
 * data server (client/dataserve_server.c) and read by the other: see
 * datawire.h.
 */
#include <endian.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datawire.h"
#include "duration.h"
#include "parse.h"

/* Appends what fmt makes to out at *at: 0, or -1 when it does not fit. */
static int
add(char *out, size_t size, size_t *at, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(out + *at, size - *at, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= size - *at)
		return -1;
	*at += (size_t)n;
	return 0;
}

int
dw_request_path(const struct dw_request *r, char *out, size_t size)
{
	size_t at = 0;
	char sep = '?';
	int bad;

	switch (r->kind) {
	case DW_HEALTH: return add(out, size, &at, "/healthz");
	case DW_ELEMENTS:
		bad = add(out, size, &at, "/v1/tasks/%" PRIu64 "/elements",
		    r->task);
		break;
	case DW_GIVEBACK:
		bad = add(out, size, &at, "/v1/tasks/%" PRIu64 "/giveback",
		    r->task);
		break;
	case DW_ROUND:
		bad = add(out, size, &at,
		    "/v1/tasks/%" PRIu64 "/rounds/%" PRIu64 "?consumer=%ld",
		    r->task, r->round, r->consumer);
		sep = '&';
		break;
	default: return -1;
	}
	if (!bad && r->kind == DW_ELEMENTS && r->has_max) {
		bad = add(out, size, &at, "%cmax=%zu", sep, r->max);
		sep = '&';
	}
	if (!bad && r->kind != DW_GIVEBACK && r->has_wait) {
		bad = add(out, size, &at, "%cwait=%" PRId64, sep, r->wait_ms);
		sep = '&';
	}
	if (!bad && r->kind != DW_ROUND && r->has_id)
		bad = add(out, size, &at, "%cconsumer_id=%s&request=%" PRIu64,
		    sep, r->consumer_id, r->request);
	return bad ? -1 : 0;
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

/* Whether id is a consumer's: 1 to DW_CONSUMER_ID_MAX letters, digits,
 * '-' or '_'. */
static int
id_valid(const char *id)
{
	size_t n = strlen(id);

	return n >= 1 && n <= DW_CONSUMER_ID_MAX &&
	    strspn(id,
	        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	        "0123456789-_") == n;
}

/* consumer_id= and request= of query q into r: both, or neither. */
static int
consumer_of(const char *q, struct dw_request *r)
{
	char id[DW_CONSUMER_ID_MAX + 2], v[64];
	const char *has_id = arg(q, "consumer_id", id, sizeof(id));
	const char *has_n = arg(q, "request", v, sizeof(v));
	long n;

	if (has_id == NULL && has_n == NULL)
		return DW_OK;
	if (has_id == NULL || has_n == NULL || !id_valid(id) ||
	    parse_long(v, 1, LONG_MAX, &n) < 0)
		return DW_BAD_ID;
	memcpy(r->consumer_id, id, strlen(id) + 1);
	r->request = (uint64_t)n;
	r->has_id = 1;
	return DW_OK;
}

int
dw_request_parse(const char *path, const char *query, struct dw_request *r)
{
	const char *p = path;
	char v[64];
	long n;
	int rc;

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
	} else if (strcmp(p, "/giveback") == 0) {
		r->kind = DW_GIVEBACK;
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
	if (r->kind != DW_GIVEBACK &&
	    arg(query, "wait", v, sizeof(v)) != NULL) {
		if (parse_long(v, 0, LONG_MAX, &n) == 0)
			r->wait_ms = n;
		else if (duration_parse(v, &r->wait_ms) < 0 || r->wait_ms < 0)
			return DW_BAD_WAIT;
		r->has_wait = 1;
	}
	if (r->kind != DW_ROUND && (rc = consumer_of(query, r)) != DW_OK)
		return rc;
	if (r->kind == DW_GIVEBACK && !r->has_id)
		return DW_BAD_ID;
	return DW_OK;
}

void
dw_chunk_put(const struct chunk_hdr *h, struct chunk_hdr *out)
{
	out->magic = htole32(h->magic);
	out->type = htole32(h->type);
	out->seq = htole64(h->seq);
	out->first = htole64(h->first);
	out->count = htole32(h->count);
	out->len = htole32(h->len);
	out->flags = htole32(h->flags);
	out->pad = 0;
}

int
dw_chunk_head(const char *wire, size_t rest, struct chunk_hdr *h)
{
	memcpy(h, wire, sizeof(*h));
	h->magic = le32toh(h->magic);
	h->type = le32toh(h->type);
	h->seq = le64toh(h->seq);
	h->first = le64toh(h->first);
	h->count = le32toh(h->count);
	h->len = le32toh(h->len);
	h->flags = le32toh(h->flags);
	if (h->magic != CHUNK_MAGIC || h->len > rest || h->type < CHUNK_DATA ||
	    h->type > CHUNK_ERROR)
		return -1;
	return 0;
}

int
dw_chunk_next(const char *body, size_t len, size_t *off, struct chunk_hdr *h,
    const char **payload)
{
	if (*off == len)
		return 0;
	if (len - *off < sizeof(*h) ||
	    dw_chunk_head(body + *off, len - *off - sizeof(*h), h) < 0)
		return -1;
	*payload = body + *off + sizeof(*h);
	*off += sizeof(*h) + h->len;
	return 1;
}
