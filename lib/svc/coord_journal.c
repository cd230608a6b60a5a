/*
 * coord_journal.c: what coordd keeps in its state directory, and how it
 * reads it back.
 *
 * Records, each a byte for its kind and then its fields (rec.h):
 *   'K' a key-value change: revision, key, 1 and the value or 0 (a delete
 *       of the key and all below it);
 *   'T' the tasks: the registry (service incarnation, epoch, each task's
 *       state, incarnation and errors) and each task's secret; written at
 *       the end of a locked section when it differs from the last one;
 *   'B' a barrier of the epoch that ended (its id, result and members).
 * The snapshot: the store (keys, revisions, the history watches resume
 * from), the tasks as in 'T', and the ended barriers.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "duration.h"
#include "log.h"
#include "rec.h"

#define SNAPSHOT_VERSION 1

/* Appends the record in co->jrec, if the journal is on. */
/* Appends the record in co->jrec, if the journal is on: its number, or
 * 0 when it could not be queued (the running request is told). */
static uint64_t
append(struct coord *co)
{
	if (co->commit == NULL || !co->jlive)
		return 0;
	return commit_append(co->commit, co->jrec.data, co->jrec.len);
}

/* A record that could not be made: out of memory. */
static void
not_made(const char *what)
{
	log_info("internal: out of memory; %s is not journaled", what);
	errno = ENOMEM;
	http_note_write(0);
}

static void
kv_changed(int64_t rev, const char *key, size_t klen, struct blob *val,
    void *arg)
{
	struct coord *co = arg;
	struct rec_out o = {.b = &co->jrec};

	buf_reset(&co->jrec);
	rec_put_u(&o, 'K');
	rec_put_i(&o, rev);
	rec_put_blob(&o, key, klen);
	rec_put_u(&o, val != NULL);
	if (val != NULL)
		rec_put_blob(&o, val->data, val->len);
	if (o.err) {
		not_made("a change of the store");
		return;
	}
	append(co);
}

static int
write_tasks(struct coord *co, struct buf *b)
{
	struct rec_out o = {.b = b};

	if (registry_snapshot(co->reg, b) < 0)
		return -1;
	for (size_t i = 0; i < co->rv->ntasks; i++)
		rec_put_blob(&o, co->secret[i].v, co->secret[i].len);
	return o.err ? -1 : 0;
}

static int
read_tasks(struct coord *co, struct rec_in *r, char *err, size_t errlen)
{
	long epoch = co->rv->epoch;

	if (registry_restore(co->reg, r, duration_now_ms(), err, errlen) < 0)
		return -1;
	/* A new epoch forgot the barriers of the last. */
	if (co->rv->epoch != epoch)
		barriers_reset(co->bars, ST_ABORTED, "the cluster was reset");
	for (size_t i = 0; i < co->rv->ntasks; i++) {
		size_t n;
		const char *s = rec_get_blob(r, COORD_SECRET_MAX, &n);

		if (s == NULL) {
			snprintf(err, errlen, "a task's secret is damaged");
			return -1;
		}
		memcpy(co->secret[i].v, s, n);
		co->secret[i].v[n] = '\0';
		co->secret[i].len = n;
	}
	return 0;
}

void
coord_journal_barrier(struct coord *co, const struct barrier *b)
{
	if (co->commit == NULL || !co->jlive || b->shutdown)
		return;
	struct rec_out o = {.b = &co->jrec};

	buf_reset(&co->jrec);
	rec_put_u(&o, 'B');
	if (o.err || barrier_record(b, co->rv->ntasks, &co->jrec) < 0) {
		not_made("a barrier's end");
		return;
	}
	append(co);
}

static int
write_snapshot(struct buf *out, void *arg)
{
	struct coord *co = arg;
	struct rec_out o = {.b = out};
	uint64_t n = 0;
	int rc = 0;

	rec_put_u(&o, SNAPSHOT_VERSION);
	rc |= o.err ? -1 : 0;
	rc |= kv_snapshot(co->kv, out);
	rc |= write_tasks(co, out);
	for (struct barrier *b = barriers_ended(co->bars); b != NULL;
	     b = b->next)
		n++;
	rec_put_u(&o, n);
	rc |= o.err ? -1 : 0;
	for (struct barrier *b = barriers_ended(co->bars); b != NULL && rc == 0;
	     b = b->next)
		rc |= barrier_record(b, co->rv->ntasks, out);
	return rc != 0 ? -1 : 0;
}

void
coord_journal_settle(struct coord *co)
{
	struct rec_out o = {.b = &co->jrec};

	if (co->commit == NULL || !co->jlive)
		return;
	if (co->ctl_dirty) {
		co->ctl_dirty = 0;
		buf_reset(&co->jrec);
		rec_put_u(&o, 'T');
		if (o.err || write_tasks(co, &co->jrec) < 0) {
			not_made("the tasks' state");
			co->ctl_dirty = 1; /* tried again at the next unlock */
		} else if (co->jrec.len != co->ctl_last.len ||
		    memcmp(co->jrec.data, co->ctl_last.data, co->jrec.len) !=
		        0) {
			/* The last one written is what the next compares
			 * with: one that failed is tried again. */
			if (append(co) == 0) {
				co->ctl_dirty = 1;
			} else {
				buf_reset(&co->ctl_last);
				if (buf_append(&co->ctl_last, co->jrec.data,
				        co->jrec.len) < 0)
					buf_reset(&co->ctl_last);
			}
		}
	}
	commit_compact(co->commit, write_snapshot, co);
}

static int
read_snapshot(const void *p, size_t len, void *arg)
{
	struct coord *co = arg;
	struct rec_in r;
	uint64_t n;

	rec_in_init(&r, p, len);
	co->jfresh = 0;
	if (rec_get_u(&r) != SNAPSHOT_VERSION) {
		snprintf(co->jerr, sizeof(co->jerr),
		    "the snapshot is of an unknown version");
		return -1;
	}
	if (kv_restore(co->kv, &r, co->jerr, sizeof(co->jerr)) < 0 ||
	    read_tasks(co, &r, co->jerr, sizeof(co->jerr)) < 0)
		return -1;
	n = rec_get_u(&r);
	for (uint64_t i = 0; i < n && !r.err; i++)
		if (barriers_restore(co->bars, &r, co->jerr, sizeof(co->jerr)) <
		    0)
			return -1;
	if (r.err || rec_left(&r) != 0) {
		snprintf(co->jerr, sizeof(co->jerr), "the snapshot is damaged");
		return -1;
	}
	return 0;
}

static int
read_record(uint64_t seq, const void *p, size_t len, void *arg)
{
	struct coord *co = arg;
	struct rec_in r;
	uint64_t kind;

	(void)seq;
	rec_in_init(&r, p, len);
	kind = rec_get_u(&r);
	if (kind == 'K') {
		int64_t rev = rec_get_i(&r);
		size_t klen, vlen = 0;
		const char *key = rec_get_blob(&r, SIZE_MAX, &klen);
		uint64_t has = rec_get_u(&r);
		const char *v = has ? rec_get_blob(&r, SIZE_MAX, &vlen) : NULL;
		struct blob *val = NULL;
		int rc;

		if (r.err || rec_left(&r) != 0 || has > 1 || rev <= 0 ||
		    memchr(key, '\0', klen) != NULL)
			goto bad;
		/* A journal without a snapshot: revisions go on from its
		 * first record's. */
		if (co->jfresh) {
			kv_set_origin(co->kv, rev - 1);
			co->jfresh = 0;
		}
		if (has && (val = blob_new(v, vlen)) == NULL) {
			snprintf(co->jerr, sizeof(co->jerr), "out of memory");
			return -1;
		}
		rc = kv_replay(co->kv, rev, key, klen, val, co->jerr,
		    sizeof(co->jerr));
		blob_unref(val);
		return rc;
	}
	if (kind == 'T') {
		if (read_tasks(co, &r, co->jerr, sizeof(co->jerr)) < 0)
			return -1;
		if (rec_left(&r) != 0)
			goto bad;
		buf_reset(&co->ctl_last);
		return buf_append(&co->ctl_last, p, len);
	}
	if (kind == 'B') {
		if (barriers_restore(co->bars, &r, co->jerr, sizeof(co->jerr)) <
		    0)
			return -1;
		if (rec_left(&r) != 0)
			goto bad;
		return 0;
	}
bad:
	snprintf(co->jerr, sizeof(co->jerr), "a record of kind %llu is damaged",
	    (unsigned long long)kind);
	return -1;
}

enum status
coord_journal_open(struct coord *co, const char *dir, enum journal_fsync mode,
    size_t max_bytes, char *err, size_t errlen)
{
	int64_t t0 = duration_now_ms();
	enum status st;

	coord_lock(co);
	co->jfresh = 1;
	co->commit = commit_open(dir, mode, max_bytes, "coordd", read_snapshot,
	    read_record, co, co->jerr, &st, err, errlen);
	if (co->commit == NULL) {
		coord_unlock(co);
		return st;
	}
	co->jlive = 1;
	co->ctl_dirty = 1;
	kv_set_journal(co->kv, kv_changed, co);
	log_info("state directory %s: %zu keys at revision %" PRId64
	         ", epoch %ld, %zu ended barriers, read in %" PRId64 " ms",
	    dir, kv_count(co->kv), kv_revision(co->kv), co->rv->epoch,
	    barriers_count(co->bars), duration_now_ms() - t0);
	coord_unlock(co);
	return ST_OK;
}

static void
lock_cb(void *arg)
{
	coord_lock(arg);
}

static void
unlock_cb(void *arg)
{
	coord_unlock(arg);
}

/*
 * Locked: this replica leads, with every record applied. From now on its
 * changes are recorded, and liveness starts over as after a restart: no
 * task is judged dead for the time it spent standing by.
 */
static void
elected(void *arg)
{
	struct coord *co = arg;
	int64_t now = duration_now_ms();

	co->jfresh = 0;
	co->jlive = 1;
	co->ctl_dirty = 1;
	kv_set_journal(co->kv, kv_changed, co);
	registry_heard_all(co->reg, now);
	barriers_set_settle(co->bars, now + co->rv->hb_timeout);
	if (co->rv->ntasks > 0)
		timers_add(park_timers(co->park), &co->scan,
		    now + co->rv->hb_timeout / 5);
	log_info("leading: %zu keys at revision %" PRId64
	         ", epoch %ld, %zu ended barriers",
	    kv_count(co->kv), kv_revision(co->kv), co->rv->epoch,
	    barriers_count(co->bars));
}

enum status
coord_store_open(struct coord *co, const struct store_config *sc, char *err,
    size_t errlen)
{
	co->jfresh = 1;
	co->commit = commit_open_store(sc, "coordd", read_snapshot, read_record,
	    lock_cb, unlock_cb, elected, co, co->jerr, err, errlen);
	return co->commit != NULL ? ST_OK : ST_INVALID_ARGUMENT;
}
