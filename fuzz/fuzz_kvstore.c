/*
 * The store against a model: a sequence of puts (each mode), adds,
 * compare-and-sets and deletes on a few nested keys, read from the input,
 * and after every step the store must hold exactly what the model holds,
 * in key order, with revisions that move once per change and never back.
 */
#include <inttypes.h>

#include "fuzz.h"
#include "kvstore.h"

/* Keys that nest, so that deleting one takes those under it. */
static const char *const keys[] = {"a", "a/b", "a/b/c", "a/c", "ab", "b", "b/a",
    "c"};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

struct model {
	int present[NKEYS];
	char val[NKEYS][24]; /* a value put (< 8 bytes), or a sum */
	size_t vlen[NKEYS];
};

/* Whether key k is under d (or d itself), as a delete of d sees it. */
static int
under(size_t k, size_t d)
{
	size_t n = strlen(keys[d]);

	return strcmp(keys[k], keys[d]) == 0 ||
	    (strncmp(keys[k], keys[d], n) == 0 && keys[k][n] == '/');
}

static void
check(struct kvstore *kv, const struct model *m)
{
	const struct kv_entry **v = NULL;
	struct kv_dir_page all = {0};
	size_t count = 0, n, j = 0;
	int more = 0;

	for (size_t k = 0; k < NKEYS; k++) {
		const struct kv_entry *e = kv_get(kv, keys[k], strlen(keys[k]));

		FUZZ_CHECK((e != NULL) == m->present[k]);
		if (e == NULL)
			continue;
		count++;
		FUZZ_CHECK(e->vlen == m->vlen[k]);
		FUZZ_CHECK(memcmp(e->value, m->val[k], e->vlen) == 0);
		FUZZ_CHECK(e->create_rev <= e->mod_rev);
		FUZZ_CHECK(e->mod_rev <= kv_revision(kv));
	}
	FUZZ_CHECK(kv_count(kv) == count);
	/* The listing: every key, once, sorted (keys[] is sorted). */
	n = kv_dir(kv, "", 0, &all, &v, &more);
	FUZZ_CHECK(n == count && !more);
	for (size_t k = 0; k < NKEYS; k++) {
		if (!m->present[k])
			continue;
		FUZZ_CHECK(v[j]->klen == strlen(keys[k]));
		FUZZ_CHECK(memcmp(v[j]->key, keys[k], v[j]->klen) == 0);
		j++;
	}
	free(v);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kv_limits lim = {.max_key = 64, .max_value = 64};
	struct kvstore *kv = kv_new(&lim, NULL, NULL);
	struct model m;
	size_t i = 0;
	char err[256];

	FUZZ_CHECK(kv != NULL);
	memset(&m, 0, sizeof(m));
	while (i + 3 <= size) {
		unsigned op = data[i] % 6;
		size_t k = data[i + 1] % NKEYS;
		size_t vlen = data[i + 2] % 8;
		const char *key = keys[k];
		size_t klen = strlen(key);
		int64_t before = kv_revision(kv), rev = -1;
		const char *val;
		enum status st;
		int changed = 0;

		i += 3;
		if (vlen > size - i)
			vlen = size - i;
		val = (const char *)data + i;
		i += vlen;
		switch (op) {
		case 0: /* put, each mode */
		case 1:
		case 2: {
			enum kv_mode mode = op == 0 ? KV_OVERWRITE :
			    op == 1                 ? KV_INSERT :
			                              KV_UPDATE;
			int ok = mode == KV_OVERWRITE ||
			    (mode == KV_INSERT && !m.present[k]) ||
			    (mode == KV_UPDATE && m.present[k]);
			st = kv_put(kv, key, klen, val, vlen, mode, &rev, err,
			    sizeof(err));
			FUZZ_CHECK((st == ST_OK) == ok);
			if (ok) {
				m.present[k] = 1;
				memcpy(m.val[k], val, vlen);
				m.vlen[k] = vlen;
				changed = 1;
			}
			break;
		}
		case 3: { /* add */
			int64_t delta =
			    (int64_t)(int8_t)(vlen > 0 ? val[0] : 1);
			int64_t result = 0;
			st = kv_add(kv, key, klen, delta, &result, &rev, err,
			    sizeof(err));
			if (st == ST_OK) {
				int n = snprintf(m.val[k], sizeof(m.val[k]),
				    "%" PRId64, result);
				FUZZ_CHECK(
				    n > 0 && (size_t)n < sizeof(m.val[k]));
				m.vlen[k] = (size_t)n;
				m.present[k] = 1;
				changed = 1;
			}
			break;
		}
		case 4: { /* compare-and-set: expect the value, or absence */
			const struct kv_entry *cur = NULL;
			int absent = vlen == 0;
			size_t elen = vlen / 2;
			int ok = absent ? !m.present[k] :
			                  m.present[k] && m.vlen[k] == elen &&
			        memcmp(m.val[k], val, elen) == 0;
			st =
			    kv_cas(kv, key, klen, val, elen, absent, val + elen,
			        vlen - elen, &rev, &cur, err, sizeof(err));
			FUZZ_CHECK((st == ST_OK) == ok);
			if (ok) {
				m.present[k] = 1;
				memcpy(m.val[k], val + elen, vlen - elen);
				m.vlen[k] = vlen - elen;
				changed = 1;
			} else {
				FUZZ_CHECK(st == ST_FAILED_PRECONDITION);
			}
			break;
		}
		default: { /* delete a key and those under it */
			size_t want = 0, n;
			for (size_t j = 0; j < NKEYS; j++)
				want += m.present[j] && under(j, k);
			n = kv_delete(kv, key, klen, &rev);
			FUZZ_CHECK(n == want);
			for (size_t j = 0; j < NKEYS; j++)
				if (under(j, k))
					m.present[j] = 0;
			changed = n > 0;
			break;
		}
		}
		/* One revision per change; none for a refusal. */
		FUZZ_CHECK(kv_revision(kv) == before + (changed ? 1 : 0));
		if (changed)
			FUZZ_CHECK(rev == kv_revision(kv));
		check(kv, &m);
	}
	kv_free(kv);
	return 0;
}
