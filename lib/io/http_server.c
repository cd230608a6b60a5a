#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <gnutls/gnutls.h>
#include <microhttpd.h>

#include "buf.h"
#include "duration.h"
#include "http_server.h"
#include "log.h"
#include "text.h"
#include "vec.h"

/*
 * How long a connection may take to send a request. A connection that is
 * not in a request (idle between requests, or still sending the request
 * line and headers) is closed after REQUEST_TIMEOUT_MS: a slowloris client
 * trickling a byte a minute holds it no longer than an idle one. A body
 * must arrive within as long again plus a second for every BODY_MIN_RATE
 * bytes received (Apache's mod_reqtimeout, body=60,MinRate=1024). Once the
 * request is whole, libmicrohttpd's own timeout (IDLE_TIMEOUT_S without any
 * progress) covers the reply; a parked request has none.
 */
#define REQUEST_TIMEOUT_MS 60000
#define BODY_MIN_RATE 1024
#define IDLE_TIMEOUT_S 90
/*
 * Descriptors kept out of the connection limit: the listening socket, the
 * log, each worker's epoll and wake-up descriptors, the door thread's, the
 * connections closing in the background (LINGER_MAX), and the daemon's own
 * files (a port file, a journal).
 */
#define FD_RESERVE 64
#define LINGER_MAX 32
#define LINGER_MS 2000
#define MAX_WORKERS 128

/* Per worker thread: time spent in handlers, to tell a busy coordd from a
 * silent client (http_attention). */
struct worker_clock {
	atomic_llong busy_total; /* ms, handlers that returned */
	atomic_llong busy_since; /* start of the running handler, or 0 */
};

struct conn;

struct http_server {
	struct MHD_Daemon *mhd;
	struct http_server_config cfg;
	int port;
	atomic_ulong requests;
	atomic_ulong parked;
	atomic_long open; /* requests not yet completed */
	atomic_long conns;
	atomic_ulong refused, abandoned, timed_out, body_refused;
	atomic_llong inflight; /* bytes of request bodies held */
	unsigned max_conns;
	size_t max_inflight;
	int64_t request_timeout;
	uintptr_t pagesize;
	struct worker_clock clock[MAX_WORKERS];
	atomic_int nworkers;

	/*
	 * The door thread: it watches the sockets of parked requests for a
	 * client that went away, closes connections too slow to send their
	 * request, and drains the connections closed with unread input (so
	 * that an error reply is not lost to a reset).
	 */
	pthread_mutex_t cmu; /* guards what follows */
	struct conn *conns_head;
	struct conn **byfd; /* fd -> connection */
	size_t nbyfd;
	uint32_t gen;
	int door_ep, door_wake;
	pthread_t door;
	int door_started;
	struct {
		int fd;
		int64_t until;
	} linger[LINGER_MAX];
	int nlinger;
	int64_t refused_logged, timed_out_logged; /* counts already said */

	/* Replies held until the journal has their changes (cfg.gate). */
	pthread_mutex_t gmu; /* guards what follows */
	struct http_req *gated;
	uint64_t durable, failed;      /* every change up to these */
	_Atomic uint64_t durable_seen; /* durable, read without gmu */
	int failed_err;
	int64_t refused_said_at, timed_out_said_at;
};

struct arg {
	struct arg *next;
	char *name;
	char *value;
};

struct hdr {
	struct hdr *next;
	char *name;
	char *value;
};

struct http_shared {
	struct MHD_Response *mhd;
	unsigned code;
	atomic_int refs;
};

struct http_req {
	struct http_server *srv;
	struct MHD_Connection *conn;
	struct conn *cs;
	const char *method;
	const char *path;
	struct buf body;
	struct arg *args;
	struct hdr *hdrs;
	void *data;
	struct MHD_Response *resp;  /* the reply, once there is one, */
	struct http_shared *shared; /* or a shared one */
	unsigned code;
	atomic_int refs; /* libmicrohttpd's, and the door thread's */
	size_t counted;  /* body bytes counted in srv->inflight */
	unsigned char too_large;
	unsigned char over_budget;
	unsigned char in_handler;
	unsigned char parked;
	unsigned char held;
	/* With a gate: the change its reply waits for (0: not waited yet). */
	uint64_t gate_seq;
	struct http_req *gate_next; /* on srv->gated */
	int wrote;                  /* it made a change */
	int gate_err; /* its change failed (errno), or its append did */
};

/*
 * Leaves the URL as sent: keys are decoded by us, so that an escaped NUL or
 * a bad escape is an error instead of a silently shortened key.
 */
static size_t
unescape_none(void *cls, struct MHD_Connection *c, char *s)
{
	(void)cls;
	(void)c;
	return strlen(s);
}

const char *
http_req_method(const struct http_req *req)
{
	return req->method;
}

const char *
http_req_path(const struct http_req *req)
{
	return req->path;
}

const char *
http_req_header(const struct http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *
http_req_body(const struct http_req *req, size_t *len)
{
	*len = req->body.len;
	return req->body.data != NULL ? req->body.data : "";
}

void
http_req_set_data(struct http_req *req, void *data)
{
	req->data = data;
}

void *
http_req_data(const struct http_req *req)
{
	return req->data;
}

const char *
http_req_arg(struct http_req *req, const char *name)
{
	const char *raw;
	struct buf b = {0};
	struct arg *a;

	for (a = req->args; a != NULL; a = a->next)
		if (strcmp(a->name, name) == 0)
			return a->value;
	raw =
	    MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
	if (raw == NULL)
		return NULL;
	if (text_url_decode(&b, raw, strlen(raw), 1) < 0 ||
	    (a = calloc(1, sizeof(*a))) == NULL) {
		buf_free(&b);
		return NULL;
	}
	a->name = strdup(name);
	a->value = buf_take(&b, NULL);
	if (a->name == NULL) {
		free(a->value);
		free(a);
		return NULL;
	}
	a->next = req->args;
	req->args = a;
	return a->value;
}

int
http_set_header(struct http_req *req, const char *name, const char *value)
{
	struct hdr *h = calloc(1, sizeof(*h));

	if (h == NULL || (h->name = strdup(name)) == NULL ||
	    (h->value = strdup(value)) == NULL) {
		if (h != NULL)
			free(h->name);
		free(h);
		return -1;
	}
	h->next = req->hdrs;
	req->hdrs = h;
	return 0;
}

static void
free_hdrs(struct http_req *req)
{
	struct hdr *h, *next;

	for (h = req->hdrs; h != NULL; h = next) {
		next = h->next;
		free(h->name);
		free(h->value);
		free(h);
	}
	req->hdrs = NULL;
}

/* Gives back the request body's share of the in-flight budget. */
static void
body_free(struct http_req *req)
{
	atomic_fetch_sub(&req->srv->inflight, (long long)req->counted);
	req->counted = 0;
	buf_free(&req->body);
}

static void
req_unref(struct http_req *req)
{
	struct arg *a, *next;

	if (atomic_fetch_sub(&req->refs, 1) != 1)
		return;
	free_hdrs(req);
	for (a = req->args; a != NULL; a = next) {
		next = a->next;
		free(a->name);
		free(a->value);
		free(a);
	}
	if (req->resp != NULL)
		MHD_destroy_response(req->resp);
	http_shared_release(req->shared);
	body_free(req);
	free(req);
}

/*
 * What libmicrohttpd may use for one connection's request line and headers,
 * and what a parked request costs: libmicrohttpd clears the whole pool after
 * each reply, so every byte of it ends up resident. 8 KiB holds a request
 * for the longest key (2048 bytes, percent-encoded to three times that) with
 * room left.
 */
#define POOL_SIZE (8 * 1024)

/*
 * A parked request is answered in a burst with thousands of others, and
 * libmicrohttpd clears its connection's pool after the reply. On a
 * connection that has not replied before, that clear is the first write to
 * most of the pool: a page fault or two per reply, in the middle of the
 * burst, and half of the burst's cost when the connections are new. So the
 * pool's pages are made resident now, while the request parks. The pool
 * starts with the request line, so it begins where the method does, just
 * before the path. Pages are only mapped, never written.
 */
static void
prefault_pool(const struct http_req *req)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t page = req->srv->pagesize, start, lo, hi;

	start = (uintptr_t)req->path - strlen(req->method) - 1;
	lo = start & ~(page - 1);
	hi = (start + POOL_SIZE + page - 1) & ~(page - 1);
	/* Older kernels say EINVAL: the faults then come with the reply. */
	(void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
#else
	(void)req;
#endif
}

/*
 * A connection, from accept to close. The door thread finds it by its
 * descriptor (byfd, under cmu) and tells a reused descriptor from the
 * one it watched by gen.
 */
struct conn {
	struct conn *prev, *next; /* on conns_head, under cmu */
	int fd;
	uint32_t gen;
	/*
	 * Whether its pool is resident: once prefaulted, and once a reply
	 * has cleared it; a connection that parks again and again (a task's
	 * long poll in a loop) pays for the madvise only the first time.
	 */
	unsigned char resident;
	/* The client's certificate, checked once: 0 not yet, else 2 + the
	 * answer of http_req_peer_verified. Only the request's thread. */
	signed char peer;
	struct http_req *parked; /* watched for its client leaving (cmu) */
	/* The request's progress, for the sweep (monotonic ms; 0: none). */
	atomic_llong ready_at;  /* waiting for a request since */
	atomic_llong body_from; /* reading a body since */
	atomic_llong body_bytes;
};

static int64_t
now_ms(void)
{
	return duration_now_ms();
}

int
http_req_peer_verified(const struct http_req *req)
{
	const union MHD_ConnectionInfo *ci;
	unsigned status = 0;
	int rc, v;

	if (req->srv->cfg.tls_trust == NULL)
		return 0;
	if (req->cs != NULL && req->cs->peer != 0)
		return req->cs->peer - 2;
	ci = MHD_get_connection_info(req->conn,
	    MHD_CONNECTION_INFO_GNUTLS_SESSION);
	if (ci == NULL || ci->tls_session == NULL)
		return 0;
	rc = gnutls_certificate_verify_peers2((gnutls_session_t)ci->tls_session,
	    &status);
	if (rc == GNUTLS_E_NO_CERTIFICATE_FOUND)
		v = 0;
	else
		v = rc == 0 && status == 0 ? 1 : -1;
	if (req->cs != NULL)
		req->cs->peer = (signed char)(v + 2);
	return v;
}

/* Records c under its descriptor; -1 on ENOMEM. Under cmu. */
static int
byfd_put(struct http_server *srv, struct conn *c)
{
	if ((size_t)c->fd >= srv->nbyfd) {
		size_t was = srv->nbyfd;

		if (vec_grow(&srv->byfd, &srv->nbyfd, (size_t)c->fd + 1,
		        sizeof(*srv->byfd)) < 0)
			return -1;
		memset(srv->byfd + was, 0,
		    (srv->nbyfd - was) * sizeof(*srv->byfd));
	}
	srv->byfd[c->fd] = c;
	return 0;
}

/* Stops watching c's parked request, if it was. Under cmu. */
static void
unwatch(struct http_server *srv, struct conn *c)
{
	if (c->parked != NULL) {
		c->parked = NULL;
		epoll_ctl(srv->door_ep, EPOLL_CTL_DEL, c->fd, NULL);
	}
}

static void linger_close(struct http_server *srv, int fd);

static void
on_connection(void *cls, struct MHD_Connection *mc, void **ctx,
    enum MHD_ConnectionNotificationCode code)
{
	struct http_server *srv = cls;
	struct conn *c = *ctx;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc,
		    MHD_CONNECTION_INFO_CONNECTION_FD);

		atomic_fetch_add(&srv->conns, 1);
		if (ci == NULL || (c = calloc(1, sizeof(*c))) == NULL)
			return;
		c->fd = ci->connect_fd;
		atomic_init(&c->ready_at, now_ms());
		pthread_mutex_lock(&srv->cmu);
		c->gen = ++srv->gen;
		if (byfd_put(srv, c) < 0) {
			pthread_mutex_unlock(&srv->cmu);
			free(c);
			return;
		}
		c->next = srv->conns_head;
		if (c->next != NULL)
			c->next->prev = c;
		srv->conns_head = c;
		pthread_mutex_unlock(&srv->cmu);
		*ctx = c;
		return;
	}
	atomic_fetch_sub(&srv->conns, 1);
	if (c == NULL)
		return;
	/* libmicrohttpd closes the descriptor only after this returns. */
	pthread_mutex_lock(&srv->cmu);
	unwatch(srv, c);
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		srv->conns_head = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	if ((size_t)c->fd < srv->nbyfd && srv->byfd[c->fd] == c)
		srv->byfd[c->fd] = NULL;
	linger_close(srv, c->fd);
	pthread_mutex_unlock(&srv->cmu);
	free(c);
	*ctx = NULL;
}

void
http_park(struct http_req *req)
{
	struct conn *cs = req->cs;
	struct http_server *srv = req->srv;

	if (cs == NULL || !cs->resident) {
		prefault_pool(req);
		if (cs != NULL)
			cs->resident = 1;
	}
	req->parked = 1;
	req->in_handler = 2;
	atomic_fetch_add(&srv->parked, 1);
	/* A client that goes away while its request waits is noticed. */
	if (cs != NULL && srv->cfg.gone != NULL && srv->door_started) {
		struct epoll_event ev = {.events = EPOLLRDHUP,
		    .data.u64 = (uint64_t)cs->fd << 32 | cs->gen};

		pthread_mutex_lock(&srv->cmu);
		if (epoll_ctl(srv->door_ep, EPOLL_CTL_ADD, cs->fd, &ev) == 0)
			cs->parked = req;
		pthread_mutex_unlock(&srv->cmu);
	}
	MHD_suspend_connection(req->conn);
}

static void
unref_blob(void *cls)
{
	blob_unref(cls);
}

/* A response over the bytes of b, which it holds until it is freed. */
static struct MHD_Response *
blob_response(struct blob *b)
{
	struct MHD_Response *r =
	    MHD_create_response_from_buffer_with_free_callback_cls(b->len,
	        b->data, unref_blob, b);

	if (r != NULL)
		blob_ref(b);
	return r;
}

/* A shared reply over the response r (NULL: out of memory). */
static struct http_shared *
shared_of(int http_status, const char *ctype, struct MHD_Response *r)
{
	struct http_shared *sh;

	if (r == NULL)
		return NULL;
	if ((sh = calloc(1, sizeof(*sh))) == NULL) {
		MHD_destroy_response(r);
		return NULL;
	}
	sh->mhd = r;
	if (ctype != NULL)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	sh->code = (unsigned)http_status;
	atomic_init(&sh->refs, 1);
	return sh;
}

struct http_shared *
http_shared_new(int http_status, const char *ctype, const void *body,
    size_t len)
{
	return shared_of(http_status, ctype,
	    MHD_create_response_from_buffer(len, (void *)body,
	        MHD_RESPMEM_MUST_COPY));
}

struct http_shared *
http_shared_json(int http_status, json_t *obj)
{
	char *s = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;
	struct http_shared *sh;

	json_decref(obj);
	if (s == NULL)
		return NULL;
	sh = http_shared_new(http_status, "application/json", s, strlen(s));
	free(s);
	return sh;
}

struct http_shared *
http_shared_blob(int http_status, const char *ctype, struct blob *b)
{
	return shared_of(http_status, ctype, blob_response(b));
}

int
http_shared_header(struct http_shared *sh, const char *name, const char *value)
{
	return MHD_add_response_header(sh->mhd, name, value) == MHD_YES ? 0 :
	                                                                  -1;
}

void
http_shared_release(struct http_shared *sh)
{
	if (sh != NULL && atomic_fetch_sub(&sh->refs, 1) == 1) {
		MHD_destroy_response(sh->mhd);
		free(sh);
	}
}

/* Resumes a parked request whose reply is now set. */
static void
resume(struct http_req *req)
{
	/*
	 * The waker may run while the parking handler has not yet returned;
	 * libmicrohttpd allows that, and its lock orders the writes of the
	 * reply before the handler thread reads them.
	 */
	if (req->parked && !req->held) {
		struct http_server *srv = req->srv;

		req->parked = 0;
		atomic_fetch_sub(&srv->parked, 1);
		if (req->cs != NULL && srv->cfg.gone != NULL) {
			pthread_mutex_lock(&srv->cmu);
			if (req->cs->parked == req)
				unwatch(srv, req->cs);
			pthread_mutex_unlock(&srv->cmu);
		}
		MHD_resume_connection(req->conn);
	}
}

static int
second_reply(struct http_req *req)
{
	if (req->resp == NULL && req->shared == NULL)
		return 0;
	log_info("internal: second reply to %s %s", req->method, req->path);
	return 1;
}

void
http_req_hold(struct http_req *req)
{
	req->held = 1;
}

void
http_req_release(struct http_req *req)
{
	req->held = 0;
	if (req->resp != NULL || req->shared != NULL)
		resume(req);
}

void
http_reply_shared(struct http_req *req, struct http_shared *sh)
{
	if (second_reply(req))
		return;
	atomic_fetch_add(&sh->refs, 1);
	req->shared = sh;
	free_hdrs(req);
	resume(req);
}

/* Sets r (NULL: out of memory) as req's reply, and resumes it. */
static void
set_reply(struct http_req *req, int http_status, const char *ctype,
    struct MHD_Response *r)
{
	struct hdr *h;

	if (r == NULL) {
		/* Out of memory: closing the connection is all that is left. */
		r = MHD_create_response_from_buffer(0, (void *)"",
		    MHD_RESPMEM_PERSISTENT);
		http_status = 500;
	}
	if (ctype != NULL)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	for (h = req->hdrs; h != NULL; h = h->next)
		MHD_add_response_header(r, h->name, h->value);
	free_hdrs(req);
	req->resp = r;
	req->code = (unsigned)http_status;
	resume(req);
}

void
http_reply(struct http_req *req, int http_status, const char *ctype,
    const void *body, size_t len)
{
	if (!second_reply(req))
		set_reply(req, http_status, ctype,
		    MHD_create_response_from_buffer(len, (void *)body,
		        MHD_RESPMEM_MUST_COPY));
}

void
http_reply_blob(struct http_req *req, int http_status, const char *ctype,
    struct blob *b)
{
	if (!second_reply(req))
		set_reply(req, http_status, ctype, blob_response(b));
}

void
http_reply_json(struct http_req *req, int http_status, json_t *obj)
{
	char *s = obj != NULL ? json_dumps(obj, JSON_COMPACT) : NULL;

	json_decref(obj);
	if (s == NULL) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	http_reply(req, http_status, "application/json", s, strlen(s));
	free(s);
}

static void
vreply_error(struct http_req *req, int http, enum status st, json_t *extra,
    const char *fmt, va_list ap)
{
	char msg[1024];
	json_t *obj;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* Messages may quote user input: keep the JSON valid whatever it is. */
	if (!text_utf8_valid(msg, strlen(msg)))
		snprintf(msg, sizeof(msg), "%s (message not UTF-8)",
		    status_name(st));
	obj = json_pack("{s:{s:s,s:s}}", "error", "code", status_name(st),
	    "message", msg);
	if (obj != NULL && extra != NULL)
		json_object_update(obj, extra);
	json_decref(extra);
	if (obj == NULL) {
		http_reply(req, http, "text/plain", msg, strlen(msg));
		return;
	}
	http_reply_json(req, http, obj);
}

void
http_reply_error(struct http_req *req, enum status st, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreply_error(req, status_http(st), st, NULL, fmt, ap);
	va_end(ap);
}

void
http_reply_error_http(struct http_req *req, int http_status, enum status st,
    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreply_error(req, http_status, st, NULL, fmt, ap);
	va_end(ap);
}

void
http_reply_error_json(struct http_req *req, enum status st, json_t *extra,
    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreply_error(req, status_http(st), st, extra, fmt, ap);
	va_end(ap);
}

/* The request whose handler runs on this thread, for http_note_write. */
static _Thread_local struct http_req *running_req;

void
http_note_write(uint64_t seq)
{
	struct http_req *req = running_req;

	if (req == NULL)
		return;
	if (seq == 0)
		req->gate_err = errno != 0 ? errno : EIO;
	else
		req->wrote = 1;
}

/* Replaces req's reply with the error its failed change calls for. */
static void
reply_not_durable(struct http_req *req)
{
	int e = req->gate_err;
	int full = e == ENOSPC || e == EDQUOT || e == EFBIG;

	if (req->shared != NULL) {
		http_shared_release(req->shared);
		req->shared = NULL;
	}
	if (req->resp != NULL) {
		MHD_destroy_response(req->resp);
		req->resp = NULL;
	}
	http_reply_error(req, full ? ST_RESOURCE_EXHAUSTED : ST_INTERNAL,
	    "the change could not be written to the state directory (%s): "
	    "its outcome is unknown, and changes are refused until it can "
	    "be written again",
	    strerror(e));
}

/*
 * Whether req's reply must wait for the journal: it then waits on
 * srv->gated, its connection suspended, for http_server_durable.
 */
static int
gate_holds(struct http_req *req)
{
	struct http_server *srv = req->srv;
	uint64_t seq;
	int held = 0;

	if (srv->cfg.gate == NULL)
		return 0;
	if (req->gate_seq != 0 || req->gate_err != 0) {
		/* Released: or refused at once. */
		if (req->gate_err != 0 && (req->wrote || req->gate_seq == 0))
			reply_not_durable(req);
		return 0;
	}
	if ((seq = srv->cfg.gate(srv->cfg.gate_arg)) == 0 ||
	    seq <= atomic_load(&srv->durable_seen))
		return 0;
	if (srv->cfg.gate_flush != NULL)
		srv->cfg.gate_flush(srv->cfg.gate_arg, seq);
	pthread_mutex_lock(&srv->gmu);
	if (seq > srv->durable) {
		if (seq <= srv->failed) {
			req->gate_err = srv->failed_err;
		} else {
			req->gate_seq = seq;
			req->gate_next = srv->gated;
			srv->gated = req;
			held = 1;
		}
	}
	pthread_mutex_unlock(&srv->gmu);
	if (held)
		MHD_suspend_connection(req->conn);
	else if (req->gate_err != 0 && req->wrote)
		reply_not_durable(req);
	return held;
}

void
http_server_durable(struct http_server *srv, uint64_t seq, int err)
{
	struct http_req **pp, *req, *go = NULL;

	pthread_mutex_lock(&srv->gmu);
	if (err == 0) {
		if (seq > srv->durable) {
			srv->durable = seq;
			atomic_store(&srv->durable_seen, seq);
		}
	} else if (seq > srv->failed) {
		srv->failed = seq;
		srv->failed_err = err;
	}
	for (pp = &srv->gated; (req = *pp) != NULL;) {
		if (req->gate_seq <= seq) {
			*pp = req->gate_next;
			if (err != 0)
				req->gate_err = err;
			req->gate_next = go;
			go = req;
		} else {
			pp = &req->gate_next;
		}
	}
	pthread_mutex_unlock(&srv->gmu);
	while ((req = go) != NULL) {
		go = req->gate_next;
		MHD_resume_connection(req->conn);
	}
}

static enum MHD_Result
send_reply(struct http_req *req)
{
	enum MHD_Result ret;

	if (gate_holds(req))
		return MHD_YES;
	if (req->shared != NULL) {
		ret = MHD_queue_response(req->conn, req->shared->code,
		    req->shared->mhd);
		http_shared_release(req->shared);
		req->shared = NULL;
		return ret;
	}
	ret = MHD_queue_response(req->conn, req->code, req->resp);
	MHD_destroy_response(req->resp);
	req->resp = NULL;
	return ret;
}

struct key_at {
	const char *at;
	int found;
};

static enum MHD_Result
key_is_at(void *cls, enum MHD_ValueKind kind, const char *key,
    const char *value)
{
	struct key_at *k = cls;

	(void)kind;
	(void)value;
	if (key == k->at)
		k->found = 1;
	return MHD_YES;
}

/*
 * Whether the request target holds a NUL byte: libmicrohttpd would cut the
 * path at it, and a key "a<NUL>b" would silently be "a". The target runs
 * from the path to the space before the version; past the path's end may
 * come only the query, which libmicrohttpd split off at the '?' and whose
 * first argument then starts right after it.
 */
static int
nul_in_target(struct MHD_Connection *conn, const char *url, const char *version)
{
	const char *end = url + strlen(url);
	struct key_at k = {end + 1, 0};

	if (version == NULL || version <= url || version - url > 65536 ||
	    end + 1 >= version - 1)
		return 0;
	MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, key_is_at, &k);
	return !k.found;
}

struct bad_arg {
	const char *name;
};

static enum MHD_Result
check_arg(void *cls, enum MHD_ValueKind kind, const char *key,
    const char *value)
{
	struct bad_arg *b = cls;
	struct buf out = {0};
	int bad;

	(void)kind;
	bad =
	    value != NULL && text_url_decode(&out, value, strlen(value), 1) < 0;
	buf_free(&out);
	if (bad) {
		b->name = key;
		return MHD_NO;
	}
	return MHD_YES;
}

/* The name of a query argument whose value does not decode, or NULL. */
static const char *
bad_argument(struct MHD_Connection *conn)
{
	struct bad_arg b = {NULL};

	MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, check_arg, &b);
	return b.name;
}

/* The calling thread's clock, or NULL for a thread not yet counted. */
static _Thread_local int worker_index = -1;

static struct worker_clock *
my_clock(struct http_server *srv)
{
	if (worker_index < 0) {
		int i = atomic_fetch_add(&srv->nworkers, 1);
		if (i >= MAX_WORKERS)
			return NULL;
		worker_index = i;
	}
	return &srv->clock[worker_index];
}

/*
 * Whether the client has gone: it closed (or reset) its end. A client
 * that shuts down its sending side after a request is taken as gone too,
 * as nginx does: none of ours does that.
 */
static int
client_gone(const struct conn *c)
{
	struct pollfd pf = {.fd = c != NULL ? c->fd : -1, .events = POLLRDHUP};

	return c != NULL && poll(&pf, 1, 0) == 1 &&
	    (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

static void
run_handler(struct http_server *srv, struct http_req *req)
{
	struct worker_clock *wc = my_clock(srv);
	int64_t t0 = now_ms();

	if (wc != NULL)
		atomic_store(&wc->busy_since, t0);
	srv->cfg.handler(req, srv->cfg.arg);
	if (wc != NULL) {
		atomic_fetch_add(&wc->busy_total, now_ms() - t0);
		atomic_store(&wc->busy_since, 0);
	}
}

/* Takes n more body bytes into req, within the limits. */
static void
take_body(struct http_server *srv, struct http_req *req, const char *data,
    size_t n)
{
	long long held;

	if (req->cs != NULL)
		atomic_fetch_add(&req->cs->body_bytes, (long long)n);
	if (req->too_large || req->over_budget)
		return;
	if (req->body.len + n > srv->cfg.max_body) {
		req->too_large = 1;
	} else {
		held = atomic_fetch_add(&srv->inflight, (long long)n);
		req->counted += n;
		if ((size_t)held + n > srv->max_inflight)
			req->over_budget = 1;
		else if (buf_append(&req->body, data, n) < 0)
			req->too_large = 1;
	}
	if (req->too_large || req->over_budget)
		body_free(req);
}

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *conn, const char *url,
    const char *method, const char *version, const char *upload,
    size_t *upload_size, void **ctx)
{
	struct http_server *srv = cls;
	struct http_req *req = *ctx;

	if (req == NULL) {
		const union MHD_ConnectionInfo *ci =
		    MHD_get_connection_info(conn,
		        MHD_CONNECTION_INFO_SOCKET_CONTEXT);
		const char *cl, *bad;

		if ((req = calloc(1, sizeof(*req))) == NULL)
			return MHD_NO;
		req->srv = srv;
		req->conn = conn;
		req->cs = ci != NULL ? ci->socket_context : NULL;
		req->method = method;
		req->path = url;
		atomic_init(&req->refs, 1);
		*ctx = req;
		atomic_fetch_add(&srv->requests, 1);
		atomic_fetch_add(&srv->open, 1);
		if (req->cs != NULL) {
			atomic_store(&req->cs->ready_at, 0);
			atomic_store(&req->cs->body_bytes, 0);
			atomic_store(&req->cs->body_from, now_ms());
		}
		if (nul_in_target(conn, url, version)) {
			http_reply_error(req, ST_INVALID_ARGUMENT,
			    "the request line holds a NUL byte");
			return send_reply(req);
		}
		if ((bad = bad_argument(conn)) != NULL) {
			http_reply_error(req, ST_INVALID_ARGUMENT,
			    "query argument %s has a malformed %%-escape or an "
			    "escaped NUL byte",
			    bad);
			return send_reply(req);
		}
		cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		    MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl != NULL && strtoull(cl, NULL, 10) > srv->cfg.max_body) {
			/* Refuse before reading: the body is never read. */
			http_reply_error(req, ST_RESOURCE_EXHAUSTED,
			    "request body of %s bytes is over the limit of "
			    "%zu bytes",
			    cl, srv->cfg.max_body);
			return send_reply(req);
		}
		return MHD_YES;
	}
	if (req->resp != NULL || req->shared != NULL) /* resumed, answered */
		return send_reply(req);
	if (*upload_size > 0) {
		take_body(srv, req, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	if (req->cs != NULL)
		atomic_store(&req->cs->body_from, 0);
	if (req->too_large) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED,
		    "request body is over the limit of %zu bytes",
		    srv->cfg.max_body);
		return send_reply(req);
	}
	if (req->over_budget) {
		atomic_fetch_add(&srv->body_refused, 1);
		http_set_header(req, "Retry-After", "1");
		http_reply_error(req, ST_RESOURCE_EXHAUSTED,
		    "the server holds %zu bytes of request bodies already, "
		    "its limit: retry later",
		    srv->max_inflight);
		return send_reply(req);
	}
	/*
	 * A request whose client left while it waited in the queue is not
	 * run: a register or a barrier arrival nobody will follow up.
	 */
	if (client_gone(req->cs)) {
		atomic_fetch_add(&srv->abandoned, 1);
		return MHD_NO;
	}
	req->in_handler = 1;
	running_req = req;
	run_handler(srv, req);
	running_req = NULL;
	if (req->in_handler == 2) /* parked: its waker owns it now */
		return MHD_YES;
	req->in_handler = 0;
	if (req->resp == NULL && req->shared == NULL)
		http_reply_error(req, ST_INTERNAL, "handler gave no reply");
	return send_reply(req);
}

static void
on_completed(void *cls, struct MHD_Connection *conn, void **ctx,
    enum MHD_RequestTerminationCode toe)
{
	struct http_server *srv = cls;
	struct http_req *req = *ctx;

	(void)conn;
	(void)toe;
	if (req != NULL) {
		if (req->cs != NULL) {
			atomic_store(&req->cs->body_from, 0);
			atomic_store(&req->cs->ready_at, now_ms());
		}
		req_unref(req);
		atomic_fetch_sub(&srv->open, 1);
	}
	*ctx = NULL;
}

static void
on_mhd_error(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;

	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n > 0 && msg[n - 1] == '\n')
		msg[--n] = '\0';
	log_debug("http: %s", msg);
}

/*
 * Closes fd, a connection libmicrohttpd is closing. With input still
 * unread, a plain close would reset the connection, and the client could
 * lose the reply just sent (a 414 for a request line too long, say): the
 * door thread keeps a copy open and drains it for up to LINGER_MS, as
 * Apache's lingering close does. Under cmu.
 */
static void
linger_close(struct http_server *srv, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP};
	int unread = 0, dup_fd;

	if (!srv->door_started || srv->nlinger >= LINGER_MAX ||
	    ioctl(fd, FIONREAD, &unread) < 0 || unread == 0)
		return;
	/* The copy shares the socket's flags: it does not block. */
	if ((dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
		return;
	ev.data.u64 = 1ULL << 63 | (uint64_t)dup_fd << 32;
	shutdown(dup_fd, SHUT_WR);
	if (epoll_ctl(srv->door_ep, EPOLL_CTL_ADD, dup_fd, &ev) < 0) {
		close(dup_fd);
		return;
	}
	srv->linger[srv->nlinger].fd = dup_fd;
	srv->linger[srv->nlinger].until = now_ms() + LINGER_MS;
	srv->nlinger++;
}

/* Reads what a lingering connection sends; at its end, closes it soon. */
static void
linger_read(struct http_server *srv, int fd)
{
	char sink[4096];
	ssize_t n;

	while ((n = read(fd, sink, sizeof(sink))) > 0)
		;
	if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
		pthread_mutex_lock(&srv->cmu);
		for (int j = 0; j < srv->nlinger; j++)
			if (srv->linger[j].fd == fd)
				srv->linger[j].until = 0;
		pthread_mutex_unlock(&srv->cmu);
	}
}

/* Closes the lingering connections that are done. Under cmu. */
static void
linger_expire(struct http_server *srv, int64_t now)
{
	for (int j = 0; j < srv->nlinger;) {
		if (srv->linger[j].until > now) {
			j++;
			continue;
		}
		close(srv->linger[j].fd); /* leaves the epoll set with it */
		srv->linger[j] = srv->linger[--srv->nlinger];
	}
}

/* Says, at most once a minute, how many connections the door closed. */
static void
say_counts(struct http_server *srv, int64_t now)
{
	unsigned long refused = atomic_load(&srv->refused);
	unsigned long slow = atomic_load(&srv->timed_out);

	if (refused != (unsigned long)srv->refused_logged &&
	    now - srv->refused_said_at >= 60000) {
		log_info("refused %lu connections: at the limit of %u open "
		         "connections (from the limit on open files; raise "
		         "ulimit -n)",
		    refused - (unsigned long)srv->refused_logged,
		    srv->max_conns);
		srv->refused_logged = (int64_t)refused;
		srv->refused_said_at = now;
	}
	if (slow != (unsigned long)srv->timed_out_logged &&
	    now - srv->timed_out_said_at >= 60000) {
		log_info("closed %lu connections that were idle or too slow to "
		         "send their request",
		    slow - (unsigned long)srv->timed_out_logged);
		srv->timed_out_logged = (int64_t)slow;
		srv->timed_out_said_at = now;
	}
}

/* Closes the connections too slow to send a request. Under cmu. */
static void
sweep(struct http_server *srv, int64_t now)
{
	for (struct conn *c = srv->conns_head; c != NULL; c = c->next) {
		int64_t ready = atomic_load(&c->ready_at);
		int64_t body = atomic_load(&c->body_from);
		int64_t limit;

		if (ready != 0 && now - ready > srv->request_timeout) {
			atomic_store(&c->ready_at, 0);
		} else if (body != 0) {
			limit = srv->request_timeout +
			    atomic_load(&c->body_bytes) / BODY_MIN_RATE * 1000;
			if (now - body <= limit)
				continue;
			atomic_store(&c->body_from, 0);
		} else {
			continue;
		}
		/* libmicrohttpd sees the end of input and closes it. */
		shutdown(c->fd, SHUT_RDWR);
		atomic_fetch_add(&srv->timed_out, 1);
	}
}

static void *
door_main(void *arg)
{
	struct http_server *srv = arg;
	int64_t next_sweep = now_ms() + 1000;

	for (;;) {
		struct epoll_event evs[64];
		int64_t now = now_ms();
		int n = epoll_wait(srv->door_ep, evs, 64,
		    next_sweep > now ? (int)(next_sweep - now) : 0);

		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;
			int fd = (int)(tag >> 32 & 0x7fffffff);
			struct http_req *req = NULL;
			struct conn *c;

			if (tag == 0) /* stop */
				return NULL;
			if (tag >> 63) {
				linger_read(srv, fd);
				continue;
			}
			pthread_mutex_lock(&srv->cmu);
			if ((size_t)fd < srv->nbyfd &&
			    (c = srv->byfd[fd]) != NULL &&
			    c->gen == (uint32_t)tag && c->parked != NULL) {
				req = c->parked;
				atomic_fetch_add(&req->refs, 1);
				unwatch(srv, c);
			}
			pthread_mutex_unlock(&srv->cmu);
			if (req != NULL) {
				/* Under the service's lock, it answers the
				 * request if it still waits, and forgets it. */
				atomic_fetch_add(&srv->abandoned, 1);
				srv->cfg.gone(req, srv->cfg.arg);
				req_unref(req);
			}
		}
		now = now_ms();
		if (now >= next_sweep) {
			pthread_mutex_lock(&srv->cmu);
			sweep(srv, now);
			linger_expire(srv, now);
			pthread_mutex_unlock(&srv->cmu);
			say_counts(srv, now);
			next_sweep = now + 1000;
		}
	}
}

static int
door_start(struct http_server *srv)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};

	if ((srv->door_ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
		return -1;
	if ((srv->door_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
	    epoll_ctl(srv->door_ep, EPOLL_CTL_ADD, srv->door_wake, &ev) < 0 ||
	    pthread_create(&srv->door, NULL, door_main, srv) != 0) {
		if (srv->door_wake >= 0)
			close(srv->door_wake);
		close(srv->door_ep);
		return -1;
	}
	srv->door_started = 1;
	return 0;
}

static void
door_stop(struct http_server *srv)
{
	uint64_t one = 1;

	if (!srv->door_started)
		return;
	if (write(srv->door_wake, &one, sizeof(one)) < 0)
		log_debug("http: cannot wake the door thread: %m");
	pthread_join(srv->door, NULL);
	linger_expire(srv, INT64_MAX);
	close(srv->door_wake);
	close(srv->door_ep);
	srv->door_started = 0;
}

/* At the connection limit a new client is refused at once, not left in
 * the listen queue with no word, and the refusal is counted. */
static enum MHD_Result
on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
	struct http_server *srv = cls;

	(void)addr;
	(void)addrlen;
	if (atomic_load(&srv->conns) >= (long)srv->max_conns) {
		atomic_fetch_add(&srv->refused, 1);
		return MHD_NO;
	}
	return MHD_YES;
}

/* The connection limit: what the limit on open files leaves. */
static unsigned
conn_limit(const struct http_server_config *cfg)
{
	struct rlimit rl;
	rlim_t n = 1024, reserve = FD_RESERVE + 2 * cfg->threads + LINGER_MAX;

	if (cfg->max_conns > 0)
		return cfg->max_conns;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		n = rl.rlim_cur;
	else if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		n = 1u << 20;
	if (n > 1u << 24)
		n = 1u << 24;
	return n > reserve + 16 ? (unsigned)(n - reserve) : 16;
}

struct http_server *
http_server_start(const struct http_server_config *cfg, char *err,
    size_t errlen)
{
	struct http_server *srv;
	struct sockaddr_storage ss;
	struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
	unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD |
	    MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO | MHD_USE_ERROR_LOG;
	const union MHD_DaemonInfo *info;
	struct MHD_OptionItem tls[5];
	int ntls = 0;

	memset(&ss, 0, sizeof(ss));
	if (cfg->tls_cert != NULL) {
		flags |= MHD_USE_TLS;
		tls[ntls++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT,
		    0, (void *)cfg->tls_cert};
		tls[ntls++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY,
		    0, (void *)cfg->tls_key};
		if (cfg->tls_trust != NULL)
			tls[ntls++] =
			    (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST,
			        0, (void *)cfg->tls_trust};
	}
	tls[ntls] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
	if (inet_pton(AF_INET, cfg->host, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)cfg->port);
	} else if (inet_pton(AF_INET6, cfg->host, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)cfg->port);
		flags |= MHD_USE_IPv6;
	} else {
		snprintf(err, errlen, "%s is not a numeric IP address",
		    cfg->host);
		return NULL;
	}
	if ((srv = calloc(1, sizeof(*srv))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	srv->cfg = *cfg;
	srv->max_conns = conn_limit(cfg);
	srv->request_timeout = cfg->request_timeout_ms > 0 ?
	    cfg->request_timeout_ms :
	    REQUEST_TIMEOUT_MS;
	srv->max_inflight =
	    cfg->max_inflight > 0 ? cfg->max_inflight : 4 * cfg->max_body;
	if (srv->max_inflight < cfg->max_body)
		srv->max_inflight = cfg->max_body;
	pthread_mutex_init(&srv->cmu, NULL);
	pthread_mutex_init(&srv->gmu, NULL);
	srv->door_ep = srv->door_wake = -1;
	if (door_start(srv) < 0) {
		snprintf(err, errlen, "cannot start a thread: %m");
		free(srv);
		return NULL;
	}
	srv->pagesize =
	    sysconf(_SC_PAGESIZE) > 0 ? (uintptr_t)sysconf(_SC_PAGESIZE) : 4096;
	srv->mhd = MHD_start_daemon(flags, 0, on_accept, srv, on_request, srv,
	    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
	    MHD_OPTION_THREAD_POOL_SIZE,
	    (unsigned)(cfg->threads > 1 ? cfg->threads : 0),
	    /* Ours is checked first (on_accept): this one never bites. */
	    MHD_OPTION_CONNECTION_LIMIT,
	    srv->max_conns + 2 * (cfg->threads + 1),
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)POOL_SIZE,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
	    MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)4096,
	    MHD_OPTION_UNESCAPE_CALLBACK, unescape_none, NULL,
	    MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
	    MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
	    MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error, NULL, MHD_OPTION_ARRAY,
	    tls, MHD_OPTION_END);
	if (srv->mhd == NULL) {
		snprintf(err, errlen, "cannot listen on %s port %d: %m",
		    cfg->host, cfg->port);
		door_stop(srv);
		free(srv);
		return NULL;
	}
	info = MHD_get_daemon_info(srv->mhd, MHD_DAEMON_INFO_BIND_PORT);
	srv->port = info != NULL ? info->port : cfg->port;
	return srv;
}

int
http_server_port(const struct http_server *srv)
{
	return srv->port;
}

void
http_server_stop(struct http_server *srv)
{
	int64_t until = duration_now_ms() + 2000;
	struct timespec ts = {0, 10 * 1000000};
	MHD_socket lsock;

	if (srv == NULL)
		return;
	/* No new connections; the replies already given still go out. */
	lsock = MHD_quiesce_daemon(srv->mhd);
	while (atomic_load(&srv->open) > 0 && duration_now_ms() < until)
		nanosleep(&ts, NULL);
	MHD_stop_daemon(srv->mhd);
	if (lsock != MHD_INVALID_SOCKET)
		close(lsock);
	door_stop(srv);
	free(srv->byfd);
	pthread_mutex_destroy(&srv->cmu);
	pthread_mutex_destroy(&srv->gmu);
	free(srv);
}

void
http_server_stats(const struct http_server *srv, struct http_stats *st)
{
	st->requests = atomic_load(&srv->requests);
	st->parked = atomic_load(&srv->parked);
	st->connections = (unsigned long)atomic_load(&srv->conns);
	st->max_connections = srv->max_conns;
	st->refused = atomic_load(&srv->refused);
	st->abandoned = atomic_load(&srv->abandoned);
	st->timed_out = atomic_load(&srv->timed_out);
	st->body_refused = atomic_load(&srv->body_refused);
	st->body_bytes = (unsigned long)atomic_load(&srv->inflight);
	st->max_body_bytes = srv->max_inflight;
}

/* The busy time of clock wc up to now, the handler running included. */
static int64_t
busy_now(const struct worker_clock *wc, int64_t now)
{
	int64_t since = atomic_load(&wc->busy_since);
	int64_t total = atomic_load(&wc->busy_total);

	return total + (since != 0 && now > since ? now - since : 0);
}

void
http_attention(struct http_server *srv, struct http_attn *a)
{
	struct worker_clock *wc =
	    worker_index >= 0 && worker_index < MAX_WORKERS ?
	    &srv->clock[worker_index] :
	    NULL;

	a->worker = wc != NULL ? worker_index : -1;
	a->busy = wc != NULL ? busy_now(wc, now_ms()) : 0;
}

int64_t
http_attention_lost(struct http_server *srv, const struct http_attn *a,
    int64_t now)
{
	int64_t d;

	if (a->worker < 0 || a->worker >= MAX_WORKERS)
		return 0;
	d = busy_now(&srv->clock[a->worker], now) - a->busy;
	return d > 0 ? d : 0;
}

unsigned long
http_server_requests(const struct http_server *srv)
{
	return atomic_load(&srv->requests);
}

unsigned long
http_server_parked(const struct http_server *srv)
{
	return atomic_load(&srv->parked);
}
