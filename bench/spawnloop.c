/*
 * spawnloop: the limit for running no-op commands: posix_spawn N times
 * with P in flight, reaping each, and nothing else. Prints
 * "spawn_per_s RATE".
 *
 *   bench-spawnloop [--each] N P [COMMAND]
 *
 * With --each, the i-th command (from 1) gets i as its one argument, as
 * `seq N | dispatchctl schedule --each -- COMMAND` gives the i-th
 * closure: the same command lines, so that the same work is compared.
 * It matters: coreutils' true, given one argument, sets up its locale to
 * read it (for --help), and `true 1` costs about half again as much as
 * `true` here.
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

int
main(int argc, char **argv)
{
	int each = argc > 1 && strcmp(argv[1], "--each") == 0;
	long n, p, started = 0, done = 0, running = 0;
	char *cmd, num[24], *args[] = {NULL, NULL, NULL};
	struct timespec a, b;

	argv += each;
	argc -= each;
	n = argc > 1 ? atol(argv[1]) : 2000;
	p = argc > 2 ? atol(argv[2]) : 2;
	cmd = argc > 3 ? argv[3] : "/bin/true";
	args[0] = cmd;
	args[1] = each ? num : NULL;

	clock_gettime(CLOCK_MONOTONIC, &a);
	while (done < n) {
		while (running < p && started < n) {
			pid_t pid;
			snprintf(num, sizeof(num), "%ld", started + 1);
			if (posix_spawn(&pid, cmd, NULL, NULL, args, environ) !=
			    0) {
				perror("posix_spawn");
				return 1;
			}
			started++;
			running++;
		}
		if (wait(NULL) > 0) {
			running--;
			done++;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	double s =
	    (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
	printf("spawn_per_s %.0f\n", (double)n / s);
	return 0;
}
