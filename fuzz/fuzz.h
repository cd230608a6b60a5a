/*
 * fuzz.h: what the libFuzzer harnesses share. Each harness feeds one
 * parser arbitrary bytes and checks what its documentation promises
 * (round trips, bounds), aborting on a broken promise so that libFuzzer
 * keeps the input that broke it.
 */
#ifndef MUSTER_FUZZ_H
#define MUSTER_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                 \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "%s:%d: broken: %s\n", __FILE__, \
			    __LINE__, #cond);                            \
			abort();                                         \
		}                                                        \
	} while (0)

/* The input as a NUL-terminated string (cut at its first NUL). */
static inline char *
fuzz_cstr(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (s == NULL)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

#endif
