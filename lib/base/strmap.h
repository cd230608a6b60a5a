/*
 * strmap.h: a hash table from byte-string keys to pointers, with chaining.
 * Keys are copied in; values belong to the caller.
 */
#ifndef MUSTER_STRMAP_H
#define MUSTER_STRMAP_H

#include <stddef.h>

struct strmap;

struct strmap *strmap_new(void);
/* Calls free_value (if not NULL) on every value. */
void strmap_free(struct strmap *m, void (*free_value)(void *));

void *strmap_get(const struct strmap *m, const char *key, size_t klen);
/* Inserts or replaces; 0, or -1 on ENOMEM. */
int strmap_put(struct strmap *m, const char *key, size_t klen, void *value);
/* Removes key and returns its value, or NULL. */
void *strmap_del(struct strmap *m, const char *key, size_t klen);
size_t strmap_count(const struct strmap *m);

/* Calls fn for each entry, in no order; fn must not change the map. */
void strmap_each(const struct strmap *m,
    void (*fn)(const char *key, size_t klen, void *value, void *arg),
    void *arg);

#endif
