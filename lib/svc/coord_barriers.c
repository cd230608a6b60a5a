/*
 * coord_barriers.c: barriers over HTTP.
 *
 *   POST   /v1/barriers/ID?wait=DUR   {"task":T,"incarnation":HEX,
 *                                      "timeout_ms":N,"tasks":[T,...]}
 *   DELETE /v1/barriers/ID?task=T     cancel
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
		coord_reply_json(req, 200, passed_json(id));
	else
		http_reply_error(req, st, "%s", msg);
}

void
coord_barrier_ended(struct barrier *b, void *arg)
{
	struct park_list *l = b->udata;

	(void)arg;
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
		coord_reply_json(w->req, 202,
		    json_pack("{s:s,s:s,s:I,s:I}", "barrier", b->id, "state",
		        "waiting", "arrived", (json_int_t)b->arrived, "total",
		        (json_int_t)b->members));
}

void
coord_barrier_park(struct coord *co, struct http_req *req, struct barrier *b,
    int64_t wait, int64_t now)
{
	struct park_list *l = b->udata;
	struct parked *w;

	if (l == NULL && (l = b->udata = calloc(1, sizeof(*l))) == NULL) {
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
 * no task of the cluster leaves its reason in bad.
 */
static int
members_from(struct coord *co, json_t *list, size_t **idx, size_t *n, char *bad,
    size_t badlen)
{
	size_t i;
	json_t *v;

	*n = 0;
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

static void
wait_route(struct coord *co, struct http_req *req, const char *id)
{
	size_t len, n = 0, *idx = NULL;
	const char *body = http_req_body(req, &len);
	const char *tname = NULL, *incs = NULL;
	json_int_t timeout = 0;
	json_t *root, *list = NULL;
	json_error_t jerr;
	struct barrier *b;
	struct reg_task *t;
	uint64_t inc = 0;
	int64_t wait, now;
	char msg[1024], bad[512] = "";
	enum status st;

	if (coord_arg_duration(req, "wait", POLL_DEFAULT_MS, &wait) < 0)
		return;
	root = json_loadb(body, len, 0, &jerr);
	if (root == NULL ||
	    json_unpack_ex(root, &jerr, 0, "{s:s,s?s,s?I,s?o}", "task", &tname,
	        "incarnation", &incs, "timeout_ms", &timeout, "tasks",
	        &list) < 0 ||
	    (list != NULL && !json_is_array(list)) || timeout < 0 ||
	    (incs != NULL && task_parse_incarnation(incs, &inc) < 0)) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "request body must "
		    "be {\"task\":T,\"incarnation\":HEX,\"timeout_ms\":N,"
		    "\"tasks\":[...]}: %s",
		    root == NULL ? jerr.text : "bad field");
		json_decref(root);
		return;
	}
	coord_lock(co);
	now = duration_now_ms();
	if (coord_closing(co)) {
		/* Nothing may park once shutdown has drained the waiters. */
		coord_reply_closing(req);
	} else if ((t = registry_find(co->reg, tname)) == NULL) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "task %s is not in the cluster", tname);
	} else if (list != NULL &&
	    members_from(co, list, &idx, &n, bad, sizeof(bad)) < 0) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	} else if (barriers_wait(co->bars, id, t, inc, timeout,
	               list != NULL ? idx : NULL, n,
	               bad[0] != '\0' ? bad : NULL, now, &b, &st, msg,
	               sizeof(msg)) == BAR_ANSWER) {
		coord_barrier_reply(req, id, st, msg);
	} else {
		coord_barrier_park(co, req, b, wait, now);
	}
	coord_unlock(co);
	free(idx);
	json_decref(root);
}

static void
cancel_route(struct coord *co, struct http_req *req, const char *id)
{
	const char *tname = http_req_arg(req, "task");
	char msg[1024];
	enum status st;

	coord_lock(co);
	if (coord_closing(co)) {
		coord_reply_closing(req);
	} else if (tname == NULL || registry_find(co->reg, tname) == NULL) {
		http_reply_error(req, ST_INVALID_ARGUMENT,
		    "task=%s is not in the cluster",
		    tname != NULL ? tname : "");
	} else if ((st = barriers_cancel(co->bars, id, tname, duration_now_ms(),
	                msg, sizeof(msg))) != ST_OK) {
		http_reply_error(req, st, "%s", msg);
	} else {
		coord_reply_json(req, 200,
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
	if (m->method == ROUTE_POST)
		wait_route(co, req, id);
	else
		cancel_route(co, req, id);
}
