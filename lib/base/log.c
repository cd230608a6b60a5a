#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "duration.h"
#include "log.h"

static const char *progname = "muster";
static int verbosity;

/* The queue of the asynchronous sink: a ring of bytes. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t more, empty;
	pthread_t thread;
	char *ring;
	size_t cap, head, len; /* bytes at head, len of them */
	int stopping;
	atomic_int on;
	atomic_ulong dropped;
	unsigned long told; /* drops already reported */
} q = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .more = PTHREAD_COND_INITIALIZER,
    .empty = PTHREAD_COND_INITIALIZER,
};

void
log_init(const char *prog, int verbose)
{
	const char *slash = strrchr(prog, '/');

	progname = slash != NULL ? slash + 1 : prog;
	verbosity = verbose;
}

const char *
log_prog(void)
{
	return progname;
}

int
log_verbose(void)
{
	return verbosity;
}

static void
write_all(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(STDERR_FILENO, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static void
enqueue(const char *line, size_t n)
{
	pthread_mutex_lock(&q.mu);
	if (q.stopping || q.cap - q.len < n) {
		atomic_fetch_add(&q.dropped, 1);
	} else {
		size_t tail = (q.head + q.len) % q.cap, first = q.cap - tail;
		if (first > n)
			first = n;
		memcpy(q.ring + tail, line, first);
		memcpy(q.ring, line + first, n - first);
		q.len += n;
		pthread_cond_signal(&q.more);
	}
	pthread_mutex_unlock(&q.mu);
}

static void *
writer(void *arg)
{
	char chunk[16384];

	(void)arg;
	pthread_mutex_lock(&q.mu);
	for (;;) {
		unsigned long dropped = atomic_load(&q.dropped);
		size_t n;

		if (q.len == 0 && dropped != q.told) {
			char m[128];
			int k = snprintf(m, sizeof(m),
			    "%s: %lu log lines "
			    "dropped: stderr did not keep up\n",
			    progname, dropped - q.told);
			q.told = dropped;
			pthread_mutex_unlock(&q.mu);
			write_all(m, (size_t)k);
			pthread_mutex_lock(&q.mu);
			continue;
		}
		if (q.len == 0) {
			pthread_cond_broadcast(&q.empty);
			if (q.stopping)
				break;
			pthread_cond_wait(&q.more, &q.mu);
			continue;
		}
		n = q.len < sizeof(chunk) ? q.len : sizeof(chunk);
		if (n > q.cap - q.head)
			n = q.cap - q.head;
		memcpy(chunk, q.ring + q.head, n);
		q.head = (q.head + n) % q.cap;
		q.len -= n;
		/* The write may block for as long as the reader sleeps;
		 * loggers only ever wait for the copy above. */
		pthread_mutex_unlock(&q.mu);
		write_all(chunk, n);
		pthread_mutex_lock(&q.mu);
	}
	pthread_mutex_unlock(&q.mu);
	return NULL;
}

int
log_async(unsigned long max_bytes)
{
	if (atomic_load(&q.on))
		return 0;
	if ((q.ring = malloc(max_bytes)) == NULL)
		return -1;
	q.cap = max_bytes;
	if (pthread_create(&q.thread, NULL, writer, NULL) != 0) {
		free(q.ring);
		q.ring = NULL;
		return -1;
	}
	atomic_store(&q.on, 1);
	return 0;
}

void
log_flush(int64_t timeout_ms)
{
	struct timespec until;

	if (!atomic_load(&q.on))
		return;
	until = duration_realtime_in(timeout_ms);
	pthread_mutex_lock(&q.mu);
	q.stopping = 1;
	pthread_cond_signal(&q.more);
	while (
	    q.len > 0 && pthread_cond_timedwait(&q.empty, &q.mu, &until) == 0)
		;
	pthread_mutex_unlock(&q.mu);
	/* A sink that never drains keeps its thread: exit ends it. */
	if (pthread_timedjoin_np(q.thread, NULL, &until) == 0)
		atomic_store(&q.on, 0);
}

unsigned long
log_dropped(void)
{
	return atomic_load(&q.dropped);
}

unsigned long
log_queued_bytes(void)
{
	unsigned long n;

	pthread_mutex_lock(&q.mu);
	n = q.len;
	pthread_mutex_unlock(&q.mu);
	return n;
}

static void
vlog(const char *fmt, va_list ap)
{
	char line[4096];
	int n = snprintf(line, sizeof(line), "%s: ", progname);
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	size_t len;

	if (m < 0)
		m = 0;
	len = (size_t)n + (size_t)m;
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	/* One write per line, so lines from threads do not interleave. */
	if (atomic_load(&q.on) && !pthread_equal(pthread_self(), q.thread))
		enqueue(line, len);
	else
		write_all(line, len);
}

void
log_info(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

void
log_debug(const char *fmt, ...)
{
	va_list ap;

	if (verbosity == 0)
		return;
	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}
