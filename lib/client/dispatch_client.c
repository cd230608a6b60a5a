/*
 * dispatch_client.c: calls to dispatchd, on the coordd client's connection
 * handling (token, retries, TLS), and dispatchd's protocol as typed calls
 * (dc_*): every path a worker or a data consumer asks for is written here.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "coord_call.h"
#include "dispatch_client.h"
#include "text.h"

struct dispatch_client {
	struct coord_client *cc;
	enum status refused; /* why path_of made no path, when not memory */
};

struct dispatch_client *
dispatch_client_new(const char *addr, char *err, size_t errlen)
{
	struct dispatch_client *dc = calloc(1, sizeof(*dc));

	if (dc == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if ((dc->cc = coord_client_new(addr, err, errlen)) == NULL) {
		free(dc);
		return NULL;
	}
	dc->cc->peer = "dispatchd";
	return dc;
}

void
dispatch_client_free(struct dispatch_client *dc)
{
	if (dc == NULL)
		return;
	coord_client_free(dc->cc);
	free(dc);
}

void
dispatch_client_set_cancel(struct dispatch_client *dc, int fd)
{
	coord_client_set_cancel(dc->cc, fd);
}

const char *
dispatch_client_error(const struct dispatch_client *dc)
{
	return coord_client_error(dc->cc);
}

/*
 * Sends body (NULL: none; len bytes of JSON) to path and parses the reply
 * into *reply when it is 2xx. On failure *errbody, if asked for, gets the
 * error object dispatchd sent, or NULL.
 */
static enum status
exchange(struct dispatch_client *dc, const char *method, const struct buf *path,
    const char *body, size_t len, int64_t deadline, int how, json_t **reply,
    json_t **errbody)
{
	struct http_resp resp;
	enum status st;

	*reply = NULL;
	st = coord_call(dc->cc, method, path, body, len,
	    body != NULL ? "application/json" : NULL, deadline, how, &resp);
	if (st == ST_OK) {
		json_error_t e;
		*reply =
		    json_loadb(resp.body.data != NULL ? resp.body.data : "",
		        resp.body.len, 0, &e);
		if (*reply == NULL)
			st = coord_fail(dc->cc, ST_INTERNAL,
			    "malformed reply from dispatchd: %s", e.text);
	} else if (errbody != NULL && resp.body.len > 0) {
		*errbody = json_loadb(resp.body.data, resp.body.len, 0, NULL);
	}
	http_resp_free(&resp);
	return st;
}

/*
 * p: base, then name, then what the format makes of the rest. Names of
 * queues, workers and resources are made of letters, digits and "_-.:",
 * which a path carries as they are, and dispatchd takes them from the
 * path as they are; another name is refused here (INVALID_ARGUMENT from
 * call), since it would name another path ("gpu?x=1"). Datasets' and
 * jobs' names are escaped (path_named).
 */
static int
path_of(struct dispatch_client *dc, struct buf *p, const char *base,
    const char *name, const char *fmt, ...)
{
	va_list ap;
	char tail[256];
	int n;

	if (name != NULL && !text_name(name, 128)) {
		dc->refused = coord_fail(dc->cc, ST_INVALID_ARGUMENT,
		    "%s is not a name: 1 to 128 letters, digits and _-.:",
		    name);
		buf_free(p);
		return -1;
	}
	va_start(ap, fmt);
	n = vsnprintf(tail, sizeof(tail), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tail) || buf_puts(p, base) < 0 ||
	    (name != NULL && buf_puts(p, name) < 0) || buf_puts(p, tail) < 0) {
		buf_free(p);
		return -1;
	}
	return 0;
}

/*
 * p: base, then name percent-encoded (a dataset's or a job's name may hold
 * any byte but NUL), then suffix.
 */
static int
path_named(struct buf *p, const char *base, const char *name,
    const char *suffix)
{
	if (coord_key_path(p, base, name, suffix) < 0) {
		buf_free(p);
		return -1;
	}
	return 0;
}

/*
 * One typed call: path made by path_of (NULL: out of memory), with the
 * JSON body json, or else len bytes of body. A reply not asked for is
 * freed.
 */
static enum status
call(struct dispatch_client *dc, const char *method, struct buf *path,
    json_t *json, const char *body, size_t len, int64_t deadline, int how,
    json_t **reply, json_t **errbody)
{
	json_t *r = NULL;
	char *s = NULL;
	enum status st;

	if (errbody != NULL)
		*errbody = NULL;
	if (path->data == NULL && dc->refused != ST_OK)
		st = dc->refused; /* path_of said why */
	else if (path->data == NULL ||
	    (json != NULL && (s = json_dumps(json, JSON_COMPACT)) == NULL))
		st = coord_fail(dc->cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	else if (s != NULL)
		st = exchange(dc, method, path, s, strlen(s), deadline, how, &r,
		    errbody);
	else
		st = exchange(dc, method, path, body, len, deadline, how, &r,
		    errbody);
	free(s);
	dc->refused = ST_OK;
	buf_free(path);
	if (reply != NULL)
		*reply = r;
	else
		json_decref(r);
	return st;
}

enum status
dc_register(struct dispatch_client *dc, const char *worker, long slots,
    const char *address, const char *host, int64_t deadline, json_t **reply)
{
	struct buf p = {0};
	json_t *body = json_pack("{s:I,s:s,s:s}", "slots", (json_int_t)slots,
	    "address", address, "host", host);
	enum status st;

	path_of(dc, &p, "/v1/workers/", worker, "");
	st = call(dc, "POST", &p, body, NULL, 0, deadline, DC_REPEAT, reply,
	    NULL);
	json_decref(body);
	return st;
}

enum status
dc_heartbeat(struct dispatch_client *dc, const char *worker, const char *inc,
    int64_t wait_ms, int64_t deadline, json_t **reply, json_t **errbody)
{
	struct buf p = {0};

	path_of(dc, &p, "/v1/workers/", worker,
	    "/heartbeat?incarnation=%.16s&wait=%" PRId64 "ms", inc, wait_ms);
	return call(dc, "POST", &p, NULL, NULL, 0, deadline, DC_POLL, reply,
	    errbody);
}

enum status
dc_take(struct dispatch_client *dc, const char *worker, const char *inc,
    const char *results, size_t len, long take, int64_t wait_ms,
    int64_t deadline, int how, json_t **reply, json_t **errbody)
{
	struct buf p = {0};

	if (results == NULL)
		path_of(dc, &p, "/v1/workers/", worker,
		    "/take?incarnation=%.16s&max=%ld&wait=%" PRId64 "ms", inc,
		    take, wait_ms);
	else if (take > 0)
		path_of(dc, &p, "/v1/workers/", worker,
		    "/results?incarnation=%.16s&take=%ld&wait=%" PRId64 "ms",
		    inc, take, wait_ms);
	else
		path_of(dc, &p, "/v1/workers/", worker,
		    "/results?incarnation=%.16s", inc);
	return call(dc, "POST", &p, NULL, results, len, deadline, how, reply,
	    errbody);
}

enum status
dc_resource_state(struct dispatch_client *dc, const char *worker,
    const char *inc, const char *resource, const char *state,
    const char *message, int64_t deadline)
{
	struct buf p = {0};
	json_t *body = json_pack("{s:s}", "state", state);
	enum status st;

	if (message != NULL)
		json_object_set_new(body, "message", json_string(message));
	if (path_of(dc, &p, "/v1/workers/", worker, "/resources/") == 0)
		path_of(dc, &p, "", resource, "?incarnation=%.16s", inc);
	st = call(dc, "POST", &p, body, NULL, 0, deadline, DC_REPEAT, NULL,
	    NULL);
	json_decref(body);
	return st;
}

enum status
dc_leave(struct dispatch_client *dc, const char *worker, const char *inc,
    int64_t deadline)
{
	struct buf p = {0};

	path_of(dc, &p, "/v1/workers/", worker, "?incarnation=%.16s", inc);
	return call(dc, "DELETE", &p, NULL, NULL, 0, deadline, DC_REPEAT, NULL,
	    NULL);
}

enum status
dc_lease(struct dispatch_client *dc, const char *worker, const char *inc,
    uint64_t task, long want, uint64_t lease, int64_t wait_ms, int64_t deadline,
    json_t **reply)
{
	struct buf p = {0};
	json_t *body = json_pack("{s:I,s:I,s:I}", "task", (json_int_t)task,
	    "want", (json_int_t)want, "lease", (json_int_t)lease);
	enum status st;

	/* A bare number: milliseconds, as the spec says (dispatchd caps it
	 * at half the heartbeat timeout all the same). */
	path_of(dc, &p, "/v1/workers/", worker,
	    "/splits?incarnation=%.16s&wait=%" PRId64, inc, wait_ms);
	st =
	    call(dc, "POST", &p, body, NULL, 0, deadline, DC_ONCE, reply, NULL);
	json_decref(body);
	return st;
}

enum status
dc_task_report(struct dispatch_client *dc, const char *worker, const char *inc,
    uint64_t task, json_t *body, int64_t deadline)
{
	struct buf p = {0};

	path_of(dc, &p, "/v1/workers/", worker,
	    "/tasks/%" PRIu64 "?incarnation=%.16s", task, inc);
	return call(dc, "POST", &p, body, NULL, 0, deadline, DC_REPEAT, NULL,
	    NULL);
}

/*
 * From here on a data consumer's calls and an operator's: a person waits
 * on them, and is told on stderr while dispatchd cannot be reached
 * (CALL_SAY). A worker's calls above wait in silence, as a daemon's log
 * would have it. A worker's reader calls dc_splits too, but only when
 * dispatchd has just handed it the task: a line in its log then tells of
 * a dispatchd that went away meanwhile.
 */
enum status
dc_job_open(struct dispatch_client *dc, json_t *body, int64_t deadline,
    json_t **reply)
{
	struct buf p = {0};

	buf_puts(&p, "/v1/jobs");
	return call(dc, "POST", &p, body, NULL, 0, deadline, DC_ONCE | CALL_SAY,
	    reply, NULL);
}

enum status
dc_client_beat(struct dispatch_client *dc, int64_t client, json_t *body,
    int64_t deadline, json_t **reply)
{
	struct buf p = {0};

	path_of(dc, &p, "/v1/clients/", NULL, "%" PRId64 "/heartbeat", client);
	return call(dc, "POST", &p, body, NULL, 0, deadline,
	    DC_REPEAT | CALL_SAY, reply, NULL);
}

enum status
dc_client_release(struct dispatch_client *dc, int64_t client, int64_t deadline)
{
	struct buf p = {0};

	path_of(dc, &p, "/v1/clients/", NULL, "%" PRId64, client);
	return call(dc, "DELETE", &p, NULL, NULL, 0, deadline,
	    DC_REPEAT | CALL_SAY, NULL, NULL);
}

enum status
dc_splits(struct dispatch_client *dc, const char *dataset, int64_t deadline,
    struct buf *out)
{
	struct buf p = {0};
	struct http_resp resp;
	enum status st;

	if (path_named(&p, "/v1/datasets/", dataset, "/splits") < 0)
		return coord_fail(dc->cc, ST_RESOURCE_EXHAUSTED,
		    "out of memory");
	st = coord_call(dc->cc, "GET", &p, NULL, 0, NULL, deadline,
	    CALL_REPEAT | CALL_SAY, &resp);
	buf_free(&p);
	if (st == ST_OK &&
	    buf_append(out, resp.body.data != NULL ? resp.body.data : "",
	        resp.body.len) < 0)
		st = coord_fail(dc->cc, ST_RESOURCE_EXHAUSTED, "out of memory");
	http_resp_free(&resp);
	return st;
}

/*
 * A GET that may be sent again, an operator's look at something: base,
 * then name (NULL: none; escaped with esc, as path_named does), then
 * suffix.
 */
static enum status
look(struct dispatch_client *dc, const char *base, const char *name, int esc,
    const char *suffix, int64_t deadline, json_t **reply, json_t **errbody)
{
	struct buf p = {0};

	if (name != NULL && esc)
		path_named(&p, base, name, suffix);
	else
		path_of(dc, &p, base, name, "%s", suffix);
	return call(dc, "GET", &p, NULL, NULL, 0, deadline,
	    DC_REPEAT | CALL_SAY, reply, errbody);
}

enum status
dc_limits(struct dispatch_client *dc, int64_t deadline, json_t **reply,
    json_t **errbody)
{
	return look(dc, "/v1/limits", NULL, 0, "", deadline, reply, errbody);
}

enum status
dc_schedule(struct dispatch_client *dc, const char *queue, json_t *closures,
    int block, int64_t deadline, json_t **reply, json_t **errbody)
{
	struct buf p = {0};
	json_t *body = json_pack("{s:O}", "closures", closures);
	enum status st;

	path_of(dc, &p, "/v1/queues/", queue, "/closures?block=%d&wait=30s",
	    block);
	st = call(dc, "POST", &p, body, NULL, 0, deadline, DC_POLL | CALL_SAY,
	    reply, errbody);
	json_decref(body);
	return st;
}

enum status
dc_closure(struct dispatch_client *dc, uint64_t id, int64_t wait_ms,
    int64_t deadline, json_t **reply, json_t **errbody)
{
	struct buf p = {0};

	path_of(dc, &p, "/v1/closures/", NULL, "%" PRIu64 "?wait=%" PRId64 "ms",
	    id, wait_ms);
	return call(dc, "GET", &p, NULL, NULL, 0, deadline, DC_POLL | CALL_SAY,
	    reply, errbody);
}

enum status
dc_cancel(struct dispatch_client *dc, uint64_t id, int64_t deadline,
    json_t **reply, json_t **errbody)
{
	struct buf p = {0};

	path_of(dc, &p, "/v1/closures/", NULL, "%" PRIu64 "/cancel", id);
	return call(dc, "POST", &p, NULL, NULL, 0, deadline,
	    DC_REPEAT | CALL_SAY, reply, errbody);
}

enum status
dc_forget(struct dispatch_client *dc, uint64_t id, int64_t deadline,
    json_t **reply, json_t **errbody)
{
	struct buf p = {0};

	path_of(dc, &p, "/v1/closures/", NULL, "%" PRIu64, id);
	return call(dc, "DELETE", &p, NULL, NULL, 0, deadline,
	    DC_REPEAT | CALL_SAY, reply, errbody);
}

enum status
dc_closures(struct dispatch_client *dc, const char *queue, const char *state,
    uint64_t after, int64_t deadline, json_t **reply, json_t **errbody)
{
	struct buf p = {0};

	if (path_named(&p, "/v1/closures?queue=", queue, "") == 0 &&
	    state != NULL)
		path_of(dc, &p, "&state=", state, "");
	if (p.data != NULL)
		path_of(dc, &p, "", NULL, "&after=%" PRIu64, after);
	return call(dc, "GET", &p, NULL, NULL, 0, deadline,
	    DC_REPEAT | CALL_SAY, reply, errbody);
}

int
dc_closures_more(json_t *page, uint64_t *after)
{
	json_t *next = json_object_get(page, "next");

	/* A dispatchd without pages says nothing of more. */
	if (!json_is_true(json_object_get(page, "more")) ||
	    !json_is_integer(next) ||
	    (uint64_t)json_integer_value(next) <= *after)
		return 0;
	*after = (uint64_t)json_integer_value(next);
	return 1;
}

enum status
dc_join(struct dispatch_client *dc, const char *queue, int64_t wait_ms,
    int64_t deadline, json_t **reply, json_t **errbody)
{
	struct buf p = {0};

	path_of(dc, &p, "/v1/queues/", queue, "/join?wait=%" PRId64 "ms",
	    wait_ms);
	return call(dc, "GET", &p, NULL, NULL, 0, deadline, DC_POLL | CALL_SAY,
	    reply, errbody);
}

enum status
dc_done(struct dispatch_client *dc, const char *queue, int64_t deadline,
    json_t **reply, json_t **errbody)
{
	struct buf p = {0};

	path_of(dc, &p, "/v1/queues/", queue, "/done");
	return call(dc, "GET", &p, NULL, NULL, 0, deadline, DC_POLL | CALL_SAY,
	    reply, errbody);
}

enum status
dc_status(struct dispatch_client *dc, int64_t deadline, json_t **reply,
    json_t **errbody)
{
	json_t *reps;
	enum status st =
	    look(dc, "/v1/status", NULL, 0, "", deadline, reply, errbody);

	if (st != ST_OK)
		return st;
	/* A replicated dispatchd says which replica leads. */
	if ((st = coord_replicas(dc->cc, deadline, &reps)) != ST_OK) {
		json_decref(*reply);
		*reply = NULL;
		return st;
	}
	if (reps != NULL)
		json_object_set_new(*reply, "replicas", reps);
	return ST_OK;
}

enum status
dc_resources(struct dispatch_client *dc, int64_t deadline, json_t **reply,
    json_t **errbody)
{
	return look(dc, "/v1/resources", NULL, 0, "", deadline, reply, errbody);
}

enum status
dc_resource(struct dispatch_client *dc, const char *name, int64_t deadline,
    json_t **reply, json_t **errbody)
{
	return look(dc, "/v1/resources/", name, 0, "", deadline, reply,
	    errbody);
}

enum status
dc_resource_add(struct dispatch_client *dc, const char *name, json_t *argv,
    int64_t deadline, json_t **reply, json_t **errbody)
{
	struct buf p = {0};
	json_t *body = json_pack("{s:O}", "argv", argv);
	enum status st;

	path_of(dc, &p, "/v1/resources/", name, "");
	st = call(dc, "PUT", &p, body, NULL, 0, deadline, DC_REPEAT | CALL_SAY,
	    reply, errbody);
	json_decref(body);
	return st;
}

enum status
dc_dataset_add(struct dispatch_client *dc, json_t *body, int64_t deadline,
    json_t **reply, json_t **errbody)
{
	struct buf p = {0};

	buf_puts(&p, "/v1/datasets");
	return call(dc, "POST", &p, body, NULL, 0, deadline,
	    DC_REPEAT | CALL_SAY, reply, errbody);
}

enum status
dc_datasets(struct dispatch_client *dc, int64_t deadline, json_t **reply,
    json_t **errbody)
{
	return look(dc, "/v1/datasets", NULL, 0, "", deadline, reply, errbody);
}

enum status
dc_dataset(struct dispatch_client *dc, const char *dataset, int64_t deadline,
    json_t **reply, json_t **errbody)
{
	return look(dc, "/v1/datasets/", dataset, 1, "", deadline, reply,
	    errbody);
}

enum status
dc_jobs(struct dispatch_client *dc, int64_t deadline, json_t **reply,
    json_t **errbody)
{
	return look(dc, "/v1/jobs", NULL, 0, "", deadline, reply, errbody);
}

enum status
dc_job(struct dispatch_client *dc, const char *job, int64_t deadline,
    json_t **reply, json_t **errbody)
{
	return look(dc, "/v1/jobs/", job, 1, "", deadline, reply, errbody);
}

enum status
dc_checkpoint(struct dispatch_client *dc, const char *job, int64_t deadline,
    json_t **reply, json_t **errbody)
{
	return look(dc, "/v1/jobs/", job, 1, "/checkpoint", deadline, reply,
	    errbody);
}

int64_t
dispatch_poll_wait(int64_t deadline, int64_t max_ms, int64_t *poll_deadline)
{
	return coord_poll_wait(deadline, max_ms, poll_deadline);
}

int
dispatch_poll_again(enum status st, int64_t deadline)
{
	return coord_poll_again(st, deadline);
}
