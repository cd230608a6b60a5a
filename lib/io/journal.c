/*
 * The journal: records are queued in memory by journal_append (under the
 * daemon's lock, so the queue's order is the order of the changes) and
 * written by one thread, the flusher, which alone touches the files after
 * replay. It takes the whole queue as one batch, writes it with pwrite at
 * the end of the last good record, syncs it as the mode says, and reports
 * the highest durable sequence number. Everything appended while one batch
 * is being synced goes into the next: group commit without a timer.
 * "always" reports a batch once it is synced; "batch" and "none" once it
 * is written (the kernel has it: a killed process loses nothing), and
 * "batch" syncs within 10 ms after, as redis's everysec does every second.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "journal.h"
#include "log.h"

#define HEADER_SIZE 24
#define RECORD_HEADER 8
#define VERSION 1
#define BATCH_MS 10  /* batch mode: written records synced within this */
#define RETRY_MS 500 /* how often a failed write is tried again */

static const char journal_magic[8] = "MUSTERJ1";
static const char snapshot_magic[8] = "MUSTERS1";

struct journal {
	char *dir;
	enum journal_fsync mode;
	int lockfd, dirfd;

	/* The flusher's alone once replay is done. */
	int fd;           /* the journal file */
	uint64_t end;     /* its bytes up to the end of the last good record */
	struct buf batch; /* records taken from the queue, not yet written */
	uint64_t batch_last; /* the sequence number of its last record */

	pthread_mutex_t mu;  /* guards everything below */
	pthread_cond_t wake; /* the flusher: work, retry or stop */
	pthread_cond_t done; /* journal_wait */
	pthread_t thread;
	int running, stopping, retry_now;
	/* A batch is being written, by the flusher or journal_write_now. */
	int writing;
	int unsynced;     /* written, not yet synced (batch, none) */
	struct buf spare; /* journal_write_now's buffer, kept for reuse */
	/*
	 * batch mode: what was written after synced_end and is not yet
	 * synced (its last record since_last), to write again if the sync
	 * fails: a failed fsync may have dropped the pages, and a second
	 * one would then succeed without them.
	 */
	struct buf since_sync;
	uint64_t synced_end, since_last;
	struct buf queue;  /* records appended since the flusher last looked */
	uint64_t next_seq; /* 0 until replay */
	uint64_t durable;  /* every record up to this is on disk */
	_Atomic uint64_t durable_seen; /* the same, read without mu */
	atomic_int failing;            /* err != 0, read without mu */
	uint64_t
	    reported; /* every record up to this has had its outcome told */
	int err;      /* why writes fail; 0 while they work */
	char error[256];
	uint64_t journal_bytes, snapshot_bytes;
	journal_durable_fn durable_fn;
	void *durable_arg;
	/* A compaction waiting for the flusher. */
	struct buf snap; /* an 8-byte record header, then the snapshot */
	int snap_queued;
	uint64_t snap_seq; /* the first record the snapshot does not hold */
	size_t snap_cut;   /* queue bytes before snap_seq when it was taken */

	char note[256];
};

int
journal_fsync_parse(const char *s)
{
	if (strcmp(s, "always") == 0)
		return JOURNAL_FSYNC_ALWAYS;
	if (strcmp(s, "batch") == 0)
		return JOURNAL_FSYNC_BATCH;
	if (strcmp(s, "none") == 0)
		return JOURNAL_FSYNC_NONE;
	return -1;
}

static void
put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = v >> (8 * i);
}

static void
put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = v >> (8 * i);
}

static uint32_t
get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}

static uint64_t
get64(const unsigned char *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Fills h, the header of a record of len bytes whose payload is p. */
static void
record_header(unsigned char h[RECORD_HEADER], const void *p, uint32_t len)
{
	put32(h, len);
	put32(h + 4, crc32c(crc32c(0, h, 4), p, len));
}

/*
 * The size of the record at off if one is there whole with a good CRC,
 * else 0.
 */
static uint64_t
record_at(const unsigned char *p, uint64_t size, uint64_t off)
{
	uint32_t len;

	if (size - off < RECORD_HEADER)
		return 0;
	len = get32(p + off);
	if (size - off - RECORD_HEADER < len)
		return 0;
	if (crc32c(crc32c(0, p + off, 4), p + off + RECORD_HEADER, len) !=
	    get32(p + off + 4))
		return 0;
	return RECORD_HEADER + (uint64_t)len;
}

static int
pwrite_all(int fd, const void *p, size_t n, uint64_t off)
{
	const char *s = p;

	while (n > 0) {
		ssize_t w = pwrite(fd, s, n, (off_t)off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		s += w;
		n -= (size_t)w;
		off += (uint64_t)w;
	}
	return 0;
}

/*
 * Writes name (a snapshot or a journal) whole, beginning at seq, as
 * name.tmp, syncs it, renames it into place and syncs the directory, so
 * that after a crash name is either the old file or the new one. Returns
 * the open file, or -1 with errno set.
 */
static int
replace_file(struct journal *j, const char *name, const char *magic,
    uint64_t seq, const void *p, size_t n)
{
	unsigned char h[HEADER_SIZE] = {0};
	char tmp[64];
	int fd, e;

	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	memcpy(h, magic, 8);
	put32(h + 8, VERSION);
	put64(h + 16, seq);
	fd =
	    openat(j->dirfd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd == -1)
		return -1;
	if (pwrite_all(fd, h, sizeof(h), 0) == -1 ||
	    pwrite_all(fd, p, n, sizeof(h)) == -1 || fsync(fd) == -1 ||
	    renameat(j->dirfd, tmp, j->dirfd, name) == -1 ||
	    fsync(j->dirfd) == -1) {
		e = errno;
		close(fd);
		unlinkat(j->dirfd, tmp, 0);
		errno = e;
		return -1;
	}
	return fd;
}

/* Makes a new journal beginning at seq and holding the records p[0..n). */
static int
start_journal(struct journal *j, uint64_t seq, const void *p, size_t n)
{
	int fd = replace_file(j, "journal", journal_magic, seq, p, n);

	if (fd == -1)
		return -1;
	if (j->fd != -1)
		close(j->fd);
	j->fd = fd;
	j->end = HEADER_SIZE + n;
	j->synced_end = j->end; /* replace_file synced it */
	buf_reset(&j->since_sync);
	return 0;
}

/* The PID written in dir/LOCK by its holder, or 0 if unreadable. */
static long
lock_holder(int fd)
{
	char s[32];
	ssize_t n = pread(fd, s, sizeof(s) - 1, 0);

	if (n <= 0)
		return 0;
	s[n] = '\0';
	return strtol(s, NULL, 10);
}

static int
lock_dir(struct journal *j, char *err, size_t errlen)
{
	char pid[32];
	long holder;

	j->lockfd =
	    openat(j->dirfd, "LOCK", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (j->lockfd == -1) {
		snprintf(err, errlen, "%s/LOCK: %s", j->dir, strerror(errno));
		return -1;
	}
	if (flock(j->lockfd, LOCK_EX | LOCK_NB) == -1) {
		if (errno != EWOULDBLOCK)
			snprintf(err, errlen, "%s/LOCK: %s", j->dir,
			    strerror(errno));
		else if ((holder = lock_holder(j->lockfd)) > 0)
			snprintf(err, errlen,
			    "state directory %s is in use by process %ld",
			    j->dir, holder);
		else
			snprintf(err, errlen,
			    "state directory %s is in use by another process",
			    j->dir);
		return -1;
	}
	/* Only for the error above: the lock, not the PID, is the truth. */
	snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(j->lockfd, 0) == -1 ||
	    pwrite_all(j->lockfd, pid, strlen(pid), 0) == -1) {
		snprintf(err, errlen, "%s/LOCK: %s", j->dir, strerror(errno));
		return -1;
	}
	return 0;
}

static void
free_journal(struct journal *j)
{
	if (j->fd != -1)
		close(j->fd);
	if (j->lockfd != -1)
		close(j->lockfd); /* releases the flock */
	if (j->dirfd != -1)
		close(j->dirfd);
	pthread_mutex_destroy(&j->mu);
	pthread_cond_destroy(&j->wake);
	pthread_cond_destroy(&j->done);
	buf_free(&j->batch);
	buf_free(&j->queue);
	buf_free(&j->spare);
	buf_free(&j->since_sync);
	buf_free(&j->snap);
	free(j->dir);
	free(j);
}

struct journal *
journal_open(const char *dir, enum journal_fsync mode, char *err, size_t errlen)
{
	struct journal *j = calloc(1, sizeof(*j));
	pthread_condattr_t ca;

	if (j == NULL || (j->dir = strdup(dir)) == NULL) {
		snprintf(err, errlen, "%s: %s", dir, strerror(ENOMEM));
		free(j);
		return NULL;
	}
	j->mode = mode;
	j->fd = j->lockfd = -1;
	pthread_mutex_init(&j->mu, NULL);
	/* The flusher's timed waits must not jump with the wall clock. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&j->wake, &ca);
	pthread_cond_init(&j->done, &ca);
	pthread_condattr_destroy(&ca);
	if (mkdir(dir, 0755) == -1 && errno != EEXIST) {
		snprintf(err, errlen, "%s: %s", dir, strerror(errno));
		j->dirfd = -1;
		free_journal(j);
		return NULL;
	}
	j->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (j->dirfd == -1) {
		snprintf(err, errlen, "%s: %s", dir, strerror(errno));
		free_journal(j);
		return NULL;
	}
	if (lock_dir(j, err, errlen) == -1) {
		int e = errno;

		free_journal(j);
		errno = e; /* EWOULDBLOCK: another holds it */
		return NULL;
	}
	return j;
}

/*
 * Reads dir/name whole into b and checks its header: 1 when it was read,
 * 0 when there is no such file, -1 with err filled.
 */
static int
read_file(struct journal *j, const char *name, const char *magic, struct buf *b,
    uint64_t *seq, char *err, size_t errlen)
{
	int fd = openat(j->dirfd, name, O_RDONLY | O_CLOEXEC);
	struct stat st;
	ssize_t n = 0;

	if (fd == -1 && errno == ENOENT)
		return 0;
	if (fd == -1 || fstat(fd, &st) == -1)
		goto fail;
	if (buf_reserve(b, (size_t)st.st_size) == -1) {
		errno = ENOMEM;
		goto fail;
	}
	while (b->len < (size_t)st.st_size) {
		n = pread(fd, b->data + b->len, (size_t)st.st_size - b->len,
		    (off_t)b->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		b->len += (size_t)n;
	}
	if (n < 0)
		goto fail;
	close(fd);
	if (b->len < HEADER_SIZE || memcmp(b->data, magic, 8) != 0 ||
	    get32((unsigned char *)b->data + 8) != VERSION) {
		snprintf(err, errlen, "%s/%s: bad header (not a %.8s file)",
		    j->dir, name, magic);
		return -1;
	}
	*seq = get64((unsigned char *)b->data + 16);
	return 1;
fail:
	snprintf(err, errlen, "%s/%s: %s", j->dir, name, strerror(errno));
	if (fd != -1)
		close(fd);
	return -1;
}

/*
 * The end of the valid records of a journal. A bad record with nothing
 * valid after it is a write the crash interrupted, and is cut; with a
 * valid record anywhere after it, it is damage to data that was once
 * acknowledged, and replay must stop rather than lose what follows.
 */
static int
scan_journal(struct journal *j, const struct buf *b, uint64_t *end, char *err,
    size_t errlen)
{
	const unsigned char *p = (const unsigned char *)b->data;
	uint64_t off = HEADER_SIZE, n;

	while (off < b->len && (n = record_at(p, b->len, off)) > 0)
		off += n;
	for (uint64_t q = off + 1; q < b->len; q++) {
		if (record_at(p, b->len, q) > 0) {
			snprintf(err, errlen,
			    "%s/journal: corrupt record at byte offset %llu "
			    "(valid records follow at %llu)",
			    j->dir, (unsigned long long)off,
			    (unsigned long long)q);
			return -1;
		}
	}
	if (off < b->len) {
		if (ftruncate(j->fd, (off_t)off) == -1 || fsync(j->fd) == -1) {
			snprintf(err, errlen,
			    "%s/journal: cutting a torn record: %s", j->dir,
			    strerror(errno));
			return -1;
		}
		snprintf(j->note, sizeof(j->note),
		    "%s/journal: cut %llu bytes of a torn record at offset %llu",
		    j->dir, (unsigned long long)(b->len - off),
		    (unsigned long long)off);
	}
	*end = off;
	return 0;
}

static void *flusher(void *arg);

int
journal_replay(struct journal *j,
    int (*snapshot_fn)(const void *p, size_t len, void *arg),
    int (*record_fn)(uint64_t seq, const void *p, size_t len, void *arg),
    void *arg, char *err, size_t errlen)
{
	struct buf s = {0}, b = {0};
	uint64_t snap_seq = 0, begin, end, seq, off, keep = 0;
	int r = -1, have;

	/* A crash between writing and renaming leaves these; never valid. */
	unlinkat(j->dirfd, "snapshot.tmp", 0);
	unlinkat(j->dirfd, "journal.tmp", 0);

	have = read_file(j, "snapshot", snapshot_magic, &s, &snap_seq, err,
	    errlen);
	if (have == -1)
		goto out;
	if (have) {
		uint64_t n =
		    record_at((unsigned char *)s.data, s.len, HEADER_SIZE);

		if (n == 0 || n != s.len - HEADER_SIZE) {
			snprintf(err, errlen, "%s/snapshot: corrupt", j->dir);
			goto out;
		}
		if (snapshot_fn(s.data + HEADER_SIZE + RECORD_HEADER,
		        s.len - HEADER_SIZE - RECORD_HEADER, arg) == -1) {
			snprintf(err, errlen, "%s/snapshot: rejected", j->dir);
			goto out;
		}
	}

	have = read_file(j, "journal", journal_magic, &b, &begin, err, errlen);
	if (have == -1)
		goto out;
	if (!have) {
		begin = snap_seq > 0 ? snap_seq : 1;
		end = HEADER_SIZE;
		if (start_journal(j, begin, NULL, 0) == -1) {
			snprintf(err, errlen, "%s/journal: %s", j->dir,
			    strerror(errno));
			goto out;
		}
	} else {
		if (begin == 0 || (snap_seq > 0 && begin > snap_seq)) {
			snprintf(err, errlen,
			    "%s/journal: begins at record %llu, after the "
			    "snapshot's end (%llu): records are missing",
			    j->dir, (unsigned long long)begin,
			    (unsigned long long)snap_seq);
			goto out;
		}
		j->fd = openat(j->dirfd, "journal", O_RDWR | O_CLOEXEC);
		if (j->fd == -1) {
			snprintf(err, errlen, "%s/journal: %s", j->dir,
			    strerror(errno));
			goto out;
		}
		if (scan_journal(j, &b, &end, err, errlen) == -1)
			goto out;
		j->end = end;
		j->synced_end = end;
	}

	/* Records the snapshot already holds are skipped. */
	for (seq = begin, off = HEADER_SIZE; off < end; seq++) {
		uint32_t len = get32((unsigned char *)b.data + off);

		if (seq == snap_seq)
			keep = off;
		if (seq >= snap_seq &&
		    record_fn(seq, b.data + off + RECORD_HEADER, len, arg) ==
		        -1) {
			snprintf(err, errlen,
			    "%s/journal: record %llu at byte offset %llu rejected",
			    j->dir, (unsigned long long)seq,
			    (unsigned long long)off);
			goto out;
		}
		off += RECORD_HEADER + len;
	}
	/*
	 * A crash after a compaction renamed the snapshot but before it
	 * renamed the new journal: finish it, so appends number on from the
	 * snapshot.
	 */
	if (snap_seq > begin) {
		if (keep == 0)
			keep = end;
		if (start_journal(j, snap_seq, b.data + keep, end - keep) ==
		    -1) {
			snprintf(err, errlen, "%s/journal: %s", j->dir,
			    strerror(errno));
			goto out;
		}
		if (seq < snap_seq)
			seq = snap_seq;
	}

	pthread_mutex_lock(&j->mu);
	j->next_seq = seq;
	j->durable = j->reported = j->batch_last = seq - 1;
	atomic_store(&j->durable_seen, j->durable);
	j->journal_bytes = j->end;
	j->snapshot_bytes = s.len;
	pthread_mutex_unlock(&j->mu);
	if (pthread_create(&j->thread, NULL, flusher, j) != 0) {
		snprintf(err, errlen, "%s: cannot start the journal thread",
		    j->dir);
		goto out;
	}
	j->running = 1;
	r = 0;
out:
	buf_free(&s);
	buf_free(&b);
	return r;
}

const char *
journal_note(const struct journal *j)
{
	return j->note;
}

void
journal_set_durable(struct journal *j, journal_durable_fn fn, void *arg)
{
	pthread_mutex_lock(&j->mu);
	j->durable_fn = fn;
	j->durable_arg = arg;
	pthread_mutex_unlock(&j->mu);
}

uint64_t
journal_append(struct journal *j, const void *p, size_t len)
{
	unsigned char h[RECORD_HEADER];
	uint64_t seq = 0;

	if (len > UINT32_MAX) {
		errno = EMSGSIZE;
		return 0;
	}
	record_header(h, p, (uint32_t)len);
	pthread_mutex_lock(&j->mu);
	/* While writes fail, records still queue, in order: the change is
	 * made already. The daemon refuses new changes (journal_error). */
	if (!j->running || j->stopping)
		errno = EINVAL;
	else if (buf_reserve(&j->queue, sizeof(h) + len) == -1)
		errno = ENOMEM;
	else {
		buf_append(&j->queue, h, sizeof(h));
		buf_append(&j->queue, p, len);
		seq = j->next_seq++;
		/* In batch and none modes a reply's journal_write_now writes
		 * it, or the flusher within BATCH_MS. */
		if (j->mode == JOURNAL_FSYNC_ALWAYS)
			pthread_cond_signal(&j->wake);
	}
	pthread_mutex_unlock(&j->mu);
	return seq;
}

/* batch mode: keeps a copy of what was written until it is synced. */
static void
keep_unsynced(struct journal *j, const struct buf *b, uint64_t last)
{
	if (j->mode != JOURNAL_FSYNC_BATCH)
		return;
	if (buf_append(&j->since_sync, b->data, b->len) < 0)
		log_info("%s/journal: out of memory: records written since the "
		         "last sync are not kept for a failed sync",
		    j->dir);
	j->since_last = last;
}

int
journal_write_now(struct journal *j, uint64_t seq)
{
	struct buf b;
	uint64_t last;
	journal_durable_fn fn;
	void *fa;
	int rc, rounds = 0;

	if (j->mode == JOURNAL_FSYNC_ALWAYS)
		return 0;
	if (atomic_load(&j->durable_seen) >= seq)
		return 1;
	pthread_mutex_lock(&j->mu);
	/* Another thread writing takes microseconds: wait for it rather than
	 * have the reply's connection suspended and resumed. */
	if (j->writing && j->durable < seq) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		while (j->writing && j->durable < seq &&
		    pthread_cond_timedwait(&j->done, &j->mu, &ts) == 0)
			;
	}
	if (j->durable >= seq) {
		pthread_mutex_unlock(&j->mu);
		return 1;
	}
	/* Anything but the plain case is the flusher's. */
	if (!j->running || j->stopping || j->writing || j->err != 0 ||
	    j->batch.len > 0 || j->snap_queued || j->queue.len == 0) {
		pthread_mutex_unlock(&j->mu);
		return 0;
	}
	j->writing = 1;
again:
	b = j->queue;
	j->queue = j->spare;
	j->spare = (struct buf){0};
	last = j->next_seq - 1;
	pthread_mutex_unlock(&j->mu);

	rc = pwrite_all(j->fd, b.data, b.len, j->end);
	if (rc != -1)
		keep_unsynced(j, &b, last); /* outside mu: the writer's */

	pthread_mutex_lock(&j->mu);
	if (rc == -1) {
		/* The flusher writes it again, and says what came of it. */
		if (ftruncate(j->fd, (off_t)j->end) == -1)
			log_debug("%s/journal: cannot cut a failed write: %s",
			    j->dir, strerror(errno));
		j->batch = b;
		j->batch_last = last;
		j->writing = 0;
		pthread_cond_broadcast(&j->done);
		pthread_cond_signal(&j->wake);
		pthread_mutex_unlock(&j->mu);
		return 0;
	}
	j->end += b.len;
	j->journal_bytes = j->end;
	j->unsynced = 1;
	buf_reset(&b);
	buf_free(&j->spare);
	j->spare = b;
	fn = NULL;
	fa = NULL;
	if (last > j->durable) {
		fn = j->durable_fn;
		fa = j->durable_arg;
	}
	if (fn != NULL) {
		pthread_mutex_unlock(&j->mu);
		fn(last, 0, fa);
		pthread_mutex_lock(&j->mu);
	}
	if (last > j->durable) {
		j->durable = last;
		atomic_store(&j->durable_seen, last);
	}
	if (last > j->reported)
		j->reported = last;
	/* What others appended meanwhile: their replies wait for it (group
	 * commit, this thread leading). */
	if (j->queue.len > 0 && rounds++ < 8 && !j->stopping && !j->snap_queued)
		goto again;
	j->writing = 0;
	pthread_cond_broadcast(&j->done);
	if (j->queue.len > 0)
		pthread_cond_signal(&j->wake);
	rc = seq <= j->durable;
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int
journal_wait(struct journal *j, uint64_t seq)
{
	int r = 0;

	pthread_mutex_lock(&j->mu);
	while (j->durable < seq && j->reported < seq && j->running)
		pthread_cond_wait(&j->done, &j->mu);
	if (j->durable < seq) {
		errno = j->err != 0 ? j->err : EINVAL;
		r = -1;
	}
	pthread_mutex_unlock(&j->mu);
	return r;
}

void
journal_retry(struct journal *j)
{
	pthread_mutex_lock(&j->mu);
	/* Their outcome is open again: journal_wait waits for this try. */
	if (j->err != 0)
		j->reported = j->durable;
	j->retry_now = 1;
	pthread_cond_signal(&j->wake);
	pthread_mutex_unlock(&j->mu);
}

const char *
journal_error(struct journal *j, char *buf, size_t len)
{
	const char *s = NULL;
	int e;

	/* Asked before every change: no lock while all is well. */
	if (!atomic_load(&j->failing))
		return NULL;
	pthread_mutex_lock(&j->mu);
	if ((e = j->err) != 0) {
		snprintf(buf, len, "%s", j->error);
		s = buf;
	}
	pthread_mutex_unlock(&j->mu);
	if (s != NULL)
		errno = e;
	return s;
}

void
journal_size(struct journal *j, uint64_t *journal, uint64_t *snapshot)
{
	pthread_mutex_lock(&j->mu);
	*journal = j->journal_bytes;
	*snapshot = j->snapshot_bytes;
	pthread_mutex_unlock(&j->mu);
}

int
journal_compact(struct journal *j, int (*write_fn)(struct buf *out, void *arg),
    void *arg)
{
	static const unsigned char room[RECORD_HEADER];
	struct buf b = {0};
	int busy;

	pthread_mutex_lock(&j->mu);
	busy = !j->running || j->snap_queued;
	pthread_mutex_unlock(&j->mu);
	if (busy) {
		errno = EBUSY;
		return -1;
	}
	if (buf_append(&b, room, sizeof(room)) == -1) {
		errno = ENOMEM;
		return -1;
	}
	if (write_fn(&b, arg) == -1 || b.len - RECORD_HEADER > UINT32_MAX) {
		buf_free(&b);
		return -1;
	}
	record_header((unsigned char *)b.data, b.data + RECORD_HEADER,
	    (uint32_t)(b.len - RECORD_HEADER));
	/*
	 * The caller's lock keeps appends out, so the snapshot holds exactly
	 * the records numbered below next_seq, and those are the queue's
	 * first snap_cut bytes.
	 */
	pthread_mutex_lock(&j->mu);
	if (j->snap_queued) {
		pthread_mutex_unlock(&j->mu);
		buf_free(&b);
		errno = EBUSY;
		return -1;
	}
	buf_free(&j->snap);
	j->snap = b;
	j->snap_seq = j->next_seq;
	j->snap_cut = j->queue.len;
	j->snap_queued = 1;
	pthread_cond_signal(&j->wake);
	pthread_mutex_unlock(&j->mu);
	return 0;
}

/*
 * Writes the batch after the last good record and syncs it. On failure
 * the file is cut back to the last good record, so no half record stays
 * to be read at replay, and the batch is kept to be written again whole:
 * after a failed fsync Linux may have marked the unwritten pages clean,
 * so syncing again would succeed without writing them.
 */
static int
write_batch(struct journal *j, int sync)
{
	if (pwrite_all(j->fd, j->batch.data, j->batch.len, j->end) == -1 ||
	    (sync && fdatasync(j->fd) == -1)) {
		int e = errno;

		if (ftruncate(j->fd, (off_t)j->end) == -1)
			log_debug("%s/journal: cannot cut a failed write: %s",
			    j->dir, strerror(errno));
		errno = e;
		return -1;
	}
	j->end += j->batch.len;
	return 0;
}

/*
 * A compaction: the snapshot replaces the records of the batch before cut
 * and the journal begins anew with those after it. Until the new journal
 * is in place the old one stays valid (replay skips what the snapshot
 * holds), so on failure the whole batch is simply appended to it.
 */
static int
write_compaction(struct journal *j, struct buf *snap, uint64_t seq, size_t cut)
{
	int fd = replace_file(j, "snapshot", snapshot_magic, seq, snap->data,
	    snap->len);

	if (fd != -1) {
		close(fd);
		if (start_journal(j, seq, j->batch.data + cut,
		        j->batch.len - cut) == 0)
			return 0;
	}
	log_info("%s: compaction failed: %s", j->dir, strerror(errno));
	return -1;
}

/*
 * Waits, with mu held, for work: records, a compaction, a retry, stop,
 * or (--fsync batch, with records written and not yet synced) the time
 * of the next sync.
 */
static void
wait_for_work(struct journal *j, int64_t last_sync)
{
	struct timespec ts;
	int64_t until;

	for (;;) {
		int unsynced = j->unsynced && j->mode == JOURNAL_FSYNC_BATCH;

		if (j->writing) {
			pthread_cond_wait(&j->done, &j->mu);
			continue;
		}
		if (j->stopping)
			return;
		if (j->err != 0) {
			until = now_ms() + RETRY_MS;
			while (
			    !j->retry_now && !j->stopping && now_ms() < until) {
				ts.tv_sec = until / 1000;
				ts.tv_nsec = until % 1000 * 1000000;
				pthread_cond_timedwait(&j->wake, &j->mu, &ts);
			}
			j->retry_now = 0;
			return;
		}
		/* A batch a reply's thread could not write is ours now. */
		if (j->queue.len > 0 || j->snap_queued || j->batch.len > 0)
			return;
		if (j->mode == JOURNAL_FSYNC_ALWAYS) {
			pthread_cond_wait(&j->wake, &j->mu);
			continue;
		}
		/* Records nobody wrote, and batch's sync, are due then. */
		until = unsynced ? last_sync + BATCH_MS : now_ms() + BATCH_MS;
		if (now_ms() >= until)
			return;
		ts.tv_sec = until / 1000;
		ts.tv_nsec = until % 1000 * 1000000;
		pthread_cond_timedwait(&j->wake, &j->mu, &ts);
	}
}

static void *
flusher(void *arg)
{
	struct journal *j = arg;
	struct buf snap = {0};
	int64_t last_sync = 0;

	pthread_mutex_lock(&j->mu);
	for (;;) {
		uint64_t snap_seq = 0, last;
		size_t cut;
		int stop, compacted = 0, wrote = 0, e = 0, unsynced;
		int synced = 0, sync_failed = 0;
		journal_durable_fn fn = NULL;

		wait_for_work(j, last_sync);
		j->writing = 1;
		unsynced = j->unsynced;
		stop = j->stopping;
		cut = j->batch.len;
		/* The batch may still hold a failed write's records. */
		if (j->batch.len == 0) {
			struct buf t = j->batch;

			j->batch = j->queue;
			j->queue = t;
			j->batch_last = j->next_seq - 1;
		} else if (buf_append(&j->batch, j->queue.data, j->queue.len) ==
		    0) {
			buf_reset(&j->queue);
			j->batch_last = j->next_seq - 1;
		}
		/* snap_cut counts queue bytes: only right with all of it. */
		if (j->snap_queued && j->queue.len == 0) {
			snap = j->snap;
			j->snap = (struct buf){0};
			snap_seq = j->snap_seq;
			cut += j->snap_cut;
			j->snap_queued = 0;
		}
		pthread_mutex_unlock(&j->mu);

		if (snap_seq > 0)
			compacted =
			    write_compaction(j, &snap, snap_seq, cut) == 0;
		if (compacted) {
			unsynced = 0; /* the new files are synced */
		} else if (j->batch.len > 0) {
			/* always: synced before it is acknowledged; batch and
			 * none: acknowledged once written (the kernel has it),
			 * synced by batch every BATCH_MS. */
			if (write_batch(j, j->mode == JOURNAL_FSYNC_ALWAYS) ==
			    -1) {
				e = errno;
			} else {
				wrote = 1;
				unsynced = j->mode != JOURNAL_FSYNC_ALWAYS;
			}
		}
		if (e == 0 && unsynced &&
		    (stop ||
		        (j->mode == JOURNAL_FSYNC_BATCH &&
		            now_ms() - last_sync >= BATCH_MS))) {
			if (fsync(j->fd) == -1) {
				e = sync_failed = errno;
			} else {
				unsynced = 0;
				synced = 1;
			}
			last_sync = now_ms();
		}
		/* The copy for a failed sync, outside mu (since_sync, like
		 * the batch, is the writer's): not needed once synced. */
		if (synced) {
			j->synced_end = j->end;
			buf_reset(&j->since_sync);
		} else if (wrote) {
			keep_unsynced(j, &j->batch, j->batch_last);
		}

		pthread_mutex_lock(&j->mu);
		j->writing = 0;
		if (sync_failed && j->mode == JOURNAL_FSYNC_BATCH) {
			/* Written again from the copy, at the last synced end;
			 * the batch just written is in the copy. */
			if (ftruncate(j->fd, (off_t)j->synced_end) == -1)
				log_debug("%s/journal: cannot cut: %s", j->dir,
				    strerror(errno));
			j->end = j->synced_end;
			buf_free(&j->batch);
			j->batch = j->since_sync;
			j->since_sync = (struct buf){0};
			j->batch_last = j->since_last;
			wrote = 0; /* keep the batch */
			unsynced = 0;
		}
		j->unsynced = unsynced;
		/* A failure holds up what was appended after the batch, too. */
		last = e == 0 ? j->batch_last : j->next_seq - 1;
		if (compacted)
			j->snapshot_bytes = HEADER_SIZE + snap.len;
		/* Freed, not kept for the next one: it is the whole state
		 * (every value a dispatchd holds), and kept it held it all
		 * once more, twice with the one it was swapped for. */
		buf_free(&snap);
		/* A batch written but not synced is not written again. */
		if (e == 0 || wrote)
			buf_reset(&j->batch);
		if (e == 0) {
			j->err = 0;
			atomic_store(&j->failing, 0);
		} else {
			j->err = e;
			atomic_store(&j->failing, 1);
			snprintf(j->error, sizeof(j->error),
			    "%s/journal: write failed: %s", j->dir,
			    strerror(e));
		}
		j->journal_bytes = j->end;
		/* Each record is reported once when it fails, once when durable. */
		if (e == 0 ? last > j->durable : last > j->reported)
			fn = j->durable_fn;
		if (fn != NULL) {
			void *fa = j->durable_arg;

			pthread_mutex_unlock(&j->mu);
			fn(last, e, fa);
			pthread_mutex_lock(&j->mu);
		}
		/* Only now, so journal_wait returns after the callback has run. */
		/* journal_write_now may have gone further meanwhile. */
		if (e == 0 && last > j->durable) {
			j->durable = last;
			atomic_store(&j->durable_seen, last);
		}
		if (last > j->reported)
			j->reported = last;
		pthread_cond_broadcast(&j->done);
		if (stop)
			break;
	}
	j->running = 0;
	pthread_cond_broadcast(&j->done);
	pthread_mutex_unlock(&j->mu);
	buf_free(&snap);
	return NULL;
}

int
journal_close(struct journal *j)
{
	int r = 0;

	if (j == NULL)
		return 0;
	if (j->running) {
		pthread_mutex_lock(&j->mu);
		j->stopping = 1;
		pthread_cond_signal(&j->wake);
		pthread_mutex_unlock(&j->mu);
		pthread_join(j->thread, NULL);
		r = j->durable + 1 < j->next_seq ? -1 : 0;
	}
	free_journal(j);
	return r;
}
