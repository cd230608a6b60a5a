#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

static const char *progname = "muster";
static int verbosity;

void
log_init(const char *prog, int verbose)
{
	const char *slash = strrchr(prog, '/');

	progname = slash != NULL ? slash + 1 : prog;
	verbosity = verbose;
}

const char *
log_prog(void)
{
	return progname;
}

int
log_verbose(void)
{
	return verbosity;
}

static void
vlog(const char *fmt, va_list ap)
{
	char line[4096];
	int n = snprintf(line, sizeof(line), "%s: ", progname);

	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	/* One write per line, so lines from threads do not interleave. */
	strcat(line, "\n");
	fputs(line, stderr);
}

void
log_info(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

void
log_debug(const char *fmt, ...)
{
	va_list ap;

	if (verbosity == 0)
		return;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}
