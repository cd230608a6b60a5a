/*
 * The reader of a positioned stream (what `dispatchctl read --positions`
 * writes, and a program reads): any bytes give elements, an end or an
 * error, never a crash; every position it gives loads back as one.
 */
#include <sys/mman.h>
#include <unistd.h>

#include "datapos.h"
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("stream", 0);
	struct datapos_reader *r;
	struct datapos *p = datapos_new();
	const char *e;
	size_t len, total = 0;
	char err[256];
	int rc;

	if (fd < 0 || p == NULL || write(fd, data, size) != (ssize_t)size ||
	    lseek(fd, 0, SEEK_SET) != 0 || (r = datapos_reader_new(fd)) == NULL)
		abort();
	while ((rc = datapos_next(r, &e, &len)) == 1) {
		json_t *pos = datapos_reader_position(r);
		FUZZ_CHECK(pos != NULL);
		FUZZ_CHECK(datapos_load(p, pos, err, sizeof(err)) == 0);
		json_decref(pos);
		total += len;
		FUZZ_CHECK(total <= size);
	}
	FUZZ_CHECK(rc == 0 || datapos_reader_error(r)[0] != '\0');
	/* After the end or an error, it stays there. */
	FUZZ_CHECK(datapos_next(r, &e, &len) == (rc == 0 ? 0 : -1));
	datapos_reader_free(r);
	datapos_free(p);
	close(fd);
	return 0;
}
