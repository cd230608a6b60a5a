/*
 * runner.c: the slots, and runner.h's calls. A slot takes a closure,
 * runs it, and reports its end together with the request for the next
 * one; ends dispatchd did not take are kept and sent again until it does,
 * unless this incarnation is gone.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "duration.h"
#include "log.h"
#include "runner_int.h"

#define POLL_MS 30000

/* Runs one closure from the take reply. */
static void
run_one(struct runner_slot *s, json_t *cl, struct runner_run *r)
{
	json_t *defs = json_object_get(cl, "resources"), *d;
	size_t i;

	memset(r, 0, sizeof(*r));
	r->id = (uint64_t)json_integer_value(json_object_get(cl, "id"));
	r->attempt = (long)json_integer_value(json_object_get(cl, "attempt"));
	r->queue = json_string_value(json_object_get(cl, "queue"));
	if (r->queue == NULL)
		r->queue = "default";
	r->spec = json_object_get(cl, "spec");
	r->resources = json_array();
	pthread_mutex_lock(&s->mu);
	s->id = r->id;
	s->attempt = r->attempt;
	s->stop = 0;
	pthread_mutex_unlock(&s->mu);
	if (atomic_load(&s->wk->stopping))
		runner_slot_stop(s, 2);
	json_array_foreach(defs, i, d) {
		char dir[4096] = "", msg[1200] = "";
		int code = runner_resource_ensure(s, d, dir, sizeof(dir), msg,
		    sizeof(msg));
		if (code < 0) {
			runner_not_started(s, r, "%s", msg);
			goto done;
		}
		if (code != 0) {
			r->exited = 1;
			r->code = code;
			snprintf(r->message, sizeof(r->message), "%s", msg);
			goto done;
		}
		json_array_append_new(r->resources,
		    json_pack("{s:O,s:s}", "name", json_object_get(d, "name"),
		        "dir", dir));
	}
	if (s->wk->o.serve != NULL)
		runner_serve(s, r);
	else
		runner_fork(s, r);
done:
	pthread_mutex_lock(&s->mu);
	if (s->stop == 1)
		r->skip = 1;
	else if (s->stop == 2)
		r->aborted = 1;
	s->id = 0;
	s->stop = 0;
	pthread_mutex_unlock(&s->mu);
	json_decref(r->resources);
	log_debug("closure %" PRIu64 " attempt %ld: %s %d%s", r->id, r->attempt,
	    r->exited ? "exit" : "signal", r->code,
	    r->aborted  ? " (stopped: reported aborted)" :
	        r->skip ? " (cancelled)" :
	                  "");
}

static void
start_delay(struct runner_slot *s)
{
	struct runner *wk = s->wk;
	int64_t d = wk->o.start_delay * wk->index;

	if (wk->o.start_delay_max > 0 && d > wk->o.start_delay_max)
		d = wk->o.start_delay_max;
	if (d <= 0)
		return;
	struct pollfd pf = {s->cancel[0], POLLIN, 0};
	int64_t until = duration_now_ms() + d;
	while (!atomic_load(&wk->stopping)) {
		int64_t left = until - duration_now_ms();
		if (left <= 0)
			break;
		poll(&pf, 1, (int)left);
		runner_drain(s->cancel[0]);
	}
}

/*
 * Whether results refused with st are to be kept and sent again: dispatchd
 * did not take them (its disk is full, it is away or restarting, the
 * reply was lost), and the closures stay running there until it does.
 * They are dropped only when dispatchd will never take them: this
 * incarnation is gone (its closures were queued again), or the request
 * itself is wrong.
 */
static int
results_kept(enum status st)
{
	return st != ST_ABORTED && st != ST_INVALID_ARGUMENT &&
	    st != ST_NOT_FOUND;
}

static void *
slot_main(void *arg)
{
	struct runner_slot *s = arg;
	struct runner *wk = s->wk;
	struct buf body = {0}; /* results dispatchd has not taken yet */
	unsigned long body_gen = 0;
	int held = 0; /* they were refused at least once */
	json_t *reply = NULL;
	char inc[sizeof(wk->inc)];
	unsigned long gen;

	start_delay(s);
	while (!atomic_load(&wk->stopping)) {
		json_t *errbody, *cl;
		int64_t hd, wait;
		enum status st;
		size_t i;

		pthread_mutex_lock(&wk->mu);
		memcpy(inc, wk->inc, sizeof(inc));
		gen = wk->gen;
		pthread_mutex_unlock(&wk->mu);
		if (body.len > 0 && body_gen != gen) {
			/* Registered again meanwhile: dispatchd queued this
			 * incarnation's closures again already. */
			log_info("slot %d: results of a former incarnation "
			         "dropped: their closures run again",
			    s->n);
			buf_reset(&body);
			held = 0;
		}
		wait = dispatch_poll_wait(HTTP_NO_DEADLINE, POLL_MS, &hd);
		st = dc_take(s->dc, wk->o.task, inc,
		    body.len > 0 ? body.data : NULL, body.len, 1, wait, hd,
		    DC_POLL, &reply, &errbody);
		json_decref(errbody);
		if (st == ST_CANCELLED || atomic_load(&wk->stopping))
			break;
		if (st != ST_OK && body.len > 0 && results_kept(st)) {
			if (!held)
				log_info("slot %d: dispatchd did not take its "
				         "results (%s: %s): kept, and sent "
				         "again until it does",
				    s->n, status_name(st),
				    dispatch_client_error(s->dc));
			held = 1;
			runner_nap(200);
			continue;
		}
		if (held && st == ST_OK)
			log_info("slot %d: dispatchd took its results", s->n);
		if (body.len > 0 && st != ST_OK)
			log_info("slot %d: results dropped: %s", s->n,
			    dispatch_client_error(s->dc));
		buf_reset(&body);
		held = 0;
		if (st != ST_OK) {
			/* Not registered any more: the heartbeat registers
			 * again; wait for the new incarnation. */
			log_debug("slot %d: %s", s->n,
			    dispatch_client_error(s->dc));
			pthread_mutex_lock(&wk->mu);
			if (gen == wk->gen && st == ST_ABORTED) {
				struct timespec at = duration_realtime_in(1000);
				pthread_cond_timedwait(&wk->cond, &wk->mu, &at);
			}
			pthread_mutex_unlock(&wk->mu);
			if (st != ST_ABORTED)
				runner_nap(200);
			continue;
		}
		json_array_foreach(json_object_get(reply, "closures"), i, cl) {
			struct runner_run r;
			run_one(s, cl, &r);
			pthread_mutex_lock(&wk->mu);
			int same = gen == wk->gen;
			pthread_mutex_unlock(&wk->mu);
			if (!r.skip && same) {
				buf_puts(&body,
				    body.len == 0 ? "{\"results\":[" : ",");
				runner_result_json(&r, &body);
			}
			buf_free(&r.out);
			buf_free(&r.err);
		}
		if (body.len > 0) {
			buf_puts(&body, "]}");
			body_gen = gen;
		}
		json_decref(reply);
		reply = NULL;
	}
	json_decref(reply);
	/* Stopped with results in hand (aborted ones, or ends dispatchd has
	 * not taken): report them, so that they run again at once. What
	 * cannot be sent in time runs again once this worker is gone. */
	pthread_mutex_lock(&wk->mu);
	if (body.len > 0 && body_gen == wk->gen) {
		snprintf(inc, sizeof(inc), "%s", wk->inc);
		pthread_mutex_unlock(&wk->mu);
		dispatch_client_set_cancel(s->dc, -1);
		dc_take(s->dc, wk->o.task, inc, body.data, body.len, 0, 0,
		    duration_now_ms() + 5000, DC_REPEAT, NULL, NULL);
	} else {
		pthread_mutex_unlock(&wk->mu);
	}
	buf_free(&body);
	runner_serve_close(s, 1);
	return NULL;
}

struct runner *
runner_new(const struct runner_opts *o)
{
	struct runner *wk = calloc(1, sizeof(*wk));

	if (wk == NULL)
		return NULL;
	wk->o = *o;
	wk->hb_cancel[0] = wk->hb_cancel[1] = -1;
	pthread_mutex_init(&wk->mu, NULL);
	pthread_cond_init(&wk->cond, NULL);
	return wk;
}

/* Frees what runner_start made, once no thread of it runs. */
static void
slots_free(struct runner *wk)
{
	for (long n = 0; wk->slots != NULL && n < wk->o.slots; n++) {
		struct runner_slot *s = &wk->slots[n];
		if (s->cancel[0] >= 0) {
			close(s->cancel[0]);
			close(s->cancel[1]);
		}
		if (s->dc != NULL)
			dispatch_client_free(s->dc);
		pthread_mutex_destroy(&s->mu);
		buf_free(&s->serve_buf);
	}
	free(wk->slots);
	wk->slots = NULL;
	for (int i = 0; i < 2; i++)
		if (wk->hb_cancel[i] >= 0) {
			close(wk->hb_cancel[i]);
			wk->hb_cancel[i] = -1;
		}
}

enum status
runner_start(struct runner *wk, char *err, size_t errlen)
{
	if (pipe2(wk->hb_cancel, O_CLOEXEC) < 0 ||
	    (wk->slots = calloc((size_t)wk->o.slots, sizeof(*wk->slots))) ==
	        NULL) {
		snprintf(err, errlen, "%s", strerror(errno));
		slots_free(wk);
		return ST_INTERNAL;
	}
	for (long n = 0; n < wk->o.slots; n++) {
		struct runner_slot *s = &wk->slots[n];
		s->wk = wk;
		s->n = (int)n;
		s->cancel[0] = s->cancel[1] = -1;
		pthread_mutex_init(&s->mu, NULL);
	}
	/* Every slot's pipe and client first: a slot that cannot have them
	 * leaves nothing running. */
	for (long n = 0; n < wk->o.slots; n++) {
		struct runner_slot *s = &wk->slots[n];
		if (pipe2(s->cancel, O_CLOEXEC | O_NONBLOCK) < 0) {
			snprintf(err, errlen, "%s", strerror(errno));
			slots_free(wk);
			return ST_INTERNAL;
		}
		if ((s->dc = dispatch_client_new(wk->o.addr, err, errlen)) ==
		    NULL) {
			slots_free(wk);
			return ST_INTERNAL;
		}
		dispatch_client_set_cancel(s->dc, s->cancel[0]);
	}
	pthread_create(&wk->hb, NULL, runner_heartbeat_main, wk);
	for (long n = 0; n < wk->o.slots; n++)
		pthread_create(&wk->slots[n].th, NULL, slot_main,
		    &wk->slots[n]);
	return ST_OK;
}

void
runner_stop(struct runner *wk, struct dispatch_client *dc)
{
	atomic_store(&wk->stopping, 1);
	for (long n = 0; n < wk->o.slots; n++) {
		struct runner_slot *s = &wk->slots[n];
		pthread_mutex_lock(&s->mu);
		if (s->id != 0 && s->stop == 0)
			s->stop = 2;
		pthread_mutex_unlock(&s->mu);
		runner_wake(s->cancel[1]);
	}
	for (long n = 0; n < wk->o.slots; n++)
		pthread_join(wk->slots[n].th, NULL);
	/* Leave, then let the heartbeat go (in that order: a heartbeat
	 * that closes first looks like a worker that died). */
	dc_leave(dc, wk->o.task, wk->inc, duration_now_ms() + 5000);
	runner_wake(wk->hb_cancel[1]);
	pthread_join(wk->hb, NULL);
}

void
runner_free(struct runner *wk)
{
	if (wk == NULL)
		return;
	slots_free(wk);
	runner_resources_clear(wk);
	pthread_mutex_destroy(&wk->mu);
	pthread_cond_destroy(&wk->cond);
	free(wk);
}
