/* base64: anything encoded decodes back; anything decoded re-encodes to
 * text that decodes to the same bytes. */
#include "buf.h"
#include "fuzz.h"
#include "text.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct buf enc = {0}, dec = {0}, enc2 = {0}, dec2 = {0};

	FUZZ_CHECK(text_base64_encode(&enc, data, size) == 0);
	FUZZ_CHECK(enc.len == (size + 2) / 3 * 4);
	FUZZ_CHECK(text_base64_decode(&dec, enc.data != NULL ? enc.data : "",
	               enc.len) == 0);
	FUZZ_CHECK(dec.len == size &&
	    (size == 0 || memcmp(dec.data, data, size) == 0));
	buf_reset(&dec);
	if (text_base64_decode(&dec, (const char *)data, size) == 0) {
		FUZZ_CHECK(dec.len <= size);
		FUZZ_CHECK(text_base64_encode(&enc2, dec.data, dec.len) == 0);
		FUZZ_CHECK(
		    text_base64_decode(&dec2,
		        enc2.data != NULL ? enc2.data : "", enc2.len) == 0);
		FUZZ_CHECK(dec2.len == dec.len &&
		    (dec.len == 0 ||
		        memcmp(dec2.data, dec.data, dec.len) == 0));
	}
	buf_free(&enc);
	buf_free(&dec);
	buf_free(&enc2);
	buf_free(&dec2);
	return 0;
}
