/*
 * token.h: the shared secret of a muster cluster, and the secrets tasks
 * prove themselves with.
 *
 * A daemon reads its token from a file (--token-file), a client from the
 * file MUSTER_TOKEN_FILE names: never from a command line, where every
 * user of the machine can read it. Requests carry it as
 * "Authorization: Bearer TOKEN", compared in constant time.
 */
#ifndef MUSTER_TOKEN_H
#define MUSTER_TOKEN_H

#include <stddef.h>

/* A token is 16 to 4096 printable ASCII characters, without spaces. */
#define TOKEN_MIN 16
#define TOKEN_MAX 4096

/*
 * Reads the token in path: its first line, without the whitespace around
 * it. 0, or -1 with the reason in err. *loose is set when the file may be
 * read by users other than its owner.
 */
int token_read_file(const char *path, char *out, size_t outlen, int *loose,
    char *err, size_t errlen);

/* Whether s (n bytes) is a well-formed token or task secret. */
int token_valid(const char *s, size_t n);

/* a equals b, in time that depends on their lengths only. */
int token_equal(const char *a, size_t alen, const char *b, size_t blen);

/* A fresh random secret of 32 hex digits into out (33 bytes); -1 on error. */
int token_random(char *out, size_t outlen);

#endif
