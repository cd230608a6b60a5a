/*
 * kvstore.h: the key-value store behind coordd, with no network in it.
 *
 * Keys are UTF-8 paths, normalised as upstream does ("//a///b/" is "a/b");
 * values are bytes. Every change gets the next store-wide revision, is kept
 * in a bounded history for watchers, and is handed to an observer so that
 * the daemon can wake whoever waits for it. Not thread-safe: the caller holds
 * one lock around every call.
 */
#ifndef MUSTER_KVSTORE_H
#define MUSTER_KVSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "blob.h"
#include "buf.h"
#include "status.h"

/*
 * Keys travel percent-encoded in the request line, which must fit in a
 * connection's 8 KiB: 2048 bytes of any text, tripled, still do.
 */
#define KV_MAX_KEY_DEFAULT 2048
#define KV_MAX_VALUE_DEFAULT (16u << 20)
#define KV_HISTORY_EVENTS 100000
#define KV_HISTORY_BYTES (64u << 20)
/* What one store may hold, as etcd's quota bounds its backend. */
#define KV_MAX_KEYS_DEFAULT 1000000
#define KV_MAX_BYTES_DEFAULT ((size_t)1 << 30)

struct kv_entry {
	char *key;
	size_t klen;
	struct blob *val;  /* the value, shared with history and replies */
	const char *value; /* val's bytes */
	size_t vlen;
	int64_t create_rev;
	int64_t mod_rev;
};

enum kv_event_type { KV_EV_PUT, KV_EV_UPDATE, KV_EV_DELETE };

struct kv_event {
	int64_t rev;
	enum kv_event_type type;
	char *key;
	size_t klen;
	struct blob *val;  /* NULL for a delete */
	const char *value; /* val's bytes */
	size_t vlen;
};

enum kv_mode { KV_INSERT, KV_OVERWRITE, KV_UPDATE };

struct kv_limits {
	size_t max_key;
	size_t max_value;
	size_t history_events;
	size_t history_bytes;
	size_t max_keys;  /* keys held (0: the default) */
	size_t max_bytes; /* bytes of keys and values held */
};

struct kvstore;

typedef void (*kv_observer_fn)(const struct kv_event *ev, void *arg);

struct kvstore *kv_new(const struct kv_limits *lim, kv_observer_fn fn,
    void *arg);
void kv_free(struct kvstore *kv);

const char *kv_event_name(enum kv_event_type t);

/*
 * Checks and normalises a key given as bytes: UTF-8 without NUL, slashes
 * collapsed and trimmed, within the key limit. An empty result is an error
 * unless allow_empty (a prefix meaning "everything").
 */
enum status kv_key(const struct kvstore *kv, const char *raw, size_t n,
    int allow_empty, struct buf *out, char *err, size_t errlen);

int64_t kv_revision(const struct kvstore *kv);
/*
 * Starts an empty store's revisions after rev instead of 0, so that they
 * do not repeat those of a store before it (a daemon that restarted).
 */
void kv_set_origin(struct kvstore *kv, int64_t rev);
int64_t kv_origin(const struct kvstore *kv);
size_t kv_count(const struct kvstore *kv);
size_t kv_bytes(const struct kvstore *kv);
/* Changes refused because the store was at its keys or bytes limit. */
unsigned long kv_refused(const struct kvstore *kv);
const struct kv_limits *kv_limits(const struct kvstore *kv);

const struct kv_entry *kv_get(const struct kvstore *kv, const char *key,
    size_t klen);

/* Stores val (the store takes its own reference). */
enum status kv_put_blob(struct kvstore *kv, const char *key, size_t klen,
    struct blob *val, enum kv_mode mode, int64_t *rev, char *err,
    size_t errlen);
/* The same with a copy of val's bytes. */
enum status kv_put(struct kvstore *kv, const char *key, size_t klen,
    const void *val, size_t vlen, enum kv_mode mode, int64_t *rev, char *err,
    size_t errlen);

/* Adds delta to the decimal integer at key (absent counts as 0). */
enum status kv_add(struct kvstore *kv, const char *key, size_t klen,
    int64_t delta, int64_t *result, int64_t *rev, char *err, size_t errlen);

/*
 * Sets key to val only if it now holds expect (or, with absent, does not
 * exist). On a mismatch returns ST_FAILED_PRECONDITION and points *cur at the
 * current entry (NULL when absent).
 */
enum status kv_cas_blob(struct kvstore *kv, const char *key, size_t klen,
    const void *expect, size_t elen, int absent, struct blob *val, int64_t *rev,
    const struct kv_entry **cur, char *err, size_t errlen);
enum status kv_cas(struct kvstore *kv, const char *key, size_t klen,
    const void *expect, size_t elen, int absent, const void *val, size_t vlen,
    int64_t *rev, const struct kv_entry **cur, char *err, size_t errlen);

/* Deletes key and every key under key/; returns how many went. */
size_t kv_delete(struct kvstore *kv, const char *key, size_t klen,
    int64_t *rev);

/* A page of a listing: entries after key after, up to a count and bytes
 * of values (0: no limit; a page holds one entry at least). */
struct kv_dir_page {
	const char *after; /* NULL: from the first */
	size_t alen;
	size_t max_entries;
	size_t max_bytes;
};

/*
 * The entries under prefix/ (all entries for an empty prefix), sorted by
 * key, in a malloc'd array the caller frees: all of them, or the page
 * asked for, with *more set when entries follow it. Returns the count,
 * or (size_t)-1 on ENOMEM. Takes time for the entries returned, not for
 * the store.
 */
size_t kv_dir(const struct kvstore *kv, const char *prefix, size_t plen,
    const struct kv_dir_page *page, const struct kv_entry ***out, int *more);

/* 1 when key is prefix itself or lies under prefix/ ("" matches all). */
int kv_matches(const char *prefix, size_t plen, const char *key, size_t klen);

/*
 * Calls fn for every kept change after revision since to a key matching
 * prefix, oldest first, until fn returns nonzero. ST_FAILED_PRECONDITION
 * when changes after since have already been dropped from the history.
 */
enum status kv_changes(const struct kvstore *kv, const char *prefix,
    size_t plen, int64_t since, int (*fn)(const struct kv_event *ev, void *arg),
    void *arg, char *err, size_t errlen);

/*
 * The journal's side. fn hears each change as it is made, before any
 * observer: a put of val at key, or (val NULL) the delete of key and all
 * below it, at revision rev. Replaying those in order on the state they
 * were made on makes the same state.
 */
struct rec_in;
typedef void (*kv_journal_fn)(int64_t rev, const char *key, size_t klen,
    struct blob *val, void *arg);
void kv_set_journal(struct kvstore *kv, kv_journal_fn fn, void *arg);

/*
 * Makes a journaled change again, limits aside: 0, or -1 with err filled
 * when it does not follow from the state (a revision not after the
 * current one, a delete of nothing).
 */
int kv_replay(struct kvstore *kv, int64_t rev, const char *key, size_t klen,
    struct blob *val, char *err, size_t errlen);

/*
 * The whole store, its revisions and its history of changes (for watches
 * that resume), appended to out; kv_restore reads it back into an empty
 * store. 0, or -1 (out of memory; for kv_restore also damaged data, err
 * filled).
 */
int kv_snapshot(const struct kvstore *kv, struct buf *out);
int kv_restore(struct kvstore *kv, struct rec_in *r, char *err, size_t errlen);

#endif
