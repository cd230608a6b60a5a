#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "keypath.h"
#include "kvstore.h"
#include "rec.h"
#include "skiplist.h"
#include "strmap.h"
#include "text.h"
#include "vec.h"

struct kvstore {
	struct kv_limits lim;
	struct strmap *map;
	struct skiplist *order; /* the same entries, by key */
	int64_t rev;
	unsigned long refused; /* changes refused at a limit */
	size_t bytes;          /* keys plus values held */
	kv_observer_fn observe;
	void *observe_arg;
	/* History: events[first..len) are kept, oldest first. */
	struct kv_event *events;
	size_t first, len, cap;
	size_t hist_bytes;
	int64_t floor;  /* changes at or before this may be gone */
	int64_t origin; /* the revision the store started at */
	kv_journal_fn journal;
	void *journal_arg;
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
	if ((kv->map = strmap_new()) == NULL ||
	    (kv->order = skl_new()) == NULL) {
		strmap_free(kv->map, NULL);
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
	if (kv->lim.max_keys == 0)
		kv->lim.max_keys = KV_MAX_KEYS_DEFAULT;
	if (kv->lim.max_bytes == 0)
		kv->lim.max_bytes = KV_MAX_BYTES_DEFAULT;
	kv->observe = fn;
	kv->observe_arg = arg;
	return kv;
}

void
kv_free(struct kvstore *kv)
{
	if (kv == NULL)
		return;
	skl_free(kv->order);
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
	/* A newline in a key is a phantom key in every line-oriented
	 * listing (a script piping `ls` into `rm` acts on it). */
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)raw[i];
		if (c < 0x20 || c == 0x7f) {
			snprintf(err, errlen,
			    "key contains a control character (byte 0x%02x)",
			    c);
			return ST_INVALID_ARGUMENT;
		}
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

void
kv_set_origin(struct kvstore *kv, int64_t rev)
{
	kv->rev = kv->floor = kv->origin = rev;
}

int64_t
kv_origin(const struct kvstore *kv)
{
	return kv->origin;
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

unsigned long
kv_refused(const struct kvstore *kv)
{
	return kv->refused;
}

const struct kv_limits *
kv_limits(const struct kvstore *kv)
{
	return &kv->lim;
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
	if (vec_grow(&kv->events, &kv->cap, kv->len + 1, sizeof(*kv->events)) <
	    0) {
		free(ev.key);
		kv->floor = kv->rev;
		return;
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
	if (fresh && strmap_count(kv->map) >= kv->lim.max_keys) {
		kv->refused++;
		snprintf(err, errlen,
		    "the store holds %zu keys, its limit (coordd "
		    "--max-keys): delete some first",
		    strmap_count(kv->map));
		return ST_RESOURCE_EXHAUSTED;
	}
	if (kv->bytes - (fresh ? 0 : e->vlen) + (fresh ? klen : 0) + val->len >
	    kv->lim.max_bytes) {
		kv->refused++;
		snprintf(err, errlen,
		    "the store holds %zu bytes; %zu more would pass its limit "
		    "of %zu bytes (coordd --max-store-bytes)",
		    kv->bytes, val->len + (fresh ? klen : 0),
		    kv->lim.max_bytes);
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
		if (skl_insert(kv->order, e->key, klen, e) < 0) {
			strmap_del(kv->map, key, klen);
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
	if (kv->journal != NULL)
		kv->journal(kv->rev, key, klen, val, kv->journal_arg);
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

/* Whether key lies under prefix/ (everything under ""). */
static int
below(const char *prefix, size_t plen, const char *key, size_t klen)
{
	return plen == 0 ||
	    (klen > plen + 1 && key[plen] == '/' &&
	        memcmp(key, prefix, plen) == 0);
}

/* The first entry under prefix/ after key after (NULL: the first). */
static struct skl_node *
first_below(const struct kvstore *kv, const char *prefix, size_t plen,
    const char *after, size_t alen)
{
	struct skl_node *n;
	char *start;

	if ((start = malloc(plen + 2)) == NULL)
		return NULL;
	memcpy(start, prefix, plen);
	start[plen] = '/';
	/* Everything under prefix/ sorts from "prefix/" on. */
	if (after != NULL &&
	    skl_compare(after, alen, start, plen > 0 ? plen + 1 : 0) >= 0) {
		n = skl_seek(kv->order, after, alen);
		if (n != NULL && skl_compare(n->key, n->klen, after, alen) == 0)
			n = skl_next(n);
	} else {
		n = skl_seek(kv->order, start, plen > 0 ? plen + 1 : 0);
	}
	free(start);
	return n;
}

size_t
kv_dir(const struct kvstore *kv, const char *prefix, size_t plen,
    const struct kv_dir_page *page, const struct kv_entry ***out, int *more)
{
	const struct kv_entry **v = NULL;
	size_t n = 0, cap = 0, bytes = 0;
	size_t max_n = page != NULL && page->max_entries > 0 ?
	    page->max_entries :
	    (size_t)-1;
	size_t max_bytes =
	    page != NULL && page->max_bytes > 0 ? page->max_bytes : (size_t)-1;
	struct skl_node *x = first_below(kv, prefix, plen,
	    page != NULL ? page->after : NULL, page != NULL ? page->alen : 0);

	*more = 0;
	for (; x != NULL && below(prefix, plen, x->key, x->klen);
	     x = skl_next(x)) {
		const struct kv_entry *e = x->value;

		/* A page holds one entry at least, whatever its size. */
		if (n > 0 && (n >= max_n || bytes + e->vlen > max_bytes)) {
			*more = 1;
			break;
		}
		if (vec_grow(&v, &cap, n + 1, sizeof(*v)) < 0) {
			free(v);
			return (size_t)-1;
		}
		v[n++] = e;
		bytes += e->vlen;
	}
	*out = v;
	return n;
}

size_t
kv_delete(struct kvstore *kv, const char *key, size_t klen, int64_t *rev)
{
	const struct kv_entry **v = NULL;
	const struct kv_entry *self = strmap_get(kv->map, key, klen);
	struct kv_dir_page all = {0};
	size_t n;
	int more;

	/* Gathering first keeps the index unchanged while it is walked. */
	n = kv_dir(kv, key, klen, &all, &v, &more);
	if (n == (size_t)-1) {
		*rev = kv->rev;
		return 0;
	}
	if (n == 0 && self == NULL) {
		free(v);
		*rev = kv->rev;
		return 0;
	}
	++kv->rev;
	if (kv->journal != NULL)
		kv->journal(kv->rev, key, klen, NULL, kv->journal_arg);
	for (size_t i = 0; i <= n; i++) {
		const struct kv_entry *x = i < n ? v[i] : self;
		struct kv_entry *e;

		if (x == NULL)
			continue;
		skl_delete(kv->order, x->key, x->klen);
		e = strmap_del(kv->map, x->key, x->klen);
		kv->bytes -= e->klen + e->vlen;
		record(kv, KV_EV_DELETE, e->key, e->klen, NULL);
		entry_free(e);
	}
	free(v);
	*rev = kv->rev;
	notify(kv, kv->rev);
	return n + (self != NULL);
}

int
kv_matches(const char *prefix, size_t plen, const char *key, size_t klen)
{
	return keypath_under(prefix, plen, key, klen);
}

enum status
kv_changes(const struct kvstore *kv, const char *prefix, size_t plen,
    int64_t since, int (*fn)(const struct kv_event *ev, void *arg), void *arg,
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
		if (kv_matches(prefix, plen, ev->key, ev->klen) &&
		    fn(ev, arg) != 0)
			break;
	}
	return ST_OK;
}

void
kv_set_journal(struct kvstore *kv, kv_journal_fn fn, void *arg)
{
	kv->journal = fn;
	kv->journal_arg = arg;
}

int
kv_replay(struct kvstore *kv, int64_t rev, const char *key, size_t klen,
    struct blob *val, char *err, size_t errlen)
{
	struct kv_limits lim = kv->lim;
	int64_t got = 0;
	enum status st = ST_OK;

	if (rev <= kv->rev) {
		snprintf(err, errlen,
		    "a change at revision %" PRId64
		    " follows revision %" PRId64,
		    rev, kv->rev);
		return -1;
	}
	/* What was taken is kept, whatever the limits are now. */
	kv->lim.max_keys = kv->lim.max_bytes = kv->lim.max_value = SIZE_MAX;
	kv->rev = rev - 1;
	if (val != NULL)
		st = set_value(kv, key, klen, val,
		    strmap_get(kv->map, key, klen), &got, err, errlen);
	else if (kv_delete(kv, key, klen, &got) == 0)
		snprintf(err, errlen,
		    "a delete of %.*s at revision %" PRId64
		    " finds nothing to delete",
		    (int)(klen > 200 ? 200 : klen), key, rev);
	kv->lim = lim;
	if (st != ST_OK || got != rev) {
		kv->rev = rev;
		return -1;
	}
	return 0;
}

int
kv_snapshot(const struct kvstore *kv, struct buf *out)
{
	const struct kv_entry **v = NULL;
	struct kv_dir_page all = {0};
	struct rec_out o = {.b = out};
	size_t n;
	int more;

	n = kv_dir(kv, "", 0, &all, &v, &more);
	if (n == (size_t)-1)
		return -1;
	rec_put_i(&o, kv->origin);
	rec_put_i(&o, kv->rev);
	rec_put_i(&o, kv->floor);
	rec_put_u(&o, n);
	for (size_t i = 0; i < n && !o.err; i++) {
		rec_put_blob(&o, v[i]->key, v[i]->klen);
		rec_put_blob(&o, v[i]->value, v[i]->vlen);
		rec_put_i(&o, v[i]->create_rev);
		rec_put_i(&o, v[i]->mod_rev);
	}
	free(v);
	rec_put_u(&o, kv->len - kv->first);
	for (size_t i = kv->first; i < kv->len && !o.err; i++) {
		const struct kv_event *ev = &kv->events[i];

		rec_put_i(&o, ev->rev);
		rec_put_u(&o, (uint64_t)ev->type);
		rec_put_blob(&o, ev->key, ev->klen);
		rec_put_blob(&o, ev->value != NULL ? ev->value : "", ev->vlen);
	}
	return o.err ? -1 : 0;
}

/* Appends a restored event to the history, which has room. */
static int
restore_event(struct kvstore *kv, int64_t rev, int type, const char *key,
    size_t klen, struct blob *val)
{
	struct kv_event ev = {.rev = rev, .type = type, .klen = klen};

	if (vec_grow(&kv->events, &kv->cap, kv->len + 1, sizeof(*kv->events)) <
	    0)
		return -1;
	if ((ev.key = malloc(klen + 1)) == NULL)
		return -1;
	memcpy(ev.key, key, klen);
	ev.key[klen] = '\0';
	if (type != KV_EV_DELETE) {
		ev.val = blob_ref(val);
		ev.value = val->data;
		ev.vlen = val->len;
	}
	kv->events[kv->len++] = ev;
	kv->hist_bytes += klen + ev.vlen;
	return 0;
}

int
kv_restore(struct kvstore *kv, struct rec_in *r, char *err, size_t errlen)
{
	int64_t origin = rec_get_i(r), rev = rec_get_i(r);
	int64_t floor = rec_get_i(r);
	uint64_t n = rec_get_u(r), nev;
	const char *what = "a key";

	if (strmap_count(kv->map) != 0 || kv->len != 0) {
		snprintf(err, errlen, "the store is not empty");
		return -1;
	}
	/* Entries go straight in: no limits, no history, no observer. */
	for (uint64_t i = 0; i < n && !r->err; i++) {
		size_t klen, vlen;
		const char *key = rec_get_blob(r, kv->lim.max_key, &klen);
		const char *v = rec_get_blob(r, SIZE_MAX, &vlen);
		int64_t create = rec_get_i(r);
		int64_t mod = rec_get_i(r);
		struct blob *b;
		struct kv_entry *e;

		if (r->err)
			break;
		if (create > mod || mod > rev ||
		    strmap_get(kv->map, key, klen) != NULL ||
		    memchr(key, '\0', klen) != NULL) {
			r->err = 1;
			break;
		}
		if ((b = blob_new(v, vlen)) == NULL ||
		    (e = calloc(1, sizeof(*e))) == NULL) {
			blob_unref(b);
			goto nomem;
		}
		if ((e->key = malloc(klen + 1)) == NULL) {
			free(e);
			blob_unref(b);
			goto nomem;
		}
		memcpy(e->key, key, klen);
		e->key[klen] = '\0';
		e->klen = klen;
		e->val = b;
		e->value = b->data;
		e->vlen = vlen;
		e->create_rev = create;
		e->mod_rev = mod;
		if (strmap_put(kv->map, e->key, klen, e) < 0) {
			entry_free(e);
			goto nomem;
		}
		if (skl_insert(kv->order, e->key, klen, e) < 0) {
			strmap_del(kv->map, e->key, klen);
			entry_free(e);
			goto nomem;
		}
		kv->bytes += klen + vlen;
	}
	kv->first = kv->len = 0;
	kv->hist_bytes = 0;
	what = "a change";
	nev = r->err ? 0 : rec_get_u(r);
	for (uint64_t i = 0; i < nev && !r->err; i++) {
		int64_t erev = rec_get_i(r);
		uint64_t type = rec_get_u(r);
		size_t klen, vlen;
		const char *key = rec_get_blob(r, kv->lim.max_key, &klen);
		const char *v = rec_get_blob(r, SIZE_MAX, &vlen);
		struct blob *b = NULL;

		if (r->err || type > KV_EV_DELETE || erev > rev ||
		    erev <= floor ||
		    (kv->len > 0 && erev < kv->events[kv->len - 1].rev)) {
			r->err = 1;
			break;
		}
		if (type != KV_EV_DELETE && (b = blob_new(v, vlen)) == NULL)
			goto nomem;
		if (restore_event(kv, erev, (int)type, key, klen, b) < 0) {
			blob_unref(b);
			goto nomem;
		}
		blob_unref(b);
	}
	if (r->err || floor > rev || origin > floor) {
		snprintf(err, errlen, "%s of the key-value store is damaged",
		    what);
		return -1;
	}
	kv->origin = origin;
	kv->rev = rev;
	kv->floor = floor;
	return 0;
nomem:
	snprintf(err, errlen, "out of memory");
	return -1;
}
