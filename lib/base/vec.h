/*
 * vec.h: room in a growable array of items.
 */
#ifndef MUSTER_VEC_H
#define MUSTER_VEC_H

#include <stddef.h>

/*
 * Makes room for need items of size bytes in the array at *(void **)pv,
 * of *cap items now, doubling (from 8): 0, or -1 when memory runs out or
 * the size would overflow (the array is left as it was).
 */
int vec_grow(void *pv, size_t *cap, size_t need, size_t size);

#endif
