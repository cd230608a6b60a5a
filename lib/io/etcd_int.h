/*
 * etcd_int.h: what the files of the etcd client share, for lib/io/etcd*.c
 * only; the rest of the library uses etcd.h and the headers of its calls.
 * Its files, lowest first:
 *
 *   etcd_json.c      what the gateway sends and takes: 64-bit numbers as
 *                    strings, bytes as base64, a key, a reply's revision,
 *                    an error's status, and a stream cut into its messages
 *   etcd.c           the client: members, TLS, authentication, a call
 *                    that fails over, one attempt at a stream
 *   etcd_kv.c        range, put, delete, transactions
 *   etcd_lease.c     grant, keep-alive, revoke, time to live
 *   etcd_election.c  campaign, leader, proclaim, resign, observe
 *   etcd_watch.c     the watch, taken up again where it broke
 *
 * Each calls only files above it in the list.
 */
#ifndef MUSTER_ETCD_INT_H
#define MUSTER_ETCD_INT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "buf.h"
#include "etcd.h"
#include "etcd_kv.h"

/* etcd_json.c */

/*
 * A 64-bit field of o (jsonpb writes them as strings; proto3 leaves out a
 * zero): 0, or -1 when it is neither a number nor a string of one.
 */
int etcd_json_int(const json_t *o, const char *name, int64_t *v);
/* A bytes field of o, decoded from base64 into a NUL-terminated copy the
 * caller frees ("" when absent): 0, or -1 (not base64, no memory). */
int etcd_json_bytes(const json_t *o, const char *name, char **p, size_t *n);
/* A KeyValue: 0, or -1 (kv then holds nothing). */
int etcd_json_kv(const json_t *o, struct etcd_kv *kv);
/* The revision of a reply's header, 0 when it has none. */
int64_t etcd_json_revision(const json_t *reply);
/* Sets o's field name to the base64 of p: 0, or -1 (no memory). */
int etcd_json_set_bytes(json_t *o, const char *name, const void *p, size_t n);
/*
 * Sets o's key to key and, for a prefix, range_end to the first key past
 * every key that starts with it ("\0", every key from key on, for a
 * prefix of 0xff bytes only; for the empty prefix, key "\0" too: every
 * key). 0, or -1 (no memory).
 */
int etcd_json_set_key(json_t *o, const void *key, size_t n, int prefix);
/*
 * The status and message of an error etcd's gateway sent: body is a
 * reply's ({"error":"...","code":N,...}) or a stream message's
 * ({"error":{"grpc_code":N,"message":"..."}}); a body without one (or
 * without its code) gives the status of the HTTP code http. Never ST_OK.
 */
enum status etcd_json_error(const char *body, size_t len, long http, char *msg,
    size_t msglen);
/*
 * The status of the reason etcd gave for cancelling a watch (MESSAGE, or
 * "rpc error: code = ... desc = MESSAGE"): ST_UNAUTHENTICATED for a token
 * that expired or a permission denied, as etcd_json_error has them;
 * otherwise ST_UNAVAILABLE, for the stream to be taken up elsewhere.
 */
enum status etcd_json_cancel(const char *reason);

/*
 * A stream's messages: the gateway ends each with a newline. Bytes are
 * fed as they come, in pieces of any size; each whole message is handed
 * to fn (blank lines are skipped) and kept no longer.
 */
struct etcd_split {
	struct buf part; /* the start of a message still coming */
	size_t max;      /* the longest message taken */
};

typedef int (*etcd_split_fn)(void *arg, const char *msg, size_t len);
/*
 * 0 when p was taken; fn's return when it is not 0 (which must be
 * positive), which stops it; or -1 when a message is longer than max or
 * memory ran out (nothing more may be fed then).
 */
int etcd_split_feed(struct etcd_split *s, const char *p, size_t n,
    etcd_split_fn fn, void *arg);
void etcd_split_free(struct etcd_split *s);

/* etcd.c */

/* A call's flags. */
#define ETCD_CHANGE 1 /* it changes etcd: sent again only when safe */
#define ETCD_LONG 2   /* a long poll: no attempt_ms, only the deadline */

/*
 * POSTs req (taken, and freed) to path on the members in turn, as etcd.h
 * says, and leaves the reply's JSON in *reply. The status, with its
 * message in e.
 */
enum status etcd_call(struct etcd *e, const char *path, json_t *req, int flags,
    int64_t deadline, json_t **reply);

/* A stream's reader: 0 for more, 1 when it has had enough, or -1 with
 * its status set (etcd_fail). */
typedef int (*etcd_msg_fn)(void *arg, json_t *result);
/* A stream's request, made anew for each stream (NULL: no memory). */
typedef json_t *(*etcd_req_fn)(void *arg);
/*
 * A streaming POST of req's request to path, each message's result handed
 * to fn, until fn has had enough (ST_OK) or fails (its status), deadline,
 * or the cancel fd. A stream that breaks (its member down or cut off,
 * refusing, or quiet for silence_ms unless 0) is taken up on the next
 * member with req's request as it is then, round the members as etcd_call
 * goes, for as long as retry_ms allows since the last message came.
 */
enum status etcd_stream(struct etcd *e, const char *path, etcd_req_fn req,
    int64_t silence_ms, size_t max_msg, int64_t deadline, etcd_msg_fn fn,
    void *arg);

/* Sets e's error: st, and the message. */
enum status etcd_fail(struct etcd *e, enum status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The status of e's last failure. */
enum status etcd_status(const struct etcd *e);

#endif
