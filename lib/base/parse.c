#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"

int
parse_long(const char *s, long min, long max, long *v)
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
parse_int64(const char *s, int64_t *v)
{
	char *end;
	long long x;

	if (s == NULL || (*s != '-' && *s != '+' && (*s < '0' || *s > '9')))
		return -1;
	errno = 0;
	x = strtoll(s, &end, 10);
	if (*end != '\0' || errno != 0 || end == s)
		return -1;
	*v = x;
	return 0;
}

int
parse_size(const char *s, size_t *bytes)
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
	case 'k':
	case 'K':
		shift = 10;
		end++;
		break;
	case 'm':
	case 'M':
		shift = 20;
		end++;
		break;
	case 'g':
	case 'G':
		shift = 30;
		end++;
		break;
	default: return -1;
	}
	if (*end == 'i')
		end++;
	if (*end == 'B')
		end++;
	if (*end != '\0' || v > (SIZE_MAX >> shift))
		return -1;
	*bytes = (size_t)(v << shift);
	return 0;
}

int
parse_listen(const char *s, char *host, size_t hostlen, int *port)
{
	unsigned char addr[sizeof(struct in6_addr)];
	const char *colon;
	size_t n;
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
	if (n == 0 || n >= hostlen || parse_long(colon + 1, 0, 65535, &p) < 0)
		return -1;
	memcpy(host, s, n);
	host[n] = '\0';
	*port = (int)p;
	if (inet_pton(AF_INET, host, addr) != 1 &&
	    inet_pton(AF_INET6, host, addr) != 1)
		return -1;
	return 0;
}
