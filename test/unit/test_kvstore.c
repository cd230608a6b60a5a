#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvstore.h"
#include "rec.h"
#include "unit.h"

static struct kvstore *
store(void)
{
	struct kv_limits lim = {0};

	return kv_new(&lim, NULL, NULL);
}

static int
key_is(struct kvstore *kv, const char *raw, const char *want)
{
	struct buf b = {0};
	char err[128];
	int ok =
	    kv_key(kv, raw, strlen(raw), 0, &b, err, sizeof(err)) == ST_OK &&
	    strcmp(b.data, want) == 0;

	buf_free(&b);
	return ok;
}

static enum status
key_status(struct kvstore *kv, const char *raw, size_t n, int allow_empty)
{
	struct buf b = {0};
	char err[128];
	enum status st = kv_key(kv, raw, n, allow_empty, &b, err, sizeof(err));

	buf_free(&b);
	return st;
}

static void
kv_keys(void)
{
	struct kvstore *kv = store();
	char *big = malloc(5000);

	CHECK(key_is(kv, "//a///b/", "a/b"));
	CHECK(key_is(kv, "a", "a"));
	CHECK(key_is(kv, "/x/y/z", "x/y/z"));
	CHECK(key_status(kv, "", 0, 0) == ST_INVALID_ARGUMENT);
	CHECK(key_status(kv, "///", 3, 0) == ST_INVALID_ARGUMENT);
	CHECK(key_status(kv, "///", 3, 1) == ST_OK);
	CHECK(key_status(kv, "a\0b", 3, 0) == ST_INVALID_ARGUMENT);
	CHECK(key_status(kv, "\xff", 1, 0) == ST_INVALID_ARGUMENT);
	memset(big, 'k', 5000);
	CHECK(key_status(kv, big, 5000, 0) == ST_RESOURCE_EXHAUSTED);
	CHECK(key_status(kv, big, 2049, 0) == ST_RESOURCE_EXHAUSTED);
	CHECK(key_status(kv, big, 2048, 0) == ST_OK);
	free(big);
	kv_free(kv);
}

static void
kv_put_modes(void)
{
	struct kvstore *kv = store();
	const struct kv_entry *e;
	int64_t rev = 0;
	char err[128];

	CHECK(kv_put(kv, "a", 1, "1", 1, KV_INSERT, &rev, err, 128) == ST_OK);
	CHECK(rev == 1 && kv_revision(kv) == 1);
	CHECK(kv_put(kv, "a", 1, "2", 1, KV_INSERT, &rev, err, 128) ==
	    ST_ALREADY_EXISTS);
	CHECK(kv_put(kv, "b", 1, "2", 1, KV_UPDATE, &rev, err, 128) ==
	    ST_NOT_FOUND);
	CHECK(kv_put(kv, "a", 1, "3", 1, KV_UPDATE, &rev, err, 128) == ST_OK);
	CHECK(
	    kv_put(kv, "a", 1, "4x", 2, KV_OVERWRITE, &rev, err, 128) == ST_OK);
	e = kv_get(kv, "a", 1);
	CHECK(e != NULL && e->vlen == 2 && memcmp(e->value, "4x", 2) == 0);
	CHECK(e->create_rev == 1 && e->mod_rev == 3 && rev == 3);
	/* Values are bytes. */
	CHECK(kv_put(kv, "bin", 3, "\0\1\0", 3, KV_INSERT, &rev, err, 128) ==
	    ST_OK);
	e = kv_get(kv, "bin", 3);
	CHECK(e != NULL && e->vlen == 3 && memcmp(e->value, "\0\1\0", 3) == 0);
	kv_free(kv);
}

static void
kv_value_limit(void)
{
	struct kv_limits lim = {.max_value = 4};
	struct kvstore *kv = kv_new(&lim, NULL, NULL);
	int64_t rev;
	char err[128];

	CHECK(
	    kv_put(kv, "a", 1, "1234", 4, KV_INSERT, &rev, err, 128) == ST_OK);
	CHECK(kv_put(kv, "b", 1, "12345", 5, KV_INSERT, &rev, err, 128) ==
	    ST_RESOURCE_EXHAUSTED);
	CHECK(kv_get(kv, "b", 1) == NULL && kv_revision(kv) == 1);
	kv_free(kv);
}

static void
kv_counters(void)
{
	struct kvstore *kv = store();
	int64_t v = 0, rev;
	char err[128];

	CHECK(kv_add(kv, "n", 1, 5, &v, &rev, err, 128) == ST_OK && v == 5);
	CHECK(kv_add(kv, "n", 1, -7, &v, &rev, err, 128) == ST_OK && v == -2);
	CHECK(kv_put(kv, "s", 1, "abc", 3, KV_INSERT, &rev, err, 128) == ST_OK);
	CHECK(kv_add(kv, "s", 1, 1, &v, &rev, err, 128) ==
	    ST_FAILED_PRECONDITION);
	CHECK(kv_put(kv, "m", 1, "9223372036854775807", 19, KV_INSERT, &rev,
	          err, 128) == ST_OK);
	CHECK(kv_add(kv, "m", 1, 1, &v, &rev, err, 128) ==
	    ST_FAILED_PRECONDITION);
	CHECK(kv_put(kv, "sp", 2, " 1", 2, KV_INSERT, &rev, err, 128) == ST_OK);
	CHECK(kv_add(kv, "sp", 2, 1, &v, &rev, err, 128) ==
	    ST_FAILED_PRECONDITION);
	kv_free(kv);
}

static void
kv_compare_and_swap(void)
{
	struct kvstore *kv = store();
	const struct kv_entry *cur;
	int64_t rev;
	char err[128];

	CHECK(kv_cas(kv, "k", 1, "x", 1, 0, "v1", 2, &rev, &cur, err, 128) ==
	        ST_FAILED_PRECONDITION &&
	    cur == NULL);
	CHECK(kv_cas(kv, "k", 1, NULL, 0, 1, "v1", 2, &rev, &cur, err, 128) ==
	    ST_OK);
	CHECK(kv_cas(kv, "k", 1, NULL, 0, 1, "v2", 2, &rev, &cur, err, 128) ==
	        ST_FAILED_PRECONDITION &&
	    cur != NULL);
	CHECK(kv_cas(kv, "k", 1, "v0", 2, 0, "v2", 2, &rev, &cur, err, 128) ==
	        ST_FAILED_PRECONDITION &&
	    cur != NULL && memcmp(cur->value, "v1", 2) == 0);
	CHECK(kv_cas(kv, "k", 1, "v1", 2, 0, "v2", 2, &rev, &cur, err, 128) ==
	    ST_OK);
	CHECK(memcmp(kv_get(kv, "k", 1)->value, "v2", 2) == 0);
	kv_free(kv);
}

static void
kv_directories(void)
{
	struct kvstore *kv = store();
	const struct kv_entry **v = NULL;
	const char *keys[] = {"d", "d/b", "d/a", "d/a/x", "dd", "e"};
	int64_t rev;
	char err[128];
	size_t n;
	int more;

	for (size_t i = 0; i < 6; i++)
		kv_put(kv, keys[i], strlen(keys[i]), "v", 1, KV_INSERT, &rev,
		    err, 128);
	n = kv_dir(kv, "d", 1, NULL, &v, &more);
	CHECK(n == 3 && !more);
	CHECK(n == 3 && strcmp(v[0]->key, "d/a") == 0 &&
	    strcmp(v[1]->key, "d/a/x") == 0 && strcmp(v[2]->key, "d/b") == 0);
	free(v);
	n = kv_dir(kv, "", 0, NULL, &v, &more);
	CHECK(n == 6 && !more);
	free(v);
	/* Pages: two entries, then what follows the last one. */
	n = kv_dir(kv, "d", 1, &(struct kv_dir_page){.max_entries = 2}, &v,
	    &more);
	CHECK(n == 2 && more && strcmp(v[1]->key, "d/a/x") == 0);
	free(v);
	n = kv_dir(kv, "d", 1,
	    &(struct kv_dir_page){.after = "d/a/x",
	        .alen = 5,
	        .max_entries = 2},
	    &v, &more);
	CHECK(n == 1 && !more && strcmp(v[0]->key, "d/b") == 0);
	free(v);
	/* A page holds one entry however big, then stops at the bytes. */
	n = kv_dir(kv, "", 0, &(struct kv_dir_page){.max_bytes = 1}, &v, &more);
	CHECK(n == 1 && more && strcmp(v[0]->key, "d") == 0);
	free(v);
	/* A cursor before the directory starts at its first entry. */
	n = kv_dir(kv, "d", 1, &(struct kv_dir_page){.after = "a", .alen = 1},
	    &v, &more);
	CHECK(n == 3 && strcmp(v[0]->key, "d/a") == 0);
	free(v);
	CHECK(kv_delete(kv, "d", 1, &rev) == 4);
	CHECK(kv_get(kv, "dd", 2) != NULL && kv_get(kv, "d/a", 3) == NULL);
	CHECK(kv_count(kv) == 2);
	CHECK(kv_delete(kv, "nothing", 7, &rev) == 0);
	CHECK(kv_matches("a", 1, "a", 1) && kv_matches("a", 1, "a/b", 3));
	CHECK(!kv_matches("a", 1, "ab", 2) && kv_matches("", 0, "x", 1));
	kv_free(kv);
}

struct seen {
	int n;
	char types[16];
	int64_t revs[16];
};

static void
on_change(const struct kv_event *ev, void *arg)
{
	struct seen *s = arg;

	if (s->n < 16) {
		s->types[s->n] = kv_event_name(ev->type)[0];
		s->revs[s->n] = ev->rev;
	}
	s->n++;
}

static int
each_change(const struct kv_event *ev, void *arg)
{
	on_change(ev, arg);
	return 0;
}

static void
kv_history(void)
{
	struct kv_limits lim = {.history_events = 4};
	struct seen obs = {0}, got = {0};
	struct kvstore *kv = kv_new(&lim, on_change, &obs);
	int64_t rev;
	char err[256];

	kv_put(kv, "w/a", 3, "1", 1, KV_INSERT, &rev, err, 256);
	kv_put(kv, "w/a", 3, "2", 1, KV_OVERWRITE, &rev, err, 256);
	kv_put(kv, "other", 5, "x", 1, KV_INSERT, &rev, err, 256);
	kv_delete(kv, "w", 1, &rev);
	CHECK(obs.n == 4 && memcmp(obs.types, "pupd", 4) == 0);
	CHECK(kv_changes(kv, "w", 1, 0, each_change, &got, err, 256) == ST_OK);
	CHECK(got.n == 3 && memcmp(got.types, "pud", 3) == 0);
	CHECK(got.revs[0] == 1 && got.revs[1] == 2 && got.revs[2] == 4);
	memset(&got, 0, sizeof(got));
	CHECK(kv_changes(kv, "w", 1, 2, each_change, &got, err, 256) == ST_OK);
	CHECK(got.n == 1 && got.types[0] == 'd');
	/* Past the window: the oldest changes are gone, and a watcher from
	 * before them is told so instead of silently missing them. */
	kv_put(kv, "z", 1, "1", 1, KV_INSERT, &rev, err, 256);
	kv_put(kv, "z", 1, "2", 1, KV_OVERWRITE, &rev, err, 256);
	CHECK(kv_changes(kv, "w", 1, 0, each_change, &got, err, 256) ==
	    ST_FAILED_PRECONDITION);
	CHECK(kv_changes(kv, "w", 1, 2, each_change, &got, err, 256) == ST_OK);
	kv_free(kv);
}

static void
kv_directory_delete_notifies_after(void)
{
	struct seen obs = {0};
	struct kv_limits lim = {0};
	struct kvstore *kv = kv_new(&lim, on_change, &obs);
	int64_t rev;
	char err[128];

	kv_put(kv, "d/1", 3, "1", 1, KV_INSERT, &rev, err, 128);
	kv_put(kv, "d/2", 3, "1", 1, KV_INSERT, &rev, err, 128);
	obs.n = 0;
	CHECK(kv_delete(kv, "d", 1, &rev) == 2);
	/* One revision for the whole delete, one event per key. */
	CHECK(obs.n == 2 && obs.revs[0] == 3 && obs.revs[1] == 3);
	kv_free(kv);
}

static void
kv_store_limits(void)
{
	struct kv_limits lim = {.max_keys = 2, .max_bytes = 20};
	struct kvstore *kv = kv_new(&lim, NULL, NULL);
	int64_t rev;
	char err[256];

	CHECK(
	    kv_put(kv, "a", 1, "12345", 5, KV_INSERT, &rev, err, 256) == ST_OK);
	CHECK(kv_put(kv, "b", 1, "1", 1, KV_INSERT, &rev, err, 256) == ST_OK);
	/* A third key: refused, the store unchanged. */
	CHECK(kv_put(kv, "c", 1, "1", 1, KV_INSERT, &rev, err, 256) ==
	        ST_RESOURCE_EXHAUSTED &&
	    strstr(err, "--max-keys") != NULL);
	CHECK(kv_count(kv) == 2 && kv_revision(kv) == 2);
	/* Bytes: 1+5 + 1+1 held; a value of 18 for a would make 21. */
	CHECK(kv_put(kv, "a", 1, "123456789012345678", 18, KV_OVERWRITE, &rev,
	          err, 256) == ST_RESOURCE_EXHAUSTED &&
	    strstr(err, "--max-store-bytes") != NULL);
	CHECK(kv_put(kv, "a", 1, "12345678901234567", 17, KV_OVERWRITE, &rev,
	          err, 256) == ST_OK);
	CHECK(kv_bytes(kv) == 20 && kv_refused(kv) == 2);
	/* Deleting makes room again. */
	CHECK(kv_delete(kv, "b", 1, &rev) == 1);
	CHECK(kv_put(kv, "c", 1, "", 0, KV_INSERT, &rev, err, 256) == ST_OK);
	kv_free(kv);
}

static int
by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Many random puts and deletes: listings stay sorted and complete. */
static void
kv_order_random(void)
{
	struct kvstore *kv = store();
	char *names[600];
	int live[600] = {0};
	unsigned seed = 7;
	int64_t rev;
	char err[128];

	for (int i = 0; i < 600; i++) {
		names[i] = malloc(16);
		snprintf(names[i], 16, "%c/%d", "abc"[i % 3], i * 7919 % 1000);
	}
	for (int round = 0; round < 5000; round++) {
		int i;
		seed = seed * 1103515245 + 12345;
		i = (int)(seed >> 8) % 600;
		if (live[i]) {
			kv_delete(kv, names[i], strlen(names[i]), &rev);
			live[i] = 0;
		} else {
			kv_put(kv, names[i], strlen(names[i]), "v", 1,
			    KV_INSERT, &rev, err, 128);
			live[i] = 1;
		}
	}
	{
		const struct kv_entry **v = NULL;
		char *want[600];
		size_t nw = 0, n, got = 0;
		const char *after = NULL;
		int more = 1, ok = 1;

		for (int i = 0; i < 600; i++)
			if (live[i] && names[i][0] == 'b')
				want[nw++] = names[i];
		qsort(want, nw, sizeof(*want), by_name);
		/* Paged by 7, the pages join up to the sorted list. */
		while (more) {
			n = kv_dir(kv, "b", 1,
			    &(struct kv_dir_page){.after = after,
			        .alen = after != NULL ? strlen(after) : 0,
			        .max_entries = 7},
			    &v, &more);
			for (size_t j = 0; j < n; j++, got++)
				if (got >= nw ||
				    strcmp(v[j]->key, want[got]) != 0)
					ok = 0;
			after = n > 0 ? v[n - 1]->key : NULL;
			free(v);
			if (n == 0)
				break;
		}
		CHECK(ok && got == nw);
	}
	for (int i = 0; i < 600; i++)
		free(names[i]);
	kv_free(kv);
}

/* The journal's records, as coordd makes them: a put or a delete. */
struct change {
	int64_t rev;
	char *key;
	struct blob *val; /* NULL: a delete */
};

struct changes {
	struct change v[4096];
	size_t n;
};

static void
record_change(int64_t rev, const char *key, size_t klen, struct blob *val,
    void *arg)
{
	struct changes *c = arg;

	if (c->n == sizeof(c->v) / sizeof(c->v[0]))
		return;
	c->v[c->n].rev = rev;
	c->v[c->n].key = strndup(key, klen);
	c->v[c->n].val = val != NULL ? blob_ref(val) : NULL;
	c->n++;
}

/* Appends a canonical dump of kv (entries, then history) to out. */
static int
collect(const struct kv_event *ev, void *arg)
{
	struct buf *out = arg;

	buf_printf(out, "%lld %d %s=%.*s\n", (long long)ev->rev, (int)ev->type,
	    ev->key, (int)ev->vlen, ev->value != NULL ? ev->value : "");
	return 0;
}

static void
dump(const struct kvstore *kv, struct buf *out)
{
	const struct kv_entry **v;
	struct kv_dir_page all = {0};
	int more;
	char err[256];
	size_t n = kv_dir(kv, "", 0, &all, &v, &more);

	buf_printf(out, "rev %lld origin %lld keys %zu bytes %zu\n",
	    (long long)kv_revision(kv), (long long)kv_origin(kv), n,
	    kv_bytes(kv));
	for (size_t i = 0; i < n; i++)
		buf_printf(out, "%s=%.*s %lld %lld\n", v[i]->key,
		    (int)v[i]->vlen, v[i]->value, (long long)v[i]->create_rev,
		    (long long)v[i]->mod_rev);
	free(v);
	kv_changes(kv, "", 0, kv_origin(kv), collect, out, err, sizeof(err));
}

static void
kv_snapshot_and_replay(void)
{
	static struct changes ch;
	struct kvstore *kv = store(), *back;
	struct buf snap = {0}, a = {0}, b = {0};
	struct rec_in in;
	size_t at = 0;
	char err[256], key[32], val[32];
	int64_t rev, res;
	const struct kv_entry *cur;
	int ok = 1;

	ch.n = 0;
	kv_set_origin(kv, 1000);
	kv_set_journal(kv, record_change, &ch);
	srandom(7);
	for (int i = 0; i < 2000; i++) {
		int k = (int)(random() % 40), op = (int)(random() % 10);

		snprintf(key, sizeof(key), "d%d/k%d", k % 5, k);
		snprintf(val, sizeof(val), "v%d", i);
		if (op < 5)
			kv_put(kv, key, strlen(key), val, strlen(val),
			    KV_OVERWRITE, &rev, err, sizeof(err));
		else if (op < 7)
			kv_add(kv, key, strlen(key), 1, &res, &rev, err,
			    sizeof(err));
		else if (op < 8)
			kv_cas(kv, key, strlen(key), "v1", 2, 0, val,
			    strlen(val), &rev, &cur, err, sizeof(err));
		else if (op < 9)
			kv_delete(kv, key, strlen(key), &rev);
		else
			kv_delete(kv, key, 2, &rev); /* a whole directory */
		if (i == 1200) {
			CHECK(kv_snapshot(kv, &snap) == 0);
			at = ch.n;
		}
	}
	dump(kv, &a);

	/* The snapshot, then the changes after it, make the same store. */
	back = store();
	rec_in_init(&in, snap.data, snap.len);
	CHECK(kv_restore(back, &in, err, sizeof(err)) == 0);
	CHECK(rec_left(&in) == 0);
	for (size_t i = at; i < ch.n; i++)
		if (kv_replay(back, ch.v[i].rev, ch.v[i].key,
		        strlen(ch.v[i].key), ch.v[i].val, err, sizeof(err)) < 0)
			ok = 0;
	CHECK(ok);
	dump(back, &b);
	CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
	kv_free(back);

	/* From nothing, every change replayed. */
	back = store();
	kv_set_origin(back, 1000);
	ok = 1;
	for (size_t i = 0; i < ch.n; i++)
		if (kv_replay(back, ch.v[i].rev, ch.v[i].key,
		        strlen(ch.v[i].key), ch.v[i].val, err, sizeof(err)) < 0)
			ok = 0;
	CHECK(ok);
	buf_reset(&b);
	dump(back, &b);
	/* The history window may differ at its start; the keys may not. */
	CHECK(b.len > 0 && strncmp(a.data, b.data, 40) == 0);
	/* A change that does not follow is refused. */
	CHECK(kv_replay(back, 5, "x", 1, NULL, err, sizeof(err)) < 0);
	kv_free(back);

	/* A snapshot cut anywhere is refused, with a message. */
	ok = 1;
	for (size_t cut = 0; cut < snap.len; cut += 1 + snap.len / 97) {
		back = store();
		rec_in_init(&in, snap.data, cut);
		err[0] = '\0';
		if (kv_restore(back, &in, err, sizeof(err)) == 0 && !in.err)
			ok = 0;
		kv_free(back);
	}
	CHECK(ok);

	for (size_t i = 0; i < ch.n; i++) {
		free(ch.v[i].key);
		blob_unref(ch.v[i].val);
	}
	buf_free(&snap);
	buf_free(&a);
	buf_free(&b);
	kv_free(kv);
}

UNIT_TESTS(kvstore_tests) = {
    {"kvstore: key normalisation and limits", kv_keys},
    {"kvstore: insert, update, overwrite, bytes", kv_put_modes},
    {"kvstore: value size limit", kv_value_limit},
    {"kvstore: add counts, refuses non-integers and overflow", kv_counters},
    {"kvstore: compare-and-swap", kv_compare_and_swap},
    {"kvstore: directories and recursive delete", kv_directories},
    {"kvstore: history, revisions and its window", kv_history},
    {"kvstore: a directory delete is one revision",
        kv_directory_delete_notifies_after},
    {"kvstore: limits on keys and bytes held", kv_store_limits},
    {"kvstore: ordered listings through random changes", kv_order_random},
    {"kvstore: a snapshot and the changes after it give the store back",
        kv_snapshot_and_replay},
    {NULL, NULL},
};
