/*
 * bench-syncapi: the cost of one syncpoint_reached() call when no notice is
 * pending, the common case of every training step. Run it under
 * preemptwatch (it needs MUSTER_SYNC_SOCKET):
 *
 *   preemptwatch -t worker:0 --no-wait-all -- bench-syncapi [N]
 *
 * Prints "syncapi_ns NANOSECONDS per call over N calls".
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "syncpoint.h"

static int64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int
main(int argc, char **argv)
{
	long n = argc > 1 ? strtol(argv[1], NULL, 10) : 10000000;
	struct syncpoint *sp;
	char err[256];
	int64_t t0, t1;
	long yes = 0;

	if (n <= 0)
		n = 10000000;
	if ((sp = syncpoint_open(err, sizeof(err))) == NULL) {
		fprintf(stderr, "bench-syncapi: %s\n", err);
		return 2;
	}
	syncpoint_reached(sp, 0);
	t0 = now_ns();
	for (long i = 1; i <= n; i++)
		yes += syncpoint_reached(sp, i) == 1;
	t1 = now_ns();
	printf("syncapi_ns %.1f per call over %ld calls (%ld at the sync "
	       "point)\n",
	    (double)(t1 - t0) / (double)n, n, yes);
	return 0;
}
