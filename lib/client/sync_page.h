/*
 * sync_page.h: the page preemptwatch shares with its command, and what
 * preemptwatch does to it. The layout is fixed (struct sync_page at the
 * start of the mapping: the fields below, in order, native endian, no
 * padding), so that programs in any language may map it through the
 * socket protocol of sync_server.h and read it as syncpoint(1) says.
 *
 * Ordering: a caller stores its step and then loads the state; the
 * protocol stores FROZEN and then loads the step. Both are sequentially
 * consistent, so either the caller sees FROZEN and waits, or the protocol
 * sees its step: no step is ever taken past the sync point unnoticed.
 */
#ifndef MUSTER_SYNC_PAGE_H
#define MUSTER_SYNC_PAGE_H

#include <stdatomic.h>
#include <stdint.h>

#include "syncpoint.h"

struct sync_page {
	_Atomic int64_t step;      /* the last step reached, -1 none */
	_Atomic uint32_t state;    /* enum sync_state */
	_Atomic uint32_t seq;      /* futex word, bumped on each change */
	_Atomic int64_t sync_step; /* when SYNC_KNOWN */
	_Atomic int64_t death_ms;  /* Unix time in ms, 0 when none */
	_Atomic uint32_t reached;  /* a caller was told "this is it" */
};

/* State changes, with a wake-up of every waiter. */
void sync_page_set(struct sync_page *p, enum sync_state st);
/* Freezes steps and returns the last one reached. */
int64_t sync_page_freeze(struct sync_page *p);
void sync_page_reset(struct sync_page *p);

/* Waits while the futex word is still seen (timeout_ms -1: forever). */
void sync_page_wait(struct sync_page *p, uint32_t seen, int64_t timeout_ms);

#endif
