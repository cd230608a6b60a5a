/*
 * store_follow.c: the store's keys; the snapshot and the stream read from
 * etcd and applied through the daemon's replay hooks; the follower that
 * watches the stream while this replica stands by; leaving, when the
 * stream is not what was applied or the lease ended (store_int.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"
#include "duration.h"
#include "etcd_kv.h"
#include "etcd_watch.h"
#include "log.h"
#include "store_int.h"

/* ---- keys ---- */

/* ---- keys ---- */

int
store_key(const struct store *s, char *out, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(out, KEY_MAX, "%s/", s->prefix);

	va_start(ap, fmt);
	n += vsnprintf(out + n, KEY_MAX - (size_t)n, fmt, ap);
	va_end(ap);
	return n;
}

static uint32_t
get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}

/* ---- applying the stream (under the daemon's lock) ---- */

/*
 * Applies the whole records at the front of s->tail: 0, or -1 (a record
 * is damaged, or the daemon could not apply it).
 */
static int
apply_tail(struct store *s)
{
	const unsigned char *p = (const unsigned char *)s->tail.data;
	size_t at = 0;
	int rc = 0;

	while (s->tail.len - at >= HDR) {
		uint32_t len = get32(p + at);

		if (s->tail.len - at - HDR < len)
			break;
		if (crc32c(crc32c(0, p + at, 4), p + at + HDR, len) !=
		    get32(p + at + 4)) {
			log_info("store: the record at offset %" PRIu64
			         " is damaged (bad CRC)",
			    s->applied + at);
			rc = -1;
			break;
		}
		if (s->h.record(s->next_seq, p + at + HDR, len, s->h.arg) < 0) {
			log_info("store: record %" PRIu64
			         " cannot be applied: %s",
			    s->next_seq, s->h.cause != NULL ? s->h.cause : "");
			rc = -1;
			break;
		}
		s->next_seq++;
		at += HDR + len;
	}
	s->applied += at;
	memmove(s->tail.data, s->tail.data + at, s->tail.len - at);
	s->tail.len -= at;
	return rc;
}

/*
 * The key of the stream at off, with value p: appended to what is there,
 * over the tail past off (a new leader's), or out of place (-1).
 */
static int
take_chunk(struct store *s, uint64_t off, const void *p, size_t n)
{
	uint64_t end = s->applied + s->tail.len;

	if (off < s->applied || off > end) {
		log_info("store: the stream has a key at offset %" PRIu64
		         " where this replica has %" PRIu64
		         " applied and %zu bytes after",
		    off, s->applied, s->tail.len);
		return -1;
	}
	s->tail.len = (size_t)(off - s->applied);
	if (buf_append(&s->tail, p, n) < 0)
		return -1;
	return apply_tail(s);
}

/* The stream's key at off was deleted: a record half written is gone. */
static void
cut_chunk(struct store *s, uint64_t off)
{
	if (off >= s->applied && off < s->applied + s->tail.len)
		s->tail.len = (size_t)(off - s->applied);
}

/* The offset a key under PREFIX/log/ names; -1 if it names none. */
static int
log_offset(const struct store *s, const char *k, size_t n, uint64_t *off)
{
	size_t pl = strlen(s->prefix) + 5;
	char hex[17], *end;

	if (n != pl + 16 || strncmp(k + pl - 5, "/log/", 5) != 0)
		return -1;
	memcpy(hex, k + pl, 16);
	hex[16] = '\0';
	*off = strtoull(hex, &end, 16);
	return *end == '\0' ? 0 : -1;
}

/* ---- reading etcd ---- */

/*
 * Every key from k up to end (not included), as of rev (0: now, and then
 * the revision the first page was read at, in *rev), page by page into
 * fn: ST_OK, or the failure.
 */
static enum status
range_all(struct etcd *e, const char *k, const char *end, int64_t *rev,
    int (*fn)(void *arg, const struct etcd_kv *kv), void *arg)
{
	char from[KEY_MAX + 1];
	size_t flen = strlen(k);

	memcpy(from, k, flen + 1);
	for (;;) {
		struct etcd_op op = {.kind = ETCD_OP_RANGE,
		    .key = from,
		    .key_len = flen,
		    .end = end,
		    .end_len = strlen(end),
		    .limit = PAGE,
		    .revision = *rev};
		struct etcd_kvs r;
		enum status st =
		    etcd_range(e, &op, duration_now_ms() + 30000, &r);

		if (st != ST_OK)
			return st;
		if (*rev == 0)
			*rev = r.revision;
		for (size_t i = 0; i < r.n; i++)
			if (fn(arg, &r.kv[i]) < 0) {
				etcd_kvs_free(&r);
				return ST_INTERNAL;
			}
		if (!r.more || r.n == 0) {
			etcd_kvs_free(&r);
			return ST_OK;
		}
		/* The next page begins just past the last key. */
		if (r.kv[r.n - 1].key_len >= KEY_MAX) {
			etcd_kvs_free(&r);
			return ST_INTERNAL;
		}
		memcpy(from, r.kv[r.n - 1].key, r.kv[r.n - 1].key_len);
		from[r.kv[r.n - 1].key_len] = '\0';
		flen = r.kv[r.n - 1].key_len + 1;
		etcd_kvs_free(&r);
	}
}

/* The stream's keys read, to apply. */
struct gather {
	struct store *s;
	struct buf bytes; /* the snapshot's, or the stream's from off */
	uint64_t off;     /* the stream's: where bytes begin */
	uint64_t next;    /* the offset the next key must have */
	int bad;
};

static int
gather_log(void *arg, const struct etcd_kv *kv)
{
	struct gather *g = arg;
	uint64_t off;

	if (log_offset(g->s, kv->key, kv->key_len, &off) < 0 ||
	    off != g->next) {
		log_info("store: %.*s is out of place in the stream (want "
		         "offset %" PRIu64 ")",
		    (int)kv->key_len, kv->key, g->next);
		g->bad = 1;
		return -1;
	}
	g->next += kv->value_len;
	return buf_append(&g->bytes, kv->value, kv->value_len);
}

static int
gather_snap(void *arg, const struct etcd_kv *kv)
{
	struct gather *g = arg;

	return buf_append(&g->bytes, kv->value, kv->value_len);
}

/*
 * Reads the stream's keys from s->applied on (after what is applied;
 * what the tail held is read again) and applies them: ST_OK, or why not.
 * rev: as for range_all.
 */
enum status
store_catch_up(struct store *s, struct etcd *e, int64_t *rev)
{
	struct gather g = {.s = s, .off = s->applied, .next = s->applied};
	char from[KEY_MAX], end[KEY_MAX];
	enum status st;
	int rc;

	store_key(s, from, "log/%016" PRIx64, s->applied);
	store_key(s, end, "log0"); /* '0' follows '/': past every log/ key */
	st = range_all(e, from, end, rev, gather_log, &g);
	if (st != ST_OK) {
		buf_free(&g.bytes);
		return g.bad ? ST_INTERNAL : st;
	}
	s->h.lock(s->h.arg);
	s->tail.len = 0;
	rc = take_chunk(s, g.off, g.bytes.data != NULL ? g.bytes.data : "",
	    g.bytes.len);
	s->h.unlock(s->h.arg);
	buf_free(&g.bytes);
	return rc < 0 ? ST_INTERNAL : ST_OK;
}

/*
 * Reads the snapshot (PREFIX/meta says where) and the stream after it,
 * and applies them, as of one revision (s->rev): ST_OK, or why not.
 */
enum status
store_load(struct store *s)
{
	char k[KEY_MAX], end[KEY_MAX];
	struct etcd_op op = {.kind = ETCD_OP_RANGE, .key = k};
	struct etcd_kvs r;
	unsigned long long off = 0, seq = 1, chunks = 0, bytes = 0;
	unsigned crc = 0;
	int64_t rev = 0;
	enum status st;

	op.key_len = (size_t)store_key(s, k, "meta");
	if ((st = etcd_range(s->ew, &op, duration_now_ms() + 30000, &r)) !=
	    ST_OK)
		return st;
	rev = r.revision;
	if (r.n == 1 &&
	    sscanf(r.kv[0].value, "muster-store 1 %llx %llu %llu %llu %x", &off,
	        &seq, &chunks, &bytes, &crc) != 5) {
		log_info("store: %s is not a snapshot's place: %.*s", k,
		    (int)r.kv[0].value_len, r.kv[0].value);
		etcd_kvs_free(&r);
		return ST_INTERNAL;
	}
	etcd_kvs_free(&r);
	if (chunks > 0) {
		struct gather g = {.s = s};
		int rc;

		store_key(s, k, "snapshot/%016llx/", off);
		store_key(s, end, "snapshot/%016llx0", off);
		st = range_all(s->ew, k, end, &rev, gather_snap, &g);
		if (st == ST_OK &&
		    (g.bytes.len != bytes ||
		        crc32c(0, g.bytes.data, g.bytes.len) != crc)) {
			log_info("store: the snapshot at offset %llx is "
			         "damaged (%zu bytes of %llu)",
			    off, g.bytes.len, bytes);
			st = ST_INTERNAL;
		}
		if (st != ST_OK) {
			buf_free(&g.bytes);
			return st;
		}
		s->h.lock(s->h.arg);
		rc = s->h.snapshot(g.bytes.data, g.bytes.len, s->h.arg);
		s->h.unlock(s->h.arg);
		buf_free(&g.bytes);
		if (rc < 0)
			return ST_INTERNAL;
	}
	s->applied = off;
	s->next_seq = seq;
	s->snap_off = off;
	if ((st = store_catch_up(s, s->ew, &rev)) != ST_OK)
		return st;
	s->rev = rev;
	return ST_OK;
}

/* ---- leaving ---- */

/* Once: this replica must start again as a standby. */
void
store_restart(struct store *s, const char *why)
{
	uint64_t last = atomic_load(&s->last);

	pthread_mutex_lock(&s->mu);
	atomic_store(&s->leading, 0);
	atomic_store(&s->deposed, 1);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	if (atomic_exchange(&s->restarting, 1))
		return;
	/* Replies held for changes not in etcd fail: outcome unknown. */
	if (last > 0 && s->h.durable != NULL)
		s->h.durable(last, ENOLINK, s->h.durable_arg);
	s->h.restart(why, s->h.arg);
}

/*
 * Whether the lease is surely alive: a keepalive sent less than the TTL
 * ago, with a quarter of it to spare, held. While it is not, the leader
 * serves nothing (store_leads) and its writes wait; it steps down only
 * once etcd says the lease ended, or refuses a write. etcd choosing a new
 * leader of its own takes a second or two, and extends every lease.
 */
int
store_lease_fresh(struct store *s)
{
	return duration_now_ms() - atomic_load(&s->lease_ok) <
	    s->ttl_ms - s->ttl_ms / 4;
}

/* Waits ms, or less when s stops: 1 if it stopped. */
int
store_pause(struct store *s, int64_t ms)
{
	struct pollfd p = {.fd = s->stop[0], .events = POLLIN};

	return poll(&p, 1, (int)ms) > 0;
}

/* ---- the follower ---- */

static int
on_event(void *arg, const struct etcd_event *ev)
{
	struct store *s = arg;
	uint64_t off;
	int rc = 0;

	if (ev->kind == ETCD_EV_COMPACTED) {
		store_restart(s,
		    "etcd compacted the changes this standby had not "
		    "read yet");
		return 1;
	}
	if (ev->kind == ETCD_EV_PROGRESS) {
		s->rev = ev->revision;
		return 0;
	}
	if (log_offset(s, ev->kv->key, ev->kv->key_len, &off) < 0)
		return 0;
	s->h.lock(s->h.arg);
	if (ev->kind == ETCD_EV_PUT)
		rc = take_chunk(s, off, ev->kv->value, ev->kv->value_len);
	else
		cut_chunk(s, off);
	s->rev = ev->revision;
	s->h.unlock(s->h.arg);
	if (rc < 0) {
		store_restart(s,
		    "the stream in etcd is not what this standby "
		    "applied");
		return 1;
	}
	return 0;
}

void *
store_follow(void *arg)
{
	struct store *s = arg;
	char k[KEY_MAX];

	store_key(s, k, "log/");
	while (!atomic_load(&s->deposed)) {
		struct etcd_watch_opts w = {.key = k,
		    .key_len = strlen(k),
		    .prefix = 1,
		    .start = s->rev + 1,
		    .fn = on_event,
		    .arg = s};
		enum status st = etcd_watch(s->ef, &w, ETCD_NO_DEADLINE);

		if (st == ST_OK || st == ST_CANCELLED ||
		    st == ST_FAILED_PRECONDITION)
			break;
		log_debug("store: watch: %s", etcd_error(s->ef));
		struct pollfd p = {.fd = s->fstop[0], .events = POLLIN};
		if (poll(&p, 1, 500) > 0)
			break;
	}
	return NULL;
}

void
store_follower_stop(struct store *s)
{
	if (!s->follower_on)
		return;
	if (write(s->fstop[1], "x", 1) < 0)
		log_info("store: cannot stop the follower: %m");
	pthread_join(s->follower, NULL);
	s->follower_on = 0;
}
