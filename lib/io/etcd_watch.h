/*
 * etcd_watch.h: etcd's watch: every change of a key, or of the keys under
 * a prefix, from a revision on, in the order etcd made them, over one
 * streaming POST /v3/watch. A stream that breaks (its member killed or
 * cut off, or silent too long) is taken up on the next member from the
 * last change delivered, so that no change is lost or delivered twice,
 * even one of several a transaction made at one revision.
 */
#ifndef MUSTER_ETCD_WATCH_H
#define MUSTER_ETCD_WATCH_H

#include <stddef.h>
#include <stdint.h>

#include "etcd.h"
#include "etcd_kv.h"

/* The largest message of a watch's stream taken, unless set. */
#define ETCD_WATCH_MAX_MSG (8u << 20)

enum etcd_event_kind {
	ETCD_EV_PUT,
	ETCD_EV_DELETE,
	/* Every change up to revision has been delivered. */
	ETCD_EV_PROGRESS,
	/*
	 * The changes from the revision asked for are gone (compacted):
	 * revision is the oldest left. The watch then ends.
	 */
	ETCD_EV_COMPACTED,
};

struct etcd_event {
	enum etcd_event_kind kind;
	/* A put's key and value; a delete's key (its value is empty). */
	const struct etcd_kv *kv;
	/* A change's (kv's mod_revision), or as the kinds above say. */
	int64_t revision;
};

/* 0 to go on; non-zero ends the watch (ST_OK). */
typedef int (*etcd_watch_fn)(void *arg, const struct etcd_event *ev);

struct etcd_watch_opts {
	const void *key;
	size_t key_len;
	int prefix;         /* every key that starts with key */
	int64_t start;      /* the first revision; 0: changes from now */
	int progress;       /* ask etcd for ETCD_EV_PROGRESS while quiet */
	int64_t silence_ms; /* a stream quiet this long is broken; 0: never */
	size_t max_msg;     /* 0: ETCD_WATCH_MAX_MSG */
	etcd_watch_fn fn;
	void *arg;
};

/*
 * Watches until fn ends it (ST_OK), deadline (ST_DEADLINE_EXCEEDED), the
 * cancel fd (ST_CANCELLED), a compacted start (ST_FAILED_PRECONDITION,
 * after ETCD_EV_COMPACTED), or no member took the stream up for the
 * client's retry_ms (ST_UNAVAILABLE).
 *
 * etcd tells of progress at its --experimental-watch-progress-notify-
 * interval (10 minutes unless set): with a shorter silence_ms, a quiet
 * watch is taken for a broken one and started again (nothing is lost).
 */
enum status etcd_watch(struct etcd *e, const struct etcd_watch_opts *w,
    int64_t deadline);

#endif
