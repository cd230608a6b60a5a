#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "duration.h"
#include "log.h"
#include "parse.h"

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

const char *
cli_dispatch_addr(const char *flag)
{
	const char *env;

	if (flag != NULL)
		return flag;
	env = getenv(CLI_DISPATCH_ENV);
	if (env != NULL && *env != '\0')
		return env;
	return CLI_DISPATCH_DEFAULT;
}

int
cli_std_option(int c, const char *synopsis)
{
	switch (c) {
	case 'h': fputs(synopsis, stdout); exit(0);
	case 'V': printf("%s %s\n", log_prog(), MUSTER_VERSION); exit(0);
	default: fputs(synopsis, stderr); return status_exit(ST_USAGE);
	}
}

int
cli_duration_flag(const char *synopsis, const char *flag, const char *arg,
    int64_t min, int64_t *ms)
{
	char least[64], f[32];

	if (duration_parse(arg, ms) == 0 && *ms >= min)
		return 0;
	if (min > 1)
		snprintf(least, sizeof(least), " of %s or more",
		    duration_format(min, f, sizeof(f)));
	else
		snprintf(least, sizeof(least), "%s",
		    min > 0 ? " above zero" : "");
	return cli_usage_error(synopsis, "%s %s is not a duration%s", flag, arg,
	    least);
}

int
cli_number_flag(const char *synopsis, const char *flag, const char *arg,
    long min, long max, long *v)
{
	if (parse_long(arg, min, max, v) < 0)
		return cli_usage_error(synopsis,
		    "%s %s is not a number from %ld to %ld", flag, arg, min,
		    max);
	return 0;
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
cli_flushed(FILE *out, int rc)
{
	int lost = ferror(out);

	if (fflush(out) != 0 && rc == 0)
		return cli_fail(ST_INTERNAL, "writing: %s", strerror(errno));
	if (lost && rc == 0)
		return cli_fail(ST_INTERNAL,
		    "writing: a write failed, and what it held was lost");
	return rc;
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
