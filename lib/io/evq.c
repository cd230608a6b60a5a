#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include "evq.h"

int
evq_open(struct evq *q)
{
	return pipe2(q->fd, O_CLOEXEC);
}

void
evq_close(struct evq *q)
{
	close(q->fd[0]);
	close(q->fd[1]);
	q->fd[0] = q->fd[1] = -1;
}

void
evq_post(struct evq *q, const void *ev, size_t n)
{
	/* Smaller than PIPE_BUF: one atomic write. */
	while (write(q->fd[1], ev, n) < 0 && errno == EINTR)
		;
}

int
evq_read(struct evq *q, void *ev, size_t n)
{
	ssize_t r;

	while ((r = read(q->fd[0], ev, n)) < 0 && errno == EINTR)
		;
	return r == (ssize_t)n ? 0 : -1;
}

int
evq_fd(const struct evq *q)
{
	return q->fd[0];
}

int
cancel_open(struct cancel *c)
{
	return pipe2(c->fd, O_CLOEXEC);
}

void
cancel_close(struct cancel *c)
{
	close(c->fd[0]);
	close(c->fd[1]);
	c->fd[0] = c->fd[1] = -1;
}

void
cancel_fire(struct cancel *c)
{
	(void)!write(c->fd[1], "x", 1);
}

int
cancel_fd(const struct cancel *c)
{
	return c->fd[0];
}

int
nap(int fd, int64_t ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	if (ms < 0)
		ms = 0;
	while (poll(&p, 1, ms > 1000000000 ? 1000000000 : (int)ms) < 0)
		if (errno != EINTR)
			break;
	return (p.revents & (POLLIN | POLLHUP)) != 0 ? -1 : 0;
}
