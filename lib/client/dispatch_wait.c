/*
 * dispatch_wait.c: long polls of a closure and of a queue, asked again
 * until there is an answer or no time is left.
 */
#include <string.h>

#include "dispatch_wait.h"
#include "duration.h"
#include "http_client.h"

static int
past(int64_t deadline)
{
	return deadline != HTTP_NO_DEADLINE && duration_now_ms() >= deadline;
}

enum status
dispatch_wait_closure(struct dispatch_client *dc, uint64_t id, int64_t deadline,
    json_t **reply, json_t **errbody)
{
	for (;;) {
		int64_t hd, wait = dispatch_poll_wait(deadline, 0, &hd);
		const char *state;
		enum status st;
		/* Out of time: one look at it as it is now. */
		if (wait == 0)
			hd = duration_now_ms() + 10000;
		st = dc_closure(dc, id, wait, hd, reply, errbody);
		if (st != ST_OK) {
			if (!dispatch_poll_again(st, deadline))
				return st;
			json_decref(*errbody);
			continue;
		}
		state = json_string_value(json_object_get(*reply, "state"));
		if (state == NULL || strcmp(state, "NOT_READY") != 0 ||
		    past(deadline))
			return ST_OK;
		json_decref(*reply);
	}
}

enum status
dispatch_wait_queue(struct dispatch_client *dc, const char *queue,
    int64_t deadline, void (*progress)(json_t *counts, void *arg), void *arg,
    json_t **reply, json_t **errbody)
{
	for (;;) {
		/* Shown progress is fresh each second. */
		int64_t hd,
		    wait = dispatch_poll_wait(deadline,
		        progress != NULL ? 1000 : 10000, &hd);
		enum status st = dc_join(dc, queue, wait, hd, reply, errbody);
		if (st != ST_OK) {
			/* No live worker for --worker-recovery is the answer,
			 * not a dispatchd going away. */
			int away = st == ST_UNAVAILABLE &&
			    json_object_get(*errbody, "error") != NULL &&
			    strstr(dispatch_client_error(dc),
			        "worker-recovery") == NULL;
			if ((st != ST_DEADLINE_EXCEEDED && !away) ||
			    !dispatch_poll_again(st, deadline))
				return st;
			json_decref(*errbody);
			continue;
		}
		if (progress != NULL)
			progress(*reply, arg);
		if (json_is_true(json_object_get(*reply, "done")))
			return ST_OK;
		if (past(deadline))
			return ST_OK;
		json_decref(*reply);
	}
}
