/* Death times: RFC 3339 and HTTP dates; what parses formats and reads
 * back as the same instant. */
#include "fuzz.h"
#include "wallclock.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_cstr(data, size), buf[64];
	int64_t ms, again;

	if (wall_parse_rfc3339(s, &ms) == 0) {
		wall_format(ms, buf, sizeof(buf));
		FUZZ_CHECK(wall_parse_rfc3339(buf, &again) == 0);
		FUZZ_CHECK(again == ms);
	}
	if (wall_parse_http_date(s, &ms) == 0) {
		FUZZ_CHECK(ms % 1000 == 0); /* whole seconds only */
		wall_format(ms, buf, sizeof(buf));
		FUZZ_CHECK(wall_parse_rfc3339(buf, &again) == 0);
		FUZZ_CHECK(again == ms);
	}
	free(s);
	return 0;
}
