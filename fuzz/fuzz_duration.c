/* Durations ("1h30m", "1.5s", "250ms", "30"): parse, format, parse. */
#include "duration.h"
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_cstr(data, size), buf[64];
	int64_t ms, again;

	if (duration_parse(s, &ms) == 0) {
		FUZZ_CHECK(ms >= 0);
		/* The shortest exact form reads back as the same duration. */
		duration_format(ms, buf, sizeof(buf));
		FUZZ_CHECK(duration_parse(buf, &again) == 0);
		FUZZ_CHECK(again == ms);
	}
	free(s);
	return 0;
}
