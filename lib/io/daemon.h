/*
 * daemon.h: what a muster daemon does around its service: as many open
 * files as the system allows (every parked request holds a socket), and the
 * port file tests and scripts read the bound port from.
 */
#ifndef MUSTER_DAEMON_H
#define MUSTER_DAEMON_H

/* Raises the soft limit on open files to the hard one. */
void daemon_raise_nofile(void);

/* Writes the port to path atomically (a temporary file, then rename). */
int daemon_write_port_file(const char *path, int port);

#endif
