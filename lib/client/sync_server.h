/*
 * sync_server.h: preemptwatch's side of the sync page: it creates the page
 * and hands it out over a Unix socket in a fresh private directory, whose
 * path the command finds in MUSTER_SYNC_SOCKET. One request per
 * connection: "PAGE\n" gets "ok\n" with the page's descriptor attached
 * (SCM_RIGHTS).
 */
#ifndef MUSTER_SYNC_SERVER_H
#define MUSTER_SYNC_SERVER_H

#include <stddef.h>

#include "sync_page.h"

struct sync_server;

struct sync_server *sync_server_new(char *err, size_t errlen);
const char *sync_server_path(const struct sync_server *s);
struct sync_page *sync_server_page(struct sync_server *s);
/* Serves clients until sync_server_free (runs its own thread). */
int sync_server_start(struct sync_server *s);
void sync_server_free(struct sync_server *s);

#endif
