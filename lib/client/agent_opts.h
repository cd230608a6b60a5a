/*
 * agent_opts.h: the command line of a task's agent (preemptwatch): its
 * options with their defaults and checks, and its synopsis, the man
 * page's SYNOPSIS.
 */
#ifndef MUSTER_AGENT_OPTS_H
#define MUSTER_AGENT_OPTS_H

#include <stddef.h>
#include <stdint.h>

#include "notice.h"

#define AGENT_MAX_NOTICES 8

extern const char agent_opts_synopsis[];

struct agent_opts {
	const char *addr; /* -c, else $MUSTER_COORD, else the default */
	const char *task;
	int wait_all;
	int64_t grace;
	int64_t bringup;
	struct notice_source notices[AGENT_MAX_NOTICES];
	size_t nnotices;
	int64_t notice_grace;
	int64_t notice_interval;
	int64_t window;
	int64_t barrier_timeout;
	int stop_signal;   /* how the command is asked to stop */
	int restart_code;  /* preempted, checkpointed at the sync point */
	int unsynced_code; /* preempted, with no such checkpoint */
	long max_restarts;
	char **cmd;
};

/*
 * Fills o from the defaults ($MUSTER_TASK for -t), the options and the
 * command; each -v adds one to *verbose. 0, or the exit code, the mistake
 * said with the synopsis on stderr (-h and --version exit).
 */
int agent_opts_parse(int argc, char **argv, struct agent_opts *o, int *verbose);

#endif
