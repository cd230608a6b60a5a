/*
 * closureq.c: closures, queues and workers; see closureq.h.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "closureq.h"
#include "duration.h"
#include "strmap.h"
#include "task.h"
#include "text.h"

struct cq {
	struct cq_config cfg;
	struct cq_view v;
	struct cq_closure **byid;  /* index id; NULL once forgotten */
	size_t nid, capid;         /* ids used so far + 1, room */
	struct cq_pending pending; /* closures any worker may run */
	struct strmap *queues;     /* name -> struct cq_queue */
	struct strmap *workers;    /* name -> struct cq_worker */
	struct strmap *resources;  /* name -> JSON text */
	int64_t last_end;
	int64_t no_worker_since;
	cq_observer_fn observe;
	void *arg;
};

static void
emit(struct cq *cq, enum cq_event_type type, struct cq_closure *c,
    struct cq_queue *q, struct cq_worker *w)
{
	struct cq_event ev = {type, c, q, w};

	cq->observe(&ev, cq->arg);
}

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
	cq->observe = fn;
	cq->arg = arg;
	cq->nid = 1;
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
	for (size_t i = 1; i < cq->nid; i++)
		if (cq->byid[i] != NULL)
			closure_free(cq, cq->byid[i]);
	free(cq->byid);
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
	cq->v.workers++;
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
		end(cq, c, CQ_CANCELLED, now);
		return;
	}
	c->state = CQ_QUEUED;
	pend_push(pending_for(cq, c), c, front);
	c->q->queued++;
	cq->v.queued++;
	cq->v.put_back++;
	emit(cq, CQ_EV_WORK, NULL, NULL, NULL);
}

static int
byid_grow(struct cq *cq)
{
	if (cq->nid < cq->capid)
		return 0;
	size_t cap = cq->capid != 0 ? cq->capid * 2 : 1024;
	struct cq_closure **v = realloc(cq->byid, cap * sizeof(*v));
	if (v == NULL)
		return -1;
	cq->byid = v;
	cq->capid = cap;
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
	if (byid_grow(cq) < 0)
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
	pend_push(pending_for(cq, c), c, 0);
	q->queued++;
	q->scheduled++;
	cq->v.queued++;
	cq->v.closures++;
	*id = c->id;
	emit(cq, CQ_EV_WORK, NULL, NULL, NULL);
	return ST_OK;
nomem:
	closure_free(cq, c);
	say(msg, msglen, "out of memory");
	return ST_RESOURCE_EXHAUSTED;
}

struct cq_closure *
cq_closure(struct cq *cq, uint64_t id)
{
	return id > 0 && id < cq->nid ? cq->byid[id] : NULL;
}

static void
cancel_list(struct cq *cq, struct cq_pending *l, struct cq_queue *q,
    int64_t now)
{
	struct cq_closure *c = l->head, *next;

	for (; c != NULL; c = next) {
		next = c->next;
		if (c->q == q)
			cancel_queued(cq, c, now);
	}
}

struct cancel_ctx {
	struct cq *cq;
	struct cq_queue *q;
	int64_t now;
};

static void
cancel_worker_list(const char *k, size_t kl, void *v, void *arg)
{
	struct cancel_ctx *x = arg;
	struct cq_worker *w = v;

	(void)k;
	(void)kl;
	cancel_list(x->cq, &w->pinned, x->q, x->now);
}

struct cq_closure *
cq_take_error(struct cq *cq, struct cq_queue *q, int64_t now, int *wait)
{
	struct cq_closure *e = q->error;
	struct cancel_ctx x = {cq, q, now};

	*wait = 0;
	if (e == NULL)
		return NULL;
	if (q->inflight > 0) {
		*wait = 1;
		return NULL;
	}
	cancel_list(cq, &cq->pending, q, now);
	strmap_each(cq->workers, cancel_worker_list, &x);
	q->error = NULL;
	emit(cq, CQ_EV_QUEUE, NULL, q, NULL);
	return e;
}

static void
stop_add(struct cq_worker *w, uint64_t id, long attempt)
{
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
	return n;
}

enum status
cq_cancel(struct cq *cq, struct cq_closure *c, int64_t now)
{
	struct cq_queue *q = c->q;

	switch (c->state) {
	case CQ_QUEUED: cancel_queued(cq, c, now); break;
	case CQ_RUNNING: {
		struct cq_worker *w = c->worker;
		stop_add(w, c->id, c->attempts);
		run_unlink(c);
		q->inflight--;
		cq->v.inflight--;
		end(cq, c, CQ_CANCELLED, now);
		emit(cq, CQ_EV_STOP, NULL, NULL, w);
		break;
	}
	default: return ST_FAILED_PRECONDITION;
	}
	emit(cq, CQ_EV_QUEUE, NULL, q, NULL);
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
	closure_free(cq, c);
	return ST_OK;
}

void
cq_each_closure(struct cq *cq, struct cq_queue *q,
    void (*fn)(struct cq_closure *c, void *arg), void *arg)
{
	for (size_t i = 1; i < cq->nid; i++) {
		struct cq_closure *c = cq->byid[i];
		if (c != NULL && (q == NULL || c->q == q))
			fn(c, arg);
	}
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
}

void
cq_worker_leave(struct cq *cq, struct cq_worker *w, int64_t now)
{
	worker_down(cq, w, "left", 0, now);
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
		return NULL;
	}
	if (w->live)
		worker_down(cq, w,
		    "it registered again: the incarnation before is gone", 1,
		    now);
	w->inc = task_new_incarnation();
	w->live = 1;
	w->slots = slots;
	w->last_seen = now;
	w->incarnations++;
	live_changed(cq, 1, now);
	emit(cq, CQ_EV_WORK, NULL, NULL, w);
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
cq_has_work(const struct cq *cq, const struct cq_worker *w)
{
	if (!w->live)
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

	if (!w->live)
		return 0;
	n = take_from(cq, w, &w->pinned, max, now, out);
	n += take_from(cq, w, &cq->pending, max - n, now, out + n);
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
	if (aborted) {
		put_back(cq, c, 1, now);
	} else if (retryable(c, res)) {
		c->retries++;
		q->retried++;
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
	if (!w->live || w->hb_parked ||
	    x->now - w->last_seen <= x->cq->cfg.hb_timeout_ms)
		return;
	if (x->n == x->cap) {
		size_t cap = x->cap != 0 ? x->cap * 2 : 8;
		struct cq_worker **l = realloc(x->late, cap * sizeof(*l));
		if (l == NULL)
			return;
		x->late = l;
		x->cap = cap;
	}
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
