/*
 * coord_barriers.c: barriers over HTTP.
 *
 *   POST   /v1/barriers/ID?wait=DUR   {"task":T,"incarnation":HEX,
 *                                      "timeout_ms":N,"tasks":[T,...]}
 *                                      ("tasks":"all": every task)
 *   DELETE /v1/barriers/ID[?task=T]   cancel, by task T or an operator
 *   GET    /v1/barriers               barriers in flight
 *
 * A wait answers 200 {"barrier":ID,"state":"passed"} or the barrier's
 * error; one that outlasts its long poll gets 202 with the progress, and
 * is asked again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord_int.h"
#include "duration.h"
#include "task.h"

#define POLL_DEFAULT_MS 30000

static json_t *
passed_json(const char *id)
{
	return json_pack("{s:s,s:s}", "barrier", id, "state", "passed");
}

void
coord_barrier_reply(struct http_req *req, const char *id, enum status st,
    const char *msg)
{
	if (st == ST_OK)
		http_reply_json(req, 200, passed_json(id));
	else
		http_reply_error(req, st, "%s", msg);
}

void
coord_barrier_ended(struct barrier *b, void *arg)
{
	struct park_list *l = b->udata;
	struct coord *co = arg;

	coord_journal_barrier(co, b);
	/*
	 * Those who went through the shutdown barrier are disconnected now,
	 * and the run may end with them (barriers forgotten): what it came
	 * to is kept for each, for a long poll of theirs that ended first
	 * and asks again, until they register again.
	 */
	if (b->shutdown) {
		for (size_t i = 0; i < co->rv->ntasks; i++) {
			struct coord_said *said = &co->shutdown_said[i];
			if (b->at[i] != BAR_ARRIVED)
				continue;
			free(said->msg);
			said->st = b->result;
			said->msg =
			    strdup(b->message != NULL ? b->message : "");
			said->set = 1;
		}
	}
	if (l == NULL)
		return;
	coord_answer_all(l, b->result, b->message,
	    b->result == ST_OK ? passed_json(b->id) : NULL);
	free(l);
	b->udata = NULL;
}

static void
poll_expired(struct parked *w)
{
	struct barrier *b = w->obj;
	struct coord *co = w->ctx;
	int64_t now = duration_now_ms();

	/* A wait that ends with its barrier's deadline gets the barrier's
	 * answer, whichever of the two deadlines fired first. */
	if (b->state == BAR_PENDING && b->deadline <= now)
		barriers_expire(co->bars, now);
	if (b->state != BAR_PENDING)
		coord_barrier_reply(w->req, b->id, b->result, b->message);
	else
		http_reply_json(w->req, 202,
		    json_pack("{s:s,s:s,s:I,s:I}", "barrier", b->id, "state",
		        "waiting", "arrived", (json_int_t)b->arrived, "total",
		        (json_int_t)b->members));
}

/* b's waiters, made on first use; NULL on ENOMEM. */
static struct park_list *
waiters(struct barrier *b)
{
	if (b->udata == NULL)
		b->udata = calloc(1, sizeof(struct park_list));
	return b->udata;
}

void
coord_barrier_park(struct coord *co, struct http_req *req, struct barrier *b,
    int64_t wait, int64_t now)
{
	struct park_list *l = waiters(b);
	struct parked *w;

	if (l == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	if (b->deadline - now < wait)
		wait = b->deadline - now > 0 ? b->deadline - now : 0;
	w = coord_park(co, req, l, wait, poll_expired, b->id, strlen(b->id));
	if (w != NULL) {
		w->obj = b;
		w->ctx = co;
	}
}

void
coord_barrier_move(struct coord *co, struct parked *w, struct barrier *b,
    int64_t wait, int64_t now)
{
	struct park_list *l = waiters(b);

	if (b->deadline - now < wait)
		wait = b->deadline - now > 0 ? b->deadline - now : 0;
	if (l == NULL || park_move(w, l, wait, poll_expired) < 0) {
		park_take(w);
		http_reply_error(w->req, ST_RESOURCE_EXHAUSTED,
		    "out of memory");
		return;
	}
	w->obj = b;
	w->ctx = co;
}

void
coord_barriers_arm(struct coord *co)
{
	int64_t at = barriers_next_deadline(co->bars);
	struct timers *ts = park_timers(co->park);

	if (at == INT64_MAX)
		timers_cancel(ts, &co->bar_timer);
	else if (co->bar_timer.slot == 0 || co->bar_timer.at != at)
		timers_add(ts, &co->bar_timer, at);
}

void
coord_barrier_timer(struct timer *tm)
{
	struct coord *co =
	    (struct coord *)((char *)tm - offsetof(struct coord, bar_timer));

	barriers_expire(co->bars, duration_now_ms());
}

/*
 * The member list of a wait into task indices (*idx, *n); a name that is
 * no task of the cluster leaves its reason in bad. "all" is every task of
 * the cluster, connected or not: a barrier that every task must reach,
 * whatever state one is in when the first arrives.
 */
static int
members_from(struct coord *co, json_t *list, size_t **idx, size_t *n, char *bad,
    size_t badlen)
{
	size_t i, all = co->rv->ntasks;
	json_t *v;

	*n = 0;
	if (json_is_string(list)) {
		if ((*idx = calloc(all + 1, sizeof(**idx))) == NULL)
			return -1;
		for (i = 0; i < all; i++)
			(*idx)[(*n)++] = i;
		return 0;
	}
	if ((*idx = calloc(json_array_size(list) + 1, sizeof(**idx))) == NULL)
		return -1;
	json_array_foreach(list, i, v) {
		struct reg_task *t = json_is_string(v) ?
		    registry_find(co->reg, json_string_value(v)) :
		    NULL;
		if (t == NULL) {
			snprintf(bad, badlen, "task %s is not in the cluster",
			    json_is_string(v) ? json_string_value(v) : "?");
			return 0;
		}
		(*idx)[(*n)++] = t->index;
	}
	return 0;
}

/* A wait at a barrier, as asked: kept while its task registers again. */
struct wait {
	char id[258];
	uint64_t inc;
	int64_t timeout;  /* the barrier's, from the first caller */
	size_t *idx, n;   /* the members listed; idx NULL: none */
	char bad[512];    /* why the list did not resolve */
	int64_t poll_end; /* when this long poll ends (monotonic) */
	struct reg_task *t;
};

static void
wait_free(struct wait *a)
{
	if (a != NULL)
		free(a->idx);
	free(a);
}

static void
rejoin_expired(struct parked *w)
{
	struct wait *a = w->ctx;

	http_reply_error(w->req, ST_FAILED_PRECONDITION,
	    "task %s is not registered, not connected", a->t->name);
	wait_free(a);
}

static void
rejoin_drop(struct parked *w)
{
	wait_free(w->ctx);
}

/*
 * Decides wait a for req: answers it, parks it at its barrier, or (its
 * task's agent not registered yet after a start) parks it until the task
 * registers. w is req's parked request when it waited already (a task that
 * has now registered), else NULL. Takes a over.
 */
static void
decide(struct coord *co, struct http_req *req, struct parked *w, struct wait *a)
{
	int64_t now = duration_now_ms(), until = 0;
	struct barrier *b;
	char msg[1024];
	enum status st;
	enum bar_verdict v = barriers_wait(co->bars, a->id, a->t, a->inc,
	    a->timeout, a->idx, a->n, a->bad[0] != '\0' ? a->bad : NULL, now,
	    &b, &until, &st, msg, sizeof(msg));

	if (v == BAR_REGISTER && w == NULL) {
		struct park_list *l = &co->rejoin[a->t->index];
		w = coord_park(co, req, l,
		    (until < a->poll_end ? until : a->poll_end) - now,
		    rejoin_expired, a->id, strlen(a->id));
		if (w != NULL) {
			w->ctx = a;
			w->drop = rejoin_drop;
			return;
		}
		wait_free(a);
		return;
	}
	if (v == BAR_WAIT) {
		if (w == NULL)
			coord_barrier_park(co, req, b, a->poll_end - now, now);
		else {
			w->drop = NULL;
			coord_barrier_move(co, w, b, a->poll_end - now, now);
		}
		wait_free(a);
		return;
	}
	if (w != NULL)
		park_take(w);
	if (v == BAR_REGISTER)
		http_reply_error(req, ST_FAILED_PRECONDITION,
		    "task %s is not registered, not connected", a->t->name);
	else
		coord_barrier_reply(req, a->id, st, msg);
	wait_free(a);
}

/* Task t registered: the waits its agent held up are decided now. */
void
coord_barriers_rejoined(struct coord *co, struct reg_task *t)
{
	struct park_list *l = &co->rejoin[t->index];

	while (l->head != NULL) {
		struct parked *w = l->head;
		/* It waited before the task had a secret: it has one now. */
		if (!coord_task_proven(co, w->req, t, 0)) {
			park_take(w);
			wait_free(w->ctx);
			continue;
		}
		decide(co, w->req, w, w->ctx);
	}
}

/* Answers every wait still held up for a registration (coordd closing). */
void
coord_barriers_drain_rejoins(struct coord *co)
{
	for (size_t i = 0; co->rejoin != NULL && i < co->rv->ntasks; i++) {
		struct park_list *l = &co->rejoin[i];
		while (l->head != NULL) {
			struct parked *w = l->head;
			park_take(w);
			coord_reply_closing(w->req);
			wait_free(w->ctx);
		}
	}
}

static void
wait_route(struct coord *co, struct http_req *req, const char *id)
{
	size_t len;
	const char *body = http_req_body(req, &len);
	const char *tname = NULL, *incs = NULL;
	json_int_t timeout = 0;
	json_t *root, *list = NULL;
	json_error_t jerr;
	struct wait *a;
	int64_t wait;

	if (park_wait_arg(req, "wait", POLL_DEFAULT_MS, &wait) < 0)
		return;
	if ((a = calloc(1, sizeof(*a))) == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	root = json_loadb(body, len, 0, &jerr);
	if (root == NULL ||
	    json_unpack_ex(root, &jerr, 0, "{s:s,s?s,s?I,s?o}", "task", &tname,
	        "incarnation", &incs, "timeout_ms", &timeout, "tasks",
	        &list) < 0 ||
	    (list != NULL && !json_is_array(list) &&
	        !(json_is_string(list) &&
	            strcmp(json_string_value(list), "all") == 0)) ||
	    timeout < 0 ||
	    (incs != NULL && task_parse_incarnation(incs, &a->inc) < 0)) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "request body must "
		    "be {\"task\":T,\"incarnation\":HEX,\"timeout_ms\":N,"
		    "\"tasks\":[...] or \"all\"}: %s",
		    root == NULL ? jerr.text : "bad field");
		json_decref(root);
		wait_free(a);
		return;
	}
	snprintf(a->id, sizeof(a->id), "%s", id);
	a->timeout = timeout;
	coord_lock(co);
	a->poll_end = duration_now_ms() + wait;
	if (coord_closing(co)) {
		/* Nothing may park once shutdown has drained the waiters. */
		coord_reply_closing(req);
		wait_free(a);
	} else if ((a->t = registry_find(co->reg, tname)) == NULL) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "task %s is not in the cluster", tname);
		wait_free(a);
	} else if (!coord_task_proven(co, req, a->t, 0)) {
		wait_free(a);
	} else if (list != NULL &&
	    members_from(co, list, &a->idx, &a->n, a->bad, sizeof(a->bad)) <
	        0) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		wait_free(a);
	} else {
		decide(co, req, NULL, a);
	}
	coord_unlock(co);
	json_decref(root);
}

static void
cancel_route(struct coord *co, struct http_req *req, const char *id)
{
	const char *tname = http_req_arg(req, "task");
	struct reg_task *t = NULL;
	char msg[1024];
	enum status st;

	coord_lock(co);
	if (coord_closing(co)) {
		coord_reply_closing(req);
	} else if (tname != NULL &&
	    (t = registry_find(co->reg, tname)) == NULL) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "task=%s is not in the cluster", tname);
	} else if (t != NULL && !coord_task_proven(co, req, t, 0)) {
		/* answered */
	} else if ((st = barriers_cancel(co->bars, id,
	                t != NULL ? t->name : NULL, duration_now_ms(), msg,
	                sizeof(msg))) != ST_OK) {
		http_reply_error(req, st, "%s", msg);
	} else {
		http_reply_json(req, 200,
		    json_pack("{s:s,s:s}", "barrier", id, "state",
		        "cancelled"));
	}
	coord_unlock(co);
}

static int
valid_id(const char *id)
{
	if (*id == '\0' || strlen(id) > 256)
		return 0;
	for (const char *p = id; *p != '\0'; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		        (*p >= '0' && *p <= '9') || strchr("_-.:", *p) != NULL))
			return 0;
	return 1;
}

/* POST (wait) or DELETE (cancel) /v1/barriers/ID. */
void
coord_barrier_route(struct http_req *req, const struct route_match *m,
    void *arg)
{
	struct coord *co = arg;
	char id[258];

	if (m->seglen[0] > 256) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "barrier id must be 1 to 256 of [A-Za-z0-9_.:-]");
		return;
	}
	route_seg(m, 0, id, sizeof(id));
	if (!valid_id(id)) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "barrier id must be 1 to 256 of [A-Za-z0-9_.:-]");
		return;
	}
	if (co->rv->ntasks == 0) {
		http_reply_error(req, ST_FAILED_PRECONDITION,
		    "barriers need a cluster: coordd runs without --cluster");
		return;
	}
	if (coord_refuse(co, req))
		return; /* the state directory cannot be written */
	if (m->method == ROUTE_POST)
		wait_route(co, req, id);
	else
		cancel_route(co, req, id);
}
