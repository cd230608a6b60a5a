/*
 * rec.h: the binary fields of journal records and snapshots: integers
 * little-endian, byte strings as a u32 length and the bytes. A reader
 * checks every field against what is left, and once one does not fit it
 * stays failed, so that a decoder reads on and checks once at the end.
 */
#ifndef MUSTER_REC_H
#define MUSTER_REC_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* Each 0, or -1 on ENOMEM. */
int rec_u8(struct buf *b, uint8_t v);
int rec_u32(struct buf *b, uint32_t v);
int rec_u64(struct buf *b, uint64_t v);
int rec_bytes(struct buf *b, const void *p, size_t n);
int rec_str(struct buf *b, const char *s); /* NULL: as "" */

struct rec_reader {
	const unsigned char *p;
	size_t len, off;
	int bad; /* a field did not fit */
};

void rec_reader_init(struct rec_reader *r, const void *p, size_t len);
uint8_t rec_get_u8(struct rec_reader *r);
uint32_t rec_get_u32(struct rec_reader *r);
uint64_t rec_get_u64(struct rec_reader *r);
/* The bytes in place (not NUL-terminated); NULL when they do not fit. */
const void *rec_get_bytes(struct rec_reader *r, size_t *n);
/* A copy, NUL-terminated; NULL when it does not fit or memory is out
 * (r->bad set either way). */
char *rec_get_str(struct rec_reader *r);
/* 0 when every field fitted and nothing is left over; else -1. */
int rec_end(const struct rec_reader *r);

#endif
