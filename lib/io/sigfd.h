/*
 * sigfd.h: signals as a file descriptor a supervisor polls with the rest
 * (signalfd), never delivered to its threads.
 */
#ifndef MUSTER_SIGFD_H
#define MUSTER_SIGFD_H

#include <signal.h>
#include <stddef.h>

/*
 * Takes the n signals: back to their default action (a shell may have
 * started us with them ignored), blocked in every thread, and readable
 * from the returned descriptor. *blocked gets the set, for children to
 * unblock. -1 on failure, with errno.
 */
int sigfd_open(const int *sigs, size_t n, sigset_t *blocked);

/* The next pending signal, or 0 when there is none. */
int sigfd_read(int fd);

#endif
