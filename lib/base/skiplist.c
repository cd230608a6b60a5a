#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "skiplist.h"

/* 32 levels at a quarter each: enough for 2^64 keys. */
#define SKL_MAX_LEVEL 32

struct node {
	struct skl_node pub;
	int level;
	struct node *next[];
};

struct skiplist {
	struct node *head; /* no key; SKL_MAX_LEVEL links */
	int level;         /* levels in use */
	size_t count;
	uint64_t rng;
};

int
skl_compare(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	if (c != 0)
		return c;
	return alen < blen ? -1 : alen > blen;
}

struct skiplist *
skl_new(void)
{
	struct skiplist *sl = calloc(1, sizeof(*sl));

	if (sl == NULL)
		return NULL;
	sl->head = calloc(1,
	    sizeof(struct node) + SKL_MAX_LEVEL * sizeof(struct node *));
	if (sl->head == NULL) {
		free(sl);
		return NULL;
	}
	sl->head->level = SKL_MAX_LEVEL;
	sl->level = 1;
	/* Any seed will do: levels only need to be spread, not secret. */
	sl->rng = (uintptr_t)sl ^ 0x9e3779b97f4a7c15ULL;
	return sl;
}

void
skl_free(struct skiplist *sl)
{
	struct node *n, *next;

	if (sl == NULL)
		return;
	for (n = sl->head->next[0]; n != NULL; n = next) {
		next = n->next[0];
		free(n);
	}
	free(sl->head);
	free(sl);
}

size_t
skl_count(const struct skiplist *sl)
{
	return sl->count;
}

/* A level from 1 up, each next one a quarter as likely (xorshift64). */
static int
random_level(struct skiplist *sl)
{
	int level = 1;

	sl->rng ^= sl->rng << 13;
	sl->rng ^= sl->rng >> 7;
	sl->rng ^= sl->rng << 17;
	for (uint64_t r = sl->rng; (r & 3) == 0 && level < SKL_MAX_LEVEL;
	     r >>= 2)
		level++;
	return level;
}

/* Fills update[i] with the last node at level i whose key is below key. */
static struct node *
find(const struct skiplist *sl, const char *key, size_t klen,
    struct node **update)
{
	struct node *x = sl->head;

	for (int i = sl->level - 1; i >= 0; i--) {
		while (x->next[i] != NULL &&
		    skl_compare(x->next[i]->pub.key, x->next[i]->pub.klen, key,
		        klen) < 0)
			x = x->next[i];
		if (update != NULL)
			update[i] = x;
	}
	return x->next[0];
}

int
skl_insert(struct skiplist *sl, const char *key, size_t klen, void *value)
{
	struct node *update[SKL_MAX_LEVEL], *n;
	int level = random_level(sl);

	find(sl, key, klen, update);
	if ((n = malloc(sizeof(*n) + level * sizeof(n->next[0]))) == NULL)
		return -1;
	n->pub.key = key;
	n->pub.klen = klen;
	n->pub.value = value;
	n->level = level;
	for (int i = sl->level; i < level; i++)
		update[i] = sl->head;
	if (level > sl->level)
		sl->level = level;
	for (int i = 0; i < level; i++) {
		n->next[i] = update[i]->next[i];
		update[i]->next[i] = n;
	}
	sl->count++;
	return 0;
}

void *
skl_delete(struct skiplist *sl, const char *key, size_t klen)
{
	struct node *update[SKL_MAX_LEVEL];
	struct node *n = find(sl, key, klen, update);
	void *value;

	if (n == NULL || skl_compare(n->pub.key, n->pub.klen, key, klen) != 0)
		return NULL;
	for (int i = 0; i < n->level; i++)
		update[i]->next[i] = n->next[i];
	while (sl->level > 1 && sl->head->next[sl->level - 1] == NULL)
		sl->level--;
	sl->count--;
	value = n->pub.value;
	free(n);
	return value;
}

struct skl_node *
skl_seek(const struct skiplist *sl, const char *key, size_t klen)
{
	struct node *n = find(sl, key, klen, NULL);

	return n != NULL ? &n->pub : NULL;
}

struct skl_node *
skl_next(const struct skl_node *p)
{
	const struct node *n = (const struct node *)p;

	return n->next[0] != NULL ? &n->next[0]->pub : NULL;
}
