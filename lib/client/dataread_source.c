/*
 * dataread_source.c: a task's thread, which reads the task's elements from
 * its worker over a connection of its own, writes them out, records them
 * for the heartbeats, and acknowledges them to the worker with its next
 * request. Its requests name the consumer and are numbered (datawire.h),
 * so that the worker holds a reply for the consumer, not the connection:
 * a request sent again after its connection broke gets the same reply.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "dataread_int.h"
#include "duration.h"
#include "log.h"
#include "vec.h"

/* How long a worker holds a request for elements when it has none. */
#define ELEMENTS_WAIT_MS 1000
/*
 * A consumer with a split's end unreported that waits this long for its
 * next reply is idle: it reports at once, since that report may be the
 * one that finishes the job.
 */
#define IDLE_MS 2
/*
 * How long the last acknowledgement to a worker may take. A worker
 * answers it at once, and a reply left with it waits for its
 * --request-timeout: a busy machine must not make us give up first.
 */
#define ACK_MS 5000
/* Room for a reply's chunk headers and HTTP header beyond max bytes. */
#define REPLY_SLACK (256u << 10)

/* Waits ms, or less when the task is told to stop. */
static void
source_pause(struct source *t, int64_t ms)
{
	struct timespec ts = duration_realtime_in(ms);

	pthread_mutex_lock(&t->r->mu);
	if (!t->stop && !t->r->stopping)
		pthread_cond_timedwait(&t->r->cv, &t->r->mu, &ts);
	pthread_mutex_unlock(&t->r->mu);
}

static int
source_stopping(struct source *t)
{
	int s;

	pthread_mutex_lock(&t->r->mu);
	s = t->stop || t->r->stopping;
	pthread_mutex_unlock(&t->r->mu);
	return s;
}

/* Publishes the task's connection (-1: none), so that it can be cut. */
static void
source_set_fd(struct source *t, int fd)
{
	pthread_mutex_lock(&t->r->mu);
	t->fd = fd;
	if (fd >= 0 && (t->stop || t->r->stopping)) {
		shutdown(fd, SHUT_RDWR);
		t->cut = 1;
	}
	pthread_mutex_unlock(&t->r->mu);
}

/* Closes the task's connection, no longer published: a stop never cuts
 * a descriptor that has since been given to something else. */
static void
source_close(struct source *t, struct wconn *wc)
{
	pthread_mutex_lock(&t->r->mu);
	t->fd = -1;
	t->cut = 0;
	dataread_conn_close(wc);
	pthread_mutex_unlock(&t->r->mu);
}

/* Whether the stop shut the task's connection down: its last reply may
 * have come whole all the same, but nothing more goes through it. */
static int
source_cut(struct source *t)
{
	int cut;

	pthread_mutex_lock(&t->r->mu);
	cut = t->cut;
	pthread_mutex_unlock(&t->r->mu);
	return cut;
}

/*
 * Whether h is a chunk written already that its worker sends again: a
 * connection broke before the next request acknowledged it, and a worker
 * that holds replies for connections, not consumers, put it back. Each is
 * taken once.
 */
static int
sent_again(struct source *t, const struct chunk_hdr *h)
{
	for (size_t i = 0; i < t->nagain; i++)
		if (t->again[i].seq == h->seq &&
		    t->again[i].first == h->first &&
		    t->again[i].count == h->count) {
			t->again[i] = t->again[--t->nagain];
			return 1;
		}
	return 0;
}

/* Marks the start (on 1) or the end of a request on the task's
 * connection; -1 and nothing marked when the task is to stop. */
static int
source_io(struct source *t, int on)
{
	int stop;

	pthread_mutex_lock(&t->r->mu);
	stop = on && (t->stop || t->r->stopping);
	if (!stop)
		t->io = on;
	pthread_mutex_unlock(&t->r->mu);
	return stop ? -1 : 0;
}

/* A new connection: the last reply may not have been acknowledged. */
static int
expect_again(struct source *t)
{
	if (vec_grow(&t->again, &t->capagain, t->nagain + t->nprev,
	        sizeof(*t->again)) < 0)
		return -1;
	memcpy(t->again + t->nagain, t->prev, t->nprev * sizeof(*t->prev));
	t->nagain += t->nprev;
	t->nprev = 0;
	return 0;
}

/*
 * Splits a reply into the payloads to write and the chunks to report.
 * A chunk the worker sends again because the connection that carried it
 * broke before our acknowledgement reached it was written already: it is
 * dropped, which makes a reconnection to a live worker exactly once too.
 * STEP_AGAIN, STEP_END, or STEP_FAIL (a failed task, a malformed reply).
 */
static enum step
source_parse(struct source *t, const struct reply *rp)
{
	struct reader *r = t->r;
	struct chunk_hdr h;
	const char *p;
	size_t off = 0;
	int rc;

	t->niov = t->ncur = 0;
	while ((rc = dw_chunk_next(rp->body, rp->len, &off, &h, &p)) == 1) {
		if (h.type != CHUNK_DATA) {
			if (h.type == CHUNK_END)
				return STEP_END;
			dataread_fail(r, ST_INTERNAL, "%.*s", (int)h.len, p);
			return STEP_FAIL;
		}
		if (vec_grow(&t->cur, &t->capcur, t->ncur + 1,
		        sizeof(*t->cur)) < 0 ||
		    vec_grow(&t->iov, &t->capiov, t->niov + 2,
		        sizeof(*t->iov)) < 0) {
			dataread_fail(r, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
			return STEP_FAIL;
		}
		t->cur[t->ncur] = (struct chunk_id){h.seq, h.first, h.count,
		    h.flags, t->nagain > 0 && sent_again(t, &h)};
		if (t->cur[t->ncur++].dup)
			continue;
		/* A positioned stream carries the chunk's header as the
		 * worker sent it, which says which elements follow. */
		if (r->o->positions)
			t->iov[t->niov++] =
			    (struct iovec){(void *)(p - sizeof(h)), sizeof(h)};
		if (h.len > 0)
			t->iov[t->niov++] =
			    (struct iovec){(void *)p, (size_t)h.len};
	}
	return rc < 0 ? dataread_malformed(r, t->id, t->addr) : STEP_AGAIN;
}

/* Notes chunk h of the reply as t->cur's next, dropped when sent again.
 * 0, or -1 (out of memory: the read fails). */
static int
note_chunk(struct source *t, const struct chunk_hdr *h)
{
	if (vec_grow(&t->cur, &t->capcur, t->ncur + 1, sizeof(*t->cur)) < 0) {
		dataread_fail(t->r, ST_RESOURCE_EXHAUSTED, "out of memory");
		return -1;
	}
	t->cur[t->ncur] = (struct chunk_id){h->seq, h->first, h->count,
	    h->flags, t->nagain > 0 && sent_again(t, h)};
	t->ncur++;
	return 0;
}

/*
 * source_parse for a reply received through the stage: its chunks into
 * t->cur, up to an end or an error. Their pieces are written by
 * write_staged. STEP_AGAIN, STEP_END or STEP_FAIL.
 */
static enum step
source_parse_staged(struct source *t)
{
	struct chunk_hdr h;

	t->ncur = 0;
	for (size_t i = 0; i < t->npc; i++) {
		const struct piece *p = &t->pc[i];
		if (!p->head)
			continue;
		/* Checked as it came (dataread_recv_staged). */
		(void)dw_chunk_head(t->buf + p->off, UINT32_MAX, &h);
		if (h.type == CHUNK_END)
			return STEP_END;
		if (h.type != CHUNK_DATA) {
			const struct piece *m =
			    i + 1 < t->npc && t->pc[i + 1].chunk == p->chunk ?
			    &t->pc[i + 1] :
			    NULL;
			dataread_fail(t->r, ST_INTERNAL, "%.*s",
			    m != NULL ? (int)m->len : 0,
			    m != NULL ? t->buf + m->off : "");
			return STEP_FAIL;
		}
		if (note_chunk(t, &h) < 0)
			return STEP_FAIL;
	}
	return STEP_AGAIN;
}

/*
 * Writes the pieces of the chunks source_parse_staged took, in order:
 * from memory in one writev where they follow each other, from the stage
 * without a copy; the stage's pieces of chunks sent again are dropped.
 * Under r->out_mu. 0, or -1 (as dataread_write_out).
 */
static int
write_staged(struct source *t)
{
	struct reader *r = t->r;
	size_t n = 0;

	for (size_t i = 0; i < t->npc; i++) {
		const struct piece *p = &t->pc[i];
		const struct chunk_id *c =
		    p->chunk < t->ncur ? &t->cur[p->chunk] : NULL;
		int keep =
		    c != NULL && !c->dup && (!p->head || r->o->positions);

		if (!p->staged) {
			if (!keep)
				continue;
			if (vec_grow(&t->iov, &t->capiov, n + 1,
			        sizeof(*t->iov)) < 0) {
				dataread_fail(r, ST_RESOURCE_EXHAUSTED,
				    "out of memory");
				return -1;
			}
			t->iov[n++] = (struct iovec){t->buf + p->off, p->len};
			continue;
		}
		if (c == NULL)
			break; /* past an end or an error: dropped with the rest */
		if (n > 0 && dataread_write_out(r, t->iov, n) < 0)
			return -1;
		n = 0;
		if (dataread_write_staged(r, &t->stage, p->len, keep) < 0)
			return -1;
	}
	return n > 0 ? dataread_write_out(r, t->iov, n) : 0;
}

/* Records the chunks of the reply just written as delivered. */
static void
source_delivered(struct source *t)
{
	struct reader *r = t->r;

	if (!r->dynamic)
		return;
	pthread_mutex_lock(&r->mu);
	for (size_t i = 0; i < t->ncur; i++) {
		const struct chunk_id *c = &t->cur[i];
		struct range g = {(int64_t)c->seq, (int64_t)c->first,
		    (int64_t)(c->first + c->count),
		    c->flags & CHUNK_SPLIT_END ?
		        (int64_t)(c->first + c->count) :
		        -1};
		if (!c->dup)
			dataread_note_range_locked(r, &g);
	}
	t->mark = ++r->recorded;
	pthread_mutex_unlock(&r->mu);
}

/*
 * Writes a reply's elements (and those before an end or an error), then
 * records them; they stay held by the worker until the next request.
 */
static enum step
source_take(struct source *t, const struct reply *rp)
{
	struct reader *r = t->r;
	int staged = rp->body == NULL;
	enum step s = staged ? source_parse_staged(t) : source_parse(t, rp);
	struct chunk_id *swap;
	size_t cap;
	int rc;

	pthread_mutex_lock(&r->out_mu);
	rc = staged ? write_staged(t) : dataread_write_out(r, t->iov, t->niov);
	if (rc == 0) {
		for (size_t i = 0; i < t->ncur; i++)
			__atomic_add_fetch(&r->written,
			    t->cur[i].dup ? 0 : t->cur[i].count,
			    __ATOMIC_RELAXED);
		source_delivered(t);
	}
	pthread_mutex_unlock(&r->out_mu);
	/* What a failed write or an end left in the stage goes. */
	if (staged)
		dataread_stage_done(&t->stage);
	/* The request acknowledged the previous reply; this one, not
	 * written, goes back (source_ack): none to ack. */
	if (rc < 0) {
		t->nprev = 0;
		t->unwritten = 1;
		return STEP_FAIL;
	}
	swap = t->prev;
	t->prev = t->cur;
	t->cur = swap;
	cap = t->capprev;
	t->capprev = t->capcur;
	t->capcur = cap;
	t->nprev = t->ncur;
	return s;
}

/* A consumer idle with a split's end unreported reports it now. */
static void
idle_report(struct source *t, struct wconn *wc)
{
	struct pollfd p = {.fd = wc->fd, .events = POLLIN};
	int pending;

	pthread_mutex_lock(&t->r->mu);
	pending = t->r->split_end;
	pthread_mutex_unlock(&t->r->mu);
	if (pending && (wc->tls == NULL || tls_pending(wc->tls) == 0) &&
	    poll(&p, 1, IDLE_MS) == 0)
		dataread_poke(t->r);
}

/* Whether the last reply's deliveries may be acknowledged to its worker
 * (see await_report). Under r->mu. */
static int
ack_allowed_locked(const struct source *t)
{
	const struct reader *r = t->r;

	return r->o->job == NULL || !r->dynamic || r->reported >= t->mark;
}

/*
 * In a job shared by name, waits until dispatchd has heard of the last
 * reply's deliveries before the next request acknowledges them: a reader
 * of the job killed between the two would otherwise take to its grave
 * elements that the worker no longer holds and dispatchd never hears of,
 * and the job would never end. (A job of our own has no other reader,
 * and goes with us.) 0, or -1 when the task is to stop.
 */
static int
await_report(struct source *t)
{
	struct reader *r = t->r;
	int stop;

	pthread_mutex_lock(&r->mu);
	if (!ack_allowed_locked(t))
		dataread_poke(r);
	while (!ack_allowed_locked(t) && !t->stop && !r->stopping)
		pthread_cond_wait(&r->cv, &r->mu);
	stop = t->stop || r->stopping;
	pthread_mutex_unlock(&r->mu);
	return stop ? -1 : 0;
}

/* Our request numbered n of task t: for its elements, up to max bytes (0:
 * none, we leave), or giving back its reply to our request n. */
static void
request_path(const struct source *t, enum dw_kind kind, size_t max, uint64_t n,
    char *path, size_t size)
{
	struct dw_request w = {.kind = kind,
	    .task = (uint64_t)t->id,
	    .has_max = 1,
	    .max = max,
	    .has_wait = max > 0,
	    .wait_ms = ELEMENTS_WAIT_MS,
	    .has_id = 1,
	    .request = n};

	memcpy(w.consumer_id, t->r->id, sizeof(t->r->id));
	dw_request_path(&w, path, size);
}

/* One request for elements and its reply. */
static enum step
source_step(struct source *t, struct wconn *wc)
{
	struct reader *r = t->r;
	char path[256];
	struct reply rp;
	enum step s;
	int rc, staged;

	if (await_report(t) < 0)
		return STEP_RETRY;

	if (wc->fd < 0) {
		char err[512];
		if ((rc = dataread_conn_open(t->addr,
		         ELEMENTS_WAIT_MS + IO_GRACE_MS, wc, err,
		         sizeof(err))) == -2) {
			dataread_fail(r, ST_UNAVAILABLE,
			    "task %" PRId64 ": worker %s: %s", t->id, t->addr,
			    err);
			return STEP_FAIL;
		}
		if (rc < 0) {
			log_debug("task %" PRId64 ": cannot reach %s", t->id,
			    t->addr);
			return STEP_RETRY;
		}
		source_set_fd(t, wc->fd);
		if (expect_again(t) < 0) {
			dataread_fail(r, ST_RESOURCE_EXHAUSTED,
			    "out of memory");
			return STEP_FAIL;
		}
	}
	/* Sent again after a broken connection, the request keeps its
	 * number: the worker answers it as it did, if it did. */
	request_path(t, DW_ELEMENTS, r->o->max_bytes, t->req, path,
	    sizeof(path));
	if (source_io(t, 1) < 0)
		return STEP_RETRY;
	t->asked = 1;
	/* A plain connection and an output that splice(2) writes to: the
	 * payloads through the stage, with no copy. */
	staged = wc->tls == NULL && !t->stage.off &&
	    __atomic_load_n(&r->out_splice, __ATOMIC_RELAXED);
	rc = dataread_send_get(wc, path, t->addr, r->secret) < 0 ?
	    -1 :
	    (idle_report(t, wc),
	        staged ? dataread_recv_staged(wc, &t->buf, &t->cap, &t->stage,
	                     &t->pc, &t->npc, &t->cappc, &rp) :
	                 dataread_recv_reply(wc, &t->buf, &t->cap,
	                     r->o->max_bytes + REPLY_SLACK, &rp));
	source_io(t, 0);
	if (rc == -2) { /* as source_parse finds a reply from memory */
		source_close(t, wc);
		return dataread_malformed(r, t->id, t->addr);
	}
	if (rc < 0) {
		log_debug("task %" PRId64 ": %s: the connection broke", t->id,
		    t->addr);
		source_close(t, wc);
		return STEP_RETRY;
	}
	t->asked = 0;
	/* Not yet known to its worker (dispatchd told us first), or
	 * refused for now: try again while the task is listed. Not the
	 * job's secret: never will be. */
	if (rp.code == status_http(ST_UNAUTHENTICATED)) {
		dataread_fail(r, ST_UNAUTHENTICATED,
		    "task %" PRId64 " (%s): %s", t->id, t->addr,
		    dataread_reply_message(&rp));
		source_close(t, wc);
		return STEP_FAIL;
	}
	if (rp.code == 200)
		t->req++;
	s = rp.code == 200 ? source_take(t, &rp) : STEP_RETRY;
	if (rp.code != 200)
		log_debug("task %" PRId64 ": %s replied HTTP %ld", t->id,
		    t->addr, rp.code);
	if (rp.close)
		source_close(t, wc);
	return s;
}

/*
 * Before the connection closes, tells the worker what became of the last
 * reply, which it would otherwise keep for us until it takes us for gone:
 * written, and heard of by dispatchd (see await_report; as the whole read
 * ends, once its last report is made), it is acknowledged by a request
 * for nothing; not written, or not heard of, it is given back, for
 * another reader of the job (at least once). A request
 * whose reply never came (the stop cut it short, or its connection broke)
 * may have been answered: the request for nothing, numbered as it was,
 * gives that answer back, on a connection made for it if need be. A
 * worker that holds replies for connections, not consumers, takes the
 * first as the acknowledgement it is, answers the second 404, and gives
 * the reply back as the connection closes.
 */
static void
source_ack(struct source *t, struct wconn *wc)
{
	struct timeval tv = {.tv_sec = ACK_MS / 1000,
	    .tv_usec = (ACK_MS % 1000) * 1000};
	char path[256], err[256];
	struct reply rp;
	int back;

	if (t->nprev == 0 && !t->unwritten && !t->asked)
		return;
	pthread_mutex_lock(&t->r->mu);
	/* The read ends: its last report may yet tell dispatchd. */
	while (!t->unwritten && !ack_allowed_locked(t) && t->r->stopping &&
	    !t->r->told)
		pthread_cond_wait(&t->r->cv, &t->r->mu);
	back = t->unwritten || !ack_allowed_locked(t);
	pthread_mutex_unlock(&t->r->mu);
	if (wc->fd >= 0 && source_cut(t))
		source_close(t, wc);
	request_path(t, back ? DW_GIVEBACK : DW_ELEMENTS, 0,
	    back ? t->req - 1 : t->req, path, sizeof(path));
	/* On the task's connection if it is open, which the worker may
	 * have closed as idle meanwhile: then on a new one. */
	for (;;) {
		int fresh = wc->fd < 0;
		if (fresh &&
		    dataread_conn_open(t->addr, ACK_MS, wc, err, sizeof(err)) !=
		        0) {
			log_debug("task %" PRId64
			          ": cannot reach %s to leave it",
			    t->id, t->addr);
			return;
		}
		setsockopt(wc->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(wc->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		if (dataread_send_get(wc, path, t->addr, t->r->secret) == 0 &&
		    dataread_recv_reply(wc, &t->buf, &t->cap, REPLY_SLACK,
		        &rp) == 0) {
			t->nprev = 0;
			return;
		}
		source_close(t, wc);
		if (fresh)
			break;
	}
	log_debug("task %" PRId64 ": %s: the last reply was not %s", t->id,
	    t->addr, back ? "given back" : "acknowledged");
}

/*
 * A task's thread: reads until the task ends, the read stops, or the
 * task leaves the list; then, having written and recorded everything it
 * received, acknowledges it and reports the task lost in the last case.
 */
static void *
source_main(void *arg)
{
	struct source *t = arg;
	struct reader *r = t->r;
	int64_t backoff = BACKOFF_MIN_MS;
	int ended = 0;
	struct wconn wc = {-1, NULL};

	while (!source_stopping(t)) {
		enum step s = source_step(t, &wc);
		if (s == STEP_END)
			ended = 1;
		if (s == STEP_END || s == STEP_FAIL)
			break;
		if (s == STEP_AGAIN) {
			backoff = BACKOFF_MIN_MS;
			continue;
		}
		source_pause(t, backoff);
		backoff =
		    backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
	}
	source_ack(t, &wc);
	source_close(t, &wc);
	pthread_mutex_lock(&r->mu);
	/* Once a dynamic job has finished no split waits for our word. */
	if (!ended && t->stop && !(r->dynamic && r->finished))
		dataread_note_lost_locked(r, t->id);
	t->running = 0;
	pthread_mutex_unlock(&r->mu);
	dataread_poke(r);
	dataread_stage_free(&t->stage);
	free(t->pc);
	free(t->buf);
	free(t->iov);
	free(t->cur);
	free(t->prev);
	free(t->again);
	return NULL;
}

void
dataread_source_stop_locked(struct source *t)
{
	t->stop = 1;
	/* Only a request is cut: between two, the connection carries the
	 * last reply's acknowledgement still to be sent. */
	if (t->fd >= 0 && t->io) {
		shutdown(t->fd, SHUT_RDWR);
		t->cut = 1;
	}
	pthread_cond_broadcast(&t->r->cv);
}

struct source *
dataread_source_start_locked(struct reader *r, int64_t id, const char *addr)
{
	struct source *t = calloc(1, sizeof(*t));

	if (t == NULL || strlen(addr) >= sizeof(t->addr)) {
		free(t);
		dataread_fail_locked(r, ST_INTERNAL,
		    "task %" PRId64 ": bad address %s", id, addr);
		return NULL;
	}
	t->r = r;
	t->id = id;
	t->fd = -1;
	dataread_stage_init(&t->stage, &r->stage_fds);
	t->running = 1;
	/* A task read again after its source left: a worker that took our
	 * leave refuses the numbers the source before us used. */
	t->req = (r->sources++ << 32) + 1;
	snprintf(t->addr, sizeof(t->addr), "%s", addr);
	if (pthread_create(&t->thread, NULL, source_main, t) != 0) {
		free(t);
		dataread_fail_locked(r, ST_RESOURCE_EXHAUSTED,
		    "cannot start a thread: %s", strerror(errno));
		return NULL;
	}
	t->next = r->tasks;
	r->tasks = t;
	return t;
}
