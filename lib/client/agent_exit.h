/*
 * agent_exit.h: how a task's agent (preemptwatch) ends, besides with its
 * command's own status or a status's code: its own exit codes, and which
 * of them a command that ended after a preemption notice leaves with: the
 * restart code when it checkpointed at the step every task agreed on, the
 * unsynced code, with the reason, when it did not.
 */
#ifndef MUSTER_AGENT_EXIT_H
#define MUSTER_AGENT_EXIT_H

#include <stddef.h>

#include "sync_page.h"

#define AGENT_EXIT_RESTART 42     /* the default of --restart-exit-code */
#define AGENT_EXIT_PEER_FAILED 43 /* the cluster failed: stopped */
#define AGENT_EXIT_UNSYNCED 44    /* the default of --unsynced-exit-code */

enum agent_exit_end {
	AGENT_EXIT_END_SYNCED,   /* the restart code */
	AGENT_EXIT_END_PENDING,  /* the tasks may still agree on a sync point */
	AGENT_EXIT_END_UNSYNCED, /* the unsynced code */
};

/*
 * Where a command that ended (wait status) after a notice stands with the
 * sync point, as its page says: AGENT_EXIT_END_SYNCED only when it was told
 * "this is the sync point" and then exited 0. For any other end, why gets
 * why it left no checkpoint at the agreed step, as a phrase ("before it
 * reached the sync point, step 7"); sync_err is why the protocol failed,
 * or "" when it did not say.
 */
enum agent_exit_end agent_exit_preempted(struct sync_page *page, int status,
    const char *sync_err, char *why, size_t size);

#endif
