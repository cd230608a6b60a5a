/*
 * preemptwatch: the agent of one task. Registers it with coordd, keeps it
 * alive with heartbeats, waits for the whole cluster, runs the training
 * command, stops it when another task fails and reports its own failure.
 * It also watches for preemption notices, runs the sync protocol that picks
 * the step every task checkpoints at, answers syncpoint, and exits with the
 * restart code (or restarts the command itself) afterwards.
 *
 * The library does the work (agent_main.h: the signals, the notices,
 * registration, restarts and leaving; session.h: the session's threads;
 * preempt.h: the protocol; proc.h: the command, its guard, its stop;
 * pump.h: the wait for signals, events and the next deadline;
 * agent_cmd.h: what the command is given; agent_opts.h: the options;
 * agent_exit.h: the exit codes, and which a preempted run leaves with);
 * this file is one run, as a table of states and events.
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "agent_cmd.h"
#include "agent_exit.h"
#include "agent_main.h"
#include "agent_opts.h"
#include "cli.h"
#include "coord_client.h"
#include "duration.h"
#include "log.h"
#include "preempt.h"
#include "proc.h"
#include "pump.h"
#include "session.h"
#include "sigfd.h"
#include "wallclock.h"

extern char **environ;

/*
 * One run of the command, from registration to its end. The state says
 * what the command is doing; after a preemption notice (r->noticed) any
 * end of the command is a preemption.
 */
enum state {
	WAITING,  /* for every task; no command yet */
	RUNNING,  /* the command runs */
	STOPPING, /* a failure: the command is being stopped */
	SETTLING, /* it ended after a notice: its last step still takes
		   * part in the sync protocol before the task leaves */
	NSTATES
};

enum event {
	E_READY,
	E_FAILED,
	E_BRINGUP_FAILED,
	E_NOTICE,
	E_DEATH,
	E_SYNCED,
	E_SIGNAL,      /* any other signal */
	E_EXIT,        /* the command ended */
	E_STOP_TIME,   /* a grace period before the death time */
	E_SETTLE_TIME, /* no sync protocol came in time */
	NEVENTS
};

struct run {
	struct agent_opts *o;
	struct agent_main *ag; /* the session, the client, the signals */
	enum state state;
	int noticed;          /* a notice came: the run is preempted */
	int abandon;          /* leave without waiting for the sync protocol */
	int64_t death;        /* wall ms of the notice's death time; 0 */
	int64_t settle_until; /* monotonic: SETTLING ends by then */
	int own_sent;         /* this task published a notice */
	pid_t child;
	struct proc_stop stop;
	int64_t stop_at;   /* monotonic; 0: none */
	char reason[2000]; /* why the command is stopped */
	/* What the current event carries. */
	const struct session_event *ev;
	int sig, status;
	/* The end of the run. */
	int done, code, restartable;
	char sync_err[1800]; /* why the sync protocol failed */
};

/* Ends the run: leave the cluster, exit with code. */
static enum state
finish(struct run *r, int code, int restartable)
{
	agent_main_leave(r->ag);
	r->done = 1;
	r->code = code;
	r->restartable = restartable;
	return r->state;
}

static enum state
ignore(struct run *r)
{
	return r->state;
}

/* Publishes this task's own notice: the first in the cluster wins. */
static void
publish(struct run *r, int64_t death, const char *from)
{
	char when[48];
	enum status st =
	    preempt_publish(r->ag->cc, &death, duration_now_ms() + 5000);

	r->own_sent = 1;
	if (st == ST_OK)
		log_info("preemption notice (%s): death at %s", from,
		    wall_format(death, when, sizeof(when)));
	else
		log_info("could not publish the preemption notice (%s): %s: %s",
		    from, status_name(st), coord_client_error(r->ag->cc));
}

static enum state
start(struct run *r)
{
	struct proc_spec spec = {.argv = r->o->cmd,
	    .unblock = &r->ag->blocked,
	    .parent_death_signal = SIGTERM,
	    .stdin_fd = -1,
	    .stdout_fd = -1,
	    .stderr_fd = -1};
	struct agent_cmd_env env;
	struct proc_note note;
	char err[512];
	int exec_errno = 0;

	if (agent_cmd_env(&env, environ, r->o->addr, &r->ag->s.a,
	        r->ag->restarts) < 0)
		return finish(r, cli_fail(ST_INTERNAL, "out of memory"), 0);
	spec.env = env.env;
	r->child = proc_spawn(&spec, &exec_errno, err, sizeof(err));
	agent_cmd_env_free(&env);
	if (r->child < 0 && exec_errno != 0) {
		/* Nothing ran: the task failed, as a crash would. */
		agent_main_report(r->ag, err);
		return finish(r, proc_exec_status(exec_errno), 1);
	}
	if (r->child < 0)
		return finish(r, cli_fail(ST_INTERNAL, "%s", err), 0);
	log_debug("started %s (pid %ld)", r->o->cmd[0], (long)r->child);
	/*
	 * Once the command runs, a guard stops it if we cannot: if we die,
	 * or freeze for two heartbeat timeouts (coordd has given up on the
	 * task after one).
	 */
	agent_cmd_note(r->ag->cc, &r->ag->s.a, &note);
	proc_guard_start(&r->ag->guard, r->child, r->o->stop_signal,
	    r->o->grace, 2 * r->ag->s.a.heartbeat_timeout_ms, &note);
	return RUNNING;
}

static enum state
bringup_failed(struct run *r)
{
	fprintf(stderr, "%s: %s\n", log_prog(), r->ev->msg);
	return finish(r,
	    r->ev->st == ST_INTERNAL ? AGENT_EXIT_PEER_FAILED :
	                               status_exit(r->ev->st),
	    r->ev->st == ST_INTERNAL);
}

static enum state
failed_early(struct run *r)
{
	fprintf(stderr, "%s: %s; stopping the command of %s\n", log_prog(),
	    r->ev->msg, r->ag->s.a.task);
	return finish(r, AGENT_EXIT_PEER_FAILED, 1);
}

static enum state
failed(struct run *r)
{
	snprintf(r->reason, sizeof(r->reason), "%s", r->ev->msg);
	fprintf(stderr, "%s: %s; stopping the command of %s\n", log_prog(),
	    r->ev->msg, r->ag->s.a.task);
	proc_stop_begin(&r->stop, r->child, r->o->stop_signal, r->o->grace,
	    duration_now_ms());
	return STOPPING;
}

static enum state
own_notice(struct run *r)
{
	publish(r, r->ev->value, r->ev->msg);
	r->noticed = 1;
	return r->state;
}

/*
 * The cluster's notice: SIGTERM the command a grace period before the
 * death time, SIGKILL at it, if it is still up.
 */
static enum state
death(struct run *r)
{
	int64_t at =
	    duration_now_ms() + (r->ev->value - r->o->grace - wall_now_ms());

	r->stop_at = at > 0 ? at : 1;
	log_info("preemption notice for the cluster: %s", r->ev->msg);
	r->noticed = 1;
	r->death = r->ev->value;
	return r->state;
}

static enum state
synced(struct run *r)
{
	/* The protocol logged why. */
	if (r->ev->st != ST_OK) {
		snprintf(r->sync_err, sizeof(r->sync_err), "%s", r->ev->msg);
		log_info("no sync point: the command will be stopped before "
		         "the death time");
	}
	return r->state;
}

/* A signal before the command runs: leave, as a shell would. */
static enum state
signalled_early(struct run *r)
{
	return finish(r, 128 + r->sig, 0);
}

static enum state
forward(struct run *r)
{
	kill(-r->child, r->sig);
	return r->state;
}

static enum state
stop_time(struct run *r)
{
	char d[32];

	log_info("the death time is %s away: stopping the command",
	    duration_format(r->o->grace, d, sizeof(d)));
	proc_stop_begin(&r->stop, r->child, r->o->stop_signal, r->o->grace,
	    duration_now_ms());
	return r->state;
}

static enum state exited_noticed(struct run *r);

/* The command ended on its own, with no failure. */
static enum state
exited(struct run *r)
{
	char what[64], err[600];

	if (r->noticed)
		return exited_noticed(r);
	if (r->status == 0) {
		/* Done: leave together; a signal on the way leaves at once. */
		r->done = 1;
		r->code = agent_main_depart(r->ag);
		return r->state;
	}
	snprintf(err, sizeof(err), "command %s %s", r->o->cmd[0],
	    proc_status_text(r->status, what, sizeof(what)));
	agent_main_report(r->ag, err);
	return finish(r, proc_status_code(r->status), 1);
}

/*
 * After a notice every end of the command is a preemption: the task is to
 * run again (a job that had finished finds so at once). The code says
 * whether it left a checkpoint every task agreed on: the restart code
 * (42) only when it was told "this is the sync point" and then exited 0;
 * the unsynced code (44) for every other end, with the reason.
 */
static enum state
exited_noticed(struct run *r)
{
	char what[64], why[2000];
	enum agent_exit_end end = agent_exit_preempted(r->ag->watch.page,
	    r->status, r->sync_err, why, sizeof(why));

	if (end == AGENT_EXIT_END_SYNCED) {
		log_info("the command checkpointed at the sync point and "
		         "exited; exiting with the restart code %d",
		    r->o->restart_code);
		return finish(r, r->o->restart_code, 1);
	}
	/*
	 * The others may be agreeing on a sync point this very moment:
	 * the task stays for it, so that its last step counts and they
	 * are not left waiting for it (its leaving would fail the
	 * protocol for all). The death time bounds the wait; a task alone
	 * in its job has nobody to stay for.
	 */
	if (end == AGENT_EXIT_END_PENDING && r->ag->s.a.world > 1 &&
	    r->state != SETTLING && !r->abandon) {
		int64_t left =
		    (r->death != 0 ? r->death :
		                     wall_now_ms() + r->o->notice_grace) -
		    wall_now_ms();
		log_info("the command %s after a preemption notice; staying "
		         "for the sync protocol, where its last step counts",
		    proc_status_text(r->status, what, sizeof(what)));
		/* At the latest until the death time. */
		r->settle_until =
		    duration_now_ms() + (left > 0 ? left : 0) + 2000;
		return SETTLING;
	}
	log_info("the command %s after a preemption notice, %s: no "
	         "checkpoint at the agreed step; exiting with %d",
	    proc_status_text(r->status, what, sizeof(what)), why,
	    r->o->unsynced_code);
	return finish(r, r->o->unsynced_code, 1);
}

/* The protocol ended while the task stayed for it: now it leaves. */
static enum state
settled(struct run *r)
{
	synced(r);
	return exited_noticed(r);
}

/* The cluster's notice, while staying for the protocol: until its death
 * time at the latest. */
static enum state
settle_death(struct run *r)
{
	int64_t left = r->ev->value - wall_now_ms();

	r->death = r->ev->value;
	r->settle_until = duration_now_ms() + (left > 0 ? left : 0) + 2000;
	return r->state;
}

/* A signal, or no protocol in time, while staying for it: leave now. */
static enum state
settle_abandoned(struct run *r)
{
	r->abandon = 1;
	return exited_noticed(r);
}

/* A failure while staying for the protocol: it trumps the notice. */
static enum state
settle_failed(struct run *r)
{
	fprintf(stderr,
	    "%s: the command had ended after a preemption notice; "
	    "stopped because %s\n",
	    log_prog(), r->ev->msg);
	return finish(r, AGENT_EXIT_PEER_FAILED, 1);
}

/* A failure trumps a notice: no sync point was kept. */
static enum state
exited_stopped(struct run *r)
{
	fprintf(stderr, "%s: stopped because %s\n", log_prog(), r->reason);
	return finish(r, AGENT_EXIT_PEER_FAILED, 1);
}

typedef enum state (*action)(struct run *r);

/* What each event does in each state. NULL: nothing (ignored). */
/* clang-format off */
static const action table[NSTATES][NEVENTS] = {
	[WAITING] = {
		[E_READY] = start, [E_FAILED] = failed_early,
		[E_BRINGUP_FAILED] = bringup_failed, [E_NOTICE] = own_notice,
		[E_DEATH] = death, [E_SYNCED] = synced,
		[E_SIGNAL] = signalled_early,
	},
	[RUNNING] = {
		[E_FAILED] = failed, [E_NOTICE] = own_notice,
		[E_DEATH] = death, [E_SYNCED] = synced, [E_SIGNAL] = forward,
		[E_EXIT] = exited, [E_STOP_TIME] = stop_time,
	},
	[STOPPING] = {
		[E_NOTICE] = own_notice, [E_SYNCED] = synced,
		[E_SIGNAL] = forward, [E_EXIT] = exited_stopped,
	},
	[SETTLING] = {
		[E_FAILED] = settle_failed, [E_SYNCED] = settled,
		[E_DEATH] = settle_death,
		[E_SIGNAL] = settle_abandoned, [E_SETTLE_TIME] = settle_abandoned,
	},
};
/* clang-format on */

static void
dispatch(struct run *r, enum event e)
{
	action a = table[r->state][e];

	r->state = (a != NULL ? a : ignore)(r);
}

/* The session events as run events; those of an earlier run are dropped. */
static void
on_session_event(struct run *r, const struct session_event *ev)
{
	static const enum event map[] = {
	    [SESSION_READY] = E_READY,
	    [SESSION_FAILED] = E_FAILED,
	    [SESSION_BRINGUP_FAILED] = E_BRINGUP_FAILED,
	    [SESSION_NOTICE] = E_NOTICE,
	    [SESSION_DEATH] = E_DEATH,
	    [SESSION_SYNCED] = E_SYNCED,
	};

	struct session_event failure;

	if (ev->type != SESSION_NOTICE && ev->gen != r->ag->s.gen)
		return;
	/*
	 * The protocol found a task in error: that is the cluster failing,
	 * and it trumps the notice, as when the error poll says so first.
	 */
	if (ev->type == SESSION_SYNCED && ev->st == ST_INTERNAL) {
		failure = *ev;
		snprintf(failure.msg, sizeof(failure.msg),
		    "no sync point was agreed: %.1700s", ev->msg);
		r->ev = &failure;
		dispatch(r, E_FAILED);
		return;
	}
	r->ev = ev;
	dispatch(r, map[ev->type]);
}

static void
on_signal(struct run *r, int sig)
{
	char from[32];
	int status;

	if (sig == SIGCHLD) {
		/* Orphans are reaped too (as process 1 of a container). */
		if (!proc_reap(r->child, &status) || r->child <= 0)
			return;
		r->child = 0;
		r->status = status;
		proc_stop_clear(&r->stop);
		/* The leader has ended: the guard stops the rest of it. */
		proc_guard_dismiss(&r->ag->guard);
		dispatch(r, E_EXIT);
		return;
	}
	if (r->ag->notice_sig[sig] && !r->own_sent) {
		struct session_event ev = {.type = SESSION_NOTICE,
		    .value = wall_now_ms() + r->o->notice_grace};
		snprintf(from, sizeof(from), "SIG%s", sigabbrev_np(sig));
		snprintf(ev.msg, sizeof(ev.msg), "%s", from);
		r->ev = &ev;
		dispatch(r, E_NOTICE);
		return;
	}
	r->sig = sig;
	dispatch(r, E_SIGNAL);
}

/*
 * One run: waits for the cluster, runs the command, and follows it to its
 * end, whatever ends it.
 */
static void
run_loop(struct run *r)
{
	struct pump p;
	int sigs, events;

	/*
	 * Each run is judged alone, so all of it but the options and the
	 * skeleton starts anew: nothing of the one before (how it ended,
	 * whether it may restart, why it was stopped) may decide this one,
	 * or a run that succeeds after a failed one would be restarted too.
	 */
	*r = (struct run){.o = r->o, .ag = r->ag, .state = WAITING};
	/*
	 * The command writes where we do, and its end comes as SIGCHLD (as
	 * process 1 of a container we reap orphans too): the pump has none
	 * of its pipes and no pid to reap, only the signals, the session's
	 * events and the times to wake for.
	 */
	pump_init(&p, -1, -1, NULL);
	p.stop = &r->stop;
	sigs = pump_watch(&p, r->ag->sfd, POLLIN);
	events = pump_watch(&p, evq_fd(r->ag->s.q), POLLIN);
	while (!r->done) {
		int64_t now, next = 0;
		struct session_event ev;
		int sig;

		if (r->stop_at != 0 && r->child > 0)
			next = r->stop_at;
		if (r->state == SETTLING &&
		    (next == 0 || r->settle_until < next))
			next = r->settle_until;
		if (pump_wait(&p, next) < 0)
			break;
		now = duration_now_ms();
		if (r->stop_at != 0 && r->child > 0 && now >= r->stop_at) {
			r->stop_at = 0;
			dispatch(r, E_STOP_TIME);
		}
		if (r->state == SETTLING && now >= r->settle_until)
			dispatch(r, E_SETTLE_TIME);
		if (proc_stop_tick(&r->stop, now))
			log_info("the command is still running after the grace "
			         "period: SIGKILL");
		if ((pump_ready(&p, events) & POLLIN) &&
		    evq_read(r->ag->s.q, &ev, sizeof(ev)) == 0)
			on_session_event(r, &ev);
		while (!r->done && (pump_ready(&p, sigs) & POLLIN) &&
		    (sig = sigfd_read(r->ag->sfd)) != 0)
			on_signal(r, sig);
	}
}

/* One run, for agent_main. */
static int
each_run(struct agent_main *ag, void *arg, int *restartable)
{
	struct run *r = arg;

	r->ag = ag;
	run_loop(r);
	*restartable = r->restartable;
	return r->code;
}

int
main(int argc, char **argv)
{
	static struct agent_opts o;
	struct run r = {.o = &o};
	int verbose = 0, rc;

	log_init(argv[0], 0);
	if ((rc = agent_opts_parse(argc, argv, &o, &verbose)) != 0)
		return rc;
	log_init(argv[0], verbose);
	rc = agent_main(&o, each_run, &r);
	fflush(NULL);
	/* Pollers of notices may be mid-call; exit ends them. */
	_exit(rc);
}
