/*
 * agent_exit.c: the end of a preempted run, from the sync page.
 */
#include <inttypes.h>
#include <stdio.h>
#include <sys/wait.h>

#include "agent_exit.h"

enum agent_exit_end
agent_exit_preempted(struct sync_page *page, int status, const char *sync_err,
    char *why, size_t size)
{
	uint32_t told = atomic_load(&page->reached);
	enum sync_state state;
	int64_t sync_step;

	if (told == SYNCPOINT_YES && WIFEXITED(status) &&
	    WEXITSTATUS(status) == 0)
		return AGENT_EXIT_END_SYNCED;
	state = (enum sync_state)atomic_load(&page->state);
	sync_step = atomic_load(&page->sync_step);
	if (told == SYNCPOINT_YES)
		snprintf(why, size,
		    "after it was told to checkpoint at the sync point");
	else if (told == SYNCPOINT_PAST)
		snprintf(why, size,
		    "past the sync point: it was already beyond step %" PRId64
		    " when it asked",
		    sync_step);
	else if (state == SYNC_FAILED)
		snprintf(why, size, "with no sync point: %s",
		    sync_err[0] != '\0' ? sync_err : "the protocol failed");
	else if (state == SYNC_KNOWN)
		snprintf(why, size,
		    "before it reached the sync point, step %" PRId64,
		    sync_step);
	else
		snprintf(why, size, "before the tasks agreed on a sync point");
	return state != SYNC_KNOWN && state != SYNC_FAILED ?
	    AGENT_EXIT_END_PENDING :
	    AGENT_EXIT_END_UNSYNCED;
}
