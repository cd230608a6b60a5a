/*
 * coord_core.c: what every part of coordd's binding stands on: its lock
 * and the pump that runs as the lock is let go, the queue of task events
 * the pump drains, parking, and the answers every route gives alike
 * (closing, refused, a task's proof of who it is).
 *
 * The parts above (coord_journal, coord_barriers, coord_tasks, coord_kv,
 * and coord.c over them all) call down into this file and never back up:
 * the pump reaches them through the two hooks coord.c sets (co->react,
 * co->settled).
 */
#include <string.h>

#include "coord_int.h"
#include "log.h"
#include "token.h"
#include "vec.h"

void
coord_lock(struct coord *co)
{
	pthread_mutex_lock(&co->mu);
}

/*
 * Acts on what the registry reported while the lock was held, in order
 * (acting may report more: a failed task can end the shutdown barrier,
 * which fails its stragglers), starts a new epoch once nobody is left,
 * and lets the lock go.
 */
void
coord_unlock(struct coord *co)
{
	for (;;) {
		for (size_t i = 0; i < co->nevents; i++) {
			struct reg_event ev = co->events[i];
			co->react(co, &ev);
		}
		co->nevents = 0;
		registry_settle(co->reg);
		if (co->nevents == 0)
			break;
	}
	co->settled(co);
	park_unlock(co->park);
}

int
coord_closing(struct coord *co)
{
	return atomic_load(&co->closing);
}

void
coord_task_event(const struct reg_event *ev, void *arg)
{
	struct coord *co = arg;

	co->ctl_dirty = 1;
	if (vec_grow(&co->events, &co->capevents, co->nevents + 1,
	        sizeof(*co->events)) < 0) {
		log_info("internal: out of memory; a task event is lost");
		return;
	}
	co->events[co->nevents++] = *ev;
}

void
coord_answer_all(struct park_list *l, enum status st, const char *msg,
    json_t *obj)
{
	struct http_shared *sh = NULL;

	if (l->head == NULL) {
		json_decref(obj);
		return;
	}
	if (st != ST_OK)
		obj = json_pack("{s:{s:s,s:s}}", "error", "code",
		    status_name(st), "message", msg != NULL ? msg : "");
	sh = http_shared_json(st == ST_OK ? 200 : status_http(st), obj);
	park_answer_all(l, sh);
	http_shared_release(sh);
}

int
coord_refuse(struct coord *co, struct http_req *req)
{
	return co->commit != NULL && commit_refuse(co->commit, req);
}

void
coord_reply_closing(struct http_req *req)
{
	http_set_header(req, "Retry-After", "1");
	http_reply_error(req, ST_UNAVAILABLE, "coordd is shutting down");
}

struct parked *
coord_park(struct coord *co, struct http_req *req, struct park_list *l,
    int64_t wait, park_fn expire, const char *key, size_t klen)
{
	struct parked *w = park_add(co->park, req, l, wait, expire, key, klen);

	if (w == NULL)
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	return w;
}

int
coord_task_proven(struct coord *co, struct http_req *req,
    const struct reg_task *t, int optional)
{
	const struct coord_secret *s = &co->secret[t->index];
	const char *h = http_req_header(req, COORD_SECRET_HEADER);

	/* Nothing to prove for a task with no secret (not registered with
	 * this coordd, say): what it asks is judged by its state. */
	if (s->len == 0 || (h == NULL && optional) ||
	    (h != NULL && token_equal(h, strlen(h), s->v, s->len)))
		return 1;
	http_reply_error(req, ST_UNAUTHENTICATED,
	    h == NULL ? "task %s registered with a secret, and this request "
	                "has none (" COORD_SECRET_HEADER ")" :
	                "the secret is not task %s's: is another process "
	                "using its name?",
	    t->name);
	return 0;
}
