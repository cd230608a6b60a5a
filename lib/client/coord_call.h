/*
 * coord_call.h: what the client layer's modules share to talk to coordd.
 * Not for programs: they use coord_client.h and agent.h.
 */
#ifndef MUSTER_COORD_CALL_H
#define MUSTER_COORD_CALL_H

#include <stdint.h>

#include <jansson.h>

#include "buf.h"
#include "coord_client.h"
#include "http_client.h"

struct coord_client {
	struct http_client *http;
	char service[17]; /* the coordd a watch's revisions are from */
	char err[1024];   /* the last error */
	const char *peer; /* the daemon it talks to, for people: "coordd" */
	int reach;        /* enum coord_reach: its calls' wait for the peer */
	int reached;      /* the peer was reached, or the wait said: no probe */
	int cancel_fd;    /* readable: give up, or -1 */
};

/* How a call may be treated: repeated after a failure, and as a long
 * poll whose reply may arrive a little after its deadline. CALL_SAY adds
 * that a person waits on the call, which then treats a daemon it cannot
 * reach as COORD_REACH_SAY does (coord_reach.h). */
#define CALL_ONCE 0
#define CALL_REPEAT 1
#define CALL_POLL 3
#define CALL_SAY 4

/* Sets the client's last error; returns st. */
enum status coord_fail(struct coord_client *cc, enum status st, const char *fmt,
    ...) __attribute__((format(printf, 3, 4)));

/* base + percent-encoded key + suffix. */
int coord_key_path(struct buf *p, const char *base, const char *key,
    const char *suffix);

/*
 * Before a call, how = its CALL_ flags: whether the peer can be reached,
 * as cc's reach (or CALL_SAY) asks to know, and how long to wait for it
 * (coord_reach.h). ST_OK to go on with the call; ST_UNAVAILABLE or
 * ST_CANCELLED, with cc's last error set, not to.
 */
enum status coord_reach_wait(struct coord_client *cc, int how,
    int64_t deadline);

enum status coord_call(struct coord_client *cc, const char *method,
    const struct buf *path, const void *body, size_t len, const char *ctype,
    int64_t deadline, int how, struct http_resp *resp);
/* Sends a JSON body and parses the JSON reply into *reply (when OK). */
enum status coord_call_json(struct coord_client *cc, const char *method,
    const struct buf *path, json_t *body, int64_t deadline, int how,
    json_t **reply, struct http_resp *errresp);
json_t *coord_parse_reply(struct coord_client *cc,
    const struct http_resp *resp);

/*
 * The wait one long poll asks of the server (at most max_ms, never past
 * the caller's deadline), and the deadline of that poll.
 */
int64_t coord_poll_wait(int64_t deadline, int64_t max_ms,
    int64_t *poll_deadline);
/* Whether a failed long poll should be sent again: time is left, and the
 * failure is coordd being away or the poll itself running out. */
int coord_poll_again(enum status st, int64_t deadline);

#endif
