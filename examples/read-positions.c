/*
 * read-positions.c: a C program that reads a dataset's elements in-process
 * with libmuster-data, stops after some of them, and saves its position;
 * started again from that position it reads on from the next element.
 *
 *   cc -o read-positions examples/read-positions.c -Ilib/client \
 *       -Lbuild/lib -lmuster-data -ljansson
 *   read-positions DATASET MAX STATE >elements
 *
 * It runs `dispatchctl read --positions DATASET` (with --from-state STATE
 * when STATE exists), writes up to MAX elements to stdout, one per line,
 * and then saves the position after the last one to STATE: what a trainer
 * does with its model at a checkpoint. Exit 0 when the data ended, 3 when
 * it stopped at MAX, 1 on an error.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "datapos.h"

/* dispatchctl read --positions, its stdout a pipe to us; its pid. */
static pid_t
start_read(const char *dataset, const char *state, int *fd)
{
	char *argv[] = {"dispatchctl", "read", "--positions", "--close-ok",
	    (char *)dataset, NULL, NULL, NULL};
	int p[2];
	pid_t pid;

	if (access(state, R_OK) == 0) {
		argv[5] = "--from-state";
		argv[6] = (char *)state;
	}
	if (pipe(p) < 0 || (pid = fork()) < 0)
		return -1;
	if (pid == 0) {
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	*fd = p[0];
	return pid;
}

/* The position into state, atomically. */
static int
save(struct datapos_reader *r, const char *state)
{
	char tmp[4096];
	json_t *pos = datapos_reader_position(r);
	int rc;

	if (pos == NULL)
		return 0; /* nothing read: start from the start */
	snprintf(tmp, sizeof(tmp), "%s.tmp", state);
	rc = json_dump_file(pos, tmp, JSON_COMPACT) == 0 &&
	        rename(tmp, state) == 0 ?
	    0 :
	    -1;
	json_decref(pos);
	return rc;
}

int
main(int argc, char **argv)
{
	struct datapos_reader *r;
	const char *elem;
	long max, n = 0;
	size_t len;
	int fd, rc, status;
	pid_t pid;

	if (argc != 4 || (max = atol(argv[2])) <= 0) {
		fprintf(stderr, "usage: read-positions DATASET MAX STATE\n");
		return 2;
	}
	if ((pid = start_read(argv[1], argv[3], &fd)) < 0 ||
	    (r = datapos_reader_new(fd)) == NULL) {
		perror("read-positions");
		return 1;
	}
	while (n < max && (rc = datapos_next(r, &elem, &len)) == 1) {
		fwrite(elem, 1, len, stdout);
		putchar('\n');
		n++;
	}
	fflush(stdout);
	if (n < max && rc < 0) {
		fprintf(stderr, "read-positions: %s\n",
		    datapos_reader_error(r));
		return 1;
	}
	if (save(r, argv[3]) < 0) {
		perror("read-positions: saving the position");
		return 1;
	}
	/* Stopped early: what dispatchctl wrote beyond is read again. */
	close(fd);
	if (n == max)
		kill(pid, SIGTERM);
	waitpid(pid, &status, 0);
	datapos_reader_free(r);
	return n == max ? 3 : 0;
}
