#include <string.h>

#include "keypath.h"

int
keypath_normalize(const char *raw, size_t n, struct buf *out)
{
	buf_reset(out);
	if (buf_reserve(out, n) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (raw[i] == '/' &&
		    (out->len == 0 || out->data[out->len - 1] == '/'))
			continue;
		out->data[out->len++] = raw[i];
	}
	if (out->len > 0 && out->data[out->len - 1] == '/')
		out->len--;
	out->data[out->len] = '\0';
	return 0;
}

int
keypath_under(const char *prefix, size_t plen, const char *key, size_t klen)
{
	if (plen == 0)
		return 1;
	if (klen < plen || memcmp(key, prefix, plen) != 0)
		return 0;
	return klen == plen || key[plen] == '/';
}
