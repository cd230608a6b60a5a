/*
 * readall.h: what a user points a program at (a file, or stdin as "-"),
 * read up to a limit, so that a program stops where what it reads could
 * no longer be used (a --stdin of /dev/zero, a line that never ends)
 * instead of holding all of it first.
 */
#ifndef MUSTER_READALL_H
#define MUSTER_READALL_H

#include <stddef.h>
#include <stdio.h>

#include "buf.h"

/*
 * Appends the bytes of path ("-": stdin) to b, up to max: 0, -1 (errno)
 * when it cannot be read, -2 when it holds more than max.
 */
int readall_file(const char *path, struct buf *b, size_t max);

/*
 * One line of f into b, without its newline, up to max bytes: 1, 0 at the
 * end, -1 (errno) on a read error, -2 when the line is longer, -3 when it
 * holds a NUL byte.
 */
int readall_line(FILE *f, struct buf *b, size_t max);

#endif
