/*
 * The chunks of a data reply (datawire.h), which a consumer reads from its
 * worker: any body gives chunks, an end or a refusal, never a crash; every
 * chunk lies inside the body, and its header written again is the bytes
 * it was read from (but the pad).
 */
#include "datawire.h"
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *body = malloc(size > 0 ? size : 1);
	size_t off = 0, was;
	struct chunk_hdr h, wire;
	const char *payload;
	int rc;

	if (body == NULL)
		return 0;
	memcpy(body, data, size);
	for (;;) {
		was = off;
		rc = dw_chunk_next(body, size, &off, &h, &payload);
		FUZZ_CHECK(rc == 1 || rc == 0 || rc == -1);
		if (rc != 1) {
			FUZZ_CHECK(rc != 0 || off == size);
			break;
		}
		FUZZ_CHECK(h.magic == CHUNK_MAGIC);
		FUZZ_CHECK(h.type >= CHUNK_DATA && h.type <= CHUNK_ERROR);
		FUZZ_CHECK(payload == body + was + sizeof(h));
		FUZZ_CHECK(off == was + sizeof(h) + h.len && off <= size);
		dw_chunk_put(&h, &wire);
		FUZZ_CHECK(
		    memcmp(&wire, body + was, sizeof(h) - sizeof(h.pad)) == 0);
	}
	free(body);
	return 0;
}
