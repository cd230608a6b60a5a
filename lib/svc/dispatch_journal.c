/*
 * dispatch_journal.c: what dispatchd keeps in its state directory, and
 * how it reads it back.
 *
 * Records: a byte for the side, then that side's own record: 'C' the
 * closure queues (closureq: queues, closures and their values, keys,
 * resources, workers' registrations), 'D' the data side (dataset:
 * datasets, jobs and their positions, tasks, leases and what each split
 * delivered, job clients). The snapshot: a version, then both sides'
 * snapshots, each as a blob.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch_int.h"
#include "duration.h"
#include "log.h"
#include "rec.h"

#define SNAPSHOT_VERSION 1

/* Appends side's record rec, if the journal is on. */
static void
append(struct dispatch *d, char side, const void *rec, size_t len)
{
	if (d->commit == NULL || !d->jlive)
		return;
	buf_reset(&d->jrec);
	if (buf_append(&d->jrec, &side, 1) < 0 ||
	    buf_append(&d->jrec, rec, len) < 0) {
		errno = ENOMEM;
		http_note_write(0);
		return;
	}
	commit_append(d->commit, d->jrec.data, d->jrec.len);
}

static void
cq_changed(const void *rec, size_t len, void *arg)
{
	append(arg, 'C', rec, len);
}

static void
ds_changed(const void *rec, size_t len, void *arg)
{
	append(arg, 'D', rec, len);
}

/*
 * A blob (rec_put_blob: its length, then its bytes) written in place:
 * blob_open leaves room for the longest length, the caller appends the
 * bytes, blob_close puts the length before them. The closures' snapshot
 * holds every value: made apart and then copied, a compaction held them
 * three times.
 */
#define BLOB_ROOM 10

static int
blob_open(struct buf *out, size_t *at)
{
	static const char room[BLOB_ROOM];

	*at = out->len;
	return buf_append(out, room, BLOB_ROOM);
}

static int
blob_close(struct buf *out, size_t at)
{
	size_t n = out->len - at - BLOB_ROOM;
	struct buf len = {0};
	struct rec_out o = {.b = &len};

	rec_put_u(&o, n);
	if (o.err || len.len > BLOB_ROOM) {
		buf_free(&len);
		return -1;
	}
	memmove(out->data + at + len.len, out->data + at + BLOB_ROOM, n);
	memcpy(out->data + at, len.data, len.len);
	out->len = at + len.len + n;
	out->data[out->len] = '\0';
	buf_free(&len);
	return 0;
}

static int
write_snapshot(struct buf *out, void *arg)
{
	struct dispatch *d = arg;
	struct rec_out o = {.b = out};
	size_t at;

	rec_put_u(&o, SNAPSHOT_VERSION);
	if (o.err || blob_open(out, &at) < 0 || cq_snapshot(d->cq, out) < 0 ||
	    blob_close(out, at) < 0 || blob_open(out, &at) < 0 ||
	    ds_snapshot(d->ds, out) < 0 || blob_close(out, at) < 0)
		return -1;
	return 0;
}

void
dispatch_journal_settle(struct dispatch *d)
{
	if (d->commit != NULL && d->jlive)
		commit_compact(d->commit, write_snapshot, d);
}

static int
read_snapshot(const void *p, size_t len, void *arg)
{
	struct dispatch *d = arg;
	int64_t now = duration_now_ms();
	struct rec_in r;
	const void *cq, *ds;
	size_t cqlen, dslen;

	rec_in_init(&r, p, len);
	if (rec_get_u(&r) != SNAPSHOT_VERSION) {
		snprintf(d->jerr, sizeof(d->jerr),
		    "the snapshot is of an unknown version");
		return -1;
	}
	cq = rec_get_blob(&r, len, &cqlen);
	ds = rec_get_blob(&r, len, &dslen);
	if (r.err || rec_left(&r) != 0) {
		snprintf(d->jerr, sizeof(d->jerr), "the snapshot is damaged");
		return -1;
	}
	if (cq_restore(d->cq, cq, cqlen, now, d->jerr, sizeof(d->jerr)) < 0 ||
	    ds_restore(d->ds, ds, dslen, now, d->jerr, sizeof(d->jerr)) < 0)
		return -1;
	return 0;
}

static int
read_record(uint64_t seq, const void *p, size_t len, void *arg)
{
	struct dispatch *d = arg;
	const char *s = p;
	int64_t now = duration_now_ms();

	(void)seq;
	if (len > 0 && s[0] == 'C')
		return cq_apply(d->cq, s + 1, len - 1, now, d->jerr,
		    sizeof(d->jerr));
	if (len > 0 && s[0] == 'D')
		return ds_apply(d->ds, s + 1, len - 1, now, d->jerr,
		    sizeof(d->jerr));
	snprintf(d->jerr, sizeof(d->jerr), "a record of unknown kind");
	return -1;
}

/* A data worker the queues do not have live: down, as on its death. */
static void
down_stray(const char *name, uint64_t inc, void *arg)
{
	struct dispatch *d = arg;
	struct cq_worker *w = cq_worker(d->cq, name);

	if (w == NULL || !w->live || w->inc != inc)
		ds_worker_down(d->ds, name, inc);
}

/* From now on every change is recorded. */
static void
record_changes(struct dispatch *d)
{
	d->jlive = 1;
	cq_set_journal(d->cq, cq_changed, d);
	ds_set_journal(d->ds, ds_changed, d);
	ds_worker_each(d->ds, down_stray, d);
}

enum status
dispatch_journal_open(struct dispatch *d, const char *dir,
    enum journal_fsync mode, size_t max_bytes, char *err, size_t errlen)
{
	int64_t t0 = duration_now_ms();
	struct ds_view dv;
	enum status st;

	dispatch_lock(d);
	d->commit = commit_open(dir, mode, max_bytes, "dispatchd",
	    read_snapshot, read_record, d, d->jerr, &st, err, errlen);
	if (d->commit == NULL) {
		dispatch_unlock(d);
		return st;
	}
	record_changes(d);
	ds_view(d->ds, &dv);
	log_info("state directory %s: %zu closures, %zu datasets, %zu jobs, "
	         "read in %" PRId64 " ms",
	    dir, cq_view(d->cq)->closures, dv.datasets, dv.jobs,
	    duration_now_ms() - t0);
	if (cq_view(d->cq)->misfits > 0)
		log_info(
		    "state directory %s: %lu closure records did not fit "
		    "the state before them (one was lost) and were skipped",
		    dir, cq_view(d->cq)->misfits);
	dispatch_unlock(d);
	return ST_OK;
}

static void
lock_cb(void *arg)
{
	dispatch_lock(arg);
}

static void
unlock_cb(void *arg)
{
	dispatch_unlock(arg);
}

/*
 * Locked: this replica leads, with every record applied. From now on its
 * changes are recorded, and liveness starts over as after a restart: no
 * worker or job client is judged gone for the time it stood by.
 */
static void
elected(void *arg)
{
	struct dispatch *d = arg;
	int64_t now = duration_now_ms();
	struct ds_view dv;

	cq_heard_all(d->cq, now);
	ds_heard_all(d->ds, now);
	record_changes(d);
	d->standby = 0;
	ds_view(d->ds, &dv);
	log_info("leading: %zu closures, %zu datasets, %zu jobs",
	    cq_view(d->cq)->closures, dv.datasets, dv.jobs);
}

enum status
dispatch_store_open(struct dispatch *d, const struct store_config *sc,
    char *err, size_t errlen)
{
	d->standby = 1;
	d->commit = commit_open_store(sc, "dispatchd", read_snapshot,
	    read_record, lock_cb, unlock_cb, elected, d, d->jerr, err, errlen);
	return d->commit != NULL ? ST_OK : ST_INVALID_ARGUMENT;
}
