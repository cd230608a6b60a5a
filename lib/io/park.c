#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "park.h"
#include "strmap.h"

struct park {
	pthread_mutex_t *mu;
	struct timers *timers;
	size_t count;
	struct parked *answered; /* to resume once the lock is free */
	int64_t max_wait;
	void (*unlock)(void *arg); /* how the lock is let go */
	void *unlock_arg;
};

struct park_index {
	struct strmap *lists; /* key -> struct park_list */
	size_t waiting;
};

static void
park_unlock_cb(void *arg)
{
	park_unlock(arg);
}

int
park_wait_arg(struct http_req *req, const char *name, int64_t def, int64_t *ms)
{
	const char *s = http_req_arg(req, name);

	*ms = def;
	if (s == NULL)
		return 0;
	if (duration_parse(s, ms) < 0) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "%s=%s is not a duration (like 500ms, 30s, 5m)", name, s);
		return -1;
	}
	/* Deadlines stay far from overflow; park caps waits lower still. */
	if (*ms > PARK_MAX_WAIT_MS)
		*ms = PARK_MAX_WAIT_MS;
	return 0;
}

struct park *
park_new(pthread_mutex_t *mu, char *err, size_t errlen)
{
	struct park *p = calloc(1, sizeof(*p));

	if (p == NULL || (p->timers = timers_new(mu)) == NULL) {
		free(p);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	p->mu = mu;
	p->max_wait = PARK_WAIT_DEFAULT_MS;
	p->unlock = park_unlock_cb;
	p->unlock_arg = p;
	timers_set_unlock(p->timers, park_unlock_cb, p);
	if (timers_start(p->timers) < 0) {
		timers_free(p->timers);
		free(p);
		snprintf(err, errlen, "cannot start the timer thread");
		return NULL;
	}
	return p;
}

void
park_free(struct park *p)
{
	if (p == NULL)
		return;
	timers_free(p->timers);
	free(p);
}

void
park_set_unlock(struct park *p, void (*unlock)(void *arg), void *arg)
{
	p->unlock = unlock;
	p->unlock_arg = arg;
	timers_set_unlock(p->timers, unlock, arg);
}

void
park_set_max_wait(struct park *p, int64_t max_ms)
{
	p->max_wait = max_ms <= 0     ? PARK_WAIT_DEFAULT_MS :
	    max_ms > PARK_MAX_WAIT_MS ? PARK_MAX_WAIT_MS :
	                                max_ms;
}

struct timers *
park_timers(struct park *p)
{
	return p->timers;
}

size_t
park_count(const struct park *p)
{
	return p->count;
}

static void
list_free(struct park_list *l)
{
	if (l->index != NULL)
		strmap_del(l->index->lists, l->key, l->klen);
	free(l->key);
	free(l);
}

static void
unlink_parked(struct parked *w)
{
	struct park_list *l = w->list;

	timers_cancel(w->park->timers, &w->timer);
	if (l == NULL)
		return;
	if (w->prev != NULL)
		w->prev->next = w->next;
	else
		l->head = w->next;
	if (w->next != NULL)
		w->next->prev = w->prev;
	w->prev = w->next = NULL;
	w->list = NULL;
	l->count--;
	w->park->count--;
	if (l->index != NULL) {
		l->index->waiting--;
		if (l->count == 0 && !l->busy)
			list_free(l);
	}
}

/* Queues w's request to be resumed, and w freed, after the lock. */
static void
answered(struct parked *w)
{
	http_req_set_data(w->req, NULL);
	w->out = w->park->answered;
	w->park->answered = w;
}

/* Links w at the head of l. */
static void
link_parked(struct parked *w, struct park_list *l)
{
	w->list = l;
	w->prev = NULL;
	w->next = l->head;
	if (l->head != NULL)
		l->head->prev = w;
	l->head = w;
	l->count++;
	w->park->count++;
	if (l->index != NULL)
		l->index->waiting++;
}

static void
timer_fire(struct timer *t)
{
	struct parked *w = (struct parked *)t;

	unlink_parked(w);
	answered(w);
	w->expire(w);
}

struct parked *
park_add(struct park *p, struct http_req *req, struct park_list *l,
    int64_t timeout_ms, park_fn expire, const char *key, size_t klen)
{
	struct parked *w = calloc(1, sizeof(*w) + klen + 1);

	if (w == NULL)
		return NULL;
	if (timeout_ms > p->max_wait)
		timeout_ms = p->max_wait;
	if (timeout_ms < 0)
		timeout_ms = 0;
	w->park = p;
	w->req = req;
	w->expire = expire;
	w->klen = klen;
	memcpy(w->key, key, klen);
	w->key[klen] = '\0';
	w->timer.fire = timer_fire;
	if (timers_add(p->timers, &w->timer, duration_now_ms() + timeout_ms) <
	    0) {
		free(w);
		return NULL;
	}
	link_parked(w, l);
	http_req_set_data(req, w);
	http_req_hold(req);
	http_park(req);
	return w;
}

int
park_move(struct parked *w, struct park_list *l, int64_t timeout_ms,
    park_fn expire)
{
	if (timeout_ms > w->park->max_wait)
		timeout_ms = w->park->max_wait;
	if (timeout_ms < 0)
		timeout_ms = 0;
	/* Its own timer leaves the heap: re-arming it needs no memory. */
	unlink_parked(w);
	if (timers_add(w->park->timers, &w->timer,
	        duration_now_ms() + timeout_ms) < 0)
		return -1;
	w->expire = expire;
	link_parked(w, l);
	return 0;
}

void
park_take(struct parked *w)
{
	unlink_parked(w);
	answered(w);
}

void
park_take_later(struct parked *w, park_fn build)
{
	w->build = build;
	park_take(w);
}

void
park_answer_all(struct park_list *l, struct http_shared *sh)
{
	park_list_hold(l);
	while (l->head != NULL) {
		struct parked *w = l->head;
		park_take(w);
		if (sh != NULL)
			http_reply_shared(w->req, sh);
		else
			http_reply_error(w->req, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
	}
	park_list_release(l);
}

void
park_gone(struct park *p, struct http_req *req)
{
	struct parked *w;

	pthread_mutex_lock(p->mu);
	if ((w = http_req_data(req)) != NULL && w->list != NULL) {
		park_take(w);
		if (w->drop != NULL)
			w->drop(w);
		/* Nobody reads it: it only lets the connection close. */
		http_reply_error(req, ST_CANCELLED, "the client went away");
	}
	/* The daemon acts on what the drop function changed. */
	p->unlock(p->unlock_arg);
}

void
park_unlock(struct park *p)
{
	struct parked *w = p->answered, *next;

	p->answered = NULL;
	pthread_mutex_unlock(p->mu);
	/* Oldest last is fine: they all go out now. */
	for (; w != NULL; w = next) {
		next = w->out;
		if (w->build != NULL)
			w->build(w);
		http_req_release(w->req);
		free(w);
	}
}

struct park_index *
park_index_new(void)
{
	struct park_index *ix = calloc(1, sizeof(*ix));

	if (ix == NULL || (ix->lists = strmap_new()) == NULL) {
		free(ix);
		return NULL;
	}
	return ix;
}

static void
free_list(void *v)
{
	struct park_list *l = v;

	free(l->key);
	free(l);
}

void
park_index_free(struct park_index *ix)
{
	if (ix == NULL)
		return;
	strmap_free(ix->lists, free_list);
	free(ix);
}

struct park_list *
park_index_list(struct park_index *ix, const char *key, size_t klen)
{
	struct park_list *l = strmap_get(ix->lists, key, klen);

	if (l != NULL)
		return l;
	if ((l = calloc(1, sizeof(*l))) == NULL ||
	    (l->key = malloc(klen + 1)) == NULL) {
		free(l);
		return NULL;
	}
	memcpy(l->key, key, klen);
	l->key[klen] = '\0';
	l->klen = klen;
	if (strmap_put(ix->lists, key, klen, l) < 0) {
		free(l->key);
		free(l);
		return NULL;
	}
	l->index = ix;
	return l;
}

struct park_list *
park_index_find(const struct park_index *ix, const char *key, size_t klen)
{
	return strmap_get(ix->lists, key, klen);
}

size_t
park_index_waiting(const struct park_index *ix)
{
	return ix->waiting;
}

struct gather {
	struct park_list **v;
	size_t n;
};

static void
gather_one(const char *key, size_t klen, void *value, void *arg)
{
	struct gather *g = arg;

	(void)key;
	(void)klen;
	g->v[g->n++] = value;
}

void
park_index_each(struct park_index *ix,
    void (*fn)(struct park_list *l, void *arg), void *arg)
{
	struct gather g = {
	    .v = calloc(strmap_count(ix->lists) + 1, sizeof(*g.v))};

	if (g.v == NULL)
		return;
	/* The map may change under fn: walk a copy of its lists. */
	strmap_each(ix->lists, gather_one, &g);
	for (size_t i = 0; i < g.n; i++)
		park_list_hold(g.v[i]);
	for (size_t i = 0; i < g.n; i++)
		fn(g.v[i], arg);
	for (size_t i = 0; i < g.n; i++)
		park_list_release(g.v[i]);
	free(g.v);
}

void
park_list_hold(struct park_list *l)
{
	l->busy++;
}

void
park_list_release(struct park_list *l)
{
	if (--l->busy == 0 && l->count == 0 && l->index != NULL)
		list_free(l);
}

void
park_list_prune(struct park_list *l)
{
	if (l->busy == 0 && l->count == 0 && l->index != NULL)
		list_free(l);
}
