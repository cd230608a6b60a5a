/*
 * dispatch_data.c: dispatchd's datasets, jobs and splits over HTTP, on
 * the dispatcher's one lock (dispatch_int.h). Consumers open jobs and
 * heartbeat with what they delivered; workers learn their tasks from
 * their heartbeats (answered early when the list changes) and lease
 * splits, waiting parked while there are none yet. Bodies are read and
 * replies written by dsjson.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "dispatch_int.h"
#include "duration.h"
#include "log.h"
#include "task.h"
#include "vec.h"

void
dispatch_data_register(struct dispatch *d, struct cq_worker *w, json_t *body)
{
	const char *addr = json_string_value(json_object_get(body, "address"));
	const char *host = json_string_value(json_object_get(body, "host"));

	if (addr != NULL && *addr != '\0')
		ds_worker_up(d->ds, w->name, w->inc, addr, host);
	else
		ds_worker_forget(d->ds, w->name);
}

static void
job_key(uint64_t id, char *buf, size_t size)
{
	snprintf(buf, size, "%" PRIu64, id);
}

static void
reply_lease(struct http_req *req, enum status st, int later, struct buf *b,
    const char *msg)
{
	if (st != ST_OK)
		http_reply_error(req, st, "%s", msg);
	else if (later)
		http_reply_json(req, 200,
		    json_pack("{s:[],s:b}", "splits", "end", 0));
	else
		http_reply(req, 200, "application/json", b->data, b->len);
	buf_free(b);
}

/* Answers a parked lease: splits, the end, or why not. 0: still waits. */
static int
answer_lease(struct dispatch *d, struct parked *p, int final)
{
	struct waitctx *x = p->ctx;
	struct cq_worker *w = x->w;
	char msg[512];
	enum status st;
	int later;
	struct ds_task *t =
	    ds_task_of(d->ds, w->name, x->inc, x->task, &st, msg, sizeof(msg));
	struct buf b = {0};

	if (t == NULL) {
		char key[24];
		job_key(x->job, key, sizeof(key));
		/* Its job was collected: nothing more to read. */
		if (st == ST_NOT_FOUND && ds_job_find(d->ds, key) == NULL)
			http_reply_json(p->req, 200,
			    json_pack("{s:[],s:b}", "splits", "end", 1));
		else
			http_reply_error(p->req, st, "%s", msg);
		return 1;
	}
	st = dsjson_lease(d->ds, t, x->want, x->lease, &later, &b, msg,
	    sizeof(msg));
	if (st == ST_OK && later && !final)
		return 0;
	reply_lease(p->req, st, later, &b, msg);
	return 1;
}

void
dispatch_data_splits(struct dispatch *d, uint64_t job)
{
	char key[24];
	struct park_list *l;

	job_key(job, key, sizeof(key));
	if ((l = park_index_find(d->leasers, key, strlen(key))) == NULL)
		return;
	park_list_hold(l);
	for (struct parked *p = l->head, *next; p != NULL; p = next) {
		next = p->next;
		if (answer_lease(d, p, 0)) {
			dispatch_free_ctx(p);
			park_take(p);
		}
	}
	park_list_release(l);
}

static void
lease_expire(struct parked *p)
{
	answer_lease(p->obj, p, 1);
	dispatch_free_ctx(p);
}

void
dispatch_data_lease(struct dispatch *d, struct http_req *req,
    struct cq_worker *w, json_t *body, int64_t wait)
{
	json_t *jt = json_object_get(body, "task");
	json_t *jw = json_object_get(body, "want");
	json_t *jl = json_object_get(body, "lease");
	uint64_t id = json_is_integer(jl) && json_integer_value(jl) > 0 ?
	    (uint64_t)json_integer_value(jl) :
	    0;
	long want = json_is_integer(jw) ? (long)json_integer_value(jw) : 1;
	int64_t cap = cq_config(d->cq)->hb_timeout_ms / 2;
	int later;
	struct waitctx *x;
	struct parked *p;
	struct park_list *l;
	struct ds_task *t;
	char msg[512], key[24];
	enum status st;
	struct buf b = {0};

	if (!json_is_integer(jt) || want < 1 || want > DS_WANT_MAX) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "a lease needs a task and want from 1 to %d", DS_WANT_MAX);
		return;
	}
	if ((t = ds_task_of(d->ds, w->name, w->inc,
	         (uint64_t)json_integer_value(jt), &st, msg, sizeof(msg))) ==
	    NULL) {
		http_reply_error(req, st, "%s", msg);
		return;
	}
	st = dsjson_lease(d->ds, t, want, id, &later, &b, msg, sizeof(msg));
	if (st != ST_OK || !later || wait == 0) {
		reply_lease(req, st, later, &b, msg);
		return;
	}
	if (wait > cap)
		wait = cap;
	job_key(t->job->id, key, sizeof(key));
	if ((l = park_index_list(d->leasers, key, strlen(key))) == NULL ||
	    (x = dispatch_ctx_new(W_LEASE)) == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	x->w = w;
	x->task = t->id;
	x->job = t->job->id;
	x->inc = w->inc;
	x->want = want;
	x->lease = id;
	if ((p = dispatch_park(d, req, l, wait, lease_expire, x)) != NULL)
		p->obj = d;
}

void
dispatch_data_task(struct dispatch *d, struct http_req *req,
    struct cq_worker *w, const char *task, json_t *body)
{
	const char *state = json_string_value(json_object_get(body, "state"));
	const char *message =
	    json_string_value(json_object_get(body, "message"));
	char *end, msg[512];
	unsigned long long id = strtoull(task, &end, 10);
	struct ds_task *t;
	enum status st;
	int failed;

	if (*task == '\0' || *end != '\0') {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "%s is not a task id", task);
		return;
	}
	if (state != NULL && strcmp(state, "finished") != 0 &&
	    strcmp(state, "failed") != 0) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "state must be finished or failed");
		return;
	}
	if ((t = ds_task_of(d->ds, w->name, w->inc, id, &st, msg,
	         sizeof(msg))) == NULL) {
		http_reply_error(req, st, "%s", msg);
		return;
	}
	if ((st = dsjson_task_delivered(d->ds, t,
	         json_object_get(body, "delivered"), msg, sizeof(msg))) !=
	    ST_OK) {
		http_reply_error(req, st, "%s", msg);
		return;
	}
	if (state == NULL) {
		http_reply_json(req, 200, json_pack("{s:b}", "ok", 1));
		return;
	}
	failed = strcmp(state, "failed") == 0;
	if (failed)
		log_info("job %" PRIu64 ": task %" PRIu64 " on %s failed: %s",
		    t->job->id, t->id, w->name, message != NULL ? message : "");
	/* A refused end (memory) is sent again by the worker. */
	if ((st = ds_task_end(d->ds, t, failed, message)) != ST_OK)
		http_reply_error(req, st, "task %" PRIu64 ": out of memory",
		    t->id);
	else
		http_reply_json(req, 200, json_pack("{s:b}", "ok", 1));
}

/* Client-facing routes. */

static void
splits_text(struct http_req *req, const struct ds_dataset *ds)
{
	struct buf b = {0};

	for (size_t i = 0; i < ds->nsplits; i++) {
		if (buf_puts(&b, ds->splits[i]) < 0 ||
		    buf_append(&b, "\n", 1) < 0) {
			buf_free(&b);
			http_reply_error(req, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
			return;
		}
	}
	http_reply(req, 200, "text/plain", b.data, b.len);
	buf_free(&b);
}

/* The ops of the routes to a dataset's splits and a job's checkpoint. */
const char dispatch_dataset_splits = 's';
const char dispatch_job_checkpoint = 'c';

void
dispatch_datasets_route(struct http_req *req, const struct route_match *m,
    void *arg)
{
	struct dispatch *d = arg;
	char key[160], msg[512];
	struct ds_dataset *ds;
	json_t *body = NULL;
	int created;
	enum status st;

	if (m->method == ROUTE_POST &&
	    (dispatch_refuse(d, req) || (body = dispatch_body(req)) == NULL))
		return;
	dispatch_lock(d);
	if (m->nseg == 0 && m->method == ROUTE_POST) {
		st = dsjson_dataset_register(d->ds, body, &ds, &created, msg,
		    sizeof(msg));
		if (st != ST_OK) {
			http_reply_error(req, st, "%s", msg);
		} else {
			json_t *o = dsjson_dataset(ds);
			json_object_set_new(o, "created",
			    json_boolean(created));
			if (created)
				log_debug("dataset %" PRIu64
				          " registered: %zu splits",
				    ds->id, ds->nsplits);
			http_reply_json(req, 200, o);
		}
	} else if (m->nseg == 0) {
		http_reply_json(req, 200, dsjson_datasets(d->ds));
	} else if ((ds = ds_dataset_find(d->ds,
	                route_seg(m, 0, key, sizeof(key)))) == NULL) {
		http_reply_error(req, ST_NOT_FOUND, "no dataset %s", key);
	} else if (m->op == &dispatch_dataset_splits) {
		splits_text(req, ds);
	} else {
		http_reply_json(req, 200, dsjson_dataset(ds));
	}
	dispatch_unlock(d);
	json_decref(body);
}

void
dispatch_jobs_route(struct http_req *req, const struct route_match *m,
    void *arg)
{
	struct dispatch *d = arg;
	char key[160], msg[512];
	struct ds_job *j;
	struct ds_client *c;
	json_t *body = NULL, *out;
	int created;
	enum status st;

	if (m->method == ROUTE_POST &&
	    (dispatch_refuse(d, req) || (body = dispatch_body(req)) == NULL))
		return;
	dispatch_lock(d);
	if (dispatch_closing(d)) {
		dispatch_reply_closing(req);
	} else if (m->nseg == 0 && m->method == ROUTE_POST) {
		st = dsjson_job_open(d->ds, body, duration_now_ms(), &j, &c,
		    &created, msg, sizeof(msg));
		if (st != ST_OK) {
			http_reply_error(req, st, "%s", msg);
		} else {
			if (created)
				log_debug("job %" PRIu64 " (%s) of dataset "
				          "%" PRIu64 ", mode %s",
				    j->id, j->name != NULL ? j->name : "-",
				    j->ds->id, shard_mode_name(j->mode));
			json_t *start = dsjson_job_start(j);
			http_reply_json(req, 200,
			    json_pack(
			        "{s:I,s:I,s:b,s:o,s:I,s:s,s:I,s:I,s:o,s:s,"
			        "s:s,s:o}",
			        "job", (json_int_t)j->id, "client",
			        (json_int_t)c->id, "created", created, "name",
			        j->name != NULL ? json_string(j->name) :
			                          json_null(),
			        "iteration", (json_int_t)j->iteration, "mode",
			        shard_mode_name(j->mode), "repeat",
			        (json_int_t)j->repeat, "seed",
			        (json_int_t)j->seed, "consumers",
			        j->consumers > 0 ? json_integer(j->consumers) :
			                           json_null(),
			        "framing", framing_name(j->ds->framing),
			        "secret", j->secret, "start",
			        start != NULL ? start : json_null()));
		}
	} else if (m->nseg == 0) {
		http_reply_json(req, 200, dsjson_jobs(d->ds));
	} else if ((j = ds_job_find(d->ds,
	                route_seg(m, 0, key, sizeof(key)))) == NULL) {
		http_reply_error(req, ST_NOT_FOUND, "no job %s", key);
	} else if (m->op == &dispatch_job_checkpoint) {
		if ((st = dsjson_checkpoint(j, &out, msg, sizeof(msg))) !=
		    ST_OK)
			http_reply_error(req, st, "%s", msg);
		else
			http_reply_json(req, 200, out);
	} else {
		http_reply_json(req, 200, dsjson_job(j));
	}
	dispatch_unlock(d);
	json_decref(body);
}

void
dispatch_clients_route(struct http_req *req, const struct route_match *m,
    void *arg)
{
	struct dispatch *d = arg;
	char key[32], msg[512], *end;
	unsigned long long id;
	struct ds_client *c;
	json_t *body = NULL, *reply;
	int64_t now = duration_now_ms();
	enum status st;

	route_seg(m, 0, key, sizeof(key));
	id = strtoull(key, &end, 10);
	if (*key == '\0' || *end != '\0') {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "%s is not a client id", key);
		return;
	}
	if (m->method == ROUTE_DELETE && dispatch_refuse(d, req))
		return; /* the state directory cannot be written */
	if (m->method == ROUTE_POST) {
		size_t len;
		const char *b = http_req_body(req, &len);
		/* An empty heartbeat is a heartbeat. */
		if (b != NULL && len > 0 && (body = dispatch_body(req)) == NULL)
			return;
	}
	dispatch_lock(d);
	if ((c = ds_client_find(d->ds, id)) == NULL) {
		http_reply_error(req, ST_NOT_FOUND,
		    "no job client %s (released, or timed out)", key);
	} else if (m->method == ROUTE_DELETE) {
		ds_client_release(d->ds, c, now);
		http_reply_json(req, 200, json_pack("{s:b}", "released", 1));
	} else if ((st = dsjson_client_beat(d->ds, c, body, now, &reply, msg,
	                sizeof(msg))) != ST_OK) {
		http_reply_error(req, st, "%s", msg);
	} else {
		http_reply_json(req, 200, reply);
	}
	dispatch_unlock(d);
	json_decref(body);
}
