/*
 * keypath.h: the slash rules of key-value keys, shared by the store and the
 * programs that show keys: "//a///b/" is "a/b", as upstream normalises.
 */
#ifndef MUSTER_KEYPATH_H
#define MUSTER_KEYPATH_H

#include <stddef.h>

#include "buf.h"

/* Collapses and trims slashes of raw into out. 0, or -1 on ENOMEM. */
int keypath_normalize(const char *raw, size_t n, struct buf *out);

/* 1 when key is prefix itself or lies under prefix/ ("" matches all). */
int keypath_under(const char *prefix, size_t plen, const char *key,
    size_t klen);

#endif
