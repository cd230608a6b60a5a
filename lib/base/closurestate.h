/*
 * closurestate.h: which closures a listing asks for (dispatchctl ls
 * --state, GET /v1/closures?state=): a set of a closure's states, named as
 * the replies name them (NOT_READY, READY, ABORTED, CANCELLED) or by the
 * two states NOT_READY stands for (queued, running), in any case.
 */
#ifndef MUSTER_CLOSURESTATE_H
#define MUSTER_CLOSURESTATE_H

#define CLOSURE_QUEUED 0x01u
#define CLOSURE_RUNNING 0x02u
#define CLOSURE_READY 0x04u
#define CLOSURE_ABORTED 0x08u
#define CLOSURE_CANCELLED 0x10u

/* What a usage message lists. */
#define CLOSURE_STATE_NAMES \
	"NOT_READY, READY, ABORTED, CANCELLED, queued or running"

/* The states name stands for; 0 when it names none. */
unsigned closure_states_parse(const char *name);

#endif
