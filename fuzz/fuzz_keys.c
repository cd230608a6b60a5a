/*
 * Keys as they arrive in a URL: percent-decoding, then kv_key's checks
 * and slash rules; and percent-encoding back.
 */
#include "buf.h"
#include "fuzz.h"
#include "kvstore.h"
#include "text.h"

static struct kvstore *kv;

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct buf dec = {0}, key = {0}, again = {0}, enc = {0}, back = {0};
	char err[256];
	int form = size > 0 && (data[0] & 1);

	if (kv == NULL) {
		struct kv_limits lim = {.max_key = 64, .max_value = 1024};
		kv = kv_new(&lim, NULL, NULL);
		FUZZ_CHECK(kv != NULL);
	}
	if (text_url_decode(&dec, (const char *)data, size, form) == 0) {
		FUZZ_CHECK(dec.len <= size);
		if (kv_key(kv, dec.data != NULL ? dec.data : "", dec.len, 0,
		        &key, err, sizeof(err)) == ST_OK) {
			FUZZ_CHECK(key.len > 0 && key.len <= 64);
			FUZZ_CHECK(memchr(key.data, '\0', key.len) == NULL);
			FUZZ_CHECK(text_utf8_valid(key.data, key.len));
			FUZZ_CHECK(
			    key.data[0] != '/' && key.data[key.len - 1] != '/');
			for (size_t i = 1; i < key.len; i++)
				FUZZ_CHECK(!(key.data[i] == '/' &&
				    key.data[i - 1] == '/'));
			/* A normal key is its own normal form. */
			FUZZ_CHECK(kv_key(kv, key.data, key.len, 0, &again, err,
			               sizeof(err)) == ST_OK);
			FUZZ_CHECK(again.len == key.len &&
			    memcmp(again.data, key.data, key.len) == 0);
			/* Encoding and decoding gives the key back. */
			FUZZ_CHECK(
			    text_url_encode(&enc, key.data, key.len) == 0);
			FUZZ_CHECK(
			    text_url_decode(&back, enc.data, enc.len, 0) == 0);
			FUZZ_CHECK(back.len == key.len &&
			    memcmp(back.data, key.data, key.len) == 0);
		} else {
			FUZZ_CHECK(err[0] != '\0');
		}
	}
	buf_free(&dec);
	buf_free(&key);
	buf_free(&again);
	buf_free(&enc);
	buf_free(&back);
	return 0;
}
