/*
 * coord_reach.h: what a client's calls do while their daemon (coordd, or
 * dispatchd) cannot be reached.
 *
 * The order in which a cluster comes up must not matter, so by default a
 * call that cannot connect tries again, in silence, until its deadline
 * (http_client.h). A person waiting on a command at a terminal would see
 * nothing for as long as 30 seconds; so a program a person waits on says
 * on stderr what it is waiting for, and a command that is not to wait
 * does not wait for the daemon either.
 */
#ifndef MUSTER_COORD_REACH_H
#define MUSTER_COORD_REACH_H

#include "coord_client.h"

enum coord_reach {
	/* Try again until the deadline, saying nothing (the default). */
	COORD_REACH_QUIET,
	/* The same, saying on stderr what the call waits for: at once when
	 * stderr is a terminal, and otherwise only once the daemon has not
	 * been reached for a few seconds, so that a script's log does not
	 * tell of every daemon that was still starting. */
	COORD_REACH_SAY,
	/* Not at all: a daemon that refuses the connection, or does not
	 * answer it (over https, its handshake too) within a second, fails
	 * the call at once with UNAVAILABLE. */
	COORD_REACH_NOW,
};

/* How cc's calls treat their daemon, until its first call reaches it. */
void coord_reach_set(struct coord_client *cc, enum coord_reach how);

#endif
