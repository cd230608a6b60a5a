/*
 * store.h: a daemon's records in etcd, with one replica leading and the
 * others standing by (coordd and dispatchd --store etcd://...).
 *
 * The records are those a state directory's journal holds (journal.h),
 * framed the same way (u32 length, u32 CRC-32C of the length's bytes and
 * the payload, the payload), as one stream cut into keys under PREFIX:
 *
 *   PREFIX/leader/...          the election (etcd_election.h); the
 *                              leader's value is its address
 *   PREFIX/log/OFFSET          the stream's bytes from OFFSET (16 hex
 *                              digits) on; a key begins where a record
 *                              does, unless it goes on with one too
 *                              large for one key
 *   PREFIX/meta                where the snapshot is: "muster-store 1
 *                              OFFSET SEQ CHUNKS BYTES CRC"
 *   PREFIX/snapshot/OFFSET/N   the snapshot's bytes, in chunks: the
 *                              state as of stream offset OFFSET, whose
 *                              first record after is number SEQ
 *   PREFIX/replicas/LEASE      each replica's address, role and place in
 *                              the stream, on its lease
 *
 * The leader appends a key at a time, one transaction each, under two
 * compares: its leadership's key still has the create revision its
 * campaign got (a deposed leader writes nothing), and the key is new (a
 * transaction sent again after a lost reply is not applied twice). A
 * record is durable, and its reply goes, once the key holding its last
 * byte is in. Records appended while a key is on its way go together in
 * the next one. Past max_bytes of stream after the snapshot, the leader
 * writes a new one and deletes the keys it holds.
 *
 * Standbys read the snapshot and the stream, then watch PREFIX/log/ and
 * apply each record as it comes, through the same callbacks a restart's
 * replay uses, under the daemon's lock. They serve no request (the
 * daemon answers with the leader's address), and campaign: the one etcd
 * elects reads what it has not applied, cuts off a record the old leader
 * left half written (never acknowledged), and serves.
 *
 * A leader that has not renewed its lease for most of its TTL serves
 * nothing until it does (store_leads). One whose lease etcd says ended,
 * or whose write the compare refuses, stops leading at once: it asks the
 * daemon to start again as a standby (restart), since its state may hold
 * changes the new leader never saw. So does a standby that fell so far behind
 * that etcd compacted the changes it had not read.
 */
#ifndef MUSTER_STORE_H
#define MUSTER_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "etcd.h"

/* A leader's lease, unless set: etcd ends it this long after the last
 * keepalive, and a standby takes over. */
#define STORE_TTL_S 2

struct store_config {
	struct etcd_opts etcd;
	const char *prefix; /* without the trailing '/' */
	int64_t ttl_s;      /* 0: STORE_TTL_S */
	size_t max_bytes;   /* a new snapshot past this; 0: 16 MiB */
	const char *daemon; /* "coordd", for the log */
};

/* What the store does to the daemon's state, and tells it. */
struct store_hooks {
	void *arg;
	/* The daemon's lock, around every call below marked so. */
	void (*lock)(void *arg);
	void (*unlock)(void *arg);
	/* Locked: the snapshot, then each record after it, in order: 0, or
	 * -1 when it cannot be applied (the replica then stops). */
	int (*snapshot)(const void *p, size_t len, void *arg);
	int (*record)(uint64_t seq, const void *p, size_t len, void *arg);
	/* Where those two say why they failed, or NULL. */
	const char *cause;
	/* Locked: this replica leads from now, holding every record. */
	void (*elected)(void *arg);
	/* No lock: every record up to seq is in etcd (err 0), or its
	 * outcome is unknown (err ENOLINK). With durable_arg. */
	void (*durable)(uint64_t seq, int err, void *arg);
	void *durable_arg;
	/* No lock, once: this replica must start again as a standby. */
	void (*restart)(const char *why, void *arg);
	/* No lock, once: the records in etcd cannot be applied here (they
	 * are another cluster's, or damaged); the daemon must stop. With
	 * durable_arg. */
	void (*fatal)(const char *why, void *arg);
};

struct store;

/*
 * Parses URL etcd://HOST:PORT[,HOST:PORT...]/PREFIX (etcds:// for https
 * members) into c->etcd.endpoints (into buf) and c->prefix (into pbuf):
 * 0, or -1 with err saying why.
 */
int store_parse_url(const char *url, struct store_config *c, char *buf,
    size_t buflen, char *pbuf, size_t pblen, char *err, size_t errlen);

/*
 * Makes the store and its threads: they read the snapshot and the stream
 * (waiting for etcd as long as it takes), then follow it. NULL with err
 * on a bad setting (etcd_new's).
 */
struct store *store_open(const struct store_config *c,
    const struct store_hooks *h, char *err, size_t errlen);

/* Campaigns from now, as address (what clients reach this replica at). */
void store_campaign(struct store *s, const char *address);

/* Locked: queues a record; its sequence number, or 0 when this replica
 * does not lead (errno ENOLINK) or memory is out. */
uint64_t store_append(struct store *s, const void *p, size_t len);

/* The newest record appended (any thread). */
uint64_t store_last(struct store *s);

/*
 * Whether this replica leads and may take changes: 1; else 0, with the
 * leader's address in leader ("" when none is known).
 */
int store_leads(struct store *s, char *leader, size_t len);

/* Why changes are refused while this replica leads (etcd cannot be
 * written), copied into buf; NULL when they are not. */
const char *store_error(struct store *s, char *buf, size_t len);

/*
 * Locked, at the end of a section: past max_bytes of stream after the
 * snapshot, takes one (write_fn) for the writer to store.
 */
void store_compact(struct store *s, int (*write_fn)(struct buf *out, void *arg),
    void *arg);

/* Waits, for at most ms, until what is appended is in etcd: 0, or -1. */
int store_flush(struct store *s, int64_t ms);

/*
 * The replicas as JSON (an object: leader, since, this replica's role and
 * each replica's place), appended to out: 0, or -1 with err.
 */
int store_status(struct store *s, struct buf *out, char *err, size_t errlen);

/* Stops: a leader writes what it holds and resigns, so that a standby
 * takes over at once. */
void store_close(struct store *s);

#endif
