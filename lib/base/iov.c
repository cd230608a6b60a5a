/*
 * iov.c: stepping over what a short write took.
 */
#include "iov.h"

size_t
iov_advance(struct iovec **iov, size_t n, size_t done)
{
	struct iovec *v = *iov;

	while (n > 0 && done >= v->iov_len) {
		done -= v->iov_len;
		v++;
		n--;
	}
	if (n > 0) {
		v->iov_base = (char *)v->iov_base + done;
		v->iov_len -= done;
	}
	*iov = v;
	return n;
}
