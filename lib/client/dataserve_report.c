/*
 * dataserve_report.c: the thread that tells dispatchd, every REPORT_MS,
 * the ranges of DYNAMIC tasks that consumers acknowledged (the server
 * notes them), so that what a consumer delivered counts even if it dies
 * before it says so.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataserve_int.h"
#include "duration.h"
#include "log.h"
#include "vec.h"

#define REPORT_MS 250 /* between reports of acknowledged ranges */

/* Ranges a report could not deliver, to be sent again. Under t's lock. */
static void
acked_put_back(struct feed *t, const struct acked *v, size_t n)
{
	if (vec_grow(&t->acked, &t->capacked, t->nacked + n,
	        sizeof(*t->acked)) < 0)
		return;
	memcpy(t->acked + t->nacked, v, n * sizeof(*v));
	t->nacked += n;
}

/* Sends t's acknowledged ranges; those a dispatchd that cannot be reached
 * did not get are sent again. */
static void
report_acked(struct feed *t, struct dispatch_client *dc)
{
	json_t *list = json_array(), *body;
	struct acked *v;
	enum status st;
	size_t n;

	pthread_mutex_lock(&t->mu);
	v = t->acked;
	n = t->nacked;
	t->acked = NULL;
	t->nacked = t->capacked = 0;
	pthread_mutex_unlock(&t->mu);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(list,
		    json_pack("[I,I,I,I]", (json_int_t)v[i].seq,
		        (json_int_t)v[i].first, (json_int_t)v[i].end,
		        (json_int_t)v[i].total));
	body = json_pack("{s:o}", "delivered", list);
	st = dc_task_report(dc, t->ds->worker, t->inc, t->id, body,
	    duration_now_ms() + 5000);
	json_decref(body);
	if (st == ST_UNAVAILABLE || st == ST_DEADLINE_EXCEEDED) {
		pthread_mutex_lock(&t->mu);
		acked_put_back(t, v, n);
		pthread_mutex_unlock(&t->mu);
	} else if (st != ST_OK && st != ST_CANCELLED) {
		log_debug("task %" PRIu64 ": reporting what consumers took: %s",
		    t->id, dispatch_client_error(dc));
	}
	free(v);
}

/* The tasks with ranges to report, held; *n of them. Under ds->mu. */
static struct feed **
tasks_acked(struct dataserve *ds, size_t *n)
{
	struct feed **v = NULL;
	size_t cap = 0;

	*n = 0;
	for (struct feed *t = ds->tasks; t != NULL; t = t->next) {
		pthread_mutex_lock(&t->mu);
		int some = t->nacked > 0;
		pthread_mutex_unlock(&t->mu);
		if (!some)
			continue;
		if (vec_grow(&v, &cap, *n + 1, sizeof(*v)) < 0)
			break;
		atomic_fetch_add(&t->refs, 1);
		v[(*n)++] = t;
	}
	return v;
}

void *
dataserve_report_main(void *arg)
{
	struct dataserve *ds = arg;
	struct dispatch_client *dc;
	char err[512];

	if ((dc = dispatch_client_new(ds->dispatcher, err, sizeof(err))) ==
	    NULL) {
		log_info("cannot report what consumers took: %s", err);
		return NULL;
	}
	dispatch_client_set_cancel(dc, ds->report_cancel[0]);
	pthread_mutex_lock(&ds->mu);
	while (!ds->stopping) {
		struct feed **v;
		size_t n;
		dataserve_cond_wait_until(&ds->report, &ds->mu,
		    duration_now_ms() + REPORT_MS);
		v = tasks_acked(ds, &n);
		pthread_mutex_unlock(&ds->mu);
		for (size_t i = 0; i < n; i++) {
			report_acked(v[i], dc);
			dataserve_feed_unref(v[i]);
		}
		free(v);
		pthread_mutex_lock(&ds->mu);
	}
	pthread_mutex_unlock(&ds->mu);
	dispatch_client_free(dc);
	return NULL;
}

/* Sets ds stopping: no more tasks, connections or reports. */
void
dataserve_report_stop(struct dataserve *ds)
{
	char c = 1;

	pthread_mutex_lock(&ds->mu);
	ds->stopping = 1;
	pthread_cond_broadcast(&ds->report);
	pthread_mutex_unlock(&ds->mu);
	(void)!write(ds->report_cancel[1], &c, 1);
	pthread_join(ds->report_th, NULL);
}
