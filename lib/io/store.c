/*
 * store.c: a daemon's records in etcd (store.h). Three threads, each with
 * its own etcd client: the elector (reads the stream, campaigns, and once
 * elected writes), the keeper (keeps the lease alive, learns who leads,
 * says where this replica is) and the follower (watches the stream while
 * standing by). Lock order: the daemon's lock, then s->mu.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "crc32c.h"
#include "duration.h"
#include "etcd_election.h"
#include "etcd_kv.h"
#include "etcd_lease.h"
#include "etcd_watch.h"
#include "log.h"
#include "store.h"
#include "vec.h"
#include "wallclock.h"

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

/* ---- keys ---- */

static int key(const struct store *s, char *out, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
key(const struct store *s, char *out, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(out, KEY_MAX, "%s/", s->prefix);

	va_start(ap, fmt);
	n += vsnprintf(out + n, KEY_MAX - (size_t)n, fmt, ap);
	va_end(ap);
	return n;
}

static void
put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static uint32_t
get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}

/* ---- the URL ---- */

int
store_parse_url(const char *url, struct store_config *c, char *buf,
    size_t buflen, char *pbuf, size_t pblen, char *err, size_t errlen)
{
	const char *scheme, *p, *slash;
	size_t used = 0;

	if (strncmp(url, "etcd://", 7) == 0) {
		scheme = "http://";
		p = url + 7;
	} else if (strncmp(url, "etcds://", 8) == 0) {
		scheme = "https://";
		p = url + 8;
	} else {
		snprintf(err, errlen,
		    "%s is not etcd://HOST:PORT[,HOST:PORT...]/PREFIX", url);
		return -1;
	}
	slash = strchr(p, '/');
	if (slash == NULL || slash == p || slash[1] == '\0') {
		snprintf(err, errlen,
		    "%s names no members or no prefix (etcd://HOST:PORT/PREFIX)",
		    url);
		return -1;
	}
	buf[0] = '\0';
	while (p < slash) {
		const char *comma = memchr(p, ',', (size_t)(slash - p));
		size_t n = (size_t)((comma != NULL ? comma : slash) - p);
		int w;

		if (n == 0) {
			snprintf(err, errlen, "%s has an empty member", url);
			return -1;
		}
		w = snprintf(buf + used, buflen - used, "%s%s%.*s",
		    used > 0 ? "," : "", scheme, (int)n, p);
		if (w < 0 || (size_t)w >= buflen - used) {
			snprintf(err, errlen, "%s has too many members", url);
			return -1;
		}
		used += (size_t)w;
		p += n + (comma != NULL);
	}
	/* The prefix as given, its trailing '/'s cut. */
	size_t plen = strlen(slash);
	while (plen > 1 && slash[plen - 1] == '/')
		plen--;
	if (plen >= pblen || plen < 2) {
		snprintf(err, errlen, "%s: the prefix is empty or too long",
		    url);
		return -1;
	}
	memcpy(pbuf, slash, plen);
	pbuf[plen] = '\0';
	c->etcd.endpoints = buf;
	c->prefix = pbuf;
	return 0;
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
static enum status
catch_up(struct store *s, struct etcd *e, int64_t *rev)
{
	struct gather g = {.s = s, .off = s->applied, .next = s->applied};
	char from[KEY_MAX], end[KEY_MAX];
	enum status st;
	int rc;

	key(s, from, "log/%016" PRIx64, s->applied);
	key(s, end, "log0"); /* '0' follows '/': past every log/ key */
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
static enum status
load(struct store *s)
{
	char k[KEY_MAX], end[KEY_MAX];
	struct etcd_op op = {.kind = ETCD_OP_RANGE, .key = k};
	struct etcd_kvs r;
	unsigned long long off = 0, seq = 1, chunks = 0, bytes = 0;
	unsigned crc = 0;
	int64_t rev = 0;
	enum status st;

	op.key_len = (size_t)key(s, k, "meta");
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

		key(s, k, "snapshot/%016llx/", off);
		key(s, end, "snapshot/%016llx0", off);
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
	if ((st = catch_up(s, s->ew, &rev)) != ST_OK)
		return st;
	s->rev = rev;
	return ST_OK;
}

/* ---- leaving ---- */

/* Once: this replica must start again as a standby. */
static void
restart(struct store *s, const char *why)
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
static int
lease_fresh(struct store *s)
{
	return duration_now_ms() - atomic_load(&s->lease_ok) <
	    s->ttl_ms - s->ttl_ms / 4;
}

/* Waits ms, or less when s stops: 1 if it stopped. */
static int
pause_ms(struct store *s, int64_t ms)
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
		restart(s,
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
		restart(s,
		    "the stream in etcd is not what this standby "
		    "applied");
		return 1;
	}
	return 0;
}

static void *
follow(void *arg)
{
	struct store *s = arg;
	char k[KEY_MAX];

	key(s, k, "log/");
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

static void
follower_stop(struct store *s)
{
	if (!s->follower_on)
		return;
	if (write(s->fstop[1], "x", 1) < 0)
		log_info("store: cannot stop the follower: %m");
	pthread_join(s->follower, NULL);
	s->follower_on = 0;
}

/* ---- the leader's writes ---- */

/* Says, once per episode, that etcd cannot be written. */
static void
failing(struct store *s, const char *what)
{
	int first;
	uint64_t last = atomic_load(&s->last);

	pthread_mutex_lock(&s->mu);
	first = !s->failing;
	s->failing = 1;
	snprintf(s->why, sizeof(s->why), "%s: %s", what, etcd_error(s->ew));
	pthread_mutex_unlock(&s->mu);
	if (first) {
		log_info("store: etcd cannot be written (%s); changes are "
		         "refused until it can",
		    s->why);
		s->h.durable(last, ENOLINK, s->h.durable_arg);
	}
}

static void
written(struct store *s)
{
	pthread_mutex_lock(&s->mu);
	if (s->failing)
		log_info("store: etcd is written again");
	s->failing = 0;
	pthread_mutex_unlock(&s->mu);
}

/*
 * One fenced transaction: compares the leadership (and, with fresh, that
 * key k is new), then makes ops. Tried again while etcd cannot answer
 * and the lease holds. 0 once made (with fresh, k holding value counts:
 * an attempt whose reply was lost made it); -1: deposed (or stopping).
 */
static int
fenced(struct store *s, const char *k, int fresh, const void *value,
    size_t vlen, const struct etcd_op *ops, size_t nops)
{
	struct etcd_cmp cmp[2];
	struct etcd_op other = {.kind = ETCD_OP_RANGE,
	    .key = k,
	    .key_len = strlen(k)};
	struct etcd_txn t = {.cmp = cmp,
	    .ncmp = fresh ? 2 : 1,
	    .then = ops,
	    .nthen = nops,
	    .otherwise = fresh ? &other : NULL,
	    .notherwise = fresh ? 1 : 0};
	int64_t since = 0; /* the first failed try */

	etcd_leader_cmp(&s->lead, &cmp[0]);
	cmp[1] = (struct etcd_cmp){.key = k,
	    .key_len = strlen(k),
	    .target = ETCD_CMP_CREATE,
	    .result = ETCD_EQ,
	    .number = 0};
	for (;;) {
		struct etcd_txn_result r;
		enum status st;

		if (atomic_load(&s->deposed))
			return -1;
		st = etcd_txn(s->ew, &t, duration_now_ms() + s->ttl_ms, &r);
		if (st == ST_OK) {
			/* Refused: deposed, unless the key holds value (a
			 * try whose reply was lost made it). */
			int made = r.succeeded ||
			    (fresh && r.n == 1 && r.res[0].range.n == 1 &&
			        r.res[0].range.kv[0].value_len == vlen &&
			        memcmp(r.res[0].range.kv[0].value, value,
			            vlen) == 0);

			etcd_txn_result_free(&r);
			if (!made) {
				restart(s,
				    "this replica no longer leads: "
				    "another took over in etcd");
				return -1;
			}
			written(s);
			return 0;
		}
		if (st == ST_CANCELLED)
			return -1;
		/* Another member may take it at once (the compare makes a
		 * second try safe): replies wait, and new changes are refused,
		 * only once tries have failed for a lease's time. */
		if (since == 0)
			since = duration_now_ms();
		else if (duration_now_ms() - since >= s->ttl_ms)
			failing(s, "a write");
		if (pause_ms(s, 100))
			return -1;
	}
}

/* Writes the snapshot queued, then its place, and deletes what it holds:
 * 0, or -1 (deposed). */
static int
store_snapshot(struct store *s)
{
	struct buf b;
	uint64_t off, seq, old;
	char k[KEY_MAX], k2[KEY_MAX], k3[KEY_MAX], meta[160];
	size_t i, nchunks;

	pthread_mutex_lock(&s->mu);
	b = s->snapq;
	memset(&s->snapq, 0, sizeof(s->snapq));
	off = s->snapq_off;
	seq = s->snapq_seq;
	s->snap_queued = 0;
	old = s->snap_off;
	pthread_mutex_unlock(&s->mu);
	nchunks = b.len == 0 ? 1 : (b.len + CHUNK - 1) / CHUNK;
	for (i = 0; i < nchunks; i++) {
		size_t at = i * (size_t)CHUNK,
		       m = b.len - at < CHUNK ? b.len - at : CHUNK;
		struct etcd_op put = {.kind = ETCD_OP_PUT,
		    .key = k,
		    .value = b.data != NULL ? b.data + at : "",
		    .value_len = m};

		put.key_len =
		    (size_t)key(s, k, "snapshot/%016" PRIx64 "/%08zx", off, i);
		if (fenced(s, k, 0, NULL, 0, &put, 1) < 0) {
			buf_free(&b);
			return -1;
		}
	}
	snprintf(meta, sizeof(meta),
	    "muster-store 1 %" PRIx64 " %" PRIu64 " %zu %zu %08x", off, seq,
	    nchunks, b.len, crc32c(0, b.data != NULL ? b.data : "", b.len));
	{
		char lo[KEY_MAX], hi[KEY_MAX];
		struct etcd_op ops[3] = {{.kind = ETCD_OP_PUT,
		                             .key = k,
		                             .value = meta},
		    {.kind = ETCD_OP_DELETE, .key = lo, .end = hi},
		    {.kind = ETCD_OP_DELETE, .key = k2, .end = k3}};

		ops[0].key_len = (size_t)key(s, k, "meta");
		ops[0].value_len = strlen(meta);
		ops[1].key_len = (size_t)key(s, lo, "log/");
		ops[1].end_len = (size_t)key(s, hi, "log/%016" PRIx64, off);
		ops[2].key_len =
		    (size_t)key(s, k2, "snapshot/%016" PRIx64 "/", old);
		ops[2].end_len =
		    (size_t)key(s, k3, "snapshot/%016" PRIx64 "0", old);
		if (fenced(s, k, 0, NULL, 0, ops, old != off ? 3 : 2) < 0) {
			buf_free(&b);
			return -1;
		}
	}
	log_debug("store: snapshot of %zu bytes at offset %" PRIu64, b.len,
	    off);
	pthread_mutex_lock(&s->mu);
	s->snap_off = off;
	pthread_mutex_unlock(&s->mu);
	buf_free(&b);
	return 0;
}

/*
 * The next key's bytes (under s->mu): whole records, up to CHUNK and up
 * to a snapshot's place; or the first CHUNK of one record larger.
 */
static size_t
next_chunk(struct store *s)
{
	uint64_t limit = s->pend_off + CHUNK;
	size_t i = s->ends_head, n = 0;

	if (s->snap_queued && s->snapq_off > s->pend_off &&
	    s->snapq_off < limit)
		limit = s->snapq_off;
	while (i < s->nends && s->ends[i].off <= limit)
		n = (size_t)(s->ends[i++].off - s->pend_off);
	if (n == 0)
		n = s->pend.len < CHUNK ? s->pend.len : CHUNK;
	return n;
}

/* Writes the stream while this replica leads. */
static void
write_loop(struct store *s)
{
	struct buf w = {0};
	char k[KEY_MAX];

	for (;;) {
		uint64_t off, seq = 0;
		size_t n;
		int rc;

		pthread_mutex_lock(&s->mu);
		while (!s->closing && !atomic_load(&s->deposed) &&
		    s->pend.len == 0 &&
		    !(s->snap_queued && s->snapq_off <= s->pend_off)) {
			s->writer_idle = 1;
			pthread_cond_wait(&s->cv, &s->mu);
			s->writer_idle = 0;
		}
		if (atomic_load(&s->deposed)) {
			pthread_mutex_unlock(&s->mu);
			break;
		}
		if (s->snap_queued && s->snapq_off <= s->pend_off) {
			pthread_mutex_unlock(&s->mu);
			if (store_snapshot(s) < 0)
				break;
			continue;
		}
		if (s->pend.len == 0) { /* closing, all written */
			pthread_cond_broadcast(&s->cv);
			pthread_mutex_unlock(&s->mu);
			break;
		}
		n = next_chunk(s);
		off = s->pend_off;
		buf_reset(&w);
		rc = buf_append(&w, s->pend.data, n);
		pthread_mutex_unlock(&s->mu);
		if (rc < 0) {
			restart(s, "out of memory");
			break;
		}
		{
			struct etcd_op put = {.kind = ETCD_OP_PUT,
			    .key = k,
			    .value = w.data,
			    .value_len = n};

			put.key_len = (size_t)key(s, k, "log/%016" PRIx64, off);
			if (fenced(s, k, 1, w.data, n, &put, 1) < 0)
				break;
		}
		pthread_mutex_lock(&s->mu);
		memmove(s->pend.data, s->pend.data + n, s->pend.len - n);
		s->pend.len -= n;
		s->pend_off += n;
		while (s->ends_head < s->nends &&
		    s->ends[s->ends_head].off <= s->pend_off)
			seq = s->ends[s->ends_head++].seq;
		if (s->ends_head == s->nends)
			s->ends_head = s->nends = 0;
		s->applied = s->pend_off;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		if (seq > 0)
			s->h.durable(seq, 0, s->h.durable_arg);
	}
	buf_free(&w);
}

/* ---- the elector ---- */

/* Takes over once elected: 0, or -1 (restarted). */
static int
take_over(struct store *s)
{
	int64_t rev = 0;
	enum status st;

	follower_stop(s);
	while ((st = catch_up(s, s->ew, &rev)) != ST_OK) {
		if (st == ST_INTERNAL || st == ST_CANCELLED) {
			restart(s,
			    "this replica cannot read the stream in "
			    "etcd to take over");
			return -1;
		}
		if (!lease_fresh(s) || pause_ms(s, 200)) {
			restart(s,
			    "elected, but etcd could not be read before "
			    "the lease ran out");
			return -1;
		}
		rev = 0;
	}
	s->rev = rev;
	if (s->tail.len > 0) {
		/* A record the last leader did not finish: never answered. */
		char lo[KEY_MAX], hi[KEY_MAX];
		struct etcd_op del = {.kind = ETCD_OP_DELETE,
		    .key = lo,
		    .end = hi};

		del.key_len = (size_t)key(s, lo, "log/%016" PRIx64, s->applied);
		del.end_len = (size_t)key(s, hi, "log0");
		log_info("store: cutting off %zu bytes of a record the last "
		         "leader did not finish",
		    s->tail.len);
		if (fenced(s, lo, 0, NULL, 0, &del, 1) < 0)
			return -1;
		s->tail.len = 0;
	}
	s->h.lock(s->h.arg);
	pthread_mutex_lock(&s->mu);
	s->pend_off = s->applied;
	atomic_store(&s->last, s->next_seq - 1);
	s->since = wall_now_ms();
	snprintf(s->leader, sizeof(s->leader), "%s", s->address);
	atomic_store(&s->leading, 1);
	pthread_mutex_unlock(&s->mu);
	/* What it applied is in etcd already: replies need not wait for it. */
	if (s->next_seq > 1)
		s->h.durable(s->next_seq - 1, 0, s->h.durable_arg);
	s->h.elected(s->h.arg);
	s->h.unlock(s->h.arg);
	log_info("store: leading, at record %" PRIu64 " (offset %" PRIu64
	         ") of %s",
	    s->next_seq - 1, s->applied, s->prefix);
	return 0;
}

static void *
elect(void *arg)
{
	struct store *s = arg;
	char name[KEY_MAX];
	int said = 0;

	while (!atomic_load(&s->deposed)) {
		enum status st = load(s);

		if (st == ST_OK)
			break;
		if (st == ST_CANCELLED)
			return NULL;
		if (st == ST_INTERNAL) {
			/* Reading them again would fail again. */
			s->h.fatal(s->h.cause != NULL && s->h.cause[0] != '\0' ?
			        s->h.cause :
			        "the records in etcd cannot be applied",
			    s->h.durable_arg);
			return NULL;
		}
		if (!said++)
			log_info("store: waiting for etcd: %s",
			    etcd_error(s->ew));
		if (pause_ms(s, 500))
			return NULL;
	}
	atomic_store(&s->loaded, 1);
	log_info("store: %s read up to record %" PRIu64 " (offset %" PRIu64
	         "), following",
	    s->prefix, s->next_seq - 1, s->applied);
	if (pthread_create(&s->follower, NULL, follow, s) == 0)
		s->follower_on = 1;
	else
		log_info("store: cannot start the follower: %m");
	pthread_mutex_lock(&s->mu);
	while (s->address[0] == '\0' && !s->closing)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	key(s, name, "leader");
	while (!atomic_load(&s->deposed)) {
		int64_t id = 0, ttl = 0, sent = duration_now_ms();
		enum status st = etcd_lease_grant(s->ew, s->ttl_ms / 1000,
		    ETCD_NO_DEADLINE, &id, &ttl);

		if (st == ST_OK) {
			atomic_store(&s->lease_ok, sent);
			atomic_store(&s->lease, id);
			st = etcd_campaign(s->ew, name, strlen(name), id,
			    s->address, strlen(s->address), ETCD_NO_DEADLINE,
			    &s->lead);
		}
		if (st == ST_OK)
			break;
		if (st == ST_CANCELLED)
			return NULL;
		log_info("store: campaign: %s", etcd_error(s->ew));
		if (pause_ms(s, 500))
			return NULL;
	}
	if (atomic_load(&s->deposed) || take_over(s) < 0)
		return NULL;
	write_loop(s);
	return NULL;
}

/* ---- the keeper ---- */

static void
say_where(struct store *s, int64_t lease)
{
	char k[KEY_MAX];
	json_t *o;
	char *v;
	int lead = atomic_load(&s->leading);

	pthread_mutex_lock(&s->mu);
	o = json_pack("{s:s,s:s,s:I,s:I,s:I}", "address", s->address, "role",
	    lead ? "leader" : "standby", "applied",
	    (json_int_t)(lead ? s->pend_off : s->applied), "records",
	    (json_int_t)(lead ? atomic_load(&s->last) : s->next_seq - 1),
	    "since", (json_int_t)(lead ? s->since : 0));
	pthread_mutex_unlock(&s->mu);
	if (o == NULL || (v = json_dumps(o, JSON_COMPACT)) == NULL) {
		json_decref(o);
		return;
	}
	json_decref(o);
	key(s, k, "replicas/%016" PRIx64, (uint64_t)lease);
	if (etcd_put(s->ek, k, strlen(k), v, strlen(v), lease,
	        duration_now_ms() + s->ttl_ms, NULL) != ST_OK)
		log_debug("store: %s", etcd_error(s->ek));
	free(v);
}

static void *
keep(void *arg)
{
	struct store *s = arg;
	char name[KEY_MAX];

	key(s, name, "leader");
	for (int first = 1; first || !pause_ms(s, s->ttl_ms / 3); first = 0) {
		int64_t lease = atomic_load(&s->lease), ttl,
		        sent = duration_now_ms();
		struct etcd_kv kv;
		enum status st;

		if (atomic_load(&s->deposed))
			break;
		if (lease != 0) {
			st = etcd_lease_keepalive(s->ek, lease,
			    sent + s->ttl_ms / 2, &ttl);
			if (st == ST_OK)
				atomic_store(&s->lease_ok, sent);
			else if (st == ST_NOT_FOUND && atomic_load(&s->leading))
				restart(s,
				    "this replica's lease in etcd "
				    "ended");
			else
				log_debug("store: keepalive: %s",
				    etcd_error(s->ek));
			say_where(s, lease);
		}
		if (!atomic_load(&s->leading) &&
		    etcd_leader(s->ek, name, strlen(name),
		        duration_now_ms() + s->ttl_ms, &kv) == ST_OK) {
			pthread_mutex_lock(&s->mu);
			snprintf(s->leader, sizeof(s->leader), "%.*s",
			    (int)kv.value_len, kv.value);
			pthread_mutex_unlock(&s->mu);
			etcd_kv_free(&kv);
		}
	}
	return NULL;
}

/* ---- the daemon's calls ---- */

struct store *
store_open(const struct store_config *c, const struct store_hooks *h, char *err,
    size_t errlen)
{
	struct store *s = calloc(1, sizeof(*s));

	if (s == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->c = *c;
	s->h = *h;
	s->stop[0] = s->stop[1] = s->fstop[0] = s->fstop[1] = -1;
	s->ttl_ms = (c->ttl_s > 0 ? c->ttl_s : STORE_TTL_S) * 1000;
	s->max_bytes = c->max_bytes > 0 ? c->max_bytes : MAX_DEFAULT;
	s->next_seq = 1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->smu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if ((s->prefix = strdup(c->prefix)) == NULL ||
	    pipe2(s->stop, O_CLOEXEC) < 0 || pipe2(s->fstop, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "cannot make the store: %m");
		goto fail;
	}
	if ((s->ew = etcd_new(&c->etcd, err, errlen)) == NULL ||
	    (s->ek = etcd_new(&c->etcd, err, errlen)) == NULL ||
	    (s->ef = etcd_new(&c->etcd, err, errlen)) == NULL ||
	    (s->es = etcd_new(&c->etcd, err, errlen)) == NULL)
		goto fail;
	etcd_set_cancel(s->ew, s->stop[0]);
	etcd_set_cancel(s->ek, s->stop[0]);
	etcd_set_cancel(s->ef, s->fstop[0]);
	if (pthread_create(&s->elector, NULL, elect, s) != 0) {
		snprintf(err, errlen, "cannot start a thread: %m");
		goto fail;
	}
	if (pthread_create(&s->keeper, NULL, keep, s) != 0) {
		snprintf(err, errlen, "cannot start a thread: %m");
		pthread_mutex_lock(&s->mu);
		s->closing = 1;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		if (write(s->stop[1], "x", 1) < 0 ||
		    write(s->fstop[1], "x", 1) < 0)
			log_info("store: cannot stop: %m");
		pthread_join(s->elector, NULL);
		follower_stop(s);
		goto fail;
	}
	return s;
fail:
	etcd_free(s->ew);
	etcd_free(s->ek);
	etcd_free(s->ef);
	etcd_free(s->es);
	for (int i = 0; i < 2; i++) {
		if (s->stop[i] >= 0)
			close(s->stop[i]);
		if (s->fstop[i] >= 0)
			close(s->fstop[i]);
	}
	free(s->prefix);
	free(s);
	return NULL;
}

void
store_campaign(struct store *s, const char *address)
{
	pthread_mutex_lock(&s->mu);
	snprintf(s->address, sizeof(s->address), "%s", address);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

uint64_t
store_append(struct store *s, const void *p, size_t len)
{
	unsigned char h[HDR];
	uint64_t seq;

	if (!atomic_load(&s->leading) || len > UINT32_MAX) {
		errno = atomic_load(&s->leading) ? EFBIG : ENOLINK;
		return 0;
	}
	put32(h, (uint32_t)len);
	put32(h + 4, crc32c(crc32c(0, h, 4), p, len));
	pthread_mutex_lock(&s->mu);
	if (vec_grow(&s->ends, &s->capends, s->nends + 1, sizeof(*s->ends)) <
	        0 ||
	    buf_reserve(&s->pend, HDR + len) < 0) {
		pthread_mutex_unlock(&s->mu);
		errno = ENOMEM;
		return 0;
	}
	buf_append(&s->pend, h, HDR);
	buf_append(&s->pend, p, len);
	seq = s->next_seq++;
	s->ends[s->nends++] =
	    (struct rec_end){.off = s->pend_off + s->pend.len, .seq = seq};
	atomic_store(&s->last, seq);
	if (s->writer_idle)
		pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	return seq;
}

uint64_t
store_last(struct store *s)
{
	return atomic_load(&s->last);
}

int
store_leads(struct store *s, char *leader, size_t len)
{
	if (atomic_load(&s->leading) && lease_fresh(s))
		return 1;
	pthread_mutex_lock(&s->mu);
	snprintf(leader, len, "%s",
	    strcmp(s->leader, s->address) == 0 ? "" : s->leader);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

const char *
store_error(struct store *s, char *buf, size_t len)
{
	const char *r = NULL;

	pthread_mutex_lock(&s->mu);
	if (s->failing) {
		snprintf(buf, len, "%s", s->why);
		r = buf;
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

void
store_compact(struct store *s, int (*write_fn)(struct buf *out, void *arg),
    void *arg)
{
	struct buf b = {0};

	if (!atomic_load(&s->leading))
		return;
	pthread_mutex_lock(&s->mu);
	if (s->snap_queued ||
	    s->pend_off + s->pend.len - s->snap_off <= s->max_bytes) {
		pthread_mutex_unlock(&s->mu);
		return;
	}
	pthread_mutex_unlock(&s->mu);
	if (write_fn(&b, arg) < 0) {
		log_info("store: a snapshot could not be made");
		buf_free(&b);
		return;
	}
	pthread_mutex_lock(&s->mu);
	buf_free(&s->snapq);
	s->snapq = b;
	s->snapq_off = s->pend_off + s->pend.len;
	s->snapq_seq = s->next_seq;
	s->snap_queued = 1;
	if (s->writer_idle)
		pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

int
store_flush(struct store *s, int64_t ms)
{
	int64_t until = duration_now_ms() + ms;
	int rc = 0;

	pthread_mutex_lock(&s->mu);
	while (atomic_load(&s->leading) && s->pend.len > 0) {
		struct timespec ts;

		if (duration_now_ms() >= until) {
			rc = -1;
			break;
		}
		ts = duration_realtime_in(50);
		pthread_cond_timedwait(&s->cv, &s->mu, &ts);
	}
	if (!atomic_load(&s->leading) && s->pend.len > 0)
		rc = -1;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int
store_status(struct store *s, struct buf *out, char *err, size_t errlen)
{
	char k[KEY_MAX], name[KEY_MAX], leader[300];
	struct etcd_op op = {.kind = ETCD_OP_RANGE, .key = k, .prefix = 1};
	struct etcd_kvs r = {0};
	struct etcd_kv lk = {0};
	json_t *o, *reps;
	int64_t top = -1;
	enum status st;
	char *text;

	op.key_len = (size_t)key(s, k, "replicas/");
	key(s, name, "leader");
	pthread_mutex_lock(&s->smu);
	st = etcd_range(s->es, &op, duration_now_ms() + 5000, &r);
	if (st == ST_OK)
		st = etcd_leader(s->es, name, strlen(name),
		    duration_now_ms() + 5000, &lk);
	if (st != ST_OK && st != ST_NOT_FOUND) {
		snprintf(err, errlen, "etcd: %s", etcd_error(s->es));
		pthread_mutex_unlock(&s->smu);
		etcd_kvs_free(&r);
		return -1;
	}
	pthread_mutex_unlock(&s->smu);
	snprintf(leader, sizeof(leader), "%.*s", (int)lk.value_len,
	    lk.value != NULL ? lk.value : "");
	etcd_kv_free(&lk);
	reps = json_array();
	for (size_t i = 0; i < r.n; i++) {
		json_t *v =
		    json_loadb(r.kv[i].value, r.kv[i].value_len, 0, NULL);
		json_int_t rec = 0;

		if (!json_is_object(v)) {
			json_decref(v);
			continue;
		}
		const char *role = "";

		json_unpack(v, "{s?s,s?I}", "role", &role, "records", &rec);
		if (strcmp(role, "leader") == 0 && rec > top)
			top = rec;
		json_array_append_new(reps, v);
	}
	etcd_kvs_free(&r);
	for (size_t i = 0; top >= 0 && i < json_array_size(reps); i++) {
		json_t *v = json_array_get(reps, i);
		json_int_t rec = 0;

		json_unpack(v, "{s?I}", "records", &rec);
		json_object_set_new(v, "behind",
		    json_integer(rec < top ? top - rec : 0));
	}
	o = json_pack("{s:s,s:s,s:s,s:o}", "prefix", s->prefix, "leader",
	    leader, "role",
	    atomic_load(&s->leading)    ? "leader" :
	        atomic_load(&s->loaded) ? "standby" :
	                                  "starting",
	    "replicas", reps);
	if (o == NULL || (text = json_dumps(o, JSON_COMPACT)) == NULL) {
		json_decref(o);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	json_decref(o);
	buf_puts(out, text);
	free(text);
	return 0;
}

void
store_close(struct store *s)
{
	int64_t lease;

	if (s == NULL)
		return;
	if (atomic_load(&s->leading))
		store_flush(s, 3000);
	pthread_mutex_lock(&s->mu);
	s->closing = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	if (write(s->stop[1], "x", 1) < 0 || write(s->fstop[1], "x", 1) < 0)
		log_info("store: cannot stop: %m");
	pthread_join(s->elector, NULL);
	pthread_join(s->keeper, NULL);
	follower_stop(s);
	/* Giving the lease back ends the leadership at once: a standby
	 * takes over now rather than a TTL from now. */
	if ((lease = atomic_load(&s->lease)) != 0) {
		etcd_set_cancel(s->ek, -1);
		if (etcd_lease_revoke(s->ek, lease, duration_now_ms() + 1000) !=
		        ST_OK &&
		    atomic_load(&s->leading))
			log_info("store: the lease could not be given back: %s",
			    etcd_error(s->ek));
	}
	etcd_free(s->ew);
	etcd_free(s->ek);
	etcd_free(s->ef);
	etcd_free(s->es);
	for (int i = 0; i < 2; i++) {
		close(s->stop[i]);
		close(s->fstop[i]);
	}
	etcd_leader_free(&s->lead);
	buf_free(&s->tail);
	buf_free(&s->pend);
	buf_free(&s->snapq);
	free(s->ends);
	free(s->prefix);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->smu);
	pthread_cond_destroy(&s->cv);
	free(s);
}
