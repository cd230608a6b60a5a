#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "keypath.h"
#include "kvstore.h"
#include "strmap.h"
#include "text.h"

struct kvstore {
	struct kv_limits lim;
	struct strmap *map;
	int64_t rev;
	size_t bytes; /* keys plus values held */
	kv_observer_fn observe;
	void *observe_arg;
	/* History: events[first..len) are kept, oldest first. */
	struct kv_event *events;
	size_t first, len, cap;
	size_t hist_bytes;
	int64_t floor; /* changes at or before this may be gone */
};

static void
entry_free(void *p)
{
	struct kv_entry *e = p;

	if (e == NULL)
		return;
	free(e->key);
	blob_unref(e->val);
	free(e);
}

struct kvstore *
kv_new(const struct kv_limits *lim, kv_observer_fn fn, void *arg)
{
	struct kvstore *kv = calloc(1, sizeof(*kv));

	if (kv == NULL)
		return NULL;
	if ((kv->map = strmap_new()) == NULL) {
		free(kv);
		return NULL;
	}
	kv->lim = *lim;
	if (kv->lim.max_key == 0)
		kv->lim.max_key = KV_MAX_KEY_DEFAULT;
	if (kv->lim.max_value == 0)
		kv->lim.max_value = KV_MAX_VALUE_DEFAULT;
	if (kv->lim.history_events == 0)
		kv->lim.history_events = KV_HISTORY_EVENTS;
	if (kv->lim.history_bytes == 0)
		kv->lim.history_bytes = KV_HISTORY_BYTES;
	kv->observe = fn;
	kv->observe_arg = arg;
	return kv;
}

void
kv_free(struct kvstore *kv)
{
	if (kv == NULL)
		return;
	strmap_free(kv->map, entry_free);
	for (size_t i = kv->first; i < kv->len; i++) {
		free(kv->events[i].key);
		blob_unref(kv->events[i].val);
	}
	free(kv->events);
	free(kv);
}

const char *
kv_event_name(enum kv_event_type t)
{
	switch (t) {
	case KV_EV_PUT: return "put";
	case KV_EV_UPDATE: return "update";
	default: return "delete";
	}
}

enum status
kv_key(const struct kvstore *kv, const char *raw, size_t n, int allow_empty,
    struct buf *out, char *err, size_t errlen)
{
	buf_reset(out);
	if (memchr(raw, '\0', n) != NULL) {
		snprintf(err, errlen, "key contains a NUL byte");
		return ST_INVALID_ARGUMENT;
	}
	if (!text_utf8_valid(raw, n)) {
		snprintf(err, errlen, "key is not valid UTF-8");
		return ST_INVALID_ARGUMENT;
	}
	if (keypath_normalize(raw, n, out) < 0) {
		snprintf(err, errlen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	if (out->len == 0 && !allow_empty) {
		snprintf(err, errlen, "empty key");
		return ST_INVALID_ARGUMENT;
	}
	if (out->len > kv->lim.max_key) {
		snprintf(err, errlen,
		    "key of %zu bytes is over the limit of %zu bytes", out->len,
		    kv->lim.max_key);
		return ST_RESOURCE_EXHAUSTED;
	}
	return ST_OK;
}

int64_t
kv_revision(const struct kvstore *kv)
{
	return kv->rev;
}

size_t
kv_count(const struct kvstore *kv)
{
	return strmap_count(kv->map);
}

size_t
kv_bytes(const struct kvstore *kv)
{
	return kv->bytes;
}

const struct kv_entry *
kv_get(const struct kvstore *kv, const char *key, size_t klen)
{
	return strmap_get(kv->map, key, klen);
}

static void
drop_oldest(struct kvstore *kv)
{
	struct kv_event *ev = &kv->events[kv->first++];

	kv->floor = ev->rev;
	kv->hist_bytes -= ev->klen + ev->vlen;
	free(ev->key);
	blob_unref(ev->val);
}

/*
 * Records a change in the history and tells the observer. The history is a
 * window: the oldest changes fall out when it is over its count or bytes.
 */
static void
record(struct kvstore *kv, enum kv_event_type type, const char *key,
    size_t klen, struct blob *val)
{
	struct kv_event ev = {.rev = kv->rev, .type = type, .klen = klen};

	if (type != KV_EV_DELETE) {
		ev.val = val;
		ev.value = val->data;
		ev.vlen = val->len;
	}
	if ((ev.key = malloc(klen + 1)) == NULL) {
		/* Cannot keep it: make the gap visible to watchers. */
		while (kv->first < kv->len)
			drop_oldest(kv);
		kv->floor = kv->rev;
		return;
	}
	memcpy(ev.key, key, klen);
	ev.key[klen] = '\0';
	while (kv->len > kv->first &&
	    (kv->len - kv->first >= kv->lim.history_events ||
	        kv->hist_bytes + klen + ev.vlen > kv->lim.history_bytes))
		drop_oldest(kv);
	if (kv->first > 0 && (kv->first >= kv->len / 2 || kv->len == kv->cap)) {
		memmove(kv->events, kv->events + kv->first,
		    (kv->len - kv->first) * sizeof(*kv->events));
		kv->len -= kv->first;
		kv->first = 0;
	}
	if (kv->len == kv->cap) {
		size_t cap = kv->cap != 0 ? kv->cap * 2 : 256;
		struct kv_event *p = realloc(kv->events, cap * sizeof(*p));
		if (p == NULL) {
			free(ev.key);
			kv->floor = kv->rev;
			return;
		}
		kv->events = p;
		kv->cap = cap;
	}
	/* The history shares the value's bytes with the store. */
	blob_ref(ev.val);
	kv->events[kv->len++] = ev;
	kv->hist_bytes += klen + ev.vlen;
}

/*
 * Tells the observer about the changes of the operation that made revision
 * rev, once all of them are recorded: a watcher woken by the first key of a
 * directory delete must find the others in the history too.
 */
static void
notify(struct kvstore *kv, int64_t rev)
{
	size_t i = kv->len;

	if (kv->observe == NULL)
		return;
	while (i > kv->first && kv->events[i - 1].rev == rev)
		i--;
	for (; i < kv->len; i++)
		kv->observe(&kv->events[i], kv->observe_arg);
}

static enum status
set_value(struct kvstore *kv, const char *key, size_t klen, struct blob *val,
    struct kv_entry *e, int64_t *rev, char *err, size_t errlen)
{
	int fresh = e == NULL;

	if (val->len > kv->lim.max_value) {
		snprintf(err, errlen,
		    "value of %zu bytes is over the limit of %zu bytes",
		    val->len, kv->lim.max_value);
		return ST_RESOURCE_EXHAUSTED;
	}
	if (fresh) {
		if ((e = calloc(1, sizeof(*e))) == NULL ||
		    (e->key = malloc(klen + 1)) == NULL) {
			free(e);
			goto nomem;
		}
		memcpy(e->key, key, klen);
		e->key[klen] = '\0';
		e->klen = klen;
		if (strmap_put(kv->map, key, klen, e) < 0) {
			entry_free(e);
			goto nomem;
		}
		kv->bytes += klen;
	} else {
		kv->bytes -= e->vlen;
		blob_unref(e->val);
	}
	e->val = blob_ref(val);
	e->value = val->data;
	e->vlen = val->len;
	kv->bytes += val->len;
	e->mod_rev = ++kv->rev;
	if (fresh)
		e->create_rev = e->mod_rev;
	if (rev != NULL)
		*rev = kv->rev;
	record(kv, fresh ? KV_EV_PUT : KV_EV_UPDATE, key, klen, val);
	notify(kv, kv->rev);
	return ST_OK;
nomem:
	snprintf(err, errlen, "out of memory");
	return ST_RESOURCE_EXHAUSTED;
}

/* A value given as bytes: a blob of them for the calls that take one. */
static enum status
with_blob(const void *p, size_t n, struct blob **b, char *err, size_t errlen)
{
	if ((*b = blob_new(p, n)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	return ST_OK;
}

enum status
kv_put_blob(struct kvstore *kv, const char *key, size_t klen, struct blob *val,
    enum kv_mode mode, int64_t *rev, char *err, size_t errlen)
{
	struct kv_entry *e = strmap_get(kv->map, key, klen);

	if (e != NULL && mode == KV_INSERT) {
		snprintf(err, errlen, "key %s already exists", key);
		return ST_ALREADY_EXISTS;
	}
	if (e == NULL && mode == KV_UPDATE) {
		snprintf(err, errlen, "key %s not found", key);
		return ST_NOT_FOUND;
	}
	return set_value(kv, key, klen, val, e, rev, err, errlen);
}

enum status
kv_put(struct kvstore *kv, const char *key, size_t klen, const void *val,
    size_t vlen, enum kv_mode mode, int64_t *rev, char *err, size_t errlen)
{
	struct blob *b;
	enum status st = with_blob(val, vlen, &b, err, errlen);

	if (st != ST_OK)
		return st;
	st = kv_put_blob(kv, key, klen, b, mode, rev, err, errlen);
	blob_unref(b);
	return st;
}

/* Strict decimal int64: optional sign, digits, nothing else. */
static int
parse_int(const char *s, size_t n, int64_t *v)
{
	char tmp[32], *end;
	long long x;

	if (n == 0 || n >= sizeof(tmp))
		return -1;
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	if (tmp[0] != '-' && tmp[0] != '+' && (tmp[0] < '0' || tmp[0] > '9'))
		return -1;
	errno = 0;
	x = strtoll(tmp, &end, 10);
	if (errno != 0 || *end != '\0' || end == tmp)
		return -1;
	*v = x;
	return 0;
}

enum status
kv_add(struct kvstore *kv, const char *key, size_t klen, int64_t delta,
    int64_t *result, int64_t *rev, char *err, size_t errlen)
{
	struct kv_entry *e = strmap_get(kv->map, key, klen);
	int64_t cur = 0, sum;
	struct blob *b;
	enum status st;
	char num[32];

	if (e != NULL && parse_int(e->value, e->vlen, &cur) < 0) {
		snprintf(err, errlen, "value of %s is not an integer", key);
		return ST_FAILED_PRECONDITION;
	}
	if (__builtin_add_overflow(cur, delta, &sum)) {
		snprintf(err, errlen,
		    "adding %" PRId64 " to %s (%" PRId64 ") would overflow",
		    delta, key, cur);
		return ST_FAILED_PRECONDITION;
	}
	snprintf(num, sizeof(num), "%" PRId64, sum);
	*result = sum;
	if ((st = with_blob(num, strlen(num), &b, err, errlen)) != ST_OK)
		return st;
	st = set_value(kv, key, klen, b, e, rev, err, errlen);
	blob_unref(b);
	return st;
}

enum status
kv_cas_blob(struct kvstore *kv, const char *key, size_t klen,
    const void *expect, size_t elen, int absent, struct blob *val, int64_t *rev,
    const struct kv_entry **cur, char *err, size_t errlen)
{
	struct kv_entry *e = strmap_get(kv->map, key, klen);

	*cur = e;
	if (absent && e != NULL) {
		snprintf(err, errlen, "key %s exists", key);
		return ST_FAILED_PRECONDITION;
	}
	if (!absent && e == NULL) {
		snprintf(err, errlen, "key %s not found", key);
		return ST_FAILED_PRECONDITION;
	}
	if (!absent &&
	    (e->vlen != elen || memcmp(e->value, expect, elen) != 0)) {
		snprintf(err, errlen,
		    "value of %s differs from the expected value", key);
		return ST_FAILED_PRECONDITION;
	}
	return set_value(kv, key, klen, val, e, rev, err, errlen);
}

enum status
kv_cas(struct kvstore *kv, const char *key, size_t klen, const void *expect,
    size_t elen, int absent, const void *val, size_t vlen, int64_t *rev,
    const struct kv_entry **cur, char *err, size_t errlen)
{
	struct blob *b;
	enum status st = with_blob(val, vlen, &b, err, errlen);

	if (st != ST_OK) {
		*cur = NULL;
		return st;
	}
	st = kv_cas_blob(kv, key, klen, expect, elen, absent, b, rev, cur, err,
	    errlen);
	blob_unref(b);
	return st;
}

int
kv_matches(const char *prefix, size_t plen, const char *key, size_t klen)
{
	return keypath_under(prefix, plen, key, klen);
}

struct collect {
	const char *prefix;
	size_t plen;
	int self; /* include the prefix key itself */
	const struct kv_entry **v;
	size_t n, cap;
	int nomem;
};

static void
collect_one(const char *key, size_t klen, void *value, void *arg)
{
	struct collect *c = arg;

	if (c->nomem || !kv_matches(c->prefix, c->plen, key, klen))
		return;
	if (!c->self && klen == c->plen && c->plen > 0)
		return;
	if (c->n == c->cap) {
		size_t cap = c->cap != 0 ? c->cap * 2 : 16;
		const struct kv_entry **v = realloc(c->v, cap * sizeof(*v));
		if (v == NULL) {
			c->nomem = 1;
			return;
		}
		c->v = v;
		c->cap = cap;
	}
	c->v[c->n++] = value;
}

static int
by_key(const void *a, const void *b)
{
	const struct kv_entry *x = *(const struct kv_entry *const *)a;
	const struct kv_entry *y = *(const struct kv_entry *const *)b;
	size_t n = x->klen < y->klen ? x->klen : y->klen;
	int c = memcmp(x->key, y->key, n);

	if (c != 0)
		return c;
	return x->klen < y->klen ? -1 : x->klen > y->klen;
}

static size_t
gather(const struct kvstore *kv, const char *prefix, size_t plen, int self,
    const struct kv_entry ***out)
{
	struct collect c = {.prefix = prefix, .plen = plen, .self = self};

	strmap_each(kv->map, collect_one, &c);
	if (c.nomem) {
		free(c.v);
		return (size_t)-1;
	}
	if (c.n > 1)
		qsort(c.v, c.n, sizeof(*c.v), by_key);
	*out = c.v;
	return c.n;
}

size_t
kv_dir(const struct kvstore *kv, const char *prefix, size_t plen,
    const struct kv_entry ***out)
{
	return gather(kv, prefix, plen, 0, out);
}

size_t
kv_delete(struct kvstore *kv, const char *key, size_t klen, int64_t *rev)
{
	const struct kv_entry **v = NULL;
	size_t n;

	/* Gathering first keeps the map unchanged while it is walked. */
	n = gather(kv, key, klen, 1, &v);
	if (n == (size_t)-1 || n == 0) {
		free(v);
		*rev = kv->rev;
		return 0;
	}
	++kv->rev;
	for (size_t i = 0; i < n; i++) {
		struct kv_entry *e = strmap_del(kv->map, v[i]->key, v[i]->klen);
		kv->bytes -= e->klen + e->vlen;
		record(kv, KV_EV_DELETE, e->key, e->klen, NULL);
		entry_free(e);
	}
	free(v);
	*rev = kv->rev;
	notify(kv, kv->rev);
	return n;
}

enum status
kv_changes(const struct kvstore *kv, const char *prefix, size_t plen,
    int64_t since, void (*fn)(const struct kv_event *ev, void *arg), void *arg,
    char *err, size_t errlen)
{
	size_t lo = kv->first, hi = kv->len;

	if (since < kv->floor) {
		snprintf(err, errlen,
		    "changes after revision %" PRId64 " are "
		    "no longer kept (history starts after %" PRId64 "); "
		    "watch again from the current revision %" PRId64,
		    since, kv->floor, kv->rev);
		return ST_FAILED_PRECONDITION;
	}
	/* Revisions only grow along the history: find the first > since. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (kv->events[mid].rev <= since)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < kv->len; i++) {
		const struct kv_event *ev = &kv->events[i];
		if (kv_matches(prefix, plen, ev->key, ev->klen))
			fn(ev, arg);
	}
	return ST_OK;
}
