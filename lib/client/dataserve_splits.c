/*
 * dataserve_splits.c: a task's thread, and the splits it reads: in the
 * static modes the dataset's, those this worker's mode gives it, epoch
 * after epoch; in DYNAMIC ones leased from dispatchd, --lease of them
 * ahead. Each is read by dataserve_reader.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataserve_int.h"
#include "duration.h"
#include "log.h"
#include "shardmode.h"
#include "splitorder.h"

/* The static modes: the splits this worker's mode gives it, epoch after
 * epoch. */

/* The dataset's splits, one per line, cut in place in text; *n of them. */
static char **
fetch_splits(struct rd *rd, struct buf *text, size_t *n)
{
	struct feed *t = rd->t;
	char **v = NULL, *p, *msg;
	enum status st;

	st = dc_splits(rd->dc, t->dataset, HTTP_NO_DEADLINE, text);
	if (st == ST_CANCELLED)
		return NULL;
	*n = 0;
	for (p = text->data; st == ST_OK && p != NULL && *p != '\0'; (*n)++)
		if ((p = strchr(p, '\n')) != NULL)
			p++;
	if (st == ST_OK && *n > 0 && (v = calloc(*n, sizeof(*v))) != NULL) {
		p = text->data;
		for (size_t i = 0; i < *n; i++) {
			v[i] = p;
			if ((p = strchr(p, '\n')) != NULL)
				*p++ = '\0';
		}
		return v;
	}
	if (asprintf(&msg, "cannot read the splits of dataset %s: %s",
	        t->dataset,
	        st != ST_OK ? dispatch_client_error(rd->dc) :
	            *n == 0 ? "there are none" :
	                      strerror(ENOMEM)) >= 0) {
		dataserve_feed_fail(rd, msg, 1);
		free(msg);
	}
	return NULL;
}

static void
run_static(struct rd *rd)
{
	struct feed *t = rd->t;
	struct buf text = {0};
	uint32_t *order = NULL;
	char **splits;
	size_t n;

	if ((splits = fetch_splits(rd, &text, &n)) == NULL)
		goto out;
	if ((order = calloc(n, sizeof(*order))) == NULL) {
		char msg[] = "out of memory";
		dataserve_feed_fail(rd, msg, 1);
		goto out;
	}
	for (uint64_t ep = 0; t->repeat == 0 || ep < t->repeat; ep++) {
		size_t nread = 0;
		split_order(t->seed, ep, order, n);
		rd->ee = 0;
		for (size_t p = 0; p < n; p++) {
			struct split sp = {splits[order[p]], order[p], ep,
			    ep * n + p, NULL};
			if (t->mode == SHARD_FILE &&
			    p % (size_t)t->shard_count !=
			        (size_t)t->shard_index)
				continue;
			if (dataserve_read_split(rd, &sp) < 0)
				goto out;
			nread++;
		}
		/* A shard without a split would repeat nothing for ever. */
		if (nread == 0)
			break;
	}
	dataserve_feed_finish(rd, 1);
out:
	free(order);
	free(splits);
	buf_free(&text);
}

/* DYNAMIC: splits leased from dispatchd, --lease of them ahead. */

/* Leases more splits into waiting; *end once the job is finished. 0, or
 * -1 when the task is to stop. */
static int
lease(struct rd *rd, json_t *waiting, int *end)
{
	struct feed *t = rd->t;
	struct dataserve *ds = t->ds;
	size_t have = json_array_size(waiting);
	int64_t hb = t->hb_timeout, wait = have > 0 ? 0 : hb / 2;
	char *msg;
	enum status st;
	json_t *reply;

	/* A request whose reply is lost is sent again with the same id
	 * (below): dispatchd answers it with the same splits. */
	st = dc_lease(rd->dc, ds->worker, t->inc, t->id,
	    (long)((size_t)ds->c.lease - have), rd->lease_id, wait,
	    duration_now_ms() + hb + 5000, &reply);
	if (st == ST_OK) {
		json_t *v;
		size_t i;
		json_array_foreach(json_object_get(reply, "splits"), i, v)
			json_array_append(waiting, v);
		*end = json_is_true(json_object_get(reply, "end"));
		rd->lease_id++;
		json_decref(reply);
		return 0;
	}
	switch (st) {
	case ST_CANCELLED: return -1;
	case ST_FAILED_PRECONDITION:
		/* The job failed: dispatchd knows; consumers learn it after
		 * what is buffered. */
		if (asprintf(&msg, "%s", dispatch_client_error(rd->dc)) >= 0) {
			dataserve_feed_fail(rd, msg, 0);
			free(msg);
		}
		return -1;
	case ST_NOT_FOUND:
	case ST_ABORTED:
		/* No longer this worker's: it leaves the task list soon. */
		log_debug("task %" PRIu64 ": %s", t->id,
		    dispatch_client_error(rd->dc));
		return -1;
	default:
		log_debug("task %" PRIu64 ": leasing splits: %s", t->id,
		    dispatch_client_error(rd->dc));
		dataserve_rd_nap(rd, 1000);
		return 0;
	}
}

/* A leased split's object as a split. */
static int
split_of(json_t *o, struct split *sp)
{
	json_t *seq = json_object_get(o, "seq");
	json_t *text = json_object_get(o, "split");

	if (!json_is_integer(seq) || !json_is_string(text))
		return -1;
	sp->text = json_string_value(text);
	sp->seq = (uint64_t)json_integer_value(seq);
	sp->index = (uint64_t)dataserve_int_field(o, "index", 0);
	sp->epoch = (uint64_t)dataserve_int_field(o, "epoch", 0);
	sp->skip = json_object_get(o, "skip");
	return 0;
}

static void
run_dynamic(struct rd *rd)
{
	struct feed *t = rd->t;
	size_t low = ((size_t)t->ds->c.lease + 1) / 2;
	json_t *waiting = json_array(), *o;
	struct split sp;
	int end = 0, rc;

	for (;;) {
		if (!end && json_array_size(waiting) < low) {
			size_t had = json_array_size(waiting);
			int64_t start = duration_now_ms();
			if (lease(rd, waiting, &end) < 0)
				break;
			/* An empty answer to a long poll at once: do not spin
			 * on a dispatchd that does not wait. */
			if (had == 0 && json_array_size(waiting) == 0 && !end &&
			    duration_now_ms() - start < 100)
				dataserve_rd_nap(rd, 100);
		}
		if (json_array_size(waiting) == 0) {
			if (end) {
				dataserve_feed_finish(rd, 0);
				break;
			}
			continue;
		}
		o = json_incref(json_array_get(waiting, 0));
		json_array_remove(waiting, 0);
		if (split_of(o, &sp) < 0) {
			char msg[] =
			    "dispatchd leased a split without seq or text";
			dataserve_feed_fail(rd, msg, 1);
			json_decref(o);
			break;
		}
		rc = dataserve_read_split(rd, &sp);
		json_decref(o);
		if (rc < 0)
			break;
	}
	json_decref(waiting);
}

void *
dataserve_feed_main(void *arg)
{
	struct feed *t = arg;
	struct dataserve *ds = t->ds;
	struct rd rd = {.t = t, .bsize = t->block, .lease_id = 1};
	char err[512];

	log_debug("task %" PRIu64 " of job %s: %s, dataset %s", t->id, t->job,
	    t->bad[0] == '\0' ? shard_mode_name(t->mode) : "?", t->dataset);
	if ((rd.dc = dispatch_client_new(ds->dispatcher, err, sizeof(err))) ==
	    NULL) {
		dataserve_feed_fail(&rd, err, 0);
		goto out;
	}
	dispatch_client_set_cancel(rd.dc, t->cancel[0]);
	if (t->bad[0] != '\0')
		dataserve_feed_fail(&rd, t->bad, 1);
	else if (t->mode == SHARD_DYNAMIC)
		run_dynamic(&rd);
	else
		run_static(&rd);
out:
	pthread_mutex_lock(&t->mu);
	t->reading = 0;
	dataserve_spares_free(t);
	dataserve_block_put(t, rd.blk);
	pthread_mutex_unlock(&t->mu);
	dispatch_client_free(rd.dc);
	free(rd.skip);
	buf_free(&rd.tail);
	dataserve_feed_unref(t);
	dataserve_thread_done(ds);
	return NULL;
}
