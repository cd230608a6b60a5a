/*
 * closureq.c: closures, queues and workers; see closureq.h.
 */
#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "closureq.h"
#include "duration.h"
#include "rec.h"
#include "strmap.h"
#include "task.h"
#include "text.h"
#include "vec.h"

struct cq {
	struct cq_config cfg;
	struct cq_view v;
	struct cq_closure **byid;  /* index id; NULL once forgotten */
	uint64_t nid;              /* the next closure's id */
	size_t nbyid, capid;       /* byid's entries, room */
	struct cq_pending pending; /* closures any worker may run */
	struct strmap *queues;     /* name -> struct cq_queue */
	struct strmap *workers;    /* name -> struct cq_worker */
	struct strmap *resources;  /* name -> JSON text */
	int64_t last_end;
	int64_t no_worker_since;
	cq_observer_fn observe;
	void *arg;
	/* The journal: what changed in this call, in order. */
	cq_journal_fn jfn;
	void *jarg;
	int replaying; /* cq_restore, cq_apply: no events, no records */
	struct cq_closure *jc, *jctail;
	struct cq_queue *jq, *jqtail;
	struct cq_worker *jw, *jwtail;
	struct buf jbuf;
};

static void
emit(struct cq *cq, enum cq_event_type type, struct cq_closure *c,
    struct cq_queue *q, struct cq_worker *w)
{
	struct cq_event ev = {type, c, q, w};

	if (!cq->replaying)
		cq->observe(&ev, cq->arg);
}

/*
 * Notes that an object changed, for the record the call writes at its end
 * (jflush). Costs a NULL check without a journal. A closure's jdirty is 2
 * when it is new (the record carries its spec).
 */
static void
jmark_c(struct cq *cq, struct cq_closure *c, int how)
{
	if (cq->jfn == NULL || cq->replaying)
		return;
	if (c->jdirty == 0) {
		c->jnext = NULL;
		if (cq->jctail != NULL)
			cq->jctail->jnext = c;
		else
			cq->jc = c;
		cq->jctail = c;
	}
	if (how > c->jdirty)
		c->jdirty = (unsigned char)how;
}

static void
jmark_q(struct cq *cq, struct cq_queue *q)
{
	if (cq->jfn == NULL || cq->replaying || q->jdirty)
		return;
	q->jdirty = 1;
	q->jnext = NULL;
	if (cq->jqtail != NULL)
		cq->jqtail->jnext = q;
	else
		cq->jq = q;
	cq->jqtail = q;
}

/* Also while replaying: what a record touched is checked after it. */
static void
jmark_w(struct cq *cq, struct cq_worker *w)
{
	if ((cq->jfn == NULL && !cq->replaying) || w->jdirty)
		return;
	w->jdirty = 1;
	w->jnext = NULL;
	if (cq->jwtail != NULL)
		cq->jwtail->jnext = w;
	else
		cq->jw = w;
	cq->jwtail = w;
}

static void jflush(struct cq *cq);
static void jitem(struct cq *cq, const struct buf *item);
static int jforget_item(struct buf *b, uint64_t id);
static int jresource_item(struct buf *b, const char *name, const char *json);

static void say(char *msg, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
say(char *msg, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (msg == NULL || len == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, len, fmt, ap);
	va_end(ap);
}

const char *
cq_state_name(enum cq_state s)
{
	switch (s) {
	case CQ_QUEUED:
	case CQ_RUNNING: return "NOT_READY";
	case CQ_READY: return "READY";
	case CQ_ABORTED: return "ABORTED";
	case CQ_CANCELLED: return "CANCELLED";
	}
	return "?";
}

int
cq_name_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > CQ_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)name[i];
		if (!isalnum(ch) && strchr("_-.:", ch) == NULL)
			return 0;
	}
	return 1;
}

/* Pending lists. */

static void
pend_push(struct cq_pending *l, struct cq_closure *c, int front)
{
	c->list = l;
	if (front) {
		c->prev = NULL;
		c->next = l->head;
		if (l->head != NULL)
			l->head->prev = c;
		else
			l->tail = c;
		l->head = c;
	} else {
		c->next = NULL;
		c->prev = l->tail;
		if (l->tail != NULL)
			l->tail->next = c;
		else
			l->head = c;
		l->tail = c;
	}
	l->count++;
}

static void
pend_unlink(struct cq_closure *c)
{
	struct cq_pending *l = c->list;

	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		l->head = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	else
		l->tail = c->prev;
	l->count--;
	c->prev = c->next = NULL;
	c->list = NULL;
}

static void
run_unlink(struct cq_closure *c)
{
	struct cq_worker *w = c->worker;

	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		w->run_head = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	w->running--;
	c->prev = c->next = NULL;
	c->worker = NULL;
}

static void
result_clear(struct cq *cq, struct cq_result *r)
{
	cq->v.value_bytes -= r->outlen + r->errlen;
	free(r->out);
	free(r->err);
	free(r->message);
	memset(r, 0, sizeof(*r));
}

static void
closure_free(struct cq *cq, struct cq_closure *c)
{
	result_clear(cq, &c->res);
	free(c->spec);
	free(c->on);
	free(c->key);
	if (c->needs != NULL)
		for (char **n = c->needs; *n != NULL; n++)
			free(*n);
	free(c->needs);
	free(c->last_worker);
	free(c);
}

static void
resource_state_free(void *v)
{
	struct cq_resource_state *s = v;

	free(s->message);
	free(s);
}

static void
worker_free(void *v)
{
	struct cq_worker *w = v;

	free(w->name);
	free(w->stop);
	free(w->stop_attempt);
	strmap_free(w->resources, resource_state_free);
	free(w->why);
	free(w->sick_why);
	free(w);
}

static void
queue_free(void *v)
{
	struct cq_queue *q = v;

	free(q->name);
	strmap_free(q->keys, free);
	free(q);
}

struct cq *
cq_new(const struct cq_config *cfg, cq_observer_fn fn, void *arg, int64_t now)
{
	struct cq *cq = calloc(1, sizeof(*cq));

	if (cq == NULL)
		return NULL;
	cq->cfg = *cfg;
	if (cq->cfg.queue_max == 0)
		cq->cfg.queue_max = CQ_QUEUE_MAX_DEFAULT;
	if (cq->cfg.max_deaths == 0)
		cq->cfg.max_deaths = CQ_MAX_DEATHS_DEFAULT;
	if (cq->cfg.hb_timeout_ms == 0)
		cq->cfg.hb_timeout_ms = 10000;
	if (cq->cfg.max_spec == 0)
		cq->cfg.max_spec = 64u << 20;
	if (cq->cfg.max_store == 0)
		cq->cfg.max_store = (size_t)1 << 30;
	cq->observe = fn;
	cq->arg = arg;
	cq->nid = 1;
	cq->nbyid = 1;
	cq->last_end = now;
	cq->no_worker_since = now;
	if ((cq->queues = strmap_new()) == NULL ||
	    (cq->workers = strmap_new()) == NULL ||
	    (cq->resources = strmap_new()) == NULL) {
		cq_free(cq);
		return NULL;
	}
	return cq;
}

void
cq_free(struct cq *cq)
{
	if (cq == NULL)
		return;
	for (size_t i = 1; i < cq->nbyid; i++)
		if (cq->byid[i] != NULL)
			closure_free(cq, cq->byid[i]);
	free(cq->byid);
	buf_free(&cq->jbuf);
	strmap_free(cq->queues, queue_free);
	strmap_free(cq->workers, worker_free);
	strmap_free(cq->resources, free);
	free(cq);
}

const struct cq_config *
cq_config(const struct cq *cq)
{
	return &cq->cfg;
}

const struct cq_view *
cq_view(const struct cq *cq)
{
	return &cq->v;
}

int64_t
cq_last_end(const struct cq *cq)
{
	return cq->last_end;
}

int64_t
cq_no_worker_since(const struct cq *cq)
{
	return cq->v.workers_live > 0 ? 0 : cq->no_worker_since;
}

struct cq_queue *
cq_queue(struct cq *cq, const char *name, int create)
{
	struct cq_queue *q = strmap_get(cq->queues, name, strlen(name));

	if (q != NULL || !create || !cq_name_valid(name))
		return q;
	if ((q = calloc(1, sizeof(*q))) == NULL ||
	    (q->name = strdup(name)) == NULL ||
	    (q->keys = strmap_new()) == NULL ||
	    strmap_put(cq->queues, name, strlen(name), q) < 0) {
		if (q != NULL)
			queue_free(q);
		return NULL;
	}
	jmark_q(cq, q);
	jflush(cq);
	return q;
}

struct each_queue {
	void (*fn)(struct cq_queue *q, void *arg);
	void *arg;
};

static void
each_queue(const char *k, size_t kl, void *v, void *arg)
{
	struct each_queue *e = arg;

	(void)k;
	(void)kl;
	e->fn(v, e->arg);
}

void
cq_each_queue(struct cq *cq, void (*fn)(struct cq_queue *q, void *arg),
    void *arg)
{
	struct each_queue e = {fn, arg};

	strmap_each(cq->queues, each_queue, &e);
}

size_t
cq_room(const struct cq *cq, const struct cq_queue *q)
{
	return q->queued >= cq->cfg.queue_max ? 0 :
	                                        cq->cfg.queue_max - q->queued;
}

size_t
cq_store_room(const struct cq *cq)
{
	size_t held = cq->v.value_bytes + cq->v.spec_bytes;

	return held >= cq->cfg.max_store ? 0 : cq->cfg.max_store - held;
}

int
cq_idle(const struct cq_queue *q)
{
	return q->queued == 0 && q->inflight == 0;
}

static struct cq_worker *
worker_get(struct cq *cq, const char *name, int create)
{
	struct cq_worker *w = strmap_get(cq->workers, name, strlen(name));
	struct task_name tn;

	if (w != NULL || !create)
		return w;
	if ((w = calloc(1, sizeof(*w))) == NULL ||
	    (w->name = strdup(name)) == NULL ||
	    (w->resources = strmap_new()) == NULL ||
	    strmap_put(cq->workers, name, strlen(name), w) < 0) {
		if (w != NULL)
			worker_free(w);
		return NULL;
	}
	if (task_parse(name, &tn) == 0)
		w->index = tn.index;
	w->cq = cq;
	cq->v.workers++;
	jmark_w(cq, w);
	return w;
}

struct cq_worker *
cq_worker(struct cq *cq, const char *name)
{
	return worker_get(cq, name, 0);
}

struct each_worker {
	void (*fn)(struct cq_worker *w, void *arg);
	void *arg;
};

static void
each_worker(const char *k, size_t kl, void *v, void *arg)
{
	struct each_worker *e = arg;

	(void)k;
	(void)kl;
	e->fn(v, e->arg);
}

void
cq_each_worker(struct cq *cq, void (*fn)(struct cq_worker *w, void *arg),
    void *arg)
{
	struct each_worker e = {fn, arg};

	strmap_each(cq->workers, each_worker, &e);
}

/* Where a pending closure waits: its worker's pinned list, or everyone's. */
static struct cq_pending *
pending_for(struct cq *cq, struct cq_closure *c)
{
	if (c->on != NULL) {
		struct cq_worker *w = worker_get(cq, c->on, 1);
		if (w != NULL)
			return &w->pinned;
	}
	return &cq->pending;
}

static void
end(struct cq *cq, struct cq_closure *c, enum cq_state st, int64_t now)
{
	c->state = st;
	c->ended = now;
	cq->last_end = now;
	jmark_c(cq, c, 1);
	jmark_q(cq, c->q);
	switch (st) {
	case CQ_READY: cq->v.done++; break;
	case CQ_ABORTED: cq->v.aborted++; break;
	case CQ_CANCELLED:
		cq->v.cancelled++;
		c->q->cancelled++;
		break;
	default: break;
	}
	if (st == CQ_READY)
		c->q->done++;
	emit(cq, CQ_EV_ENDED, c, NULL, NULL);
}

/* The closure ended badly while its worker lived: q's error, if first. */
static void
fail(struct cq *cq, struct cq_closure *c)
{
	c->failed = 1;
	jmark_c(cq, c, 1);
	jmark_q(cq, c->q);
	cq->v.failed++;
	c->q->failed++;
	if (c->q->error == NULL)
		c->q->error = c;
}

static void
cancel_queued(struct cq *cq, struct cq_closure *c, int64_t now)
{
	pend_unlink(c);
	c->q->queued--;
	cq->v.queued--;
	end(cq, c, CQ_CANCELLED, now);
}

/* Says why c is cancelled: the error its queue holds. */
static void
cancelled_by_error(struct cq *cq, struct cq_closure *c)
{
	char why[CQ_NAME_MAX + 96];

	snprintf(why, sizeof(why),
	    "cancelled: closure %" PRIu64 " of queue %s failed",
	    c->q->error->id, c->q->name);
	result_clear(cq, &c->res);
	c->res.message = strdup(why);
}

/*
 * A closure that did not finish goes back to the front of its list (it
 * waited longest), or is cancelled when its queue already failed.
 */
static void
put_back(struct cq *cq, struct cq_closure *c, int front, int64_t now)
{
	c->q->inflight--;
	cq->v.inflight--;
	if (c->q->error != NULL) {
		cancelled_by_error(cq, c);
		end(cq, c, CQ_CANCELLED, now);
		return;
	}
	c->state = CQ_QUEUED;
	jmark_c(cq, c, 1);
	if (c->jdirty)
		c->jfront = (unsigned char)front;
	pend_push(pending_for(cq, c), c, front);
	c->q->queued++;
	cq->v.queued++;
	cq->v.put_back++;
	emit(cq, CQ_EV_WORK, NULL, NULL, NULL);
}

/* Makes byid[id] an entry (NULL until set). */
static int
byid_grow(struct cq *cq, uint64_t id)
{
	if (id >= SIZE_MAX ||
	    vec_grow(&cq->byid, &cq->capid, (size_t)id + 1, sizeof(*cq->byid)) <
	        0)
		return -1;
	for (; cq->nbyid <= id; cq->nbyid++)
		cq->byid[cq->nbyid] = NULL;
	return 0;
}

/* Checks an item's fields; fills c's. -1 with msg when bad. */
static int
parse_item(struct cq *cq, json_t *item, struct cq_closure *c, char *msg,
    size_t msglen)
{
	json_t *argv = json_object_get(item, "argv");
	json_t *env = json_object_get(item, "env");
	json_t *in = json_object_get(item, "stdin");
	json_t *to = json_object_get(item, "timeout_ms");
	json_t *codes = json_object_get(item, "retry_exit");
	json_t *mr = json_object_get(item, "max_retries");
	json_t *on = json_object_get(item, "on");
	json_t *needs = json_object_get(item, "needs");
	json_t *key = json_object_get(item, "key");
	json_t *v;
	const char *k;
	size_t i;

	if (!json_is_object(item)) {
		say(msg, msglen, "a closure must be an object");
		return -1;
	}
	if (!json_is_array(argv) || json_array_size(argv) == 0) {
		say(msg, msglen, "argv must be a non-empty array of strings");
		return -1;
	}
	json_array_foreach(argv, i, v)
		if (!json_is_string(v) ||
		    json_string_length(v) != strlen(json_string_value(v))) {
			say(msg, msglen,
			    "argv[%zu] must be a string without NUL", i);
			return -1;
		}
	if (json_string_length(json_array_get(argv, 0)) == 0) {
		say(msg, msglen, "argv[0] must not be empty");
		return -1;
	}
	if (env != NULL) {
		if (!json_is_object(env)) {
			say(msg, msglen, "env must be an object of strings");
			return -1;
		}
		json_object_foreach(env, k, v) {
			if (*k == '\0' || strchr(k, '=') != NULL ||
			    !json_is_string(v) ||
			    json_string_length(v) !=
			        strlen(json_string_value(v))) {
				say(msg, msglen,
				    "env: %s is not NAME=value without NUL", k);
				return -1;
			}
		}
	}
	if (in != NULL) {
		struct buf b = {0};
		int bad = !json_is_string(in) ||
		    text_base64_decode(&b, json_string_value(in),
		        json_string_length(in)) < 0;
		buf_free(&b);
		if (bad) {
			say(msg, msglen, "stdin must be base64");
			return -1;
		}
	}
	if (to != NULL &&
	    (!json_is_integer(to) || json_integer_value(to) < 0)) {
		say(msg, msglen, "timeout_ms must be a whole number >= 0");
		return -1;
	}
	if (codes != NULL) {
		if (!json_is_array(codes) ||
		    json_array_size(codes) > CQ_MAX_RETRY_CODES) {
			say(msg, msglen,
			    "retry_exit must be an array of at "
			    "most %d exit codes",
			    CQ_MAX_RETRY_CODES);
			return -1;
		}
		json_array_foreach(codes, i, v) {
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
			    json_integer_value(v) > 255) {
				say(msg, msglen,
				    "retry_exit: exit codes are 1 to 255");
				return -1;
			}
			c->retry_exit[c->nretry_exit++] =
			    (int)json_integer_value(v);
		}
		c->max_retries = 3;
	}
	if (mr != NULL) {
		if (!json_is_integer(mr) || json_integer_value(mr) < 0 ||
		    json_integer_value(mr) > 1000000) {
			say(msg, msglen, "max_retries must be 0 to 1000000");
			return -1;
		}
		c->max_retries = (long)json_integer_value(mr);
	}
	if (on != NULL) {
		if (!json_is_string(on) ||
		    !cq_name_valid(json_string_value(on))) {
			say(msg, msglen, "on must name a worker (JOB:INDEX)");
			return -1;
		}
		if ((c->on = strdup(json_string_value(on))) == NULL)
			goto nomem;
	}
	if (key != NULL) {
		if (!json_is_string(key) || json_string_length(key) == 0 ||
		    json_string_length(key) > 1024) {
			say(msg, msglen,
			    "key must be a string of 1 to 1024 "
			    "bytes");
			return -1;
		}
		if ((c->key = strdup(json_string_value(key))) == NULL)
			goto nomem;
	}
	if (needs != NULL) {
		if (!json_is_array(needs) || json_array_size(needs) > 64) {
			say(msg, msglen,
			    "needs must be an array of at most 64 "
			    "resource names");
			return -1;
		}
		if ((c->needs = calloc(json_array_size(needs) + 1,
		         sizeof(char *))) == NULL)
			goto nomem;
		json_array_foreach(needs, i, v) {
			const char *n = json_string_value(v);
			if (n == NULL ||
			    strmap_get(cq->resources, n, strlen(n)) == NULL) {
				say(msg, msglen,
				    "needs: no resource %s (add it with "
				    "dispatchctl resource add)",
				    n != NULL ? n : "(not a string)");
				return -1;
			}
			if ((c->needs[i] = strdup(n)) == NULL)
				goto nomem;
		}
	}
	return 0;
nomem:
	say(msg, msglen, "out of memory");
	return -1;
}

struct cq_closure *
cq_closure_new(struct cq *cq, json_t *item, enum status *st, char *msg,
    size_t msglen)
{
	struct cq_closure *c = calloc(1, sizeof(*c));

	*st = ST_RESOURCE_EXHAUSTED;
	if (c == NULL) {
		say(msg, msglen, "out of memory");
		return NULL;
	}
	if (parse_item(cq, item, c, msg, msglen) < 0) {
		*st = ST_INVALID_ARGUMENT;
		goto bad;
	}
	if ((c->spec = json_dumps(item, JSON_COMPACT)) == NULL) {
		say(msg, msglen, "out of memory");
		goto bad;
	}
	c->speclen = strlen(c->spec);
	if (c->speclen > cq->cfg.max_spec) {
		say(msg, msglen, "the closure is larger than %zu bytes",
		    cq->cfg.max_spec);
		goto bad;
	}
	*st = ST_OK;
	return c;
bad:
	closure_free(cq, c);
	return NULL;
}

void
cq_closure_discard(struct cq *cq, struct cq_closure *c)
{
	if (c != NULL)
		closure_free(cq, c);
}

enum status
cq_enqueue(struct cq *cq, struct cq_queue *q, struct cq_closure *c, int64_t now,
    uint64_t *id, int *dup, char *msg, size_t msglen)
{
	uint64_t *known;

	*dup = 0;
	if (c->key != NULL &&
	    (known = strmap_get(q->keys, c->key, strlen(c->key))) != NULL) {
		*id = *known;
		*dup = 1;
		closure_free(cq, c);
		return ST_OK;
	}
	if (byid_grow(cq, cq->nid) < 0)
		goto nomem;
	if (c->key != NULL) {
		uint64_t *v = malloc(sizeof(*v));
		if (v == NULL ||
		    strmap_put(q->keys, c->key, strlen(c->key), v) < 0) {
			free(v);
			goto nomem;
		}
		*v = cq->nid;
	}
	c->id = cq->nid;
	cq->byid[cq->nid++] = c;
	c->q = q;
	c->state = CQ_QUEUED;
	c->enqueued = now;
	jmark_c(cq, c, 2);
	jmark_q(cq, q);
	pend_push(pending_for(cq, c), c, 0);
	q->queued++;
	q->scheduled++;
	cq->v.queued++;
	cq->v.closures++;
	cq->v.spec_bytes += c->speclen;
	*id = c->id;
	emit(cq, CQ_EV_WORK, NULL, NULL, NULL);
	jflush(cq);
	return ST_OK;
nomem:
	closure_free(cq, c);
	say(msg, msglen, "out of memory");
	return ST_RESOURCE_EXHAUSTED;
}

struct cq_closure *
cq_closure(struct cq *cq, uint64_t id)
{
	return id > 0 && id < cq->nbyid ? cq->byid[id] : NULL;
}

static void stop_add(struct cq_worker *w, uint64_t id, long attempt);

/*
 * Ends running closure c CANCELLED at once; its worker is told to stop it
 * (TERM, its grace, KILL) with its next heartbeat, and a result of that
 * attempt that comes after is stale. The caller emits CQ_EV_STOP for w.
 */
static struct cq_worker *
cancel_running(struct cq *cq, struct cq_closure *c, int64_t now)
{
	struct cq_worker *w = c->worker;

	stop_add(w, c->id, c->attempts);
	run_unlink(c);
	c->q->inflight--;
	cq->v.inflight--;
	end(cq, c, CQ_CANCELLED, now);
	return w;
}

struct cancel_ctx {
	struct cq *cq;
	struct cq_queue *q;
	int64_t now;
};

/* Cancels q's closures waiting in l. */
static void
cancel_list(struct cq *cq, struct cq_pending *l, struct cq_queue *q,
    int64_t now)
{
	struct cq_closure *c, *next;

	for (c = l->head; c != NULL; c = next) {
		next = c->next;
		if (c->q == q) {
			cancelled_by_error(cq, c);
			cancel_queued(cq, c, now);
		}
	}
}

static void
cancel_worker_list(const char *k, size_t kl, void *v, void *arg)
{
	struct cancel_ctx *x = arg;
	struct cq_worker *w = v;
	struct cq_closure *c, *next;
	int stopped = 0;

	(void)k;
	(void)kl;
	cancel_list(x->cq, &w->pinned, x->q, x->now);
	for (c = w->run_head; c != NULL; c = next) {
		next = c->next;
		if (c->q == x->q) {
			cancelled_by_error(x->cq, c);
			cancel_running(x->cq, c, x->now);
			stopped = 1;
		}
	}
	if (stopped)
		emit(x->cq, CQ_EV_STOP, NULL, NULL, w);
}

struct cq_closure *
cq_take_error(struct cq *cq, struct cq_queue *q, int64_t now)
{
	struct cq_closure *e = q->error;
	struct cancel_ctx x = {cq, q, now};

	if (e == NULL)
		return NULL;
	cancel_list(cq, &cq->pending, q, now);
	strmap_each(cq->workers, cancel_worker_list, &x);
	q->error = NULL;
	jmark_q(cq, q);
	emit(cq, CQ_EV_QUEUE, NULL, q, NULL);
	jflush(cq);
	return e;
}

static void
stop_add(struct cq_worker *w, uint64_t id, long attempt)
{
	jmark_w(w->cq, w);
	if (w->nstop == w->capstop) {
		size_t cap = w->capstop != 0 ? w->capstop * 2 : 8;
		uint64_t *ids = realloc(w->stop, cap * sizeof(*ids));
		if (ids == NULL)
			return;
		w->stop = ids;
		long *at = realloc(w->stop_attempt, cap * sizeof(*at));
		if (at == NULL)
			return;
		w->stop_attempt = at;
		w->capstop = cap;
	}
	w->stop[w->nstop] = id;
	w->stop_attempt[w->nstop++] = attempt;
}

size_t
cq_take_stops(struct cq_worker *w, uint64_t **ids, long **attempts)
{
	size_t n = w->nstop;

	*ids = w->stop;
	*attempts = w->stop_attempt;
	w->stop = NULL;
	w->stop_attempt = NULL;
	w->nstop = w->capstop = 0;
	if (n > 0) {
		jmark_w(w->cq, w);
		jflush(w->cq);
	}
	return n;
}

enum status
cq_cancel(struct cq *cq, struct cq_closure *c, int64_t now)
{
	struct cq_queue *q = c->q;

	switch (c->state) {
	case CQ_QUEUED: cancel_queued(cq, c, now); break;
	case CQ_RUNNING:
		emit(cq, CQ_EV_STOP, NULL, NULL, cancel_running(cq, c, now));
		break;
	default: return ST_FAILED_PRECONDITION;
	}
	emit(cq, CQ_EV_QUEUE, NULL, q, NULL);
	jflush(cq);
	return ST_OK;
}

enum status
cq_forget(struct cq *cq, struct cq_closure *c)
{
	if (c->state == CQ_QUEUED || c->state == CQ_RUNNING)
		return ST_FAILED_PRECONDITION;
	if (c->q->error == c)
		return ST_FAILED_PRECONDITION;
	if (c->key != NULL)
		free(strmap_del(c->q->keys, c->key, strlen(c->key)));
	cq->byid[c->id] = NULL;
	cq->v.closures--;
	cq->v.spec_bytes -= c->speclen;
	if (cq->jfn != NULL) {
		struct buf item = {0};
		if (jforget_item(&item, c->id) == 0)
			jitem(cq, &item);
		else
			cq->jfn(NULL, 0, cq->jarg);
		buf_free(&item);
	}
	closure_free(cq, c);
	return ST_OK;
}

void
cq_each_closure(struct cq *cq, struct cq_queue *q,
    void (*fn)(struct cq_closure *c, void *arg), void *arg)
{
	for (size_t i = 1; i < cq->nbyid; i++) {
		struct cq_closure *c = cq->byid[i];
		if (c != NULL && (q == NULL || c->q == q))
			fn(c, arg);
	}
}

uint64_t
cq_each_closure_after(struct cq *cq, struct cq_queue *q, uint64_t after,
    size_t max, int (*fn)(struct cq_closure *c, void *arg), void *arg,
    int *more)
{
	uint64_t id = after;
	size_t seen = 0;

	while (id + 1 < cq->nbyid && seen < max) {
		struct cq_closure *c = cq->byid[++id];
		seen++;
		if (c != NULL && (q == NULL || c->q == q) && fn(c, arg) != 0)
			break;
	}
	*more = id + 1 < cq->nbyid;
	return id;
}

static void
live_changed(struct cq *cq, int delta, int64_t now)
{
	if (delta > 0)
		cq->v.workers_live++;
	else
		cq->v.workers_live--;
	if (cq->v.workers_live == 0)
		cq->no_worker_since = now;
}

/* Takes w's closures off it: each back to the queue or, past the limit
 * of deaths, ABORTED. */
static void
worker_down(struct cq *cq, struct cq_worker *w, const char *why, int death,
    int64_t now)
{
	struct cq_closure *c;

	if (!w->live)
		return;
	jmark_w(cq, w);
	w->live = 0;
	w->hb_parked = 0;
	live_changed(cq, -1, now);
	free(w->why);
	w->why = strdup(why);
	if (death) {
		w->deaths++;
		cq->v.deaths++;
	}
	while ((c = w->run_head) != NULL) {
		struct cq_queue *q = c->q;
		run_unlink(c);
		jmark_c(cq, c, 1);
		if (death && ++c->deaths >= cq->cfg.max_deaths) {
			char m[512];
			q->inflight--;
			cq->v.inflight--;
			snprintf(m, sizeof(m),
			    "closure %" PRIu64 " was running on %ld workers "
			    "that died (the last, %s: %s)",
			    c->id, c->deaths, w->name, why);
			result_clear(cq, &c->res);
			c->res.message = strdup(m);
			fail(cq, c);
			end(cq, c, CQ_ABORTED, now);
		} else {
			put_back(cq, c, 1, now);
		}
		emit(cq, CQ_EV_QUEUE, NULL, q, NULL);
	}
	free(w->stop);
	free(w->stop_attempt);
	w->stop = NULL;
	w->stop_attempt = NULL;
	w->nstop = w->capstop = 0;
	strmap_free(w->resources, resource_state_free);
	w->resources = strmap_new();
	emit(cq, CQ_EV_WORKER_GONE, NULL, NULL, w);
}

void
cq_worker_failed(struct cq *cq, struct cq_worker *w, const char *why,
    int64_t now)
{
	worker_down(cq, w, why, 1, now);
	jflush(cq);
}

void
cq_worker_leave(struct cq *cq, struct cq_worker *w, int64_t now)
{
	worker_down(cq, w, "left", 0, now);
	jflush(cq);
}

struct cq_worker *
cq_register(struct cq *cq, const char *name, long slots, int64_t now, char *msg,
    size_t msglen)
{
	struct cq_worker *w;

	if (!cq_name_valid(name)) {
		say(msg, msglen, "%s is not a worker name", name);
		return NULL;
	}
	if ((w = worker_get(cq, name, 1)) == NULL || w->resources == NULL) {
		say(msg, msglen, "out of memory");
		jflush(cq);
		return NULL;
	}
	if (w->live)
		worker_down(cq, w,
		    "it registered again: the incarnation before is gone", 1,
		    now);
	w->inc = task_new_incarnation();
	w->live = 1;
	/* A new process: whatever ailed the last one may be gone. */
	w->sick_until = 0;
	w->sick_streak = 0;
	w->slots = slots;
	w->last_seen = now;
	w->incarnations++;
	live_changed(cq, 1, now);
	jmark_w(cq, w);
	emit(cq, CQ_EV_WORK, NULL, NULL, w);
	jflush(cq);
	return w;
}

enum status
cq_worker_check(const struct cq_worker *w, const char *inc, char *msg,
    size_t msglen)
{
	uint64_t v;

	if (inc == NULL || task_parse_incarnation(inc, &v) < 0) {
		say(msg, msglen, "incarnation= must be 16 hex digits");
		return ST_INVALID_ARGUMENT;
	}
	if (!w->live || v != w->inc) {
		say(msg, msglen, "%s incarnation %s is not current (%s)",
		    w->name, inc,
		    w->live ? "it registered again" :
		              (w->why != NULL ? w->why : "not registered"));
		return ST_ABORTED;
	}
	return ST_OK;
}

void
cq_seen(struct cq *cq, struct cq_worker *w, int64_t now)
{
	(void)cq;
	w->last_seen = now;
}

static int
takeable(const struct cq_closure *c)
{
	return c->q->error == NULL;
}

int
cq_worker_sick(const struct cq_worker *w, int64_t now)
{
	return w->sick_until != 0 && now < w->sick_until;
}

void
cq_worker_unhealthy(struct cq *cq, struct cq_worker *w, const char *why,
    int64_t now)
{
	int64_t pause = 2000;

	for (unsigned i = 0; i < w->sick_streak && pause < CQ_SICK_MAX_MS; i++)
		pause *= 2;
	if (pause > CQ_SICK_MAX_MS)
		pause = CQ_SICK_MAX_MS;
	w->sick_until = now + pause;
	if (w->sick_until == 0)
		w->sick_until = 1;
	w->sick_streak++;
	w->start_failures++;
	cq->v.start_failures++;
	free(w->sick_why);
	w->sick_why = strdup(why);
}

int
cq_has_work(const struct cq *cq, const struct cq_worker *w, int64_t now)
{
	if (!w->live || cq_worker_sick(w, now))
		return 0;
	for (const struct cq_closure *c = w->pinned.head; c != NULL;
	     c = c->next)
		if (takeable(c))
			return 1;
	for (const struct cq_closure *c = cq->pending.head; c != NULL;
	     c = c->next)
		if (takeable(c))
			return 1;
	return 0;
}

static void
start(struct cq *cq, struct cq_worker *w, struct cq_closure *c, int64_t now)
{
	pend_unlink(c);
	c->q->queued--;
	cq->v.queued--;
	c->q->inflight++;
	cq->v.inflight++;
	c->state = CQ_RUNNING;
	jmark_c(cq, c, 1);
	c->attempts++;
	c->worker = w;
	c->started = now;
	free(c->last_worker);
	c->last_worker = strdup(w->name);
	c->prev = NULL;
	c->next = w->run_head;
	if (w->run_head != NULL)
		w->run_head->prev = c;
	w->run_head = c;
	w->running++;
	emit(cq, CQ_EV_QUEUE, NULL, c->q, NULL);
}

static size_t
take_from(struct cq *cq, struct cq_worker *w, struct cq_pending *l, size_t max,
    int64_t now, struct cq_closure **out)
{
	struct cq_closure *c = l->head, *next;
	size_t n = 0;

	for (; c != NULL && n < max; c = next) {
		next = c->next;
		if (!takeable(c))
			continue;
		start(cq, w, c, now);
		out[n++] = c;
	}
	return n;
}

size_t
cq_take(struct cq *cq, struct cq_worker *w, size_t max, int64_t now,
    struct cq_closure **out)
{
	size_t n;

	if (!w->live || cq_worker_sick(w, now))
		return 0;
	n = take_from(cq, w, &w->pinned, max, now, out);
	n += take_from(cq, w, &cq->pending, max - n, now, out + n);
	jflush(cq);
	return n;
}

static int
retryable(const struct cq_closure *c, const struct cq_result *r)
{
	if (!r->exited || r->message != NULL || c->retries >= c->max_retries)
		return 0;
	for (size_t i = 0; i < c->nretry_exit; i++)
		if (c->retry_exit[i] == r->code)
			return 1;
	return 0;
}

enum status
cq_report(struct cq *cq, struct cq_worker *w, uint64_t id, long attempt,
    int aborted, struct cq_result *res, int64_t now, char *msg, size_t msglen)
{
	struct cq_closure *c = cq_closure(cq, id);
	struct cq_queue *q;

	if (c == NULL || c->state != CQ_RUNNING || c->worker != w ||
	    c->attempts != attempt) {
		cq->v.stale++;
		say(msg, msglen,
		    "attempt %ld of closure %" PRIu64 " is not current on %s",
		    attempt, id, w->name);
		return ST_ABORTED;
	}
	q = c->q;
	run_unlink(c);
	jmark_c(cq, c, 1);
	if (!aborted) {
		/* It started a closure: whatever ailed it has passed. */
		w->sick_until = 0;
		w->sick_streak = 0;
	}
	if (aborted) {
		put_back(cq, c, 1, now);
	} else if (retryable(c, res)) {
		c->retries++;
		q->retried++;
		jmark_q(cq, q);
		cq->v.retried++;
		put_back(cq, c, 0, now);
	} else {
		q->inflight--;
		cq->v.inflight--;
		result_clear(cq, &c->res);
		c->res = *res;
		memset(res, 0, sizeof(*res));
		cq->v.value_bytes += c->res.outlen + c->res.errlen;
		if (!c->res.exited || c->res.code != 0 ||
		    c->res.message != NULL)
			fail(cq, c);
		end(cq, c, CQ_READY, now);
	}
	emit(cq, CQ_EV_QUEUE, NULL, q, NULL);
	jflush(cq);
	return ST_OK;
}

struct scan_ctx {
	struct cq *cq;
	int64_t now;
	struct cq_worker **late;
	size_t n, cap;
};

static void
scan_one(const char *k, size_t kl, void *v, void *arg)
{
	struct scan_ctx *x = arg;
	struct cq_worker *w = v;

	(void)k;
	(void)kl;
	if (w->sick_until != 0 && x->now >= w->sick_until) {
		w->sick_until = 0;
		emit(x->cq, CQ_EV_WORK, NULL, NULL, w);
	}
	if (!w->live || w->hb_parked ||
	    x->now - w->last_seen <= x->cq->cfg.hb_timeout_ms)
		return;
	if (vec_grow(&x->late, &x->cap, x->n + 1, sizeof(*x->late)) < 0)
		return;
	x->late[x->n++] = w;
}

void
cq_scan(struct cq *cq, int64_t now)
{
	struct scan_ctx x = {cq, now, NULL, 0, 0};
	char why[128], d[32];

	strmap_each(cq->workers, scan_one, &x);
	for (size_t i = 0; i < x.n; i++) {
		snprintf(why, sizeof(why), "no heartbeat for %s",
		    duration_format(now - x.late[i]->last_seen, d, sizeof(d)));
		worker_down(cq, x.late[i], why, 1, now);
	}
	free(x.late);
	jflush(cq);
}

void
cq_resource_state(struct cq_worker *w, const char *name, int state,
    const char *message)
{
	struct cq_resource_state *s =
	    strmap_get(w->resources, name, strlen(name));

	if (s == NULL) {
		if ((s = calloc(1, sizeof(*s))) == NULL ||
		    strmap_put(w->resources, name, strlen(name), s) < 0) {
			free(s);
			return;
		}
	}
	s->state = state;
	free(s->message);
	s->message = message != NULL ? strdup(message) : NULL;
	jmark_w(w->cq, w);
	jflush(w->cq);
}

enum status
cq_resource_add(struct cq *cq, const char *name, json_t *argv, char *msg,
    size_t msglen)
{
	json_t *v, *o;
	size_t i;
	char *text, *old;

	if (!cq_name_valid(name)) {
		say(msg, msglen,
		    "%s is not a resource name (letters, digits, _-.:)", name);
		return ST_INVALID_ARGUMENT;
	}
	if (!json_is_array(argv) || json_array_size(argv) == 0) {
		say(msg, msglen, "argv must be a non-empty array of strings");
		return ST_INVALID_ARGUMENT;
	}
	json_array_foreach(argv, i, v)
		if (!json_is_string(v) ||
		    json_string_length(v) != strlen(json_string_value(v))) {
			say(msg, msglen,
			    "argv[%zu] must be a string without NUL", i);
			return ST_INVALID_ARGUMENT;
		}
	if ((old = strmap_get(cq->resources, name, strlen(name))) != NULL) {
		o = json_loads(old, 0, NULL);
		int same =
		    o != NULL && json_equal(json_object_get(o, "argv"), argv);
		json_decref(o);
		if (same)
			return ST_OK;
		say(msg, msglen, "resource %s exists with another command",
		    name);
		return ST_ALREADY_EXISTS;
	}
	o = json_pack("{s:s,s:O}", "name", name, "argv", argv);
	text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (text == NULL ||
	    strmap_put(cq->resources, name, strlen(name), text) < 0) {
		free(text);
		say(msg, msglen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	if (cq->jfn != NULL) {
		struct buf item = {0};
		if (jresource_item(&item, name, text) == 0)
			jitem(cq, &item);
		else
			cq->jfn(NULL, 0, cq->jarg);
		buf_free(&item);
	}
	return ST_OK;
}

const char *
cq_resource(const struct cq *cq, const char *name)
{
	return strmap_get(cq->resources, name, strlen(name));
}

struct each_res {
	void (*fn)(const char *name, const char *json, void *arg);
	void *arg;
};

static void
each_res(const char *k, size_t kl, void *v, void *arg)
{
	struct each_res *e = arg;
	char name[CQ_NAME_MAX + 1];

	snprintf(name, sizeof(name), "%.*s", (int)kl, k);
	e->fn(name, v, e->arg);
}

void
cq_each_resource(struct cq *cq,
    void (*fn)(const char *name, const char *json, void *arg), void *arg)
{
	struct each_res e = {fn, arg};

	strmap_each(cq->resources, each_res, &e);
}

/*
 * The journal's bytes. A record is "CQR" and a version byte, a snapshot
 * "CQS" and one; then items, each a tag byte and its fields in rec.h's
 * codec: unsigned numbers as LEB128 varints, signed ones zigzagged first,
 * strings and bytes as a varint of their length + 1 (0: NULL) and the
 * bytes.
 *
 *	W worker: name index inc live slots incarnations deaths why,
 *	  n x (resource state message), n x (stop id, attempt)
 *	N closure, new: id queue spec on key, n x need, n x retry code,
 *	  max_retries, then what S has after its id
 *	S closure, now: id state front retries attempts deaths worker
 *	  last_worker failed exited code out truncated err message
 *	Q queue: name scheduled done failed cancelled retried error
 *	F forgotten closure: id
 *	R resource: name json
 *	V counters: next-id done failed retried cancelled aborted deaths
 *	  put_back
 *
 * A record holds W items, then N and S in the order the closures changed
 * (a closure's place in its list follows from it), then Q, F or R, and V
 * last. A snapshot holds V, R, W, then every closure as N (ended ones by
 * id, then each list in order), then Q: names sorted, so that one state
 * gives one snapshot.
 */
#define J_VERSION 1
#define J_ID_MAX ((uint64_t)1 << 40)
#define J_ID_STEP ((uint64_t)1 << 20) /* ids one record may add */

/* A strmap's entries, sorted by key. */
struct kv {
	const char *k;
	size_t kl;
	void *v;
};

struct kvs {
	struct kv *a;
	size_t n, cap;
	int err;
};

static void
kvs_add(const char *k, size_t kl, void *v, void *arg)
{
	struct kvs *s = arg;

	if (vec_grow(&s->a, &s->cap, s->n + 1, sizeof(*s->a)) < 0) {
		s->err = 1;
		return;
	}
	s->a[s->n++] = (struct kv){k, kl, v};
}

static int
kv_cmp(const void *pa, const void *pb)
{
	const struct kv *a = pa, *b = pb;
	int r = memcmp(a->k, b->k, a->kl < b->kl ? a->kl : b->kl);

	if (r != 0)
		return r;
	return a->kl < b->kl ? -1 : a->kl > b->kl;
}

static int
sorted(const struct strmap *m, struct kvs *s)
{
	strmap_each(m, kvs_add, s);
	if (s->err)
		return -1;
	if (s->n > 1)
		qsort(s->a, s->n, sizeof(*s->a), kv_cmp);
	return 0;
}

static void
enc_worker(struct rec_out *e, const struct cq_worker *w)
{
	struct kvs rs = {0};

	rec_put_tag(e, 'W');
	rec_put_s(e, w->name);
	rec_put_i(e, w->index);
	rec_put_u(e, w->inc);
	rec_put_u(e, (uint64_t)w->live);
	rec_put_i(e, w->slots);
	rec_put_u(e, w->incarnations);
	rec_put_u(e, w->deaths);
	rec_put_s(e, w->why);
	if (w->resources != NULL && sorted(w->resources, &rs) < 0)
		e->err = 1;
	rec_put_u(e, rs.n);
	for (size_t i = 0; i < rs.n; i++) {
		const struct cq_resource_state *s = rs.a[i].v;
		rec_put_sn(e, rs.a[i].k, rs.a[i].kl);
		rec_put_u(e, (uint64_t)s->state);
		rec_put_s(e, s->message);
	}
	free(rs.a);
	rec_put_u(e, w->nstop);
	for (size_t i = 0; i < w->nstop; i++) {
		rec_put_u(e, w->stop[i]);
		rec_put_i(e, w->stop_attempt[i]);
	}
}

static void
enc_closure(struct rec_out *e, const struct cq_closure *c, int full, int front)
{
	rec_put_tag(e, full ? 'N' : 'S');
	rec_put_u(e, c->id);
	if (full) {
		size_t n = 0;
		rec_put_s(e, c->q->name);
		rec_put_sn(e, c->spec, c->speclen);
		rec_put_s(e, c->on);
		rec_put_s(e, c->key);
		while (c->needs != NULL && c->needs[n] != NULL)
			n++;
		rec_put_u(e, n);
		for (size_t i = 0; i < n; i++)
			rec_put_s(e, c->needs[i]);
		rec_put_u(e, c->nretry_exit);
		for (size_t i = 0; i < c->nretry_exit; i++)
			rec_put_i(e, c->retry_exit[i]);
		rec_put_i(e, c->max_retries);
	}
	rec_put_u(e, (uint64_t)c->state);
	rec_put_u(e, (uint64_t)front);
	rec_put_i(e, c->retries);
	rec_put_i(e, c->attempts);
	rec_put_i(e, c->deaths);
	rec_put_s(e, c->worker != NULL ? c->worker->name : NULL);
	rec_put_s(e, c->last_worker);
	rec_put_u(e, (uint64_t)c->failed);
	rec_put_u(e, (uint64_t)c->res.exited);
	rec_put_i(e, c->res.code);
	rec_put_sn(e, c->res.out, c->res.outlen);
	rec_put_u(e, (uint64_t)c->res.truncated);
	rec_put_sn(e, c->res.err, c->res.errlen);
	rec_put_s(e, c->res.message);
}

static void
enc_queue(struct rec_out *e, const struct cq_queue *q)
{
	rec_put_tag(e, 'Q');
	rec_put_s(e, q->name);
	rec_put_u(e, q->scheduled);
	rec_put_u(e, q->done);
	rec_put_u(e, q->failed);
	rec_put_u(e, q->cancelled);
	rec_put_u(e, q->retried);
	rec_put_u(e, q->error != NULL ? q->error->id : 0);
}

static void
enc_counts(struct rec_out *e, const struct cq *cq)
{
	rec_put_tag(e, 'V');
	rec_put_u(e, cq->nid);
	rec_put_u(e, cq->v.done);
	rec_put_u(e, cq->v.failed);
	rec_put_u(e, cq->v.retried);
	rec_put_u(e, cq->v.cancelled);
	rec_put_u(e, cq->v.aborted);
	rec_put_u(e, cq->v.deaths);
	rec_put_u(e, cq->v.put_back);
}

static void
jsend(struct cq *cq, const struct rec_out *e)
{
	if (e->err)
		cq->jfn(NULL, 0, cq->jarg);
	else
		cq->jfn(cq->jbuf.data, cq->jbuf.len, cq->jarg);
}

/* Writes what the call changed as one record, if anything. */
static void
jflush(struct cq *cq)
{
	struct rec_out e = {&cq->jbuf, 0};

	if (cq->jfn == NULL || cq->replaying ||
	    (cq->jc == NULL && cq->jq == NULL && cq->jw == NULL))
		return;
	buf_reset(&cq->jbuf);
	rec_put_bytes(&e, "CQR\1", 4);
	for (struct cq_worker *w = cq->jw; w != NULL; w = w->jnext) {
		enc_worker(&e, w);
		w->jdirty = 0;
	}
	for (struct cq_closure *c = cq->jc; c != NULL; c = c->jnext) {
		enc_closure(&e, c, c->jdirty == 2, c->jfront);
		c->jdirty = c->jfront = 0;
	}
	for (struct cq_queue *q = cq->jq; q != NULL; q = q->jnext) {
		enc_queue(&e, q);
		q->jdirty = 0;
	}
	cq->jw = cq->jwtail = NULL;
	cq->jc = cq->jctail = NULL;
	cq->jq = cq->jqtail = NULL;
	enc_counts(&e, cq);
	jsend(cq, &e);
}

/* Writes item (a forget, a resource) as a record of its own. */
static void
jitem(struct cq *cq, const struct buf *item)
{
	struct rec_out e = {&cq->jbuf, 0};

	jflush(cq);
	buf_reset(&cq->jbuf);
	rec_put_bytes(&e, "CQR\1", 4);
	rec_put_bytes(&e, item->data, item->len);
	enc_counts(&e, cq);
	jsend(cq, &e);
}

static int
jforget_item(struct buf *b, uint64_t id)
{
	struct rec_out e = {b, 0};

	rec_put_tag(&e, 'F');
	rec_put_u(&e, id);
	return e.err ? -1 : 0;
}

static int
jresource_item(struct buf *b, const char *name, const char *json)
{
	struct rec_out e = {b, 0};

	rec_put_tag(&e, 'R');
	rec_put_s(&e, name);
	rec_put_s(&e, json);
	return e.err ? -1 : 0;
}

void
cq_set_journal(struct cq *cq, cq_journal_fn fn, void *arg)
{
	cq->jfn = fn;
	cq->jarg = arg;
}

/* A worker's running closures, oldest first (as taking them pushed them). */
static void
enc_running(struct rec_out *e, const struct cq_worker *w,
    struct cq_closure ***tmp, size_t *cap)
{
	size_t n = 0;

	if (w->running > *cap) {
		struct cq_closure **t = realloc(*tmp, w->running * sizeof(*t));
		if (t == NULL) {
			e->err = 1;
			return;
		}
		*tmp = t;
		*cap = w->running;
	}
	for (struct cq_closure *c = w->run_head; c != NULL && n < *cap;
	     c = c->next)
		(*tmp)[n++] = c;
	while (n > 0)
		enc_closure(e, (*tmp)[--n], 1, 0);
}

int
cq_snapshot(struct cq *cq, struct buf *out)
{
	struct rec_out e = {out, 0};
	struct kvs ws = {0}, qs = {0}, rs = {0};
	struct cq_closure **tmp = NULL;
	size_t cap = 0;

	if (sorted(cq->workers, &ws) < 0 || sorted(cq->queues, &qs) < 0 ||
	    sorted(cq->resources, &rs) < 0) {
		e.err = 1;
		goto out;
	}
	rec_put_bytes(&e, "CQS\1", 4);
	enc_counts(&e, cq);
	for (size_t i = 0; i < rs.n; i++) {
		rec_put_tag(&e, 'R');
		rec_put_sn(&e, rs.a[i].k, rs.a[i].kl);
		rec_put_s(&e, rs.a[i].v);
	}
	for (size_t i = 0; i < ws.n; i++)
		enc_worker(&e, ws.a[i].v);
	for (size_t i = 1; i < cq->nbyid; i++) {
		struct cq_closure *c = cq->byid[i];
		if (c != NULL && c->state != CQ_QUEUED &&
		    c->state != CQ_RUNNING)
			enc_closure(&e, c, 1, 0);
	}
	for (struct cq_closure *c = cq->pending.head; c != NULL; c = c->next)
		enc_closure(&e, c, 1, 0);
	for (size_t i = 0; i < ws.n; i++) {
		struct cq_worker *w = ws.a[i].v;
		for (struct cq_closure *c = w->pinned.head; c != NULL;
		     c = c->next)
			enc_closure(&e, c, 1, 0);
		enc_running(&e, w, &tmp, &cap);
	}
	for (size_t i = 0; i < qs.n; i++)
		enc_queue(&e, qs.a[i].v);
out:
	free(tmp);
	free(ws.a);
	free(qs.a);
	free(rs.a);
	return e.err ? -1 : 0;
}

/* Reading: every field checked against the bytes left. */

struct dec {
	struct rec_in in;
	const unsigned char *start;
	char *err;
	size_t errlen;
};

static int dbad(struct dec *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int
dbad(struct dec *d, const char *fmt, ...)
{
	char m[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	say(d->err, d->errlen, "at byte %zu: %s", (size_t)(d->in.p - d->start),
	    m);
	return -1;
}

/* Says why the reader failed, if it did. */
static int
dcheck(struct dec *d)
{
	if (!d->in.err)
		return 0;
	return dbad(d, "%s",
	    d->in.p == d->in.end ? "cut short" : "a number too large");
}

static int
get_u(struct dec *d, uint64_t *v)
{
	*v = rec_get_u(&d->in);
	return dcheck(d);
}

static int
get_max(struct dec *d, uint64_t *v, uint64_t max, const char *what)
{
	if (get_u(d, v) < 0)
		return -1;
	if (*v > max)
		return dbad(d, "%s %" PRIu64 " is out of range", what, *v);
	return 0;
}

static int
get_int(struct dec *d, int64_t *v, int64_t min, int64_t max, const char *what)
{
	*v = rec_get_i(&d->in);
	if (dcheck(d) < 0)
		return -1;
	if (*v < min || *v > max)
		return dbad(d, "%s %" PRId64 " is out of range", what, *v);
	return 0;
}

static int
get_long(struct dec *d, long *v, long min, long max, const char *what)
{
	int64_t x;

	if (get_int(d, &x, min, max, what) < 0)
		return -1;
	*v = (long)x;
	return 0;
}

static int
get_ulong(struct dec *d, unsigned long *v)
{
	uint64_t x;

	if (get_max(d, &x, ULONG_MAX, "a counter") < 0)
		return -1;
	*v = (unsigned long)x;
	return 0;
}

static int
get_flag(struct dec *d, int *v)
{
	uint64_t x;

	if (get_max(d, &x, 1, "a flag") < 0)
		return -1;
	*v = (int)x;
	return 0;
}

/* Bytes in place; set is 0 for NULL. */
struct sview {
	const char *p;
	size_t n;
	int set;
};

enum { SPAN_BYTES, SPAN_TEXT, SPAN_NAME };

static int
get_span(struct dec *d, struct sview *s, int kind, int need, const char *what)
{
	s->p = rec_get_sn(&d->in, SIZE_MAX, &s->n);
	if (d->in.err)
		return dbad(d, "%s is cut short", what);
	s->set = s->p != NULL;
	if (!s->set) {
		if (need)
			return dbad(d, "%s is missing", what);
		return 0;
	}
	if (kind != SPAN_BYTES && memchr(s->p, '\0', s->n) != NULL)
		return dbad(d, "%s holds a NUL", what);
	if (kind == SPAN_NAME) {
		char nm[CQ_NAME_MAX + 1];
		if (s->n > CQ_NAME_MAX)
			return dbad(d, "%s is too long", what);
		memcpy(nm, s->p, s->n);
		nm[s->n] = '\0';
		if (!cq_name_valid(nm))
			return dbad(d, "%s is not a name", what);
	}
	return 0;
}

/* A name span (checked) as a C string in nm. */
static const char *
sview_name(const struct sview *s, char nm[CQ_NAME_MAX + 1])
{
	memcpy(nm, s->p, s->n);
	nm[s->n] = '\0';
	return nm;
}

static char *
sview_dup(const struct sview *s, int *nomem)
{
	char *p;

	if (!s->set)
		return NULL;
	if ((p = malloc(s->n + 1)) == NULL) {
		*nomem = 1;
		return NULL;
	}
	memcpy(p, s->p, s->n);
	p[s->n] = '\0';
	return p;
}

/* A count of items of at least one byte each. */
static int
get_count(struct dec *d, uint64_t *n, uint64_t max, const char *what)
{
	if (get_max(d, n, max, what) < 0)
		return -1;
	if (*n > rec_left(&d->in))
		return dbad(d, "%s: more than there are bytes", what);
	return 0;
}

struct jworker {
	struct sview name, why;
	long index, slots;
	uint64_t inc, nres, nstop;
	int live;
	unsigned long incarnations, deaths;
	struct dec res, stops; /* where the lists begin */
};

static int
get_resource_state(struct dec *d, struct sview *name, uint64_t *state,
    struct sview *msg)
{
	if (get_span(d, name, SPAN_NAME, 1, "a resource's name") < 0 ||
	    get_max(d, state, CQ_RES_FAILED, "a resource's state") < 0 ||
	    get_span(d, msg, SPAN_TEXT, 0, "a resource's message") < 0)
		return -1;
	return 0;
}

static int
get_stop(struct dec *d, uint64_t *id, long *attempt)
{
	if (get_max(d, id, J_ID_MAX, "a stop's closure") < 0 ||
	    get_long(d, attempt, 0, LONG_MAX, "a stop's attempt") < 0)
		return -1;
	return 0;
}

static int
dec_worker(struct dec *d, struct jworker *x)
{
	struct sview s;
	uint64_t u;
	long l;

	if (get_span(d, &x->name, SPAN_NAME, 1, "a worker's name") < 0 ||
	    get_long(d, &x->index, LONG_MIN, LONG_MAX, "an index") < 0 ||
	    get_u(d, &x->inc) < 0 || get_flag(d, &x->live) < 0 ||
	    get_long(d, &x->slots, 0, LONG_MAX, "slots") < 0 ||
	    get_ulong(d, &x->incarnations) < 0 ||
	    get_ulong(d, &x->deaths) < 0 ||
	    get_span(d, &x->why, SPAN_TEXT, 0, "why") < 0 ||
	    get_count(d, &x->nres, UINT64_MAX, "resources") < 0)
		return -1;
	x->res = *d;
	for (uint64_t i = 0; i < x->nres; i++)
		if (get_resource_state(d, &s, &u, &s) < 0)
			return -1;
	if (get_count(d, &x->nstop, UINT64_MAX, "stops") < 0)
		return -1;
	x->stops = *d;
	for (uint64_t i = 0; i < x->nstop; i++)
		if (get_stop(d, &u, &l) < 0)
			return -1;
	return 0;
}

struct jclosure {
	uint64_t id;
	int full;
	struct sview queue, spec, on, key;
	uint64_t nneeds;
	struct dec needs;
	size_t nretry;
	int retry[CQ_MAX_RETRY_CODES];
	long max_retries;
	uint64_t state;
	int front, failed, exited, truncated;
	long retries, attempts, deaths;
	struct sview worker, last_worker, out, err, message;
	int code;
};

static int
dec_spec(struct dec *d, struct jclosure *x)
{
	struct sview s;
	uint64_t n;

	if (get_span(d, &x->queue, SPAN_NAME, 1, "a closure's queue") < 0 ||
	    get_span(d, &x->spec, SPAN_TEXT, 1, "a closure's spec") < 0 ||
	    get_span(d, &x->on, SPAN_NAME, 0, "on") < 0 ||
	    get_span(d, &x->key, SPAN_TEXT, 0, "a key") < 0 ||
	    get_count(d, &x->nneeds, 64, "needs") < 0)
		return -1;
	x->needs = *d;
	for (uint64_t i = 0; i < x->nneeds; i++)
		if (get_span(d, &s, SPAN_NAME, 1, "a need") < 0)
			return -1;
	if (get_max(d, &n, CQ_MAX_RETRY_CODES, "retry codes") < 0)
		return -1;
	x->nretry = (size_t)n;
	for (size_t i = 0; i < x->nretry; i++) {
		int64_t v;
		if (get_int(d, &v, 1, 255, "a retry code") < 0)
			return -1;
		x->retry[i] = (int)v;
	}
	return get_long(d, &x->max_retries, 0, LONG_MAX, "max_retries");
}

static int
dec_closure(struct dec *d, struct jclosure *x, int full)
{
	int64_t code;

	x->full = full;
	if (get_max(d, &x->id, J_ID_MAX, "a closure id") < 0)
		return -1;
	if (x->id == 0)
		return dbad(d, "closure id 0");
	if (full && dec_spec(d, x) < 0)
		return -1;
	if (get_max(d, &x->state, CQ_CANCELLED, "a state") < 0 ||
	    get_flag(d, &x->front) < 0 ||
	    get_long(d, &x->retries, 0, LONG_MAX, "retries") < 0 ||
	    get_long(d, &x->attempts, 0, LONG_MAX, "attempts") < 0 ||
	    get_long(d, &x->deaths, 0, LONG_MAX, "deaths") < 0 ||
	    get_span(d, &x->worker, SPAN_NAME, 0, "a worker") < 0 ||
	    get_span(d, &x->last_worker, SPAN_NAME, 0, "the last worker") < 0 ||
	    get_flag(d, &x->failed) < 0 || get_flag(d, &x->exited) < 0 ||
	    get_int(d, &code, INT_MIN, INT_MAX, "a code") < 0 ||
	    get_span(d, &x->out, SPAN_BYTES, 0, "stdout") < 0 ||
	    get_flag(d, &x->truncated) < 0 ||
	    get_span(d, &x->err, SPAN_BYTES, 0, "stderr") < 0 ||
	    get_span(d, &x->message, SPAN_TEXT, 0, "a message") < 0)
		return -1;
	x->code = (int)code;
	if ((x->state == CQ_RUNNING) != x->worker.set)
		return dbad(d, "closure %" PRIu64 " %s a worker", x->id,
		    x->worker.set ? "does not run, yet names" : "runs without");
	return 0;
}

struct jqueue {
	struct sview name;
	unsigned long scheduled, done, failed, cancelled, retried;
	uint64_t error;
};

static int
dec_queue(struct dec *d, struct jqueue *x)
{
	if (get_span(d, &x->name, SPAN_NAME, 1, "a queue's name") < 0 ||
	    get_ulong(d, &x->scheduled) < 0 || get_ulong(d, &x->done) < 0 ||
	    get_ulong(d, &x->failed) < 0 || get_ulong(d, &x->cancelled) < 0 ||
	    get_ulong(d, &x->retried) < 0 ||
	    get_max(d, &x->error, J_ID_MAX, "a queue's error") < 0)
		return -1;
	return 0;
}

struct jcounts {
	uint64_t nid;
	unsigned long done, failed, retried, cancelled, aborted, deaths,
	    put_back;
};

static int
dec_counts(struct dec *d, struct jcounts *x)
{
	if (get_max(d, &x->nid, J_ID_MAX, "the next id") < 0 ||
	    get_ulong(d, &x->done) < 0 || get_ulong(d, &x->failed) < 0 ||
	    get_ulong(d, &x->retried) < 0 || get_ulong(d, &x->cancelled) < 0 ||
	    get_ulong(d, &x->aborted) < 0 || get_ulong(d, &x->deaths) < 0 ||
	    get_ulong(d, &x->put_back) < 0)
		return -1;
	if (x->nid == 0)
		return dbad(d, "the next id is 0");
	return 0;
}

/* Applying: closures move between lists as their state says. */

static void
j_detach(struct cq *cq, struct cq_closure *c)
{
	if (c->state == CQ_QUEUED && c->list != NULL) {
		pend_unlink(c);
		c->q->queued--;
		cq->v.queued--;
	} else if (c->state == CQ_RUNNING && c->worker != NULL) {
		run_unlink(c);
		c->q->inflight--;
		cq->v.inflight--;
	}
}

static void
j_attach(struct cq *cq, struct cq_closure *c, enum cq_state st, int front,
    struct cq_worker *w, int64_t now)
{
	c->state = st;
	switch (st) {
	case CQ_QUEUED:
		pend_push(pending_for(cq, c), c, front);
		c->q->queued++;
		cq->v.queued++;
		break;
	case CQ_RUNNING:
		c->worker = w;
		c->started = now;
		c->prev = NULL;
		c->next = w->run_head;
		if (w->run_head != NULL)
			w->run_head->prev = c;
		w->run_head = c;
		w->running++;
		c->q->inflight++;
		cq->v.inflight++;
		break;
	default:
		c->ended = now;
		cq->last_end = now;
		break;
	}
}

static int
j_nomem(struct dec *d)
{
	return dbad(d, "out of memory");
}

static int
apply_worker(struct cq *cq, struct jworker *x, int64_t now, struct dec *d)
{
	char nm[CQ_NAME_MAX + 1];
	struct cq_worker *w = worker_get(cq, sview_name(&x->name, nm), 1);
	struct strmap *m = strmap_new();
	uint64_t *stop = NULL;
	long *at = NULL;
	int nomem = 0;

	if (w == NULL || m == NULL)
		goto nomem;
	for (uint64_t i = 0; i < x->nres; i++) {
		struct sview name, msg;
		uint64_t state;
		struct cq_resource_state *s;
		get_resource_state(&x->res, &name, &state, &msg);
		if (strmap_get(m, name.p, name.n) != NULL) {
			strmap_free(m, resource_state_free);
			return dbad(d, "worker %s has a resource twice", nm);
		}
		if ((s = calloc(1, sizeof(*s))) == NULL)
			goto nomem;
		s->state = (int)state;
		s->message = sview_dup(&msg, &nomem);
		if (nomem || strmap_put(m, name.p, name.n, s) < 0) {
			resource_state_free(s);
			goto nomem;
		}
	}
	if (x->nstop > 0 &&
	    ((stop = malloc(x->nstop * sizeof(*stop))) == NULL ||
	        (at = malloc(x->nstop * sizeof(*at))) == NULL))
		goto nomem;
	for (uint64_t i = 0; i < x->nstop; i++)
		get_stop(&x->stops, &stop[i], &at[i]);
	free(w->why);
	w->why = sview_dup(&x->why, &nomem);
	if (nomem)
		goto nomem;
	strmap_free(w->resources, resource_state_free);
	w->resources = m;
	free(w->stop);
	free(w->stop_attempt);
	w->stop = stop;
	w->stop_attempt = at;
	w->nstop = w->capstop = (size_t)x->nstop;
	if (x->live != w->live)
		live_changed(cq, x->live ? 1 : -1, now);
	w->live = x->live;
	w->index = x->index;
	w->inc = x->inc;
	w->slots = x->slots;
	w->incarnations = x->incarnations;
	w->deaths = x->deaths;
	w->last_seen = now;
	w->hb_parked = 0;
	jmark_w(cq, w);
	return 0;
nomem:
	strmap_free(m, resource_state_free);
	free(stop);
	free(at);
	return j_nomem(d);
}

static void apply_forget(struct cq *cq, uint64_t id);

/* A new closure from x, in no list yet; NULL (d says why) when it cannot. */
static struct cq_closure *
j_closure_new(struct cq *cq, struct jclosure *x, int64_t now, struct dec *d)
{
	char nm[CQ_NAME_MAX + 1];
	struct cq_queue *q;
	struct cq_closure *c;
	uint64_t *old;
	int nomem = 0;

	if (cq_closure(cq, x->id) != NULL) {
		dbad(d, "closure %" PRIu64 " exists", x->id);
		return NULL;
	}
	if ((q = cq_queue(cq, sview_name(&x->queue, nm), 1)) == NULL ||
	    (c = calloc(1, sizeof(*c))) == NULL) {
		j_nomem(d);
		return NULL;
	}
	c->id = x->id;
	c->q = q;
	c->state = CQ_CANCELLED; /* in no list */
	c->spec = sview_dup(&x->spec, &nomem);
	c->speclen = x->spec.n;
	c->on = sview_dup(&x->on, &nomem);
	c->key = sview_dup(&x->key, &nomem);
	if (x->nneeds > 0 &&
	    (c->needs = calloc(x->nneeds + 1, sizeof(char *))) == NULL)
		nomem = 1;
	for (uint64_t i = 0; c->needs != NULL && i < x->nneeds; i++) {
		struct sview s;
		get_span(&x->needs, &s, SPAN_NAME, 1, "a need");
		c->needs[i] = sview_dup(&s, &nomem);
	}
	memcpy(c->retry_exit, x->retry, sizeof(c->retry_exit));
	c->nretry_exit = x->nretry;
	c->max_retries = x->max_retries;
	c->enqueued = now;
	/* A key is free again once its closure is forgotten: it was. */
	if (!nomem && c->key != NULL &&
	    (old = strmap_get(q->keys, c->key, strlen(c->key))) != NULL) {
		apply_forget(cq, *old);
		free(strmap_del(q->keys, c->key, strlen(c->key)));
	}
	if (!nomem && c->key != NULL) {
		uint64_t *v = malloc(sizeof(*v));
		if (v == NULL ||
		    strmap_put(q->keys, c->key, strlen(c->key), v) < 0) {
			free(v);
			nomem = 1;
		} else {
			*v = c->id;
		}
	}
	if (nomem || byid_grow(cq, x->id) < 0) {
		if (!nomem && c->key != NULL)
			free(strmap_del(q->keys, c->key, strlen(c->key)));
		closure_free(cq, c);
		j_nomem(d);
		return NULL;
	}
	cq->byid[x->id] = c;
	cq->v.closures++;
	cq->v.spec_bytes += c->speclen;
	if (x->id >= cq->nid)
		cq->nid = x->id + 1;
	return c;
}

static int
apply_closure(struct cq *cq, struct jclosure *x, int64_t now, struct dec *d)
{
	char nm[CQ_NAME_MAX + 1];
	struct cq_closure *c;
	struct cq_worker *w = NULL;
	int fresh = 0, nomem = 0;

	if (x->full) {
		if ((c = j_closure_new(cq, x, now, d)) == NULL)
			return -1;
		fresh = 1;
	} else if ((c = cq_closure(cq, x->id)) == NULL) {
		return 0; /* forgotten since, or its first record never came */
	}
	if (x->state == CQ_RUNNING &&
	    (w = worker_get(cq, sview_name(&x->worker, nm), 1)) == NULL)
		return j_nomem(d);
	if (fresh || c->state != (enum cq_state)x->state || c->worker != w) {
		j_detach(cq, c);
		j_attach(cq, c, (enum cq_state)x->state, x->front, w, now);
	}
	if (w != NULL)
		jmark_w(cq, w); /* checked after the record: is it live? */
	c->retries = x->retries;
	c->attempts = x->attempts;
	c->deaths = x->deaths;
	c->failed = x->failed;
	free(c->last_worker);
	c->last_worker = sview_dup(&x->last_worker, &nomem);
	result_clear(cq, &c->res);
	c->res.exited = x->exited;
	c->res.code = x->code;
	c->res.truncated = x->truncated;
	c->res.out = sview_dup(&x->out, &nomem);
	c->res.outlen = c->res.out != NULL ? x->out.n : 0;
	c->res.err = sview_dup(&x->err, &nomem);
	c->res.errlen = c->res.err != NULL ? x->err.n : 0;
	c->res.message = sview_dup(&x->message, &nomem);
	cq->v.value_bytes += c->res.outlen + c->res.errlen;
	return nomem ? j_nomem(d) : 0;
}

static int
apply_queue(struct cq *cq, struct jqueue *x, struct dec *d)
{
	char nm[CQ_NAME_MAX + 1];
	struct cq_queue *q = cq_queue(cq, sview_name(&x->name, nm), 1);
	struct cq_closure *e = NULL;

	if (q == NULL)
		return j_nomem(d);
	/* Gone (its own record never came): the error is lost with it. */
	if (x->error != 0 && (e = cq_closure(cq, x->error)) != NULL &&
	    e->q != q)
		return dbad(d,
		    "queue %s's error, closure %" PRIu64 ", is another queue's",
		    nm, x->error);
	q->error = e;
	q->scheduled = x->scheduled;
	q->done = x->done;
	q->failed = x->failed;
	q->cancelled = x->cancelled;
	q->retried = x->retried;
	return 0;
}

static int
apply_counts(struct cq *cq, struct jcounts *x, struct dec *d)
{
	if (x->nid < cq->nbyid)
		return dbad(d, "the next id %" PRIu64 " is one in use", x->nid);
	cq->nid = x->nid;
	cq->v.done = x->done;
	cq->v.failed = x->failed;
	cq->v.retried = x->retried;
	cq->v.cancelled = x->cancelled;
	cq->v.aborted = x->aborted;
	cq->v.deaths = x->deaths;
	cq->v.put_back = x->put_back;
	return 0;
}

static void
apply_forget(struct cq *cq, uint64_t id)
{
	struct cq_closure *c = cq_closure(cq, id);

	if (c == NULL)
		return;
	j_detach(cq, c);
	if (c->q->error == c)
		c->q->error = NULL;
	if (c->key != NULL)
		free(strmap_del(c->q->keys, c->key, strlen(c->key)));
	cq->byid[id] = NULL;
	cq->v.closures--;
	cq->v.spec_bytes -= c->speclen;
	closure_free(cq, c);
}

static int
apply_resource(struct cq *cq, struct sview *name, struct sview *json,
    struct dec *d)
{
	char nm[CQ_NAME_MAX + 1];
	json_t *o = json_loadb(json->p, json->n, 0, NULL);
	int ok = json_is_object(o);
	char *text, *old;
	int nomem = 0;

	json_decref(o);
	if (!ok)
		return dbad(d, "resource %s is not JSON", sview_name(name, nm));
	if ((text = sview_dup(json, &nomem)) == NULL)
		return j_nomem(d);
	old = strmap_get(cq->resources, name->p, name->n);
	if (strmap_put(cq->resources, name->p, name->n, text) < 0) {
		free(text);
		return j_nomem(d);
	}
	free(old);
	return 0;
}

/*
 * Closures left running on a worker that is not live (a record of their
 * own never came) go back to the front of the queue, as on its death.
 */
static void
j_settle(struct cq *cq)
{
	struct cq_worker *w, *next;

	for (w = cq->jw; w != NULL; w = next) {
		next = w->jnext;
		w->jdirty = 0;
		while (!w->live && w->run_head != NULL) {
			struct cq_closure *c = w->run_head;
			j_detach(cq, c);
			j_attach(cq, c, CQ_QUEUED, 1, NULL, 0);
		}
	}
	cq->jw = cq->jwtail = NULL;
}

union jitem {
	struct jworker w;
	struct jclosure c;
	struct jqueue q;
	struct jcounts v;
};

/* One item at d; applied unless dry. */
static int
j_item(struct cq *cq, struct dec *d, int dry, int64_t now, uint64_t *maxid,
    uint64_t *nid)
{
	union jitem x;
	struct sview name, json;
	uint64_t id;
	int tag = rec_get_tag(&d->in);

	if (tag < 0)
		return dcheck(d);
	switch (tag) {
	case 'W':
		if (dec_worker(d, &x.w) < 0)
			return -1;
		return dry ? 0 : apply_worker(cq, &x.w, now, d);
	case 'N':
	case 'S':
		if (dec_closure(d, &x.c, tag == 'N') < 0)
			return -1;
		if (tag == 'N' && x.c.id > *maxid)
			*maxid = x.c.id;
		return dry ? 0 : apply_closure(cq, &x.c, now, d);
	case 'Q':
		if (dec_queue(d, &x.q) < 0)
			return -1;
		return dry ? 0 : apply_queue(cq, &x.q, d);
	case 'F':
		if (get_max(d, &id, J_ID_MAX, "a closure id") < 0)
			return -1;
		if (!dry)
			apply_forget(cq, id);
		return 0;
	case 'R':
		if (get_span(d, &name, SPAN_NAME, 1, "a resource's name") < 0 ||
		    get_span(d, &json, SPAN_TEXT, 1, "a resource") < 0)
			return -1;
		return dry ? 0 : apply_resource(cq, &name, &json, d);
	case 'V':
		if (dec_counts(d, &x.v) < 0)
			return -1;
		if (*nid != 0)
			return dbad(d, "counters twice");
		*nid = x.v.nid;
		return dry ? 0 : apply_counts(cq, &x.v, d);
	default: d->in.p--; return dbad(d, "no item is tagged 0x%02x", tag);
	}
}

/*
 * Reads p: checks it all when dry, else applies it. Closures may not
 * reach past the next id the counters give, nor a record take more than
 * J_ID_STEP ids at once.
 */
static int
j_items(struct cq *cq, const void *p, size_t len, const char *magic, int dry,
    int64_t now, char *err, size_t errlen)
{
	struct dec d = {.start = p, .err = err, .errlen = errlen};
	uint64_t maxid = 0, nid = 0;

	rec_in_init(&d.in, p, len);

	if (len < 4 || memcmp(p, magic, 3) != 0)
		return dbad(&d, "not a %s",
		    magic[2] == 'S' ? "closure queue snapshot" :
		                      "closure queue record");
	if (d.start[3] != J_VERSION)
		return dbad(&d, "version %u, not %d", d.start[3], J_VERSION);
	rec_get_bytes(&d.in, 4);
	while (rec_left(&d.in) > 0)
		if (j_item(cq, &d, dry, now, &maxid, &nid) < 0)
			return -1;
	if (!dry)
		return 0;
	if (nid == 0)
		return dbad(&d, "no counters");
	if (maxid >= nid)
		return dbad(&d, "closure %" PRIu64 " is past the next id",
		    maxid);
	if (magic[2] == 'R' && nid > cq->nid + J_ID_STEP)
		return dbad(&d, "the next id leaps to %" PRIu64, nid);
	return 0;
}

int
cq_apply(struct cq *cq, const void *rec, size_t len, int64_t now, char *err,
    size_t errlen)
{
	int rc;

	if (j_items(cq, rec, len, "CQR", 1, now, err, errlen) < 0)
		return -1;
	cq->replaying = 1;
	rc = j_items(cq, rec, len, "CQR", 0, now, err, errlen);
	j_settle(cq);
	cq->replaying = 0;
	return rc;
}

int
cq_restore(struct cq *cq, const void *p, size_t len, int64_t now, char *err,
    size_t errlen)
{
	int rc;

	if (cq->nbyid != 1 || cq->nid != 1 || strmap_count(cq->queues) != 0 ||
	    strmap_count(cq->workers) != 0 ||
	    strmap_count(cq->resources) != 0) {
		say(err, errlen, "a snapshot loads into an empty queue only");
		return -1;
	}
	if (j_items(cq, p, len, "CQS", 1, now, err, errlen) < 0)
		return -1;
	cq->replaying = 1;
	rc = j_items(cq, p, len, "CQS", 0, now, err, errlen);
	j_settle(cq);
	cq->replaying = 0;
	cq->last_end = now;
	cq->no_worker_since = now;
	return rc;
}
