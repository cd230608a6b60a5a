/*
 * skiplist.h: byte-string keys kept in order, the shape of redis's sorted
 * sets. A hash map finds a key; this answers "the keys from here on": a
 * page of a directory listing, or every key under a prefix, in time for
 * the keys returned rather than for the whole store.
 *
 * Keys are the caller's: a node points at the bytes given to skl_insert,
 * which must stay put until the node is deleted. Order is memcmp order,
 * a shorter key before a longer one it begins.
 */
#ifndef MUSTER_SKIPLIST_H
#define MUSTER_SKIPLIST_H

#include <stddef.h>

struct skiplist;

struct skl_node {
	const char *key;
	size_t klen;
	void *value;
	/* followed by the forward links */
};

struct skiplist *skl_new(void);
void skl_free(struct skiplist *sl);
size_t skl_count(const struct skiplist *sl);

/* Adds key, which must not be there yet. 0, or -1 on ENOMEM. */
int skl_insert(struct skiplist *sl, const char *key, size_t klen, void *value);
/* Removes key; returns its value, or NULL when it was not there. */
void *skl_delete(struct skiplist *sl, const char *key, size_t klen);

/* The first node whose key is not below key (NULL: none). */
struct skl_node *skl_seek(const struct skiplist *sl, const char *key,
    size_t klen);
/* The node after n, or NULL. */
struct skl_node *skl_next(const struct skl_node *n);

/* memcmp order of two byte strings. */
int skl_compare(const char *a, size_t alen, const char *b, size_t blen);

#endif
