/*
 * dataread.h: the consumer of a dispatchd job, behind `dispatchctl read`.
 *
 * It holds a job client (created or joined by name), heartbeats the
 * ranges it delivered and the tasks it lost, reads each task's elements
 * from its worker over a connection of its own, and writes their bytes,
 * already in the dataset's framing, to one file descriptor. Delivered
 * means written there: a range is reported only after its bytes were
 * written, and a reply is acknowledged (by the next request) only after
 * that too, so a dead worker's splits are read again from where this
 * consumer stopped, and a dead consumer's unacknowledged elements go to
 * another one once their worker takes it for gone. The worker holds them
 * for this consumer, not for its connection (it names itself in its
 * requests), so that a connection that breaks between a reply and the
 * next request delivers nothing twice.
 *
 * Round-robin jobs (consumers > 0) are read a round at a time instead:
 * round r from the (r mod count)-th task that has started by r.
 *
 * Written is not consumed: the program at the other end of a pipe may die
 * with elements unread. With positions set the output is a positioned
 * stream (datapos.h): the job's start, then each chunk's header before
 * its elements, then an end record, from which the program knows what it
 * consumed and saves it to resume from.
 */
#ifndef MUSTER_DATAREAD_H
#define MUSTER_DATAREAD_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "buf.h"
#include "dispatch_client.h"
#include "status.h"

#define DATAREAD_MAX_BYTES_DEFAULT (4u << 20)
#define DATAREAD_MAX_BYTES_LIMIT (64u << 20) /* what a worker allows */
#define DATAREAD_REFRESH_DEFAULT 200         /* ms between heartbeats */

struct dataread_opts {
	const char *dataset; /* id or name */
	const char *job;  /* a job name to share, or NULL: a job of our own */
	const char *run;  /* the run of the training job reading it; NULL */
	const char *mode; /* NULL: dynamic */
	long repeat;      /* epochs; 0: for ever */
	int64_t seed;
	long consumers; /* round robin among this many; 0: not */
	long consumer_index;
	json_t *from_state; /* a checkpoint to start at, or NULL */
	const char *host;   /* read only tasks of workers on this host; NULL */
	int64_t refresh_ms;
	size_t max_bytes;   /* of one reply's elements */
	int64_t timeout_ms; /* dispatchd unreachable this long: UNAVAILABLE;
			     * -1: never */
	int out;            /* where elements go */
	int stop_fd;        /* readable (a signal): stop; -1: none */
	int positions;      /* out gets a positioned stream (datapos.h) */
	int close_ok;       /* out closed by its reader: the read ends well */
	/* A line on stderr, written over each second (for a terminal):
	 * elements and MiB written, MiB per second, splits done of all. */
	int progress;
};

/*
 * Reads the job to its end. ST_OK at the end of the data; ST_CANCELLED
 * when stop_fd became readable, or when o->out was closed by its reader
 * (elements it never read may have gone down with it: err says how many
 * were written), unless o->close_ok says a consumer that has had enough
 * may end the read (as `head` ends a pipe): then ST_OK; ST_INTERNAL with
 * the reader's message when a task or the job failed; otherwise
 * dispatchd's status (ST_NOT_FOUND: the job client was released or
 * collected). The job client is released on every path.
 */
enum status dataread_run(struct dispatch_client *dc,
    const struct dataread_opts *o, char *err, size_t errlen);

#endif
