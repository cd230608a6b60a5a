#include <string.h>

#include "status.h"

static const struct {
	const char *name;
	int http;
} table[ST_COUNT] = {
    [ST_OK] = {"OK", 200},
    [ST_NOT_FOUND] = {"NOT_FOUND", 404},
    [ST_USAGE] = {"USAGE", 400},
    [ST_INVALID_ARGUMENT] = {"INVALID_ARGUMENT", 400},
    [ST_DEADLINE_EXCEEDED] = {"DEADLINE_EXCEEDED", 504},
    [ST_ALREADY_EXISTS] = {"ALREADY_EXISTS", 409},
    [ST_FAILED_PRECONDITION] = {"FAILED_PRECONDITION", 412},
    [ST_ABORTED] = {"ABORTED", 409},
    [ST_CANCELLED] = {"CANCELLED", 499},
    [ST_UNAVAILABLE] = {"UNAVAILABLE", 503},
    [ST_INTERNAL] = {"INTERNAL", 500},
    [ST_UNAUTHENTICATED] = {"UNAUTHENTICATED", 401},
    [ST_RESOURCE_EXHAUSTED] = {"RESOURCE_EXHAUSTED", 413},
};

const char *
status_name(enum status st)
{
	if ((unsigned)st >= ST_COUNT)
		return "INTERNAL";
	return table[st].name;
}

enum status
status_from_name(const char *name)
{
	if (name == NULL)
		return ST_INTERNAL;
	for (int i = 0; i < ST_COUNT; i++)
		if (strcmp(table[i].name, name) == 0)
			return (enum status)i;
	return ST_INTERNAL;
}

int
status_http(enum status st)
{
	if ((unsigned)st >= ST_COUNT)
		return 500;
	return table[st].http;
}

enum status
status_from_http(int http)
{
	switch (http) {
	case 200:
	case 201:
	case 204: return ST_OK;
	case 400:
	case 405: return ST_INVALID_ARGUMENT;
	case 401:
	case 403: return ST_UNAUTHENTICATED;
	case 404: return ST_NOT_FOUND;
	case 408:
	case 504: return ST_DEADLINE_EXCEEDED;
	case 409: return ST_ABORTED;
	case 412: return ST_FAILED_PRECONDITION;
	case 413:
	case 414:
	case 429:
	case 431: return ST_RESOURCE_EXHAUSTED;
	case 499: return ST_CANCELLED;
	case 502:
	case 503: return ST_UNAVAILABLE;
	default: return ST_INTERNAL;
	}
}

int
status_exit(enum status st)
{
	if ((unsigned)st >= ST_COUNT)
		return ST_INTERNAL;
	return (int)st;
}
