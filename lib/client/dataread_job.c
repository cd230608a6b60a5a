/*
 * dataread_job.c: a consumer's job client: the job opened (or joined by
 * name), the heartbeats that report what was delivered and lost and take
 * in the task list (or a round-robin job's), and the last report and the
 * release at the end.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataread_int.h"
#include "duration.h"
#include "log.h"
#include "vec.h"

/* An id dispatchd sends as a number or as a decimal string; -1: none. */
static int64_t
json_id(json_t *v)
{
	char *end;
	long long n;

	if (json_is_integer(v))
		return json_integer_value(v);
	if (!json_is_string(v))
		return -1;
	errno = 0;
	n = strtoll(json_string_value(v), &end, 10);
	return *end == '\0' && errno == 0 && end != json_string_value(v) ? n :
	                                                                   -1;
}

static void
apply_tasks_locked(struct reader *r, json_t *tasks)
{
	struct source *t;
	json_t *v;
	size_t i;

	for (t = r->tasks; t != NULL; t = t->next)
		t->listed = 0;
	json_array_foreach(tasks, i, v) {
		int64_t id = json_id(json_object_get(v, "id"));
		const char *addr =
		    json_string_value(json_object_get(v, "address"));
		const char *host =
		    json_string_value(json_object_get(v, "host"));

		if (id <= 0)
			continue;
		if (addr == NULL ||
		    (r->o->host != NULL &&
		        (host == NULL || strcmp(host, r->o->host) != 0))) {
			/* Not read here: dispatchd must not wait for this
			 * reader to let the task's splits go if it dies. */
			dataread_note_lost_locked(r, id);
			continue;
		}
		for (t = r->tasks; t != NULL && t->id != id; t = t->next)
			;
		if (t == NULL && !r->stopping)
			t = dataread_source_start_locked(r, id, addr);
		if (t != NULL)
			t->listed = 1;
	}
	/* A dynamic job that finished has had every element delivered:
	 * what is left in flight can only be a copy. */
	for (t = r->tasks; t != NULL; t = t->next)
		if (t->running && !t->stop &&
		    (!t->listed || (r->dynamic && r->finished)))
			dataread_source_stop_locked(t);
}

static int
rr_cmp(const void *a, const void *b)
{
	const struct rr_task *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

static void
apply_rr_locked(struct reader *r, json_t *reply)
{
	json_t *tasks = json_object_get(reply, "tasks"), *v;
	json_t *b = json_object_get(reply, "block_round");
	size_t i, n = 0;

	if (vec_grow(&r->rr, &r->caprr, json_array_size(tasks),
	        sizeof(*r->rr)) < 0) {
		dataread_fail_locked(r, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	json_array_foreach(tasks, i, v) {
		const char *addr =
		    json_string_value(json_object_get(v, "address"));
		struct rr_task *t = &r->rr[n];

		t->id = json_id(json_object_get(v, "id"));
		t->start =
		    json_integer_value(json_object_get(v, "starting_round"));
		if (t->id <= 0 || addr == NULL ||
		    strlen(addr) >= sizeof(t->addr))
			continue;
		snprintf(t->addr, sizeof(t->addr), "%s", addr);
		n++;
	}
	r->nrr = n;
	qsort(r->rr, n, sizeof(*r->rr), rr_cmp);
	r->block = json_is_integer(b) ? json_integer_value(b) : -1;
	pthread_cond_broadcast(&r->cv);
}

/* The heartbeat's body; takes the deliveries and losses it reports. */
static json_t *
heartbeat_body(struct reader *r, struct ranges *sent, int64_t **lost,
    size_t *nlost, uint64_t *mark)
{
	json_t *body = json_object(), *a;

	pthread_mutex_lock(&r->mu);
	*mark = r->recorded;
	*sent = r->pend;
	r->pend = (struct ranges){0};
	r->split_end = 0;
	*lost = r->lost;
	*nlost = r->nlost;
	r->lost = NULL;
	r->nlost = r->caplost = 0;
	/* Elements written so far: dispatchd counts a job's from them. */
	json_object_set_new(body, "written",
	    json_integer(
	        (json_int_t)__atomic_load_n(&r->written, __ATOMIC_RELAXED)));
	if (r->o->consumers > 0) {
		json_object_set_new(body, "round", json_integer(r->round));
		/* The promise: round block will not begin before dispatchd
		 * lets go, which dataread_rr_main keeps. */
		if (r->block >= 0 && r->round <= r->block)
			json_object_set_new(body, "blocked_round",
			    json_integer(r->block));
	}
	pthread_mutex_unlock(&r->mu);
	if (sent->n > 0) {
		a = json_array();
		for (size_t i = 0; i < sent->n; i++)
			json_array_append_new(a,
			    json_pack("[IIII]", (json_int_t)sent->v[i].seq,
			        (json_int_t)sent->v[i].first,
			        (json_int_t)sent->v[i].end,
			        (json_int_t)sent->v[i].total));
		json_object_set_new(body, "delivered", a);
	}
	if (*nlost > 0) {
		a = json_array();
		for (size_t i = 0; i < *nlost; i++)
			json_array_append_new(a, json_integer((*lost)[i]));
		json_object_set_new(body, "lost", a);
	}
	return body;
}

/*
 * One heartbeat: reports what was delivered and lost (kept for the next
 * one when dispatchd does not answer), and takes in the task list.
 */
enum status
dataread_heartbeat(struct reader *r, int64_t deadline, char *err, size_t errlen)
{
	struct ranges sent;
	int64_t *lost;
	size_t nlost;
	uint64_t mark;
	json_t *body = heartbeat_body(r, &sent, &lost, &nlost, &mark), *reply;
	const char *error;
	enum status st;

	st = dc_client_beat(r->dc, r->client, body, deadline, &reply);
	json_decref(body);
	pthread_mutex_lock(&r->mu);
	if (st != ST_OK) {
		for (size_t i = 0; i < sent.n; i++)
			dataread_note_range_locked(r, &sent.v[i]);
		for (size_t i = 0; i < nlost; i++)
			dataread_note_lost_locked(r, lost[i]);
		snprintf(err, errlen, "job client %" PRId64 ": %s", r->client,
		    dispatch_client_error(r->dc));
	} else if ((error = json_string_value(
	                json_object_get(reply, "error"))) != NULL) {
		st = ST_INTERNAL;
		snprintf(err, errlen, "%s", error);
	} else {
		if (mark > r->reported) {
			r->reported = mark;
			pthread_cond_broadcast(&r->cv);
		}
		r->finished = json_is_true(json_object_get(reply, "finished"));
		if (json_is_integer(json_object_get(reply, "splits_done"))) {
			r->splits = json_integer_value(
			    json_object_get(reply, "splits"));
			r->splits_done = json_integer_value(
			    json_object_get(reply, "splits_done"));
		}
		if (r->o->consumers > 0)
			apply_rr_locked(r, reply);
		else
			apply_tasks_locked(r, json_object_get(reply, "tasks"));
	}
	pthread_mutex_unlock(&r->mu);
	json_decref(reply);
	free(sent.v);
	free(lost);
	return st;
}

/* The job */

static json_t *
job_body(const struct dataread_opts *o)
{
	json_t *body = json_pack("{s:s,s:s,s:I,s:I}", "dataset", o->dataset,
	    "mode", o->mode != NULL ? o->mode : "dynamic", "repeat",
	    (json_int_t)o->repeat, "seed", (json_int_t)o->seed);

	if (body == NULL)
		return NULL;
	if (o->job != NULL)
		json_object_set_new(body, "name", json_string(o->job));
	if (o->job != NULL && o->run != NULL)
		json_object_set_new(body, "run", json_string(o->run));
	if (o->consumers > 0) {
		json_object_set_new(body, "consumers",
		    json_integer(o->consumers));
		json_object_set_new(body, "consumer_index",
		    json_integer(o->consumer_index));
	}
	if (o->from_state != NULL) {
		/* A state names seqs of one order of splits: the job goes on
		 * in that order. */
		json_object_set(body, "from_state", o->from_state);
		json_object_set(body, "seed",
		    json_object_get(o->from_state, "seed"));
		json_object_set(body, "repeat",
		    json_object_get(o->from_state, "repeat"));
	}
	return body;
}

/* Creates or joins the job: a job client of our own. */
enum status
dataread_job_open(struct reader *r, char *err, size_t errlen)
{
	json_t *body = job_body(r->o), *reply;
	const char *mode;
	enum status st;

	if (body == NULL) {
		snprintf(err, errlen, "dataset %s: not UTF-8", r->o->dataset);
		return ST_INVALID_ARGUMENT;
	}
	/* Not repeated once it may have landed: each call makes a client. */
	st = dc_job_open(r->dc, body,
	    r->o->timeout_ms >= 0 ? duration_now_ms() + r->o->timeout_ms :
	                            HTTP_NO_DEADLINE,
	    &reply);
	json_decref(body);
	if (st != ST_OK) {
		snprintf(err, errlen, "%s", dispatch_client_error(r->dc));
		return st;
	}
	r->job = json_id(json_object_get(reply, "job"));
	r->client = json_id(json_object_get(reply, "client"));
	/* file_or_data comes back resolved; dynamic stays dynamic. */
	if ((mode = json_string_value(json_object_get(reply, "mode"))) == NULL)
		mode = r->o->mode != NULL ? r->o->mode : "dynamic";
	r->dynamic = strcmp(mode, "dynamic") == 0;
	r->start = json_incref(json_object_get(reply, "start"));
	snprintf(r->secret, sizeof(r->secret), "%s",
	    json_string_value(json_object_get(reply, "secret")) != NULL ?
	        json_string_value(json_object_get(reply, "secret")) :
	        "");
	snprintf(r->framing, sizeof(r->framing), "%s",
	    json_string_value(json_object_get(reply, "framing")) != NULL ?
	        json_string_value(json_object_get(reply, "framing")) :
	        "lines");
	json_decref(reply);
	if (r->client <= 0) {
		snprintf(err, errlen, "dispatchd's job reply names no client");
		return ST_INTERNAL;
	}
	if (r->o->positions && (!r->dynamic || r->start == NULL)) {
		snprintf(err, errlen,
		    "job %" PRId64 " reads in mode %s: only dynamic jobs have "
		    "positions",
		    r->job, mode);
		return ST_FAILED_PRECONDITION;
	}
	log_debug("job %" PRId64 ", client %" PRId64, r->job, r->client);
	return ST_OK;
}

/*
 * The last report, on every path, whatever ended the read (a signal's
 * stop_fd does not cut it short). Threads that wait to leave their
 * workers until dispatchd has heard of their last replies (source_ack)
 * go once it is made or given up.
 */
void
dataread_report_last(struct reader *r, enum status st, int64_t deadline)
{
	char err[256];
	int more;

	dispatch_client_set_cancel(r->dc, -1);
	pthread_mutex_lock(&r->mu);
	more = st != ST_NOT_FOUND && (r->pend.n > 0 || r->nlost > 0);
	pthread_mutex_unlock(&r->mu);
	if (more)
		dataread_heartbeat(r, deadline, err, sizeof(err));
	pthread_mutex_lock(&r->mu);
	r->told = 1;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

/* The last report and the release of the job client, on every path. */
void
dataread_farewell(struct reader *r, enum status st, int64_t deadline)
{
	dataread_report_last(r, st, deadline);
	if (st == ST_NOT_FOUND)
		return; /* the client is gone already */
	if (dc_client_release(r->dc, r->client, deadline) != ST_OK)
		log_debug("releasing job client %" PRId64 ": %s", r->client,
		    dispatch_client_error(r->dc));
}
