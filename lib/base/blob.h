/*
 * blob.h: immutable bytes shared by reference count. A value is copied
 * once, when it arrives, and from then on the store, its history and every
 * reply that carries it hold the same bytes.
 */
#ifndef MUSTER_BLOB_H
#define MUSTER_BLOB_H

#include <stdatomic.h>
#include <stddef.h>

struct blob {
	atomic_uint refs;
	size_t len;
	char data[]; /* len bytes and a NUL */
};

/* A copy of p with one reference; NULL on ENOMEM. */
struct blob *blob_new(const void *p, size_t len);
struct blob *blob_ref(struct blob *b);
void blob_unref(struct blob *b);

#endif
