/*
 * coord_text.c: coordd's cluster status as text.
 */
#include <stdio.h>
#include <string.h>

#include "coord_text.h"
#include "duration.h"

static const char *
str(const json_t *o, const char *key)
{
	const char *v = json_string_value(json_object_get(o, key));

	return v != NULL ? v : "-";
}

static json_int_t
num(const json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

/* One task's row: name, state, incarnation, heartbeat age, error. */
static int
task_row(const json_t *t, struct buf *out)
{
	json_t *age = json_object_get(t, "heartbeat_age_ms");
	json_t *e = json_object_get(t, "error");
	char d[32], ago[40] = "-", state[24];
	int rc;

	if (json_is_integer(age))
		snprintf(ago, sizeof(ago), "%s ago",
		    duration_format(json_integer_value(age), d, sizeof(d)));
	/* A recoverable task is marked, as its failures stay local. */
	snprintf(state, sizeof(state), "%s%s", str(t, "state"),
	    json_is_true(json_object_get(t, "recoverable")) ? "*" : "");
	rc = buf_printf(out, "%-16s %-14s %-16s %-10s", str(t, "task"), state,
	    str(t, "incarnation"), ago);
	if (json_is_object(e))
		rc |= buf_printf(out, " %s%s: %s",
		    strcmp(str(t, "state"), "error") == 0 ? "" : "(last) ",
		    str(e, "code"), str(e, "message"));
	return rc | buf_puts(out, "\n");
}

/* One barrier in flight: who arrived, its deadline, whom it waits for. */
static int
barrier_row(const json_t *b, struct buf *out)
{
	json_t *w = json_object_get(b, "tasks_waiting"), *n;
	char d[32];
	size_t k;
	int rc;

	rc = buf_printf(out,
	    "barrier %s: %" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT
	    " arrived, deadline in %s; waiting for",
	    str(b, "id"), num(b, "arrived"), num(b, "total"),
	    duration_format(num(b, "deadline_in_ms"), d, sizeof(d)));
	json_array_foreach(w, k, n)
		rc |= buf_printf(out, "%s %s", k == 0 ? "" : ",",
		    json_string_value(n));
	return rc | buf_puts(out, "\n");
}

int
coord_text_status(const json_t *status, struct buf *out)
{
	json_t *tasks = json_object_get(status, "tasks");
	json_t *bars = json_object_get(status, "barriers"), *t;
	char d[32];
	size_t i;
	int rc;

	rc = buf_printf(out,
	    "%" JSON_INTEGER_FORMAT "/%" JSON_INTEGER_FORMAT " tasks "
	    "connected, epoch %" JSON_INTEGER_FORMAT ", heartbeat timeout %s, "
	    "%" JSON_INTEGER_FORMAT " keys at revision %" JSON_INTEGER_FORMAT
	    "\n",
	    num(status, "connected"), num(status, "total"),
	    num(status, "epoch"),
	    duration_format(num(status, "heartbeat_timeout_ms"), d, sizeof(d)),
	    num(status, "keys"), num(status, "revision"));
	if (json_array_size(tasks) > 0)
		rc |= buf_printf(out, "%-16s %-14s %-16s %-10s %s\n", "TASK",
		    "STATE", "INCARNATION", "HEARTBEAT", "ERROR");
	json_array_foreach(tasks, i, t)
		rc |= task_row(t, out);
	json_array_foreach(bars, i, t)
		rc |= barrier_row(t, out);
	return rc != 0 ? -1 : 0;
}

int
coord_text_replicas(const json_t *replicas, int64_t now_ms, struct buf *out)
{
	json_t *list = json_object_get(replicas, "replicas"), *r;
	const char *leader = str(replicas, "leader");
	char d[32];
	size_t i;
	int rc;

	rc = buf_printf(out, "replicas under %s, %s leads\n",
	    str(replicas, "prefix"), leader[0] != '\0' ? leader : "none");
	rc |= buf_printf(out, "%-28s %-9s %-10s %-8s %s\n", "REPLICA", "ROLE",
	    "APPLIED", "BEHIND", "LEADS SINCE");
	json_array_foreach(list, i, r) {
		json_int_t since = num(r, "since");
		char ago[40] = "-";
		if (since > 0 && now_ms >= since)
			snprintf(ago, sizeof(ago), "%s ago",
			    duration_format(now_ms - since, d, sizeof(d)));
		rc |= buf_printf(out,
		    "%-28s %-9s %-10" JSON_INTEGER_FORMAT
		    " %-8" JSON_INTEGER_FORMAT " %s\n",
		    str(r, "address"), str(r, "role"), num(r, "applied"),
		    num(r, "behind"), ago);
	}
	return rc != 0 ? -1 : 0;
}
