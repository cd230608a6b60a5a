#include <stdlib.h>
#include <string.h>

#include "blob.h"

struct blob *
blob_new(const void *p, size_t len)
{
	struct blob *b = malloc(sizeof(*b) + len + 1);

	if (b == NULL)
		return NULL;
	atomic_init(&b->refs, 1);
	b->len = len;
	if (len > 0)
		memcpy(b->data, p, len);
	b->data[len] = '\0';
	return b;
}

struct blob *
blob_ref(struct blob *b)
{
	if (b != NULL)
		atomic_fetch_add(&b->refs, 1);
	return b;
}

void
blob_unref(struct blob *b)
{
	if (b != NULL && atomic_fetch_sub(&b->refs, 1) == 1)
		free(b);
}
