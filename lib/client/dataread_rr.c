/*
 * dataread_rr.c: the reader of a round-robin job (consumers > 0): one
 * thread reads round r from the (r mod count)-th task that has started by
 * r, over a kept-alive connection to each task, never starting the round
 * dispatchd blocks at until it lets go.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "dataread_int.h"
#include "duration.h"
#include "vec.h"

/* How long a worker holds a request for a round that is not full (its
 * limit). */
#define ROUND_WAIT_MS 60000

/* The task whose turn round is, among those started by then. */
static const struct rr_task *
rr_pick_locked(const struct reader *r, int64_t round)
{
	size_t k = 0, want;

	for (size_t i = 0; i < r->nrr; i++)
		k += r->rr[i].start <= round;
	if (k == 0)
		return NULL;
	want = (size_t)(round % (int64_t)k);
	for (size_t i = 0; i < r->nrr; i++)
		if (r->rr[i].start <= round && want-- == 0)
			return &r->rr[i];
	return NULL;
}

/* The kept-alive connection to task id; NULL when it cannot be reached. */
static struct wconn *
rr_conn(struct reader *r, struct rr_conn **conns, size_t *n, size_t *cap,
    int64_t id, const char *addr)
{
	struct wconn wc;
	char err[512];
	int rc;

	for (size_t i = 0; i < *n; i++)
		if ((*conns)[i].id == id)
			return &(*conns)[i].wc;
	if (vec_grow(conns, cap, *n + 1, sizeof(**conns)) < 0)
		return NULL;
	if ((rc = dataread_conn_open(addr, ROUND_WAIT_MS + IO_GRACE_MS, &wc,
	         err, sizeof(err))) == -2)
		dataread_fail(r, ST_UNAVAILABLE,
		    "task %" PRId64 ": worker %s: %s", id, addr, err);
	if (rc < 0)
		return NULL;
	(*conns)[*n] = (struct rr_conn){id, wc};
	return &(*conns)[(*n)++].wc;
}

static void
rr_drop(struct rr_conn *conns, size_t *n, int64_t id)
{
	for (size_t i = 0; i < *n; i++)
		if (conns[i].id == id) {
			dataread_conn_close(&conns[i].wc);
			conns[i] = conns[--*n];
			return;
		}
}

/* Writes the element of a round's reply; STEP_AGAIN when it held none. */
static enum step
rr_take(struct reader *r, const struct rr_task *t, const struct reply *rp)
{
	struct chunk_hdr h;
	struct iovec iov;
	const char *p;
	size_t off = 0;
	int rc;

	while ((rc = dw_chunk_next(rp->body, rp->len, &off, &h, &p)) == 1) {
		if (h.type == CHUNK_END)
			return STEP_END;
		if (h.type == CHUNK_ERROR) {
			dataread_fail(r, ST_INTERNAL, "%.*s", (int)h.len, p);
			return STEP_FAIL;
		}
		iov = (struct iovec){(void *)p, (size_t)h.len};
		pthread_mutex_lock(&r->out_mu);
		if ((rc = dataread_write_out(r, &iov, 1)) == 0)
			__atomic_add_fetch(&r->written, h.count,
			    __ATOMIC_RELAXED);
		pthread_mutex_unlock(&r->out_mu);
		if (rc < 0)
			return STEP_FAIL;
	}
	return rc < 0 ? dataread_malformed(r, t->id, t->addr) : STEP_AGAIN;
}

/*
 * Reads round from task t. An empty reply (the round did not fill in
 * time) is STEP_RETRY without a pause; a failure is STEP_RETRY too, with
 * *pause set, so that the next try sees the next heartbeat's list.
 */
static enum step
rr_step(struct reader *r, const struct rr_task *t, int64_t round,
    struct rr_conn **conns, size_t *nconns, size_t *capconns, char **buf,
    size_t *cap, int *pause)
{
	char path[160];
	struct reply rp;
	enum step s;
	struct wconn *wc = rr_conn(r, conns, nconns, capconns, t->id, t->addr);

	*pause = 1;
	if (wc == NULL)
		return STEP_RETRY;
	pthread_mutex_lock(&r->mu);
	r->rr_fd = wc->fd;
	if (r->stopping)
		shutdown(wc->fd, SHUT_RDWR);
	pthread_mutex_unlock(&r->mu);
	dw_request_path(&(struct dw_request){.kind = DW_ROUND,
	                    .task = (uint64_t)t->id,
	                    .round = (uint64_t)round,
	                    .consumer = r->o->consumer_index},
	    path, sizeof(path));
	if (dataread_send_get(wc, path, t->addr, r->secret) < 0 ||
	    dataread_recv_reply(wc, buf, cap, 65536, &rp) < 0)
		rp.code = 0;
	pthread_mutex_lock(&r->mu);
	r->rr_fd = -1;
	pthread_mutex_unlock(&r->mu);
	if (rp.code == 0 || rp.close)
		rr_drop(*conns, nconns, t->id);
	if (rp.code == status_http(ST_FAILED_PRECONDITION)) {
		/* A round that is over: this consumer came too late. */
		dataread_fail(r, ST_FAILED_PRECONDITION,
		    "task %" PRId64 " (%s): %s", t->id, t->addr,
		    dataread_reply_message(&rp));
		return STEP_FAIL;
	}
	if (rp.code != 200)
		return STEP_RETRY;
	if (rp.len == 0) {
		*pause = 0;
		return STEP_RETRY;
	}
	s = rr_take(r, t, &rp);
	return s;
}

/*
 * The round-robin reader: round after round, never starting the round
 * dispatchd blocks at (a new task's starting round) until it lets go.
 */
void *
dataread_rr_main(void *arg)
{
	struct reader *r = arg;
	struct rr_conn *conns = NULL;
	size_t nconns = 0, capconns = 0, cap = 0;
	char *buf = NULL;

	pthread_mutex_lock(&r->mu);
	while (!r->stopping && r->fail == ST_OK && !r->closed) {
		int64_t round = r->round;
		const struct rr_task *pick;
		struct rr_task t;
		enum step s;
		int pause;

		if ((r->block >= 0 && round == r->block) ||
		    (pick = rr_pick_locked(r, round)) == NULL) {
			pthread_cond_wait(&r->cv, &r->mu);
			continue;
		}
		t = *pick;
		r->round = round + 1;
		pthread_mutex_unlock(&r->mu);
		s = rr_step(r, &t, round, &conns, &nconns, &capconns, &buf,
		    &cap, &pause);
		pthread_mutex_lock(&r->mu);
		if (s == STEP_END)
			r->rr_done = 1;
		if (s == STEP_END || s == STEP_FAIL)
			break;
		if (s == STEP_RETRY) {
			struct timespec ts =
			    duration_realtime_in(BACKOFF_MAX_MS);
			r->round = round;
			if (pause)
				pthread_cond_timedwait(&r->cv, &r->mu, &ts);
		}
	}
	pthread_mutex_unlock(&r->mu);
	dataread_poke(r);
	while (nconns > 0)
		rr_drop(conns, &nconns, conns[0].id);
	free(conns);
	free(buf);
	return NULL;
}
