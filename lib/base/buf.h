/*
 * buf.h: a growable byte buffer, always NUL-terminated so text can be read
 * in place. Functions return 0, or -1 when memory runs out.
 */
#ifndef MUSTER_BUF_H
#define MUSTER_BUF_H

#include <stddef.h>

struct buf {
	char *data;
	size_t len;
	size_t cap;
};

int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *p, size_t n);
int buf_puts(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void buf_reset(struct buf *b);
void buf_free(struct buf *b);

/* Hands the data to the caller (who frees it) and empties the buffer. */
char *buf_take(struct buf *b, size_t *len);

#endif
