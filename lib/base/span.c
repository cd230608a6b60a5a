#include <string.h>

#include "span.h"
#include "vec.h"

int
span_add(struct span **v, size_t *n, size_t *cap, uint64_t a, uint64_t b)
{
	struct span *r = *v;
	size_t i, k;

	if (a >= b)
		return 0;
	/* The common case: it continues the last span. */
	if (*n > 0 && r[*n - 1].b == a) {
		r[*n - 1].b = b;
		return 0;
	}
	for (i = 0; i < *n && r[i].b < a; i++)
		;
	/* Spans i .. k-1 touch [a, b): they become one. */
	for (k = i; k < *n && r[k].a <= b; k++) {
		if (r[k].a < a)
			a = r[k].a;
		if (r[k].b > b)
			b = r[k].b;
	}
	if (k == i) {
		if (vec_grow(v, cap, *n + 1, sizeof(**v)) < 0)
			return -1;
		r = *v;
		memmove(r + i + 1, r + i, (*n - i) * sizeof(*r));
		(*n)++;
	} else {
		memmove(r + i + 1, r + k, (*n - k) * sizeof(*r));
		*n -= k - i - 1;
	}
	r[i] = (struct span){a, b};
	return 0;
}

int
span_whole(const struct span *v, size_t n, int64_t total)
{
	return total == 0 ||
	    (total > 0 && n == 1 && v[0].a == 0 && v[0].b >= (uint64_t)total);
}
