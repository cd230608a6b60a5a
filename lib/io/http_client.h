/*
 * http_client.h: the client side: plain HTTP/1.1 over one kept-alive
 * connection per client (one client per thread).
 *
 * It is our own rather than libcurl: loading libcurl and the 33 libraries
 * it pulls in costs about 4 ms per process, which is most of a kvctl call;
 * every server muster talks to speaks plain HTTP/1.1.
 *
 * Cluster bring-up order must not matter: while the server cannot be
 * reached, calls retry with exponential backoff and jitter until the
 * caller's deadline. A reply carrying Retry-After (a daemon shutting down
 * answers parked requests that way) is retried too, for requests that are
 * safe to repeat.
 */
#ifndef MUSTER_HTTP_CLIENT_H
#define MUSTER_HTTP_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "buf.h"
#include "status.h"

#define HTTP_NO_DEADLINE INT64_MAX

struct http_client;
struct tls_cred;

struct http_resp {
	long code; /* HTTP status, 0 when none arrived */
	struct buf body;
	int64_t revision; /* X-Muster-Revision, -1 when absent */
	int retry_after;  /* the reply carried Retry-After */
	int unsent;       /* the call failed to connect: its request cannot
	                     have reached the server */
	int standby;      /* a standby replica answered (X-Muster-Standby):
	                     it made no change */
};

/*
 * addr is HOST:PORT, [V6]:PORT or HOST (port defport), after an optional
 * http:// or https:// (TLS: see tls.h); or several, comma-separated: the
 * replicas of a daemon (--store), all http or all https. NULL on a bad
 * address or, for https, TLS settings that cannot be loaded.
 *
 * Replicas. Calls go to one address; when it cannot be reached, or its
 * connection fails, they go on to the next (at once while some are left
 * untried, then after the pause of a retry). A standby's answer (503 with
 * X-Muster-Standby) names its leader (X-Muster-Leader), where the call
 * goes next, whatever the request: a standby makes no change.
 */
struct http_client *http_client_new(const char *addr, int defport, char *err,
    size_t errlen);
/*
 * The same, its https:// sessions with credentials of its own rather than
 * the environment's (tls.h), which are then neither loaded nor needed: for
 * a peer with a CA and client certificates of its own. NULL cred: the
 * environment's. cred must outlive the client.
 */
struct http_client *http_client_new_tls(const char *addr, int defport,
    const struct tls_cred *cred, char *err, size_t errlen);
void http_client_free(struct http_client *c);
const char *http_client_addr(const struct http_client *c);
/* Whether c speaks TLS (its address began with https://). */
int http_client_https(const struct http_client *c);
/* The server's first address, resolved now; 0, or -1 (err says why). */
int http_client_sockaddr(const struct http_client *c,
    struct sockaddr_storage *ss, socklen_t *len, char *err, size_t errlen);
/*
 * Whether c's server can be reached by at, in one attempt: ST_OK once it
 * has accepted a connection (over https, and answered the handshake,
 * accepted or not: the call that follows says why not), which c keeps
 * for its next call; ST_UNAVAILABLE with why in err, worded as a call's
 * retries word it; or ST_CANCELLED. A caller that must know before a
 * call waits for its server (coord_reach.h) asks this, and the call then
 * costs no second connection.
 */
enum status http_client_reach(struct http_client *c, int64_t at, char *err,
    size_t errlen);
/*
 * Makes calls of c give up with ST_CANCELLED as soon as fd is readable (a
 * pipe another thread writes to): how a thread parked in a long poll is
 * told to stop. -1 turns it off.
 */
void http_client_set_cancel(struct http_client *c, int fd);
/*
 * The largest reply body c takes (a server it does not trust, such as a
 * metadata server, must not make it allocate without bound); a larger one
 * fails the call. HTTP_MAX_REPLY_DEFAULT unless set.
 */
#define HTTP_MAX_REPLY_DEFAULT (256u << 20)
void http_client_set_max_reply(struct http_client *c, size_t bytes);
/*
 * Whether calls of c retry (the default) or make one attempt and leave the
 * next to the caller: a client of a cluster tries another member rather
 * than wait for this one (resp->unsent says whether that is safe for a
 * request that must not be applied twice). Without retries, a kept-alive
 * connection is checked before a request goes out on it, one the server
 * closed meanwhile replaced, and a request that is not idempotent is never
 * sent twice: one whose connection died before its reply fails.
 */
void http_client_set_retry(struct http_client *c, int retry);
/* Adds a header ("Name: value") sent with every request of c. */
int http_client_add_header(struct http_client *c, const char *header);
/* Those headers, each ending in CRLF ("" when none). */
const char *http_client_headers(const struct http_client *c);

/*
 * Sends one request and reads the reply into resp (which the caller frees
 * with http_resp_free). path includes any query. deadline is on the
 * monotonic clock (duration_now_ms), or HTTP_NO_DEADLINE. idempotent says
 * whether the request may be sent again after a failure that may have
 * reached the server. Returns ST_OK for a 2xx reply; otherwise the status
 * from the error body (or the HTTP code), with its message in err.
 */
enum status http_client_do(struct http_client *c, const char *method,
    const char *path, const void *body, size_t len, const char *ctype,
    int64_t deadline, int idempotent, struct http_resp *resp, char *err,
    size_t errlen);

/*
 * The same for a long poll the server answers by deadline: retries stop at
 * deadline, while the reply itself may take grace_ms longer to arrive.
 */
enum status http_client_poll(struct http_client *c, const char *method,
    const char *path, const void *body, size_t len, const char *ctype,
    int64_t deadline, int64_t grace_ms, int idempotent, struct http_resp *resp,
    char *err, size_t errlen);

/*
 * A reply that is a stream the server does not end (etcd's watch): sends
 * one request and hands a 2xx reply's body to fn as it arrives, chunked
 * framing taken off, in pieces of any size, until fn returns non-zero
 * (ST_OK). Otherwise ST_UNAVAILABLE when the stream ends or breaks,
 * ST_DEADLINE_EXCEEDED when deadline passes or nothing arrives for
 * silence_ms (0: no limit), ST_CANCELLED as calls are. There is no retry:
 * the caller knows where to take the stream up again. A reply other than
 * 2xx is read whole into resp, its status and message as http_client_do's.
 * The connection is closed at the end.
 */
typedef int (*http_stream_fn)(void *arg, const char *p, size_t n);
enum status http_client_stream(struct http_client *c, const char *method,
    const char *path, const void *body, size_t len, const char *ctype,
    int64_t deadline, int64_t silence_ms, http_stream_fn fn, void *arg,
    struct http_resp *resp, char *err, size_t errlen);

void http_resp_free(struct http_resp *resp);

#endif
