/*
 * The data path's request line (datawire.h), which a worker's data server
 * reads from a stranger: any path and query parse or are refused, never a
 * crash; what parses is written back by the consumer's side and reads
 * again as the same request.
 */
#include "datawire.h"
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* path, then a NUL, then the query (the rest). */
	char *s = fuzz_cstr(data, size);
	size_t n = strlen(s);
	char *q = n < size ? fuzz_cstr(data + n + 1, size - n - 1) : NULL;
	struct dw_request r, again;
	char path[512];
	int rc = dw_request_parse(s, q != NULL ? q : "", &r);

	FUZZ_CHECK(rc == DW_OK || rc == DW_NO_SUCH || rc == DW_BAD_MAX ||
	    rc == DW_BAD_WAIT || rc == DW_BAD_ID);
	if (rc == DW_OK) {
		char *qs;
		FUZZ_CHECK(r.kind == DW_HEALTH || r.kind == DW_ELEMENTS ||
		    r.kind == DW_GIVEBACK || r.kind == DW_ROUND);
		FUZZ_CHECK(!r.has_wait || r.wait_ms >= 0);
		FUZZ_CHECK(r.kind == DW_ROUND || r.consumer == -1);
		FUZZ_CHECK(r.kind == DW_ELEMENTS || !r.has_max);
		/* A consumer's identity only where it is read, whole and
		 * with a request's number; a giveback always has one. */
		FUZZ_CHECK(r.has_id ?
		        (r.kind == DW_ELEMENTS || r.kind == DW_GIVEBACK) &&
		            r.request >= 1 && r.consumer_id[0] != '\0' &&
		            strlen(r.consumer_id) <= DW_CONSUMER_ID_MAX :
		        r.kind != DW_GIVEBACK && r.consumer_id[0] == '\0');
		/* A round's consumer is written as it is: only one that
		 * parsed round-trips. */
		if (r.kind != DW_ROUND || r.consumer >= 0) {
			FUZZ_CHECK(
			    dw_request_path(&r, path, sizeof(path)) == 0);
			qs = strchr(path, '?');
			if (qs != NULL)
				*qs++ = '\0';
			FUZZ_CHECK(dw_request_parse(path, qs != NULL ? qs : "",
			               &again) == DW_OK);
			FUZZ_CHECK(memcmp(&r, &again, sizeof(r)) == 0);
		}
	}
	free(q);
	free(s);
	return 0;
}
