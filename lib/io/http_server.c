#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "buf.h"
#include "duration.h"
#include "http_server.h"
#include "log.h"
#include "text.h"

struct http_server {
	struct MHD_Daemon *mhd;
	struct http_server_config cfg;
	int port;
	atomic_ulong requests;
	atomic_ulong parked;
	atomic_long open; /* requests not yet completed */
	uintptr_t pagesize;
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
	const char *method;
	const char *path;
	struct buf body;
	struct arg *args;
	struct hdr *hdrs;
	void *data;
	struct MHD_Response *resp;  /* the reply, once there is one, */
	struct http_shared *shared; /* or a shared one */
	unsigned code;
	unsigned char too_large;
	unsigned char in_handler;
	unsigned char parked;
	unsigned char held;
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

static void
req_free(struct http_req *req)
{
	struct arg *a, *next;

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
	buf_free(&req->body);
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
 * Per connection: whether its pool is resident. It is once prefaulted, and
 * once a reply has cleared it; a connection that parks again and again
 * (a task's long poll in a loop) pays for the madvise only the first time.
 */
struct conn {
	unsigned char resident;
};

static void
on_connection(void *cls, struct MHD_Connection *c, void **ctx,
    enum MHD_ConnectionNotificationCode code)
{
	(void)cls;
	(void)c;
	if (code == MHD_CONNECTION_NOTIFY_STARTED)
		*ctx = calloc(1, sizeof(struct conn));
	else {
		free(*ctx);
		*ctx = NULL;
	}
}

void
http_park(struct http_req *req)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(req->conn,
	    MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct conn *cs = ci != NULL ? ci->socket_context : NULL;

	if (cs == NULL || !cs->resident) {
		prefault_pool(req);
		if (cs != NULL)
			cs->resident = 1;
	}
	req->parked = 1;
	req->in_handler = 2;
	atomic_fetch_add(&req->srv->parked, 1);
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
		req->parked = 0;
		atomic_fetch_sub(&req->srv->parked, 1);
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
	char *s = json_dumps(obj, JSON_COMPACT);

	json_decref(obj);
	if (s == NULL) {
		http_reply(req, 500, "text/plain", "out of memory\n", 14);
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

static enum MHD_Result
send_reply(struct http_req *req)
{
	enum MHD_Result ret;

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

static enum MHD_Result
on_request(void *cls, struct MHD_Connection *conn, const char *url,
    const char *method, const char *version, const char *upload,
    size_t *upload_size, void **ctx)
{
	struct http_server *srv = cls;
	struct http_req *req = *ctx;

	(void)version;
	if (req == NULL) {
		const char *cl;

		if ((req = calloc(1, sizeof(*req))) == NULL)
			return MHD_NO;
		req->srv = srv;
		req->conn = conn;
		req->method = method;
		req->path = url;
		*ctx = req;
		atomic_fetch_add(&srv->requests, 1);
		atomic_fetch_add(&srv->open, 1);
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
		if (!req->too_large) {
			if (req->body.len + *upload_size > srv->cfg.max_body)
				req->too_large = 1;
			else if (buf_append(&req->body, upload, *upload_size) <
			    0)
				req->too_large = 1;
			if (req->too_large)
				buf_free(&req->body);
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (req->too_large) {
		http_reply_error(req, ST_RESOURCE_EXHAUSTED,
		    "request body is over the limit of %zu bytes",
		    srv->cfg.max_body);
		return send_reply(req);
	}
	req->in_handler = 1;
	srv->cfg.handler(req, srv->cfg.arg);
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
		req_free(req);
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

	memset(&ss, 0, sizeof(ss));
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
	srv->pagesize =
	    sysconf(_SC_PAGESIZE) > 0 ? (uintptr_t)sysconf(_SC_PAGESIZE) : 4096;
	srv->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, srv,
	    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
	    MHD_OPTION_THREAD_POOL_SIZE,
	    (unsigned)(cfg->threads > 1 ? cfg->threads : 0),
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000000,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)POOL_SIZE,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
	    MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)4096,
	    MHD_OPTION_UNESCAPE_CALLBACK, unescape_none, NULL,
	    MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
	    MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
	    MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error, NULL, MHD_OPTION_END);
	if (srv->mhd == NULL) {
		snprintf(err, errlen, "cannot listen on %s port %d: %m",
		    cfg->host, cfg->port);
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
	free(srv);
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
