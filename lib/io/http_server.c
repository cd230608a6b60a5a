/*
 * http_server.c: the server on libmicrohttpd, its options and counters,
 * and each request's arrival: the request line and query arguments
 * checked, the body read within its limits, and the handler run. The
 * parts below it are listed in http_server_int.h.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "buf.h"
#include "duration.h"
#include "http_server_int.h"
#include "log.h"
#include "text.h"

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
	int64_t t0 = duration_now_ms();

	if (wc != NULL)
		atomic_store(&wc->busy_since, t0);
	srv->cfg.handler(req, srv->cfg.arg);
	if (wc != NULL) {
		atomic_fetch_add(&wc->busy_total, duration_now_ms() - t0);
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
		http_req_body_free(req);
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
			atomic_store(&req->cs->body_from, duration_now_ms());
		}
		if (nul_in_target(conn, url, version)) {
			http_reply_error(req, ST_INVALID_ARGUMENT,
			    "the request line holds a NUL byte");
			return http_send_reply(req);
		}
		if ((bad = bad_argument(conn)) != NULL) {
			http_reply_error(req, ST_INVALID_ARGUMENT,
			    "query argument %s has a malformed %%-escape or an "
			    "escaped NUL byte",
			    bad);
			return http_send_reply(req);
		}
		cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		    MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl != NULL && strtoull(cl, NULL, 10) > srv->cfg.max_body) {
			/* Refuse before reading: the body is never read. */
			http_reply_error(req, ST_RESOURCE_EXHAUSTED,
			    "request body of %s bytes is over the limit of "
			    "%zu bytes",
			    cl, srv->cfg.max_body);
			return http_send_reply(req);
		}
		return MHD_YES;
	}
	if (req->resp != NULL || req->shared != NULL) /* resumed, answered */
		return http_send_reply(req);
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
		return http_send_reply(req);
	}
	if (req->over_budget) {
		atomic_fetch_add(&srv->body_refused, 1);
		http_set_header(req, "Retry-After", "1");
		http_reply_error(req, ST_RESOURCE_EXHAUSTED,
		    "the server holds %zu bytes of request bodies already, "
		    "its limit: retry later",
		    srv->max_inflight);
		return http_send_reply(req);
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
	http_running_req = req;
	run_handler(srv, req);
	http_running_req = NULL;
	if (req->in_handler == 2) /* parked: its waker owns it now */
		return MHD_YES;
	req->in_handler = 0;
	if (req->resp == NULL && req->shared == NULL)
		http_reply_error(req, ST_INTERNAL, "handler gave no reply");
	return http_send_reply(req);
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
			atomic_store(&req->cs->ready_at, duration_now_ms());
		}
		http_req_unref(req);
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
	struct MHD_OptionItem tls[4];
	/* Where it listens: its own socket, or one it was given. */
	struct MHD_OptionItem where[2] = {{MHD_OPTION_SOCK_ADDR, 0, &ss},
	    {MHD_OPTION_END, 0, NULL}};

	memset(&ss, 0, sizeof(ss));
	http_server_tls_options(cfg, tls, &flags);
	if (cfg->listen_fd > 0) {
		struct sockaddr_storage got;
		socklen_t glen = sizeof(got);

		where[0] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET,
		    cfg->listen_fd, NULL};
		if (getsockname(cfg->listen_fd, (struct sockaddr *)&got,
		        &glen) == 0 &&
		    got.ss_family == AF_INET6)
			flags |= MHD_USE_IPv6;
	} else if (inet_pton(AF_INET, cfg->host, &sin->sin_addr) == 1) {
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
	srv->max_conns = http_conn_limit(cfg);
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
	if (http_door_start(srv) < 0) {
		snprintf(err, errlen, "cannot start a thread: %m");
		free(srv);
		return NULL;
	}
	srv->pagesize =
	    sysconf(_SC_PAGESIZE) > 0 ? (uintptr_t)sysconf(_SC_PAGESIZE) : 4096;
	srv->mhd = MHD_start_daemon(flags, 0, http_conn_accept, srv, on_request,
	    srv, MHD_OPTION_ARRAY, where, MHD_OPTION_THREAD_POOL_SIZE,
	    (unsigned)(cfg->threads > 1 ? cfg->threads : 0),
	    /* Ours is checked first (http_conn_accept): this one never bites. */
	    MHD_OPTION_CONNECTION_LIMIT,
	    srv->max_conns + 2 * (cfg->threads + 1),
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)POOL_SIZE,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
	    MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)4096,
	    MHD_OPTION_UNESCAPE_CALLBACK, unescape_none, NULL,
	    MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
	    MHD_OPTION_NOTIFY_CONNECTION, http_conn_notify, srv,
	    MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error, NULL, MHD_OPTION_ARRAY,
	    tls, MHD_OPTION_END);
	if (srv->mhd == NULL) {
		snprintf(err, errlen, "cannot listen on %s port %d: %m",
		    cfg->host, cfg->port);
		http_door_stop(srv);
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
	int fd = http_server_stop_keep(srv);

	if (fd >= 0)
		close(fd);
}

int
http_server_stop_keep(struct http_server *srv)
{
	int64_t until = duration_now_ms() + 2000;
	struct timespec ts = {0, 10 * 1000000};
	MHD_socket lsock;

	if (srv == NULL)
		return -1;
	/* No new connections; the replies already given still go out. */
	lsock = MHD_quiesce_daemon(srv->mhd);
	while (atomic_load(&srv->open) > 0 && duration_now_ms() < until)
		nanosleep(&ts, NULL);
	MHD_stop_daemon(srv->mhd);
	http_door_stop(srv);
	free(srv->byfd);
	pthread_mutex_destroy(&srv->cmu);
	pthread_mutex_destroy(&srv->gmu);
	free(srv);
	return lsock != MHD_INVALID_SOCKET ? (int)lsock : -1;
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
	a->busy = wc != NULL ? busy_now(wc, duration_now_ms()) : 0;
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
