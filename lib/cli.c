#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

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
cli_parse_long(const char *s, long min, long max, long *v)
{
	char *end;
	long x;

	if (s == NULL || *s == '\0')
		return -1;
	errno = 0;
	x = strtol(s, &end, 10);
	if (*end != '\0' || errno != 0 || x < min || x > max)
		return -1;
	*v = x;
	return 0;
}

int
cli_parse_size(const char *s, size_t *bytes)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		return -1;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: return -1;
	}
	if (*end == 'i' || *end == 'B') {
		if (*end == 'i')
			end++;
		if (*end == 'B')
			end++;
	}
	if (*end != '\0' || v > (SIZE_MAX >> shift))
		return -1;
	*bytes = (size_t)(v << shift);
	return 0;
}

int
cli_parse_listen(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon;
	size_t n;
	char *end;
	long p;

	if (s[0] == '[') {
		const char *rb = strchr(s, ']');
		if (rb == NULL || rb[1] != ':')
			return -1;
		n = (size_t)(rb - s - 1);
		s++;
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (colon == NULL)
			return -1;
		n = (size_t)(colon - s);
	}
	if (n == 0 || n >= hostlen)
		return -1;
	p = strtol(colon + 1, &end, 10);
	if (colon[1] == '\0' || *end != '\0' || p < 0 || p > 65535)
		return -1;
	memcpy(host, s, n);
	host[n] = '\0';
	*port = (int)p;
	/* Daemons bind numeric addresses only: no resolver surprises. */
	{
		unsigned char addr[sizeof(struct in6_addr)];
		if (inet_pton(AF_INET, host, addr) != 1 &&
		    inet_pton(AF_INET6, host, addr) != 1)
			return -1;
	}
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

void
cli_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int
cli_write_port_file(const char *path, int port)
{
	char tmp[4096];
	FILE *f;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >=
	    (int)sizeof(tmp))
		return -1;
	if ((f = fopen(tmp, "w")) == NULL)
		return -1;
	fprintf(f, "%d\n", port);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		unlink(tmp);
		return -1;
	}
	return 0;
}
