/*
 * What etcd's gateway streams (etcd_int.h): the bytes after the input's
 * first two, fed in pieces whose sizes those two choose, are cut into the
 * same messages as when fed whole, or are refused at the same message for
 * being longer than the limit the first byte sets; no message holds a
 * newline or is longer than the limit. Each message is then decoded as
 * the client decodes a stream's (a result with its header, events and
 * their keys, a watch's cancel and its reason, or an error and its
 * status, which is never ST_OK), which must not crash.
 */
#include "etcd_int.h"
#include "fuzz.h"

/* The messages a split gave, each as its length and bytes. */
struct got {
	struct buf all;
	size_t max;
};

/* Decodes one message as a watch's or an observe's. */
static void
decode(const char *msg, size_t len)
{
	json_t *root = json_loadb(msg, len, 0, NULL);
	json_t *res = json_object_get(root, "result"), *ev;
	struct etcd_kv kv;
	char why[256];
	int64_t v;
	size_t i;

	FUZZ_CHECK(etcd_json_error(msg, len, 200, why, sizeof(why)) != ST_OK);
	(void)etcd_json_revision(res);
	(void)etcd_json_int(res, "compact_revision", &v);
	(void)etcd_json_cancel(
	    json_string_value(json_object_get(res, "cancel_reason")));
	if (etcd_json_kv(json_object_get(res, "kv"), &kv) == 0)
		etcd_kv_free(&kv);
	json_array_foreach(json_object_get(res, "events"), i, ev) {
		if (etcd_json_kv(json_object_get(ev, "kv"), &kv) == 0) {
			FUZZ_CHECK(kv.key != NULL && kv.value != NULL);
			FUZZ_CHECK(kv.key[kv.key_len] == '\0');
			etcd_kv_free(&kv);
		}
	}
	json_decref(root);
}

static int
collect(void *arg, const char *msg, size_t len)
{
	struct got *g = arg;

	FUZZ_CHECK(len > 0 && len <= g->max);
	FUZZ_CHECK(memchr(msg, '\n', len) == NULL);
	FUZZ_CHECK(buf_printf(&g->all, "%zu:", len) == 0);
	FUZZ_CHECK(buf_append(&g->all, msg, len) == 0);
	decode(msg, len);
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct got whole = {{0}, 0}, cut = {{0}, 0};
	struct etcd_split a = {{0}, 0}, b = {{0}, 0};
	unsigned seed;
	int ra, rb = 0;

	if (size < 2)
		return 0;
	whole.max = cut.max = a.max = b.max = 1 + (size_t)data[0] * 8;
	seed = data[1];
	data += 2;
	size -= 2;
	ra = etcd_split_feed(&a, (const char *)data, size, collect, &whole);
	for (size_t off = 0; off < size && rb == 0;) {
		size_t n = 1 + (seed = seed * 1103515245u + 12345u) % 64;
		if (n > size - off)
			n = size - off;
		rb = etcd_split_feed(&b, (const char *)data + off, n, collect,
		    &cut);
		off += n;
	}
	FUZZ_CHECK(ra == rb && (ra == 0 || ra == -1));
	FUZZ_CHECK(whole.all.len == cut.all.len &&
	    (whole.all.len == 0 ||
	        memcmp(whole.all.data, cut.all.data, whole.all.len) == 0));
	etcd_split_free(&a);
	etcd_split_free(&b);
	buf_free(&whole.all);
	buf_free(&cut.all);
	return 0;
}
