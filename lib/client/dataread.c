/*
 * dataread.c: a job's consumer. The calling thread heartbeats; a thread
 * per task reads that task's elements from its worker (or one thread reads
 * the rounds of a round-robin job). One lock guards the output, another
 * the bookkeeping the heartbeats report, so that a reader downstream that
 * stops reading never stops the heartbeats that keep the job client.
 *
 * Workers are spoken to on sockets of our own rather than http_client: a
 * reply is received once into a buffer kept for the task and its payloads
 * go out in one writev, with no copy and no per-element work between.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
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
#include <time.h>
#include <unistd.h>

#include "dataread.h"
#include "datawire.h"
#include "duration.h"
#include "http1.h"
#include "iov.h"
#include "log.h"
#include "tls.h"
#include "vec.h"

/* How long a worker holds a request for elements when it has none. */
#define ELEMENTS_WAIT_MS 1000
/* How long it holds a request for a round that is not full (its limit). */
#define ROUND_WAIT_MS 60000
/* What a reply may take beyond that before its worker counts as hung. */
#define IO_GRACE_MS 30000
#define CONNECT_MS 5000
/* Pauses between attempts to read from a task that cannot be read now. */
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 500
/*
 * A consumer with a split's end unreported that waits this long for its
 * next reply is idle: it reports at once, since that report may be the
 * one that finishes the job.
 */
#define IDLE_MS 2
/* How long one heartbeat tries before the loop looks around again. */
#define HEARTBEAT_CALL_MS 5000
/* At the end: the last heartbeat and the release, and the threads. */
#define FAREWELL_MS 2000
/* How long the last acknowledgement to a worker may take. */
#define ACK_MS 500
#define JOIN_MS 1000
#define MAX_HEAD 16384
/* Room for a reply's chunk headers and HTTP header beyond max bytes. */
#define REPLY_SLACK (256u << 10)
/* The largest reply taken: one element may exceed max, not this. */
#define MAX_REPLY (1ULL << 34)

/* Elements [first, end) of split seq were written; total -1: unknown. */
struct range {
	int64_t seq, first, end, total;
};

struct ranges {
	struct range *v;
	size_t n, cap;
};

/* A data chunk of a reply, as much as telling it again takes. */
struct chunk_id {
	uint64_t seq, first;
	uint32_t count, flags;
	int dup; /* sent again after a reconnection: already written */
};

enum step {
	STEP_AGAIN, /* read on */
	STEP_RETRY, /* cannot read now: pause and try again */
	STEP_END,   /* the task has no more elements */
	STEP_FAIL   /* the read ends: r->fail or r->closed says why */
};

struct reader;

struct task {
	struct task *next;
	struct reader *r;
	int64_t id;
	char addr[280];
	pthread_t thread;
	/* Under r->mu: */
	int fd;      /* the connection, for shutdown(2); -1 */
	int io;      /* a request on it: a stop cuts it short */
	int listed;  /* in the last heartbeat's list */
	int stop;    /* stop reading: the task left the list */
	int running; /* its thread has not ended */
	/* The task's thread only: */
	uint64_t mark; /* r->recorded after the last reply's deliveries */
	char *buf;     /* the last reply */
	size_t cap;
	struct iovec *iov; /* its payloads */
	size_t niov, capiov;
	struct chunk_id *cur, *prev; /* its chunks, the previous reply's */
	size_t ncur, capcur, nprev, capprev;
	struct chunk_id *again; /* written, and perhaps to be sent again */
	size_t nagain, capagain;
};

/* A task of a round-robin job as the last heartbeat listed it. */
struct rr_task {
	int64_t id, start;
	char addr[280];
};

/* A connection to a worker: its socket, and its TLS session for an
 * https:// address (NULL: plain). */
struct wconn {
	int fd;
	struct tls *tls;
};

/* A round-robin reader's kept-alive connection to one task. */
struct rr_conn {
	int64_t id;
	struct wconn wc;
};

struct reader {
	const struct dataread_opts *o;
	struct dispatch_client *dc;
	int64_t job, client;
	int dynamic;
	int wake[2]; /* a byte written: heartbeat soon */
	pthread_mutex_t out_mu;
	pthread_mutex_t mu; /* what follows */
	pthread_cond_t cv;  /* a stop, a report, a new list or block */
	struct ranges pend; /* delivered, not yet reported */
	int64_t *lost;      /* tasks to report lost */
	size_t nlost, caplost;
	int split_end; /* pend holds a split's total */
	/* Marks of what was recorded, and of what dispatchd has heard of. */
	uint64_t recorded, reported;
	struct task *tasks;
	int finished; /* the job, as the last heartbeat said */
	int stopping; /* the read ends: every thread stops */
	enum status fail;
	char failmsg[1024];
	int closed;       /* the output's reader went away */
	char secret[33];  /* the job's: workers ask it of its consumers */
	uint64_t written; /* elements written (atomic: out_mu may be held
	                   * long by a writer blocked on the output) */
	json_t *start;    /* the job's start position (DYNAMIC) */
	char framing[16]; /* the dataset's */
	/* Round robin: */
	struct rr_task *rr;
	size_t nrr, caprr;
	int64_t round; /* rounds below it have begun */
	int64_t block; /* block_round, -1: none */
	int rr_done;
	int rr_fd; /* the connection being read, for shutdown(2); -1 */
	pthread_t rr_thread;
	int rr_started;
};

/* Stops the read with st and its message (the first failure wins). */
static void fail_locked(struct reader *r, enum status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same, taking r->mu. */
static void fail(struct reader *r, enum status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
vfail_locked(struct reader *r, enum status st, const char *fmt, va_list ap)
{
	if (r->fail != ST_OK)
		return;
	r->fail = st;
	vsnprintf(r->failmsg, sizeof(r->failmsg), fmt, ap);
}

static void
fail_locked(struct reader *r, enum status st, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail_locked(r, st, fmt, ap);
	va_end(ap);
}

static void
fail(struct reader *r, enum status st, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&r->mu);
	va_start(ap, fmt);
	vfail_locked(r, st, fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&r->mu);
}

/* Asks the heartbeat loop to look around now. */
static void
poke(struct reader *r)
{
	ssize_t n = write(r->wake[1], "", 1);

	(void)n; /* a full pipe has pokes enough */
}

/* Delivered ranges */

/*
 * Adds a delivered range, merged with the one it continues: a task reads
 * a split in order, so a heartbeat carries about one range per split.
 */
static int
ranges_add(struct ranges *rs, int64_t seq, int64_t first, int64_t end,
    int64_t total)
{
	for (size_t i = rs->n; i-- > 0;) {
		struct range *g = &rs->v[i];
		if (g->seq == seq && g->end == first) {
			g->end = end;
			if (total >= 0)
				g->total = total;
			return 0;
		}
	}
	if (vec_grow(&rs->v, &rs->cap, rs->n + 1, sizeof(*rs->v)) < 0)
		return -1;
	rs->v[rs->n++] = (struct range){seq, first, end, total};
	return 0;
}

static void
note_range_locked(struct reader *r, const struct range *g)
{
	if (ranges_add(&r->pend, g->seq, g->first, g->end, g->total) < 0)
		fail_locked(r, ST_RESOURCE_EXHAUSTED, "out of memory");
	if (g->total >= 0)
		r->split_end = 1;
}

static void
note_lost_locked(struct reader *r, int64_t id)
{
	if (vec_grow(&r->lost, &r->caplost, r->nlost + 1, sizeof(*r->lost)) <
	    0) {
		fail_locked(r, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	r->lost[r->nlost++] = id;
}

/* Output */

/*
 * Writes iov whole. A reader that went away ends the read quietly; any
 * other failure ends it with INTERNAL. 0, or -1.
 */
static int
write_out(struct reader *r, struct iovec *iov, size_t n)
{
	while (n > 0) {
		ssize_t w =
		    writev(r->o->out, iov, n > IOV_MAX ? IOV_MAX : (int)n);
		if (w < 0) {
			int e = errno;
			if (e == EINTR)
				continue;
			pthread_mutex_lock(&r->mu);
			if (e == EPIPE)
				r->closed = 1;
			else
				fail_locked(r, ST_INTERNAL,
				    "writing the elements: %s", strerror(e));
			pthread_mutex_unlock(&r->mu);
			poke(r);
			return -1;
		}
		n = iov_advance(&iov, n, (size_t)w);
	}
	return 0;
}

/*
 * Writes one record of a positioned stream other than a chunk of data:
 * its header, then payload. 0, or -1 (as write_out).
 */
static int
write_record(struct reader *r, uint32_t type, const char *payload, size_t len)
{
	struct chunk_hdr h = {.magic = htole32(CHUNK_MAGIC),
	    .type = htole32(type),
	    .len = htole32((uint32_t)len)};
	struct iovec iov[2] = {{&h, sizeof(h)}, {(void *)payload, len}};
	int rc;

	pthread_mutex_lock(&r->out_mu);
	rc = write_out(r, iov, len > 0 ? 2 : 1);
	pthread_mutex_unlock(&r->out_mu);
	return rc;
}

/* The start record: the framing and where the job began. 0, or -1. */
static int
write_start(struct reader *r)
{
	json_t *o =
	    json_pack("{s:s,s:O}", "framing", r->framing, "start", r->start);
	char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
	int rc;

	json_decref(o);
	if (text == NULL) {
		fail(r, ST_RESOURCE_EXHAUSTED, "out of memory");
		return -1;
	}
	rc = write_record(r, CHUNK_STATE, text, strlen(text));
	free(text);
	return rc;
}

/* Workers' sockets */

/* The host of [https://]HOST:PORT or [V6]:PORT into host, and its port;
 * NULL. */
static const char *
addr_split(const char *addr, char *host, size_t size)
{
	const char *port, *h;
	size_t hlen;

	if (strncmp(addr, "https://", 8) == 0)
		addr += 8;
	h = addr;

	if (*addr == '[') {
		h = addr + 1;
		port = strchr(h, ']');
		hlen = port != NULL ? (size_t)(port - h) : 0;
		port = port != NULL && port[1] == ':' ? port + 2 : NULL;
	} else {
		port = strrchr(addr, ':');
		hlen = port != NULL ? (size_t)(port - addr) : 0;
		port = port != NULL ? port + 1 : NULL;
	}
	if (port == NULL || hlen == 0 || hlen >= size)
		return NULL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	return port;
}

/*
 * Connects the non-blocking fd within CONNECT_MS, then makes it blocking:
 * a worker's machine that vanished must not hold us for the minutes a
 * blocking connect takes. 0, or -1.
 */
static int
connect_within(int fd, const struct addrinfo *ai)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int soerr = 0;
	socklen_t sl = sizeof(soerr);

	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 &&
	    (errno != EINPROGRESS || poll(&p, 1, CONNECT_MS) != 1 ||
	        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 ||
	        soerr != 0))
		return -1;
	return fcntl(fd, F_SETFL, 0);
}

/*
 * A connection to a worker's address into wc, TLS for an https:// one
 * (trusting what MUSTER_TLS_CA_FILE, or the system, trusts): 0; -1 when
 * it cannot be reached now; -2 when TLS failed, which will not mend by
 * itself (an untrusted certificate, say), with why in err.
 */
static int
conn_open(const char *addr, int64_t io_ms, struct wconn *wc, char *err,
    size_t errlen)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
	    .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res, *ai;
	struct timeval tv = {.tv_sec = io_ms / 1000,
	    .tv_usec = (io_ms % 1000) * 1000};
	char host[256];
	const char *port = addr_split(addr, host, sizeof(host));
	int fd = -1, one = 1;

	if (port == NULL || getaddrinfo(host, port, &hints, &res) != 0)
		return -1;
	for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family,
		    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    ai->ai_protocol);
		if (fd >= 0 && connect_within(fd, ai) < 0) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	wc->fd = fd;
	wc->tls = NULL;
	if (strncmp(addr, "https://", 8) == 0) {
		/* A blocking socket: the handshake ends, or times out. */
		int rc = -2;
		err[0] = '\0';
		if ((wc->tls = tls_new(fd, host, err, errlen)) != NULL &&
		    (rc = tls_handshake(wc->tls, err, errlen)) != 0) {
			if (rc == TLS_LOST || rc == TLS_WANT_READ ||
			    rc == TLS_WANT_WRITE)
				rc = -1; /* broken, or timed out: again */
			else
				rc = -2;
		}
		if (rc != 0) {
			tls_free(wc->tls);
			close(fd);
			wc->fd = -1;
			wc->tls = NULL;
			return rc;
		}
	}
	return 0;
}

static void
conn_close(struct wconn *wc)
{
	tls_free(wc->tls);
	if (wc->fd >= 0)
		close(wc->fd);
	wc->fd = -1;
	wc->tls = NULL;
}

/* Sends all n bytes of p on wc: 0, or -1. */
static int
conn_send(struct wconn *wc, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = wc->tls != NULL ? tls_send(wc->tls, p, n) :
		                              send(wc->fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && wc->tls == NULL && errno == EINTR)
			continue;
		if (w <= 0)
			return -1; /* broken, or its timeout */
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Receives up to n bytes into p (all of them with all): the count, 0 at
 * the end, or -1 (broken, or its timeout). */
static ssize_t
conn_recv(struct wconn *wc, char *p, size_t n, int all)
{
	size_t got = 0;

	do {
		ssize_t r = wc->tls != NULL ?
		    tls_recv(wc->tls, p + got, n - got) :
		    recv(wc->fd, p + got, n - got, all ? MSG_WAITALL : 0);
		if (r < 0 && wc->tls == NULL && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			return (ssize_t)got;
		got += (size_t)r;
	} while (all && got < n);
	return (ssize_t)got;
}

/* A request on wc, showing the job's secret to the worker. */
static int
send_get(struct wconn *wc, const char *path, const char *addr,
    const char *secret)
{
	char req[640];
	int n = snprintf(req, sizeof(req),
	    "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n",
	    path, addr, secret);

	if (n < 0 || (size_t)n >= sizeof(req))
		return -1;
	return conn_send(wc, req, (size_t)n);
}

/* A worker's reply, its body inside the reader's buffer. */
struct reply {
	long code;
	const char *body;
	size_t len;
	int close; /* the worker closes the connection after it */
};

/*
 * Receives one reply into *buf (grown to fit; at least want bytes, so
 * that the first read may take a whole reply). 0, or -1 when the
 * connection broke, timed out or carried something else than a reply.
 */
static int
recv_reply(struct wconn *wc, char **buf, size_t *cap, size_t want,
    struct reply *rp)
{
	size_t have = 0, head = 0;
	struct http1_reply h;

	if (vec_grow(buf, cap, want, 1) < 0)
		return -1;
	while (head == 0) {
		ssize_t n = conn_recv(wc, *buf + have, *cap - have, 0);
		if (n <= 0)
			return -1;
		have += (size_t)n;
		head = http1_head_len(*buf, have);
		if (head == 0 && have > MAX_HEAD)
			return -1;
	}
	/* A worker's reply says how long it is. */
	if (head > MAX_HEAD || http1_parse_reply(*buf, head, &h) < 0 ||
	    h.length < 0 || (unsigned long long)h.length > MAX_REPLY ||
	    have > head + (size_t)h.length ||
	    vec_grow(buf, cap, head + (size_t)h.length, 1) < 0)
		return -1;
	while (have < head + (size_t)h.length) {
		ssize_t n = conn_recv(wc, *buf + have,
		    head + (size_t)h.length - have, 1);
		if (n <= 0)
			return -1;
		have += (size_t)n;
	}
	rp->code = h.code;
	rp->close = h.close;
	rp->body = *buf + head;
	rp->len = (size_t)h.length;
	return 0;
}

/* The message of an error reply's JSON body, or a stand-in. */
static const char *
reply_message(const struct reply *rp)
{
	static __thread char msg[512];
	json_t *o = json_loadb(rp->body, rp->len, 0, NULL);
	const char *m = json_string_value(
	    json_object_get(json_object_get(o, "error"), "message"));

	snprintf(msg, sizeof(msg), "%s", m != NULL ? m : "refused");
	json_decref(o);
	return msg;
}

/*
 * The next chunk of a reply body at *off: 1 with its header (in host
 * order) and payload, 0 at the end, -1 when the body is malformed.
 */
static int
chunk_next(const char *body, size_t len, size_t *off, struct chunk_hdr *h,
    const char **payload)
{
	if (*off == len)
		return 0;
	if (len - *off < sizeof(*h))
		return -1;
	memcpy(h, body + *off, sizeof(*h));
	h->magic = le32toh(h->magic);
	h->type = le32toh(h->type);
	h->seq = le64toh(h->seq);
	h->first = le64toh(h->first);
	h->count = le32toh(h->count);
	h->len = le32toh(h->len);
	h->flags = le32toh(h->flags);
	if (h->magic != CHUNK_MAGIC || h->len > len - *off - sizeof(*h) ||
	    h->type < CHUNK_DATA || h->type > CHUNK_ERROR)
		return -1;
	*payload = body + *off + sizeof(*h);
	*off += sizeof(*h) + h->len;
	return 1;
}

/* Tasks */

/* The CLOCK_REALTIME time ms from now, for pthread_cond_timedwait. */
static struct timespec
time_in(int64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

/* Waits ms, or less when the task is told to stop. */
static void
task_pause(struct task *t, int64_t ms)
{
	struct timespec ts = time_in(ms);

	pthread_mutex_lock(&t->r->mu);
	if (!t->stop && !t->r->stopping)
		pthread_cond_timedwait(&t->r->cv, &t->r->mu, &ts);
	pthread_mutex_unlock(&t->r->mu);
}

static int
task_stopping(struct task *t)
{
	int s;

	pthread_mutex_lock(&t->r->mu);
	s = t->stop || t->r->stopping;
	pthread_mutex_unlock(&t->r->mu);
	return s;
}

/* Publishes the task's connection (-1: none), so that it can be cut. */
static void
task_set_fd(struct task *t, int fd)
{
	pthread_mutex_lock(&t->r->mu);
	t->fd = fd;
	if (fd >= 0 && (t->stop || t->r->stopping))
		shutdown(fd, SHUT_RDWR);
	pthread_mutex_unlock(&t->r->mu);
}

/* Closes the task's connection, no longer published: a stop never cuts
 * a descriptor that has since been given to something else. */
static void
task_close(struct task *t, struct wconn *wc)
{
	pthread_mutex_lock(&t->r->mu);
	t->fd = -1;
	conn_close(wc);
	pthread_mutex_unlock(&t->r->mu);
}

/*
 * Whether h is a chunk written already that its worker sends again: a
 * connection broke before the next request acknowledged it, and the
 * worker put it back. Each is taken once.
 */
static int
sent_again(struct task *t, const struct chunk_hdr *h)
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
task_io(struct task *t, int on)
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
expect_again(struct task *t)
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
task_parse(struct task *t, const struct reply *rp)
{
	struct reader *r = t->r;
	struct chunk_hdr h;
	const char *p;
	size_t off = 0;
	int rc;

	t->niov = t->ncur = 0;
	while ((rc = chunk_next(rp->body, rp->len, &off, &h, &p)) == 1) {
		if (h.type != CHUNK_DATA) {
			if (h.type == CHUNK_END)
				return STEP_END;
			fail(r, ST_INTERNAL, "%.*s", (int)h.len, p);
			return STEP_FAIL;
		}
		if (vec_grow(&t->cur, &t->capcur, t->ncur + 1,
		        sizeof(*t->cur)) < 0 ||
		    vec_grow(&t->iov, &t->capiov, t->niov + 2,
		        sizeof(*t->iov)) < 0) {
			fail(r, ST_RESOURCE_EXHAUSTED, "out of memory");
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
	if (rc < 0) {
		fail(r, ST_INTERNAL,
		    "task %" PRId64 ": worker %s sent a malformed reply", t->id,
		    t->addr);
		return STEP_FAIL;
	}
	return STEP_AGAIN;
}

/* Records the chunks of the reply just written as delivered. */
static void
task_delivered(struct task *t)
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
			note_range_locked(r, &g);
	}
	t->mark = ++r->recorded;
	pthread_mutex_unlock(&r->mu);
}

/*
 * Writes a reply's elements (and those before an end or an error), then
 * records them; they stay held by the worker until the next request.
 */
static enum step
task_take(struct task *t, const struct reply *rp)
{
	struct reader *r = t->r;
	enum step s = task_parse(t, rp);
	struct chunk_id *swap;
	size_t cap;
	int rc;

	pthread_mutex_lock(&r->out_mu);
	rc = write_out(r, t->iov, t->niov);
	if (rc == 0) {
		for (size_t i = 0; i < t->ncur; i++)
			__atomic_add_fetch(&r->written,
			    t->cur[i].dup ? 0 : t->cur[i].count,
			    __ATOMIC_RELAXED);
		task_delivered(t);
	}
	pthread_mutex_unlock(&r->out_mu);
	/* The request acknowledged the previous reply; this one, not
	 * written, goes back when the connection closes: none to ack. */
	if (rc < 0) {
		t->nprev = 0;
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
idle_report(struct task *t, struct wconn *wc)
{
	struct pollfd p = {.fd = wc->fd, .events = POLLIN};
	int pending;

	pthread_mutex_lock(&t->r->mu);
	pending = t->r->split_end;
	pthread_mutex_unlock(&t->r->mu);
	if (pending && (wc->tls == NULL || tls_pending(wc->tls) == 0) &&
	    poll(&p, 1, IDLE_MS) == 0)
		poke(t->r);
}

/* Whether the last reply's deliveries may be acknowledged to its worker
 * (see await_report). Under r->mu. */
static int
ack_allowed_locked(const struct task *t)
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
await_report(struct task *t)
{
	struct reader *r = t->r;
	int stop;

	pthread_mutex_lock(&r->mu);
	if (!ack_allowed_locked(t))
		poke(r);
	while (!ack_allowed_locked(t) && !t->stop && !r->stopping)
		pthread_cond_wait(&r->cv, &r->mu);
	stop = t->stop || r->stopping;
	pthread_mutex_unlock(&r->mu);
	return stop ? -1 : 0;
}

/* One request for elements and its reply. */
static enum step
task_step(struct task *t, struct wconn *wc)
{
	struct reader *r = t->r;
	char path[128];
	struct reply rp;
	enum step s;
	int rc;

	if (await_report(t) < 0)
		return STEP_RETRY;

	if (wc->fd < 0) {
		char err[512];
		if ((rc = conn_open(t->addr, ELEMENTS_WAIT_MS + IO_GRACE_MS, wc,
		         err, sizeof(err))) == -2) {
			fail(r, ST_UNAVAILABLE,
			    "task %" PRId64 ": worker %s: %s", t->id, t->addr,
			    err);
			return STEP_FAIL;
		}
		if (rc < 0) {
			log_debug("task %" PRId64 ": cannot reach %s", t->id,
			    t->addr);
			return STEP_RETRY;
		}
		task_set_fd(t, wc->fd);
		if (expect_again(t) < 0) {
			fail(r, ST_RESOURCE_EXHAUSTED, "out of memory");
			return STEP_FAIL;
		}
	}
	dw_request_path(&(struct dw_request){.kind = DW_ELEMENTS,
	                    .task = (uint64_t)t->id,
	                    .has_max = 1,
	                    .max = r->o->max_bytes,
	                    .has_wait = 1,
	                    .wait_ms = ELEMENTS_WAIT_MS},
	    path, sizeof(path));
	if (task_io(t, 1) < 0)
		return STEP_RETRY;
	rc = send_get(wc, path, t->addr, r->secret) < 0 ||
	    (idle_report(t, wc),
	        recv_reply(wc, &t->buf, &t->cap, r->o->max_bytes + REPLY_SLACK,
	            &rp)) < 0;
	task_io(t, 0);
	if (rc) {
		log_debug("task %" PRId64 ": %s: the connection broke", t->id,
		    t->addr);
		task_close(t, wc);
		return STEP_RETRY;
	}
	/* Not yet known to its worker (dispatchd told us first), or
	 * refused for now: try again while the task is listed. Not the
	 * job's secret: never will be. */
	if (rp.code == status_http(ST_UNAUTHENTICATED)) {
		fail(r, ST_UNAUTHENTICATED, "task %" PRId64 " (%s): %s", t->id,
		    t->addr, reply_message(&rp));
		task_close(t, wc);
		return STEP_FAIL;
	}
	s = rp.code == 200 ? task_take(t, &rp) : STEP_RETRY;
	if (rp.code != 200)
		log_debug("task %" PRId64 ": %s replied HTTP %ld", t->id,
		    t->addr, rp.code);
	if (rp.close)
		task_close(t, wc);
	return s;
}

/*
 * Before the connection closes, acknowledges the last reply to its
 * worker, which would otherwise put it back for another reader of the
 * job: a request that asks for nothing. Only once dispatchd has heard of
 * its deliveries (see await_report); if not, or if the worker does not
 * answer in time, the reply goes back to the worker: at least once.
 */
static void
task_ack(struct task *t, struct wconn *wc)
{
	struct timeval tv = {.tv_sec = 0, .tv_usec = ACK_MS * 1000};
	char path[128];
	struct reply rp;
	int ok;

	if (t->nprev == 0)
		return;
	pthread_mutex_lock(&t->r->mu);
	ok = ack_allowed_locked(t);
	pthread_mutex_unlock(&t->r->mu);
	if (!ok)
		return;
	setsockopt(wc->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(wc->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	dw_request_path(&(struct dw_request){.kind = DW_ELEMENTS,
	                    .task = (uint64_t)t->id,
	                    .has_max = 1,
	                    .max = 0},
	    path, sizeof(path));
	if (send_get(wc, path, t->addr, t->r->secret) < 0 ||
	    recv_reply(wc, &t->buf, &t->cap, REPLY_SLACK, &rp) < 0)
		log_debug("task %" PRId64 ": %s: the last reply was not "
		          "acknowledged",
		    t->id, t->addr);
	else
		t->nprev = 0;
}

/*
 * A task's thread: reads until the task ends, the read stops, or the
 * task leaves the list; then, having written and recorded everything it
 * received, acknowledges it and reports the task lost in the last case.
 */
static void *
task_main(void *arg)
{
	struct task *t = arg;
	struct reader *r = t->r;
	int64_t backoff = BACKOFF_MIN_MS;
	int ended = 0;
	struct wconn wc = {-1, NULL};

	while (!task_stopping(t)) {
		enum step s = task_step(t, &wc);
		if (s == STEP_END)
			ended = 1;
		if (s == STEP_END || s == STEP_FAIL)
			break;
		if (s == STEP_AGAIN) {
			backoff = BACKOFF_MIN_MS;
			continue;
		}
		task_pause(t, backoff);
		backoff =
		    backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
	}
	if (wc.fd >= 0)
		task_ack(t, &wc);
	task_close(t, &wc);
	pthread_mutex_lock(&r->mu);
	/* Once a dynamic job has finished no split waits for our word. */
	if (!ended && t->stop && !(r->dynamic && r->finished))
		note_lost_locked(r, t->id);
	t->running = 0;
	pthread_mutex_unlock(&r->mu);
	poke(r);
	free(t->buf);
	free(t->iov);
	free(t->cur);
	free(t->prev);
	free(t->again);
	return NULL;
}

static void
task_stop_locked(struct task *t)
{
	t->stop = 1;
	/* Only a request is cut: between two, the connection carries the
	 * last reply's acknowledgement still to be sent. */
	if (t->fd >= 0 && t->io)
		shutdown(t->fd, SHUT_RDWR);
	pthread_cond_broadcast(&t->r->cv);
}

static struct task *
task_start_locked(struct reader *r, int64_t id, const char *addr)
{
	struct task *t = calloc(1, sizeof(*t));

	if (t == NULL || strlen(addr) >= sizeof(t->addr)) {
		free(t);
		fail_locked(r, ST_INTERNAL, "task %" PRId64 ": bad address %s",
		    id, addr);
		return NULL;
	}
	t->r = r;
	t->id = id;
	t->fd = -1;
	t->running = 1;
	snprintf(t->addr, sizeof(t->addr), "%s", addr);
	if (pthread_create(&t->thread, NULL, task_main, t) != 0) {
		free(t);
		fail_locked(r, ST_RESOURCE_EXHAUSTED,
		    "cannot start a thread: %s", strerror(errno));
		return NULL;
	}
	t->next = r->tasks;
	r->tasks = t;
	return t;
}

/* Round robin */

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
	if ((rc = conn_open(addr, ROUND_WAIT_MS + IO_GRACE_MS, &wc, err,
	         sizeof(err))) == -2)
		fail(r, ST_UNAVAILABLE, "task %" PRId64 ": worker %s: %s", id,
		    addr, err);
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
			conn_close(&conns[i].wc);
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

	while ((rc = chunk_next(rp->body, rp->len, &off, &h, &p)) == 1) {
		if (h.type == CHUNK_END)
			return STEP_END;
		if (h.type == CHUNK_ERROR) {
			fail(r, ST_INTERNAL, "%.*s", (int)h.len, p);
			return STEP_FAIL;
		}
		iov = (struct iovec){(void *)p, (size_t)h.len};
		pthread_mutex_lock(&r->out_mu);
		if ((rc = write_out(r, &iov, 1)) == 0)
			__atomic_add_fetch(&r->written, h.count,
			    __ATOMIC_RELAXED);
		pthread_mutex_unlock(&r->out_mu);
		if (rc < 0)
			return STEP_FAIL;
	}
	if (rc < 0) {
		fail(r, ST_INTERNAL,
		    "task %" PRId64 ": worker %s sent a malformed reply", t->id,
		    t->addr);
		return STEP_FAIL;
	}
	return STEP_AGAIN;
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
	if (send_get(wc, path, t->addr, r->secret) < 0 ||
	    recv_reply(wc, buf, cap, 65536, &rp) < 0)
		rp.code = 0;
	pthread_mutex_lock(&r->mu);
	r->rr_fd = -1;
	pthread_mutex_unlock(&r->mu);
	if (rp.code == 0 || rp.close)
		rr_drop(*conns, nconns, t->id);
	if (rp.code == status_http(ST_FAILED_PRECONDITION)) {
		/* A round that is over: this consumer came too late. */
		fail(r, ST_FAILED_PRECONDITION, "task %" PRId64 " (%s): %s",
		    t->id, t->addr, reply_message(&rp));
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
static void *
rr_main(void *arg)
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
			struct timespec ts = time_in(BACKOFF_MAX_MS);
			r->round = round;
			if (pause)
				pthread_cond_timedwait(&r->cv, &r->mu, &ts);
		}
	}
	pthread_mutex_unlock(&r->mu);
	poke(r);
	while (nconns > 0)
		rr_drop(conns, &nconns, conns[0].id);
	free(conns);
	free(buf);
	return NULL;
}

static int
rr_cmp(const void *a, const void *b)
{
	const struct rr_task *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

/* Heartbeats */

/* An id dispatchd sends as a number or as a decimal string; -1: none. */
static int64_t
json_id(json_t *v)
{
	char *end;
	long long n;

	if (json_is_integer(v))
		return json_integer_value(v);
	if (!json_is_string(v))
		return -1;
	errno = 0;
	n = strtoll(json_string_value(v), &end, 10);
	return *end == '\0' && errno == 0 && end != json_string_value(v) ? n :
	                                                                   -1;
}

static void
apply_tasks_locked(struct reader *r, json_t *tasks)
{
	struct task *t;
	json_t *v;
	size_t i;

	for (t = r->tasks; t != NULL; t = t->next)
		t->listed = 0;
	json_array_foreach(tasks, i, v) {
		int64_t id = json_id(json_object_get(v, "id"));
		const char *addr =
		    json_string_value(json_object_get(v, "address"));
		const char *host =
		    json_string_value(json_object_get(v, "host"));

		if (id <= 0)
			continue;
		if (addr == NULL ||
		    (r->o->host != NULL &&
		        (host == NULL || strcmp(host, r->o->host) != 0))) {
			/* Not read here: dispatchd must not wait for this
			 * reader to let the task's splits go if it dies. */
			note_lost_locked(r, id);
			continue;
		}
		for (t = r->tasks; t != NULL && t->id != id; t = t->next)
			;
		if (t == NULL && !r->stopping)
			t = task_start_locked(r, id, addr);
		if (t != NULL)
			t->listed = 1;
	}
	/* A dynamic job that finished has had every element delivered:
	 * what is left in flight can only be a copy. */
	for (t = r->tasks; t != NULL; t = t->next)
		if (t->running && !t->stop &&
		    (!t->listed || (r->dynamic && r->finished)))
			task_stop_locked(t);
}

static void
apply_rr_locked(struct reader *r, json_t *reply)
{
	json_t *tasks = json_object_get(reply, "tasks"), *v;
	json_t *b = json_object_get(reply, "block_round");
	size_t i, n = 0;

	if (vec_grow(&r->rr, &r->caprr, json_array_size(tasks),
	        sizeof(*r->rr)) < 0) {
		fail_locked(r, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	json_array_foreach(tasks, i, v) {
		const char *addr =
		    json_string_value(json_object_get(v, "address"));
		struct rr_task *t = &r->rr[n];

		t->id = json_id(json_object_get(v, "id"));
		t->start =
		    json_integer_value(json_object_get(v, "starting_round"));
		if (t->id <= 0 || addr == NULL ||
		    strlen(addr) >= sizeof(t->addr))
			continue;
		snprintf(t->addr, sizeof(t->addr), "%s", addr);
		n++;
	}
	r->nrr = n;
	qsort(r->rr, n, sizeof(*r->rr), rr_cmp);
	r->block = json_is_integer(b) ? json_integer_value(b) : -1;
	pthread_cond_broadcast(&r->cv);
}

/* The heartbeat's body; takes the deliveries and losses it reports. */
static json_t *
heartbeat_body(struct reader *r, struct ranges *sent, int64_t **lost,
    size_t *nlost, uint64_t *mark)
{
	json_t *body = json_object(), *a;

	pthread_mutex_lock(&r->mu);
	*mark = r->recorded;
	*sent = r->pend;
	r->pend = (struct ranges){0};
	r->split_end = 0;
	*lost = r->lost;
	*nlost = r->nlost;
	r->lost = NULL;
	r->nlost = r->caplost = 0;
	if (r->o->consumers > 0) {
		json_object_set_new(body, "round", json_integer(r->round));
		/* The promise: round block will not begin before dispatchd
		 * lets go, which rr_main keeps. */
		if (r->block >= 0 && r->round <= r->block)
			json_object_set_new(body, "blocked_round",
			    json_integer(r->block));
	}
	pthread_mutex_unlock(&r->mu);
	if (sent->n > 0) {
		a = json_array();
		for (size_t i = 0; i < sent->n; i++)
			json_array_append_new(a,
			    json_pack("[IIII]", (json_int_t)sent->v[i].seq,
			        (json_int_t)sent->v[i].first,
			        (json_int_t)sent->v[i].end,
			        (json_int_t)sent->v[i].total));
		json_object_set_new(body, "delivered", a);
	}
	if (*nlost > 0) {
		a = json_array();
		for (size_t i = 0; i < *nlost; i++)
			json_array_append_new(a, json_integer((*lost)[i]));
		json_object_set_new(body, "lost", a);
	}
	return body;
}

/*
 * One heartbeat: reports what was delivered and lost (kept for the next
 * one when dispatchd does not answer), and takes in the task list.
 */
static enum status
heartbeat(struct reader *r, int64_t deadline, char *err, size_t errlen)
{
	struct ranges sent;
	int64_t *lost;
	size_t nlost;
	uint64_t mark;
	json_t *body = heartbeat_body(r, &sent, &lost, &nlost, &mark), *reply;
	const char *error;
	enum status st;

	st = dc_client_beat(r->dc, r->client, body, deadline, &reply);
	json_decref(body);
	pthread_mutex_lock(&r->mu);
	if (st != ST_OK) {
		for (size_t i = 0; i < sent.n; i++)
			note_range_locked(r, &sent.v[i]);
		for (size_t i = 0; i < nlost; i++)
			note_lost_locked(r, lost[i]);
		snprintf(err, errlen, "job client %" PRId64 ": %s", r->client,
		    dispatch_client_error(r->dc));
	} else if ((error = json_string_value(
	                json_object_get(reply, "error"))) != NULL) {
		st = ST_INTERNAL;
		snprintf(err, errlen, "%s", error);
	} else {
		if (mark > r->reported) {
			r->reported = mark;
			pthread_cond_broadcast(&r->cv);
		}
		r->finished = json_is_true(json_object_get(reply, "finished"));
		if (r->o->consumers > 0)
			apply_rr_locked(r, reply);
		else
			apply_tasks_locked(r, json_object_get(reply, "tasks"));
	}
	pthread_mutex_unlock(&r->mu);
	json_decref(reply);
	free(sent.v);
	free(lost);
	return st;
}

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
		for (struct task *t = r->tasks; t != NULL; t = t->next)
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

/* Heartbeats until the read is over. */
static enum status
run(struct reader *r, char *err, size_t errlen)
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
		st = heartbeat(r, deadline, err, errlen);
		now = duration_now_ms();
		if (st == ST_OK)
			last_ok = now;
		else if (!unreachable(st))
			return st;
		else if (o->timeout_ms >= 0 && now >= last_ok + o->timeout_ms)
			return ST_UNAVAILABLE; /* err says why */
		if (read_over(r, &st, err, errlen))
			return st;
		if (wait_turn(r, now)) {
			snprintf(err, errlen, "stopped by a signal");
			return ST_CANCELLED;
		}
	}
}

/* The job */

static json_t *
job_body(const struct dataread_opts *o)
{
	json_t *body = json_pack("{s:s,s:s,s:I,s:I}", "dataset", o->dataset,
	    "mode", o->mode != NULL ? o->mode : "dynamic", "repeat",
	    (json_int_t)o->repeat, "seed", (json_int_t)o->seed);

	if (body == NULL)
		return NULL;
	if (o->job != NULL)
		json_object_set_new(body, "name", json_string(o->job));
	if (o->job != NULL && o->run != NULL)
		json_object_set_new(body, "run", json_string(o->run));
	if (o->consumers > 0) {
		json_object_set_new(body, "consumers",
		    json_integer(o->consumers));
		json_object_set_new(body, "consumer_index",
		    json_integer(o->consumer_index));
	}
	if (o->from_state != NULL) {
		/* A state names seqs of one order of splits: the job goes on
		 * in that order. */
		json_object_set(body, "from_state", o->from_state);
		json_object_set(body, "seed",
		    json_object_get(o->from_state, "seed"));
		json_object_set(body, "repeat",
		    json_object_get(o->from_state, "repeat"));
	}
	return body;
}

/* Creates or joins the job: a job client of our own. */
static enum status
job_open(struct reader *r, char *err, size_t errlen)
{
	json_t *body = job_body(r->o), *reply;
	const char *mode;
	enum status st;

	if (body == NULL) {
		snprintf(err, errlen, "dataset %s: not UTF-8", r->o->dataset);
		return ST_INVALID_ARGUMENT;
	}
	/* Not repeated once it may have landed: each call makes a client. */
	st = dc_job_open(r->dc, body,
	    r->o->timeout_ms >= 0 ? duration_now_ms() + r->o->timeout_ms :
	                            HTTP_NO_DEADLINE,
	    &reply);
	json_decref(body);
	if (st != ST_OK) {
		snprintf(err, errlen, "%s", dispatch_client_error(r->dc));
		return st;
	}
	r->job = json_id(json_object_get(reply, "job"));
	r->client = json_id(json_object_get(reply, "client"));
	/* file_or_data comes back resolved; dynamic stays dynamic. */
	if ((mode = json_string_value(json_object_get(reply, "mode"))) == NULL)
		mode = r->o->mode != NULL ? r->o->mode : "dynamic";
	r->dynamic = strcmp(mode, "dynamic") == 0;
	r->start = json_incref(json_object_get(reply, "start"));
	snprintf(r->secret, sizeof(r->secret), "%s",
	    json_string_value(json_object_get(reply, "secret")) != NULL ?
	        json_string_value(json_object_get(reply, "secret")) :
	        "");
	snprintf(r->framing, sizeof(r->framing), "%s",
	    json_string_value(json_object_get(reply, "framing")) != NULL ?
	        json_string_value(json_object_get(reply, "framing")) :
	        "lines");
	json_decref(reply);
	if (r->client <= 0) {
		snprintf(err, errlen, "dispatchd's job reply names no client");
		return ST_INTERNAL;
	}
	if (r->o->positions && (!r->dynamic || r->start == NULL)) {
		snprintf(err, errlen,
		    "job %" PRId64 " reads in mode %s: only dynamic jobs have "
		    "positions",
		    r->job, mode);
		return ST_FAILED_PRECONDITION;
	}
	log_debug("job %" PRId64 ", client %" PRId64, r->job, r->client);
	return ST_OK;
}

/*
 * Stops every thread and waits for them a while: one blocked writing to
 * a reader that neither reads nor goes away is left to the process's
 * end. 1 when all are gone.
 */
static int
stop_threads(struct reader *r)
{
	struct timespec ts;
	int all = 1;

	pthread_mutex_lock(&r->mu);
	r->stopping = 1;
	for (struct task *t = r->tasks; t != NULL; t = t->next)
		if (t->fd >= 0 && t->io)
			shutdown(t->fd, SHUT_RDWR);
	if (r->rr_fd >= 0)
		shutdown(r->rr_fd, SHUT_RDWR);
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	ts = time_in(JOIN_MS);
	for (struct task *t = r->tasks; t != NULL; t = t->next)
		if (pthread_timedjoin_np(t->thread, NULL, &ts) != 0)
			all = 0;
	if (r->rr_started && pthread_timedjoin_np(r->rr_thread, NULL, &ts) != 0)
		all = 0;
	return all;
}

/* The last report and the release of the job client, on every path. */
static void
farewell(struct reader *r, enum status st)
{
	char err[256];
	int64_t deadline = duration_now_ms() + FAREWELL_MS;
	int more;

	dispatch_client_set_cancel(r->dc, -1);
	if (st == ST_NOT_FOUND)
		return; /* the client is gone already */
	pthread_mutex_lock(&r->mu);
	more = r->pend.n > 0 || r->nlost > 0;
	pthread_mutex_unlock(&r->mu);
	if (more)
		heartbeat(r, deadline, err, sizeof(err));
	if (dc_client_release(r->dc, r->client, deadline) != ST_OK)
		log_debug("releasing job client %" PRId64 ": %s", r->client,
		    dispatch_client_error(r->dc));
}

static void
reader_free(struct reader *r)
{
	while (r->tasks != NULL) {
		struct task *t = r->tasks;
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
	enum status st;
	int all, closed;

	if (r == NULL || pipe2(r->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		free(r);
		snprintf(err, errlen, "out of resources: %s", strerror(errno));
		return ST_RESOURCE_EXHAUSTED;
	}
	r->o = o;
	r->dc = dc;
	r->block = -1;
	r->rr_fd = -1;
	pthread_mutex_init(&r->mu, NULL);
	pthread_mutex_init(&r->out_mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	/* A deep pipe lets the reader downstream drain one reply while the
	 * next one arrives; not a pipe, or not allowed: no matter. */
	fcntl(o->out, F_SETPIPE_SZ, 1 << 20);
	dispatch_client_set_cancel(dc, o->stop_fd);
	if ((st = job_open(r, err, errlen)) != ST_OK) {
		/* Refused after the job client was made: it goes. */
		if (r->client > 0)
			farewell(r, st);
		dispatch_client_set_cancel(dc, -1);
		reader_free(r);
		return st;
	}
	/* A failed write ends the read as any other would. */
	if (o->positions)
		(void)write_start(r);
	if (o->consumers > 0) {
		if (pthread_create(&r->rr_thread, NULL, rr_main, r) == 0)
			r->rr_started = 1;
		else
			fail_locked(r, ST_RESOURCE_EXHAUSTED,
			    "cannot start a thread: %s", strerror(errno));
	}
	st = run(r, err, errlen);
	/* Threads still blocked on the output keep r: the process ends. */
	all = stop_threads(r);
	pthread_mutex_lock(&r->mu);
	closed = r->closed;
	pthread_mutex_unlock(&r->mu);
	/* The end of the data, which a consumer tells from a read that was
	 * cut short. */
	if (st == ST_OK && o->positions && !closed &&
	    write_record(r, CHUNK_END, NULL, 0) < 0)
		read_over(r, &st, err, errlen);
	farewell(r, st);
	if (all)
		reader_free(r);
	return st;
}

enum status
dataread_splits(const char *addr, const char *dataset, int64_t deadline,
    struct buf *out, char *err, size_t errlen)
{
	struct dispatch_client *dc = dispatch_client_new(addr, err, errlen);
	enum status st;

	if (dc == NULL)
		return ST_INVALID_ARGUMENT;
	if ((st = dc_splits(dc, dataset, deadline, out)) != ST_OK)
		snprintf(err, errlen, "%s", dispatch_client_error(dc));
	dispatch_client_free(dc);
	return st;
}
