/*
 * span.h: what of a split was delivered, as sorted, disjoint, non-empty
 * ranges [a, b) of its element numbers. dispatchd's leases and a
 * consumer's positions keep the same arithmetic.
 */
#ifndef MUSTER_SPAN_H
#define MUSTER_SPAN_H

#include <stddef.h>
#include <stdint.h>

struct span {
	uint64_t a, b; /* [a, b) */
};

/*
 * Adds [a, b) to the n spans at *v (room for *cap), merging those it
 * touches: 0, or -1 when memory runs out (the spans are as they were).
 */
int span_add(struct span **v, size_t *n, size_t *cap, uint64_t a, uint64_t b);

/* Whether the spans cover [0, total): never while total is -1 (not known
 * yet), always when it is 0. */
int span_whole(const struct span *v, size_t n, int64_t total);

#endif
