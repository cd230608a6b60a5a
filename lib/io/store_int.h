/*
 * store_int.h: what the files of the store (store.h) share, for
 * lib/io/store*.c only. Three threads, each with its own etcd client: the
 * elector (reads the stream, campaigns, and once elected writes), the
 * keeper (keeps the lease alive, learns who leads, says where this
 * replica is) and the follower (watches the stream while standing by).
 * Lock order: the daemon's lock, then s->mu. Its files, lowest first:
 *
 *   store_follow.c  keys; the snapshot and the stream read from etcd and
 *                   applied; the follower; leaving (a restart asked for)
 *   store_lead.c    the elector: campaign, take over, write the stream
 *                   and snapshots in fenced transactions; the keeper
 *   store.c         the URL, and store.h's calls
 *
 * Each calls only files above it in the list.
 */
#ifndef MUSTER_STORE_INT_H
#define MUSTER_STORE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "etcd.h"
#include "etcd_election.h"
#include "status.h"
#include "store.h"

#define CHUNK (1u << 20)        /* the most bytes of stream in one key */
#define MAX_DEFAULT (16u << 20) /* of stream past the snapshot */
#define HDR 8                   /* a record's length and CRC */
#define PAGE 8                  /* keys read at once */
#define KEY_MAX 1024

/* Where a record appended ends in the stream, and its number. */
struct rec_end {
	uint64_t off, seq;
};

struct store {
	struct store_config c;
	struct store_hooks h;
	char *prefix;
	struct etcd *ew; /* the elector's */
	struct etcd *ek; /* the keeper's */
	struct etcd *ef; /* the follower's */
	struct etcd *es; /* store_status's, under smu */
	pthread_mutex_t smu;
	int stop[2];  /* readable: every thread stops */
	int fstop[2]; /* readable: the follower stops */
	pthread_t elector, keeper, follower;
	int follower_on;
	int64_t ttl_ms;
	size_t max_bytes;

	/* What is applied: the elector's and follower's, under the daemon's
	 * lock. */
	uint64_t applied;  /* the stream's offset past the last record */
	uint64_t next_seq; /* the next record's number */
	struct buf tail;   /* bytes past applied, a record not yet whole */
	int64_t rev;       /* etcd's revision applied up to */
	atomic_int loaded; /* read once: following */

	pthread_mutex_t mu;
	pthread_cond_t cv;
	atomic_int leading;
	atomic_int deposed;
	atomic_int restarting;
	int closing;
	int writer_idle;
	char address[300];
	char leader[300];      /* the leader's address, as last seen */
	int64_t since;         /* wall ms: leading since */
	atomic_llong lease;    /* this replica's; 0: none yet */
	atomic_llong lease_ok; /* monotonic ms: a keepalive sent then held */
	struct etcd_leader lead;
	/* The leader's stream: pend holds what is not in etcd yet, from
	 * pend_off on; ends, from ends_head, where each record ends. */
	struct buf pend;
	uint64_t pend_off;
	struct rec_end *ends;
	size_t nends, capends, ends_head;
	_Atomic uint64_t last; /* the newest record appended */
	uint64_t snap_off;     /* where etcd's snapshot stands */
	int failing;
	char why[256];
	/* A snapshot taken, to store once the stream up to snapq_off is. */
	struct buf snapq;
	uint64_t snapq_off, snapq_seq;
	int snap_queued;
};

/* store_follow.c */

/* PREFIX/ then fmt's text, into out (KEY_MAX bytes): its length. */
int store_key(const struct store *s, char *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/*
 * Reads the stream's keys from s->applied on with e (what the tail held is
 * read again) and applies them: ST_OK, or why not. rev: 0 to read now
 * (then the revision read at), or the revision to read as of.
 */
enum status store_catch_up(struct store *s, struct etcd *e, int64_t *rev);
/* Reads the snapshot and the stream after it with the elector's client,
 * and applies them as of one revision (s->rev): ST_OK, or why not. */
enum status store_load(struct store *s);
/* Once: this replica must start again as a standby (why says why). */
void store_restart(struct store *s, const char *why);
/* Whether the lease is surely alive (see store_follow.c). */
int store_lease_fresh(struct store *s);
/* Waits ms, or less when s stops: 1 if it stopped. */
int store_pause(struct store *s, int64_t ms);
/* The follower's thread: watches the stream and applies it. */
void *store_follow(void *arg);
/* Stops the follower, if it runs, and waits for it. */
void store_follower_stop(struct store *s);

/* store_lead.c */

/* The elector's thread: reads the state, campaigns, takes over, writes. */
void *store_elect(void *arg);
/* The keeper's thread: the lease, the leader's name, this replica's place. */
void *store_keep(void *arg);

#endif
