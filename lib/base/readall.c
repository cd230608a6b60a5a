#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "readall.h"

int
readall_file(const char *path, struct buf *b, size_t max)
{
	int fd = strcmp(path, "-") == 0 ? 0 : open(path, O_RDONLY | O_CLOEXEC);
	char chunk[65536];
	ssize_t n;
	int rc = 0;

	if (fd < 0)
		return -1;
	while ((n = read(fd, chunk, sizeof(chunk))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -1;
			break;
		}
		if (b->len + (size_t)n > max) {
			rc = -2;
			break;
		}
		if (buf_append(b, chunk, (size_t)n) < 0) {
			errno = ENOMEM;
			rc = -1;
			break;
		}
	}
	if (fd != 0)
		close(fd);
	return rc;
}

int
readall_line(FILE *f, struct buf *b, size_t max)
{
	int ch;

	buf_reset(b);
	while ((ch = getc_unlocked(f)) != EOF) {
		char c = (char)ch;
		if (c == '\n')
			return 1;
		if (c == '\0')
			return -3;
		if (b->len >= max)
			return -2;
		if (buf_append(b, &c, 1) < 0) {
			errno = ENOMEM;
			return -1;
		}
	}
	if (ferror(f))
		return -1;
	return b->len > 0 ? 1 : 0;
}
