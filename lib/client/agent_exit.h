/*
 * agent_exit.h: how a task's agent (preemptwatch) ends, besides with its
 * command's own status or a status's code: its own exit codes.
 */
#ifndef MUSTER_AGENT_EXIT_H
#define MUSTER_AGENT_EXIT_H

#define AGENT_EXIT_RESTART 42     /* the default of --restart-exit-code */
#define AGENT_EXIT_PEER_FAILED 43 /* the cluster failed: stopped */
#define AGENT_EXIT_UNSYNCED 44    /* the default of --unsynced-exit-code */

#endif
