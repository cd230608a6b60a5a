#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "strmap.h"

struct node {
	struct node *next;
	uint64_t hash;
	void *value;
	size_t klen;
	char key[];
};

struct strmap {
	struct node **b;
	size_t nb;
	size_t count;
};

/*
 * SipHash-1-3 under a key drawn at random once per process: keys come
 * from the network, and a hash anyone can compute lets a client pick keys
 * that all land in one chain.
 */
static uint64_t sip_k0, sip_k1;
static pthread_once_t sip_once = PTHREAD_ONCE_INIT;

static void
sip_seed(void)
{
	uint64_t k[2] = {0x736f6d6570736575ULL, 0x646f72616e646f6dULL};

	if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		k[0] ^= (uint64_t)ts.tv_nsec << 32 ^ (uint64_t)getpid();
		k[1] ^= (uint64_t)ts.tv_sec;
	}
	sip_k0 = k[0];
	sip_k1 = k[1];
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                   \
	do {                       \
		v0 += v1;          \
		v1 = ROTL(v1, 13); \
		v1 ^= v0;          \
		v0 = ROTL(v0, 32); \
		v2 += v3;          \
		v3 = ROTL(v3, 16); \
		v3 ^= v2;          \
		v0 += v3;          \
		v3 = ROTL(v3, 21); \
		v3 ^= v0;          \
		v2 += v1;          \
		v1 = ROTL(v1, 17); \
		v1 ^= v2;          \
		v2 = ROTL(v2, 32); \
	} while (0)

static uint64_t
hash(const char *k, size_t n)
{
	const unsigned char *p = (const unsigned char *)k;
	uint64_t v0 = sip_k0 ^ 0x736f6d6570736575ULL;
	uint64_t v1 = sip_k1 ^ 0x646f72616e646f6dULL;
	uint64_t v2 = sip_k0 ^ 0x6c7967656e657261ULL;
	uint64_t v3 = sip_k1 ^ 0x7465646279746573ULL;
	uint64_t b = (uint64_t)n << 56, m;
	size_t i, left = n & 7;

	for (i = 0; i + 8 <= n; i += 8) {
		memcpy(&m, p + i, 8);
		v3 ^= m;
		SIPROUND;
		v0 ^= m;
	}
	for (size_t j = 0; j < left; j++)
		b |= (uint64_t)p[i + j] << (8 * j);
	v3 ^= b;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

struct strmap *
strmap_new(void)
{
	struct strmap *m = calloc(1, sizeof(*m));

	pthread_once(&sip_once, sip_seed);
	if (m == NULL)
		return NULL;
	m->nb = 64;
	if ((m->b = calloc(m->nb, sizeof(*m->b))) == NULL) {
		free(m);
		return NULL;
	}
	return m;
}

void
strmap_free(struct strmap *m, void (*free_value)(void *))
{
	if (m == NULL)
		return;
	for (size_t i = 0; i < m->nb; i++) {
		struct node *n, *next;
		for (n = m->b[i]; n != NULL; n = next) {
			next = n->next;
			if (free_value != NULL)
				free_value(n->value);
			free(n);
		}
	}
	free(m->b);
	free(m);
}

static struct node **
find(const struct strmap *m, const char *key, size_t klen, uint64_t h)
{
	struct node **p = &m->b[h & (m->nb - 1)];

	for (; *p != NULL; p = &(*p)->next)
		if ((*p)->hash == h && (*p)->klen == klen &&
		    memcmp((*p)->key, key, klen) == 0)
			break;
	return p;
}

void *
strmap_get(const struct strmap *m, const char *key, size_t klen)
{
	struct node *n = *find(m, key, klen, hash(key, klen));

	return n != NULL ? n->value : NULL;
}

static void
grow(struct strmap *m)
{
	size_t nb = m->nb * 2;
	struct node **b = calloc(nb, sizeof(*b));

	if (b == NULL)
		return; /* a longer chain is still correct */
	for (size_t i = 0; i < m->nb; i++) {
		struct node *n, *next;
		for (n = m->b[i]; n != NULL; n = next) {
			next = n->next;
			n->next = b[n->hash & (nb - 1)];
			b[n->hash & (nb - 1)] = n;
		}
	}
	free(m->b);
	m->b = b;
	m->nb = nb;
}

int
strmap_put(struct strmap *m, const char *key, size_t klen, void *value)
{
	uint64_t h = hash(key, klen);
	struct node **p = find(m, key, klen, h), *n;

	if (*p != NULL) {
		(*p)->value = value;
		return 0;
	}
	if ((n = malloc(sizeof(*n) + klen + 1)) == NULL)
		return -1;
	n->hash = h;
	n->value = value;
	n->klen = klen;
	memcpy(n->key, key, klen);
	n->key[klen] = '\0';
	n->next = NULL;
	*p = n;
	if (++m->count > m->nb)
		grow(m);
	return 0;
}

void *
strmap_del(struct strmap *m, const char *key, size_t klen)
{
	struct node **p = find(m, key, klen, hash(key, klen)), *n = *p;
	void *v;

	if (n == NULL)
		return NULL;
	*p = n->next;
	v = n->value;
	free(n);
	m->count--;
	return v;
}

size_t
strmap_count(const struct strmap *m)
{
	return m->count;
}

void
strmap_each(const struct strmap *m,
    void (*fn)(const char *key, size_t klen, void *value, void *arg), void *arg)
{
	for (size_t i = 0; i < m->nb; i++)
		for (struct node *n = m->b[i]; n != NULL; n = n->next)
			fn(n->key, n->klen, n->value, arg);
}
