/*
 * coord.c: coordd's service, over all its parts: what the pump does with a
 * change the state machines report (the hooks of coord_core.c), shutting
 * down and freeing the service, /metrics, the routes, and last making it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "coord_int.h"
#include "duration.h"
#include "log.h"
#include "wallclock.h"

static void
unlock_cb(void *arg)
{
	coord_unlock(arg);
}

/* What acts on the task events once the lock is let go, in order. */
static void
react(struct coord *co, const struct reg_event *ev)
{
	coord_tasks_react(co, ev);
}

static void
settled(struct coord *co)
{
	coord_barriers_arm(co);
	coord_journal_settle(co);
}

static void
drain(struct park_list *l, void *arg)
{
	(void)arg;
	park_list_hold(l);
	while (l->head != NULL) {
		struct parked *w = l->head;
		park_take(w);
		coord_reply_closing(w->req);
	}
	park_list_release(l);
}

/*
 * Answers every parked request with UNAVAILABLE and Retry-After, and every
 * later one the same way, so clients wait for the next coordd instead of
 * failing; barrier waits, whose state dies with this coordd, get ABORTED.
 * The skeleton calls it on SIGTERM.
 */
static void
coord_shutdown(struct coord *co)
{
	coord_lock(co);
	atomic_store(&co->closing, 1);
	park_index_each(co->getters, drain, NULL);
	park_index_each(co->watchers, drain, NULL);
	coord_tasks_shutdown(co);
	coord_unlock(co);
}

static void
coord_free(struct coord *co)
{
	if (co == NULL)
		return;
	park_free(co->park);
	/* co->rv is the registry's: read before it goes. */
	for (size_t i = 0;
	     co->shutdown_said != NULL && co->rv != NULL && i < co->rv->ntasks;
	     i++)
		free(co->shutdown_said[i].msg);
	barriers_free(co->bars);
	registry_free(co->reg);
	park_index_free(co->getters);
	park_index_free(co->watchers);
	free(co->rejoin);
	free(co->heard);
	free(co->secret);
	free(co->shutdown_said);
	commit_free(co->commit);
	kv_free(co->kv);
	free(co->events);
	buf_free(&co->ctl_last);
	buf_free(&co->jrec);
	pthread_mutex_destroy(&co->mu);
	free(co);
}

static void
metrics(struct buf *b, void *arg)
{
	struct coord *co = arg;

	coord_lock(co);
	buf_printf(b,
	    "# HELP muster_kv_keys Keys in the store.\n"
	    "# TYPE muster_kv_keys gauge\nmuster_kv_keys %zu\n"
	    "# HELP muster_kv_bytes Bytes of keys and values held.\n"
	    "# TYPE muster_kv_bytes gauge\nmuster_kv_bytes %zu\n"
	    "# HELP muster_kv_revision The store's current revision.\n"
	    "# TYPE muster_kv_revision counter\n"
	    "muster_kv_revision %" PRId64 "\n"
	    "# HELP muster_kv_watchers Parked watch requests.\n"
	    "# TYPE muster_kv_watchers gauge\nmuster_kv_watchers %zu\n"
	    "# HELP muster_timers Armed deadlines.\n"
	    "# TYPE muster_timers gauge\nmuster_timers %zu\n"
	    "# HELP muster_tasks Tasks in the cluster.\n"
	    "# TYPE muster_tasks gauge\nmuster_tasks %zu\n"
	    "# HELP muster_tasks_connected Tasks connected now.\n"
	    "# TYPE muster_tasks_connected gauge\nmuster_tasks_connected %zu\n"
	    "# HELP muster_epoch Runs of the job since coordd started.\n"
	    "# TYPE muster_epoch counter\nmuster_epoch %ld\n"
	    "# HELP muster_kv_keys_max The limit on keys (--max-keys).\n"
	    "# TYPE muster_kv_keys_max gauge\nmuster_kv_keys_max %zu\n"
	    "# HELP muster_kv_bytes_max The limit on bytes held "
	    "(--max-store-bytes).\n"
	    "# TYPE muster_kv_bytes_max gauge\nmuster_kv_bytes_max %zu\n"
	    "# HELP muster_kv_refused_total Changes refused at a limit of "
	    "the store.\n# TYPE muster_kv_refused_total counter\n"
	    "muster_kv_refused_total %lu\n"
	    "# HELP muster_barriers Barrier ids recorded, pending or ended."
	    "\n# TYPE muster_barriers gauge\nmuster_barriers %zu\n"
	    "# HELP muster_barriers_refused_total New barriers refused at "
	    "--max-barriers.\n# TYPE muster_barriers_refused_total counter\n"
	    "muster_barriers_refused_total %lu\n",
	    kv_count(co->kv), kv_bytes(co->kv), kv_revision(co->kv),
	    park_index_waiting(co->watchers),
	    timers_count(park_timers(co->park)), co->rv->ntasks,
	    co->rv->nconnected, co->rv->epoch, kv_limits(co->kv)->max_keys,
	    kv_limits(co->kv)->max_bytes, kv_refused(co->kv),
	    barriers_count(co->bars), barriers_refused(co->bars));
	coord_unlock(co);
}

static void
shutdown_cb(void *arg)
{
	coord_shutdown(arg);
}

static void
free_cb(void *arg)
{
	coord_free(arg);
}

static void
started_cb(struct http_server *srv, void *arg)
{
	struct coord *co = arg;

	atomic_store(&co->srv, srv);
}

static void
kv_route(struct http_req *req, const struct route_match *m, void *arg)
{
	coord_kv_route(arg, req, m->rest);
}

static void
watch_route(struct http_req *req, const struct route_match *m, void *arg)
{
	coord_watch_route(arg, req, m->rest);
}

static void
errors_route(struct http_req *req, const struct route_match *m, void *arg)
{
	(void)m;
	coord_errors_route(arg, req);
}

static void
epoch_route(struct http_req *req, const struct route_match *m, void *arg)
{
	(void)m;
	coord_epoch_route(arg, req);
}

static const struct route routes[] = {
    {"/v1/kv/**", ROUTE_GET | ROUTE_PUT | ROUTE_POST | ROUTE_DELETE, kv_route,
        NULL},
    {"/v1/watch/**", ROUTE_GET, watch_route, NULL},
    {"/v1/tasks", ROUTE_GET, coord_tasks_status_route, NULL},
    {"/v1/tasks/*/*", ROUTE_GET, coord_task_route, &coord_task_get},
    {"/v1/tasks/*/*/register", ROUTE_POST, coord_task_route,
        &coord_task_register},
    {"/v1/tasks/*/*/heartbeat", ROUTE_POST, coord_task_route,
        &coord_task_heartbeat},
    {"/v1/tasks/*/*/error", ROUTE_POST, coord_task_route, &coord_task_error},
    {"/v1/tasks/*/*/wait-all", ROUTE_POST, coord_task_route,
        &coord_task_wait_all},
    {"/v1/tasks/*/*/shutdown", ROUTE_POST, coord_task_route,
        &coord_task_shutdown},
    {"/v1/tasks/*/*/reset", ROUTE_POST, coord_task_route, &coord_task_reset},
    {"/v1/errors", ROUTE_GET, errors_route, NULL},
    {"/v1/epoch", ROUTE_GET, epoch_route, NULL},
    {"/v1/barriers", ROUTE_GET, coord_barriers_status_route, NULL},
    {"/v1/barriers/*", ROUTE_POST | ROUTE_DELETE, coord_barrier_route, NULL},
};

enum status
coord_open(const struct coord_config *cfg, const struct daemon_options *o,
    struct daemon_service *svc, char *err, size_t errlen)
{
	struct coord *co = calloc(1, sizeof(*co));
	enum status st = ST_INTERNAL;

	if (co == NULL) {
		snprintf(err, errlen, "out of memory");
		return st;
	}
	pthread_mutex_init(&co->mu, NULL);
	co->shutdown_timeout = cfg->shutdown_barrier_timeout_ms;
	co->authenticated = o->token_len > 0;
	if ((co->park = park_new(&co->mu, err, errlen)) == NULL)
		goto fail;
	if ((co->getters = park_index_new()) == NULL ||
	    (co->watchers = park_index_new()) == NULL ||
	    (co->kv = kv_new(&cfg->kv, coord_kv_observe, co)) == NULL ||
	    (co->reg = registry_new(&cfg->cluster, coord_task_event, co, err,
	         errlen)) == NULL ||
	    (co->bars = barriers_new(co->reg, coord_barrier_ended, co)) ==
	        NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	co->rv = registry_view(co->reg);
	barriers_set_limit(co->bars, cfg->max_barriers);
	park_set_max_wait(co->park, o->max_wait_ms);
	/* Revisions of an in-memory store must not repeat those of the
	 * coordd before this one: they start from the clock (microseconds
	 * from the epoch, in units of a thousand revisions a millisecond). */
	kv_set_origin(co->kv, wall_now_ms() * 1000);
	if ((co->rejoin = calloc(co->rv->ntasks + 1, sizeof(*co->rejoin))) ==
	        NULL ||
	    (co->heard = calloc(co->rv->ntasks + 1, sizeof(*co->heard))) ==
	        NULL ||
	    (co->secret = calloc(co->rv->ntasks + 1, sizeof(*co->secret))) ==
	        NULL ||
	    (co->shutdown_said = calloc(co->rv->ntasks + 1,
	         sizeof(*co->shutdown_said))) == NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	/* Tasks of a coordd that restarted register again within a
	 * heartbeat timeout: barriers give them that long. */
	barriers_set_settle(co->bars, duration_now_ms() + co->rv->hb_timeout);
	co->react = react;
	co->settled = settled;
	co->scan.fire = coord_tasks_scan;
	co->bar_timer.fire = coord_barrier_timer;
	coord_lock(co);
	park_set_unlock(co->park, unlock_cb, co);
	/* A replica judges no task until it leads (coord_journal.c). */
	if (co->rv->ntasks > 0 && o->store == NULL)
		timers_add(park_timers(co->park), &co->scan,
		    duration_now_ms() + co->rv->hb_timeout / 5);
	coord_unlock(co);
	if (o->store != NULL &&
	    (st = coord_store_open(co, &o->store_cfg, err, errlen)) != ST_OK)
		goto fail;
	if (o->state_dir != NULL &&
	    (st = coord_journal_open(co, o->state_dir, o->fsync, o->journal_max,
	         err, errlen)) != ST_OK)
		goto fail;
	*svc = (struct daemon_service){.name = "coordd",
	    .routes = routes,
	    .nroutes = sizeof(routes) / sizeof(routes[0]),
	    .arg = co,
	    .metrics = metrics,
	    .mu = &co->mu,
	    .unlock = unlock_cb,
	    .shutdown = shutdown_cb,
	    .started = started_cb,
	    .park = co->park,
	    .commit = co->commit,
	    .free = free_cb};
	return ST_OK;
fail:
	coord_free(co);
	return st;
}
