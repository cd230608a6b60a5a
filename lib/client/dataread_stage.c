/*
 * dataread_stage.c: a task's stage, the pipes a reply's data payloads wait
 * in between the worker's socket and the output. splice(2) moves them in
 * and out as references to the kernel's pages: the consumer copies none of
 * the bytes it delivers, where a recv and a write copied each twice.
 *
 * A payload is staged only once its reply has been received whole: it is
 * written only then, as a reply received into memory is, and a connection
 * that breaks in the middle of a reply leaves nothing written (the stage
 * is reset; the worker answers the request again).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dataread_int.h"

/* What one pipe is asked to hold: its buffers take pieces of the stream
 * as the kernel has them, often larger than a page. */
#define STAGE_PIPE_SIZE (1 << 20)

int
dataread_stage_budget(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 256;
	return rl.rlim_cur / 4 > 4096 ? 4096 : (int)(rl.rlim_cur / 4);
}

void
dataread_stage_init(struct stage *st, int *budget)
{
	for (int i = 0; i < STAGE_PIPES; i++) {
		st->fd[i][0] = st->fd[i][1] = -1;
		st->held[i] = 0;
	}
	st->n = st->fill = st->drain = 0;
	st->null = -1;
	st->off = 0;
	st->budget = budget;
}

void
dataread_stage_reset(struct stage *st)
{
	for (int i = 0; i < st->n; i++) {
		close(st->fd[i][0]);
		close(st->fd[i][1]);
		st->fd[i][0] = st->fd[i][1] = -1;
		st->held[i] = 0;
	}
	__atomic_add_fetch(st->budget, 2 * st->n, __ATOMIC_RELAXED);
	st->n = st->fill = st->drain = 0;
}

void
dataread_stage_done(struct stage *st)
{
	for (int i = 0; i < st->n; i++)
		if (st->held[i] > 0) {
			dataread_stage_reset(st);
			return;
		}
	st->fill = st->drain = 0;
}

void
dataread_stage_free(struct stage *st)
{
	dataread_stage_reset(st);
	if (st->null >= 0)
		close(st->null);
	st->null = -1;
}

/* Makes pipe i: 0, or -1 (out of descriptors, say: memory will do). */
static int
stage_pipe(struct stage *st, int i)
{
	if (__atomic_sub_fetch(st->budget, 2, __ATOMIC_RELAXED) < 0) {
		__atomic_add_fetch(st->budget, 2, __ATOMIC_RELAXED);
		return -1;
	}
	if (pipe2(st->fd[i], O_CLOEXEC) < 0) {
		__atomic_add_fetch(st->budget, 2, __ATOMIC_RELAXED);
		st->fd[i][0] = st->fd[i][1] = -1;
		return -1;
	}
	/* Refused past the user's share of pipe memory: a smaller pipe. */
	(void)fcntl(st->fd[i][1], F_SETPIPE_SZ, STAGE_PIPE_SIZE);
	st->held[i] = 0;
	st->n = i + 1;
	return 0;
}

ssize_t
dataread_stage_fill(struct stage *st, int fd, size_t n)
{
	size_t got = 0;

	while (got < n && !st->off) {
		ssize_t k;

		if (st->fill == st->n && stage_pipe(st, st->fill) < 0)
			break;
		/* The socket blocks, within its receive timeout; the pipe
		 * does not: a full one says EAGAIN with bytes to take. */
		k = splice(fd, NULL, st->fd[st->fill][1], NULL, n - got,
		    SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (k > 0) {
			st->held[st->fill] += (size_t)k;
			got += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno == EAGAIN) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			/* Nothing came within the timeout: broken. */
			if (poll(&p, 1, 0) != 1)
				return -1;
			if (st->fill + 1 >= STAGE_PIPES)
				break;
			st->fill++;
			continue;
		}
		if (k < 0 && errno != EINVAL && errno != ENOSYS)
			return -1;
		/* 0 (the end, or nothing it would move) or a socket that
		 * does not splice: recv says which, through memory. */
		if (k < 0)
			st->off = 1;
		break;
	}
	return (ssize_t)got;
}

/* Copies n bytes from the pipe in to out (-1: nowhere) through memory. */
static int
copy_out(int in, int out, size_t n, uint64_t *wrote)
{
	char b[65536];

	while (n > 0) {
		ssize_t k = read(in, b, n < sizeof(b) ? n : sizeof(b));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		n -= (size_t)k;
		for (char *p = b; out >= 0 && k > 0;) {
			ssize_t w = write(out, p, (size_t)k);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				return -1;
			p += w;
			k -= w;
			*wrote += (uint64_t)w;
		}
	}
	return 0;
}

int
dataread_stage_out(struct stage *st, int out, size_t n, int *splice_ok,
    uint64_t *wrote)
{
	if (out < 0 && st->null < 0)
		st->null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	while (n > 0) {
		int i = st->drain;
		size_t k = n < st->held[i] ? n : st->held[i];
		ssize_t w;

		if (k == 0) {
			/* This pipe is empty: the next one. */
			if (i + 1 >= st->n) {
				errno = EIO;
				return -1;
			}
			st->drain++;
			continue;
		}
		if ((out >= 0 &&
		        !__atomic_load_n(splice_ok, __ATOMIC_RELAXED)) ||
		    (out < 0 && st->null < 0)) {
			if (copy_out(st->fd[i][0], out, k, wrote) < 0)
				return -1;
			w = (ssize_t)k;
		} else {
			w = splice(st->fd[i][0], NULL,
			    out >= 0 ? out : st->null, NULL, k, SPLICE_F_MOVE);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0 && errno == EINVAL && out >= 0) {
				__atomic_store_n(splice_ok, 0,
				    __ATOMIC_RELAXED);
				continue;
			}
			if (w <= 0)
				return -1;
			if (out >= 0)
				*wrote += (uint64_t)w;
		}
		st->held[i] -= (size_t)w;
		n -= (size_t)w;
	}
	return 0;
}
