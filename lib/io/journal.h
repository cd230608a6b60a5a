/*
 * journal.h: a daemon's state on disk, in the order redis uses for its
 * append-only file: a change is appended under the daemon's lock (a copy
 * into memory), a thread of the journal's own writes and fsyncs it outside
 * that lock, and only then is the change acknowledged to its client.
 *
 * A state directory holds LOCK (flock'd for the process's life, with its
 * pid), snapshot (the whole state as of some sequence number) and journal
 * (every record after it). Both files begin with a 24-byte header: magic
 * "MUSTERS1" or "MUSTERJ1", u32 version 1, u32 reserved, u64 the sequence
 * number the file begins at (for a snapshot: the first one it does not
 * hold). Records follow: u32 payload length, u32 CRC-32C of the length's
 * four bytes and the payload, the payload. Integers are little-endian.
 * Record n of a journal (from 0) has sequence number begin + n.
 *
 * Sequence numbers start at 1; 0 means failure.
 */
#ifndef MUSTER_JOURNAL_H
#define MUSTER_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

enum journal_fsync {
	JOURNAL_FSYNC_ALWAYS, /* fsync every batch before acknowledging it */
	JOURNAL_FSYNC_BATCH,  /* acknowledge once written; fsync within 10 ms */
	JOURNAL_FSYNC_NONE,   /* acknowledge once written; never fsync */
};

struct journal;

/* "always", "batch" or "none"; -1 for anything else. */
int journal_fsync_parse(const char *s);

/*
 * Makes dir if missing and locks it. NULL with err filled when it cannot,
 * or when another process (or another journal_open) holds the lock
 * (errno EWOULDBLOCK).
 */
struct journal *journal_open(const char *dir, enum journal_fsync mode,
    char *err, size_t errlen);

/*
 * Reads the state back, once, before the first append: snapshot_fn with
 * the snapshot if there is one, then record_fn with each later record in
 * order (seq is its sequence number). A torn tail, as a crash mid-write
 * leaves, is cut off and described by journal_note(). Corruption with
 * valid records after it, a bad header, or a callback returning -1 stops
 * replay: -1 with err filled, and the journal stays unusable. Starts the
 * journal's thread on success.
 */
int journal_replay(struct journal *j,
    int (*snapshot_fn)(const void *p, size_t len, void *arg),
    int (*record_fn)(uint64_t seq, const void *p, size_t len, void *arg),
    void *arg, char *err, size_t errlen);

/* What replay repaired, for the caller to log; "" when nothing. */
const char *journal_note(const struct journal *j);

/*
 * Called by the journal's thread, holding none of the journal's locks,
 * after each batch: err 0 when every record up to seq is durable (for
 * "batch" and "none": written, so that a killed process loses none; a
 * background sync that fails then refuses later appends); else
 * the records up to seq are not (err is an errno value), and their
 * clients must be told so. Failed records stay queued and are written
 * again on retry, since the daemon has applied them: their outcome is
 * unknown rather than undone.
 */
typedef void (*journal_durable_fn)(uint64_t seq, int err, void *arg);

/* Set before appending. */
void journal_set_durable(struct journal *j, journal_durable_fn fn, void *arg);

/*
 * Queues a record; call under the daemon's lock, in the order the changes
 * were made. 0 (errno set) only when the journal is closing or memory is
 * out. After a failed write or fsync, records still queue (the change is
 * made) and journal_error() says why: the daemon refuses new changes until
 * a retry, every 500 ms or on journal_retry(), writes the queue out.
 */
uint64_t journal_append(struct journal *j, const void *p, size_t len);

/*
 * In "batch" and "none" modes: writes what is queued in the calling thread
 * when the journal's thread is not writing already, so that a reply need
 * not wait for a thread switch (the write is a copy into the kernel; the
 * journal's thread syncs after). 1 when seq is durable on return (the
 * durable callback told), else 0: wait for the journal's thread.
 */
int journal_write_now(struct journal *j, uint64_t seq);

/*
 * Blocks until seq is durable (0) or has failed (-1, errno set), and the
 * durable callback has been told.
 */
int journal_wait(struct journal *j, uint64_t seq);

/*
 * Asks the thread to retry a failed write now; journal_wait on the failed
 * records then waits for this try.
 */
void journal_retry(struct journal *j);

/* Why appends fail, copied into buf (errno set to the failure's); NULL
 * when they do not. */
const char *journal_error(struct journal *j, char *buf, size_t len);

/* Bytes on disk in the journal and in the snapshot, to decide compaction. */
void journal_size(struct journal *j, uint64_t *journal, uint64_t *snapshot);

/*
 * Replaces snapshot and journal with a snapshot of the whole state, which
 * write_fn appends to out. Call under the daemon's lock, so that the
 * snapshot holds exactly the records appended so far. The journal's
 * thread writes the files afterwards, and records appended meanwhile go
 * to the new journal: the compaction is done once a record appended after
 * it is durable. 0, or -1 (errno set) when write_fn fails, memory runs
 * out or a compaction is already under way. A compaction that fails to
 * write is logged, and leaves files that replay to the same state.
 */
int journal_compact(struct journal *j,
    int (*write_fn)(struct buf *out, void *arg), void *arg);

/*
 * Writes and fsyncs what is queued (in every mode), stops the thread and
 * releases the lock. Call without holding a lock durable_fn takes. 0, or
 * -1 when some records could not be made durable.
 */
int journal_close(struct journal *j);

#endif
