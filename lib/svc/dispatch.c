/*
 * dispatch.c: dispatchd's service, over all its parts. Requests are parsed
 * and applied to the closure queues and the data side under d->mu; what
 * must wait is parked; every locked section ends with dispatch_unlock
 * (dispatch_core.c), whose pump calls the hooks here: closures that ended
 * wake their fetchers, a queue that changed settles its waiters, closures
 * to stop and new task lists go out on their workers' heartbeats, splits
 * come free for parked leases, and new work goes to parked takes. Then
 * status, timers, shutting down and freeing the service, /metrics, the
 * routes, and last making it.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "dispatch_int.h"
#include "duration.h"
#include "log.h"
#include "park.h"
#include "route.h"
#include "strmap.h"
#include "task.h"
#include "timer.h"

static void
unlock_cb(void *arg)
{
	dispatch_unlock(arg);
}

/* The pump's hooks (dispatch_core.c): one event, in the order reported. */
static void
react(struct dispatch *d, const struct dispatch_event *ev)
{
	const struct ds_event *de = &ev->u.ds;
	const struct cq_event *ce = &ev->u.cq;
	struct cq_worker *w;

	if (ev->data) {
		if (de->type == DS_EV_SPLITS) {
			dispatch_data_splits(d, de->job);
		} else if ((w = cq_worker(d->cq, de->worker)) != NULL &&
		    dispatch_beat_parked(d, w)) {
			/* Its heartbeat goes back now, with the new list. */
			dispatch_answer_beat(d, w, 0);
		}
		return;
	}
	switch (ce->type) {
	case CQ_EV_ENDED: dispatch_closure_ended(d, ce->c); break;
	case CQ_EV_QUEUE: dispatch_queue_changed(d, ce->q); break;
	case CQ_EV_STOP: dispatch_answer_beat(d, ce->w, 0); break;
	case CQ_EV_WORKER_GONE:
		/* Live again: it registered anew, and the data side dropped
		 * the old incarnation then. */
		if (!ce->w->live)
			ds_worker_down(d->ds, ce->w->name, ce->w->inc);
		dispatch_answer_beat(d, ce->w, 1);
		dispatch_takers_gone(d, ce->w);
		break;
	case CQ_EV_WORK: d->work = 1; break;
	}
}

/* No event left: work that came in goes to parked takes, oldest first. */
static void
idle(struct dispatch *d)
{
	if (d->work) {
		d->work = 0;
		dispatch_serve_takers(d);
	}
}

static void
settled(struct dispatch *d)
{
	dispatch_journal_settle(d);
}

/* Status. */

static void
queue_json(struct cq_queue *q, void *arg)
{
	json_t *a = arg;

	json_array_append_new(a,
	    json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o}", "name", q->name,
	        "queued", (json_int_t)q->queued, "inflight",
	        (json_int_t)q->inflight, "scheduled", (json_int_t)q->scheduled,
	        "done", (json_int_t)q->done, "failed", (json_int_t)q->failed,
	        "cancelled", (json_int_t)q->cancelled, "retried",
	        (json_int_t)q->retried, "error",
	        q->error != NULL ? json_integer((json_int_t)q->error->id) :
	                           json_null()));
}

struct workers_ctx {
	json_t *a;
	int64_t now;
};

static void
worker_json(struct cq_worker *w, void *arg)
{
	struct workers_ctx *x = arg;
	json_t *run = json_array(), *res = dispatch_resource_states(w, NULL);
	char inc[17];

	for (struct cq_closure *c = w->run_head; c != NULL; c = c->next)
		json_array_append_new(run, json_integer((json_int_t)c->id));
	json_t *o = json_pack("{s:s,s:b,s:I,s:I,s:o,s:I,s:I,s:o,s:I}", "name",
	    w->name, "live", w->live, "slots", (json_int_t)w->slots, "running",
	    (json_int_t)w->running, "closures", run, "incarnations",
	    (json_int_t)w->incarnations, "deaths", (json_int_t)w->deaths,
	    "resources", res, "pinned", (json_int_t)w->pinned.count);
	if (w->live)
		json_object_set_new(o, "incarnation",
		    json_string(task_format_incarnation(w->inc, inc)));
	if (w->why != NULL)
		json_object_set_new(o, "last_failure", json_string(w->why));
	json_object_set_new(o, "healthy",
	    json_boolean(!cq_worker_sick(w, x->now)));
	json_object_set_new(o, "start_failures",
	    json_integer((json_int_t)w->start_failures));
	if (cq_worker_sick(w, x->now))
		json_object_set_new(o, "unhealthy",
		    json_pack("{s:s,s:I}", "message",
		        w->sick_why != NULL ? w->sick_why : "?", "retry_in_ms",
		        (json_int_t)(w->sick_until - x->now)));
	json_array_append_new(x->a, o);
}

static json_t *
status_json(struct dispatch *d)
{
	const struct cq_view *v = cq_view(d->cq);
	json_t *qs = json_array(), *ws = json_array();
	struct workers_ctx wx = {ws, duration_now_ms()};

	cq_each_queue(d->cq, queue_json, qs);
	cq_each_worker(d->cq, worker_json, &wx);
	return json_pack(
	    "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:o}",
	    "store_bytes", (json_int_t)(v->value_bytes + v->spec_bytes),
	    "max_store_bytes", (json_int_t)cq_config(d->cq)->max_store,
	    "queued", (json_int_t)v->queued, "inflight",
	    (json_int_t)v->inflight, "closures", (json_int_t)v->closures,
	    "done", (json_int_t)v->done, "failed", (json_int_t)v->failed,
	    "retried", (json_int_t)v->retried, "cancelled",
	    (json_int_t)v->cancelled, "aborted", (json_int_t)v->aborted,
	    "workers_live", (json_int_t)v->workers_live, "worker_deaths",
	    (json_int_t)v->deaths, "queues", qs, "workers", ws);
}

static void
status_route(struct http_req *req, const struct route_match *m, void *arg)
{
	struct dispatch *d = arg;

	(void)m;
	dispatch_lock(d);
	http_reply_json(req, 200, status_json(d));
	dispatch_unlock(d);
}

/*
 * What dispatchd takes, so that a client stops reading its input there
 * instead of holding all of it first (a --stdin of /dev/zero).
 */
static void
limits_route(struct http_req *req, const struct route_match *m, void *arg)
{
	struct dispatch *d = arg;
	const struct cq_config *c = cq_config(d->cq);

	(void)m;
	http_reply_json(req, 200,
	    json_pack("{s:I,s:I,s:I,s:I}", "max_closure_size",
	        (json_int_t)c->max_spec, "max_batch",
	        (json_int_t)d->cfg.max_batch, "max_request_bytes",
	        (json_int_t)d->max_body, "queue_max",
	        (json_int_t)c->queue_max));
}

static void
workers_route(struct http_req *req, const struct route_match *m, void *arg)
{
	struct dispatch *d = arg;
	json_t *a = json_array();
	struct workers_ctx wx = {a, duration_now_ms()};

	(void)m;
	dispatch_lock(d);
	cq_each_worker(d->cq, worker_json, &wx);
	http_reply_json(req, 200, json_pack("{s:o}", "workers", a));
	dispatch_unlock(d);
}

/* Timers. */

static void
mark_queue(struct cq_queue *q, void *arg)
{
	struct dispatch *d = arg;
	struct cq_event ev = {CQ_EV_QUEUE, NULL, q, NULL};

	dispatch_cq_event(&ev, d);
}

static void
scan(struct timer *t)
{
	struct dispatch *d =
	    (struct dispatch *)((char *)t - offsetof(struct dispatch, scan));
	int64_t now = duration_now_ms(), hb = cq_config(d->cq)->hb_timeout_ms,
	        until;

	/* A standby judges nothing: its leader's records do. */
	if (!d->standby) {
		/* A parked heartbeat: it is there. */
		dispatch_beats_seen(d, now);
		cq_scan(d->cq, now);
		ds_scan(d->ds, now);
		/* Joins give up once no worker has been there long enough. */
		if (dispatch_no_workers(d, now, &until))
			cq_each_queue(d->cq, mark_queue, d);
	}
	timers_add(park_timers(d->park), &d->scan,
	    now + (hb / 5 > 0 ? hb / 5 : 1));
}

static void
log_worker(struct cq_worker *w, void *arg)
{
	(void)arg;
	log_info("watchdog: worker %s: %s, %zu running, %zu pinned, %lu "
	         "deaths%s%s",
	    w->name, w->live ? "live" : "down", w->running, w->pinned.count,
	    w->deaths, w->why != NULL ? ", last failure: " : "",
	    w->why != NULL ? w->why : "");
}

static void
log_queue(struct cq_queue *q, void *arg)
{
	(void)arg;
	log_info("watchdog: queue %s: %zu queued, %zu in flight, %lu done, %lu "
	         "failed%s",
	    q->name, q->queued, q->inflight, q->done, q->failed,
	    q->error != NULL ? ", an error to report" : "");
}

static void
watchdog(struct timer *t)
{
	struct dispatch *d = (struct dispatch *)((char *)t -
	    offsetof(struct dispatch, watchdog));
	int64_t now = duration_now_ms();
	const struct cq_view *v = cq_view(d->cq);
	char dur[32];

	/* A standby's leader has a watchdog of its own. */
	if (!d->standby && v->inflight > 0 &&
	    now - cq_last_end(d->cq) >= d->cfg.watchdog_ms) {
		if (!d->stall_logged) {
			log_info(
			    "watchdog: no closure ended for %s with %zu in "
			    "flight",
			    duration_format(now - cq_last_end(d->cq), dur,
			        sizeof(dur)),
			    v->inflight);
			cq_each_queue(d->cq, log_queue, NULL);
			cq_each_worker(d->cq, log_worker, NULL);
			d->stall_logged = 1;
		}
	} else {
		d->stall_logged = 0;
	}
	timers_add(park_timers(d->park), &d->watchdog,
	    now + d->cfg.watchdog_ms / 4 + 1);
}

/* The service. */

static void
drain(struct park_list *l, void *arg)
{
	(void)arg;
	park_list_hold(l);
	while (l->head != NULL) {
		struct parked *p = l->head;
		dispatch_free_ctx(p);
		park_take(p);
		dispatch_reply_closing(p->req);
	}
	park_list_release(l);
}

/* Answers everything parked with UNAVAILABLE and Retry-After. */
static void
dispatch_shutdown(struct dispatch *d)
{
	dispatch_lock(d);
	atomic_store(&d->closing, 1);
	park_index_each(d->fetchers, drain, NULL);
	park_index_each(d->qwait, drain, NULL);
	park_index_each(d->beats, drain, NULL);
	park_index_each(d->leasers, drain, NULL);
	drain(&d->takers, NULL);
	dispatch_unlock(d);
}

static void
dispatch_free(struct dispatch *d)
{
	if (d == NULL)
		return;
	park_free(d->park);
	park_index_free(d->fetchers);
	park_index_free(d->qwait);
	park_index_free(d->beats);
	park_index_free(d->leasers);
	commit_free(d->commit);
	buf_free(&d->jrec);
	cq_free(d->cq);
	ds_free(d->ds);
	free(d->events);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

static void
metrics(struct buf *b, void *arg)
{
	struct dispatch *d = arg;
	const struct cq_view *v;

	dispatch_lock(d);
	v = cq_view(d->cq);
	buf_printf(b,
	    "# HELP muster_dispatch_queued Closures waiting for a worker.\n"
	    "# TYPE muster_dispatch_queued gauge\nmuster_dispatch_queued %zu\n"
	    "# HELP muster_dispatch_inflight Closures running on a worker.\n"
	    "# TYPE muster_dispatch_inflight gauge\n"
	    "muster_dispatch_inflight %zu\n"
	    "# HELP muster_dispatch_closures Closures held (values "
	    "included).\n# TYPE muster_dispatch_closures gauge\n"
	    "muster_dispatch_closures %zu\n"
	    "# HELP muster_dispatch_value_bytes Bytes of values held.\n"
	    "# TYPE muster_dispatch_value_bytes gauge\n"
	    "muster_dispatch_value_bytes %zu\n"
	    "# HELP muster_dispatch_store_bytes Bytes of closures and "
	    "values held (--max-store-bytes).\n"
	    "# TYPE muster_dispatch_store_bytes gauge\n"
	    "muster_dispatch_store_bytes %zu\n"
	    "# HELP muster_dispatch_done_total Closures that ran to an end.\n"
	    "# TYPE muster_dispatch_done_total counter\n"
	    "muster_dispatch_done_total %lu\n"
	    "# HELP muster_dispatch_failed_total Closures that ended badly.\n"
	    "# TYPE muster_dispatch_failed_total counter\n"
	    "muster_dispatch_failed_total %lu\n"
	    "# HELP muster_dispatch_retried_total Retries (--retry-exit).\n"
	    "# TYPE muster_dispatch_retried_total counter\n"
	    "muster_dispatch_retried_total %lu\n"
	    "# HELP muster_dispatch_cancelled_total Closures cancelled.\n"
	    "# TYPE muster_dispatch_cancelled_total counter\n"
	    "muster_dispatch_cancelled_total %lu\n"
	    "# HELP muster_dispatch_aborted_total Closures given up after "
	    "killing workers.\n# TYPE muster_dispatch_aborted_total counter\n"
	    "muster_dispatch_aborted_total %lu\n"
	    "# HELP muster_dispatch_requeued_total Attempts put back (worker "
	    "lost or preempted).\n# TYPE muster_dispatch_requeued_total "
	    "counter\nmuster_dispatch_requeued_total %lu\n"
	    "# HELP muster_dispatch_stale_total Results of superseded "
	    "attempts, dropped.\n# TYPE muster_dispatch_stale_total counter\n"
	    "muster_dispatch_stale_total %lu\n"
	    "# HELP muster_dispatch_start_failures_total Closures a worker "
	    "could not start and gave back.\n"
	    "# TYPE muster_dispatch_start_failures_total counter\n"
	    "muster_dispatch_start_failures_total %lu\n"
	    "# HELP muster_dispatch_workers Workers known.\n"
	    "# TYPE muster_dispatch_workers gauge\n"
	    "muster_dispatch_workers %zu\n"
	    "# HELP muster_dispatch_workers_live Workers registered and "
	    "heard from.\n# TYPE muster_dispatch_workers_live gauge\n"
	    "muster_dispatch_workers_live %zu\n"
	    "# HELP muster_dispatch_worker_deaths_total Workers failed.\n"
	    "# TYPE muster_dispatch_worker_deaths_total counter\n"
	    "muster_dispatch_worker_deaths_total %lu\n",
	    v->queued, v->inflight, v->closures, v->value_bytes,
	    v->value_bytes + v->spec_bytes, v->done, v->failed, v->retried,
	    v->cancelled, v->aborted, v->put_back, v->stale, v->start_failures,
	    v->workers, v->workers_live, v->deaths);
	{
		struct ds_view dv;
		ds_view(d->ds, &dv);
		buf_printf(b,
		    "# HELP muster_data_datasets Datasets registered.\n"
		    "# TYPE muster_data_datasets gauge\n"
		    "muster_data_datasets %zu\n"
		    "# HELP muster_data_jobs Jobs not collected.\n"
		    "# TYPE muster_data_jobs gauge\nmuster_data_jobs %zu\n"
		    "# HELP muster_data_tasks Tasks of those jobs.\n"
		    "# TYPE muster_data_tasks gauge\nmuster_data_tasks %zu\n"
		    "# HELP muster_data_job_clients Consumers holding a job.\n"
		    "# TYPE muster_data_job_clients gauge\n"
		    "muster_data_job_clients %zu\n"
		    "# HELP muster_data_splits_open Splits leased and not yet "
		    "all delivered.\n# TYPE muster_data_splits_open gauge\n"
		    "muster_data_splits_open %zu\n"
		    "# HELP muster_data_leases_total Splits leased.\n"
		    "# TYPE muster_data_leases_total counter\n"
		    "muster_data_leases_total %lu\n"
		    "# HELP muster_data_released_total Splits of dead workers "
		    "put back to lease again.\n"
		    "# TYPE muster_data_released_total counter\n"
		    "muster_data_released_total %lu\n"
		    "# HELP muster_data_jobs_collected_total Jobs collected.\n"
		    "# TYPE muster_data_jobs_collected_total counter\n"
		    "muster_data_jobs_collected_total %lu\n",
		    dv.datasets, dv.jobs, dv.tasks, dv.clients, dv.leased,
		    dv.leases, dv.releases, dv.collected);
	}
	dispatch_unlock(d);
}

static void
shutdown_cb(void *arg)
{
	dispatch_shutdown(arg);
}

static void
free_cb(void *arg)
{
	dispatch_free(arg);
}

static const struct route routes[] = {
    {"/v1/queues/*/closures", ROUTE_POST, dispatch_queue_route,
        &dispatch_queue_schedule},
    {"/v1/queues/*/join", ROUTE_GET, dispatch_queue_route,
        &dispatch_queue_join},
    {"/v1/queues/*/done", ROUTE_GET, dispatch_queue_route,
        &dispatch_queue_done},
    {"/v1/closures", ROUTE_GET, dispatch_closures_route, NULL},
    {"/v1/closures/*", ROUTE_GET, dispatch_closure_route,
        &dispatch_closure_fetch},
    {"/v1/closures/*", ROUTE_DELETE, dispatch_closure_route,
        &dispatch_closure_forget},
    {"/v1/closures/*/cancel", ROUTE_POST, dispatch_closure_route,
        &dispatch_closure_cancel},
    {"/v1/status", ROUTE_GET, status_route, NULL},
    {"/v1/limits", ROUTE_GET, limits_route, NULL},
    {"/v1/workers", ROUTE_GET, workers_route, NULL},
    {"/v1/workers/*", ROUTE_POST, dispatch_worker_route,
        &dispatch_worker_register},
    {"/v1/workers/*", ROUTE_DELETE, dispatch_worker_route,
        &dispatch_worker_leave},
    {"/v1/workers/*/heartbeat", ROUTE_POST, dispatch_worker_route,
        &dispatch_worker_heartbeat},
    {"/v1/workers/*/splits", ROUTE_POST, dispatch_worker_route,
        &dispatch_worker_lease},
    {"/v1/workers/*/tasks/*", ROUTE_POST, dispatch_worker_route,
        &dispatch_worker_task},
    {"/v1/workers/*/take", ROUTE_POST, dispatch_worker_route,
        &dispatch_worker_take},
    {"/v1/workers/*/results", ROUTE_POST, dispatch_worker_route,
        &dispatch_worker_results},
    {"/v1/workers/*/resources/*", ROUTE_POST, dispatch_worker_route,
        &dispatch_worker_resource},
    {"/v1/resources", ROUTE_GET, dispatch_resources_route, NULL},
    {"/v1/resources/*", ROUTE_GET | ROUTE_PUT, dispatch_resource_route, NULL},
    {"/v1/datasets", ROUTE_GET | ROUTE_POST, dispatch_datasets_route, NULL},
    {"/v1/datasets/*", ROUTE_GET, dispatch_datasets_route, NULL},
    {"/v1/datasets/*/splits", ROUTE_GET, dispatch_datasets_route,
        &dispatch_dataset_splits},
    {"/v1/jobs", ROUTE_GET | ROUTE_POST, dispatch_jobs_route, NULL},
    {"/v1/jobs/*", ROUTE_GET, dispatch_jobs_route, NULL},
    {"/v1/jobs/*/checkpoint", ROUTE_GET, dispatch_jobs_route,
        &dispatch_job_checkpoint},
    {"/v1/clients/*", ROUTE_DELETE, dispatch_clients_route, NULL},
    {"/v1/clients/*/heartbeat", ROUTE_POST, dispatch_clients_route, NULL},
};

enum status
dispatch_open(const struct dispatch_config *cfg, const struct daemon_options *o,
    struct daemon_service *svc, char *err, size_t errlen)
{
	struct dispatch *d = calloc(1, sizeof(*d));
	int64_t now = duration_now_ms();
	enum status st = ST_INTERNAL;

	if (d == NULL) {
		snprintf(err, errlen, "out of memory");
		return st;
	}
	pthread_mutex_init(&d->mu, NULL);
	d->pump.react = react;
	d->pump.idle = idle;
	d->pump.settled = settled;
	d->cfg = *cfg;
	if (d->cfg.worker_recovery_ms == 0)
		d->cfg.worker_recovery_ms = 3600 * 1000;
	if (d->cfg.max_batch == 0)
		d->cfg.max_batch = 100000;

	if ((d->park = park_new(&d->mu, err, errlen)) == NULL)
		goto fail;
	if ((d->fetchers = park_index_new()) == NULL ||
	    (d->qwait = park_index_new()) == NULL ||
	    (d->beats = park_index_new()) == NULL ||
	    (d->leasers = park_index_new()) == NULL ||
	    (d->ds = ds_new(&cfg->ds, dispatch_ds_event, d)) == NULL ||
	    (d->cq = cq_new(&cfg->cq, dispatch_cq_event, d, now)) == NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	d->max_body = o->max_body;
	park_set_max_wait(d->park, o->max_wait_ms);
	d->scan.fire = scan;
	d->watchdog.fire = watchdog;
	dispatch_lock(d);
	park_set_unlock(d->park, unlock_cb, d);
	timers_add(park_timers(d->park), &d->scan, now + 100);
	if (d->cfg.watchdog_ms > 0)
		timers_add(park_timers(d->park), &d->watchdog,
		    now + d->cfg.watchdog_ms / 4 + 1);
	dispatch_unlock(d);
	if (o->store != NULL &&
	    (st = dispatch_store_open(d, &o->store_cfg, err, errlen)) != ST_OK)
		goto fail;
	if (o->state_dir != NULL &&
	    (st = dispatch_journal_open(d, o->state_dir, o->fsync,
	         o->journal_max, err, errlen)) != ST_OK)
		goto fail;
	*svc = (struct daemon_service){.name = "dispatchd",
	    .routes = routes,
	    .nroutes = sizeof(routes) / sizeof(routes[0]),
	    .arg = d,
	    .metrics = metrics,
	    .mu = &d->mu,
	    .unlock = unlock_cb,
	    .shutdown = shutdown_cb,
	    .park = d->park,
	    .commit = d->commit,
	    .free = free_cb};
	return ST_OK;
fail:
	dispatch_free(d);
	return st;
}
