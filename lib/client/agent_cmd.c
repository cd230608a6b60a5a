/*
 * agent_cmd.c: a task's command's environment and its guard's note.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_cmd.h"
#include "keypath.h"
#include "task.h"

int
agent_cmd_env(struct agent_cmd_env *e, char *const *base, const char *addr,
    const struct coord_agent *a, long restarts)
{
	static const char *names[AGENT_CMD_NVARS] = {"MUSTER_COORD",
	    "MUSTER_TASK", "MUSTER_INCARNATION", "MUSTER_JOB",
	    "MUSTER_TASK_INDEX", "MUSTER_RANK", "MUSTER_WORLD_SIZE",
	    "MUSTER_EPOCH", "MUSTER_RESTARTS", "MUSTER_RUN_PREFIX",
	    "MUSTER_TASK_SECRET"};
	char **set = e->set;
	struct task_name tn;
	char inc[17];
	int k = 0;

	e->env = NULL;
	task_parse(a->task, &tn);
	if (asprintf(&set[k++], "%s=%s", names[0], addr) < 0 ||
	    asprintf(&set[k++], "%s=%s", names[1], a->task) < 0 ||
	    asprintf(&set[k++], "%s=%s", names[2],
	        task_format_incarnation(a->incarnation, inc)) < 0 ||
	    asprintf(&set[k++], "%s=%s", names[3], tn.job) < 0 ||
	    asprintf(&set[k++], "%s=%ld", names[4], tn.index) < 0 ||
	    asprintf(&set[k++], "%s=%ld", names[5], a->rank) < 0 ||
	    asprintf(&set[k++], "%s=%ld", names[6], a->world) < 0 ||
	    asprintf(&set[k++], "%s=%ld", names[7], a->epoch) < 0 ||
	    asprintf(&set[k++], "%s=%ld", names[8], restarts) < 0 ||
	    asprintf(&set[k++], "%s=%s/run/%ld", names[9], KEYPATH_RUN,
	        a->epoch) < 0 ||
	    asprintf(&set[k++], "%s=%s", names[10], a->secret) < 0) {
		k--;
		goto out;
	}
	set[k] = NULL;
	if ((e->env = proc_env(base, set)) != NULL)
		return 0;
out:
	while (k > 0)
		free(set[--k]);
	set[0] = NULL;
	return -1;
}

void
agent_cmd_env_free(struct agent_cmd_env *e)
{
	for (int k = 0; e->set[k] != NULL; k++)
		free(e->set[k]);
	free(e->env);
	e->env = NULL;
	e->set[0] = NULL;
}

/* One of the guard's requests: the agent of a is lost, and how. */
static size_t
lost(struct coord_client *cc, const struct coord_agent *a, const char *how,
    char *buf, size_t size)
{
	char msg[512];

	snprintf(msg, sizeof(msg),
	    "the agent (preemptwatch) of %s %s; its command was stopped",
	    a->task, how);
	return coord_error_request(cc, a, ST_UNAVAILABLE, msg, buf, size);
}

void
agent_cmd_note(struct coord_client *cc, const struct coord_agent *a,
    struct proc_note *note)
{
	memset(note, 0, sizeof(*note));
	/*
	 * The guard's report is a plain request written by a process that
	 * may not allocate; over TLS there is none.
	 */
	if (coord_client_https(cc) ||
	    coord_client_sockaddr(cc, &note->addr, &note->addrlen) < 0) {
		note->addrlen = 0;
		return;
	}
	note->died_len = lost(cc, a, "died: killed or crashed", note->died,
	    sizeof(note->died));
	note->frozen_len = lost(cc, a, "stopped responding (stopped or hung)",
	    note->frozen, sizeof(note->frozen));
}
