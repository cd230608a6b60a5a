/*
 * dataread.c: a job's consumer. The calling thread heartbeats; a thread
 * per task reads that task's elements from its worker (or one thread reads
 * the rounds of a round-robin job). One lock guards the output, another
 * the bookkeeping the heartbeats report, so that a reader downstream that
 * stops reading never stops the heartbeats that keep the job client.
 *
 * Its files, each using only those listed before it (dataread_int.h holds
 * what they share):
 *   dataread_conn.c  connections to workers, requests, replies, chunks
 *   dataread_core.c  the failure, pokes, ranges to report, the output
 *   dataread_source.c  a source (a task read): its thread, its elements
 *                      read and written
 *   dataread_rr.c    the round-robin reader
 *   dataread_job.c   the job client: opened, heartbeats, released
 *   dataread.c       the heartbeat loop and the end of the read
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataread_int.h"
#include "duration.h"
#include "log.h"
#include "token.h"

/* How long one heartbeat tries before the loop looks around again. */
#define HEARTBEAT_CALL_MS 5000
/* At the end: how long the threads may take to stop. */
#define JOIN_MS 1000

/* Whether the read is over, and how: 1 with *st and err, or 0. */
static int
read_over(struct reader *r, enum status *st, char *err, size_t errlen)
{
	int over = 1;

	pthread_mutex_lock(&r->mu);
	*st = ST_OK;
	if (r->fail != ST_OK) {
		*st = r->fail;
		snprintf(err, errlen, "%s", r->failmsg);
	} else if (r->closed) {
		log_debug("the output was closed: the read ends");
		if (!r->o->close_ok) {
			*st = ST_CANCELLED;
			snprintf(err, errlen,
			    "the output was closed by its reader after %" PRIu64
			    " elements were written to it; those it did not read "
			    "count as delivered (--close-ok when that is expected)",
			    __atomic_load_n(&r->written, __ATOMIC_RELAXED));
		}
	} else if (r->o->consumers > 0) {
		over = r->rr_done;
	} else {
		over = r->finished;
		for (struct source *t = r->tasks; t != NULL; t = t->next)
			over &= !t->running;
	}
	pthread_mutex_unlock(&r->mu);
	return over;
}

/*
 * Waits for the next heartbeat's time or a poke; 1 when stop_fd became
 * readable. Pokes come at most once per reply or per split's end.
 */
static int
wait_turn(struct reader *r, int64_t last)
{
	struct pollfd p[2] = {{.fd = r->wake[0], .events = POLLIN},
	    {.fd = r->o->stop_fd, .events = POLLIN}};
	int64_t now = duration_now_ms(), due = last + r->o->refresh_ms;
	char drain[64];

	if (poll(p, 2, due > now ? (int)(due - now) : 0) > 0 &&
	    (p[0].revents & POLLIN) != 0)
		while (read(r->wake[0], drain, sizeof(drain)) > 0)
			;
	return (p[1].revents & POLLIN) != 0;
}

static int
unreachable(enum status st)
{
	return st == ST_UNAVAILABLE || st == ST_DEADLINE_EXCEEDED;
}

/* The progress line: what was written, how fast since the last line. */
struct shown {
	int64_t at, t0;
	uint64_t bytes;
	int any;
};

static void
show_progress(struct reader *r, struct shown *s, int64_t now, int last)
{
	uint64_t n = __atomic_load_n(&r->written, __ATOMIC_RELAXED),
	         b = __atomic_load_n(&r->written_bytes, __ATOMIC_RELAXED);
	int64_t splits, done, dt;
	double mib = (double)b / (1 << 20), rate;

	if (!r->o->progress || (!last && now < s->at + 1000))
		return;
	/* The last line's rate is the whole read's. */
	dt = last ? now - s->t0 : now - s->at;
	rate = dt > 0 ? (double)(last ? b : b - s->bytes) / (1 << 20) /
	        ((double)dt / 1000.0) :
	                0.0;
	pthread_mutex_lock(&r->mu);
	splits = r->splits;
	done = r->splits_done;
	pthread_mutex_unlock(&r->mu);
	fprintf(stderr,
	    "\r%s: read: %" PRIu64 " elements, %.1f MiB, %.1f MiB/s",
	    log_prog(), n, mib, rate);
	if (splits >= 0)
		fprintf(stderr, ", %" PRId64 "/%" PRId64 " splits", done,
		    splits);
	fputs(last ? "\033[K\n" : "\033[K", stderr);
	s->at = now;
	s->bytes = b;
	s->any = 1;
}

/* Heartbeats until the read is over. */
static enum status
run(struct reader *r, struct shown *shown, char *err, size_t errlen)
{
	const struct dataread_opts *o = r->o;
	int64_t last_ok = duration_now_ms();
	enum status st;

	for (;;) {
		int64_t now = duration_now_ms(),
		        deadline = now + HEARTBEAT_CALL_MS;
		if (o->timeout_ms >= 0 && last_ok + o->timeout_ms < deadline)
			deadline = last_ok + o->timeout_ms;
		if (read_over(r, &st, err, errlen))
			return st;
		st = dataread_heartbeat(r, deadline, err, errlen);
		now = duration_now_ms();
		if (st == ST_OK)
			last_ok = now;
		else if (!unreachable(st))
			return st;
		else if (o->timeout_ms >= 0 && now >= last_ok + o->timeout_ms)
			return ST_UNAVAILABLE; /* err says why */
		show_progress(r, shown, now, 0);
		if (read_over(r, &st, err, errlen))
			return st;
		if (wait_turn(r, now)) {
			snprintf(err, errlen, "stopped by a signal");
			return ST_CANCELLED;
		}
	}
}

/*
 * Stops every thread, reports what they wrote, and waits for them a
 * while: one blocked writing to a reader that neither reads nor goes away
 * is left to the process's end. The report comes before the threads
 * leave their workers, so that they acknowledge what they wrote rather
 * than give it back for another reader of the job to write again. 1 when
 * all are gone.
 */
static int
stop_threads(struct reader *r, enum status st, int64_t deadline)
{
	struct timespec ts;
	int all = 1;

	pthread_mutex_lock(&r->mu);
	r->stopping = 1;
	for (struct source *t = r->tasks; t != NULL; t = t->next)
		if (t->fd >= 0 && t->io)
			shutdown(t->fd, SHUT_RDWR);
	if (r->rr_fd >= 0)
		shutdown(r->rr_fd, SHUT_RDWR);
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	dataread_report_last(r, st, deadline);
	ts = duration_realtime_in(JOIN_MS);
	for (struct source *t = r->tasks; t != NULL; t = t->next)
		if (pthread_timedjoin_np(t->thread, NULL, &ts) != 0)
			all = 0;
	if (r->rr_started && pthread_timedjoin_np(r->rr_thread, NULL, &ts) != 0)
		all = 0;
	return all;
}

static void
reader_free(struct reader *r)
{
	while (r->tasks != NULL) {
		struct source *t = r->tasks;
		r->tasks = t->next;
		free(t);
	}
	free(r->pend.v);
	free(r->lost);
	free(r->rr);
	json_decref(r->start);
	close(r->wake[0]);
	close(r->wake[1]);
	pthread_mutex_destroy(&r->mu);
	pthread_mutex_destroy(&r->out_mu);
	pthread_cond_destroy(&r->cv);
	free(r);
}

enum status
dataread_run(struct dispatch_client *dc, const struct dataread_opts *o,
    char *err, size_t errlen)
{
	struct reader *r = calloc(1, sizeof(*r));
	struct shown shown = {0, 0, 0, 0};
	struct stat sb;
	enum status st;
	int64_t deadline;
	int all, closed;

	if (r == NULL || token_random(r->id, sizeof(r->id)) < 0 ||
	    pipe2(r->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		free(r);
		snprintf(err, errlen, "out of resources: %s", strerror(errno));
		return ST_RESOURCE_EXHAUSTED;
	}
	r->o = o;
	r->dc = dc;
	r->block = -1;
	r->rr_fd = -1;
	r->splits = r->splits_done = -1;
	pthread_mutex_init(&r->mu, NULL);
	pthread_mutex_init(&r->out_mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	/* A deep pipe lets the reader downstream drain one reply while the
	 * next one arrives; not a pipe, or not allowed: no matter. */
	fcntl(o->out, F_SETPIPE_SZ, 1 << 20);
	/* A pipe or a file: payloads go out of the stage by splice(2). */
	if (fstat(o->out, &sb) == 0 &&
	    (S_ISFIFO(sb.st_mode) || S_ISREG(sb.st_mode)))
		r->out_splice = 1;
	r->stage_fds = dataread_stage_budget();
	dispatch_client_set_cancel(dc, o->stop_fd);
	if ((st = dataread_job_open(r, err, errlen)) != ST_OK) {
		/* Refused after the job client was made: it goes. */
		if (r->client > 0)
			dataread_farewell(r, st,
			    duration_now_ms() + FAREWELL_MS);
		dispatch_client_set_cancel(dc, -1);
		reader_free(r);
		return st;
	}
	/* A failed write ends the read as any other would. */
	if (o->positions)
		(void)dataread_write_start(r);
	if (o->consumers > 0) {
		if (pthread_create(&r->rr_thread, NULL, dataread_rr_main, r) ==
		    0)
			r->rr_started = 1;
		else
			dataread_fail_locked(r, ST_RESOURCE_EXHAUSTED,
			    "cannot start a thread: %s", strerror(errno));
	}
	shown.at = shown.t0 = duration_now_ms();
	st = run(r, &shown, err, errlen);
	/* The whole read's figures, the line ended. */
	show_progress(r, &shown, duration_now_ms(), 1);
	deadline = duration_now_ms() + FAREWELL_MS;
	/* Threads still blocked on the output keep r: the process ends. */
	all = stop_threads(r, st, deadline);
	pthread_mutex_lock(&r->mu);
	closed = r->closed;
	pthread_mutex_unlock(&r->mu);
	/* The end of the data, which a consumer tells from a read that was
	 * cut short. */
	if (st == ST_OK && o->positions && !closed &&
	    dataread_write_record(r, CHUNK_END, NULL, 0) < 0)
		read_over(r, &st, err, errlen);
	/* What the threads wrote since the last report. */
	dataread_farewell(r, st, deadline);
	if (all)
		reader_free(r);
	return st;
}
