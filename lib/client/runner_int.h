/*
 * runner_int.h: what the files of the closure runner share. They are in
 * layers, lowest first; each uses only those above it in this list:
 *
 *	runner_slot.c      a slot told to stop, and the waits that wakes
 *	runner_closure.c   one run of a closure: the environment it sees,
 *	                   its output kept, a start given back, its result
 *	                   as JSON
 *	runner_resource.c  resources, built once per incarnation, and the
 *	                   directory they are built in
 *	runner_fork.c      a closure as a process of its own, its stdin,
 *	                   stdout and stderr pumped (io/pump.h)
 *	runner_serve.c     a closure as a line to the slot's --serve process
 *	runner_beat.c      registering, and the heartbeat
 *	runner.c           the slots' take and report loop; runner.h's calls
 */
#ifndef MUSTER_RUNNER_INT_H
#define MUSTER_RUNNER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "buf.h"
#include "dispatch_client.h"
#include "pump.h"
#include "runner.h"

/* Of a closure's stderr, reported: what the pump keeps of it. */
#define RUNNER_ERR_TAIL PUMP_TAIL

/* A resource, as built on this worker in this incarnation. */
struct runner_res {
	char name[132];
	int state; /* 0 building, 1 ready, 2 failed */
	char *message;
	int code;
	char dir[1280];
	struct runner_res *next;
};

struct runner_slot;

/* The worker: shared by every thread, guarded by mu. */
struct runner {
	struct runner_opts o;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	char inc[17];
	unsigned long gen; /* incarnations of this process */
	long index;
	int64_t hb_timeout;
	atomic_int stopping;
	struct runner_res *res;
	struct runner_slot *slots;
	pthread_t hb;
	int hb_cancel[2];
};

/* One slot: a thread that runs one closure at a time. */
struct runner_slot {
	struct runner *wk;
	int n;
	pthread_t th;
	struct dispatch_client *dc;
	int cancel[2]; /* wakes its take and its child's wait */
	pthread_mutex_t mu;
	pid_t pid;   /* the process running its closure, 0 */
	uint64_t id; /* the closure running, 0 */
	long attempt;
	int stop; /* 1: cancelled, 2: preempted */
	/* --serve */
	pid_t serve_pid;
	int serve_in, serve_out;
	struct buf serve_buf;
};

/* One run of a closure, and its end. */
struct runner_run {
	uint64_t id;
	long attempt;
	const char *queue;
	json_t *spec;
	json_t *resources;
	/* the end */
	int exited, code;
	struct buf out, err;
	int truncated;
	char message[1280];
	int aborted;      /* stopped: preempted, or superseded */
	int skip;         /* cancelled: nothing to report */
	int start_failed; /* not started, this worker's failure: given back */
};

/* runner_slot.c */
void runner_nap(int64_t ms);
void runner_wake(int fd);
void runner_drain(int fd);
/* Stops what slot s runs: why 1 cancelled, 2 preempted or superseded. */
void runner_slot_stop(struct runner_slot *s, int why);

/* runner_closure.c */
/*
 * Whether exec failed for want of this machine's resources (memory, file
 * descriptors, processes), not because of the command it was given.
 */
int runner_exec_local(int e);
/* What a closure sees set in its environment ("NAME=value" each). */
char **runner_closure_vars(struct runner_slot *s, struct runner_run *r);
void runner_strv_free(char **v);
/* Its stdout, cut at max_output. */
void runner_out_append(struct runner_slot *s, struct runner_run *r,
    const char *p, size_t n);
/*
 * r could not be started here, for a reason of this worker's (no file
 * descriptors, no memory, no fork, no /bin/sh for --serve): it goes back
 * to dispatchd, which runs it elsewhere or later and rests this worker.
 */
void runner_not_started(struct runner_slot *s, struct runner_run *r,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* What a result says, as JSON text. */
void runner_result_json(struct runner_run *r, struct buf *b);

/* runner_resource.c */
/*
 * Makes sure resource def is built on this worker: builds it (one slot
 * does, the others wait for it). 0 and its directory in dir; else its exit
 * code, with why in msg, or -1 when this worker could not start it.
 */
int runner_resource_ensure(struct runner_slot *s, json_t *def, char *dir,
    size_t dirlen, char *msg, size_t msglen);
/* Forgets every resource built: a new incarnation builds them again.
 * Called with wk->mu held. */
void runner_resources_clear(struct runner *wk);

/* runner_fork.c: runs r as a process of its own, filling its end. */
void runner_fork(struct runner_slot *s, struct runner_run *r);

/* runner_serve.c */
/* Runs r as a line to the slot's --serve process (started when there is
 * none), filling its end. */
void runner_serve(struct runner_slot *s, struct runner_run *r);
/* Ends the slot's --serve process: kill_it stops it, else it is awaited. */
void runner_serve_close(struct runner_slot *s, int kill_it);

/* runner_beat.c */
void *runner_heartbeat_main(void *arg);

#endif
