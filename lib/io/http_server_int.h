/*
 * http_server_int.h: what the files of the HTTP server share: the server,
 * a request and a connection, and the functions one file calls in another.
 * For lib/io/http_server*.c only; the rest of the library and the daemons
 * use http_server.h.
 */
#ifndef MUSTER_HTTP_SERVER_INT_H
#define MUSTER_HTTP_SERVER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "blob.h"
#include "buf.h"
#include "http_server.h"

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

/*
 * What libmicrohttpd may use for one connection's request line and headers,
 * and what a parked request costs: libmicrohttpd clears the whole pool after
 * each reply, so every byte of it ends up resident. 8 KiB holds a request
 * for the longest key (2048 bytes, percent-encoded to three times that) with
 * room left.
 */
#define POOL_SIZE (8 * 1024)

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
	unsigned char door;      /* in the door's set: DOOR_* (cmu) */
	/* The request's progress, for the sweep (monotonic ms; 0: none). */
	atomic_llong ready_at;  /* waiting for a request since */
	atomic_llong body_from; /* reading a body since */
	atomic_llong body_bytes;
};

/*
 * The parts, lowest first; each calls only those above it in this list.
 *
 * http_server_tls.c: HTTPS. The daemon's options for cfg's certificate,
 * key and trust list (at most three, then MHD_OPTION_END, into items;
 * *flags gains MHD_USE_TLS), and http_req_peer_verified.
 */
void http_server_tls_options(const struct http_server_config *cfg,
    struct MHD_OptionItem items[4], unsigned *flags);

/*
 * http_server_shared.c: replies built once for many (http_shared_*), and
 * responses over the bytes of a blob, which they hold until freed.
 */
struct MHD_Response *http_blob_response(struct blob *b);

/*
 * http_server_req.c: the request: what a handler reads of it, the headers
 * of its reply to come, and its end.
 */
void http_req_free_headers(struct http_req *req);
/* Gives back the request body's share of the in-flight budget. */
void http_req_body_free(struct http_req *req);
/* Drops a reference; the last one frees req and its reply. */
void http_req_unref(struct http_req *req);

/*
 * http_server_conn.c: connections, from accept to close, and the door
 * thread that watches them: for the client of a parked request going
 * away, for a request too slow to arrive, and for closed connections
 * with unread input, drained so that a reply is not lost to a reset.
 */
/* libmicrohttpd's hooks: a connection accepted (refused at the limit),
 * and a connection started or closed. */
enum MHD_Result http_conn_accept(void *cls, const struct sockaddr *addr,
    socklen_t addrlen);
void http_conn_notify(void *cls, struct MHD_Connection *mc, void **ctx,
    enum MHD_ConnectionNotificationCode code);
/* The connection limit: cfg's, or what the limit on open files leaves. */
unsigned http_conn_limit(const struct http_server_config *cfg);
int http_door_start(struct http_server *srv);
void http_door_stop(struct http_server *srv);
/* Watches the client of parked req for going away (cfg.gone), and stops
 * watching it. */
void http_door_watch(struct http_req *req);
void http_door_unwatch(struct http_req *req);

/* http_server_park.c: parking (http_park), holding, and resuming. */
/* Resumes a parked request whose reply is now set, unless held. */
void http_req_resume(struct http_req *req);

/* http_server_reply.c: replies (http_reply and its kinds). */

/*
 * http_server_gate.c: replies held until the journal has their changes
 * (cfg.gate, http_server_durable, http_note_write).
 */
/* The request whose handler runs on this thread, for http_note_write;
 * set by the caller of the handler. */
extern _Thread_local struct http_req *http_running_req;
/* Queues req's reply, or holds it for the journal first. */
enum MHD_Result http_send_reply(struct http_req *req);

/*
 * http_server.c: the server, its options and its counters, and each
 * request's arrival: checks of the request line and arguments, the body
 * within its limits, and the handler run.
 */

#endif
