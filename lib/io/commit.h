/*
 * commit.h: a daemon's journal and its HTTP server together. Changes are
 * appended under the daemon's lock (commit_append); the server holds
 * every reply until the changes made before it are durable (the gate),
 * and a request whose change could not be written gets an error instead
 * of its reply. Replies to many clients wait for one fsync together.
 */
#ifndef MUSTER_COMMIT_H
#define MUSTER_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "http_server.h"
#include "journal.h"
#include "status.h"
#include "store.h"

struct commit;

/*
 * Opens the state directory dir and reads it back (journal_open, then
 * journal_replay with snapshot_fn and record_fn, which write why they
 * failed into cause), logs what replay repaired, and becomes the
 * journal's durable callback. NULL with err filled and *st the status:
 * FAILED_PRECONDITION when another process has dir, INTERNAL when it
 * cannot be read or is damaged, RESOURCE_EXHAUSTED without memory.
 * The journal is compacted past max_bytes (0: 64 MiB), see commit_compact.
 */
struct commit *commit_open(const char *dir, enum journal_fsync mode,
    size_t max_bytes, const char *daemon,
    int (*snapshot_fn)(const void *p, size_t len, void *arg),
    int (*record_fn)(uint64_t seq, const void *p, size_t len, void *arg),
    void *arg, const char *cause, enum status *st, char *err, size_t errlen);

/*
 * At the end of a locked section: when the journal is over max_bytes and
 * twice the snapshot, replaces both with a snapshot that write_fn writes
 * (journal_compact). Looks at the sizes only every so many records.
 */
void commit_compact(struct commit *c,
    int (*write_fn)(struct buf *out, void *arg), void *arg);

/*
 * Appends a record: under the daemon's lock, in the order of the changes.
 * Tells the running request (http_note_write) what it made, or that the
 * journal refused it. The sequence number, or 0.
 */
uint64_t commit_append(struct commit *c, const void *p, size_t len);

/*
 * The server's gate (http_server_config.gate, gate_flush with gate_arg
 * the commit): the newest change appended, and journal_write_now.
 */
uint64_t commit_gate(void *c);
void commit_flush(void *c, uint64_t seq);

/* The server whose replies wait; before it serves (daemon_run does). */
void commit_attach(struct commit *c, struct http_server *srv);

/*
 * Whether changes are refused now (the journal cannot write): replies so
 * to req (RESOURCE_EXHAUSTED for a full disk, else INTERNAL) and returns
 * 1; else 0. For a daemon's changes, before it makes them.
 */
int commit_refuse(struct commit *c, struct http_req *req);

/*
 * Shutting down, before the server stops: waits for what is appended to
 * be durable, then lets every reply go without waiting.
 */
void commit_detach(struct commit *c);

/* Closes the journal, writing what is left; says in the log if it
 * could not. */
void commit_free(struct commit *c);

/*
 * The same over etcd (store.h) rather than a state directory: the
 * records go to the store, which replays them into the daemon through
 * snapshot_fn and record_fn under lock and unlock, and calls elected
 * (locked) once this replica leads; those two write why they failed
 * into cause. The replica stands by until then:
 * the daemon serves no change (commit_leads). When it must start again
 * as a standby, the process gets SIGUSR2 (daemon.c). NULL with err on a
 * bad setting.
 */
struct commit *commit_open_store(const struct store_config *sc,
    const char *daemon,
    int (*snapshot_fn)(const void *p, size_t len, void *arg),
    int (*record_fn)(uint64_t seq, const void *p, size_t len, void *arg),
    void (*lock)(void *arg), void (*unlock)(void *arg),
    void (*elected)(void *arg), void *arg, const char *cause, char *err,
    size_t errlen);
/*
 * Why a store's records could not be applied, once they could not (the
 * process then got SIGTERM, and exits with INTERNAL); else NULL.
 */
const char *commit_fatal(struct commit *c);

/* Whether c is a store's (replicas, a leader). */
int commit_replicated(const struct commit *c);
/* A store's replica campaigns from now, as address. */
void commit_campaign(struct commit *c, const char *address);
/* Whether this replica leads (a state directory's always does): 1; else
 * 0 with the leader's address, or "", in leader. */
int commit_leads(struct commit *c, char *leader, size_t len);
/* A store's replicas as JSON (store_status). */
int commit_status(struct commit *c, struct buf *out, char *err, size_t errlen);

/*
 * A state directory's journal as a status page shows it: the bytes of its
 * records and of its snapshot, and why writes fail now (into why; "" when
 * they do not). -1 for a store's commit, which has no journal.
 */
int commit_journal_info(struct commit *c, uint64_t *journal, uint64_t *snapshot,
    char *why, size_t whylen);

#endif
