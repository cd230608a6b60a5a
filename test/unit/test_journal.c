/*
 * The journal in a scratch directory: records come back after a close in
 * every fsync mode, a second opener is turned away, a torn tail is cut,
 * damage in the middle stops replay, compaction keeps everything, and a
 * failed write keeps records, in order, until a retry writes them. And CRC-32C against
 * its published check values.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "crc32c.h"
#include "journal.h"
#include "unit.h"

static void
crc32c_check_values(void)
{
	unsigned char b[48];

	CHECK(crc32c(0, "123456789", 9) == 0xE3069283);
	memset(b, 0, 32);
	CHECK(crc32c(0, b, 32) == 0x8A9136AA);
	memset(b, 0xff, 32);
	CHECK(crc32c(0, b, 32) == 0x62A8AB43); /* RFC 3720, B.4 */
	for (int i = 0; i < 32; i++)
		b[i] = i;
	CHECK(crc32c(0, b, 32) == 0x46DD794E);
	CHECK(crc32c(0, "", 0) == 0);
}

/* Any split, any alignment: the same CRC as in one piece. */
static void
crc32c_chains(void)
{
	char s[] = "xThe quick brown fox jumps over the lazy dog";
	uint32_t whole = crc32c(0, s + 1, strlen(s + 1));

	CHECK(whole == 0x22620404);
	for (size_t k = 0; k <= strlen(s + 1); k++)
		CHECK(crc32c(crc32c(0, s + 1, k), s + 1 + k,
		          strlen(s + 1) - k) == whole);
}

static char *
scratch(void)
{
	const char *t = getenv("TMPDIR");
	char *d = NULL;

	if (asprintf(&d, "%s/journal-XXXXXX", t != NULL ? t : "/tmp") == -1)
		return NULL;
	if (mkdtemp(d) == NULL) {
		free(d);
		return NULL;
	}
	return d;
}

static void
remove_scratch(char *d)
{
	DIR *dp = opendir(d);
	struct dirent *e;
	char path[512];

	while (dp != NULL && (e = readdir(dp)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", d, e->d_name);
		unlink(path);
	}
	if (dp != NULL)
		closedir(dp);
	CHECK(rmdir(d) == 0);
	free(d);
}

static void
path_in(char *out, size_t n, const char *d, const char *name)
{
	snprintf(out, n, "%s/%s", d, name);
}

static off_t
file_size(const char *d, const char *name)
{
	char p[512];
	struct stat st;

	path_in(p, sizeof(p), d, name);
	return stat(p, &st) == 0 ? st.st_size : -1;
}

/* What replay handed back: the snapshot, then "seq:payload\n" lines. */
struct seen {
	struct buf snap;
	struct buf recs;
	int n;
	uint64_t last;
};

static int
on_snapshot(const void *p, size_t len, void *arg)
{
	struct seen *s = arg;

	return buf_append(&s->snap, p, len);
}

static int
on_record(uint64_t seq, const void *p, size_t len, void *arg)
{
	struct seen *s = arg;

	s->n++;
	s->last = seq;
	return buf_printf(&s->recs, "%llu:%.*s\n", (unsigned long long)seq,
	    (int)len, (const char *)p);
}

static void
seen_free(struct seen *s)
{
	buf_free(&s->snap);
	buf_free(&s->recs);
}

/* Opens and replays d into s; NULL (err filled) when either fails. */
static struct journal *
reopen(const char *d, enum journal_fsync mode, struct seen *s, char *err,
    size_t errlen)
{
	struct journal *j = journal_open(d, mode, err, errlen);

	memset(s, 0, sizeof(*s));
	if (j != NULL &&
	    journal_replay(j, on_snapshot, on_record, s, err, errlen) == -1) {
		journal_close(j);
		j = NULL;
	}
	return j;
}

/* Appends "rec-%04d" for i in [from, to): 16 bytes a record on disk. */
static uint64_t
append_range(struct journal *j, int from, int to)
{
	uint64_t seq = 0;
	char p[16];

	for (int i = from; i < to; i++) {
		snprintf(p, sizeof(p), "rec-%04d", i);
		seq = journal_append(j, p, strlen(p));
		CHECK(seq != 0);
	}
	return seq;
}

/* The lines replay should give for "rec-%04d", from..to, at seq from+1. */
static int
has_range(const struct seen *s, int from, int to)
{
	struct buf want = {0};
	int ok;

	for (int i = from; i < to; i++)
		buf_printf(&want, "%d:rec-%04d\n", i + 1, i);
	ok = s->recs.len == want.len &&
	    (want.len == 0 || memcmp(s->recs.data, want.data, want.len) == 0);
	buf_free(&want);
	return ok;
}

static pthread_mutex_t cb_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t cb_durable, cb_failed;
static int cb_err;

static void
on_durable(uint64_t seq, int err, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&cb_mu);
	if (err == 0)
		cb_durable = seq;
	else {
		cb_failed = seq;
		cb_err = err;
	}
	pthread_mutex_unlock(&cb_mu);
}

static void
round_trip_in_every_mode(void)
{
	static const char *modes[] = {"always", "batch", "none"};
	char err[256];

	CHECK(journal_fsync_parse("sometimes") == -1);
	for (int m = 0; m < 3; m++) {
		int mode = journal_fsync_parse(modes[m]);
		char *d = scratch();
		struct journal *j;
		struct seen s;
		uint64_t seq;

		CHECK(d != NULL && mode >= 0);
		if (d == NULL)
			return;
		j = reopen(d, mode, &s, err, sizeof(err));
		CHECK(j != NULL && s.n == 0 && s.snap.len == 0);
		if (j == NULL)
			return;
		CHECK(strcmp(journal_note(j), "") == 0);
		cb_durable = 0;
		journal_set_durable(j, on_durable, NULL);
		seq = append_range(j, 0, 500);
		CHECK(seq == 500);
		CHECK(journal_wait(j, seq) == 0);
		pthread_mutex_lock(&cb_mu);
		CHECK(cb_durable == 500);
		pthread_mutex_unlock(&cb_mu);
		CHECK(journal_append(j, "", 0) == 501);
		CHECK(journal_close(j) == 0);
		seen_free(&s);

		j = reopen(d, mode, &s, err, sizeof(err));
		CHECK(j != NULL && s.n == 501 && s.last == 501);
		CHECK(j != NULL && journal_append(j, "x", 1) == 502);
		journal_close(j);
		seen_free(&s);
		remove_scratch(d);
	}
}

static void
second_open_is_refused(void)
{
	char err[256], want[64], *d = scratch();
	struct journal *j, *k;

	CHECK(d != NULL);
	if (d == NULL)
		return;
	j = journal_open(d, JOURNAL_FSYNC_ALWAYS, err, sizeof(err));
	CHECK(j != NULL);
	k = journal_open(d, JOURNAL_FSYNC_ALWAYS, err, sizeof(err));
	CHECK(k == NULL);
	snprintf(want, sizeof(want), "in use by process %ld", (long)getpid());
	CHECK(strstr(err, d) != NULL && strstr(err, want) != NULL);
	journal_close(j);
	/* Released on close. */
	k = journal_open(d, JOURNAL_FSYNC_ALWAYS, err, sizeof(err));
	CHECK(k != NULL);
	journal_close(k);
	remove_scratch(d);
}

/* Writes n records and closes, for the tests that damage the file. */
static char *
journal_of(int n)
{
	char err[256], *d = scratch();
	struct journal *j;
	struct seen s;

	if (d == NULL)
		return NULL;
	j = reopen(d, JOURNAL_FSYNC_NONE, &s, err, sizeof(err));
	CHECK(j != NULL);
	if (j != NULL) {
		append_range(j, 0, n);
		CHECK(journal_close(j) == 0);
	}
	seen_free(&s);
	return d;
}

static void
torn_tail_is_cut(void)
{
	char err[256], p[512], *d = journal_of(10);
	struct journal *j;
	struct seen s;

	CHECK(d != NULL && file_size(d, "journal") == 24 + 10 * 16);
	if (d == NULL)
		return;
	path_in(p, sizeof(p), d, "journal");
	CHECK(truncate(p, 24 + 9 * 16 + 5) == 0);
	j = reopen(d, JOURNAL_FSYNC_ALWAYS, &s, err, sizeof(err));
	CHECK(j != NULL && s.n == 9 && has_range(&s, 0, 9));
	if (j != NULL) {
		CHECK(strstr(journal_note(j), "cut 5 bytes") != NULL);
		CHECK(strstr(journal_note(j), "offset 168") != NULL);
		CHECK(file_size(d, "journal") == 24 + 9 * 16);
		CHECK(append_range(j, 9, 10) == 10);
		journal_close(j);
	}
	seen_free(&s);
	j = reopen(d, JOURNAL_FSYNC_ALWAYS, &s, err, sizeof(err));
	CHECK(j != NULL && has_range(&s, 0, 10));
	CHECK(j != NULL && strcmp(journal_note(j), "") == 0);
	journal_close(j);
	seen_free(&s);
	remove_scratch(d);
}

static void
flip(const char *d, off_t off)
{
	char p[512], c;
	int fd;

	path_in(p, sizeof(p), d, "journal");
	fd = open(p, O_RDWR);
	CHECK(fd != -1 && pread(fd, &c, 1, off) == 1);
	c ^= 0x20;
	CHECK(pwrite(fd, &c, 1, off) == 1);
	close(fd);
}

static void
corruption_in_the_middle_stops_replay(void)
{
	char err[256], *d = journal_of(10);
	struct journal *j;
	struct seen s;

	if (d == NULL)
		return;
	flip(d, 24 + 4 * 16 + 10); /* in the fifth record's payload */
	j = reopen(d, JOURNAL_FSYNC_ALWAYS, &s, err, sizeof(err));
	CHECK(j == NULL);
	CHECK(strstr(err, "journal: corrupt record at byte offset 88") != NULL);
	CHECK(strstr(err, d) != NULL);
	/* Nothing was handed over: no partial state. */
	CHECK(s.n == 0);
	CHECK(file_size(d, "journal") == 24 + 10 * 16);
	seen_free(&s);

	/* The same damage in the last record is a torn tail. */
	flip(d, 24 + 4 * 16 + 10);
	flip(d, 24 + 9 * 16 + 10);
	j = reopen(d, JOURNAL_FSYNC_ALWAYS, &s, err, sizeof(err));
	CHECK(j != NULL && s.n == 9);
	journal_close(j);
	seen_free(&s);

	/* And a bad header is an error. */
	flip(d, 0);
	j = reopen(d, JOURNAL_FSYNC_ALWAYS, &s, err, sizeof(err));
	CHECK(j == NULL && strstr(err, "bad header") != NULL);
	seen_free(&s);
	remove_scratch(d);
}

static int
write_state(struct buf *out, void *arg)
{
	return buf_printf(out, "state after %d records", *(int *)arg);
}

static void
compaction_keeps_everything(void)
{
	char err[256], p[512], *d = scratch();
	struct journal *j;
	struct seen s;
	uint64_t jb, sb, before;
	int n = 1000;
	FILE *f;
	struct buf old = {0};

	if (d == NULL)
		return;
	j = reopen(d, JOURNAL_FSYNC_BATCH, &s, err, sizeof(err));
	CHECK(j != NULL);
	if (j == NULL)
		return;
	CHECK(journal_wait(j, append_range(j, 0, n)) == 0);
	journal_size(j, &before, &sb);
	CHECK(before == 24 + 1000 * 16 && sb == 0);
	/* Keep the journal as it was, to fake a crash mid-compaction. */
	path_in(p, sizeof(p), d, "journal");
	f = fopen(p, "rb");
	CHECK(f != NULL && buf_reserve(&old, before) == 0);
	if (f != NULL) {
		old.len = fread(old.data, 1, before, f);
		fclose(f);
	}

	CHECK(journal_compact(j, write_state, &n) == 0);
	/* Appended before the thread wrote the snapshot: kept too. */
	CHECK(journal_wait(j, append_range(j, n, n + 5)) == 0);
	journal_size(j, &jb, &sb);
	CHECK(jb == 24 + 5 * 16);
	CHECK(sb == 24 + 8 + strlen("state after 1000 records"));
	CHECK(journal_close(j) == 0);
	seen_free(&s);

	j = reopen(d, JOURNAL_FSYNC_BATCH, &s, err, sizeof(err));
	CHECK(j != NULL && s.snap.len > 0 &&
	    strcmp(s.snap.data, "state after 1000 records") == 0);
	CHECK(j != NULL && s.n == 5 &&
	    strncmp(s.recs.data, "1001:rec-1000\n", 14) == 0);
	CHECK(j != NULL && journal_append(j, "y", 1) == 1006);
	journal_close(j);
	seen_free(&s);

	/*
	 * A crash after the snapshot was renamed but before the new journal
	 * was: the old journal's records are all in the snapshot, and appends
	 * number on from it.
	 */
	f = fopen(p, "wb");
	CHECK(f != NULL && fwrite(old.data, 1, old.len, f) == old.len);
	if (f != NULL)
		fclose(f);
	j = reopen(d, JOURNAL_FSYNC_BATCH, &s, err, sizeof(err));
	CHECK(j != NULL && s.snap.len > 0 && s.n == 0);
	/* Before the append: the batch thread may write it at any time. */
	CHECK(file_size(d, "journal") == 24);
	CHECK(j != NULL && journal_append(j, "z", 1) == 1001);
	journal_close(j);
	seen_free(&s);
	buf_free(&old);
	remove_scratch(d);
}

/* Writes past bytes in any file fail with EFBIG: a full disk, say. */
struct write_limit {
	struct rlimit old;
	void (*xfsz)(int);
};

static void
limit_writes(struct write_limit *l, rlim_t bytes)
{
	struct rlimit tiny;

	l->xfsz = signal(SIGXFSZ, SIG_IGN);
	getrlimit(RLIMIT_FSIZE, &l->old);
	tiny = l->old;
	tiny.rlim_cur = bytes;
	setrlimit(RLIMIT_FSIZE, &tiny);
}

static void
unlimit_writes(struct write_limit *l)
{
	setrlimit(RLIMIT_FSIZE, &l->old);
	signal(SIGXFSZ, l->xfsz);
}

/*
 * batch and none: a reply's thread writes the queue itself; when that
 * write fails the journal's thread takes the records over, reports the
 * failure and writes them once there is room, instead of leaving them.
 */
static void
failed_inline_write_is_taken_over(void)
{
	static const enum journal_fsync modes[] = {JOURNAL_FSYNC_BATCH,
	    JOURNAL_FSYNC_NONE};
	char err[256], why[256], *d;
	struct journal *j;
	struct seen s;
	struct write_limit lim;
	uint64_t seq;
	int now, wait_r, wait_errno;
	char big[100];

	for (size_t m = 0; m < 2; m++) {
		if ((d = scratch()) == NULL)
			return;
		j = reopen(d, modes[m], &s, err, sizeof(err));
		CHECK(j != NULL);
		if (j == NULL)
			return;
		CHECK(journal_write_now(j, append_range(j, 0, 3)) == 1);
		limit_writes(&lim, 24 + 3 * 16 + 50);
		memset(big, 'b', sizeof(big));
		seq = journal_append(j, big, sizeof(big));
		now = journal_write_now(j, seq);
		wait_r = journal_wait(j, seq);
		wait_errno = errno;
		CHECK(journal_error(j, why, sizeof(why)) != NULL);
		unlimit_writes(&lim);
		CHECK(seq == 4 && now == 0);
		CHECK(wait_r == -1 && wait_errno == EFBIG);
		CHECK(file_size(d, "journal") == 24 + 3 * 16);
		journal_retry(j);
		CHECK(journal_wait(j, seq) == 0);
		CHECK(journal_error(j, why, sizeof(why)) == NULL);
		CHECK(journal_close(j) == 0);
		seen_free(&s);
		j = reopen(d, modes[m], &s, err, sizeof(err));
		CHECK(j != NULL && s.n == 4 && s.last == 4);
		journal_close(j);
		seen_free(&s);
		remove_scratch(d);
	}
}

static void
failed_write_keeps_records_until_retried(void)
{
	char err[256], *d = scratch();
	struct journal *j;
	struct seen s;
	struct write_limit lim;
	uint64_t seq, queued, after;
	int wait_r, wait_errno;
	off_t size_during;
	const char *msg;
	char big[100], why[256];

	if (d == NULL)
		return;
	j = reopen(d, JOURNAL_FSYNC_ALWAYS, &s, err, sizeof(err));
	CHECK(j != NULL);
	if (j == NULL)
		return;
	cb_durable = cb_failed = 0;
	cb_err = 0;
	journal_set_durable(j, on_durable, NULL);
	CHECK(journal_wait(j, append_range(j, 0, 3)) == 0);

	/* Writes past 50 more bytes fail with EFBIG: a full disk, say. */
	limit_writes(&lim, 24 + 3 * 16 + 50);
	memset(big, 'b', sizeof(big));
	seq = journal_append(j, big, sizeof(big));
	wait_r = journal_wait(j, seq);
	wait_errno = errno;
	/* Made meanwhile (a timeout, say): it waits its turn. */
	queued = journal_append(j, "later", 5);
	size_during = file_size(d, "journal");
	msg = journal_error(j, why, sizeof(why));
	unlimit_writes(&lim);

	CHECK(seq == 4);
	CHECK(wait_r == -1 && wait_errno == EFBIG);
	CHECK(queued == 5);
	/* No half record left behind. */
	CHECK(size_during == 24 + 3 * 16);
	CHECK(msg != NULL && strstr(msg, "write failed") != NULL);
	pthread_mutex_lock(&cb_mu);
	CHECK(cb_durable == 3 && cb_failed == 4 && cb_err == EFBIG);
	pthread_mutex_unlock(&cb_mu);

	/* Room again: the retry writes both, in order. */
	journal_retry(j);
	CHECK(journal_wait(j, queued) == 0);
	CHECK(journal_error(j, why, sizeof(why)) == NULL);
	after = journal_append(j, "ok", 2);
	CHECK(after == 6 && journal_wait(j, after) == 0);
	pthread_mutex_lock(&cb_mu);
	CHECK(cb_durable == 6);
	pthread_mutex_unlock(&cb_mu);
	CHECK(journal_close(j) == 0);
	seen_free(&s);

	j = reopen(d, JOURNAL_FSYNC_ALWAYS, &s, err, sizeof(err));
	CHECK(j != NULL && s.n == 6 && s.last == 6);
	CHECK(j != NULL && strcmp(journal_note(j), "") == 0);
	journal_close(j);
	seen_free(&s);
	remove_scratch(d);
}

UNIT_TESTS(crc32c_tests) = {
    {"crc32c: published check values", crc32c_check_values},
    {"crc32c: split anywhere, same crc", crc32c_chains},
    {NULL, NULL},
};

UNIT_TESTS(journal_tests) = {
    {"journal: records come back in every fsync mode",
        round_trip_in_every_mode},
    {"journal: a second opener of the directory is refused",
        second_open_is_refused},
    {"journal: a torn tail is cut, what came before kept", torn_tail_is_cut},
    {"journal: corruption in the middle stops replay with its offset",
        corruption_in_the_middle_stops_replay},
    {"journal: compaction keeps everything and shrinks the journal",
        compaction_keeps_everything},
    {"journal: a failed write of a reply's thread is taken over",
        failed_inline_write_is_taken_over},
    {"journal: after a failed write records wait, in order, for a retry",
        failed_write_keeps_records_until_retried},
    {NULL, NULL},
};
