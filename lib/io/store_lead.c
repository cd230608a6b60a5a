/*
 * store_lead.c: the elector, which campaigns, takes over once elected and
 * writes the stream and the snapshots in fenced transactions; and the
 * keeper, which keeps the lease alive and says where this replica is
 * (store_int.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "crc32c.h"
#include "duration.h"
#include "etcd_kv.h"
#include "etcd_lease.h"
#include "log.h"
#include "store_int.h"
#include "wallclock.h"

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
				store_restart(s,
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
		if (store_pause(s, 100))
			return -1;
	}
}

/* Writes the snapshot queued, then its place, and deletes what it holds:
 * 0, or -1 (deposed). */
static int
snapshot_write(struct store *s)
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

		put.key_len = (size_t)store_key(s, k,
		    "snapshot/%016" PRIx64 "/%08zx", off, i);
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

		ops[0].key_len = (size_t)store_key(s, k, "meta");
		ops[0].value_len = strlen(meta);
		ops[1].key_len = (size_t)store_key(s, lo, "log/");
		ops[1].end_len =
		    (size_t)store_key(s, hi, "log/%016" PRIx64, off);
		ops[2].key_len =
		    (size_t)store_key(s, k2, "snapshot/%016" PRIx64 "/", old);
		ops[2].end_len =
		    (size_t)store_key(s, k3, "snapshot/%016" PRIx64 "0", old);
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
			if (snapshot_write(s) < 0)
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
			store_restart(s, "out of memory");
			break;
		}
		{
			struct etcd_op put = {.kind = ETCD_OP_PUT,
			    .key = k,
			    .value = w.data,
			    .value_len = n};

			put.key_len =
			    (size_t)store_key(s, k, "log/%016" PRIx64, off);
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

	store_follower_stop(s);
	while ((st = store_catch_up(s, s->ew, &rev)) != ST_OK) {
		if (st == ST_INTERNAL || st == ST_CANCELLED) {
			store_restart(s,
			    "this replica cannot read the stream in "
			    "etcd to take over");
			return -1;
		}
		if (!store_lease_fresh(s) || store_pause(s, 200)) {
			store_restart(s,
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

		del.key_len =
		    (size_t)store_key(s, lo, "log/%016" PRIx64, s->applied);
		del.end_len = (size_t)store_key(s, hi, "log0");
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

void *
store_elect(void *arg)
{
	struct store *s = arg;
	char name[KEY_MAX];
	int said = 0;

	while (!atomic_load(&s->deposed)) {
		enum status st = store_load(s);

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
		if (store_pause(s, 500))
			return NULL;
	}
	atomic_store(&s->loaded, 1);
	log_info("store: %s read up to record %" PRIu64 " (offset %" PRIu64
	         "), following",
	    s->prefix, s->next_seq - 1, s->applied);
	if (pthread_create(&s->follower, NULL, store_follow, s) == 0)
		s->follower_on = 1;
	else
		log_info("store: cannot start the follower: %m");
	pthread_mutex_lock(&s->mu);
	while (s->address[0] == '\0' && !s->closing)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	store_key(s, name, "leader");
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
		if (store_pause(s, 500))
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
	store_key(s, k, "replicas/%016" PRIx64, (uint64_t)lease);
	if (etcd_put(s->ek, k, strlen(k), v, strlen(v), lease,
	        duration_now_ms() + s->ttl_ms, NULL) != ST_OK)
		log_debug("store: %s", etcd_error(s->ek));
	free(v);
}

void *
store_keep(void *arg)
{
	struct store *s = arg;
	char name[KEY_MAX];

	store_key(s, name, "leader");
	for (int first = 1; first || !store_pause(s, s->ttl_ms / 3);
	     first = 0) {
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
				store_restart(s,
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
