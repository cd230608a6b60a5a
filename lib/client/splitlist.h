/*
 * splitlist.h: split lists, one split a line, as a dataset takes them
 * (dispatchctl dataset add), and the three kinds dispatchctl splits makes:
 * files that globs match, ranges of numbers, and a file's lines cut into
 * ranges of bytes. A split that would hold a newline is refused, since it
 * would read back as two.
 *
 * Calls write to out as they go and fail with err saying why, at the
 * first write out refuses too (a reader gone, a full disk: INTERNAL).
 */
#ifndef MUSTER_SPLITLIST_H
#define MUSTER_SPLITLIST_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "status.h"

/* The regular files the n globs match, sorted bytewise, each once. */
enum status splitlist_files(FILE *out, int n, char *const *globs, char *err,
    size_t errlen);

/* "A B" lines over [start, end), step apart. */
enum status splitlist_range(FILE *out, int64_t start, int64_t end, int64_t step,
    char *err, size_t errlen);

/*
 * "OFFSET LENGTH FILE" lines: ranges of size bytes or a little more, each
 * ending just after a newline (the last at the end of the file).
 */
enum status splitlist_bytes(FILE *out, const char *file, size_t size, char *err,
    size_t errlen);

/* The list in path ("-": stdin) as a new JSON array of its lines. */
enum status splitlist_load(const char *path, json_t **lines, char *err,
    size_t errlen);

#endif
