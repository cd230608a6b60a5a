/*
 * closureq_obj.c: the closure queue's objects (closures, queues, workers),
 * their lists and lookups; see closureq_int.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "closureq_int.h"
#include "strmap.h"
#include "task.h"
#include "text.h"
#include "vec.h"

void
cq_emit(struct cq *cq, enum cq_event_type type, struct cq_closure *c,
    struct cq_queue *q, struct cq_worker *w)
{
	struct cq_event ev = {type, c, q, w};

	if (!cq->replaying)
		cq->observe(&ev, cq->arg);
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
	return text_name(name, CQ_NAME_MAX);
}

/* Pending lists. */

void
cq_pend_push(struct cq_pending *l, struct cq_closure *c, int front)
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

void
cq_pend_unlink(struct cq_closure *c)
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

/* Running lists: newest first, as taking them pushes them. */
void
cq_run_push(struct cq_worker *w, struct cq_closure *c)
{
	c->worker = w;
	c->prev = NULL;
	c->next = w->run_head;
	if (w->run_head != NULL)
		w->run_head->prev = c;
	w->run_head = c;
	w->running++;
}

void
cq_run_unlink(struct cq_closure *c)
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

void
cq_result_clear(struct cq *cq, struct cq_result *r)
{
	cq->v.value_bytes -= r->outlen + r->errlen;
	free(r->out);
	free(r->err);
	free(r->message);
	memset(r, 0, sizeof(*r));
}

void
cq_closure_free(struct cq *cq, struct cq_closure *c)
{
	cq_result_clear(cq, &c->res);
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

void
cq_resource_state_free(void *v)
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
	strmap_free(w->resources, cq_resource_state_free);
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
			cq_closure_free(cq, cq->byid[i]);
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

static void
heard(struct cq_worker *w, void *arg)
{
	w->last_seen = *(const int64_t *)arg;
}

void
cq_heard_all(struct cq *cq, int64_t now)
{
	cq_each_worker(cq, heard, &now);
	cq->last_end = now;
	cq->no_worker_since = now;
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
cq_queue_get(struct cq *cq, const char *name, int create)
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

struct cq_worker *
cq_worker_get(struct cq *cq, const char *name, int create)
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
	return w;
}

struct cq_worker *
cq_worker(struct cq *cq, const char *name)
{
	return cq_worker_get(cq, name, 0);
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

struct cq_pending *
cq_pending_for(struct cq *cq, struct cq_closure *c)
{
	if (c->on != NULL) {
		struct cq_worker *w = cq_worker_get(cq, c->on, 1);
		if (w != NULL)
			return &w->pinned;
	}
	return &cq->pending;
}

int
cq_byid_grow(struct cq *cq, uint64_t id)
{
	if (id >= SIZE_MAX ||
	    vec_grow(&cq->byid, &cq->capid, (size_t)id + 1, sizeof(*cq->byid)) <
	        0)
		return -1;
	for (; cq->nbyid <= id; cq->nbyid++)
		cq->byid[cq->nbyid] = NULL;
	return 0;
}

void
cq_live_changed(struct cq *cq, int delta, int64_t now)
{
	if (delta > 0)
		cq->v.workers_live++;
	else
		cq->v.workers_live--;
	if (cq->v.workers_live == 0)
		cq->no_worker_since = now;
}

int
cq_may_take(const struct cq_closure *c, const struct cq_worker *w)
{
	return c->state == CQ_QUEUED && c->q->error == NULL &&
	    (c->on == NULL || strcmp(c->on, w->name) == 0);
}

struct cq_closure *
cq_closure(struct cq *cq, uint64_t id)
{
	return id > 0 && id < cq->nbyid ? cq->byid[id] : NULL;
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

int
cq_worker_sick(const struct cq_worker *w, int64_t now)
{
	return w->sick_until != 0 && now < w->sick_until;
}

int
cq_has_work(const struct cq *cq, const struct cq_worker *w, int64_t now)
{
	if (!w->live || cq_worker_sick(w, now))
		return 0;
	for (const struct cq_closure *c = w->pinned.head; c != NULL;
	     c = c->next)
		if (cq_may_take(c, w))
			return 1;
	for (const struct cq_closure *c = cq->pending.head; c != NULL;
	     c = c->next)
		if (cq_may_take(c, w))
			return 1;
	return 0;
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
