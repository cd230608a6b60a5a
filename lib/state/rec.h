/*
 * rec.h: a compact binary codec for state records: unsigned integers as
 * LEB128 varints, signed ones zigzagged first, strings as a varint of
 * length + 1 (0: NULL) and their bytes. A reader that runs off its end or
 * meets a bad value sets err and reads zeros from then on, so a decoder
 * checks once, at the end, and never reads out of bounds.
 */
#ifndef MUSTER_REC_H
#define MUSTER_REC_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

struct rec_out {
	struct buf *b;
	int err; /* memory ran out */
};

void rec_put_u(struct rec_out *o, uint64_t v);
void rec_put_i(struct rec_out *o, int64_t v);
/* s may be NULL. */
void rec_put_s(struct rec_out *o, const char *s);
/* n bytes as a string, NULs too (p NULL: NULL). */
void rec_put_sn(struct rec_out *o, const void *p, size_t n);
void rec_put_bytes(struct rec_out *o, const void *p, size_t n);

struct rec_in {
	const unsigned char *p, *end;
	int err; /* truncated, or a bad value */
};

void rec_in_init(struct rec_in *in, const void *p, size_t len);
uint64_t rec_get_u(struct rec_in *in);
int64_t rec_get_i(struct rec_in *in);
/*
 * A string of at most max bytes with no NUL, in place (not terminated):
 * *n gets its length; NULL when it is NULL or on error.
 */
const char *rec_get_sv(struct rec_in *in, size_t max, size_t *n);
/* The same, copied; NULL when it is NULL, on error or out of memory. */
char *rec_get_s(struct rec_in *in, size_t max);
/* The same in place, but bytes of any kind (NULs too): rec_put_sn's. */
const void *rec_get_sn(struct rec_in *in, size_t max, size_t *n);
/* n raw bytes in place; NULL on error. */
const void *rec_get_bytes(struct rec_in *in, size_t n);
/*
 * Bytes of any kind (NULs too): a varint of their length and them.
 * rec_get_blob: in place, at most max of them; NULL on error (n = 0).
 */
void rec_put_blob(struct rec_out *o, const void *p, size_t n);
const void *rec_get_blob(struct rec_in *in, size_t max, size_t *n);
/* A tag: one byte that says what follows. rec_get_tag: -1 on error. */
void rec_put_tag(struct rec_out *o, unsigned char tag);
int rec_get_tag(struct rec_in *in);
/* Bytes left: a bound on how many items a count may announce. */
size_t rec_left(const struct rec_in *in);

#endif
