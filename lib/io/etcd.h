/*
 * etcd.h: a client of an etcd 3.4 cluster, through the JSON gateway every
 * member serves beside gRPC at /v3/... (HTTP/1.1, JSON bodies, keys and
 * values in base64, 64-bit numbers as strings). This header makes the
 * client; its calls are in etcd_kv.h (keys, transactions), etcd_lease.h,
 * etcd_election.h and etcd_watch.h.
 *
 * Members. The client is given the client addresses of the cluster's
 * members and talks to one at a time, the first to begin with. When that
 * one does not answer (refused, no reply within attempt_ms, a 5xx, or
 * etcd saying it has no leader or its leader changed) the call goes to the
 * next, round the list with a growing pause, for at most retry_ms; then it
 * fails with the reason a member gave (or, if none answered, the last). A request that changes etcd (a put,
 * a delete, a transaction that writes) goes to another member only when
 * it cannot have been applied: the connection was refused, or etcd refused
 * it before proposing it ("no leader", "leader changed"); after a reply
 * that never came it fails with ST_UNAVAILABLE, saying that the change
 * may have been made. Every request asks the member to refuse it when it
 * has no leader (the gateway's Grpc-Metadata-Hasleader), so that a member
 * cut off from its quorum says so at once rather than at etcd's own
 * timeout.
 *
 * Security, as etcd's clients take it: https:// members must show a
 * certificate ca_file signs (or, without it, the system's trust store),
 * and are shown cert_file and key_file when given; with none of the three,
 * the environment's settings are used (tls.h). With auth_file, the client authenticates as the user
 * it names (POST /v3/auth/authenticate) before its first call, sends the
 * token with every request, and authenticates again when etcd no longer
 * knows the token (it expires: --auth-token-ttl).
 *
 * Errors. Every call returns a status and leaves its message in the client
 * (etcd_error). etcd's gRPC codes map to ours by name (NOT_FOUND,
 * INVALID_ARGUMENT, FAILED_PRECONDITION, ...); OUT_OF_RANGE (a revision
 * compacted away or not yet made) is ST_FAILED_PRECONDITION, PERMISSION_
 * DENIED and a failed authentication ST_UNAUTHENTICATED, a request over
 * etcd's size limit ST_RESOURCE_EXHAUSTED, and a cluster without a leader
 * ST_UNAVAILABLE.
 *
 * Deadlines are absolute, on the monotonic clock (duration_now_ms), or
 * ETCD_NO_DEADLINE. One client per thread: a thread blocked in a campaign
 * or a watch holds its client, and another thread makes its own. The
 * process ignores SIGPIPE, as the daemons do: a member that closes a
 * connection as a request goes out must fail the call, not end it.
 */
#ifndef MUSTER_ETCD_H
#define MUSTER_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "http_client.h"
#include "status.h"

#define ETCD_NO_DEADLINE HTTP_NO_DEADLINE
#define ETCD_DEFAULT_PORT 2379
/*
 * The largest request etcd takes by default (--max-request-bytes): the
 * bytes of its keys and values and a few more for each. A caller that
 * writes more at once (a snapshot) cuts it into requests under this.
 */
#define ETCD_MAX_REQUEST (1536u * 1024)
/* How long one member has to answer a request, unless set. */
#define ETCD_ATTEMPT_MS 5000
/* How long a call goes round the members before it gives up, unless set. */
#define ETCD_RETRY_MS 5000

struct etcd_opts {
	/* HOST:PORT,... each with http:// (the default) or https:// */
	const char *endpoints;
	const char *ca_file;   /* PEM, for https:// members */
	const char *cert_file; /* PEM, with key_file: the client's own */
	const char *key_file;
	/* A file whose first line is USER:PASSWORD, or NULL: no auth. */
	const char *auth_file;
	int64_t attempt_ms; /* 0: ETCD_ATTEMPT_MS */
	int64_t retry_ms;   /* 0: ETCD_RETRY_MS */
};

struct etcd;

/* NULL, with err saying why, on a bad address, TLS file or auth file. */
struct etcd *etcd_new(const struct etcd_opts *o, char *err, size_t errlen);
void etcd_free(struct etcd *e);
/* Calls give up with ST_CANCELLED once fd is readable (see http_client). */
void etcd_set_cancel(struct etcd *e, int fd);
/* The message of the last call that failed. */
const char *etcd_error(const struct etcd *e);
/* The member the client talks to now, HOST:PORT. */
const char *etcd_member(const struct etcd *e);

#endif
