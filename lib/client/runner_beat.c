/*
 * runner_beat.c: registering, and the heartbeat. The heartbeat is a long
 * poll parked at dispatchd, sent again as soon as it is answered: its
 * connection closing is how dispatchd learns at once that this worker
 * died. Its reply names the closures to stop and lists the worker's data
 * tasks; a reply that this incarnation failed stops every closure and
 * registers again.
 */
#include <inttypes.h>
#include <stdio.h>

#include "duration.h"
#include "log.h"
#include "runner_int.h"

enum status
runner_register(struct runner *wk, struct dispatch_client *dc, char *err,
    size_t errlen)
{
	json_t *reply;
	enum status st;

	st = dc_register(dc, wk->o.task, wk->o.slots,
	    dataserve_address(wk->o.ds), wk->o.host, HTTP_NO_DEADLINE, &reply);
	if (st != ST_OK) {
		snprintf(err, errlen, "%s", dispatch_client_error(dc));
		return st;
	}
	pthread_mutex_lock(&wk->mu);
	snprintf(wk->inc, sizeof(wk->inc), "%s",
	    json_string_value(json_object_get(reply, "incarnation")));
	wk->index = (long)json_integer_value(json_object_get(reply, "index"));
	wk->hb_timeout =
	    json_integer_value(json_object_get(reply, "heartbeat_timeout_ms"));
	wk->gen++;
	/* Resources are built again for each incarnation. */
	runner_resources_clear(wk);
	pthread_cond_broadcast(&wk->cond);
	pthread_mutex_unlock(&wk->mu);
	json_decref(reply);
	dataserve_incarnation(wk->o.ds, wk->inc, wk->hb_timeout);
	log_debug("registered as %s, incarnation %s", wk->o.task, wk->inc);
	return ST_OK;
}

/* Stops the closures a heartbeat reply names ({"id","attempt"} each). */
static void
stop_named(struct runner *wk, json_t *stop)
{
	json_t *v;
	size_t i;

	json_array_foreach(stop, i, v) {
		uint64_t id =
		    (uint64_t)json_integer_value(json_object_get(v, "id"));
		long at =
		    (long)json_integer_value(json_object_get(v, "attempt"));
		for (long n = 0; n < wk->o.slots; n++) {
			struct runner_slot *s = &wk->slots[n];
			pthread_mutex_lock(&s->mu);
			int hit = s->id == id && s->attempt == at;
			pthread_mutex_unlock(&s->mu);
			if (hit) {
				log_debug("closure %" PRIu64
				          " cancelled: stopping it",
				    id);
				runner_slot_stop(s, 1);
			}
		}
	}
}

void *
runner_heartbeat_main(void *arg)
{
	struct runner *wk = arg;
	struct dispatch_client *dc;
	char err[512], inc[sizeof(wk->inc)];

	if ((dc = dispatch_client_new(wk->o.addr, err, sizeof(err))) == NULL)
		return NULL;
	dispatch_client_set_cancel(dc, wk->hb_cancel[0]);
	while (!atomic_load(&wk->stopping)) {
		json_t *reply, *errbody;
		int64_t wait = wk->hb_timeout / 2, hd;
		enum status st;

		pthread_mutex_lock(&wk->mu);
		snprintf(inc, sizeof(inc), "%s", wk->inc);
		pthread_mutex_unlock(&wk->mu);
		hd = duration_now_ms() + wait + wk->hb_timeout;
		st = dc_heartbeat(dc, wk->o.task, inc, wait, hd, &reply,
		    &errbody);
		json_decref(errbody);
		if (atomic_load(&wk->stopping))
			break;
		if (st == ST_ABORTED) {
			/* dispatchd failed this incarnation (it did not hear
			 * it in time, or restarted): its closures run
			 * elsewhere now. Stop them, and start again. */
			log_info("%s", dispatch_client_error(dc));
			for (long n = 0; n < wk->o.slots; n++)
				runner_slot_stop(&wk->slots[n], 2);
			while (!atomic_load(&wk->stopping) &&
			    runner_register(wk, dc, err, sizeof(err)) !=
			        ST_OK) {
				log_info("cannot register: %s", err);
				runner_nap(1000);
			}
			continue;
		}
		if (st != ST_OK) {
			if (st != ST_CANCELLED)
				log_debug("heartbeat: %s",
				    dispatch_client_error(dc));
			runner_nap(200);
			continue;
		}
		/* A reply without the list (an older dispatchd's) changes
		 * nothing. */
		if (json_is_array(json_object_get(reply, "tasks")))
			dataserve_tasks(wk->o.ds,
			    json_object_get(reply, "tasks"));
		stop_named(wk, json_object_get(reply, "stop"));
		json_decref(reply);
	}
	dispatch_client_free(dc);
	return NULL;
}
