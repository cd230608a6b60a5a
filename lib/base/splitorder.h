/*
 * splitorder.h: the order in which a job reads a dataset's splits in one
 * epoch, and the element framings. dispatchd (which leases splits) and
 * workerloop (which reads them in the static modes) must agree on both,
 * so they are computed here, once.
 *
 * Seed 0 reads the splits as listed; any other seed reads them in a
 * permutation of the seed and the epoch, the same on every machine, so a
 * job's position (a sequence number) names the same split after a
 * restart.
 */
#ifndef MUSTER_SPLITORDER_H
#define MUSTER_SPLITORDER_H

#include <stddef.h>
#include <stdint.h>

/* Fills order[0..n) with the split indices of epoch, in reading order. */
void split_order(uint64_t seed, uint64_t epoch, uint32_t *order, size_t n);

/* How a reader's stdout is cut into elements. */
enum framing {
	FRAME_LINES, /* each element ends with '\n' */
	FRAME_NUL,   /* each element ends with '\0' */
	FRAME_LEN32  /* a 4-byte big-endian length, then that many bytes */
};

/* "lines", "nul", "len32" -> 0 and *f; -1 for anything else. */
int framing_parse(const char *s, enum framing *f);
const char *framing_name(enum framing f);

#endif
