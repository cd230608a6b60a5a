#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "coord_int.h"
#include "duration.h"
#include "log.h"

static void
timer_fire(struct timer *t)
{
	struct waiter *w = (struct waiter *)t;

	waiter_unlink(w);
	w->expire(w);
}

struct waiter *
waiter_park(struct coord *co, struct http_req *req, struct waitlist *list,
    int64_t timeout_ms, void (*expire)(struct waiter *w), const char *key,
    size_t klen)
{
	struct waiter *w = calloc(1, sizeof(*w) + klen + 1);

	if (w == NULL)
		return NULL;
	w->co = co;
	w->req = req;
	w->expire = expire;
	w->klen = klen;
	memcpy(w->key, key, klen);
	w->key[klen] = '\0';
	w->timer.fire = timer_fire;
	if (timers_add(co->timers, &w->timer,
	    duration_now_ms() + timeout_ms) < 0) {
		free(w);
		return NULL;
	}
	w->list = list;
	w->next = list->head;
	if (list->head != NULL)
		list->head->prev = w;
	list->head = w;
	list->count++;
	http_park(req);
	return w;
}

void
waiter_unlink(struct waiter *w)
{
	struct waitlist *l = w->list;

	timers_cancel(w->co->timers, &w->timer);
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
}

void
waiter_free(struct waiter *w)
{
	free(w);
}

void
coord_answer_all(struct waitlist *l, enum status st, const char *msg,
    json_t *obj)
{
	struct http_shared *sh;

	if (st != ST_OK)
		obj = json_pack("{s:{s:s,s:s}}", "error", "code",
		    status_name(st), "message", msg != NULL ? msg : "");
	sh = l->head != NULL ? http_shared_json(st == ST_OK ? 200 :
	    status_http(st), obj) : (json_decref(obj), NULL);
	while (l->head != NULL) {
		struct waiter *w = l->head;
		waiter_unlink(w);
		if (sh != NULL)
			http_reply_shared(w->req, sh);
		else
			http_reply_error(w->req, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
		waiter_free(w);
	}
	http_shared_release(sh);
}

int
coord_arg_duration(struct http_req *req, const char *name, int64_t def,
    int64_t *ms)
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
	/* No wait is longer than a year: deadlines stay far from overflow. */
	if (*ms > COORD_MAX_WAIT_MS)
		*ms = COORD_MAX_WAIT_MS;
	return 0;
}

struct coord *
coord_new(const struct coord_config *cfg, char *err, size_t errlen)
{
	struct coord *co = calloc(1, sizeof(*co));

	if (co == NULL)
		goto nomem;
	pthread_mutex_init(&co->mu, NULL);
	if ((co->timers = timers_new(&co->mu)) == NULL ||
	    (co->getters = strmap_new()) == NULL ||
	    (co->kv = kv_new(&cfg->kv, coord_kv_observe, co)) == NULL)
		goto nomem;
	if (coord_cluster_init(co, cfg, err, errlen) < 0) {
		coord_free(co);
		return NULL;
	}
	if (timers_start(co->timers) < 0) {
		snprintf(err, errlen, "cannot start the timer thread");
		coord_free(co);
		return NULL;
	}
	return co;
nomem:
	snprintf(err, errlen, "out of memory");
	coord_free(co);
	return NULL;
}

void
coord_set_server(struct coord *co, struct http_server *srv)
{
	co->srv = srv;
}

void
coord_reply_closing(struct http_req *req)
{
	http_set_header(req, "Retry-After", "1");
	http_reply_error(req, ST_UNAVAILABLE, "coordd is shutting down");
}

static void
drain(struct waitlist *l)
{
	while (l->head != NULL) {
		struct waiter *w = l->head;
		waiter_unlink(w);
		coord_reply_closing(w->req);
		waiter_free(w);
	}
}

static void
drain_getters(const char *key, size_t klen, void *value, void *arg)
{
	(void)key;
	(void)klen;
	(void)arg;
	drain(value);
	free(value);
}

void
coord_shutdown(struct coord *co)
{
	pthread_mutex_lock(&co->mu);
	co->closing = 1;
	strmap_each(co->getters, drain_getters, NULL);
	strmap_free(co->getters, NULL);
	co->getters = strmap_new();
	drain(&co->watchers);
	coord_cluster_shutdown(co);
	pthread_mutex_unlock(&co->mu);
}

void
coord_free(struct coord *co)
{
	if (co == NULL)
		return;
	if (co->timers != NULL)
		timers_stop(co->timers);
	coord_cluster_free(co);
	if (co->timers != NULL)
		timers_free(co->timers);
	strmap_free(co->getters, free);
	kv_free(co->kv);
	pthread_mutex_destroy(&co->mu);
	free(co);
}

static void
metrics(struct coord *co, struct http_req *req)
{
	struct buf b = {0};

	pthread_mutex_lock(&co->mu);
	buf_printf(&b,
	    "# HELP muster_kv_keys Keys in the store.\n"
	    "# TYPE muster_kv_keys gauge\n"
	    "muster_kv_keys %zu\n"
	    "# HELP muster_kv_bytes Bytes of keys and values held.\n"
	    "# TYPE muster_kv_bytes gauge\n"
	    "muster_kv_bytes %zu\n"
	    "# HELP muster_kv_revision The store's current revision.\n"
	    "# TYPE muster_kv_revision counter\n"
	    "muster_kv_revision %" PRId64 "\n"
	    "# HELP muster_kv_watchers Parked watch requests.\n"
	    "# TYPE muster_kv_watchers gauge\n"
	    "muster_kv_watchers %zu\n"
	    "# HELP muster_timers Armed deadlines.\n"
	    "# TYPE muster_timers gauge\n"
	    "muster_timers %zu\n"
	    "# HELP muster_tasks Tasks in the cluster.\n"
	    "# TYPE muster_tasks gauge\n"
	    "muster_tasks %zu\n"
	    "# HELP muster_tasks_connected Tasks connected now.\n"
	    "# TYPE muster_tasks_connected gauge\n"
	    "muster_tasks_connected %zu\n"
	    "# HELP muster_epoch Runs of the job since coordd started.\n"
	    "# TYPE muster_epoch counter\n"
	    "muster_epoch %ld\n",
	    kv_count(co->kv), kv_bytes(co->kv), kv_revision(co->kv),
	    co->watchers.count, timers_count(co->timers), co->cl.ntasks,
	    co->cl.nconnected, co->cl.epoch);
	pthread_mutex_unlock(&co->mu);
	if (co->srv != NULL)
		buf_printf(&b,
		    "# HELP muster_http_requests_total Requests received.\n"
		    "# TYPE muster_http_requests_total counter\n"
		    "muster_http_requests_total %lu\n"
		    "# HELP muster_http_parked Requests parked now.\n"
		    "# TYPE muster_http_parked gauge\n"
		    "muster_http_parked %lu\n",
		    http_server_requests(co->srv), http_server_parked(co->srv));
	http_reply(req, 200, "text/plain; version=0.0.4", b.data, b.len);
	buf_free(&b);
}

static int
prefixed(const char *path, const char *prefix, const char **rest)
{
	size_t n = strlen(prefix);

	if (strncmp(path, prefix, n) != 0)
		return 0;
	*rest = path + n;
	return 1;
}

void
coord_handle(struct http_req *req, void *arg)
{
	struct coord *co = arg;
	const char *path = http_req_path(req);
	const char *method = http_req_method(req);
	const char *rest;

	if (strcmp(path, "/healthz") == 0) {
		if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
			goto bad_method;
		http_reply(req, co->closing ? 503 : 200, "text/plain",
		    co->closing ? "shutting down\n" : "ok\n",
		    co->closing ? 14 : 3);
		return;
	}
	if (strcmp(path, "/metrics") == 0) {
		if (strcmp(method, "GET") != 0)
			goto bad_method;
		metrics(co, req);
		return;
	}
	if (co->closing) {
		coord_reply_closing(req);
		return;
	}
	if (prefixed(path, "/v1/kv/", &rest) || strcmp(path, "/v1/kv") == 0) {
		coord_kv_route(co, req, strcmp(path, "/v1/kv") == 0 ? "" :
		    rest);
		return;
	}
	if (prefixed(path, "/v1/watch/", &rest) ||
	    strcmp(path, "/v1/watch") == 0) {
		coord_watch_route(co, req, strcmp(path, "/v1/watch") == 0 ?
		    "" : rest);
		return;
	}
	if (prefixed(path, "/v1/tasks/", &rest) || strcmp(path, "/v1/tasks") == 0) {
		coord_tasks_route(co, req, strcmp(path, "/v1/tasks") == 0 ? "" :
		    rest);
		return;
	}
	if (strcmp(path, "/v1/errors") == 0) {
		coord_errors_route(co, req);
		return;
	}
	if (strcmp(path, "/v1/epoch") == 0) {
		coord_epoch_route(co, req);
		return;
	}
	if (prefixed(path, "/v1/barriers/", &rest) ||
	    strcmp(path, "/v1/barriers") == 0) {
		coord_barriers_route(co, req, strcmp(path, "/v1/barriers") == 0 ?
		    "" : rest);
		return;
	}
	http_reply_error(req, ST_NOT_FOUND, "no such resource: %s %s", method,
	    path);
	return;
bad_method:
	http_set_header(req, "Allow", "GET");
	http_reply_error_http(req, 405, ST_INVALID_ARGUMENT,
	    "method %s not allowed on %s", method, path);
}
