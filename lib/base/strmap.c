#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

/* FNV-1a, 64-bit. */
static uint64_t
hash(const char *k, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)k[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

struct strmap *
strmap_new(void)
{
	struct strmap *m = calloc(1, sizeof(*m));

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
