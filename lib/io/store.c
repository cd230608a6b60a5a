/*
 * store.c: a daemon's records in etcd (store.h): the URL, and the calls
 * the daemon makes. The threads that do the work are in store_follow.c
 * and store_lead.c (store_int.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
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
#include "log.h"
#include "store_int.h"
#include "vec.h"

static void
put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
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
	if (pthread_create(&s->elector, NULL, store_elect, s) != 0) {
		snprintf(err, errlen, "cannot start a thread: %m");
		goto fail;
	}
	if (pthread_create(&s->keeper, NULL, store_keep, s) != 0) {
		snprintf(err, errlen, "cannot start a thread: %m");
		pthread_mutex_lock(&s->mu);
		s->closing = 1;
		pthread_cond_broadcast(&s->cv);
		pthread_mutex_unlock(&s->mu);
		if (write(s->stop[1], "x", 1) < 0 ||
		    write(s->fstop[1], "x", 1) < 0)
			log_info("store: cannot stop: %m");
		pthread_join(s->elector, NULL);
		store_follower_stop(s);
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
	if (atomic_load(&s->leading) && store_lease_fresh(s))
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

	op.key_len = (size_t)store_key(s, k, "replicas/");
	store_key(s, name, "leader");
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
	store_follower_stop(s);
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
