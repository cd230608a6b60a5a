/*
 * runner_closure.c: one run of a closure, whichever way it runs: the
 * environment it is given, the output kept of it, a start given back to
 * dispatchd, and its end as the JSON a result reports.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "runner_int.h"
#include "text.h"

int
runner_exec_local(int e)
{
	return e == ENOMEM || e == EMFILE || e == ENFILE || e == EAGAIN;
}

/* MUSTER_RESOURCE_NAME, with NAME upper case and [A-Z0-9_] only. */
static void
env_name(const char *name, char *out, size_t size)
{
	size_t j = snprintf(out, size, "MUSTER_RESOURCE_");

	for (const char *p = name; *p != '\0' && j + 1 < size; p++)
		out[j++] = (*p >= 'a' && *p <= 'z') ? (char)(*p - 32) :
		    ((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')) ?
		                                      *p :
		                                      '_';
	out[j] = '\0';
}

char **
runner_closure_vars(struct runner_slot *s, struct runner_run *r)
{
	json_t *env = json_object_get(r->spec, "env"), *v, *d;
	size_t n = json_object_size(env) + json_array_size(r->resources) + 8;
	char **set = calloc(n, sizeof(char *));
	const char *k;
	size_t i = 0, j;

	if (set == NULL)
		return NULL;
	asprintf(&set[i++], "MUSTER_CLOSURE_ID=%" PRIu64, r->id);
	asprintf(&set[i++], "MUSTER_ATTEMPT=%ld", r->attempt);
	asprintf(&set[i++], "MUSTER_WORKER=%s", s->wk->o.task);
	asprintf(&set[i++], "MUSTER_QUEUE=%s", r->queue);
	json_array_foreach(r->resources, j, d) {
		char en[200];
		const char *dir = json_string_value(json_object_get(d, "dir"));
		env_name(json_string_value(json_object_get(d, "name")), en,
		    sizeof(en));
		asprintf(&set[i++], "%s=%s", en, dir != NULL ? dir : "");
	}
	json_object_foreach(env, k, v)
		asprintf(&set[i++], "%s=%s", k, json_string_value(v));
	set[i] = NULL;
	return set;
}

void
runner_strv_free(char **v)
{
	for (size_t i = 0; v != NULL && v[i] != NULL; i++)
		free(v[i]);
	free(v);
}

void
runner_out_append(struct runner_slot *s, struct runner_run *r, const char *p,
    size_t n)
{
	size_t room = s->wk->o.max_output > r->out.len ?
	    s->wk->o.max_output - r->out.len :
	    0;

	if (n > room) {
		r->truncated = 1;
		n = room;
	}
	buf_append(&r->out, p, n);
}

void
runner_not_started(struct runner_slot *s, struct runner_run *r, const char *fmt,
    ...)
{
	char why[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	r->start_failed = 1;
	snprintf(r->message, sizeof(r->message),
	    "cannot start closure %" PRIu64 " on %s: %s", r->id, s->wk->o.task,
	    why);
	log_info("%s: given back to dispatchd; this worker is unhealthy",
	    r->message);
}

/* ,"key":"text" with text as a JSON string. */
static void
put_string(struct buf *b, const char *key, const char *text)
{
	json_t *m = json_string(text);
	char *t = json_dumps(m, JSON_ENCODE_ANY);

	buf_printf(b, ",\"%s\":%s", key, t != NULL ? t : "\"\"");
	free(t);
	json_decref(m);
}

void
runner_result_json(struct runner_run *r, struct buf *b)
{
	size_t off =
	    r->err.len > RUNNER_ERR_TAIL ? r->err.len - RUNNER_ERR_TAIL : 0;

	buf_printf(b, "{\"id\":%" PRIu64 ",\"attempt\":%ld", r->id, r->attempt);
	if (r->aborted) {
		buf_puts(b, ",\"aborted\":true}");
		return;
	}
	if (r->start_failed) {
		/* Given back, and this worker says why it could not. */
		buf_puts(b, ",\"aborted\":true");
		put_string(b, "unhealthy", r->message);
		buf_puts(b, "}");
		return;
	}
	buf_printf(b, r->exited ? ",\"exit\":%d" : ",\"signal\":%d", r->code);
	if (r->out.len > 0) {
		buf_puts(b, ",\"stdout\":\"");
		text_base64_encode(b, r->out.data, r->out.len);
		buf_puts(b, "\"");
	}
	if (r->truncated)
		buf_puts(b, ",\"stdout_truncated\":true");
	if (r->err.len > off) {
		buf_puts(b, ",\"stderr_tail\":\"");
		text_base64_encode(b, r->err.data + off, r->err.len - off);
		buf_puts(b, "\"");
	}
	if (r->message[0] != '\0')
		put_string(b, "message", r->message);
	buf_puts(b, "}");
}
