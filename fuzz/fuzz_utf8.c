/*
 * UTF-8 validation against a second, deliberately plain reading of RFC
 * 3629: code points decoded one by one, then judged.
 */
#include "fuzz.h"
#include "text.h"

static int
reference(const uint8_t *p, size_t n)
{
	size_t i = 0;

	while (i < n) {
		uint32_t cp;
		size_t len;

		if (p[i] < 0x80) {
			i++;
			continue;
		} else if ((p[i] & 0xe0) == 0xc0) {
			len = 2;
			cp = p[i] & 0x1f;
		} else if ((p[i] & 0xf0) == 0xe0) {
			len = 3;
			cp = p[i] & 0x0f;
		} else if ((p[i] & 0xf8) == 0xf0) {
			len = 4;
			cp = p[i] & 0x07;
		} else {
			return 0;
		}
		if (i + len > n)
			return 0;
		for (size_t k = 1; k < len; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (p[i + k] & 0x3f);
		}
		if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
		    (len == 4 && cp < 0x10000))
			return 0; /* overlong */
		if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return 0;
		i += len;
	}
	return 1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FUZZ_CHECK(!text_utf8_valid(data, size) == !reference(data, size));
	return 0;
}
