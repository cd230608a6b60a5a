#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "log.h"

const char *
cli_coord_addr(const char *flag)
{
	const char *env;

	if (flag != NULL)
		return flag;
	env = getenv(CLI_COORD_ENV);
	if (env != NULL && *env != '\0')
		return env;
	return CLI_COORD_DEFAULT;
}

int
cli_fail(enum status st, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: %s: %s\n", log_prog(), status_name(st), msg);
	return status_exit(st);
}

int
cli_usage_error(const char *synopsis, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: %s\n%s", log_prog(), msg, synopsis);
	return status_exit(ST_USAGE);
}
