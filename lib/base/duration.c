#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "duration.h"

static const struct {
	const char *unit;
	double ms;
} units[] = {
    {"ms", 1},
    {"us", 0.001},
    {"ns", 0.000001},
    {"h", 3600000},
    {"m", 60000},
    {"s", 1000},
};

int
duration_parse(const char *s, int64_t *ms)
{
	double total = 0;

	if (s == NULL || *s == '\0')
		return -1;
	while (*s != '\0') {
		double v = 0, scale = 1;
		int digits = 0;
		size_t i;

		while (isdigit((unsigned char)*s)) {
			v = v * 10 + (*s++ - '0');
			digits++;
		}
		if (*s == '.') {
			s++;
			while (isdigit((unsigned char)*s)) {
				scale /= 10;
				v += (*s++ - '0') * scale;
				digits++;
			}
		}
		if (digits == 0)
			return -1;
		if (*s == '\0') {
			/* A bare trailing number is seconds, as sleep(1) reads it. */
			total += v * 1000;
			if (total > 9.2e15)
				return -1;
			break;
		}
		for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
			size_t n = strlen(units[i].unit);
			if (strncmp(s, units[i].unit, n) == 0) {
				total += v * units[i].ms;
				s += n;
				break;
			}
		}
		if (i == sizeof(units) / sizeof(units[0]))
			return -1;
		if (total > 9.2e15)
			return -1;
	}
	*ms = (int64_t)(total + 0.5);
	return 0;
}

char *
duration_format(int64_t ms, char *buf, size_t size)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} parts[] = {{"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};
	size_t off = 0;

	if (size == 0)
		return buf;
	buf[0] = '\0';
	if (ms < 0) {
		snprintf(buf, size, "-");
		off = 1;
		ms = -ms;
	}
	if (ms == 0) {
		snprintf(buf + off, size - off, "0s");
		return buf;
	}
	for (size_t i = 0; i < 4 && off < size; i++) {
		if (ms >= parts[i].ms) {
			int n = snprintf(buf + off, size - off, "%lld%s",
			    (long long)(ms / parts[i].ms), parts[i].unit);
			if (n < 0)
				break;
			off += (size_t)n;
			ms %= parts[i].ms;
		}
	}
	return buf;
}

int64_t
duration_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec
duration_realtime_in(int64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}
