/*
 * dispatch_core.c: what every part of dispatchd's binding stands on: its
 * one lock and the pump that runs as it is let go, the one queue of events
 * both state machines report into, parking, request arguments and bodies,
 * and the answers every route gives alike (closing, refused).
 *
 * The parts above (dispatch_journal, dispatch_data, dispatch_closures,
 * dispatch_workers, and dispatch.c over them all) call down and never back
 * up: the pump reaches them through the hooks dispatch.c sets (d->pump).
 */
#include <stdlib.h>
#include <string.h>

#include "dispatch_int.h"
#include "log.h"
#include "vec.h"

void
dispatch_lock(struct dispatch *d)
{
	pthread_mutex_lock(&d->mu);
}

void
dispatch_reply_closing(struct http_req *req)
{
	http_set_header(req, "Retry-After", "1");
	http_reply_error(req, ST_UNAVAILABLE, "dispatchd is shutting down");
}

void
dispatch_ctx_free(struct waitctx *x)
{
	if (x == NULL)
		return;
	for (size_t i = 0; i < x->ncs; i++)
		cq_closure_discard(x->cq, x->cs[i]);
	free(x->cs);
	free(x);
}

void
dispatch_free_ctx(struct parked *p)
{
	dispatch_ctx_free(p->ctx);
	p->ctx = NULL;
}

struct parked *
dispatch_park(struct dispatch *d, struct http_req *req, struct park_list *l,
    int64_t wait, park_fn expire, struct waitctx *x)
{
	struct parked *p = park_add(d->park, req, l, wait, expire, "", 0);

	if (p == NULL) {
		dispatch_ctx_free(x);
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return NULL;
	}
	p->ctx = x;
	p->drop = dispatch_free_ctx;
	return p;
}

struct waitctx *
dispatch_ctx_new(enum wait_kind kind)
{
	struct waitctx *x = calloc(1, sizeof(*x));

	if (x != NULL)
		x->kind = kind;
	return x;
}

static void
push(struct dispatch *d, const struct dispatch_event *ev)
{
	if (vec_grow(&d->events, &d->capevents, d->nevents + 1,
	        sizeof(*d->events)) < 0) {
		log_info("internal: out of memory; an event is lost");
		return;
	}
	d->events[d->nevents++] = *ev;
}

/* The closure queues' observer: queues ev for the pump. */
void
dispatch_cq_event(const struct cq_event *ev, void *arg)
{
	struct dispatch_event e = {.data = 0, .u.cq = *ev};

	push(arg, &e);
}

/* The data side's observer: the same. */
void
dispatch_ds_event(const struct ds_event *ev, void *arg)
{
	struct dispatch_event e = {.data = 1, .u.ds = *ev};

	push(arg, &e);
}

/*
 * The pump: acts on what the state machines reported while the lock was
 * held, in the order they reported it (acting may report more), lets the
 * service do what waits for a quiet moment (parked takes are served), and
 * once nothing is left settles the journal and lets the lock go. A bound
 * on the rounds keeps a state machine that reports forever from holding
 * the lock forever.
 */
void
dispatch_unlock(struct dispatch *d)
{
	for (int round = 0; round < 1000; round++) {
		for (size_t i = 0; i < d->nevents; i++) {
			struct dispatch_event ev = d->events[i];
			d->pump.react(d, &ev);
		}
		d->nevents = 0;
		d->pump.idle(d);
		if (d->nevents == 0)
			break;
	}
	d->pump.settled(d);
	park_unlock(d->park);
}

int
dispatch_closing(struct dispatch *d)
{
	return atomic_load(&d->closing);
}

int
dispatch_arg_long(struct http_req *req, const char *name, long def, long min,
    long max, long *v)
{
	const char *s = http_req_arg(req, name);
	char *end;

	*v = def;
	if (s == NULL)
		return 0;
	*v = strtol(s, &end, 10);
	if (*s == '\0' || *end != '\0' || *v < min || *v > max) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "%s=%s is not a number from %ld to %ld", name, s, min, max);
		return -1;
	}
	return 0;
}

json_t *
dispatch_body(struct http_req *req)
{
	size_t len;
	const char *body = http_req_body(req, &len);
	json_error_t e;
	json_t *j;

	if (body == NULL || len == 0) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "the request needs a JSON body");
		return NULL;
	}
	if ((j = json_loadb(body, len, 0, &e)) == NULL || !json_is_object(j)) {
		json_decref(j);
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "the body is not a JSON object: %s",
		    j == NULL ? e.text : "not an object");
		return NULL;
	}
	return j;
}

int
dispatch_refuse(struct dispatch *d, struct http_req *req)
{
	return d->commit != NULL && commit_refuse(d->commit, req);
}
