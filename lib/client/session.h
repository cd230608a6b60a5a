/*
 * session.h: one registration of a task with coordd (one incarnation) and
 * the threads that keep it: heartbeats, which register again with a
 * coordd that restarted, and a poller that waits for the whole cluster,
 * then for the errors of other tasks. The threads tell the supervisor's
 * main loop what happened through its event queue, and end when the
 * session is stopped.
 */
#ifndef MUSTER_SESSION_H
#define MUSTER_SESSION_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "agent.h"
#include "evq.h"
#include "proc.h"

enum session_ev {
	SESSION_READY,          /* every task is there */
	SESSION_FAILED,         /* the cluster failed, or this task's place
				 * in it is lost */
	SESSION_BRINGUP_FAILED, /* the cluster never came together */
	SESSION_NOTICE,         /* a notice from this task's own sources */
	SESSION_DEATH,          /* the cluster's notice: the death time */
	SESSION_SYNCED,         /* the sync protocol ended (st says how) */
};

/* One event, one write: smaller than PIPE_BUF. */
struct session_event {
	enum session_ev type;
	unsigned gen; /* the session it is from */
	enum status st;
	int64_t value; /* a death time, or the sync step */
	char msg[1800];
};

void session_post(struct evq *q, enum session_ev type, unsigned gen,
    enum status st, int64_t value, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

#define SESSION_MAX_THREADS 6

struct session {
	const char *addr; /* coordd */
	struct coord_agent a;
	unsigned gen;       /* bumped by the caller per run */
	int wait_all;       /* wait for every task first */
	int64_t bringup_ms; /* for how long */
	struct evq *q;
	struct proc_guard *guard; /* ticked while the session lasts */
	atomic_int ready;         /* every task is there */
	struct cancel cancel;
	pthread_t threads[SESSION_MAX_THREADS];
	int nthreads;
};

/* Starts the heartbeat and poller threads. 0, or -1. */
int session_start(struct session *s);
/* One more thread of the session (it ends when the session stops). */
int session_spawn(struct session *s, void *(*fn)(void *), void *arg);
/* Stops every thread of the session and waits for them. */
void session_stop(struct session *s);
/* A client whose calls give up when the session stops; NULL on ENOMEM. */
struct coord_client *session_client(struct session *s);

/*
 * Runs call(cc, arg) so that a signal on sfd cuts it short: SIGCHLD only
 * makes it ask again; any other signal ends it with ST_CANCELLED and the
 * signal in *sig.
 */
enum status session_interruptible(struct coord_client *cc, int sfd,
    enum status (*call)(struct coord_client *cc, void *arg), void *arg,
    int *sig);

#endif
