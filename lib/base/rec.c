#include <stdlib.h>
#include <string.h>

#include "rec.h"

int
rec_u8(struct buf *b, uint8_t v)
{
	return buf_append(b, &v, 1);
}

int
rec_u32(struct buf *b, uint32_t v)
{
	unsigned char x[4];

	for (int i = 0; i < 4; i++)
		x[i] = (unsigned char)(v >> (8 * i));
	return buf_append(b, x, 4);
}

int
rec_u64(struct buf *b, uint64_t v)
{
	unsigned char x[8];

	for (int i = 0; i < 8; i++)
		x[i] = (unsigned char)(v >> (8 * i));
	return buf_append(b, x, 8);
}

int
rec_bytes(struct buf *b, const void *p, size_t n)
{
	if (n > UINT32_MAX)
		return -1;
	if (rec_u32(b, (uint32_t)n) < 0)
		return -1;
	return n > 0 ? buf_append(b, p, n) : 0;
}

int
rec_str(struct buf *b, const char *s)
{
	return rec_bytes(b, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
}

void
rec_reader_init(struct rec_reader *r, const void *p, size_t len)
{
	r->p = p;
	r->len = len;
	r->off = 0;
	r->bad = 0;
}

/* The next n bytes, or NULL (and r bad) when fewer are left. */
static const unsigned char *
take(struct rec_reader *r, size_t n)
{
	const unsigned char *q;

	if (r->bad || r->len - r->off < n) {
		r->bad = 1;
		return NULL;
	}
	q = r->p + r->off;
	r->off += n;
	return q;
}

uint8_t
rec_get_u8(struct rec_reader *r)
{
	const unsigned char *q = take(r, 1);

	return q != NULL ? q[0] : 0;
}

uint32_t
rec_get_u32(struct rec_reader *r)
{
	const unsigned char *q = take(r, 4);
	uint32_t v = 0;

	for (int i = 0; q != NULL && i < 4; i++)
		v |= (uint32_t)q[i] << (8 * i);
	return v;
}

uint64_t
rec_get_u64(struct rec_reader *r)
{
	const unsigned char *q = take(r, 8);
	uint64_t v = 0;

	for (int i = 0; q != NULL && i < 8; i++)
		v |= (uint64_t)q[i] << (8 * i);
	return v;
}

const void *
rec_get_bytes(struct rec_reader *r, size_t *n)
{
	size_t len = rec_get_u32(r);
	const unsigned char *q = take(r, len);

	*n = q != NULL ? len : 0;
	return q != NULL ? q : NULL;
}

char *
rec_get_str(struct rec_reader *r)
{
	size_t n;
	const char *q = rec_get_bytes(r, &n);
	char *s;

	if (q == NULL)
		return NULL;
	if ((s = malloc(n + 1)) == NULL) {
		r->bad = 1;
		return NULL;
	}
	memcpy(s, q, n);
	s[n] = '\0';
	return s;
}

int
rec_end(const struct rec_reader *r)
{
	return r->bad || r->off != r->len ? -1 : 0;
}
