/*
 * agent_main.c: the skeleton of a task's agent, around its runs.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_main.h"
#include "cli.h"
#include "duration.h"
#include "log.h"
#include "notice.h"
#include "sigfd.h"
#include "sync_server.h"
#include "task.h"

static enum status
register_call(struct coord_client *cc, void *arg)
{
	struct agent_main *ag = arg;

	return coord_register(cc, &ag->s.a, duration_now_ms() + ag->o->bringup);
}

struct epoch_wait {
	long after;
	int64_t deadline;
	json_t *finished; /* who left run after for good */
};

static enum status
epoch_call(struct coord_client *cc, void *arg)
{
	struct epoch_wait *w = arg;
	long epoch;

	json_decref(w->finished);
	return coord_wait_epoch(cc, w->after, w->deadline, &epoch,
	    &w->finished);
}

/*
 * Waits until every task has left run epoch, so that the next run starts
 * clean. 0, or the exit code to leave with: done_code (when not 0) if a
 * task finished its work in that run, since the next run could never have
 * every task; the code of a failed wait otherwise.
 */
static int
wait_next_run(struct agent_main *ag, long epoch, int done_code)
{
	struct epoch_wait w = {epoch, duration_now_ms() + ag->o->bringup, NULL};
	enum status st;
	const char *first;
	size_t n;
	int sig;

	st = session_interruptible(ag->cc, ag->sfd, epoch_call, &w, &sig);
	if (st == ST_CANCELLED) {
		log_info("SIG%s while waiting for the job to wind down: "
		         "exiting",
		    sigabbrev_np(sig));
		json_decref(w.finished);
		return 128 + sig;
	}
	if (st != ST_OK) {
		json_decref(w.finished);
		return cli_fail(st, "waiting for the job to wind down: %s",
		    coord_client_error(ag->cc));
	}
	n = json_array_size(w.finished);
	first = json_string_value(json_array_get(w.finished, 0));
	if (n > 0) {
		char more[48] = "";
		if (n > 1)
			snprintf(more, sizeof(more), " and %zu more", n - 1);
		/* Waiting for a task that is done would last --timeout. */
		if (done_code != 0)
			log_info("not running the command again: task %s%s "
			         "finished its work in run %ld, and will not "
			         "come to another",
			    first != NULL ? first : "?", more, epoch);
		else
			done_code = cli_fail(ST_FAILED_PRECONDITION,
			    "task %s%s finished its work in run %ld, and will "
			    "not come to another: no run of the whole job "
			    "is left to join",
			    first != NULL ? first : "?", more, epoch);
		json_decref(w.finished);
		return done_code;
	}
	json_decref(w.finished);
	return 0;
}

/* Says why leaving failed, unless it did not, or the task had left. */
static void
leaving(struct agent_main *ag, enum status st)
{
	if (st != ST_OK && st != ST_FAILED_PRECONDITION)
		log_info("leaving the cluster: %s: %s", status_name(st),
		    coord_client_error(ag->cc));
}

void
agent_main_leave(struct agent_main *ag)
{
	leaving(ag,
	    coord_shutdown_task(ag->cc, &ag->s.a, 0, duration_now_ms() + 3000));
}

static enum status
shutdown_call(struct coord_client *cc, void *arg)
{
	struct agent_main *ag = arg;

	return coord_shutdown_task(cc, &ag->s.a, 1,
	    duration_now_ms() + 3600000);
}

int
agent_main_depart(struct agent_main *ag)
{
	int sig;
	enum status st =
	    session_interruptible(ag->cc, ag->sfd, shutdown_call, ag, &sig);

	if (st == ST_CANCELLED) {
		log_info("SIG%s while waiting at the shutdown barrier: exiting",
		    sigabbrev_np(sig));
		agent_main_leave(ag);
		return 128 + sig;
	}
	leaving(ag, st);
	return 0;
}

void
agent_main_report(struct agent_main *ag, const char *err)
{
	log_info("%s; reporting the error of %s", err, ag->s.a.task);
	if (coord_report_error(ag->cc, &ag->s.a, ST_INTERNAL, err,
	        duration_now_ms() + 5000) != ST_OK)
		log_info("could not report the error: %s",
		    coord_client_error(ag->cc));
}

/* Starts what every run shares: 0, or the exit code. */
static int
setup(struct agent_main *ag, struct evq *q, struct sync_server **sync)
{
	static const int owned[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
	/* Static: the poller outlives agent_main, until the program exits. */
	static struct notice_watch nw;
	struct agent_opts *o = ag->o;
	int sigs[4 + AGENT_MAX_NOTICES], polled;
	size_t nsigs = 4;
	pthread_t nt;
	char err[512];

	if (coord_agent_init(&ag->s.a, o->task, 0) < 0)
		return cli_usage_error(agent_opts_synopsis,
		    "%s is not a task (want JOB:INDEX)", o->task);
	if ((ag->cc = coord_client_new(o->addr, err, sizeof(err))) == NULL)
		return cli_usage_error(agent_opts_synopsis, "%s", err);
	coord_client_set_task_secret(ag->cc, ag->s.a.secret);
	if (evq_open(q) < 0)
		return cli_fail(ST_INTERNAL, "pipe: %s", strerror(errno));
	if ((*sync = sync_server_new(err, sizeof(err))) == NULL)
		return cli_fail(ST_INTERNAL, "%s", err);
	setenv(SYNCPOINT_ENV, sync_server_path(*sync), 1);

	/* Signals come through signalfd, never to the threads; those a
	 * shell may have started us with ignored are ours. */
	memcpy(sigs, owned, sizeof(owned));
	polled = notice_signals(o->notices, o->nnotices, sigs, &nsigs,
	    ag->notice_sig);
	if ((ag->sfd = sigfd_open(sigs, nsigs, &ag->blocked)) < 0)
		return cli_fail(ST_INTERNAL, "signalfd: %s", strerror(errno));
	signal(SIGPIPE, SIG_IGN);
	nw = (struct notice_watch){.src = o->notices,
	    .n = o->nnotices,
	    .grace_ms = o->notice_grace,
	    .interval_ms = o->notice_interval,
	    .q = q};
	if (sync_server_start(*sync) < 0 ||
	    (polled && pthread_create(&nt, NULL, notice_watcher, &nw) != 0))
		return cli_fail(ST_INTERNAL, "cannot start threads");

	ag->s.addr = o->addr;
	ag->s.q = q;
	ag->s.wait_all = o->wait_all;
	ag->s.bringup_ms = o->bringup;
	ag->s.guard = &ag->guard;
	atomic_store(&ag->guard.fd, -1);
	ag->watch = (struct preempt_watch){.s = &ag->s,
	    .page = sync_server_page(*sync),
	    .notice_grace_ms = o->notice_grace,
	    .window_ms = o->window,
	    .barrier_timeout_ms = o->barrier_timeout,
	    .grace_ms = o->grace};
	return 0;
}

/*
 * Registers the task for the next run: 0, or the exit code. A task
 * restarted from outside while the run it left winds down joins the next
 * run, as a restart from here would.
 */
static int
enroll(struct agent_main *ag)
{
	enum status st;
	int sig, rc;

	for (;;) {
		ag->s.a.incarnation = task_new_incarnation();
		ag->s.gen++;
		/* A signal while coordd is still away ends the wait. */
		st = session_interruptible(ag->cc, ag->sfd, register_call, ag,
		    &sig);
		if (st == ST_CANCELLED) {
			log_info("SIG%s while registering: exiting",
			    sigabbrev_np(sig));
			return 128 + sig;
		}
		if (st == ST_OK || ag->s.a.wait_epoch < 0)
			break;
		log_info("%s; waiting for the next run",
		    coord_client_error(ag->cc));
		if ((rc = wait_next_run(ag, ag->s.a.wait_epoch, 0)) != 0)
			return rc;
		ag->s.gen--;
	}
	if (st != ST_OK)
		return cli_fail(st, "registering %s: %s", ag->s.a.task,
		    coord_client_error(ag->cc));
	log_debug("registered %s in epoch %ld; heartbeat every %" PRId64 "ms",
	    ag->s.a.task, ag->s.a.epoch, ag->s.a.heartbeat_interval_ms);
	return 0;
}

int
agent_main(struct agent_opts *o, agent_run_fn run, void *arg)
{
	/* Static, as the notice poller's queue: it outlives the call. */
	static struct agent_main ag;
	static struct evq q;
	struct sync_server *sync = NULL;
	long restarts = 0;
	int rc, restartable;

	ag.o = o;
	if ((rc = setup(&ag, &q, &sync)) != 0)
		return rc;
	for (;;) {
		if ((rc = enroll(&ag)) != 0)
			break;
		ag.restarts = restarts;
		if (session_start(&ag.s) < 0 ||
		    session_spawn(&ag.s, preempt_watcher, &ag.watch) < 0) {
			rc = cli_fail(ST_INTERNAL, "cannot start threads");
			break;
		}
		rc = run(&ag, arg, &restartable);
		session_stop(&ag.s);
		proc_guard_close(&ag.guard);
		if (!restartable || restarts >= o->max_restarts)
			break;
		restarts++;
		log_info("restarting the command (%ld of at most %ld) once "
		         "every task has left run %ld",
		    restarts, o->max_restarts, ag.s.a.epoch);
		if ((rc = wait_next_run(&ag, ag.s.a.epoch, rc)) != 0)
			break;
		sync_page_reset(ag.watch.page);
	}
	coord_client_free(ag.cc);
	sync_server_free(sync);
	return rc;
}
