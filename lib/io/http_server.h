/*
 * http_server.h: the HTTP side of every muster daemon, on libmicrohttpd.
 *
 * One handler sees each whole request (body already read, within the size
 * limit) and either replies at once or parks it. A parked request holds no
 * thread: its connection is suspended until someone, on any thread, replies
 * to it. That is how blocking calls (get-with-wait, barriers, watches) cost a
 * few hundred bytes each instead of a thread each.
 */
#ifndef MUSTER_HTTP_SERVER_H
#define MUSTER_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "blob.h"
#include "status.h"

struct http_server;
struct http_req;

typedef void (*http_handler_fn)(struct http_req *req, void *arg);

struct http_server_config {
	const char *host; /* numeric IPv4 or IPv6 address */
	int port;         /* 0 picks a free port */
	/* A socket listening already (a daemon started again inherits its
	 * own), used instead of host and port; -1 or 0: none. */
	int listen_fd;
	unsigned threads; /* worker threads, each with its own epoll */
	size_t max_body;  /* larger bodies get RESOURCE_EXHAUSTED */
	/* Bodies held at once, all requests together (0: 4 max_body). */
	size_t max_inflight;
	/* Open connections (0: what the limit on open files leaves). */
	unsigned max_conns;
	/* To send a request's headers, and to start its body (0: 60 s). */
	int64_t request_timeout_ms;
	/*
	 * PEM text: with cert and key, the server speaks only HTTPS; with
	 * trust too, it asks each client for a certificate, which
	 * http_req_peer_verified then checks against trust.
	 */
	const char *tls_cert, *tls_key, *tls_trust;
	http_handler_fn handler;
	void *arg;
	/*
	 * The client of a parked request went away (closed its connection).
	 * Called on a thread of the server's, holding no lock, with req
	 * still valid: answer it if it still waits (the reply goes nowhere),
	 * or do nothing if it was answered meanwhile. NULL: not watched.
	 */
	void (*gone)(struct http_req *req, void *arg);
	/*
	 * With a journal: the sequence number of the newest change made so
	 * far (0: none). A reply goes out only once every change up to the
	 * number read as it is about to go is durable (http_server_durable),
	 * so that no client hears of a change, its own or another's, that
	 * a crash could still lose. When the journal fails, the requests
	 * that made the changes get an error; others' replies go out, and
	 * may tell of those changes, whose outcome is then unknown (they are
	 * written again on retry). NULL: replies go at once.
	 */
	uint64_t (*gate)(void *arg);
	/*
	 * Called before a reply waits for change seq: a chance to make it
	 * durable in the calling thread (a journal that only writes). NULL:
	 * none.
	 */
	void (*gate_flush)(void *arg, uint64_t seq);
	void *gate_arg; /* of gate and gate_flush */
};

struct http_server *http_server_start(const struct http_server_config *cfg,
    char *err, size_t errlen);
int http_server_port(const struct http_server *srv);
/*
 * Stops listening, lets the replies already given reach their clients (for
 * up to 2 s), then stops. Every parked request must have been answered.
 */
void http_server_stop(struct http_server *srv);
/* The same, but the listening socket stays open: returned, or -1. */
int http_server_stop_keep(struct http_server *srv);

/* The request. Strings live as long as the request. */
const char *http_req_method(const struct http_req *req);
/* The path as sent, still percent-encoded, without the query. */
const char *http_req_path(const struct http_req *req);
/* A decoded query argument; NULL when absent or badly encoded. */
const char *http_req_arg(struct http_req *req, const char *name);
const char *http_req_header(const struct http_req *req, const char *name);
const char *http_req_body(const struct http_req *req, size_t *len);
/*
 * Over TLS with a trust list: 1 when the client showed a certificate the
 * list signs (valid now), 0 when it showed none, -1 when it showed one
 * that is not trusted. 0 without TLS.
 */
int http_req_peer_verified(const struct http_req *req);

/* Per-request slot the application may use (a waiter, say). */
void http_req_set_data(struct http_req *req, void *data);
void *http_req_data(const struct http_req *req);

/*
 * Replies. Each takes the request over: after the call, the caller must not
 * touch req again. A reply to a parked request resumes its connection.
 */
void http_reply(struct http_req *req, int http_status, const char *ctype,
    const void *body, size_t len);
/* Sends the bytes of b without a copy (the reply takes a reference). */
void http_reply_blob(struct http_req *req, int http_status, const char *ctype,
    struct blob *b);
/* Sends obj (and drops the caller's reference); obj NULL (it could not
 * be built) is RESOURCE_EXHAUSTED. */
void http_reply_json(struct http_req *req, int http_status, json_t *obj);
void http_reply_error(struct http_req *req, enum status st, const char *fmt,
    ...) __attribute__((format(printf, 3, 4)));
/* An error with an HTTP status other than the table's (405, say). */
void http_reply_error_http(struct http_req *req, int http_status,
    enum status st, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* An error body with extra fields merged in (obj's reference is taken). */
void http_reply_error_json(struct http_req *req, enum status st, json_t *extra,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/*
 * A reply built once and sent to many parked requests (every waiter on a
 * key gets the same value): one copy of the body, reference counted.
 */
struct http_shared;

struct http_shared *http_shared_new(int http_status, const char *ctype,
    const void *body, size_t len);
/* Takes obj's reference. */
struct http_shared *http_shared_json(int http_status, json_t *obj);
/* The bytes of b, without a copy. */
struct http_shared *http_shared_blob(int http_status, const char *ctype,
    struct blob *b);
int http_shared_header(struct http_shared *sh, const char *name,
    const char *value);
/* Sends sh as req's reply; sh stays the caller's to release. */
void http_reply_shared(struct http_req *req, struct http_shared *sh);
void http_shared_release(struct http_shared *sh);

/* Adds a header to the reply that is still to come. 0, or -1 on ENOMEM. */
int http_set_header(struct http_req *req, const char *name, const char *value);

/*
 * Parks req: only from inside the handler, and while holding the lock that
 * guards wherever req has been put to be found by its waker.
 */
void http_park(struct http_req *req);

/*
 * Holds a parked request: a reply to it is kept, and its connection is not
 * resumed until http_req_release. A waker that answers thousands of parked
 * requests under its lock resumes them only once the lock is free.
 */
void http_req_hold(struct http_req *req);
void http_req_release(struct http_req *req);

/*
 * The journal's word: every change up to seq is durable (err 0), or could
 * not be made durable (err an errno value). Releases the replies held for
 * them; a reply to a request that made such a change (http_note_write)
 * becomes an error: RESOURCE_EXHAUSTED for a full disk, else INTERNAL,
 * saying that the outcome is unknown. Any thread, no lock held.
 */
void http_server_durable(struct http_server *srv, uint64_t seq, int err);

/*
 * From a handler's thread while it runs: the request made change seq, or
 * (seq 0) tried to and the journal refused it (errno as the journal set
 * it); its reply then becomes an error. Does nothing on other threads.
 */
void http_note_write(uint64_t seq);

/* Request counters, for /metrics. */
unsigned long http_server_requests(const struct http_server *srv);
unsigned long http_server_parked(const struct http_server *srv);

struct http_stats {
	unsigned long requests, parked;
	unsigned long connections, max_connections;
	unsigned long refused;   /* connections, at the limit */
	unsigned long abandoned; /* requests whose client left first */
	unsigned long timed_out; /* connections idle or too slow */
	unsigned long body_refused;
	unsigned long body_bytes, max_body_bytes; /* held now, limit */
};

void http_server_stats(const struct http_server *srv, struct http_stats *st);

/*
 * Whether the server could have heard a client. Taken in a handler,
 * http_attention stamps the worker thread that serves the connection;
 * http_attention_lost says later how long that thread spent in handlers
 * since, unable to read anything: time a client's silence is not its own.
 */
struct http_attn {
	int worker;
	int64_t busy;
};

void http_attention(struct http_server *srv, struct http_attn *a);
int64_t http_attention_lost(struct http_server *srv, const struct http_attn *a,
    int64_t now);

#endif
