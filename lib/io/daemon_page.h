/*
 * daemon_page.h: the status page of a daemon (daemon_page.c), HTML.
 */
#ifndef MUSTER_DAEMON_PAGE_H
#define MUSTER_DAEMON_PAGE_H

#include <stddef.h>

extern const char daemon_page[];
extern const size_t daemon_page_len;

#endif
