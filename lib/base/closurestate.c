/*
 * closurestate.c: the names of sets of a closure's states.
 */
#include <stddef.h>
#include <strings.h>

#include "closurestate.h"

unsigned
closure_states_parse(const char *name)
{
	static const struct {
		const char *name;
		unsigned states;
	} names[] = {
	    {"not_ready", CLOSURE_QUEUED | CLOSURE_RUNNING},
	    {"queued", CLOSURE_QUEUED},
	    {"running", CLOSURE_RUNNING},
	    {"ready", CLOSURE_READY},
	    {"aborted", CLOSURE_ABORTED},
	    {"cancelled", CLOSURE_CANCELLED},
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(name, names[i].name) == 0)
			return names[i].states;
	return 0;
}
