#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "token.h"

int
token_valid(const char *s, size_t n)
{
	if (n < TOKEN_MIN || n > TOKEN_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] > '~')
			return 0;
	return 1;
}

int
token_read_file(const char *path, char *out, size_t outlen, int *loose,
    char *err, size_t errlen)
{
	char buf[TOKEN_MAX + 2];
	struct stat st;
	ssize_t n;
	size_t len, start = 0;
	int fd;

	*loose = 0;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		snprintf(err, errlen, "cannot read %s: %s", path,
		    strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) == 0 && (st.st_mode & 077) != 0)
		*loose = 1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0) {
		snprintf(err, errlen, "cannot read %s: %s", path,
		    strerror(errno));
		return -1;
	}
	buf[n] = '\0';
	len = strcspn(buf, "\n");
	while (start < len && (buf[start] == ' ' || buf[start] == '\t'))
		start++;
	while (len > start &&
	    (buf[len - 1] == ' ' || buf[len - 1] == '\t' ||
	        buf[len - 1] == '\r'))
		len--;
	len -= start;
	if (!token_valid(buf + start, len) || len >= outlen) {
		snprintf(err, errlen,
		    "%s does not hold a token: its first line must be %d to %d "
		    "printable characters without spaces (make one with "
		    "`head -c 32 /dev/urandom | base64`)",
		    path, TOKEN_MIN, TOKEN_MAX);
		memset(buf, 0, sizeof(buf));
		return -1;
	}
	memcpy(out, buf + start, len);
	out[len] = '\0';
	memset(buf, 0, sizeof(buf));
	return 0;
}

int
token_equal(const char *a, size_t alen, const char *b, size_t blen)
{
	volatile unsigned char diff = alen != blen;
	size_t n = alen > blen ? alen : blen;

	/* Every byte of the longer is looked at, whatever differs first. */
	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)(i < alen ? a[i] : 0) ^
		    (unsigned char)(i < blen ? b[i] : 0);
	return diff == 0;
}

int
token_random(char *out, size_t outlen)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char r[16];

	if (outlen < 33 || getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return -1;
	for (size_t i = 0; i < sizeof(r); i++) {
		out[2 * i] = hex[r[i] >> 4];
		out[2 * i + 1] = hex[r[i] & 15];
	}
	out[32] = '\0';
	return 0;
}
