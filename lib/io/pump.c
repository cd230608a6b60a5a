#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "duration.h"
#include "pump.h"

#define PID_SLOT 3 /* pf's slot for the pidfd */
#define WATCHED 4  /* the first of the caller's */

void
pump_init(struct pump *p, int out, int err, struct buf *tail)
{
	memset(p, 0, sizeof(*p));
	for (size_t i = 0; i < WATCHED; i++)
		p->pf[i] = (struct pollfd){-1, POLLIN, 0};
	p->pf[PUMP_OUT].fd = out;
	p->pf[PUMP_ERR].fd = err;
	p->pf[PUMP_IN].events = POLLOUT;
	p->n = WATCHED;
	p->tail = tail;
}

void
pump_feed(struct pump *p, int fd, const void *data, size_t len)
{
	int fl = fcntl(fd, F_GETFL);

	/* A child that reads slowly holds back only the feed. */
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	p->pf[PUMP_IN].fd = fd;
	p->in = data;
	p->inlen = len;
	p->inoff = 0;
}

int
pump_watch(struct pump *p, int fd, short events)
{
	if (p->n == WATCHED + PUMP_WATCH_MAX)
		return -1;
	p->pf[p->n] = (struct pollfd){fd, events, 0};
	return (int)p->n++;
}

static void
close_slot(struct pump *p, int i)
{
	if (p->pf[i].fd >= 0) {
		close(p->pf[i].fd);
		p->pf[i].fd = -1;
	}
}

static size_t
tail_trim(struct buf *tail)
{
	size_t cut;

	if (tail->len <= 2 * PUMP_TAIL)
		return 0;
	cut = tail->len - PUMP_TAIL;
	memmove(tail->data, tail->data + cut, PUMP_TAIL);
	tail->len = PUMP_TAIL;
	return cut;
}

void
pump_tail_add(struct buf *tail, const void *p, size_t n)
{
	buf_append(tail, p, n);
	tail_trim(tail);
}

/* Stderr into the tail: each line is handed on before a trim can cut it. */
static void
err_add(struct pump *p, const char *b, size_t n)
{
	struct buf *t = p->tail;
	char *nl;
	size_t cut;

	if (t == NULL)
		return;
	buf_append(t, b, n);
	while (p->line != NULL && t->data != NULL &&
	    (nl = memchr(t->data + p->lined, '\n', t->len - p->lined)) !=
	        NULL) {
		p->line(p->arg, t->data + p->lined,
		    (size_t)(nl - t->data) - p->lined);
		p->lined = (size_t)(nl - t->data) + 1;
	}
	cut = tail_trim(t);
	p->lined = p->lined > cut ? p->lined - cut : 0;
}

static void
err_read(struct pump *p)
{
	char b[65536];
	ssize_t n = read(p->pf[PUMP_ERR].fd, b, sizeof(b));

	if (n > 0)
		err_add(p, b, (size_t)n);
	else if (n == 0 || errno != EINTR)
		close_slot(p, PUMP_ERR);
}

static void
in_write(struct pump *p)
{
	ssize_t n =
	    write(p->pf[PUMP_IN].fd, p->in + p->inoff, p->inlen - p->inoff);

	if (n > 0)
		p->inoff += (size_t)n;
	if ((n < 0 && errno != EAGAIN && errno != EINTR) ||
	    p->inoff == p->inlen)
		close_slot(p, PUMP_IN);
}

static int
output_open(const struct pump *p)
{
	return p->pf[PUMP_OUT].fd >= 0 || p->pf[PUMP_ERR].fd >= 0;
}

/* Whether the stop's KILL has gone to the child's group. */
static int
killed(const struct pump *p)
{
	return p->stop != NULL && p->stop->killed;
}

/* The bytes waiting in pipe i now. */
static size_t
pending(const struct pump *p, int i)
{
	int n = 0;

	if (p->pf[i].fd < 0 || ioctl(p->pf[i].fd, FIONREAD, &n) < 0 || n < 0)
		return 0;
	return (size_t)n;
}

/*
 * The child was killed and has ended, yet its output is open: a process
 * out of the KILL's reach (one it started in a session of its own) holds
 * its pipes. What they hold now is read, stderr here and stdout by
 * pump_read, and nothing after it is waited for.
 */
static void
let_go(struct pump *p)
{
	size_t n = pending(p, PUMP_ERR);
	char b[4096];
	ssize_t r;

	while (n > 0 &&
	    (r = read(p->pf[PUMP_ERR].fd, b, n < sizeof(b) ? n : sizeof(b))) >
	        0) {
		err_add(p, b, (size_t)r);
		n -= (size_t)r;
	}
	close_slot(p, PUMP_ERR);
	p->out_left = pending(p, PUMP_OUT);
	p->letting_go = 1;
	if (p->out_left == 0)
		close_slot(p, PUMP_OUT);
}

/*
 * Its output has ended, or the stop's KILL has gone: stdin goes too, and
 * the child's end is awaited on a pidfd, so that it is seen at once (it
 * may still be ending, or in the grace of a stop).
 */
static void
await_child(struct pump *p)
{
	close_slot(p, PUMP_IN);
	if (p->pid > 0 && !p->awaiting) {
		p->awaiting = 1;
		p->pf[PID_SLOT].fd = (int)syscall(SYS_pidfd_open, p->pid, 0);
	}
}

int
pump_wait(struct pump *p, int64_t until)
{
	int64_t now = duration_now_ms(), next = until, at;
	int timeout = -1;

	if (!output_open(p) || killed(p))
		await_child(p);
	if (p->stop != NULL && (at = proc_stop_next(p->stop)) != 0 &&
	    (next == 0 || at < next))
		next = at;
	if (next != 0) {
		int64_t left = next > now ? next - now : 0;
		timeout = left < INT_MAX ? (int)left : INT_MAX;
	}
	if (p->awaiting && !p->reaped) {
		int most = p->pf[PID_SLOT].fd >= 0 ? 1000 : 5;
		if (timeout < 0 || timeout > most)
			timeout = most;
	}
	if (poll(p->pf, p->n, timeout) < 0) {
		/* Nothing is ready; nor is what a wait before found. */
		for (nfds_t i = 0; i < p->n; i++)
			p->pf[i].revents = 0;
		return errno == EINTR ? 0 : -1;
	}
	if (p->pf[PUMP_ERR].revents != 0)
		err_read(p);
	if (p->pf[PUMP_IN].revents != 0)
		in_write(p);
	return 0;
}

short
pump_ready(const struct pump *p, int i)
{
	return i >= 0 && (nfds_t)i < p->n ? p->pf[i].revents : 0;
}

size_t
pump_read(struct pump *p, void *b, size_t len)
{
	ssize_t n;

	if (p->pf[PUMP_OUT].fd < 0 || p->pf[PUMP_OUT].revents == 0)
		return 0;
	/* Once a wait: a second read could block. */
	p->pf[PUMP_OUT].revents = 0;
	if (p->letting_go && len > p->out_left)
		len = p->out_left;
	n = read(p->pf[PUMP_OUT].fd, b, len);
	if (n > 0) {
		if (p->letting_go && (p->out_left -= (size_t)n) == 0)
			close_slot(p, PUMP_OUT);
		return (size_t)n;
	}
	if (n == 0 || errno != EINTR)
		close_slot(p, PUMP_OUT);
	return 0;
}

int
pump_open(const struct pump *p, int i)
{
	return i >= PUMP_OUT && i <= PUMP_IN && p->pf[i].fd >= 0;
}

int
pump_done(struct pump *p)
{
	/* Awaited with its output open: it was killed. */
	if (output_open(p) && !p->awaiting)
		return 0;
	/* An error (no such child) ends the wait too, with status 0. */
	if (p->pid > 0 && !p->reaped &&
	    waitpid(p->pid, &p->status, WNOHANG) != 0) {
		p->reaped = 1;
		close_slot(p, PID_SLOT);
		if (output_open(p))
			let_go(p);
	}
	return !output_open(p) && (p->pid <= 0 || p->reaped);
}

void
pump_close(struct pump *p)
{
	for (int i = 0; i < WATCHED; i++)
		close_slot(p, i);
}
