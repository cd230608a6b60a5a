/*
 * etcd_election.h: etcd's election API (/v3/election/...). Each candidate
 * campaigns on a lease it keeps alive (etcd_lease.h); etcd puts a key of
 * its own under the election's name, and the candidate whose key is the
 * oldest leads. Leadership ends when the leader resigns or its lease ends,
 * and passes to the next candidate waiting.
 *
 * A leader's key is its fence: a write made only while it leads is a
 * transaction that compares the key's create revision with the one its
 * campaign returned (etcd_leader_cmp). Once the key is gone (the lease
 * expired while the leader was stopped, say), the compare fails and the
 * write is not made, whatever the deposed leader believes.
 */
#ifndef MUSTER_ETCD_ELECTION_H
#define MUSTER_ETCD_ELECTION_H

#include <stddef.h>
#include <stdint.h>

#include "etcd.h"
#include "etcd_kv.h"

/* What holds a leadership; name and key are NUL-terminated too. */
struct etcd_leader {
	char *name; /* the election's */
	size_t name_len;
	char *key; /* the leader's key, under name */
	size_t key_len;
	int64_t rev;   /* the key's create revision */
	int64_t lease; /* the lease it is on */
};

void etcd_leader_free(struct etcd_leader *l);

/*
 * Campaigns in election name on lease with value, and waits, until
 * deadline or the cancel fd, to be elected: then out holds the
 * leadership. The wait goes on on another member when the one it is on
 * fails: with the same lease, a campaign sent again is the same
 * candidacy. A campaign that gives up (deadline, cancel) withdraws.
 */
enum status etcd_campaign(struct etcd *e, const void *name, size_t name_len,
    int64_t lease, const void *value, size_t value_len, int64_t deadline,
    struct etcd_leader *out);
/* The leader's key and value now; ST_NOT_FOUND when there is none. */
enum status etcd_leader(struct etcd *e, const void *name, size_t name_len,
    int64_t deadline, struct etcd_kv *out);
/* A new value for l's leadership; ST_FAILED_PRECONDITION if it ended. */
enum status etcd_proclaim(struct etcd *e, const struct etcd_leader *l,
    const void *value, size_t value_len, int64_t deadline);
/* Gives up l's leadership, to the next candidate. */
enum status etcd_resign(struct etcd *e, const struct etcd_leader *l,
    int64_t deadline);

/*
 * Hands fn the leader's key and value now, if any, and each new leader or
 * value after, until fn returns non-zero (ST_OK), deadline or the cancel
 * fd. A stream broken takes up again on another member, with the leader
 * as it is then (which fn may see twice).
 */
typedef int (*etcd_observe_fn)(void *arg, const struct etcd_kv *kv);
enum status etcd_observe(struct etcd *e, const void *name, size_t name_len,
    int64_t deadline, etcd_observe_fn fn, void *arg);

/* The compare that holds while l leads: its key's create revision. */
void etcd_leader_cmp(const struct etcd_leader *l, struct etcd_cmp *c);

#endif
