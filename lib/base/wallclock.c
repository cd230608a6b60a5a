#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "wallclock.h"

int64_t
wall_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

char *
wall_format(int64_t ms, char *buf, size_t size)
{
	/* Whole seconds down, so that a time before 1970 keeps a positive
	 * fraction; four digits of year, as RFC 3339 has them. */
	int64_t sec = ms / 1000, frac = ms % 1000;
	time_t t;
	struct tm tm;
	int n;

	if (frac < 0) {
		frac += 1000;
		sec--;
	}
	t = (time_t)sec;
	gmtime_r(&t, &tm);
	n = snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	    tm.tm_sec);
	if (n < 0 || (size_t)n >= size)
		return buf;
	if (frac != 0)
		snprintf(buf + n, size - (size_t)n, ".%03dZ", (int)frac);
	else
		snprintf(buf + n, size - (size_t)n, "Z");
	return buf;
}

static int
digits(const char **p, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)**p))
			return -1;
		*v = *v * 10 + (*(*p)++ - '0');
	}
	return 0;
}

int
wall_parse_rfc3339(const char *s, int64_t *ms)
{
	struct tm tm = {0};
	int y, mo, d, h, mi, sec, frac = 0, scale = 1000;
	int64_t off = 0;

	while (isspace((unsigned char)*s))
		s++;
	if (digits(&s, 4, &y) < 0 || *s++ != '-' || digits(&s, 2, &mo) < 0 ||
	    *s++ != '-' || digits(&s, 2, &d) < 0 ||
	    (*s != 'T' && *s != 't' && *s != ' '))
		return -1;
	s++;
	if (digits(&s, 2, &h) < 0 || *s++ != ':' || digits(&s, 2, &mi) < 0 ||
	    *s++ != ':' || digits(&s, 2, &sec) < 0)
		return -1;
	if (*s == '.') {
		s++;
		if (!isdigit((unsigned char)*s))
			return -1;
		while (isdigit((unsigned char)*s)) {
			if (scale > 1) {
				scale /= 10;
				frac += (*s - '0') * scale;
			}
			s++;
		}
	}
	if (*s == 'Z' || *s == 'z') {
		s++;
	} else if (*s == '+' || *s == '-') {
		int sign = *s++ == '-' ? -1 : 1, oh, om;
		if (digits(&s, 2, &oh) < 0 || *s++ != ':' ||
		    digits(&s, 2, &om) < 0)
			return -1;
		off = sign * ((int64_t)oh * 3600 + om * 60);
	} else {
		return -1;
	}
	while (isspace((unsigned char)*s))
		s++;
	if (*s != '\0' || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 ||
	    mi > 59 || sec > 60)
		return -1;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	*ms = ((int64_t)timegm(&tm) - off) * 1000 + frac;
	return 0;
}

int
wall_parse_http_date(const char *s, int64_t *ms)
{
	struct tm tm = {0};
	const char *end = strptime(s, "%a, %d %b %Y %H:%M:%S GMT", &tm);

	if (end == NULL || *end != '\0')
		return -1;
	*ms = (int64_t)timegm(&tm) * 1000;
	return 0;
}
