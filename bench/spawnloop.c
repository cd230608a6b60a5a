/*
 * spawnloop: the limit for running no-op commands: posix_spawn N times
 * with P in flight, reaping each, and nothing else. Prints
 * "spawn_per_s RATE".
 *
 *   bench-spawnloop N P [COMMAND]
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

int
main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000;
	long p = argc > 2 ? atol(argv[2]) : 2, started = 0, done = 0,
	     running = 0;
	char *cmd = argc > 3 ? argv[3] : "/bin/true";
	char *args[] = {cmd, NULL};
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	while (done < n) {
		while (running < p && started < n) {
			pid_t pid;
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
