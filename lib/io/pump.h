/*
 * pump.h: the loop of whoever runs a child and watches it (a closure, a
 * dataset's reader, a training command): one poll over the child's pipes
 * and the caller's own descriptors (a cancel pipe, a signalfd, an event
 * queue), woken in time for the caller's next deadline and for the KILL
 * of a stop under way (proc.h's proc_stop); the child's stdin fed from
 * memory, the last bytes of its stderr kept for an error message, and its
 * end: its stdout and stderr closed and, when the pump is to reap it, the
 * process reaped.
 *
 * The caller loops on pump_done (or on its own end, with no pipes): each
 * pump_wait polls once, reading stderr and writing stdin itself, and
 * then the caller acts on what is ready: its deadlines and
 * proc_stop_tick, its own descriptors (pump_ready), the child's stdout
 * (pump_read, into a buffer of the caller's). Nothing is read from stdout
 * but by pump_read, so a caller with no room for it yet (a full buffer)
 * waits before pump_wait and the child is held back by its pipe.
 *
 * A pump closes each pipe when it ends (end of file, an error, all of
 * stdin written), closes stdin once stdout and stderr have ended, and
 * pump_close closes whatever is left. It is one thread's.
 *
 * A child its stop has killed is done once it has ended, though what it
 * started in a session of its own, out of the KILL's reach, may hold its
 * pipes open: what they hold then is read, and no more is waited for.
 */
#ifndef MUSTER_PUMP_H
#define MUSTER_PUMP_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "buf.h"
#include "proc.h"

/* Of a child's stderr, the last bytes kept: at least these, at most
 * twice as many. */
#define PUMP_TAIL 4096

/* The child's pipes, for pump_ready and pump_open. */
enum { PUMP_OUT, PUMP_ERR, PUMP_IN };
/* The caller's own descriptors, at most (pump_watch). */
#define PUMP_WATCH_MAX 4

struct pump {
	/* The caller's to set after pump_init, before the first pump_wait. */
	pid_t pid;              /* reaped by pump_done once stdout and stderr
	                           have ended; 0: the caller reaps it */
	struct proc_stop *stop; /* its KILL wakes pump_wait; NULL: none */
	/* Each whole line of stderr as it comes (a log), or NULL. */
	void (*line)(void *arg, const char *s, size_t n);
	void *arg;
	/* The end: pid's wait status, once pump_done has reaped it. */
	int status;
	/* The pump's own. */
	struct pollfd pf[4 + PUMP_WATCH_MAX]; /* pipes, pidfd, the caller's */
	nfds_t n;
	struct buf *tail;
	size_t lined; /* of *tail, handed to line */
	const char *in;
	size_t inlen, inoff;
	int awaiting, reaped;
	int letting_go;  /* killed, ended, its pipes held by others */
	size_t out_left; /* then: what stdout held, still to read */
};

/*
 * A pump over the child's stdout and stderr (read ends, -1: none), which
 * it owns from now on; the tail of stderr goes to *tail (kept by the
 * caller, NULL: stderr is read and dropped).
 */
void pump_init(struct pump *p, int out, int err, struct buf *tail);

/*
 * Feeds the child's stdin (fd, the write end, owned by the pump from now
 * on) with the len bytes at data, which the caller keeps until the pump
 * is closed; fd is made non-blocking and closed once they are written.
 */
void pump_feed(struct pump *p, int fd, const void *data, size_t len);

/*
 * Watches fd (the caller's, left open) for events too: its index for
 * pump_ready, or -1 when PUMP_WATCH_MAX are watched already.
 */
int pump_watch(struct pump *p, int fd, short events);

/*
 * Polls once, until something is ready or the time until (monotonic ms;
 * 0: none) or the stop's KILL comes, whichever is first; once stdout and
 * stderr have ended, or the KILL has gone, until pid ends (at most a
 * second: every 5 ms when the system has no pidfd). Reads stderr and writes stdin when they are
 * ready. 0, or -1 when poll failed (a signal is 0, with nothing ready).
 */
int pump_wait(struct pump *p, int64_t until);

/* What pump_wait found on descriptor i (poll's revents); 0 for -1. */
short pump_ready(const struct pump *p, int i);

/*
 * Reads what pump_wait found on stdout, up to len bytes: how many (0:
 * nothing was ready, or stdout has ended, and pump_open says which).
 */
size_t pump_read(struct pump *p, void *b, size_t len);

/* Whether pipe i (PUMP_OUT, PUMP_ERR, PUMP_IN) is still open. */
int pump_open(const struct pump *p, int i);

/*
 * Whether the child is done: stdout and stderr have ended and pid, if
 * set, has ended too (killed, it has ended and what its pipes held then
 * is read); it is reaped here (status).
 */
int pump_done(struct pump *p);

/* Closes the pipes still open (the child sees EOF and EPIPE) and the
 * pidfd; the caller's descriptors are left open. Again is harmless. */
void pump_close(struct pump *p);

/*
 * Appends to a tail kept as the pump keeps stderr's: when it grows past
 * twice PUMP_TAIL, only its last PUMP_TAIL bytes are kept.
 */
void pump_tail_add(struct buf *tail, const void *p, size_t n);

#endif
