/*
 * agent_main.h: the skeleton a task's agent (preemptwatch) runs in, as
 * daemon.h is the daemons'. It takes every signal through a signalfd (its
 * own, and those the notice sources name), serves syncpoint's page to the
 * command, polls the other notice sources, and runs: registers the task
 * (a new incarnation each run), starts the session's threads and the
 * preemption protocol's, and hands the run to the program. While the run
 * says the command may run again and --max-restarts allows, it restarts,
 * once every task has left the run that ended.
 */
#ifndef MUSTER_AGENT_MAIN_H
#define MUSTER_AGENT_MAIN_H

#include <signal.h>

#include "agent_opts.h"
#include "coord_client.h"
#include "preempt.h"
#include "proc.h"
#include "session.h"

/* What a run is given. */
struct agent_main {
	struct agent_opts *o;
	struct session s;           /* the task's registration */
	struct preempt_watch watch; /* the protocol's thread */
	struct coord_client *cc;    /* the main thread's own */
	struct proc_guard guard;    /* the command's */
	sigset_t blocked;           /* the signals the command unblocks */
	int notice_sig[65];         /* the signals that are notices */
	int sfd;                    /* every signal, as it comes */
	long restarts;              /* of the command so far */
};

/*
 * Follows one run, from registration to its end: the exit code, and in
 * *restartable whether the command may run again.
 */
typedef int (*agent_run_fn)(struct agent_main *ag, void *arg, int *restartable);

/*
 * The agent's life with options o, each run through run(arg): the exit
 * code, the reason said on stderr. The notice poller may still run: the
 * program exits at once, without tearing down (_exit).
 */
int agent_main(struct agent_opts *o, agent_run_fn run, void *arg);

/*
 * The run's calls to coordd, each saying in the log what failed (it
 * changes nothing then). agent_main_leave: the task leaves the cluster.
 * agent_main_depart: its command is done, and it leaves with the others,
 * through the shutdown barrier when coordd has one: 0, or, after a signal
 * while it waited there (it then leaves alone), 128 + the signal.
 * agent_main_report: err is the task's error.
 */
void agent_main_leave(struct agent_main *ag);
int agent_main_depart(struct agent_main *ag);
void agent_main_report(struct agent_main *ag, const char *err);

#endif
