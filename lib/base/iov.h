/*
 * iov.h: what is left of an iovec array after a short write.
 */
#ifndef MUSTER_IOV_H
#define MUSTER_IOV_H

#include <stddef.h>
#include <sys/uio.h>

/*
 * Steps *iov past the done bytes a write took of its n buffers, the
 * first one left cut where the write stopped; returns how many remain.
 */
size_t iov_advance(struct iovec **iov, size_t n, size_t done);

#endif
