/*
 * dispatch_client.h: a connection to dispatchd. Calls send and receive
 * JSON; a failed call's message is the client's last error, and the error
 * body dispatchd sent (a queue's error carries its closure) is handed back.
 * One client per thread.
 */
#ifndef MUSTER_DISPATCH_CLIENT_H
#define MUSTER_DISPATCH_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "http_client.h"
#include "status.h"

struct dispatch_client;

/* How a call may be treated (as coord_call.h's CALL_). */
#define DC_ONCE 0   /* not repeated after a failure that may have landed */
#define DC_REPEAT 1 /* safe to send again */
#define DC_POLL 3   /* a long poll: its reply may come a little late */

/* With MUSTER_TOKEN_FILE set, every request carries its token. */
struct dispatch_client *dispatch_client_new(const char *addr, char *err,
    size_t errlen);
void dispatch_client_free(struct dispatch_client *dc);
/* Calls give up with ST_CANCELLED once fd is readable. */
void dispatch_client_set_cancel(struct dispatch_client *dc, int fd);
const char *dispatch_client_error(const struct dispatch_client *dc);
const char *dispatch_client_addr(const struct dispatch_client *dc);

/*
 * Sends body (NULL: none; len bytes of JSON) and parses the reply into
 * *reply when it is 2xx (*code: the HTTP status). On failure *errbody, if
 * asked for, gets the error object dispatchd sent, or NULL.
 */
enum status dispatch_call(struct dispatch_client *dc, const char *method,
    const char *path, const char *body, size_t len, int64_t deadline, int how,
    json_t **reply, json_t **errbody, long *code);
/* The same with a JSON body. */
enum status dispatch_call_json(struct dispatch_client *dc, const char *method,
    const char *path, json_t *body, int64_t deadline, int how, json_t **reply,
    json_t **errbody, long *code);

/* The wait of one long poll (see coord_poll_wait). */
int64_t dispatch_poll_wait(int64_t deadline, int64_t max_ms,
    int64_t *poll_deadline);
/* Whether a failed long poll should be sent again. */
int dispatch_poll_again(enum status st, int64_t deadline);

#endif
