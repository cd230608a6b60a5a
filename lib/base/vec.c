#include <stdint.h>
#include <stdlib.h>

#include "vec.h"

int
vec_grow(void *pv, size_t *cap, size_t need, size_t size)
{
	void **v = pv, *nv;
	size_t n = *cap > 0 ? *cap : 8;

	if (need <= *cap)
		return 0;
	while (n < need) {
		if (n > SIZE_MAX / 2)
			return -1;
		n *= 2;
	}
	if (size != 0 && n > SIZE_MAX / size)
		return -1;
	if ((nv = realloc(*v, n * size)) == NULL)
		return -1;
	*v = nv;
	*cap = n;
	return 0;
}
