/*
 * rec.c: the state records' binary codec.
 */
#include <stdlib.h>
#include <string.h>

#include "rec.h"

void
rec_put_u(struct rec_out *o, uint64_t v)
{
	unsigned char b[10];
	size_t n = 0;

	do {
		b[n] = (unsigned char)(v & 0x7f);
		v >>= 7;
		if (v != 0)
			b[n] |= 0x80;
		n++;
	} while (v != 0);
	rec_put_bytes(o, b, n);
}

void
rec_put_i(struct rec_out *o, int64_t v)
{
	rec_put_u(o, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

void
rec_put_s(struct rec_out *o, const char *s)
{
	rec_put_sn(o, s, s != NULL ? strlen(s) : 0);
}

void
rec_put_sn(struct rec_out *o, const void *p, size_t n)
{
	rec_put_u(o, p != NULL ? (uint64_t)n + 1 : 0);
	if (p != NULL)
		rec_put_bytes(o, p, n);
}

void
rec_put_bytes(struct rec_out *o, const void *p, size_t n)
{
	if (n > 0 && buf_append(o->b, p, n) < 0)
		o->err = 1;
}

void
rec_in_init(struct rec_in *in, const void *p, size_t len)
{
	in->p = p;
	in->end = in->p + len;
	in->err = 0;
}

size_t
rec_left(const struct rec_in *in)
{
	return in->err ? 0 : (size_t)(in->end - in->p);
}

uint64_t
rec_get_u(struct rec_in *in)
{
	uint64_t v = 0;

	for (int shift = 0; !in->err; shift += 7) {
		unsigned char c;
		if (in->p == in->end || shift > 63) {
			in->err = 1;
			break;
		}
		c = *in->p++;
		if (shift == 63 && (c & 0x7e) != 0) {
			in->err = 1;
			break;
		}
		v |= (uint64_t)(c & 0x7f) << shift;
		if ((c & 0x80) == 0)
			return v;
	}
	return 0;
}

int64_t
rec_get_i(struct rec_in *in)
{
	uint64_t v = rec_get_u(in);

	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

const void *
rec_get_bytes(struct rec_in *in, size_t n)
{
	const unsigned char *p = in->p;

	if (in->err || (size_t)(in->end - in->p) < n) {
		in->err = 1;
		return NULL;
	}
	in->p += n;
	return p;
}

/* len bytes in place, at most max of them; NULL on error (n = 0). */
static const void *
get_run(struct rec_in *in, uint64_t len, size_t max, size_t *n)
{
	const void *p;

	*n = 0;
	if (in->err || len > max) {
		in->err = 1;
		return NULL;
	}
	if ((p = rec_get_bytes(in, (size_t)len)) != NULL)
		*n = (size_t)len;
	return p;
}

const void *
rec_get_sn(struct rec_in *in, size_t max, size_t *n)
{
	uint64_t v = rec_get_u(in);

	if (v == 0) {
		*n = 0;
		return NULL;
	}
	return get_run(in, v - 1, max, n);
}

const char *
rec_get_sv(struct rec_in *in, size_t max, size_t *n)
{
	const char *s = rec_get_sn(in, max, n);

	if (s != NULL && memchr(s, '\0', *n) != NULL) {
		in->err = 1;
		*n = 0;
		return NULL;
	}
	return s;
}

char *
rec_get_s(struct rec_in *in, size_t max)
{
	size_t n;
	const char *s = rec_get_sv(in, max, &n);
	char *c;

	if (s == NULL)
		return NULL;
	if ((c = malloc(n + 1)) == NULL) {
		in->err = 1;
		return NULL;
	}
	memcpy(c, s, n);
	c[n] = '\0';
	return c;
}

void
rec_put_blob(struct rec_out *o, const void *p, size_t n)
{
	rec_put_u(o, n);
	rec_put_bytes(o, p, n);
}

const void *
rec_get_blob(struct rec_in *in, size_t max, size_t *n)
{
	uint64_t len = rec_get_u(in);

	return get_run(in, len, max, n);
}

void
rec_put_tag(struct rec_out *o, unsigned char tag)
{
	rec_put_bytes(o, &tag, 1);
}

int
rec_get_tag(struct rec_in *in)
{
	const unsigned char *p = rec_get_bytes(in, 1);

	return p != NULL ? *p : -1;
}
