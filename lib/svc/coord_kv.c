/*
 * coord_kv.c: the key-value routes of the coordination service.
 *
 *   GET    /v1/kv/KEY              the value's bytes; NOT_FOUND if missing
 *   GET    /v1/kv/KEY?wait=DUR     the same, waiting up to DUR for the key
 *   GET    /v1/kv/PREFIX?dir=1[&after=KEY][&limit=N]
 *                                  {"revision":R,"entries":[...],"more":B}
 *                                  under PREFIX/, by key, a page at a time
 *   PUT    /v1/kv/KEY[?mode=M]     body is the value; M insert|overwrite|update
 *   POST   /v1/kv/KEY?op=add       {"delta":N} -> {"value":N,"revision":R}
 *   POST   /v1/kv/KEY?op=cas       {"value":B64,"expected":B64|"absent":true}
 *   DELETE /v1/kv/KEY              KEY and KEY/...: {"deleted":N,"revision":R}
 *   GET    /v1/watch/PREFIX?since=R&wait=DUR[&service=HEX][&limit=N]
 *                                  {"revision":R,"service":HEX,
 *                                   "events":[...],"more":B} after R
 *
 * Values inside JSON are base64; a single value travels as raw bytes with
 * its revision in X-Muster-Revision.
 *
 * Nothing big happens under the lock: a value is copied once, before the
 * lock, and then shared (store, history, replies); directory listings and
 * watch replies take references under the lock and become JSON after it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "log.h"
#include "parse.h"
#include "task.h"
#include "text.h"
#include "vec.h"

#define WATCH_WAIT_DEFAULT_MS 30000
/*
 * What one listing or watch reply carries at most: the entries or changes
 * beyond come in the next one ("more": true). A reply holds one entry at
 * least, and a watch reply every change of its last revision. Replies
 * stay a few megabytes, however big the store: built in little time, and
 * a client that does not read pins no more than that.
 */
#define PAGE_ENTRIES 10000
#define PAGE_BYTES (4u << 20)

/* Sets the revision header; a failed allocation only loses the header. */
static void
set_revision(struct http_req *req, int64_t rev)
{
	char num[32];

	snprintf(num, sizeof(num), "%" PRId64, rev);
	http_set_header(req, "X-Muster-Revision", num);
}

static void
reply_value(struct http_req *req, const struct kv_entry *e)
{
	set_revision(req, e->mod_rev);
	http_reply_blob(req, 200, "application/octet-stream", e->val);
}

static json_t *
json_rev(int64_t rev)
{
	return json_pack("{s:I}", "revision", (json_int_t)rev);
}

static void
get_expired(struct parked *w)
{
	http_reply_error(w->req, ST_DEADLINE_EXCEEDED,
	    "key %s not set before the deadline", w->key);
}

static void
kv_get_route(struct coord *co, struct http_req *req, const struct buf *key)
{
	const struct kv_entry *e;
	int64_t wait;
	int waiting = http_req_arg(req, "wait") != NULL;
	struct park_list *l;

	if (park_wait_arg(req, "wait", 0, &wait) < 0)
		return;
	coord_lock(co);
	if ((e = kv_get(co->kv, key->data, key->len)) != NULL) {
		reply_value(req, e);
	} else if (!waiting) {
		http_reply_error(req, ST_NOT_FOUND, "key %s not found",
		    key->data);
	} else if (coord_closing(co)) {
		coord_reply_closing(req);
	} else if (wait <= 0) {
		http_reply_error(req, ST_DEADLINE_EXCEEDED,
		    "key %s not set before the deadline", key->data);
	} else if ((l = park_index_list(co->getters, key->data, key->len)) ==
	    NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	} else if (coord_park(co, req, l, wait, get_expired, key->data,
	               key->len) == NULL) {
		park_list_prune(l);
	}
	coord_unlock(co);
}

/*
 * Entries or changes taken under the lock: small copies of the keys and
 * references to the values, turned into JSON once the lock is free.
 */
struct snap_item {
	char *key;
	size_t klen;
	struct blob *val; /* NULL: a delete */
	int64_t rev, created;
	enum kv_event_type type;
};

struct snap {
	struct snap_item *v;
	size_t n, cap;
	size_t bytes; /* of values */
	int nomem;
	int more; /* the reply is a page: more follow */
	size_t max_n, max_bytes;
	int64_t revision;
	uint64_t service;
	enum status st; /* of kv_changes */
	char err[256];
};

static void
snap_free(struct snap *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->v[i].key);
		blob_unref(s->v[i].val);
	}
	free(s->v);
	free(s);
}

static void
snap_add(struct snap *s, const char *key, size_t klen, struct blob *val,
    int64_t rev, int64_t created, enum kv_event_type type)
{
	struct snap_item *it;

	if (s->nomem)
		return;
	if (vec_grow(&s->v, &s->cap, s->n + 1, sizeof(*s->v)) < 0) {
		s->nomem = 1;
		return;
	}
	it = &s->v[s->n];
	if ((it->key = malloc(klen + 1)) == NULL) {
		s->nomem = 1;
		return;
	}
	memcpy(it->key, key, klen);
	it->key[klen] = '\0';
	it->klen = klen;
	it->val = blob_ref(val);
	it->rev = rev;
	it->created = created;
	it->type = type;
	s->bytes += val != NULL ? val->len : 0;
	s->n++;
}

/* Reads limit=N (1 to PAGE_ENTRIES); -1 (and a reply) when malformed. */
static int
arg_limit(struct http_req *req, size_t *max_n)
{
	const char *arg = http_req_arg(req, "limit");
	long n;

	*max_n = PAGE_ENTRIES;
	if (arg == NULL)
		return 0;
	if (parse_long(arg, 1, PAGE_ENTRIES, &n) < 0) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "limit=%s is not a number from 1 to %d", arg, PAGE_ENTRIES);
		return -1;
	}
	*max_n = (size_t)n;
	return 0;
}

static void
kv_dir_route(struct coord *co, struct http_req *req, const struct buf *key)
{
	const struct kv_entry **v = NULL;
	struct snap *s;
	struct kv_dir_page page = {.max_bytes = PAGE_BYTES};
	const char *after = http_req_arg(req, "after");
	struct buf cursor = {0};
	json_t *arr, *obj = NULL;
	size_t n;
	int more = 0;

	if (arg_limit(req, &page.max_entries) < 0)
		return;
	if (after != NULL) {
		char err[256];
		enum status st = kv_key(co->kv, after, strlen(after), 0,
		    &cursor, err, sizeof(err));
		if (st != ST_OK) {
			http_reply_error(req, st, "after: %s", err);
			buf_free(&cursor);
			return;
		}
		page.after = cursor.data;
		page.alen = cursor.len;
	}
	if ((s = calloc(1, sizeof(*s))) == NULL) {
		buf_free(&cursor);
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	coord_lock(co);
	n = kv_dir(co->kv, key->data, key->len, &page, &v, &more);
	for (size_t i = 0; n != (size_t)-1 && i < n; i++)
		snap_add(s, v[i]->key, v[i]->klen, v[i]->val, v[i]->mod_rev,
		    v[i]->create_rev, KV_EV_PUT);
	s->revision = kv_revision(co->kv);
	coord_unlock(co);
	free(v);
	buf_free(&cursor);
	if (n != (size_t)-1 && !s->nomem && (arr = json_array()) != NULL) {
		for (size_t i = 0; arr != NULL && i < s->n; i++) {
			struct snap_item *it = &s->v[i];
			json_t *ent = json_pack("{s:s%,s:o,s:I,s:I}", "key",
			    it->key, it->klen, "value",
			    text_base64_json(it->val->data, it->val->len),
			    "revision", (json_int_t)it->rev, "created",
			    (json_int_t)it->created);
			if (ent == NULL ||
			    json_array_append_new(arr, ent) < 0) {
				json_decref(arr);
				arr = NULL;
			}
		}
		obj = arr == NULL ?
		    NULL :
		    json_pack("{s:I,s:o,s:b}", "revision",
		        (json_int_t)s->revision, "entries", arr, "more", more);
	}
	snap_free(s);
	http_reply_json(req, 200, obj);
}

static enum status
parse_mode(struct http_req *req, enum kv_mode *m)
{
	const char *mode = http_req_arg(req, "mode");

	if (mode == NULL || strcmp(mode, "insert") == 0)
		*m = KV_INSERT;
	else if (strcmp(mode, "overwrite") == 0)
		*m = KV_OVERWRITE;
	else if (strcmp(mode, "update") == 0)
		*m = KV_UPDATE;
	else {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "mode=%s is not one of insert, overwrite, update", mode);
		return ST_INVALID_ARGUMENT;
	}
	return ST_OK;
}

static void
kv_put_route(struct coord *co, struct http_req *req, const struct buf *key)
{
	enum kv_mode m;
	const char *body;
	size_t len;
	int64_t rev = 0;
	struct blob *val;
	char err[256];
	enum status st;

	if (parse_mode(req, &m) != ST_OK)
		return;
	body = http_req_body(req, &len);
	/* The one copy of the value, before the lock. */
	if ((val = blob_new(body, len)) == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	coord_lock(co);
	st = kv_put_blob(co->kv, key->data, key->len, val, m, &rev, err,
	    sizeof(err));
	coord_unlock(co);
	blob_unref(val);
	if (st != ST_OK) {
		http_reply_error(req, st, "%s", err);
		return;
	}
	set_revision(req, rev);
	http_reply_json(req, 200, json_rev(rev));
}

/* Parses a JSON body into *root; replies and returns -1 when it is not. */
static int
json_body(struct http_req *req, json_t **root)
{
	size_t len;
	const char *body = http_req_body(req, &len);
	json_error_t jerr;

	*root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (*root == NULL || !json_is_object(*root)) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "request body is not a JSON object: %s",
		    *root == NULL ? jerr.text : "wrong type");
		json_decref(*root);
		return -1;
	}
	return 0;
}

static void
kv_add_route(struct coord *co, struct http_req *req, const struct buf *key)
{
	json_t *root, *d;
	json_int_t delta = 1;
	int64_t result = 0, rev = 0;
	char err[256];
	enum status st;

	if (json_body(req, &root) < 0)
		return;
	d = json_object_get(root, "delta");
	if (d != NULL && !json_is_integer(d)) {
		json_decref(root);
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "delta must be an integer");
		return;
	}
	if (d != NULL)
		delta = json_integer_value(d);
	json_decref(root);
	coord_lock(co);
	st = kv_add(co->kv, key->data, key->len, delta, &result, &rev, err,
	    sizeof(err));
	coord_unlock(co);
	if (st != ST_OK) {
		http_reply_error(req, st, "%s", err);
		return;
	}
	set_revision(req, rev);
	http_reply_json(req, 200,
	    json_pack("{s:I,s:I}", "value", (json_int_t)result, "revision",
	        (json_int_t)rev));
}

/* Decodes the base64 string field name of root into out. */
static int
b64_field(struct http_req *req, json_t *root, const char *name, struct buf *out)
{
	json_t *f = json_object_get(root, name);

	if (!json_is_string(f) ||
	    text_base64_decode(out, json_string_value(f),
	        json_string_length(f)) < 0) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "%s must be a base64 string", name);
		return -1;
	}
	return 0;
}

static void
kv_cas_route(struct coord *co, struct http_req *req, const struct buf *key)
{
	json_t *root;
	struct buf val = {0}, expect = {0};
	const struct kv_entry *cur = NULL;
	struct blob *nv = NULL, *curv = NULL;
	int absent;
	int64_t rev = 0, currev = 0;
	char err[256];
	enum status st;

	if (json_body(req, &root) < 0)
		return;
	absent = json_is_true(json_object_get(root, "absent"));
	if (b64_field(req, root, "value", &val) < 0 ||
	    (!absent && b64_field(req, root, "expected", &expect) < 0)) {
		json_decref(root);
		buf_free(&val);
		buf_free(&expect);
		return;
	}
	json_decref(root);
	if ((nv = blob_new(val.data != NULL ? val.data : "", val.len)) ==
	    NULL) {
		buf_free(&val);
		buf_free(&expect);
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	buf_free(&val);
	coord_lock(co);
	st = kv_cas_blob(co->kv, key->data, key->len, expect.data, expect.len,
	    absent, nv, &rev, &cur, err, sizeof(err));
	if (st == ST_FAILED_PRECONDITION && cur != NULL) {
		curv = blob_ref(cur->val);
		currev = cur->mod_rev;
	}
	coord_unlock(co);
	blob_unref(nv);
	buf_free(&expect);
	if (st != ST_OK) {
		json_t *extra = curv == NULL ?
		    NULL :
		    json_pack("{s:o,s:I}", "current",
		        text_base64_json(curv->data, curv->len), "revision",
		        (json_int_t)currev);
		blob_unref(curv);
		http_reply_error_json(req, st, extra, "%s", err);
		return;
	}
	set_revision(req, rev);
	http_reply_json(req, 200, json_rev(rev));
}

static void
kv_delete_route(struct coord *co, struct http_req *req, const struct buf *key)
{
	size_t n;
	int64_t rev;

	coord_lock(co);
	n = kv_delete(co->kv, key->data, key->len, &rev);
	coord_unlock(co);
	set_revision(req, rev);
	http_reply_json(req, 200,
	    json_pack("{s:I,s:I}", "deleted", (json_int_t)n, "revision",
	        (json_int_t)rev));
}

/*
 * Decodes and normalises the key part of the path. Replies and returns -1
 * when it is not a key.
 */
static int
path_key(struct coord *co, struct http_req *req, const char *rest,
    int allow_empty, struct buf *key)
{
	struct buf raw = {0};
	char err[256];
	enum status st;

	if (text_url_decode(&raw, rest, strlen(rest), 0) < 0) {
		buf_free(&raw);
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "key has a malformed %%-escape or an escaped NUL byte");
		return -1;
	}
	st = kv_key(co->kv, raw.data != NULL ? raw.data : "", raw.len,
	    allow_empty, key, err, sizeof(err));
	buf_free(&raw);
	if (st != ST_OK) {
		http_reply_error(req, st, "%s", err);
		return -1;
	}
	return 0;
}

void
coord_kv_route(struct coord *co, struct http_req *req, const char *rest)
{
	const char *method = http_req_method(req);
	const char *op = http_req_arg(req, "op");
	int dir = http_req_arg(req, "dir") != NULL;
	struct buf key = {0};

	if (path_key(co, req, rest, dir && strcmp(method, "GET") == 0, &key) <
	    0)
		goto out;
	if (strcmp(method, "GET") == 0) {
		if (dir)
			kv_dir_route(co, req, &key);
		else
			kv_get_route(co, req, &key);
	} else if (coord_refuse(co, req)) {
		/* answered: the state directory cannot be written */
	} else if (strcmp(method, "PUT") == 0) {
		kv_put_route(co, req, &key);
	} else if (strcmp(method, "DELETE") == 0) {
		kv_delete_route(co, req, &key);
	} else if (op != NULL && strcmp(op, "add") == 0) {
		kv_add_route(co, req, &key);
	} else if (op != NULL && strcmp(op, "cas") == 0) {
		kv_cas_route(co, req, &key);
	} else {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "POST needs op=add or op=cas");
	}
out:
	buf_free(&key);
}

/*
 * Takes ev into the reply, or says stop: the reply is full, and ev starts
 * a revision of its own (a revision's changes never straddle two pages).
 */
static int
add_event(const struct kv_event *ev, void *arg)
{
	struct snap *s = arg;

	if (s->n > 0 && ev->rev != s->v[s->n - 1].rev &&
	    (s->n >= s->max_n || s->bytes + ev->vlen > s->max_bytes)) {
		s->more = 1;
		return 1;
	}
	snap_add(s, ev->key, ev->klen, ev->val, ev->rev, 0, ev->type);
	return 0;
}

/*
 * The changes after since under prefix, taken under the lock; NULL on
 * ENOMEM. s->st says whether the history still has them.
 */
static struct snap *
take_changes(struct coord *co, const char *prefix, size_t plen, int64_t since,
    size_t max_n)
{
	struct snap *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	s->max_n = max_n;
	s->max_bytes = PAGE_BYTES;
	s->st = kv_changes(co->kv, prefix, plen, since, add_event, s, s->err,
	    sizeof(s->err));
	/* A page resumes after its last change; a whole reply after all
	 * the store has. */
	s->revision = s->more ? s->v[s->n - 1].rev : kv_revision(co->kv);
	s->service = co->rv->service;
	if (s->nomem) {
		snap_free(s);
		return NULL;
	}
	return s;
}

/* The watch's reply from changes taken under the lock; frees s. */
static void
reply_changes(struct http_req *req, struct snap *s)
{
	json_t *arr;
	char svc[17];

	if (s == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	if (s->st != ST_OK) {
		http_reply_error(req, s->st, "%s", s->err);
		snap_free(s);
		return;
	}
	arr = json_array();
	for (size_t i = 0; arr != NULL && i < s->n; i++) {
		struct snap_item *it = &s->v[i];
		json_t *o = json_pack("{s:s,s:s%,s:I}", "type",
		    kv_event_name(it->type), "key", it->key, it->klen,
		    "revision", (json_int_t)it->rev);

		if (o != NULL && it->val != NULL &&
		    json_object_set_new(o, "value",
		        text_base64_json(it->val->data, it->val->len)) < 0) {
			json_decref(o);
			o = NULL;
		}
		if (o == NULL || json_array_append_new(arr, o) < 0) {
			json_decref(arr);
			arr = NULL;
		}
	}
	http_reply_json(req, 200,
	    arr == NULL ? NULL :
	                  json_pack("{s:I,s:s,s:o,s:b}", "revision",
	                      (json_int_t)s->revision, "service",
	                      task_format_incarnation(s->service, svc),
	                      "events", arr, "more", s->more));
	snap_free(s);
}

static void
watch_build(struct parked *w)
{
	reply_changes(w->req, w->ctx);
}

/* Answers w (already taken) once the lock is free. */
static void
answer_later(struct coord *co, struct parked *w)
{
	w->ctx = take_changes(co, w->key, w->klen, w->since, (size_t)w->limit);
	w->build = watch_build;
}

static void
watch_expired(struct parked *w)
{
	/* A long poll that saw nothing: an empty answer, not an error. */
	answer_later(w->obj, w);
}

void
coord_watch_route(struct coord *co, struct http_req *req, const char *rest)
{
	struct buf key = {0};
	const char *since_s = http_req_arg(req, "since");
	const char *service = http_req_arg(req, "service");
	struct snap *s = NULL;
	int64_t since = 0, wait;
	uint64_t inc;
	size_t max_n;

	if (path_key(co, req, rest, 1, &key) < 0)
		return;
	if (park_wait_arg(req, "wait", WATCH_WAIT_DEFAULT_MS, &wait) < 0 ||
	    arg_limit(req, &max_n) < 0)
		goto out;
	if (since_s != NULL &&
	    (parse_int64(since_s, &since) < 0 || since < 0)) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "since=%s is not a revision", since_s);
		goto out;
	}
	coord_lock(co);
	if (since_s == NULL)
		since = kv_revision(co->kv);
	/* 0 is the beginning of this store, whatever its first revision. */
	if (since == 0)
		since = kv_origin(co->kv);
	/* A revision from another coordd (this one restarted) means nothing
	 * here: everything this store has is new to that watcher. */
	if (service != NULL &&
	    (task_parse_incarnation(service, &inc) < 0 ||
	        inc != co->rv->service))
		since = kv_origin(co->kv);
	s = take_changes(co, key.data, key.len, since, max_n);
	if (s == NULL || s->st != ST_OK || s->n > 0 || wait <= 0) {
		/* answered from the history, after the lock */
	} else if (coord_closing(co)) {
		coord_reply_closing(req);
	} else {
		struct park_list *l =
		    park_index_list(co->watchers, key.data, key.len);
		struct parked *w = l == NULL ?
		    NULL :
		    coord_park(co, req, l, wait, watch_expired, key.data,
		        key.len);

		if (l == NULL)
			http_reply_error(req, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
		else if (w == NULL)
			park_list_prune(l);
		else {
			w->since = since;
			w->limit = (int64_t)max_n;
			w->obj = co;
		}
		snap_free(s);
		s = NULL;
		coord_unlock(co);
		goto out;
	}
	coord_unlock(co);
	reply_changes(req, s);
out:
	buf_free(&key);
}

/* Answers the watchers of l that have not seen revision rev. */
static void
wake_watchers(struct coord *co, struct park_list *l, int64_t rev)
{
	struct parked *w, *next;

	park_list_hold(l);
	for (w = l->head; w != NULL; w = next) {
		next = w->next;
		if (rev <= w->since)
			continue;
		park_take(w);
		answer_later(co, w);
	}
	park_list_release(l);
}

/*
 * Called under the lock for every change, after the whole operation.
 * Getters wait on the key itself, watchers on the key or a directory
 * above it: each of the key's path prefixes is looked up once.
 */
void
coord_kv_observe(const struct kv_event *ev, void *arg)
{
	struct coord *co = arg;
	struct park_list *l;

	if (ev->type == KV_EV_PUT &&
	    (l = park_index_find(co->getters, ev->key, ev->klen)) != NULL) {
		const struct kv_entry *e = kv_get(co->kv, ev->key, ev->klen);
		struct http_shared *sh;
		char num[32];

		/* Every waiter gets the same bytes: one reply, no copy. */
		if ((sh = http_shared_blob(200, "application/octet-stream",
		         e->val)) != NULL) {
			snprintf(num, sizeof(num), "%" PRId64, e->mod_rev);
			http_shared_header(sh, "X-Muster-Revision", num);
		}
		park_answer_all(l, sh);
		http_shared_release(sh);
	}
	if (park_index_waiting(co->watchers) == 0)
		return;
	for (size_t n = 0;; n++) {
		if (n == ev->klen || ev->key[n] == '/') {
			if ((l = park_index_find(co->watchers, ev->key, n)) !=
			    NULL)
				wake_watchers(co, l, ev->rev);
		}
		if (n == ev->klen)
			break;
	}
	/* "" watches everything. */
	if ((l = park_index_find(co->watchers, "", 0)) != NULL)
		wake_watchers(co, l, ev->rev);
}
