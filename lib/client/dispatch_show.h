/*
 * dispatch_show.h: dispatchd's replies as dispatchctl shows them: tables
 * and fields for a person, or with json the reply as it came, compact on
 * one line. Each writes to the stream it is given; dispatchctl(1) says
 * what each looks like.
 */
#ifndef MUSTER_DISPATCH_SHOW_H
#define MUSTER_DISPATCH_SHOW_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

/* One JSON value on a line. */
void dispatch_show_json(FILE *f, json_t *j);

/* A reply: dispatch_show_json's line with json, else the tables below. */
typedef void dispatch_show_fn(FILE *f, json_t *reply, int json);

/* dc_status's reply: a table of queues, and one of workers. */
void dispatch_show_status(FILE *f, json_t *status, int json);
/* dc_resources': a name a line (with json, an object a line). */
void dispatch_show_resources(FILE *f, json_t *list, int json);
/* dc_resource's: its state on each worker, a line each. */
void dispatch_show_resource(FILE *f, json_t *res, int json);
/* dc_dataset_add's: the dataset's id. */
void dispatch_show_added(FILE *f, json_t *dataset, int json);
/* dc_datasets' as a table, and dc_dataset's as "field: value" lines. */
void dispatch_show_datasets(FILE *f, json_t *list, int json);
void dispatch_show_dataset(FILE *f, json_t *dataset, int json);
/* dc_jobs' as a table, and dc_job's as fields and its tasks. */
void dispatch_show_jobs(FILE *f, json_t *list, int json);
void dispatch_show_job(FILE *f, json_t *job, int json);

/*
 * A queue's closures as dc_closures' pages come: a table under one
 * head, or with json one object, {"closures":[...]}, which
 * dispatch_show_list_end closes (also after a page that did not come).
 */
struct dispatch_show_list {
	FILE *f;
	int json;
	int begun; /* the head is written */
	size_t n;  /* closures written */
};
void dispatch_show_list_page(struct dispatch_show_list *l, json_t *page);
void dispatch_show_list_end(struct dispatch_show_list *l);

/*
 * A queue's error, dispatchd's error body naming the closure that failed:
 * with json the body on out; its message and the closure's stderr tail
 * on err.
 */
void dispatch_show_failed(FILE *out, FILE *err, json_t *errbody, int json);
/* A closure's stdout, its bytes as they were: 0, or -1 (errno). */
int dispatch_show_stdout(FILE *f, json_t *closure);

/* The exit code a closure's end stands for. */
int dispatch_show_code(json_t *closure);
/*
 * A closure's end as text: its stdout's bytes on f, and on stderr how it
 * ended when it did not end of itself. Its exit code.
 */
int dispatch_show_end(FILE *f, json_t *closure, uint64_t id);
/*
 * A queue's counts while join waits, for a terminal: one line on stderr,
 * written over in place each time ("queue default: 120/400 done, 2
 * failed, 8 running, 270 queued"); dispatch_show_progress_end ends it.
 */
struct dispatch_progress {
	const char *queue;
	int shown;
};
void dispatch_show_progress(json_t *counts, void *progress);
void dispatch_show_progress_end(struct dispatch_progress *p);

#endif
