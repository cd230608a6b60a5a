/*
 * errbuf.h: the caller's error buffer. A free function of the library says
 * what went wrong in a buffer its caller hands it (char *err, size_t
 * errlen), and the caller decides where the words go.
 */
#ifndef MUSTER_ERRBUF_H
#define MUSTER_ERRBUF_H

#include <stddef.h>

/*
 * Writes the message into err, cut to errlen (nothing when err is NULL or
 * errlen 0), and returns -1, for `return errbuf_say(err, errlen, ...)`.
 */
int errbuf_say(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
