/*
 * agent_cmd.h: what a task's agent (preemptwatch) gives the command it
 * runs: the task's variables in its environment, which tell it what
 * torchrun's tell a worker (where it stands in the job, and in which run),
 * and the note its guard sends coordd should the agent be lost.
 */
#ifndef MUSTER_AGENT_CMD_H
#define MUSTER_AGENT_CMD_H

#include "agent.h"
#include "coord_client.h"
#include "proc.h"

#define AGENT_CMD_NVARS 11

struct agent_cmd_env {
	char **env;                     /* the command's whole environment */
	char *set[AGENT_CMD_NVARS + 1]; /* the task's variables in it */
};

/*
 * Builds the environment of a's command: base with MUSTER_COORD (addr),
 * MUSTER_TASK, MUSTER_INCARNATION, MUSTER_JOB, MUSTER_TASK_INDEX,
 * MUSTER_RANK, MUSTER_WORLD_SIZE, MUSTER_EPOCH, MUSTER_RESTARTS,
 * MUSTER_RUN_PREFIX and MUSTER_TASK_SECRET. Built for the child alone:
 * setenv() would race the agent's threads. 0, or -1 on ENOMEM.
 */
int agent_cmd_env(struct agent_cmd_env *e, char *const *base, const char *addr,
    const struct coord_agent *a, long restarts);
void agent_cmd_env_free(struct agent_cmd_env *e);

/*
 * What the command's guard tells coordd if the agent of a is killed or
 * freezes: that the task's agent was lost, so that every log blames the
 * right task, not a peer that died of a broken collective. Nothing over
 * TLS: coordd then learns of the loss from the heartbeats that stop.
 */
void agent_cmd_note(struct coord_client *cc, const struct coord_agent *a,
    struct proc_note *note);

#endif
