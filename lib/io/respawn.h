/*
 * respawn.h: a program that starts itself again when it dies, as Dask's
 * nanny restarts its worker and s6-supervise its service.
 *
 * respawn_fork forks. The child returns 0 at once and goes on as the real
 * program. The parent stays, never returns, and from then on:
 *
 * - a child that dies by a signal, or exits with a status that is not one
 *   of cfg->final, is forked again (the new child returns 0 from the same
 *   call) after a pause: backoff_min_ms at first, doubled at each death
 *   that comes within healthy_ms of its start, up to backoff_max_ms; a
 *   child that lived longer starts the pause over;
 * - a child that exits with a status of cfg->final ends the parent too,
 *   with that status: the program stopped on purpose (0), or it cannot
 *   work as configured (a usage error, a refused token), which starting
 *   it again would not mend;
 * - SIGTERM, SIGINT and SIGHUP sent to the parent are passed on to the
 *   child; after SIGTERM or SIGINT, the parent exits with the child's
 *   status once it ends (128 + the signal if it is then between two
 *   children), and starts nothing more; a second SIGTERM or SIGINT kills
 *   the child at once;
 * - the parent is the subreaper of what the child starts: once the child
 *   has died, whatever of its processes outlived it (a closure's own
 *   children) is killed, with its process group, before anything starts
 *   again;
 * - the child gets SIGTERM when the parent dies (PR_SET_PDEATHSIG), so a
 *   parent killed -9 does not leave its child running unsupervised;
 * - each death and each start is a line on stderr, with the child's pid.
 *
 * Call it before any thread is started: the child is a copy of the caller
 * with only the calling thread. The parent ignores SIGPIPE (its stderr may
 * close) and takes SIGCHLD's default whatever it inherited; the child gets
 * back the caller's SIGPIPE and signal mask.
 */
#ifndef MUSTER_RESPAWN_H
#define MUSTER_RESPAWN_H

#include <stddef.h>
#include <stdint.h>

struct respawn_config {
	const char *name; /* who the child is, in the log lines */
	const int *final; /* exit statuses that end the parent too */
	size_t nfinal;
	int64_t backoff_min_ms, backoff_max_ms;
	int64_t healthy_ms; /* a life this long starts the backoff over */
};

/* 0 in each child; the parent does not return. -1 (errno) if the first
 * fork fails. */
int respawn_fork(const struct respawn_config *cfg);

/* The pause before the next start, after a child that lived lived_ms and
 * a pause of last_ms before it (0: none yet). */
int64_t respawn_backoff(const struct respawn_config *cfg, int64_t last_ms,
    int64_t lived_ms);

#endif
