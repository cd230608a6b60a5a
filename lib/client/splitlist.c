/*
 * splitlist.c: split lists made from globs, ranges and a file's bytes, and
 * read back for a dataset.
 */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "buf.h"
#include "readall.h"
#include "splitlist.h"

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int
grow_files(char ***v, size_t n)
{
	char **nv = realloc(*v, (n > 0 ? n : 1) * sizeof(**v));

	if (nv == NULL)
		return -1;
	*v = nv;
	return 0;
}

/* A name that would break a split list (one split a line). */
static enum status
bad_name(const char *name, char *err, size_t errlen)
{
	if (strchr(name, '\n') == NULL)
		return ST_OK;
	snprintf(err, errlen, "a file name holds a newline");
	return ST_INVALID_ARGUMENT;
}

/* A write out refused (a reader gone, a full disk), errno saying why. */
static enum status
refused(char *err, size_t errlen)
{
	snprintf(err, errlen, "writing: %s", strerror(errno));
	return ST_INTERNAL;
}

/*
 * name as an absolute path into *abs (the caller's to free), against the
 * current directory, without resolving links: the workers that open it
 * run elsewhere. *cwd keeps the current directory once a relative name
 * has asked for it, for the names after it (the caller frees it).
 */
static enum status
absolute(const char *name, char **cwd, char **abs, char *err, size_t errlen)
{
	const char *dir = NULL;
	int n;

	if (name[0] != '/') {
		if (*cwd == NULL && (*cwd = getcwd(NULL, 0)) == NULL) {
			int e = errno;

			snprintf(err, errlen, "the current directory: %s",
			    strerror(e));
			return e == ENOMEM ? ST_RESOURCE_EXHAUSTED :
			                     ST_FAILED_PRECONDITION;
		}
		dir = *cwd;
	}
	while (dir != NULL && name[0] == '.' && name[1] == '/')
		for (name += 2; *name == '/'; name++)
			;
	n = asprintf(abs, "%s%s%s", dir != NULL ? dir : "",
	    dir != NULL && strcmp(dir, "/") != 0 ? "/" : "", name);
	if (n < 0) {
		snprintf(err, errlen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	return ST_OK;
}

/*
 * Globs the patterns into g, keeping regular files only (directories
 * cannot be read as splits).
 */
static enum status
glob_files(int n, char *const *globs, glob_t *g, char ***files, size_t *nf,
    char *err, size_t errlen)
{
	for (int i = 0; i < n; i++) {
		size_t before = g->gl_pathc, found = 0;
		int e = glob(globs[i], GLOB_NOSORT | (i > 0 ? GLOB_APPEND : 0),
		    NULL, g);
		if (e == GLOB_NOSPACE || e == GLOB_ABORTED) {
			snprintf(err, errlen, "%s: %s", globs[i],
			    e == GLOB_NOSPACE ? "out of memory" :
			                        "a directory cannot be read");
			return ST_INVALID_ARGUMENT;
		}
		if (grow_files(files, *nf + (g->gl_pathc - before)) < 0) {
			snprintf(err, errlen, "out of memory");
			return ST_RESOURCE_EXHAUSTED;
		}
		for (size_t k = before; k < g->gl_pathc; k++) {
			struct stat sb;
			if (stat(g->gl_pathv[k], &sb) == 0 &&
			    S_ISREG(sb.st_mode)) {
				(*files)[(*nf)++] = g->gl_pathv[k];
				found++;
			}
		}
		if (found == 0) {
			snprintf(err, errlen, "%s matches no file", globs[i]);
			return ST_INVALID_ARGUMENT;
		}
	}
	return ST_OK;
}

enum status
splitlist_files(FILE *out, int n, char *const *globs, char *err, size_t errlen)
{
	glob_t g;
	char **v = NULL, *cwd = NULL;
	size_t nf = 0, na = 0; /* na: those made absolute */
	enum status st;

	memset(&g, 0, sizeof(g));
	if ((st = glob_files(n, globs, &g, &v, &nf, err, errlen)) == ST_OK) {
		/* The matches, made absolute in place of glob's names. */
		for (; na < nf; na++)
			if ((st = absolute(v[na], &cwd, &v[na], err, errlen)) !=
			    ST_OK)
				break;
	}
	free(cwd);
	if (st == ST_OK) {
		qsort(v, nf, sizeof(*v), cmp_str);
		for (size_t k = 0; st == ST_OK && k < nf; k++)
			st = bad_name(v[k], err, errlen);
		for (size_t k = 0; st == ST_OK && k < nf; k++)
			if ((k == 0 || strcmp(v[k], v[k - 1]) != 0) &&
			    fprintf(out, "%s\n", v[k]) < 0)
				st = refused(err, errlen);
	}
	for (size_t k = 0; k < na; k++)
		free(v[k]);
	free(v);
	globfree(&g);
	return st;
}

enum status
splitlist_range(FILE *out, int64_t start, int64_t end, int64_t step, char *err,
    size_t errlen)
{
	while (start < end) {
		int64_t b = end - start > step ? start + step : end;
		if (fprintf(out, "%" PRId64 " %" PRId64 "\n", start, b) < 0)
			return refused(err, errlen);
		start = b;
	}
	return ST_OK;
}

/*
 * The offset just after the first newline at or after at, or size when
 * none follows; -1 on a read error.
 */
static off_t
after_newline(int fd, off_t at, off_t size)
{
	char block[65536];

	while (at < size) {
		ssize_t n = pread(fd, block, sizeof(block), at);
		const char *nl;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		if ((nl = memchr(block, '\n', (size_t)n)) != NULL)
			return at + (nl - block) + 1;
		at += n;
	}
	return size;
}

static enum status
cut(FILE *out, int fd, const char *file, off_t fsize, size_t size, char *err,
    size_t errlen)
{
	off_t off = 0;

	while (off < fsize) {
		off_t end = fsize - off <= (off_t)size ?
		    fsize :
		    after_newline(fd, off + (off_t)size - 1, fsize);
		if (end < 0) {
			snprintf(err, errlen, "%s: %s", file, strerror(errno));
			return ST_INVALID_ARGUMENT;
		}
		if (fprintf(out, "%jd %jd %s\n", (intmax_t)off,
		        (intmax_t)(end - off), file) < 0)
			return refused(err, errlen);
		off = end;
	}
	return ST_OK;
}

enum status
splitlist_bytes(FILE *out, const char *file, size_t size, char *err,
    size_t errlen)
{
	struct stat sb;
	enum status st;
	char *abs, *cwd = NULL;
	int fd;

	if ((fd = open(file, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &sb) < 0) {
		snprintf(err, errlen, "%s: %s", file, strerror(errno));
		if (fd >= 0)
			close(fd);
		return ST_INVALID_ARGUMENT;
	}
	if (!S_ISREG(sb.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", file);
		st = ST_INVALID_ARGUMENT;
	} else if ((st = absolute(file, &cwd, &abs, err, errlen)) == ST_OK) {
		/* The directory's name may hold the newline. */
		if ((st = bad_name(abs, err, errlen)) == ST_OK)
			st = cut(out, fd, abs, sb.st_size, size, err, errlen);
		free(abs);
	}
	free(cwd);
	close(fd);
	return st;
}

/* The lines of b into lines. */
static enum status
split_lines(const struct buf *b, json_t *lines, char *err, size_t errlen)
{
	size_t n = 0, at = 0;

	while (at < b->len) {
		const char *p = b->data + at,
		           *nl = memchr(p, '\n', b->len - at);
		size_t len = nl != NULL ? (size_t)(nl - p) : b->len - at;
		json_t *s;

		n++;
		if (memchr(p, '\0', len) != NULL) {
			snprintf(err, errlen, "line %zu holds a NUL byte", n);
			return ST_INVALID_ARGUMENT;
		}
		if ((s = json_stringn(p, len)) == NULL) {
			snprintf(err, errlen, "line %zu is not UTF-8", n);
			return ST_INVALID_ARGUMENT;
		}
		json_array_append_new(lines, s);
		at += len + 1;
	}
	return ST_OK;
}

enum status
splitlist_load(const char *path, json_t **lines, char *err, size_t errlen)
{
	struct buf b = {0};
	enum status st;

	*lines = NULL;
	if (readall_file(path, &b, SIZE_MAX) < 0) {
		snprintf(err, errlen, "%s", strerror(errno));
		buf_free(&b);
		return ST_INVALID_ARGUMENT;
	}
	*lines = json_array();
	st = split_lines(&b, *lines, err, errlen);
	buf_free(&b);
	if (st != ST_OK) {
		json_decref(*lines);
		*lines = NULL;
	}
	return st;
}
