/*
 * bench-loadgen: many-client scenarios against coordd, on libcurl's multi
 * interface driven by epoll (curl_multi_socket_action), so that tens of
 * thousands of open requests cost nothing while they are idle.
 *
 *   bench-loadgen parked [-v] -c ADDR --pid PID [-n N] [--key KEY] [--rounds R]
 *       [--timeout DUR]
 *
 * parked: N requests GET /v1/kv/KEY?wait=60s park at coordd; once its
 * /metrics shows them all parked, coordd's RSS growth per waiter over its
 * RSS before they were opened is taken from /proc/PID/status, then one PUT
 * of KEY releases them and the time from the PUT's reply to the last
 * waiter's reply is measured, and every reply checked. Rounds after the
 * first (R, default 2) park the same N again on their kept-alive
 * connections.
 *
 * A mode is a function over the shared driver (struct lg): it adds
 * transfers, runs the loop until a condition holds, and prints figures as
 * "name value unit" lines that bench/run.sh reads. Everything is bounded
 * by --timeout: past it, the mode stops with an error.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cli.h"
#include "duration.h"
#include "log.h"

static const char synopsis[] =
    "usage: bench-loadgen parked [-v] -c ADDR --pid PID [-n N] [--key KEY] "
    "[--rounds R]\n"
    "                     [--timeout DUR]\n";

/* Requests added to the multi handle but not yet sent, at most. */
#define CONNECT_BATCH 256

struct opts {
	const char *addr;
	long pid;
	long n;
	const char *key;
	int64_t timeout_ms;
	int rounds;
};

/*
 * The driver.
 */

struct lg;
struct xfer;

typedef void xfer_done_fn(struct xfer *x);

/* One HTTP request and what came back. */
struct xfer {
	CURL *easy;
	struct lg *lg;
	xfer_done_fn *done;         /* called once finished; may re-add */
	void *arg;
	struct curl_slist *hdrs;
	int fd;                     /* its socket, as curl last told us */
	unsigned char hold;         /* capture mode applies to it */
	unsigned char held;         /* readable, kept back from curl */
	unsigned char sent;
	unsigned char finished;
	CURLcode rc;
	long code;
	int64_t ready_us;           /* first readable after stamping began */
	int64_t done_us;            /* curl finished it */
	size_t blen;
	int truncated;
	char body[256];
};

struct lg {
	CURLM *multi;
	int epfd;
	int64_t timer_at_us;        /* curl's next timeout; -1 none */
	int64_t deadline_us;
	struct xfer **by_fd;
	size_t nfd;
	struct epoll_event *evs;
	int maxevs;
	/*
	 * In capture mode a socket of a transfer marked hold that becomes
	 * readable is stamped and taken out of epoll, not handed to curl:
	 * arrival times then do not include libcurl's own work on earlier
	 * replies. lg_release_held gives them to curl afterwards.
	 */
	int capture;
	int stamp;                  /* record ready_us */
	struct xfer **held;
	size_t nheld;
	struct xfer **done;         /* lg_drain's scratch */
	size_t added, sent, finished;
};

static int64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int
on_socket(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
	struct lg *lg = userp;
	struct epoll_event ev = {0};
	struct xfer *x = NULL;

	curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&x);
	if (s < 0 || (size_t)s >= lg->nfd)
		return -1;
	if (what == CURL_POLL_REMOVE) {
		epoll_ctl(lg->epfd, EPOLL_CTL_DEL, s, NULL);
		curl_multi_assign(lg->multi, s, NULL);
		lg->by_fd[s] = NULL;
		return 0;
	}
	lg->by_fd[s] = x;
	if (x != NULL)
		x->fd = s;
	ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) |
	    ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
	ev.data.fd = s;
	/* A held socket was taken out of epoll behind curl's back. */
	if (socketp == NULL || (epoll_ctl(lg->epfd, EPOLL_CTL_MOD, s, &ev) < 0
	    && errno == ENOENT)) {
		if (epoll_ctl(lg->epfd, EPOLL_CTL_ADD, s, &ev) < 0)
			return -1;
		curl_multi_assign(lg->multi, s, lg);
	}
	return 0;
}

static int
on_timer(CURLM *m, long ms, void *userp)
{
	struct lg *lg = userp;

	(void)m;
	lg->timer_at_us = ms < 0 ? -1 : now_us() + (int64_t)ms * 1000;
	return 0;
}

static size_t
on_write(char *p, size_t size, size_t n, void *arg)
{
	struct xfer *x = arg;
	size_t len = size * n, room = sizeof(x->body) - 1 - x->blen;

	if (len > room) {
		x->truncated = 1;
		len = room;
	}
	memcpy(x->body + x->blen, p, len);
	x->blen += len;
	x->body[x->blen] = '\0';
	return size * n;
}

static int
on_prereq(void *arg, char *pip, char *lip, int pport, int lport)
{
	struct xfer *x = arg;

	(void)pip;
	(void)lip;
	(void)pport;
	(void)lport;
	if (!x->sent) {
		x->sent = 1;
		x->lg->sent++;
	}
	return CURL_PREREQFUNC_OK;
}

static int
lg_init(struct lg *lg, int64_t timeout_ms, char *err, size_t errlen)
{
	struct rlimit rl;

	memset(lg, 0, sizeof(*lg));
	lg->timer_at_us = -1;
	lg->deadline_us = now_us() + timeout_ms * 1000;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0) {
		snprintf(err, errlen, "getrlimit: %m");
		return -1;
	}
	lg->nfd = rl.rlim_cur == RLIM_INFINITY ? 1 << 20 : rl.rlim_cur;
	lg->maxevs = 4096;
	lg->by_fd = calloc(lg->nfd, sizeof(*lg->by_fd));
	lg->held = calloc(lg->nfd, sizeof(*lg->held));
	lg->done = calloc(lg->nfd, sizeof(*lg->done));
	lg->evs = calloc((size_t)lg->maxevs, sizeof(*lg->evs));
	if (lg->by_fd == NULL || lg->held == NULL || lg->done == NULL ||
	    lg->evs == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if ((lg->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		snprintf(err, errlen, "epoll_create1: %m");
		return -1;
	}
	if ((lg->multi = curl_multi_init()) == NULL) {
		snprintf(err, errlen, "curl_multi_init failed");
		return -1;
	}
	curl_multi_setopt(lg->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
	curl_multi_setopt(lg->multi, CURLMOPT_SOCKETDATA, lg);
	curl_multi_setopt(lg->multi, CURLMOPT_TIMERFUNCTION, on_timer);
	curl_multi_setopt(lg->multi, CURLMOPT_TIMERDATA, lg);
	curl_multi_setopt(lg->multi, CURLMOPT_MAXCONNECTS, (long)lg->nfd);
	curl_multi_setopt(lg->multi, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
	curl_multi_setopt(lg->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
	return 0;
}

static void
xfer_free(struct xfer *x)
{
	if (x == NULL)
		return;
	curl_easy_cleanup(x->easy);
	curl_slist_free_all(x->hdrs);
	free(x);
}

static void
lg_free(struct lg *lg)
{
	if (lg->multi != NULL)
		curl_multi_cleanup(lg->multi);
	if (lg->epfd > 0)
		close(lg->epfd);
	free(lg->by_fd);
	free(lg->held);
	free(lg->done);
	free(lg->evs);
}

/* A request for url; method NULL is GET. body NULL sends none. */
static struct xfer *
xfer_new(struct lg *lg, const char *url, const char *method,
    const char *body)
{
	struct xfer *x = calloc(1, sizeof(*x));

	if (x == NULL || (x->easy = curl_easy_init()) == NULL) {
		free(x);
		return NULL;
	}
	x->lg = lg;
	x->fd = -1;
	curl_easy_setopt(x->easy, CURLOPT_URL, url);
	curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
	curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(x->easy, CURLOPT_PREREQFUNCTION, on_prereq);
	curl_easy_setopt(x->easy, CURLOPT_PREREQDATA, x);
	curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(x->easy, CURLOPT_BUFFERSIZE, 4096L);
	curl_easy_setopt(x->easy, CURLOPT_PROXY, "");
	curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS,
	    (long)((lg->deadline_us - now_us()) / 1000 + 1000));
	if (method != NULL)
		curl_easy_setopt(x->easy, CURLOPT_CUSTOMREQUEST, method);
	if (body != NULL) {
		x->hdrs = curl_slist_append(NULL, "Content-Type:");
		curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, x->hdrs);
		curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE,
		    (long)strlen(body));
		curl_easy_setopt(x->easy, CURLOPT_COPYPOSTFIELDS, body);
	}
	return x;
}

static int
lg_add(struct lg *lg, struct xfer *x)
{
	x->finished = 0;
	x->held = 0;
	x->rc = CURLE_OK;
	x->code = 0;
	x->sent = 0;
	x->blen = 0;
	x->truncated = 0;
	x->ready_us = x->done_us = 0;
	if (curl_multi_add_handle(lg->multi, x->easy) != CURLM_OK)
		return -1;
	lg->added++;
	return 0;
}

/*
 * Finishes what curl reports done. Every message is read before any handle
 * is removed: curl_multi_remove_handle scans the pending messages, which
 * made a burst of N replies cost O(N^2).
 */
static void
lg_drain(struct lg *lg)
{
	CURLMsg *m;
	int left;
	size_t n = 0;
	struct xfer *x;
	int64_t t = now_us();

	while (n < lg->nfd &&
	    (m = curl_multi_info_read(lg->multi, &left)) != NULL) {
		if (m->msg != CURLMSG_DONE)
			continue;
		x = NULL;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE,
		    (char **)&x);
		x->rc = m->data.result;
		x->done_us = t;
		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->code);
		x->finished = 1;
		lg->finished++;
		lg->done[n++] = x;
	}
	for (size_t i = 0; i < n; i++)
		curl_multi_remove_handle(lg->multi, lg->done[i]->easy);
	for (size_t i = 0; i < n; i++)
		if (lg->done[i]->done != NULL)
			lg->done[i]->done(lg->done[i]);
}

/* One wait for events, at most until until_us, and their handling. */
static int
lg_step(struct lg *lg, int64_t until_us)
{
	int64_t now = now_us(), wait = until_us - now, t;
	int n, running;

	if (lg->timer_at_us >= 0 && lg->timer_at_us - now < wait)
		wait = lg->timer_at_us - now;
	if (wait < 0)
		wait = 0;
	n = epoll_wait(lg->epfd, lg->evs, lg->maxevs, (int)((wait + 999) /
	    1000));
	if (n < 0 && errno != EINTR)
		return -1;
	t = now_us();
	for (int i = 0; i < n; i++) {
		int fd = lg->evs[i].data.fd, flags = 0;
		uint32_t e = lg->evs[i].events;
		struct xfer *x = lg->by_fd[fd];

		if (x != NULL && lg->stamp && x->ready_us == 0 &&
		    (e & (EPOLLIN | EPOLLERR | EPOLLHUP)))
			x->ready_us = t;
		if (x != NULL && lg->capture && x->hold && !x->held) {
			epoll_ctl(lg->epfd, EPOLL_CTL_DEL, fd, NULL);
			x->held = 1;
			lg->held[lg->nheld++] = x;
			continue;
		}
		if (e & EPOLLIN)
			flags |= CURL_CSELECT_IN;
		if (e & EPOLLOUT)
			flags |= CURL_CSELECT_OUT;
		if (e & (EPOLLERR | EPOLLHUP))
			flags |= CURL_CSELECT_ERR;
		curl_multi_socket_action(lg->multi, fd, flags, &running);
	}
	if (lg->timer_at_us >= 0 && now_us() >= lg->timer_at_us) {
		lg->timer_at_us = -1;
		curl_multi_socket_action(lg->multi, CURL_SOCKET_TIMEOUT, 0,
		    &running);
	}
	lg_drain(lg);
	return 0;
}

/* Hands the sockets kept back in capture mode to curl. */
static void
lg_release_held(struct lg *lg)
{
	int running;

	lg->capture = 0;
	for (size_t i = 0; i < lg->nheld; i++) {
		struct xfer *x = lg->held[i];

		x->held = 0;
		if (x->fd >= 0)
			curl_multi_socket_action(lg->multi, x->fd,
			    CURL_CSELECT_IN, &running);
	}
	lg->nheld = 0;
	lg_drain(lg);
}

/* Where fetch collects a reply. */
struct sink {
	char *p;
	size_t len, cap;
};

static size_t
on_sink(char *p, size_t size, size_t n, void *arg)
{
	struct sink *s = arg;
	size_t len = size * n;

	if (len > s->cap - 1 - s->len)
		len = s->cap - 1 - s->len;
	memcpy(s->p + s->len, p, len);
	s->len += len;
	s->p[s->len] = '\0';
	return size * n;
}

/* A blocking GET on its own easy handle, outside the multi. */
static int
fetch(const char *url, char *out, size_t outlen, long *code)
{
	struct sink s = {out, 0, outlen};
	CURL *e = curl_easy_init();
	CURLcode rc;

	*out = '\0';
	*code = 0;
	if (e == NULL)
		return -1;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_sink);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PROXY, "");
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 5000L);
	rc = curl_easy_perform(e);
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, code);
	curl_easy_cleanup(e);
	return rc == CURLE_OK ? 0 : -1;
}

/*
 * Measurements of coordd.
 */

/* VmRSS of pid in KiB, or -1. */
static long
rss_kib(long pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/*
 * CPU time pid's threads have had, in ns, from schedstat: unlike
 * /proc/PID/stat it is exact, and on a shared host it says what coordd
 * spent whatever the wall clock says. -1 when unreadable. Threads that
 * already ended are not counted; coordd's live for its whole life.
 */
static int64_t
cpu_ns(long pid)
{
	char path[96];
	int64_t sum = 0;
	long long ns;
	struct dirent *d;
	DIR *dir;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/task", pid);
	if ((dir = opendir(path)) == NULL)
		return -1;
	while ((d = readdir(dir)) != NULL) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%ld/task/%.20s/schedstat",
		    pid, d->d_name);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		if (fscanf(f, "%lld", &ns) == 1)
			sum += ns;
		fclose(f);
	}
	closedir(dir);
	return sum;
}

/* A gauge from coordd's /metrics, or -1. */
static long
metric(const char *addr, const char *name)
{
	char url[512], *p;
	static char text[65536];
	size_t n = strlen(name);
	long code = 0;
	snprintf(url, sizeof(url), "http://%s/metrics", addr);
	if (fetch(url, text, sizeof(text), &code) < 0 || code != 200)
		return -1;
	for (p = text; p != NULL; p = strchr(p, '\n')) {
		if (*p == '\n')
			p++;
		if (strncmp(p, name, n) == 0 && p[n] == ' ')
			return strtol(p + n + 1, NULL, 10);
	}
	return -1;
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

static double
ms(int64_t us)
{
	return (double)us / 1000.0;
}

/*
 * parked.
 */

struct parked {
	const struct opts *o;
	struct lg lg;
	struct xfer **w;
	int64_t *arr;
	size_t n;
	long rss_base;
};

/*
 * One request run to its end, outside the counts of added and finished
 * transfers that the waiters use; 0 when it got a 2xx.
 */
static int
run_one(struct lg *lg, const char *method, const char *url,
    const char *body)
{
	struct xfer *x = xfer_new(lg, url, method, body);
	int ret = -1;

	if (x == NULL || lg_add(lg, x) < 0) {
		cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	lg->added--;
	while (!x->finished && now_us() < lg->deadline_us)
		if (lg_step(lg, lg->deadline_us) < 0)
			break;
	lg->finished -= x->finished;
	if (x->finished && x->rc == CURLE_OK && x->code / 100 == 2)
		ret = 0;
	else
		cli_fail(ST_UNAVAILABLE, "%s %s: %s (HTTP %ld) %s",
		    method != NULL ? method : "GET", url, x->finished ?
		    curl_easy_strerror(x->rc) : "timed out", x->code, x->body);
out:
	if (x != NULL && !x->finished)
		curl_multi_remove_handle(lg->multi, x->easy);
	xfer_free(x);
	return ret;
}

/* " (round R)" after a figure's name, for rounds after the first. */
static const char *
sfx(int round)
{
	static char s[16];

	if (round == 1)
		return "";
	snprintf(s, sizeof(s), "_r%d", round);
	return s;
}

/*
 * Opens every waiter, CONNECT_BATCH connections at a time, and waits for
 * /metrics to count them all parked; then takes coordd's RSS.
 */
static int
park_all(struct parked *p, int round)
{
	struct lg *lg = &p->lg;
	size_t n = p->n, reused = 0;
	int64_t t0 = now_us(), t_sent = 0, last_poll = 0, c0 = cpu_ns(p->o->pid);
	long parked = -1, rss, nconn;

	lg->added = lg->sent = lg->finished = 0;
	for (;;) {
		int64_t now = now_us();

		while (lg->added < n && lg->added - lg->sent < CONNECT_BATCH)
			if (lg_add(lg, p->w[lg->added]) < 0) {
				cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
				return -1;
			}
		if (lg->finished > 0) {
			for (size_t i = 0; i < n; i++) {
				struct xfer *x = p->w[i];

				if (!x->finished)
					continue;
				cli_fail(ST_INTERNAL, "a waiter was answered "
				    "before the PUT: %s, HTTP %ld: %s",
				    curl_easy_strerror(x->rc), x->code,
				    x->body);
				break;
			}
			return -1;
		}
		if (lg->sent == n && t_sent == 0)
			t_sent = now;
		if (lg->sent == n && now - last_poll >= 50000) {
			last_poll = now;
			parked = metric(p->o->addr, "muster_http_parked");
			if (parked >= (long)n)
				break;
		}
		if (now >= lg->deadline_us) {
			cli_fail(ST_DEADLINE_EXCEEDED, "after %.0f ms: %zu of "
			    "%zu requests sent, muster_http_parked %ld",
			    ms(now - t0), lg->sent, n, parked);
			return -1;
		}
		if (lg_step(lg, now + 20000) < 0) {
			cli_fail(ST_INTERNAL, "epoll_wait: %m");
			return -1;
		}
	}
	rss = rss_kib(p->o->pid);
	for (size_t i = 0; i < n; i++)
		if (curl_easy_getinfo(p->w[i]->easy, CURLINFO_NUM_CONNECTS,
		    &nconn) == CURLE_OK && nconn == 0)
			reused++;
	printf("parked%s %ld waiters (muster_http_parked) on %zu new and "
	    "%zu kept-alive connections, all sent after %.0f ms, all parked "
	    "after %.0f ms\n", sfx(round), parked, n - reused, reused,
	    ms(t_sent - t0), ms(now_us() - t0));
	printf("park_cpu%s %.2f us of coordd CPU per waiter parked\n",
	    sfx(round), (double)(cpu_ns(p->o->pid) - c0) / 1e3 / (double)n);
	printf("rss_parked%s %ld KiB\n", sfx(round), rss);
	printf("rss_per_waiter%s %.2f KiB\n", sfx(round),
	    (double)(rss - p->rss_base) / (double)n);
	fflush(stdout);
	return 0;
}

/*
 * PUTs the key and times the waiters' replies. They are stamped as their
 * sockets turn readable, before curl spends any time on them.
 */
static int
release_all(struct parked *p, int round)
{
	struct lg *lg = &p->lg;
	struct xfer *put;
	size_t n = p->n, ok = 0, bad = 0, nready = 0;
	char url[1024], value[64];
	int64_t t_put, t_reply, last = 0, c0, c1;
	long rss;
	int ret = -1;

	snprintf(value, sizeof(value), "released-%ld-%d", (long)getpid(),
	    round);
	snprintf(url, sizeof(url), "http://%s/v1/kv/%s?mode=overwrite",
	    p->o->addr, p->o->key);
	if ((put = xfer_new(lg, url, "PUT", value)) == NULL) {
		cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
		return -1;
	}
	lg->capture = lg->stamp = 1;
	c0 = cpu_ns(p->o->pid);
	t_put = now_us();
	/* For perf record -k CLOCK_MONOTONIC ... --time: the release window. */
	log_debug("round %d: PUT sent at %.6f s (CLOCK_MONOTONIC)", round,
	    (double)t_put / 1e6);
	if (lg_add(lg, put) < 0) {
		cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	while ((!put->finished || lg->nheld < n) && now_us() < lg->deadline_us)
		if (lg_step(lg, lg->deadline_us) < 0)
			goto syserr;
	c1 = cpu_ns(p->o->pid);
	lg_release_held(lg);
	lg->stamp = 0;
	while (lg->finished < n + 1 && now_us() < lg->deadline_us)
		if (lg_step(lg, lg->deadline_us) < 0)
			goto syserr;
	if (!put->finished || put->rc != CURLE_OK || put->code != 200) {
		cli_fail(ST_UNAVAILABLE, "PUT %s: %s (HTTP %ld) %s", url,
		    put->finished ? curl_easy_strerror(put->rc) : "timed out",
		    put->code, put->body);
		goto out;
	}
	t_reply = put->ready_us != 0 ? put->ready_us : put->done_us;
	for (size_t i = 0; i < n; i++) {
		struct xfer *x = p->w[i];

		if (x->ready_us != 0)
			p->arr[nready++] = x->ready_us - t_reply;
		if (x->done_us > last)
			last = x->done_us;
		if (x->finished && x->rc == CURLE_OK && x->code == 200 &&
		    !x->truncated && strcmp(x->body, value) == 0)
			ok++;
		else if (bad++ == 0)
			fprintf(stderr, "%s: first bad reply: %s, HTTP %ld: "
			    "%.100s\n", log_prog(), x->finished ?
			    curl_easy_strerror(x->rc) : "no reply in time",
			    x->code, x->body);
	}
	log_debug("round %d: curl finished the last waiter at %.6f s", round,
	    (double)last / 1e6);
	qsort(p->arr, nready, sizeof(*p->arr), cmp_i64);
	if (nready > 0) {
		printf("release%s %.2f ms from the PUT's reply to the last "
		    "waiter's reply\n", sfx(round), ms(p->arr[nready - 1]));
		printf("release_from_put_sent%s %.2f ms (the PUT itself took "
		    "%.2f ms)\n", sfx(round), ms(p->arr[nready - 1] + t_reply -
		    t_put), ms(t_reply - t_put));
		printf("release_p50%s %.2f ms, p99 %.2f ms from the PUT's "
		    "reply\n", sfx(round), ms(p->arr[nready / 2]),
		    ms(p->arr[nready * 99 / 100]));
	}
	printf("release_cpu%s %.2f us of coordd CPU per waiter released "
	    "(%.1f ms in all)\n", sfx(round), (double)(c1 - c0) / 1e3 /
	    (double)n, (double)(c1 - c0) / 1e6);
	printf("replies%s %zu of %zu: 200 with the value (%zu bad)\n",
	    sfx(round), ok, n, bad);
	rss = rss_kib(p->o->pid);
	printf("rss_answered%s %ld KiB with the %zu connections idle, %.2f "
	    "KiB per connection\n", sfx(round), rss, n,
	    (double)(rss - p->rss_base) / (double)n);
	fflush(stdout);
	ret = ok == n ? 0 : -1;
	goto out;
syserr:
	cli_fail(ST_INTERNAL, "epoll_wait: %m");
out:
	lg->capture = lg->stamp = 0;
	if (!put->finished)
		curl_multi_remove_handle(lg->multi, put->easy);
	xfer_free(put);
	return ret;
}

/*
 * Round 1 parks N waiters on new connections. Each later round parks them
 * again on the same connections, kept alive: what a task that long-polls in
 * a loop costs, once libmicrohttpd has used its connection's memory pool.
 */
static int
mode_parked(const struct opts *o)
{
	struct parked p = {.o = o, .n = (size_t)o->n};
	char url[1024], err[256];
	int ret = 1;

	if (o->pid <= 0)
		return cli_usage_error(synopsis, "parked needs --pid of coordd");
	if (lg_init(&p.lg, o->timeout_ms, err, sizeof(err)) < 0) {
		cli_fail(ST_INTERNAL, "%s", err);
		goto out;
	}
	if (p.n + 64 > p.lg.nfd) {
		cli_fail(ST_RESOURCE_EXHAUSTED, "%zu waiters need %zu open "
		    "files; the limit is %zu (raise ulimit -n)", p.n, p.n + 64,
		    p.lg.nfd);
		goto out;
	}
	if ((p.w = calloc(p.n, sizeof(*p.w))) == NULL ||
	    (p.arr = calloc(p.n, sizeof(*p.arr))) == NULL)
		goto nomem;
	snprintf(url, sizeof(url), "http://%s/v1/kv/%s?wait=60s", o->addr,
	    o->key);
	for (size_t i = 0; i < p.n; i++) {
		if ((p.w[i] = xfer_new(&p.lg, url, NULL, NULL)) == NULL)
			goto nomem;
		p.w[i]->hold = 1;
	}
	snprintf(url, sizeof(url), "http://%s/v1/kv/%s", o->addr, o->key);
	for (int round = 1; round <= o->rounds; round++) {
		/* The key must be absent, or every GET answers at once. */
		if (run_one(&p.lg, "DELETE", url, NULL) < 0)
			goto out;
		if (round == 1) {
			if ((p.rss_base = rss_kib(o->pid)) < 0) {
				cli_fail(ST_NOT_FOUND, "cannot read "
				    "/proc/%ld/status: %m", o->pid);
				goto out;
			}
			printf("rss_base %ld KiB\n", p.rss_base);
		} else {
			printf("round %d: the same %zu waiters again, on their "
			    "kept-alive connections\n", round, p.n);
		}
		if (park_all(&p, round) < 0 || release_all(&p, round) < 0)
			goto out;
	}
	ret = 0;
	goto out;
nomem:
	cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
out:
	if (p.w != NULL) {
		for (size_t i = 0; i < p.n; i++) {
			if (p.w[i] != NULL && !p.w[i]->finished)
				curl_multi_remove_handle(p.lg.multi,
				    p.w[i]->easy);
			xfer_free(p.w[i]);
		}
		free(p.w);
	}
	free(p.arr);
	lg_free(&p.lg);
	return ret;
}

static const struct mode {
	const char *name;
	int (*run)(const struct opts *o);
} modes[] = {
	{"parked", mode_parked},
};

static void
raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"coord", required_argument, NULL, 'c'},
		{"pid", required_argument, NULL, 'p'},
		{"key", required_argument, NULL, 'k'},
		{"timeout", required_argument, NULL, 't'},
		{"rounds", required_argument, NULL, 'r'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct opts o = {.n = 10000, .key = "bench-parked",
	    .timeout_ms = 60000, .rounds = 2};
	const struct mode *m = NULL;
	char *end;
	int c, ret;

	log_init(argv[0], 0);
	if (argc > 1 && (strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "--help") == 0)) {
		fputs(synopsis, stdout);
		return 0;
	}
	if (argc < 2)
		return cli_usage_error(synopsis, "no mode given");
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
		if (strcmp(argv[1], modes[i].name) == 0)
			m = &modes[i];
	if (m == NULL)
		return cli_usage_error(synopsis, "unknown mode %s", argv[1]);
	argc--;
	argv++;
	while ((c = getopt_long(argc, argv, "c:n:hv", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			o.addr = optarg;
			break;
		case 'n':
			o.n = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || o.n < 1 ||
			    o.n > 1000000)
				return cli_usage_error(synopsis, "-n %s is not a "
				    "number from 1 to 1000000", optarg);
			break;
		case 'p':
			o.pid = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || o.pid < 1)
				return cli_usage_error(synopsis, "--pid %s is "
				    "not a process id", optarg);
			break;
		case 'k':
			o.key = optarg;
			break;
		case 't':
			if (duration_parse(optarg, &o.timeout_ms) < 0 ||
			    o.timeout_ms <= 0)
				return cli_usage_error(synopsis, "--timeout %s is "
				    "not a duration (like 30s)", optarg);
			break;
		case 'r':
			o.rounds = (int)strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || o.rounds < 1 ||
			    o.rounds > 100)
				return cli_usage_error(synopsis, "--rounds %s is "
				    "not a number from 1 to 100", optarg);
			break;
		case 'v':
			log_init(log_prog(), 1);
			break;
		case 'h':
			fputs(synopsis, stdout);
			return 0;
		default:
			fputs(synopsis, stderr);
			return 2;
		}
	}
	if (optind != argc)
		return cli_usage_error(synopsis, "unexpected argument %s",
		    argv[optind]);
	o.addr = cli_coord_addr(o.addr);
	signal(SIGPIPE, SIG_IGN);
	raise_nofile();
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
		return cli_fail(ST_INTERNAL, "curl_global_init failed");
	ret = m->run(&o);
	curl_global_cleanup();
	return ret;
}
