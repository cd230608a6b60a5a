/*
 * coord_client.h: a connection to coordd, and the calls to its key-value
 * store. Each call takes an absolute deadline (duration_now_ms() based, or
 * HTTP_NO_DEADLINE) and returns a status; the message that goes with a
 * failure is the client's last error. Blocking calls are long polls
 * re-issued until the deadline, so a client outlives a restart of coordd.
 * One client per thread.
 */
#ifndef MUSTER_COORD_CLIENT_H
#define MUSTER_COORD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "buf.h"
#include "http_client.h"
#include "status.h"

/* How a put treats a key that exists (or not), as coordd's mode=. */
enum coord_put_mode {
	COORD_PUT_INSERT,    /* only a new key */
	COORD_PUT_OVERWRITE, /* either */
	COORD_PUT_UPDATE,    /* only an existing key */
};

struct coord_client;

/*
 * addr as for http_client_new; NULL (and a message in err) on failure.
 * With MUSTER_TOKEN_FILE set, every request carries the token in that
 * file (a file that cannot be read is a failure).
 */
struct coord_client *coord_client_new(const char *addr, char *err,
    size_t errlen);
/* Every request of cc carries the secret of the task it speaks for. */
#define COORD_SECRET_LEN 32
int coord_client_set_task_secret(struct coord_client *cc, const char *secret);
/* The headers every request of cc carries, "Name: value\r\n" each. */
const char *coord_client_headers(const struct coord_client *cc);
void coord_client_free(struct coord_client *cc);
/* Calls give up with ST_CANCELLED once fd is readable (see http_client). */
void coord_client_set_cancel(struct coord_client *cc, int fd);
/* The message of the last call that failed. */
const char *coord_client_error(const struct coord_client *cc);
const char *coord_client_addr(const struct coord_client *cc);
/* Whether cc speaks TLS to coordd (an https:// address). */
int coord_client_https(const struct coord_client *cc);
/* coordd's address, resolved now; 0, or -1 with the reason as the error. */
int coord_client_sockaddr(struct coord_client *cc, struct sockaddr_storage *ss,
    socklen_t *len);

/* The value of key into val; waits for it to appear when wait is set. */
enum status coord_kv_get(struct coord_client *cc, const char *key, int wait,
    int64_t deadline, struct buf *val, int64_t *rev);
enum status coord_kv_put(struct coord_client *cc, const char *key,
    const void *val, size_t len, enum coord_put_mode mode, int64_t deadline,
    int64_t *rev);
enum status coord_kv_add(struct coord_client *cc, const char *key,
    int64_t delta, int64_t deadline, int64_t *value, int64_t *rev);
/*
 * On a mismatch returns ST_FAILED_PRECONDITION and, when the key exists,
 * fills current and sets *has_current.
 */
enum status coord_kv_cas(struct coord_client *cc, const char *key,
    const void *expect, size_t elen, int absent, const void *val, size_t vlen,
    int64_t deadline, int64_t *rev, struct buf *current, int *has_current);
enum status coord_kv_delete(struct coord_client *cc, const char *key,
    int64_t deadline, int64_t *deleted, int64_t *rev);
/* The reply object {"revision":R,"entries":[{key,value(base64),...}]}. */
enum status coord_kv_dir(struct coord_client *cc, const char *prefix,
    int64_t deadline, json_t **reply);
/*
 * The value of an entry of coord_kv_dir or a change of coord_kv_watch,
 * decoded from coordd's base64 into val: 1, 0 when it has none (a change
 * that deleted the key), or -1 when it does not decode.
 */
int coord_kv_value(const json_t *e, struct buf *val);
/*
 * One long poll for changes under prefix after *since (a negative *since
 * means "from now"). *events gets the array of changes (maybe empty, when
 * the deadline passes quietly) and *since advances past them.
 */
enum status coord_kv_watch(struct coord_client *cc, const char *prefix,
    int64_t *since, int64_t deadline, json_t **events);
/*
 * Follows the changes under prefix after since (negative: from now),
 * calling fn with each, until count of them (0: no limit) or the deadline;
 * *seen gets how many fn was given. Coordd going away and coming back does
 * not end it: it asks again until the deadline. ST_OK at the count or the
 * deadline, whichever comes first; else why the watch failed.
 */
enum status coord_kv_follow(struct coord_client *cc, const char *prefix,
    int64_t since, long count, int64_t deadline,
    void (*fn)(json_t *ev, void *arg), void *arg, long *seen);

/* The whole cluster status object (GET /v1/tasks). */
enum status coord_status(struct coord_client *cc, int64_t deadline,
    json_t **status);
/*
 * The daemon's replicas (GET /v1/replicas) into *replicas, or NULL when it
 * has none (it runs without --store). A daemon of any kind: dispatchd's
 * client asks it through its coord_client.
 */
enum status coord_replicas(struct coord_client *cc, int64_t deadline,
    json_t **replicas);

#endif
