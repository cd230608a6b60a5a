/*
 * dispatch_wait.h: waiting on dispatchd for as long as the caller allows,
 * one long poll after another: for a closure to end, for a queue to be
 * done. A poll that ran out, or that a dispatchd going away cut short, is
 * sent again while time is left; other failures end the wait with
 * dispatchd's error body, as the calls of dispatch_client.h do.
 */
#ifndef MUSTER_DISPATCH_WAIT_H
#define MUSTER_DISPATCH_WAIT_H

#include <stdint.h>

#include <jansson.h>

#include "dispatch_client.h"
#include "status.h"

/*
 * The closure once it has ended, or as it stands (NOT_READY) once
 * deadline (HTTP_NO_DEADLINE: none) has passed.
 */
enum status dispatch_wait_closure(struct dispatch_client *dc, uint64_t id,
    int64_t deadline, json_t **reply, json_t **errbody);

/*
 * The queue's counts once it is done, or the last ones not done when
 * deadline has passed (their "done" is false). progress, if not NULL,
 * sees every answer, the last too, and then each second at least. A
 * queue's error ends the wait at once
 * (with its closure in *errbody), and so does UNAVAILABLE for want of a
 * live worker (dispatchd's --worker-recovery).
 */
enum status dispatch_wait_queue(struct dispatch_client *dc, const char *queue,
    int64_t deadline, void (*progress)(json_t *counts, void *arg), void *arg,
    json_t **reply, json_t **errbody);

#endif
