/*
 * dispatch_show.c: tables and fields of dispatchd's replies, for
 * dispatchctl.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "buf.h"
#include "cli.h"
#include "coord_text.h"
#include "dispatch_show.h"
#include "log.h"
#include "text.h"
#include "wallclock.h"

void
dispatch_show_json(FILE *f, json_t *j)
{
	json_dumpf(j, f, JSON_COMPACT);
	fputc('\n', f);
}

/* A JSON value as a person reads it: strings bare, null as "-". */
static void
show_value(FILE *f, json_t *v)
{
	if (json_is_string(v)) {
		fputs(json_string_value(v), f);
	} else if (v == NULL || json_is_null(v)) {
		fputc('-', f);
	} else {
		json_dumpf(v, f, JSON_COMPACT | JSON_ENCODE_ANY);
	}
}

/* The fields of obj named in keys, one "key: value" a line. */
static void
show_fields(FILE *f, json_t *obj, const char *const *keys)
{
	for (; *keys != NULL; keys++) {
		fprintf(f, "%s: ", *keys);
		show_value(f, json_object_get(obj, *keys));
		fputc('\n', f);
	}
}

/*
 * A field for a table: strings as they are, integers in decimal (into
 * buf), anything else "-".
 */
static const char *
field_text(json_t *obj, const char *key, char *buf, size_t len)
{
	json_t *v = json_object_get(obj, key);

	if (json_is_string(v))
		return json_string_value(v);
	if (json_is_integer(v) && buf != NULL) {
		snprintf(buf, len, "%" JSON_INTEGER_FORMAT,
		    json_integer_value(v));
		return buf;
	}
	return "-";
}

static json_int_t
int_of(json_t *obj, const char *key)
{
	return json_integer_value(json_object_get(obj, key));
}

static const char *
str_of(json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

static void
show_queues(FILE *f, json_t *queues)
{
	json_t *v;
	size_t i;

	fprintf(f, "%-16s %8s %8s %8s %8s %8s %s\n", "QUEUE", "QUEUED",
	    "RUNNING", "DONE", "FAILED", "CANCEL", "ERROR");
	json_array_foreach(queues, i, v) {
		json_t *e = json_object_get(v, "error");
		char err[40] = "-";
		if (json_is_integer(e))
			snprintf(err, sizeof(err),
			    "closure %" JSON_INTEGER_FORMAT,
			    json_integer_value(e));
		fprintf(f,
		    "%-16s %8" JSON_INTEGER_FORMAT " %8" JSON_INTEGER_FORMAT
		    " %8" JSON_INTEGER_FORMAT " %8" JSON_INTEGER_FORMAT
		    " %8" JSON_INTEGER_FORMAT " %s\n",
		    str_of(v, "name"), int_of(v, "queued"),
		    int_of(v, "inflight"), int_of(v, "done"),
		    int_of(v, "failed"), int_of(v, "cancelled"), err);
	}
}

static void
show_workers(FILE *f, json_t *workers)
{
	json_t *v;
	size_t i;

	fprintf(f, "\n%-16s %-5s %-9s %5s %7s %6s %s\n", "WORKER", "LIVE",
	    "HEALTH", "SLOTS", "RUNNING", "DEATHS", "LAST FAILURE");
	json_array_foreach(workers, i, v) {
		const char *why = str_of(v, "last_failure");
		const char *sick =
		    str_of(json_object_get(v, "unhealthy"), "message");
		/* An unhealthy worker's reason comes first: it is why it
		 * gets no work now. */
		fprintf(f,
		    "%-16s %-5s %-9s %5" JSON_INTEGER_FORMAT
		    " %7" JSON_INTEGER_FORMAT " %6" JSON_INTEGER_FORMAT " %s\n",
		    str_of(v, "name"),
		    json_is_true(json_object_get(v, "live")) ? "yes" : "no",
		    sick != NULL ? "unhealthy" : "ok", int_of(v, "slots"),
		    int_of(v, "running"), int_of(v, "deaths"),
		    sick != NULL    ? sick :
		        why != NULL ? why :
		                      "-");
	}
}

static void
show_replicas(FILE *f, json_t *replicas)
{
	struct buf out = {0};

	if (replicas == NULL)
		return;
	if (coord_text_replicas(replicas, wall_now_ms(), &out) == 0)
		fwrite(out.data, 1, out.len, f);
	buf_free(&out);
}

void
dispatch_show_status(FILE *f, json_t *status, int json)
{
	if (json) {
		dispatch_show_json(f, status);
		return;
	}
	show_queues(f, json_object_get(status, "queues"));
	show_workers(f, json_object_get(status, "workers"));
	show_replicas(f, json_object_get(status, "replicas"));
}

void
dispatch_show_resources(FILE *f, json_t *list, int json)
{
	json_t *v;
	size_t i;

	json_array_foreach(json_object_get(list, "resources"), i, v) {
		if (json)
			dispatch_show_json(f, v);
		else
			fprintf(f, "%s\n", str_of(v, "name"));
	}
}

void
dispatch_show_resource(FILE *f, json_t *res, int json)
{
	const char *k;
	json_t *v;

	if (json) {
		dispatch_show_json(f, res);
		return;
	}
	json_object_foreach(json_object_get(res, "workers"), k, v) {
		const char *m = str_of(v, "message");
		fprintf(f, "%-16s %s%s%s\n", k, str_of(v, "state"),
		    m != NULL ? ": " : "", m != NULL ? m : "");
	}
}

void
dispatch_show_added(FILE *f, json_t *dataset, int json)
{
	if (json) {
		dispatch_show_json(f, dataset);
		return;
	}
	show_value(f, json_object_get(dataset, "id"));
	fputc('\n', f);
}

void
dispatch_show_datasets(FILE *f, json_t *list, int json)
{
	json_t *v;
	size_t i;

	if (json) {
		dispatch_show_json(f, list);
		return;
	}
	fprintf(f, "%-6s %-16s %8s %-7s %s\n", "ID", "NAME", "SPLITS",
	    "FRAMING", "READER");
	json_array_foreach(json_object_get(list, "datasets"), i, v) {
		char a[32], b[32];
		fprintf(f, "%-6s %-16s %8s %-7s %s\n",
		    field_text(v, "id", a, sizeof(a)),
		    field_text(v, "name", NULL, 0),
		    field_text(v, "splits", b, sizeof(b)),
		    field_text(v, "framing", NULL, 0),
		    field_text(v, "reader", NULL, 0));
	}
}

void
dispatch_show_dataset(FILE *f, json_t *dataset, int json)
{
	static const char *const fields[] = {"id", "name", "splits", "framing",
	    "reader_skips", "fingerprint", "reader", NULL};

	if (json)
		dispatch_show_json(f, dataset);
	else
		show_fields(f, dataset, fields);
}

/* A job's state in one word. */
static const char *
job_state(json_t *j)
{
	if (json_is_string(json_object_get(j, "error")))
		return "failed";
	if (json_is_true(json_object_get(j, "kept")))
		return "kept";
	return json_is_true(json_object_get(j, "finished")) ? "finished" :
	                                                      "running";
}

void
dispatch_show_jobs(FILE *f, json_t *list, int json)
{
	json_t *j;
	size_t i;

	if (json) {
		dispatch_show_json(f, list);
		return;
	}
	fprintf(f, "%-6s %-16s %-8s %-12s %7s %s\n", "ID", "NAME", "DATASET",
	    "MODE", "CLIENTS", "STATE");
	json_array_foreach(json_object_get(list, "jobs"), i, j) {
		char a[32], b[32], c[32];
		fprintf(f, "%-6s %-16s %-8s %-12s %7s %s\n",
		    field_text(j, "id", a, sizeof(a)),
		    field_text(j, "name", NULL, 0),
		    field_text(j, "dataset", b, sizeof(b)),
		    field_text(j, "mode", NULL, 0),
		    field_text(j, "clients", c, sizeof(c)), job_state(j));
	}
}

void
dispatch_show_job(FILE *f, json_t *job, int json)
{
	static const char *const fields[] = {"id", "name", "iteration", "run",
	    "dataset", "mode", "repeat", "seed", "consumers", "clients",
	    "finished", "kept", "error", "splits", "done", "leased", "next",
	    NULL};
	json_t *t;
	size_t i;

	if (json) {
		dispatch_show_json(f, job);
		return;
	}
	show_fields(f, job, fields);
	fprintf(f, "tasks:\n");
	json_array_foreach(json_object_get(job, "tasks"), i, t) {
		char a[32];
		fprintf(f, "  %-6s %-16s %s\n",
		    field_text(t, "id", a, sizeof(a)),
		    field_text(t, "worker", NULL, 0),
		    field_text(t, "state", NULL, 0));
	}
}

static void
show_closure(FILE *f, json_t *c)
{
	json_t *ex = json_object_get(c, "exit"), *sig;
	const char *w = str_of(c, "worker");
	char end[32] = "-";

	if (json_is_integer(ex))
		snprintf(end, sizeof(end), "exit %" JSON_INTEGER_FORMAT,
		    json_integer_value(ex));
	else if (json_is_integer(sig = json_object_get(c, "signal")))
		snprintf(end, sizeof(end), "signal %" JSON_INTEGER_FORMAT,
		    json_integer_value(sig));
	fprintf(f,
	    "%-8" JSON_INTEGER_FORMAT
	    " %-10s %-9s %-8s %-12s %-8" JSON_INTEGER_FORMAT " %s\n",
	    int_of(c, "id"), str_of(c, "state"), str_of(c, "phase"),
	    str_of(c, "queue"), w != NULL ? w : "-", int_of(c, "attempts"),
	    end);
}

void
dispatch_show_list_page(struct dispatch_show_list *l, json_t *page)
{
	json_t *c;
	size_t i;

	if (!l->begun) {
		if (l->json)
			fputs("{\"closures\":[", l->f);
		else
			fprintf(l->f, "%-8s %-10s %-9s %-8s %-12s %-8s %s\n",
			    "ID", "STATE", "PHASE", "QUEUE", "WORKER",
			    "ATTEMPTS", "END");
		l->begun = 1;
	}
	json_array_foreach(json_object_get(page, "closures"), i, c) {
		if (!l->json) {
			show_closure(l->f, c);
			continue;
		}
		if (l->n++ > 0)
			fputc(',', l->f);
		json_dumpf(c, l->f, JSON_COMPACT);
	}
}

void
dispatch_show_list_end(struct dispatch_show_list *l)
{
	if (l->json && l->begun)
		fputs("]}\n", l->f);
}

/* A closure's field of base64 bytes, decoded into b; -1 when none. */
static int
bytes_of(json_t *c, const char *key, struct buf *b)
{
	const char *t = str_of(c, key);

	return t != NULL && text_base64_decode(b, t, strlen(t)) == 0 ? 0 : -1;
}

int
dispatch_show_stdout(FILE *f, json_t *closure)
{
	struct buf b = {0};
	int rc = 0, e = errno;

	if (bytes_of(closure, "stdout", &b) == 0 && b.len > 0 &&
	    fwrite(b.data, 1, b.len, f) != b.len) {
		rc = -1;
		e = errno;
	}
	buf_free(&b);
	errno = e;
	return rc;
}

/* The tail of a closure's stderr, under a line that names the closure. */
static void
show_tail(FILE *f, json_t *closure)
{
	struct buf b = {0};

	if (bytes_of(closure, "stderr_tail", &b) == 0 && b.len > 0) {
		fprintf(f, "%s: stderr of closure %" JSON_INTEGER_FORMAT ":\n",
		    log_prog(), int_of(closure, "id"));
		fwrite(b.data, 1, b.len, f);
		if (b.data[b.len - 1] != '\n')
			fputc('\n', f);
	}
	buf_free(&b);
}

void
dispatch_show_failed(FILE *out, FILE *err, json_t *errbody, int json)
{
	const char *why = str_of(json_object_get(errbody, "error"), "message");

	if (json)
		dispatch_show_json(out, errbody);
	fprintf(err, "%s: %s\n", log_prog(),
	    why != NULL ? why : "a closure failed");
	show_tail(err, json_object_get(errbody, "closure"));
}

static int
is(const char *s, const char *t)
{
	return s != NULL && strcmp(s, t) == 0;
}

int
dispatch_show_code(json_t *c)
{
	const char *state = json_string_value(json_object_get(c, "state"));
	json_t *ex = json_object_get(c, "exit"), *sig;

	if (is(state, "CANCELLED"))
		return status_exit(ST_CANCELLED);
	if (is(state, "ABORTED"))
		return status_exit(ST_ABORTED);
	if (json_is_integer(ex))
		return json_integer_value(ex) != 0 ||
		        json_object_get(c, "message") == NULL ?
		    (int)json_integer_value(ex) :
		    status_exit(ST_INTERNAL);
	sig = json_object_get(c, "signal");
	if (json_is_integer(sig))
		return 128 + (int)json_integer_value(sig);
	return status_exit(ST_INTERNAL);
}

int
dispatch_show_end(FILE *f, json_t *c, uint64_t id)
{
	const char *state = json_string_value(json_object_get(c, "state"));
	const char *why = json_string_value(json_object_get(c, "message"));
	int code = dispatch_show_code(c);

	if (dispatch_show_stdout(f, c) < 0)
		code = cli_fail(ST_INTERNAL, "writing: %s", strerror(errno));
	if (is(state, "CANCELLED"))
		cli_fail(ST_CANCELLED,
		    "closure %" PRIu64 " was cancelled%s%s%s", id,
		    why != NULL ? " (" : "", why != NULL ? why : "",
		    why != NULL ? ")" : "");
	else if (is(state, "ABORTED"))
		cli_fail(ST_ABORTED, "closure %" PRIu64 ": %s", id, why);
	else if (json_is_true(json_object_get(c, "stdout_truncated")))
		fprintf(stderr,
		    "%s: closure %" PRIu64 ": its output was cut at the "
		    "worker's --max-output\n",
		    log_prog(), id);
	return code;
}

void
dispatch_show_progress(json_t *counts, void *progress)
{
	struct dispatch_progress *p = progress;
	json_t *c = json_object_get(counts, "closures");
	json_int_t done = json_integer_value(json_object_get(c, "done")),
	           failed = json_integer_value(json_object_get(c, "failed")),
	           cancelled =
	               json_integer_value(json_object_get(c, "cancelled"));

	/* \r and erase to the end of the line: the line before, written
	 * over. */
	fprintf(stderr,
	    "\r%s: queue %s: %" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT
	    " done, %" JSON_INTEGER_FORMAT " failed, %" JSON_INTEGER_FORMAT
	    " running, %" JSON_INTEGER_FORMAT " queued",
	    log_prog(), p->queue, done + failed + cancelled,
	    json_integer_value(json_object_get(c, "scheduled")), failed,
	    json_integer_value(json_object_get(counts, "inflight")),
	    json_integer_value(json_object_get(counts, "queued")));
	if (cancelled > 0)
		fprintf(stderr, ", %" JSON_INTEGER_FORMAT " cancelled",
		    cancelled);
	fputs("\033[K", stderr);
	p->shown = 1;
}

void
dispatch_show_progress_end(struct dispatch_progress *p)
{
	if (p->shown)
		fputc('\n', stderr);
	p->shown = 0;
}
