/*
 * splitorder.c: split permutations (Fisher-Yates driven by splitmix64 of
 * the seed and the epoch) and framing names.
 */
#include <string.h>

#include "splitorder.h"

static uint64_t
splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* A uniform number below n (n > 0), by rejection. */
static uint64_t
below(uint64_t *s, uint64_t n)
{
	uint64_t lim = UINT64_MAX - UINT64_MAX % n, r;

	do
		r = splitmix64(s);
	while (r >= lim);
	return r % n;
}

void
split_order(uint64_t seed, uint64_t epoch, uint32_t *order, size_t n)
{
	uint64_t s = seed ^ (epoch * 0xd1b54a32d192ed03ULL);

	for (size_t i = 0; i < n; i++)
		order[i] = (uint32_t)i;
	if (seed == 0 || n < 2)
		return;
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)below(&s, (uint64_t)i + 1);
		uint32_t t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
}

static const char *const names[] = {"lines", "nul", "len32"};

int
framing_parse(const char *s, enum framing *f)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(s, names[i]) == 0) {
			*f = (enum framing)i;
			return 0;
		}
	return -1;
}

const char *
framing_name(enum framing f)
{
	return (size_t)f < sizeof(names) / sizeof(names[0]) ? names[f] : "?";
}
