/*
 * closureq_codec.c: reading the closure queue's bytes, every field checked
 * against the bytes left, and a closure's spec, which records and
 * snapshots hold alike; see closureq_int.h.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "closureq_int.h"
#include "errbuf.h"
#include "strmap.h"

void
cq_dec_init(struct dec *d, const void *p, size_t len, char *err, size_t errlen)
{
	d->start = p;
	d->err = err;
	d->errlen = errlen;
	d->misfit = 0;
	d->nomem = 0;
	rec_in_init(&d->in, p, len);
}

int
cq_dbad(struct dec *d, const char *fmt, ...)
{
	char m[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	errbuf_say(d->err, d->errlen, "at byte %zu: %s",
	    (size_t)(d->in.p - d->start), m);
	return -1;
}

/* Says why the reader failed, if it did. */
int
cq_dcheck(struct dec *d)
{
	if (!d->in.err)
		return 0;
	return cq_dbad(d, "%s",
	    d->in.p == d->in.end ? "cut short" : "a number too large");
}

int
cq_get_u(struct dec *d, uint64_t *v)
{
	*v = rec_get_u(&d->in);
	return cq_dcheck(d);
}

int
cq_get_max(struct dec *d, uint64_t *v, uint64_t max, const char *what)
{
	if (cq_get_u(d, v) < 0)
		return -1;
	if (*v > max)
		return cq_dbad(d, "%s %" PRIu64 " is out of range", what, *v);
	return 0;
}

int
cq_get_int(struct dec *d, int64_t *v, int64_t min, int64_t max,
    const char *what)
{
	*v = rec_get_i(&d->in);
	if (cq_dcheck(d) < 0)
		return -1;
	if (*v < min || *v > max)
		return cq_dbad(d, "%s %" PRId64 " is out of range", what, *v);
	return 0;
}

int
cq_get_long(struct dec *d, long *v, long min, long max, const char *what)
{
	int64_t x;

	if (cq_get_int(d, &x, min, max, what) < 0)
		return -1;
	*v = (long)x;
	return 0;
}

int
cq_get_ulong(struct dec *d, unsigned long *v)
{
	uint64_t x;

	if (cq_get_max(d, &x, ULONG_MAX, "a counter") < 0)
		return -1;
	*v = (unsigned long)x;
	return 0;
}

int
cq_get_flag(struct dec *d, int *v)
{
	uint64_t x;

	if (cq_get_max(d, &x, 1, "a flag") < 0)
		return -1;
	*v = (int)x;
	return 0;
}

int
cq_get_span(struct dec *d, struct sview *s, int kind, int need,
    const char *what)
{
	s->p = rec_get_sn(&d->in, SIZE_MAX, &s->n);
	if (d->in.err)
		return cq_dbad(d, "%s is cut short", what);
	s->set = s->p != NULL;
	if (!s->set) {
		if (need)
			return cq_dbad(d, "%s is missing", what);
		return 0;
	}
	if (kind != SPAN_BYTES && memchr(s->p, '\0', s->n) != NULL)
		return cq_dbad(d, "%s holds a NUL", what);
	if (kind == SPAN_NAME) {
		char nm[CQ_NAME_MAX + 1];
		if (s->n > CQ_NAME_MAX)
			return cq_dbad(d, "%s is too long", what);
		memcpy(nm, s->p, s->n);
		nm[s->n] = '\0';
		if (!cq_name_valid(nm))
			return cq_dbad(d, "%s is not a name", what);
	}
	return 0;
}

const char *
cq_sview_name(const struct sview *s, char nm[CQ_NAME_MAX + 1])
{
	memcpy(nm, s->p, s->n);
	nm[s->n] = '\0';
	return nm;
}

char *
cq_sview_dup(const struct sview *s, int *nomem)
{
	char *p;

	if (!s->set)
		return NULL;
	if ((p = malloc(s->n + 1)) == NULL) {
		*nomem = 1;
		return NULL;
	}
	memcpy(p, s->p, s->n);
	p[s->n] = '\0';
	return p;
}

int
cq_get_count(struct dec *d, uint64_t *n, uint64_t max, const char *what)
{
	if (cq_get_max(d, n, max, what) < 0)
		return -1;
	if (*n > rec_left(&d->in))
		return cq_dbad(d, "%s: more than there are bytes", what);
	return 0;
}

int
cq_dec_nomem(struct dec *d)
{
	d->nomem = 1;
	return cq_dbad(d, "out of memory");
}

void
cq_enc_spec(struct rec_out *e, const struct cq_closure *c, const char *queue)
{
	size_t n = 0;

	rec_put_s(e, queue);
	rec_put_sn(e, c->spec, c->speclen);
	rec_put_s(e, c->on);
	rec_put_s(e, c->key);
	while (c->needs != NULL && c->needs[n] != NULL)
		n++;
	rec_put_u(e, n);
	for (size_t i = 0; i < n; i++)
		rec_put_s(e, c->needs[i]);
	rec_put_u(e, c->nretry_exit);
	for (size_t i = 0; i < c->nretry_exit; i++)
		rec_put_i(e, c->retry_exit[i]);
	rec_put_i(e, c->max_retries);
}

int
cq_dec_spec(struct dec *d, struct jspec *x)
{
	struct sview s;
	uint64_t n;

	if (cq_get_span(d, &x->queue, SPAN_NAME, 1, "a closure's queue") < 0 ||
	    cq_get_span(d, &x->spec, SPAN_TEXT, 1, "a closure's spec") < 0 ||
	    cq_get_span(d, &x->on, SPAN_NAME, 0, "on") < 0 ||
	    cq_get_span(d, &x->key, SPAN_TEXT, 0, "a key") < 0 ||
	    cq_get_count(d, &x->nneeds, 64, "needs") < 0)
		return -1;
	x->needs = *d;
	for (uint64_t i = 0; i < x->nneeds; i++)
		if (cq_get_span(d, &s, SPAN_NAME, 1, "a need") < 0)
			return -1;
	if (cq_get_max(d, &n, CQ_MAX_RETRY_CODES, "retry codes") < 0)
		return -1;
	x->nretry = (size_t)n;
	for (size_t i = 0; i < x->nretry; i++) {
		int64_t v;
		if (cq_get_int(d, &v, 1, 255, "a retry code") < 0)
			return -1;
		x->retry[i] = (int)v;
	}
	return cq_get_long(d, &x->max_retries, 0, LONG_MAX, "max_retries");
}

struct cq_closure *
cq_spec_closure(struct cq *cq, const struct jspec *x, uint64_t id,
    struct dec *d)
{
	char nm[CQ_NAME_MAX + 1];
	struct cq_closure *c;
	struct dec needs = x->needs;
	int nomem = 0;

	if (cq_closure(cq, id) != NULL) {
		cq_dbad(d, "closure %" PRIu64 " exists", id);
		return NULL;
	}
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		cq_dec_nomem(d);
		return NULL;
	}
	c->id = id;
	c->state = CQ_CANCELLED; /* in no list */
	c->spec = cq_sview_dup(&x->spec, &nomem);
	c->speclen = x->spec.n;
	c->on = cq_sview_dup(&x->on, &nomem);
	c->key = cq_sview_dup(&x->key, &nomem);
	if (x->nneeds > 0 &&
	    (c->needs = calloc(x->nneeds + 1, sizeof(char *))) == NULL)
		nomem = 1;
	for (uint64_t i = 0; !nomem && c->needs != NULL && i < x->nneeds; i++) {
		struct sview s;
		cq_get_span(&needs, &s, SPAN_NAME, 1, "a need");
		c->needs[i] = cq_sview_dup(&s, &nomem);
	}
	memcpy(c->retry_exit, x->retry, sizeof(c->retry_exit));
	c->nretry_exit = x->nretry;
	c->max_retries = x->max_retries;
	/* The queue last: nothing is made for a closure that is not. */
	if (nomem ||
	    (c->q = cq_queue_get(cq, cq_sview_name(&x->queue, nm), 1)) ==
	        NULL) {
		cq_closure_free(cq, c);
		cq_dec_nomem(d);
		return NULL;
	}
	return c;
}
