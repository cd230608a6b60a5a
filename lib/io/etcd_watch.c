/*
 * etcd_watch.c: the watch, over the gateway's streaming /v3/watch, taken
 * up again where it broke.
 */
#include <string.h>

#include "etcd_int.h"
#include "etcd_watch.h"

/*
 * Where a watch is. Changes come in revision order, and those of one
 * revision (a transaction's) in the order it made them, even over a new
 * stream: a watch taken up again starts at the revision of the last change
 * delivered and skips as many of that revision's as were delivered.
 */
struct watch {
	struct etcd *e;
	const struct etcd_watch_opts *w;
	int64_t start; /* where a new stream starts when none was delivered */
	int64_t last;  /* the revision of the last change delivered, or 0 */
	int64_t seen;  /* the changes of revision last delivered */
	int64_t skip;  /* those still to skip on this stream */
};

/*
 * The WatchRequest of a new stream, which takes up the watch where it is:
 * from the revision of the last change delivered, those of it delivered
 * to be skipped.
 */
static json_t *
create_json(void *arg)
{
	struct watch *s = arg;
	const struct etcd_watch_opts *w = s->w;
	json_t *c = json_pack("{s:I,s:b,s:b}", "start_revision",
	    (json_int_t)(s->last > 0 ? s->last : s->start), "progress_notify",
	    w->progress != 0, "fragment", 1);

	s->skip = s->last > 0 ? s->seen : 0;
	if (c == NULL ||
	    etcd_json_set_key(c, w->key, w->key_len, w->prefix) < 0) {
		json_decref(c);
		return NULL;
	}
	return json_pack("{s:o}", "create_request", c);
}

/* One event of a WatchResponse, delivered unless it is one to skip. */
static int
on_event(struct watch *s, const json_t *ev)
{
	const char *type = json_string_value(json_object_get(ev, "type"));
	struct etcd_event out = {.kind = ETCD_EV_PUT};
	struct etcd_kv kv;
	int rc;

	if (etcd_json_kv(json_object_get(ev, "kv"), &kv) < 0) {
		etcd_fail(s->e, ST_INTERNAL, "etcd %s sent a malformed event",
		    etcd_member(s->e));
		return -1;
	}
	if (type != NULL && strcmp(type, "DELETE") == 0)
		out.kind = ETCD_EV_DELETE;
	out.kv = &kv;
	out.revision = kv.mod_revision;
	if (s->skip > 0 && out.revision == s->last) {
		s->skip--;
		etcd_kv_free(&kv);
		return 0;
	}
	s->skip = 0;
	if (out.revision == s->last) {
		s->seen++;
	} else {
		s->last = out.revision;
		s->seen = 1;
	}
	rc = s->w->fn(s->w->arg, &out);
	etcd_kv_free(&kv);
	return rc != 0;
}

static int
on_result(void *arg, json_t *res)
{
	struct watch *s = arg;
	const json_t *evs = json_object_get(res, "events"), *ev;
	struct etcd_event out = {.kind = ETCD_EV_PROGRESS};
	int64_t compact;
	size_t i;

	if (json_is_true(json_object_get(res, "canceled"))) {
		const char *why =
		    json_string_value(json_object_get(res, "cancel_reason"));

		if (etcd_json_int(res, "compact_revision", &compact) == 0 &&
		    compact > 0) {
			out.kind = ETCD_EV_COMPACTED;
			out.revision = compact;
			s->w->fn(s->w->arg, &out);
			etcd_fail(s->e, ST_FAILED_PRECONDITION,
			    "etcd has compacted the changes from revision %lld "
			    "(the oldest left is %lld)",
			    (long long)(s->last > 0 ? s->last : s->start),
			    (long long)compact);
			return -1;
		}
		etcd_fail(s->e, etcd_json_cancel(why),
		    "etcd %s cancelled the watch: %s", etcd_member(s->e),
		    why != NULL ? why : "no reason given");
		return -1;
	}
	if (json_is_true(json_object_get(res, "created"))) {
		/* From now: now is this revision, for a stream taken up. */
		if (s->start == 0)
			s->start = etcd_json_revision(res) + 1;
		return 0;
	}
	if (json_array_size(evs) == 0) {
		out.revision = etcd_json_revision(res);
		return s->w->fn(s->w->arg, &out) != 0;
	}
	json_array_foreach(evs, i, ev) {
		int rc = on_event(s, ev);
		if (rc != 0)
			return rc;
	}
	return 0;
}

enum status
etcd_watch(struct etcd *e, const struct etcd_watch_opts *w, int64_t deadline)
{
	struct watch s = {.e = e, .w = w, .start = w->start};

	return etcd_stream(e, "/v3/watch", create_json, w->silence_ms,
	    w->max_msg > 0 ? w->max_msg : ETCD_WATCH_MAX_MSG, deadline,
	    on_result, &s);
}
