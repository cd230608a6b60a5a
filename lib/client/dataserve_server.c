/*
 * dataserve_server.c: the data server's HTTP/1.1 server, a thread per
 * connection, GET only: a task's elements, a round of a round-robin task,
 * and health. A reply's chunks are held until the consumer's next request
 * acknowledges them: by its connection, for a consumer that does not name
 * itself, and back to the front of their task's queue if it closes first;
 * for one that does (consumer_id=), by the consumer, across its
 * connections, until it is gone (struct hold).
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "dataserve_int.h"
#include "duration.h"
#include "http1.h"
#include "iov.h"
#include "log.h"
#include "token.h"

#define REPLY_DEFAULT (1u << 20)
#define REPLY_MAX (64u << 20)
#define REPLY_CHUNKS 4096
#define WAIT_DEFAULT 1000
#define WAIT_MAX 60000
#define BODY_MAX 65536

struct req {
	struct http1_request h; /* method, path, query, token, keep */
	size_t len;             /* of the request, body included */
};

static const char *
reason(int code)
{
	switch (code) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 404: return "Not Found";
	case 412: return "Precondition Failed";
	case 413: return "Payload Too Large";
	case 429: return "Too Many Requests";
	default: return "Error";
	}
}

/* Writes all of iov (changing it); 0, or -1 when the peer is gone. */
static int
send_iov(struct conn *c, struct iovec *iov, size_t n)
{
	int fd = c->fd;

	/* HTTPS: each buffer in turn, into the session's records. */
	for (size_t i = 0; c->tls != NULL && i < n; i++) {
		const char *p = iov[i].iov_base;
		size_t left = iov[i].iov_len;
		while (left > 0) {
			ssize_t w = tls_send(c->tls, p, left);
			if (w <= 0)
				return -1; /* gone, or SEND_MS passed */
			p += w;
			left -= (size_t)w;
		}
	}
	if (c->tls != NULL)
		return 0;
	while (n > 0) {
		struct msghdr m = {0};
		ssize_t w;
		m.msg_iov = iov;
		m.msg_iovlen = n < IOV_MAX ? n : IOV_MAX;
		if ((w = sendmsg(fd, &m, MSG_NOSIGNAL)) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		n = iov_advance(&iov, n, (size_t)w);
	}
	return 0;
}

static int
send_simple(struct conn *c, int code, const char *ctype, const char *body,
    size_t len, int keep)
{
	char head[256];
	struct iovec iov[2];
	int n = snprintf(head, sizeof(head),
	    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n",
	    code, reason(code), ctype, len,
	    keep ? "" : "Connection: close\r\n");

	iov[0] = (struct iovec){head, (size_t)n};
	iov[1] = (struct iovec){(void *)body, len};
	return send_iov(c, iov, len > 0 ? 2 : 1);
}

static int
send_error(struct conn *c, enum status st, int keep, const char *fmt, ...)
{
	char msg[512], *s;
	va_list ap;
	json_t *o;
	int rc;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	dataserve_make_utf8(msg);
	o = json_pack("{s:{s:s,s:s}}", "error", "code", status_name(st),
	    "message", msg);
	s = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	rc = send_simple(c, status_http(st), "application/json",
	    s != NULL ? s : "{}", s != NULL ? strlen(s) : 2, keep);
	free(s);
	return rc;
}

/* A 200 reply of the chunks of list (none: an empty body), written from
 * where they lie. */
static int
send_chunks(struct conn *c, const struct chunk *list, int keep)
{
	size_t n = 0, body = 0, k = 1, i = 0;
	const struct chunk *p;
	struct chunk_hdr *wire;
	struct iovec *iov;
	char head[256];
	int rc = -1;

	for (p = list; p != NULL; p = p->next) {
		n++;
		body += sizeof(struct chunk_hdr) + p->h.len;
	}
	iov = malloc((2 * n + 1) * sizeof(*iov));
	wire = malloc((n > 0 ? n : 1) * sizeof(*wire));
	if (iov != NULL && wire != NULL) {
		iov[0].iov_base = head;
		iov[0].iov_len = (size_t)snprintf(head, sizeof(head),
		    "HTTP/1.1 200 OK\r\nContent-Type: "
		    "application/x-muster-chunks\r\nContent-Length: %zu\r\n%s\r\n",
		    body, keep ? "" : "Connection: close\r\n");
		for (p = list; p != NULL; p = p->next, i++) {
			dw_chunk_put(&p->h, &wire[i]);
			iov[k++] = (struct iovec){&wire[i], sizeof(wire[i])};
			if (p->h.len > 0)
				iov[k++] =
				    (struct iovec){(void *)p->p, p->h.len};
		}
		rc = send_iov(c, iov, k);
	}
	free(iov);
	free(wire);
	return rc;
}

/* CHUNK_END, or CHUNK_ERROR with the task's message. */
static int
send_end(struct conn *c, const char *error, int keep)
{
	struct chunk end = {0};

	end.h.magic = CHUNK_MAGIC;
	end.h.type = error != NULL ? CHUNK_ERROR : CHUNK_END;
	if (error != NULL) {
		end.p = error;
		end.h.len = (uint32_t)strlen(error);
	}
	return send_chunks(c, &end, keep);
}

/* The last reply's chunks, of a consumer that does not name itself:
 * acknowledged, or given back when the connection closes. */
static void
conn_release(struct conn *c, int acked)
{
	struct feed *t = c->ht;

	if (t == NULL)
		return;
	pthread_mutex_lock(&t->mu);
	dataserve_hold_release(t, &c->held, &c->nheld, acked);
	pthread_mutex_unlock(&t->mu);
	c->ht = NULL;
	dataserve_feed_unref(t);
}

/* Takes chunks from t's queue for a reply, up to max payload bytes (one
 * at least), into the empty *list and their count into *n; they are held
 * until acknowledged. Under t's lock. */
static void
take_chunks(struct feed *t, size_t max, struct chunk **list, size_t *n)
{
	struct chunk **tail = list;
	size_t total = 0, k = 0;

	while (t->head != NULL && k < REPLY_CHUNKS &&
	    (k == 0 || total + t->head->h.len <= max)) {
		struct chunk *ch = dataserve_queue_pop(t);
		total += ch->h.len;
		ch->next = NULL;
		*tail = ch;
		tail = &ch->next;
		k++;
	}
	*n = k;
	t->held += k;
}

/* t has ended (called holding t->mu): 1, and *error its failure. */
static int
ended(struct feed *t, char **error)
{
	*error = t->error != NULL ? strdup(t->error) : NULL;
	return 1;
}

/*
 * The reply to a wait on task id: it is not served any more (gone), it
 * ended (with error, which this frees), or chunks (NULL: none in time).
 */
static int
send_outcome(struct conn *c, uint64_t id, int gone, int end, char *error,
    struct chunk *chunks, int keep)
{
	int rc;

	if (gone)
		rc = send_error(c, ST_NOT_FOUND, keep,
		    "task %" PRIu64 " is not served here any more", id);
	else if (end)
		rc = send_end(c, error, keep);
	else
		rc = send_chunks(c, chunks, keep);
	free(error);
	return rc;
}

/*
 * Whether the request shows t's job's secret: only the job's consumers,
 * to whom dispatchd gave it, may take (and acknowledge) its elements.
 */
static int
allowed(const struct feed *t, const struct req *r)
{
	return t->secret[0] == '\0' ||
	    (r->h.auth != NULL &&
	        token_equal(r->h.auth, r->h.auth_len, t->secret,
	            strlen(t->secret)));
}

static int
send_unauthorized(struct conn *c, uint64_t id, int keep)
{
	return send_error(c, ST_UNAUTHENTICATED, keep,
	    "task %" PRIu64 ": the request does not show its job's secret "
	    "(Authorization: Bearer), which dispatchd gives the job's "
	    "consumers",
	    id);
}

/* How long a request may wait: its wait=, or def, and WAIT_MAX at most. */
static int64_t
wait_of(const struct dw_request *w, int64_t def)
{
	int64_t ms = w->has_wait ? w->wait_ms : def;

	return ms < WAIT_MAX ? ms : WAIT_MAX;
}

/*
 * Task w->task for a request for its elements, held; NULL when it is not
 * served here, the request does not show its job's secret, or it is read
 * by rounds, with the outcome of the reply that says so in *rc.
 */
static struct feed *
feed_for(struct conn *c, const struct dw_request *w, const struct req *r,
    int *rc)
{
	struct feed *t = dataserve_feed_get(c->ds, w->task);
	int keep = r->h.keep;

	if (t == NULL) {
		*rc = send_error(c, ST_NOT_FOUND, keep,
		    "task %" PRIu64 " is not served here", w->task);
		return NULL;
	}
	if (!allowed(t, r))
		*rc = send_unauthorized(c, w->task, keep);
	else if (t->consumers > 0)
		*rc = send_error(c, ST_FAILED_PRECONDITION, keep,
		    "task %" PRIu64 " is read round-robin, by rounds", w->task);
	else
		return t;
	dataserve_feed_unref(t);
	return NULL;
}

enum outcome { O_CHUNKS, O_END, O_GONE, O_TIME };

/*
 * Waits until t has chunks queued, has ended with none held (held chunks
 * come back if their consumer goes), is dropped, or until. Consumers gone
 * meanwhile give their chunks back. Under t's lock.
 */
static enum outcome
await_chunks(struct feed *t, int64_t until, int64_t gone_ms)
{
	for (;;) {
		int64_t now = duration_now_ms();
		int64_t next = dataserve_holds_expire(t, now, gone_ms);
		if (t->dropped)
			return O_GONE;
		if (t->head != NULL)
			return O_CHUNKS;
		if (t->state != T_RUNNING && t->held == 0)
			return O_END;
		if (now >= until)
			return O_TIME;
		dataserve_cond_wait_until(&t->more, &t->mu,
		    next < until ? next : until);
	}
}

/*
 * Consumer w->consumer_id's hold of t, made if need be and make: H_OK,
 * H_FULL (no room for another), or H_OVERTAKEN when the consumer's
 * request was answered already with a higher number: this one, sent on a
 * connection it has since given up, must change nothing. Under t's lock.
 */
enum { H_OK, H_FULL, H_OVERTAKEN };

static int
hold_of(struct conn *c, struct feed *t, const struct dw_request *w, int make,
    struct hold **hp)
{
	struct hold *h = dataserve_hold_find(t, w->consumer_id);

	if (h != NULL && (w->request < h->req || w->request <= h->left))
		return H_OVERTAKEN;
	if (h == NULL && make &&
	    (h = dataserve_hold_add(t, w->consumer_id, c->ds->max_conns)) ==
	        NULL)
		return H_FULL;
	*hp = h;
	return H_OK;
}

static int
send_hold_error(struct conn *c, const struct dw_request *w, int why, int keep)
{
	if (why == H_FULL)
		return send_error(c, ST_RESOURCE_EXHAUSTED, keep,
		    "task %" PRIu64 ": %ld consumers hold its elements "
		    "already; try again",
		    w->task, c->ds->max_conns);
	return send_error(c, ST_FAILED_PRECONDITION, keep,
	    "task %" PRIu64 ": consumer %s's request %" PRIu64
	    " was overtaken by a later one",
	    w->task, w->consumer_id, w->request);
}

/*
 * A consumer that names itself leaves: with GET .../elements?max=0, its
 * last reply is acknowledged if the request is numbered above the one it
 * answered, and given back if it is that one; with GET .../giveback N,
 * given back (written replies were acknowledged by the requests after
 * them). Its hold remembers the number (struct hold): the request this
 * one may overtake, cut short by the consumer as it left, may still be
 * on its way. Said again, it changes nothing.
 */
static int
serve_leave(struct conn *c, const struct dw_request *w, const struct req *r)
{
	struct hold *h;
	struct feed *t;
	int rc, why = H_OK;

	if ((t = feed_for(c, w, r, &rc)) == NULL)
		return rc;
	pthread_mutex_lock(&t->mu);
	h = dataserve_hold_find(t, w->consumer_id);
	if ((h == NULL || h->left == 0) &&
	    (why = hold_of(c, t, w, 1, &h)) == H_OK) {
		dataserve_hold_release(t, &h->chunks, &h->n,
		    w->kind == DW_ELEMENTS && w->request > h->req);
		h->left = w->kind == DW_GIVEBACK ? w->request + 1 : w->request;
		h->conn = 0;
		h->away = duration_now_ms();
	}
	/* Holding nothing, with no room to remember it. */
	if (why == H_FULL)
		why = H_OK;
	pthread_mutex_unlock(&t->mu);
	dataserve_feed_unref(t);
	c->named_held = 0;
	if (why != H_OK)
		return send_hold_error(c, w, why, r->h.keep);
	return send_chunks(c, NULL, r->h.keep);
}

/*
 * The request of a consumer that names itself: it acknowledges the
 * consumer's last reply if numbered above the request that reply
 * answered, and is answered with it again if it is that request sent
 * again (its first answer lost with its connection); otherwise with new
 * chunks, which the consumer then holds. t is let go.
 */
static int
serve_named(struct conn *c, struct feed *t, const struct dw_request *w,
    size_t max, int keep)
{
	int64_t until = duration_now_ms() + wait_of(w, WAIT_DEFAULT);
	enum outcome o = O_TIME;
	struct chunk *out = NULL;
	struct hold *h = NULL;
	char *error = NULL;
	int rc, why, ok = 1;

	c->named = 1;
	pthread_mutex_lock(&t->mu);
	dataserve_holds_expire(t, duration_now_ms(), c->ds->request_ms);
	if ((why = hold_of(c, t, w, 1, &h)) != H_OK) {
		pthread_mutex_unlock(&t->mu);
		dataserve_feed_unref(t);
		return send_hold_error(c, w, why, keep);
	}
	dataserve_hold_claim(t, h, c->serial, duration_now_ms());
	if (w->request > h->req) {
		dataserve_hold_release(t, &h->chunks, &h->n, 1);
		h->req = w->request;
	}
	if (h->n == 0) {
		o = await_chunks(t, until, c->ds->request_ms);
		/* Asked for on another connection meanwhile, the consumer
		 * has the chunks answered there. */
		h = dataserve_hold_find(t, w->consumer_id);
		if (h == NULL || h->conn != c->serial || h->req != w->request)
			h = NULL;
		else if (o == O_CHUNKS)
			take_chunks(t, max, &h->chunks, &h->n);
		if (o == O_END)
			ended(t, &error);
	}
	if (h != NULL && h->n > 0)
		out = dataserve_chunks_copy(h->chunks, &ok);
	c->named_held = h != NULL && h->n > 0;
	pthread_mutex_unlock(&t->mu);
	if (!ok)
		rc = send_error(c, ST_RESOURCE_EXHAUSTED, keep,
		    "task %" PRIu64 ": out of memory", w->task);
	else
		rc = send_outcome(c, w->task, o == O_GONE, o == O_END, error,
		    out, keep);
	if (out != NULL) {
		pthread_mutex_lock(&t->mu);
		dataserve_chunks_free(t, out);
		pthread_mutex_unlock(&t->mu);
	}
	dataserve_feed_unref(t);
	return rc;
}

/* GET /v1/tasks/T/elements?max=BYTES&wait=MS[&consumer_id=ID&request=N];
 * max=0 acknowledges the last reply and asks for nothing, for a consumer
 * about to close. */
static int
serve_elements(struct conn *c, const struct dw_request *w, const struct req *r)
{
	uint64_t id = w->task;
	int keep = r->h.keep;
	size_t max = w->has_max ? w->max : REPLY_DEFAULT;
	struct feed *t;
	char *error = NULL;
	int rc;
	enum outcome o;

	if (max > REPLY_MAX)
		max = REPLY_MAX;
	/* Only who took the held chunks may acknowledge them. */
	if (c->ht != NULL && !allowed(c->ht, r))
		return send_unauthorized(c, id, keep);
	conn_release(c, 1);
	if (max == 0 && !w->has_id)
		return send_chunks(c, NULL, keep);
	if (max == 0)
		return serve_leave(c, w, r);
	if ((t = feed_for(c, w, r, &rc)) == NULL)
		return rc;
	if (w->has_id)
		return serve_named(c, t, w, max, keep);
	pthread_mutex_lock(&t->mu);
	o = await_chunks(t, duration_now_ms() + wait_of(w, WAIT_DEFAULT),
	    c->ds->request_ms);
	if (o == O_CHUNKS)
		take_chunks(t, max, &c->held, &c->nheld);
	else if (o == O_END)
		ended(t, &error);
	pthread_mutex_unlock(&t->mu);
	rc = send_outcome(c, id, o == O_GONE, o == O_END, error, c->held, keep);
	if (c->held != NULL)
		c->ht = t;
	else
		dataserve_feed_unref(t);
	return rc;
}

static struct round *
round_find(struct feed *t, uint64_t r)
{
	struct round *rd;

	for (rd = t->rounds; rd != NULL && rd->r != r; rd = rd->next)
		;
	return rd;
}

/* Round r, as it is first asked for: its elements are the next ones
 * rounds_fill finds. NULL when out of memory. */
static struct round *
round_add(struct feed *t, uint64_t r)
{
	struct round *rd;

	if ((rd = calloc(1, sizeof(*rd))) == NULL ||
	    (rd->el = calloc((size_t)t->consumers, sizeof(*rd->el))) == NULL ||
	    (rd->took = calloc((size_t)t->consumers, 1)) == NULL) {
		if (rd != NULL)
			free(rd->el);
		free(rd);
		return NULL;
	}
	rd->r = r;
	*t->rounds_end = rd;
	t->rounds_end = &rd->next;
	return rd;
}

/*
 * Consumer who asks for round r. A round every consumer took is kept
 * until each has asked for a later one: one whose reply was lost asks
 * again, and must get the same element, not the next round's. Then it
 * goes, and with it its hold on the buffer, which the reader needs to go
 * on (rounds kept longer than that filled a small buffer and stopped the
 * reading for good).
 */
static void
rounds_asked(struct feed *t, long who, int64_t r)
{
	int64_t low = INT64_MAX;

	if (r > t->asked[who])
		t->asked[who] = r;
	for (long i = 0; i < t->consumers; i++)
		if (t->asked[i] < low)
			low = t->asked[i];
	for (struct round *p = t->rounds, *next; p != NULL; p = next) {
		next = p->next;
		if (p->done && (int64_t)p->r < low)
			dataserve_round_free(t, p);
	}
	/* The reader may be waiting for what rounds_starved tells. */
	pthread_cond_signal(&t->room);
}

/* Rounds take the queue's elements in the order they were asked for. */
static void
rounds_fill(struct feed *t)
{
	for (struct round *r = t->rounds; r != NULL; r = r->next)
		while (r->have < t->consumers) {
			struct chunk *one = dataserve_queue_take_one(t);
			if (one == NULL)
				return;
			r->el[r->have++] = one;
		}
}

/* GET /v1/tasks/T/rounds/R?consumer=C */
static int
serve_round(struct conn *c, const struct dw_request *w, const struct req *req)
{
	uint64_t id = w->task, r = w->round;
	int keep = req->h.keep;
	struct chunk one = {0};
	struct round *rd = NULL;
	struct feed *t;
	int64_t wait = wait_of(w, WAIT_MAX), until;
	char *error = NULL;
	long who = w->consumer;
	int rc, end = 0, gone = 0;

	/* Only who took the held chunks may acknowledge them. */
	if (c->ht != NULL && !allowed(c->ht, req))
		return send_unauthorized(c, id, keep);
	conn_release(c, 1);
	if ((t = dataserve_feed_get(c->ds, id)) == NULL)
		return send_error(c, ST_NOT_FOUND, keep,
		    "task %" PRIu64 " is not served here", id);
	if (!allowed(t, req)) {
		dataserve_feed_unref(t);
		return send_unauthorized(c, id, keep);
	}
	if (t->consumers == 0 || t->asked == NULL || who < 0 ||
	    who >= t->consumers) {
		rc = t->consumers == 0 || t->asked == NULL ?
		    send_error(c, ST_FAILED_PRECONDITION, keep,
		        "task %" PRIu64 " is not read round-robin", id) :
		    send_error(c, ST_INVALID_ARGUMENT, keep,
		        "consumer must be 0 to %ld", t->consumers - 1);
		dataserve_feed_unref(t);
		return rc;
	}
	until = duration_now_ms() + wait;
	pthread_mutex_lock(&t->mu);
	if ((int64_t)r < t->asked[who] && round_find(t, r) == NULL) {
		pthread_mutex_unlock(&t->mu);
		dataserve_feed_unref(t);
		return send_error(c, ST_FAILED_PRECONDITION, keep,
		    "round %" PRIu64 " is over for consumer %ld", r, who);
	}
	rounds_asked(t, who, (int64_t)r);
	for (;;) {
		if (t->dropped) {
			gone = 1;
			break;
		}
		/* A task that has ended makes no new rounds. */
		if (rd == NULL && (rd = round_find(t, r)) == NULL &&
		    (t->state == T_RUNNING || t->head != NULL))
			rd = round_add(t, r);
		rounds_fill(t);
		if (rd != NULL && rd->have == t->consumers) {
			one = *rd->el[who];
			one.next = NULL;
			one.blk->refs++;
			if (!rd->took[who]) {
				rd->took[who] = 1;
				rd->taken++;
			}
			rd->done = rd->taken == t->consumers;
			break;
		}
		/* The task ended before the round filled: every consumer
		 * sees the end at the same round. */
		if (t->state != T_RUNNING && t->head == NULL) {
			end = ended(t, &error);
			break;
		}
		if (duration_now_ms() >= until)
			break;
		dataserve_cond_wait_until(&t->more, &t->mu, until);
	}
	pthread_mutex_unlock(&t->mu);
	rc = send_outcome(c, id, gone, end, error,
	    one.blk != NULL ? &one : NULL, keep);
	if (one.blk != NULL) {
		pthread_mutex_lock(&t->mu);
		dataserve_block_put(t, one.blk);
		pthread_mutex_unlock(&t->mu);
	}
	dataserve_feed_unref(t);
	return rc;
}

/* Routes one request; 0, or -1 when the connection is to close. */
static int
route(struct conn *c, struct req *r)
{
	struct dw_request w;

	if (strcmp(r->h.method, "GET") != 0)
		return send_error(c, ST_INVALID_ARGUMENT, r->h.keep,
		    "%s: only GET is served here", r->h.method);
	switch (dw_request_parse(r->h.path, r->h.query, &w)) {
	case DW_OK: break;
	case DW_BAD_MAX:
		return send_error(c, ST_INVALID_ARGUMENT, r->h.keep,
		    "max is not a number of bytes: %s", r->h.query);
	case DW_BAD_WAIT:
		return send_error(c, ST_INVALID_ARGUMENT, r->h.keep,
		    "wait is not a number of milliseconds: %s", r->h.query);
	case DW_BAD_ID:
		return send_error(c, ST_INVALID_ARGUMENT, r->h.keep,
		    "consumer_id (1 to %d letters, digits, - or _) and request "
		    "(a number from 1) go together: %s",
		    DW_CONSUMER_ID_MAX, r->h.query);
	default:
		return send_error(c, ST_NOT_FOUND, r->h.keep,
		    "no such resource");
	}
	switch (w.kind) {
	case DW_HEALTH:
		return send_simple(c, 200, "text/plain", "ok\n", 3, r->h.keep);
	case DW_ELEMENTS: return serve_elements(c, &w, r);
	case DW_GIVEBACK: return serve_leave(c, &w, r);
	case DW_ROUND: return serve_round(c, &w, r);
	}
	return send_error(c, ST_NOT_FOUND, r->h.keep, "no such resource");
}

/*
 * Receives into p what comes before the request's deadline (none while
 * the connection holds elements, see REQUEST_MS): bytes received, or -1
 * when the peer left, the deadline passed or the server stops.
 */
static ssize_t
recv_by(struct conn *c, void *p, size_t n, int64_t deadline)
{
	int holds = c->held != NULL || c->named_held;

	for (;;) {
		struct pollfd pf = {c->fd, POLLIN, 0};
		int64_t left = deadline - duration_now_ms();
		ssize_t got;
		if (!holds && left <= 0)
			return -1;
		/* What the session holds already, poll(2) does not see. */
		if (c->tls != NULL && tls_pending(c->tls) > 0) {
			got = tls_recv(c->tls, p, n);
			return got > 0 ? got : -1;
		}
		if (poll(&pf, 1, holds ? -1 : (int)left) < 0 && errno != EINTR)
			return -1;
		if (pf.revents == 0)
			continue;
		if (c->tls != NULL) {
			/* A record comes whole within the socket's timeout. */
			got = tls_recv(c->tls, p, n);
			return got > 0 ? got : -1;
		}
		got = recv(c->fd, p, n, MSG_DONTWAIT);
		if (got < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		return got > 0 ? got : -1;
	}
}

/*
 * Reads one request's head (and skips its body): 0, or -1 when the
 * connection is to close (the peer left, or the request cannot be
 * served: then after saying why).
 */
static int
read_request(struct conn *c, struct req *r)
{
	int64_t deadline = duration_now_ms() + c->ds->request_ms;
	size_t head, left;
	ssize_t n;

	while ((head = http1_head_len(c->in, c->inlen)) == 0) {
		if (c->inlen == sizeof(c->in) - 1) {
			send_error(c, ST_RESOURCE_EXHAUSTED, 0,
			    "request head larger than %d bytes", REQ_MAX);
			return -1;
		}
		n = recv_by(c, c->in + c->inlen, sizeof(c->in) - 1 - c->inlen,
		    deadline);
		if (n < 0)
			return -1;
		c->inlen += (size_t)n;
	}
	switch (http1_parse_request(c->in, head, &r->h)) {
	case HTTP1_OK: break;
	case HTTP1_CHUNKED:
		send_error(c, ST_INVALID_ARGUMENT, 0,
		    "a request body in chunks is not read here");
		return -1;
	case HTTP1_BAD_LENGTH:
		send_error(c, ST_RESOURCE_EXHAUSTED, 0,
		    "a request body of at most %d bytes", BODY_MAX);
		return -1;
	default: return -1;
	}
	if (r->h.length > BODY_MAX) {
		send_error(c, ST_RESOURCE_EXHAUSTED, 0,
		    "a request body of at most %d bytes", BODY_MAX);
		return -1;
	}
	r->len = head + (size_t)r->h.length;
	if (c->inlen >= r->len)
		return 0;
	/* A GET has no use for a body: skip it, to find the next request. */
	left = r->len - c->inlen;
	r->len = c->inlen;
	while (left > 0) {
		char skip[4096];
		n = recv_by(c, skip, left < sizeof(skip) ? left : sizeof(skip),
		    deadline);
		if (n < 0)
			return -1;
		left -= (size_t)n;
	}
	return 0;
}

/* The connection closes: the consumers that named themselves on it last
 * are away from now, and gone if none comes back in time. */
static void
conn_away(struct conn *c)
{
	struct dataserve *ds = c->ds;
	int64_t now = duration_now_ms();

	if (!c->named)
		return;
	pthread_mutex_lock(&ds->mu);
	for (struct feed *t = ds->tasks; t != NULL; t = t->next) {
		pthread_mutex_lock(&t->mu);
		dataserve_holds_away(t, c->serial, now);
		pthread_mutex_unlock(&t->mu);
	}
	pthread_mutex_unlock(&ds->mu);
}

static void *
conn_main(void *arg)
{
	struct conn *c = arg;
	struct dataserve *ds = c->ds;
	struct conn **pp;
	struct req r;
	char err[256] = "the TLS handshake did not end in time";

	if (ds->tls != NULL &&
	    ((c->tls = tls_accept(ds->tls, c->fd, err, sizeof(err))) == NULL ||
	        tls_handshake(c->tls, err, sizeof(err)) != 0)) {
		/* A client that does not speak TLS, or not to us. */
		log_debug("data server: %s", err);
	} else {
		while (read_request(c, &r) == 0) {
			int rc = route(c, &r);
			memmove(c->in, c->in + r.len, c->inlen - r.len);
			c->inlen -= r.len;
			if (rc < 0 || !r.h.keep)
				break;
		}
	}
	conn_release(c, 0);
	conn_away(c);
	pthread_mutex_lock(&ds->mu);
	for (pp = &ds->conns; *pp != c; pp = &(*pp)->next)
		;
	*pp = c->next;
	ds->nconns--;
	pthread_mutex_unlock(&ds->mu);
	tls_free(c->tls);
	close(c->fd);
	free(c);
	dataserve_thread_done(ds);
	return NULL;
}

/* A consumer's host that dies without closing its connection is found
 * out by TCP keepalive, so that the chunks it held go back. */
static void
conn_options(int fd, int64_t recv_ms)
{
	int one = 1, idle = 30, intvl = 10, cnt = 3;
	struct timeval tv = {SEND_MS / 1000, 0};
	struct timeval rv = {recv_ms / 1000, (recv_ms % 1000) * 1000};

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	/* Reads wait in poll(2); this bounds a TLS handshake or record that
	 * stops half-way. */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rv, sizeof(rv));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

void *
dataserve_accept_main(void *arg)
{
	struct dataserve *ds = arg;

	for (;;) {
		int fd = accept4(ds->lfd, NULL, NULL, SOCK_CLOEXEC);
		struct conn *c;
		if (fd < 0) {
			pthread_mutex_lock(&ds->mu);
			int stop = ds->stopping;
			pthread_mutex_unlock(&ds->mu);
			if (stop)
				break;
			/* Out of descriptors: let connections end. */
			if (errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM)
				poll(NULL, 0, 100);
			continue;
		}
		pthread_mutex_lock(&ds->mu);
		if (ds->nconns >= ds->max_conns) {
			/* Said at once, without a thread: it goes away. */
			static const char busy[] =
			    "HTTP/1.1 503 Service Unavailable\r\n"
			    "Content-Type: application/json\r\n"
			    "Content-Length: 76\r\nConnection: close\r\n\r\n"
			    "{\"error\":{\"code\":\"UNAVAILABLE\",\"message\":"
			    "\"too many connections; try again\"}}";
			if (ds->refused++ % 1000 == 0)
				log_info("data server: %ld connections, the "
				         "most it serves: refusing more (%lu "
				         "so far)",
				    ds->nconns, ds->refused);
			pthread_mutex_unlock(&ds->mu);
			/* Plain HTTP only: a TLS client gets a close. */
			if (ds->tls == NULL)
				(void)!send(fd, busy, sizeof(busy) - 1,
				    MSG_DONTWAIT | MSG_NOSIGNAL);
			close(fd);
			continue;
		}
		pthread_mutex_unlock(&ds->mu);
		conn_options(fd, ds->request_ms);
		if ((c = calloc(1, sizeof(*c))) == NULL) {
			close(fd);
			continue;
		}
		c->ds = ds;
		c->fd = fd;
		pthread_mutex_lock(&ds->mu);
		c->serial = ++ds->conn_serial;
		c->next = ds->conns;
		ds->conns = c;
		ds->nconns++;
		if (ds->stopping ||
		    dataserve_thread_start(ds, conn_main, c) < 0) {
			ds->conns = c->next;
			ds->nconns--;
			close(fd);
			free(c);
		}
		pthread_mutex_unlock(&ds->mu);
	}
	return NULL;
}
