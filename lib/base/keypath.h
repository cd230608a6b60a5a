/*
 * keypath.h: the slash rules of key-value keys, shared by the store and the
 * programs that show keys: "//a///b/" is "a/b", as upstream normalises.
 */
#ifndef MUSTER_KEYPATH_H
#define MUSTER_KEYPATH_H

#include <stddef.h>

#include "buf.h"

/*
 * Keys under this prefix belong to one run of the job (an epoch): coordd
 * removes them when no task is connected any more. preemptwatch keeps the
 * preemption protocol's keys there, and gives each run's command a prefix
 * of its own under it (MUSTER_RUN_PREFIX) for rendezvous keys.
 */
#define KEYPATH_RUN "muster"

/* Collapses and trims slashes of raw into out. 0, or -1 on ENOMEM. */
int keypath_normalize(const char *raw, size_t n, struct buf *out);

/* 1 when key is prefix itself or lies under prefix/ ("" matches all). */
int keypath_under(const char *prefix, size_t plen, const char *key,
    size_t klen);

#endif
