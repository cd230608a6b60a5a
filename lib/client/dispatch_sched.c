/*
 * dispatch_sched.c: closures from a command line, one or one a line
 * (dispatchctl schedule).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "dispatch_sched.h"
#include "duration.h"
#include "http_client.h"
#include "readall.h"
#include "task.h"
#include "text.h"

#define BATCH 10000 /* closures in one request, at most */

/* dispatchd's defaults, for one that does not say (before /v1/limits). */
#define DEFAULT_MAX_CLOSURE (16u << 20)
#define DEFAULT_MAX_REQUEST (DEFAULT_MAX_CLOSURE / 3 * 4 + (64u << 20))

int
dispatch_sched_init(struct dispatch_sched *s, struct dispatch_client *dc,
    const char *queue, FILE *ids)
{
	memset(s, 0, sizeof(*s));
	s->dc = dc;
	s->queue = queue;
	s->ids = ids;
	s->block = 1;
	s->common = json_object();
	s->env = json_object();
	s->codes = json_array();
	s->needs = json_array();
	return s->common != NULL && s->env != NULL && s->codes != NULL &&
	        s->needs != NULL ?
	    0 :
	    -1;
}

void
dispatch_sched_free(struct dispatch_sched *s)
{
	json_decref(s->common);
	json_decref(s->env);
	json_decref(s->codes);
	json_decref(s->needs);
	s->common = s->env = s->codes = s->needs = NULL;
}

int
dispatch_sched_braces(const char *s)
{
	return strstr(s, "{}") != NULL;
}

void
dispatch_sched_timeout(struct dispatch_sched *s, int64_t ms)
{
	json_object_set_new(s->common, "timeout_ms", json_integer(ms));
}

void
dispatch_sched_max_retries(struct dispatch_sched *s, long n)
{
	json_object_set_new(s->common, "max_retries", json_integer(n));
}

void
dispatch_sched_retry_exit(struct dispatch_sched *s, long code)
{
	json_array_append_new(s->codes, json_integer(code));
}

void
dispatch_sched_independent(struct dispatch_sched *s)
{
	json_object_set_new(s->common, "independent", json_true());
}

int
dispatch_sched_needs(struct dispatch_sched *s, const char *resource)
{
	return json_array_append_new(s->needs, json_string(resource));
}

int
dispatch_sched_env(struct dispatch_sched *s, const char *nv)
{
	const char *eq = strchr(nv, '=');

	if (eq == NULL || eq == nv)
		return -1;
	/* A name or value that is not UTF-8 is not set. */
	return json_object_setn_new(s->env, nv, (size_t)(eq - nv),
	           json_string(eq + 1)) < 0 ?
	    -2 :
	    0;
}

int
dispatch_sched_on(struct dispatch_sched *s, const char *task)
{
	struct task_name tn;
	char name[TASK_JOB_MAX + 32];

	if (task_parse(task, &tn) < 0)
		return -1;
	json_object_set_new(s->common, "on",
	    json_string(task_format(&tn, name, sizeof(name))));
	return 0;
}

/* A call that failed: the client's message into err. */
static enum status
failed(struct dispatch_sched *s, enum status st, char *err, size_t errlen)
{
	snprintf(err, errlen, "%s", dispatch_client_error(s->dc));
	return st;
}

/*
 * The largest closure and request dispatchd takes, so that reading stops
 * there (a --stdin of /dev/zero, a line that never ends) instead of
 * holding all of it first. One that does not say has the defaults.
 */
static enum status
limits(struct dispatch_sched *s, json_t **errbody, char *err, size_t errlen)
{
	json_t *reply;
	enum status st =
	    dc_limits(s->dc, duration_now_ms() + 30000, &reply, errbody);
	json_int_t c, r;

	s->max_closure = DEFAULT_MAX_CLOSURE;
	s->max_request = DEFAULT_MAX_REQUEST;
	if (st == ST_NOT_FOUND) {
		json_decref(*errbody);
		*errbody = NULL;
		return ST_OK;
	}
	if (st != ST_OK)
		return failed(s, st, err, errlen);
	c = json_integer_value(json_object_get(reply, "max_closure_size"));
	r = json_integer_value(json_object_get(reply, "max_request_bytes"));
	if (c > 0)
		s->max_closure = (size_t)c;
	if (r > 0)
		s->max_request = (size_t)r;
	json_decref(reply);
	return ST_OK;
}

/* --stdin: its bytes, no more than a closure may carry. */
static enum status
stdin_of(struct dispatch_sched *s, char *err, size_t errlen)
{
	struct buf b = {0};
	/* Its base64 alone would be larger than a closure may be. */
	int r = readall_file(s->in, &b, s->max_closure / 4 * 3);

	if (r < 0) {
		buf_free(&b);
		if (r == -2) {
			snprintf(err, errlen,
			    "--stdin %s: the closure would be larger than %zu "
			    "bytes (dispatchd's --max-closure-size; stdin "
			    "counts as base64)",
			    s->in, s->max_closure);
			return ST_RESOURCE_EXHAUSTED;
		}
		snprintf(err, errlen, "--stdin %s: %s", s->in, strerror(errno));
		return ST_INVALID_ARGUMENT;
	}
	json_object_set_new(s->common, "stdin",
	    text_base64_json(b.data != NULL ? b.data : "", b.len));
	buf_free(&b);
	return ST_OK;
}

/* The most bytes the JSON of s can take (every byte escaped as \u00XX). */
static size_t
json_text_max(size_t len)
{
	return 6 * len + 3;
}

static json_t *
substitute(const char *s, const char *line)
{
	struct buf b = {0};
	const char *p;
	json_t *j;

	while ((p = strstr(s, "{}")) != NULL) {
		buf_append(&b, s, (size_t)(p - s));
		buf_puts(&b, line);
		s = p + 2;
	}
	buf_puts(&b, s);
	j = json_stringn(b.data != NULL ? b.data : "", b.len);
	buf_free(&b);
	return j;
}

/*
 * The closure of line (NULL: the command as it is); NULL when an argument
 * or the line is not UTF-8 (JSON strings are), which would else be left
 * out of the command without a word.
 */
static json_t *
closure_item(const struct dispatch_sched *s, const char *line)
{
	json_t *item = json_deep_copy(s->common), *argv = json_array();
	int braces = 0, bad = item == NULL || argv == NULL;

	for (int i = 0; i < s->ncmd; i++) {
		json_t *a;
		if (line != NULL && dispatch_sched_braces(s->cmd[i])) {
			braces = 1;
			a = substitute(s->cmd[i], line);
		} else {
			a = json_string(s->cmd[i]);
		}
		bad |= json_array_append_new(argv, a) < 0;
	}
	if (line != NULL && !braces)
		bad |= json_array_append_new(argv, json_string(line)) < 0;
	bad |= json_object_set_new(item, "argv", argv) < 0;
	if (s->key != NULL)
		bad |= json_object_set_new(item, "key",
		           line != NULL ? substitute(s->key, line) :
		                          json_string(s->key)) < 0;
	if (bad) {
		json_decref(item);
		return NULL;
	}
	return item;
}

/* Sends items (as many requests as a full queue takes); writes ids. */
static enum status
send_batch(struct dispatch_sched *s, json_t *items, json_t **errbody, char *err,
    size_t errlen)
{
	size_t done = 0, n = json_array_size(items);

	while (done < n) {
		json_t *rest = json_array(), *reply, *v;
		size_t i;
		enum status st;

		for (i = done; i < n; i++)
			json_array_append(rest, json_array_get(items, i));
		st = dc_schedule(s->dc, s->queue, rest, s->block,
		    HTTP_NO_DEADLINE, &reply, errbody);
		json_decref(rest);
		if (st == ST_DEADLINE_EXCEEDED && s->block) {
			json_decref(*errbody);
			*errbody = NULL;
			continue; /* still full: ask again */
		}
		if (st != ST_OK)
			return failed(s, st, err, errlen);
		json_array_foreach(json_object_get(reply, "ids"), i, v)
			fprintf(s->ids, "%" JSON_INTEGER_FORMAT "\n",
			    json_integer_value(v));
		done += json_array_size(json_object_get(reply, "ids"));
		json_decref(reply);
	}
	return ST_OK;
}

/* One closure, of the command as it is. */
static enum status
one(struct dispatch_sched *s, json_t **errbody, char *err, size_t errlen)
{
	json_t *items = json_array();
	enum status st;

	if (json_array_append_new(items, closure_item(s, NULL)) < 0) {
		json_decref(items);
		snprintf(err, errlen, "the command or --key is not UTF-8");
		return ST_INVALID_ARGUMENT;
	}
	st = send_batch(s, items, errbody, err, errlen);
	json_decref(items);
	return st;
}

/* Why reading lines stopped (readall_line's r), as err; ST_OK at the end. */
static enum status
lines_end(const struct dispatch_sched *s, int r, char *err, size_t errlen)
{
	switch (r) {
	case -3:
		snprintf(err, errlen, "a line of input holds a NUL byte");
		return ST_INVALID_ARGUMENT;
	case -2:
		snprintf(err, errlen,
		    "a line of input is longer than %zu bytes, the largest "
		    "closure dispatchd takes (--max-closure-size)",
		    s->max_closure);
		return ST_RESOURCE_EXHAUSTED;
	case -1:
		snprintf(err, errlen, "reading stdin: %s", strerror(errno));
		return ST_INVALID_ARGUMENT;
	default: return ST_OK;
	}
}

/*
 * A closure a line, in batches of at most BATCH closures and of fewer
 * bytes than a request dispatchd takes (every closure carries the same
 * stdin, which may be large).
 */
static enum status
each(struct dispatch_sched *s, FILE *lines, json_t **errbody, char *err,
    size_t errlen)
{
	json_t *items = json_array();
	struct buf line = {0};
	size_t fixed = json_dumpb(s->common, NULL, 0, JSON_COMPACT) + 64,
	       uses = 1, batch = 0, n = 0;
	enum status st = ST_OK;
	int r = 0;

	for (int i = 0; i < s->ncmd; i++) {
		fixed += json_text_max(strlen(s->cmd[i]));
		uses += dispatch_sched_braces(s->cmd[i]);
	}
	if (s->key != NULL) {
		fixed += json_text_max(strlen(s->key));
		uses++;
	}
	while (st == ST_OK &&
	    (r = readall_line(lines, &line, s->max_closure)) > 0) {
		size_t bytes = fixed + uses * json_text_max(line.len);
		if (json_array_size(items) > 0 &&
		    batch + bytes > s->max_request / 2) {
			st = send_batch(s, items, errbody, err, errlen);
			json_array_clear(items);
			batch = 0;
		}
		n++;
		if (st == ST_OK &&
		    json_array_append_new(items,
		        closure_item(s, line.data != NULL ? line.data : "")) <
		        0) {
			/* It stops there, as at a line holding a NUL. */
			snprintf(err, errlen,
			    "line %zu of input, or the command with it, is "
			    "not UTF-8",
			    n);
			st = ST_INVALID_ARGUMENT;
			break;
		}
		batch += bytes;
		if (st == ST_OK && json_array_size(items) == BATCH) {
			st = send_batch(s, items, errbody, err, errlen);
			json_array_clear(items);
			batch = 0;
		}
	}
	if (st == ST_OK)
		st = lines_end(s, r, err, errlen);
	if (st == ST_OK && json_array_size(items) > 0)
		st = send_batch(s, items, errbody, err, errlen);
	json_decref(items);
	buf_free(&line);
	return st;
}

enum status
dispatch_sched_run(struct dispatch_sched *s, FILE *lines, json_t **errbody,
    char *err, size_t errlen)
{
	enum status st = ST_OK;

	*errbody = NULL;
	if (json_object_size(s->env) > 0)
		json_object_set(s->common, "env", s->env);
	if (json_array_size(s->codes) > 0)
		json_object_set(s->common, "retry_exit", s->codes);
	if (json_array_size(s->needs) > 0)
		json_object_set(s->common, "needs", s->needs);
	if (s->in != NULL || s->each)
		st = limits(s, errbody, err, errlen);
	if (st == ST_OK && s->in != NULL)
		st = stdin_of(s, err, errlen);
	if (st != ST_OK)
		return st;
	return s->each ? each(s, lines, errbody, err, errlen) :
	                 one(s, errbody, err, errlen);
}
