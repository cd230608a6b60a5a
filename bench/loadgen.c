/*
 * bench-loadgen: many-client scenarios against coordd, on libcurl's multi
 * interface driven by epoll (curl_multi_socket_action), so that tens of
 * thousands of open requests cost nothing while they are idle.
 *
 *   bench-loadgen parked [-v] -c ADDR --pid PID [-n N] [--key KEY] [--rounds R]
 *       [--timeout DUR]
 *   bench-loadgen tasks [-v] -c ADDR --pid PID [-n N] [--duration DUR]
 *       [--hb-interval DUR] [--timeout DUR] [--procs P] [--spread-addrs]
 *       [--detect]
 *   bench-loadgen detect [-v] -c ADDR [-n K] [--rounds R] [--timeout DUR]
 *
 * parked: N requests GET /v1/kv/KEY?wait=60s park at coordd; once its
 * /metrics shows them all parked, coordd's RSS growth per waiter over its
 * RSS before they were opened is taken from /proc/PID/status, then one PUT
 * of KEY releases them and the time from the PUT's reply to the last
 * waiter's reply is measured, and every reply checked. Rounds after the
 * first (R, default 2) park the same N again on their kept-alive
 * connections.
 *
 * tasks: against coordd --cluster worker=N, N tasks (default 10000) come
 * up: each registers with a random incarnation and calls wait-all, again
 * on 202; bring-up is the time from the first register sent to the last
 * wait-all reply. Then every task heartbeats every --hb-interval (default
 * 1s; an agent beats at half coordd's --heartbeat-timeout), the N beats
 * spread evenly over the interval, for DUR (default 10s): coordd's CPU time
 * per heartbeat (utime + stime from /proc/PID/stat), its RSS and the
 * failed heartbeats. Then, heartbeats still going, all N arrive at barrier
 * b1: N-1 first, parked, then the last; barrier release is the time from
 * sending the last arrival to the last reply, every reply checked. Each
 * task keeps one connection alive for register, wait-all and the barrier,
 * in a connection cache of its own (a CURLSH); heartbeats share a pool.
 * With --spread-addrs, task i's connection comes from 127.0.0.2 + i
 * rather than 127.0.0.1 (the coordd must listen on loopback): past some
 * 10,000 connections from one address, the kernel's search for a free
 * ephemeral port in connect() takes more of the load generator's time
 * than anything else, and past 28,000 the ports run out. With --detect,
 * once the barrier is passed, the last task sends one more heartbeat and
 * stops, the others beating on, and every process parks GET
 * /v1/errors?wait=30s: the figure is the time from that last beat's
 * sending to the error's arrival, at N tasks rather than detect's few.
 * With one cache for all, libcurl 7.88 walks every cached connection each
 * time it adds, reuses or removes a transfer, and at 10,000 connections
 * the load generator, not coordd, sets the pace.
 *
 * The tasks are split over P processes (--procs, default 4; each is this
 * program again with --base and --total naming its share): one process
 * cannot drive 10,000 tasks on two cores, and its own delays would read
 * as coordd's. Each reports how late it sent the heartbeats it owed
 * (client_lag) and how busy it was (client_cpu), so that a figure blames
 * the right side; the first adds the shares up and measures coordd.
 *
 * detect: against coordd --cluster worker=K --heartbeat-timeout T, R
 * rounds (default 2): K tasks register and heartbeat at the interval
 * coordd advertises, GET /v1/errors?wait=10s is parked, then one task
 * (task r-1 in round r) sends its last heartbeat at time T0 and stops; the
 * figure is the time from T0 to the error's arrival. Each round ends with
 * the failed task reset and the others shut down, so that no task is
 * connected and coordd starts a new epoch with no task in error.
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
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cli.h"
#include "daemon.h"
#include "duration.h"
#include "log.h"
#include "parse.h"
#include "task.h"

static const char synopsis[] =
    "usage: bench-loadgen parked [-v] -c ADDR --pid PID [-n N] [--key KEY] "
    "[--rounds R]\n                     [--timeout DUR]\n"
    "       bench-loadgen tasks [-v] -c ADDR --pid PID [-n N] "
    "[--duration DUR]\n                     [--hb-interval DUR] [--timeout DUR] "
    "[--procs P]\n                     [--spread-addrs] [--detect]\n"
    "       bench-loadgen detect [-v] -c ADDR [-n K] [--rounds R] "
    "[--timeout DUR]\n";

/* Requests added to the multi handle but not yet sent, at most. */
#define CONNECT_BATCH 256

struct opts {
	const char *addr;
	long pid;
	long n;
	const char *key;
	int64_t timeout_ms;
	int64_t duration_ms;
	int64_t hb_interval_ms; /* tasks: each task's heartbeat period */
	int rounds;
	int n_set;
	/* tasks: this process drives tasks base..base+n-1 of total. */
	long base, total;
	long procs;       /* tasks: processes to split the load over */
	int spread;       /* tasks: a source address per task */
	int detect;       /* tasks: detection of a silent task at the end */
	const char *self; /* argv[0], to start the others */
	int verbose;
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
	xfer_done_fn *done; /* called once finished; may re-add */
	void *arg;
	struct curl_slist *hdrs;
	int fd;                /* its socket, as curl last told us */
	uint32_t src;          /* IPv4 source address (host order); 0 any */
	unsigned char hold;    /* capture mode applies to it */
	unsigned char held;    /* readable, kept back from curl */
	unsigned char oneshot; /* armed to report once: lg_capture */
	unsigned char late;    /* like hold, removed once capture ends */
	unsigned char sent;
	unsigned char finished;
	CURLcode rc;
	long code;
	int64_t ready_us; /* first readable after stamping began */
	int64_t sent_us;  /* about to be sent (curl's prereq) */
	int64_t done_us;  /* curl finished it */
	size_t blen;
	int truncated;
	char body[512];
};

struct lg {
	CURLM *multi;
	int epfd;
	int64_t timer_at_us; /* curl's next timeout; -1 none */
	int64_t deadline_us;
	struct xfer **by_fd;
	size_t nfd;
	/*
	 * The socket on each local port, of those from the default source
	 * address. curl hands a kept-alive connection to another transfer
	 * without telling on_socket, so by_fd would still name the
	 * connection's last user: on_prereq, which learns the local port,
	 * puts the transfer about to send on it there. (A transfer with a
	 * source address of its own keeps its connection to itself: the port
	 * numbers of different addresses collide.)
	 */
	int *fd_of_port;
	struct epoll_event *evs;
	int maxevs;
	/*
	 * In capture mode a socket of a transfer marked hold that becomes
	 * readable is stamped and taken out of epoll, not handed to curl:
	 * arrival times then do not include libcurl's own work on earlier
	 * replies. lg_release_held gives them to curl afterwards.
	 */
	int capture;
	int stamp; /* record ready_us */
	struct xfer **held;
	size_t nheld;
	/*
	 * Transfers marked hold stamped since stamping began: held ones, and
	 * those curl read and finished on its own first (while it works on
	 * another transfer, curl may read any connection that is ready).
	 */
	size_t nstamped;
	/*
	 * Finished transfers marked hold or late, kept in curl until capture
	 * mode ends: removing a handle from a multi with 10,000 connections
	 * walks them all, 10 ms of the client's time in the middle of the
	 * release.
	 */
	struct xfer **later;
	size_t nlater;
	struct xfer **done; /* lg_drain's scratch */
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
	if (socketp == NULL && (x == NULL || x->src == 0)) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		if (getsockname(s, (struct sockaddr *)&ss, &sl) == 0)
			lg->fd_of_port[ntohs(ss.ss_family == AF_INET6 ?
			        ((struct sockaddr_in6 *)&ss)->sin6_port :
			        ((struct sockaddr_in *)&ss)->sin_port)] = s;
	}
	ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) |
	    ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
	ev.data.fd = s;
	/* A held socket was taken out of epoll behind curl's back. */
	if (socketp == NULL ||
	    (epoll_ctl(lg->epfd, EPOLL_CTL_MOD, s, &ev) < 0 &&
	        errno == ENOENT)) {
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
	if (x->src == 0 && lport > 0 && lport < 65536 &&
	    x->lg->fd_of_port[lport] >= 0) {
		x->fd = x->lg->fd_of_port[lport];
		x->lg->by_fd[x->fd] = x;
	}
	if (!x->sent) {
		x->sent = 1;
		x->sent_us = now_us();
		x->lg->sent++;
	}
	return CURL_PREREQFUNC_OK;
}

/*
 * Every socket is closed with a reset instead of a FIN: one run opens tens
 * of thousands of connections, and the closes the client makes first would
 * each leave a port in TIME_WAIT for a minute. The next scenario of a
 * bench run, short of the 28,000 ports of the ephemeral range, would then
 * fail to connect.
 */
static int
on_sockopt(void *arg, curl_socket_t fd, curlsocktype purpose)
{
	struct linger l = {1, 0};

	(void)arg;
	if (purpose == CURLSOCKTYPE_IPCXN)
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	return CURL_SOCKOPT_OK;
}

/*
 * A transfer with a source address binds its socket to it here, with the
 * port left to connect() (IP_BIND_ADDRESS_NO_PORT): a bind() that picked
 * the port would search the ports bound on every address. CURLOPT_INTERFACE
 * would do the bind too, but libcurl then resolves each address into its
 * DNS cache, and walks that cache of thousands on later requests.
 */
static curl_socket_t
on_opensocket(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct xfer *x = arg;
	int fd, one = 1;

	if (purpose != CURLSOCKTYPE_IPCXN)
		return CURL_SOCKET_BAD;
	if ((fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol)) <
	    0)
		return CURL_SOCKET_BAD;
	if (x->src != 0 && a->family == AF_INET) {
		struct sockaddr_in sin = {.sin_family = AF_INET,
		    .sin_addr.s_addr = htonl(x->src)};

		(void)setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
		    sizeof(one));
		if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
			close(fd);
			return CURL_SOCKET_BAD;
		}
	}
	return fd;
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
	lg->later = calloc(lg->nfd, sizeof(*lg->later));
	lg->evs = calloc((size_t)lg->maxevs, sizeof(*lg->evs));
	lg->fd_of_port = malloc(65536 * sizeof(*lg->fd_of_port));
	if (lg->by_fd == NULL || lg->held == NULL || lg->done == NULL ||
	    lg->later == NULL || lg->evs == NULL || lg->fd_of_port == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < 65536; i++)
		lg->fd_of_port[i] = -1;
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
	curl_multi_setopt(lg->multi, CURLMOPT_PIPELINING,
	    (long)CURLPIPE_NOTHING);
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
	free(lg->later);
	free(lg->evs);
	free(lg->fd_of_port);
}

/* A request for url; method NULL is GET. body NULL sends none. */
static struct xfer *
xfer_new(struct lg *lg, const char *url, const char *method, const char *body)
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
	curl_easy_setopt(x->easy, CURLOPT_SOCKOPTFUNCTION, on_sockopt);
	curl_easy_setopt(x->easy, CURLOPT_OPENSOCKETFUNCTION, on_opensocket);
	curl_easy_setopt(x->easy, CURLOPT_OPENSOCKETDATA, x);
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

/*
 * Points x at another request. Its easy handle is reused, and curl picks
 * an idle connection to the same host if it has one. body NULL is a GET.
 */
static void
xfer_set(struct xfer *x, const char *url, const char *body)
{
	curl_easy_setopt(x->easy, CURLOPT_URL, url);
	if (body == NULL) {
		curl_easy_setopt(x->easy, CURLOPT_HTTPGET, 1L);
		return;
	}
	if (x->hdrs == NULL) {
		x->hdrs = curl_slist_append(NULL, "Content-Type:");
		curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, x->hdrs);
	}
	curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	curl_easy_setopt(x->easy, CURLOPT_COPYPOSTFIELDS, body);
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
	x->ready_us = x->sent_us = x->done_us = 0;
	if (curl_multi_add_handle(lg->multi, x->easy) != CURLM_OK)
		return -1;
	lg->added++;
	return 0;
}

/* Records t as x's first sign of a reply, when stamping and none yet. */
static void
stamp(struct lg *lg, struct xfer *x, int64_t t)
{
	if (lg->stamp && x->ready_us == 0) {
		x->ready_us = t;
		lg->nstamped += x->hold;
	}
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
		stamp(lg, x, t);
		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->code);
		x->finished = 1;
		lg->finished++;
		if (lg->capture && (x->late || x->hold) && lg->nlater < lg->nfd)
			lg->later[lg->nlater++] = x;
		else
			lg->done[n++] = x;
	}
	for (size_t i = 0; i < n; i++)
		curl_multi_remove_handle(lg->multi, lg->done[i]->easy);
	for (size_t i = 0; i < n; i++)
		if (lg->done[i]->done != NULL)
			lg->done[i]->done(lg->done[i]);
}

/* Removes the transfers lg_drain kept in curl, and calls their done. */
static void
lg_flush_later(struct lg *lg)
{
	size_t n = lg->nlater;

	lg->nlater = 0;
	for (size_t i = 0; i < n; i++)
		curl_multi_remove_handle(lg->multi, lg->later[i]->easy);
	for (size_t i = 0; i < n; i++)
		if (lg->later[i]->done != NULL)
			lg->later[i]->done(lg->later[i]);
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
	n = epoll_wait(lg->epfd, lg->evs, lg->maxevs,
	    (int)((wait + 999) / 1000));
	if (n < 0 && errno != EINTR)
		return -1;
	t = now_us();
	for (int i = 0; i < n; i++) {
		int fd = lg->evs[i].data.fd, flags = 0;
		uint32_t e = lg->evs[i].events;
		struct xfer *x = lg->by_fd[fd];

		if (x != NULL && (e & (EPOLLIN | EPOLLERR | EPOLLHUP)))
			stamp(lg, x, t);
		if (x != NULL && lg->capture && x->hold && !x->held) {
			if (!x->oneshot)
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

/*
 * Starts capture mode. The sockets of transfers marked hold, all waiting
 * for a reply, are armed to report once: the first event disarms them, so
 * holding one back costs no system call while the replies are timed.
 */
static void
lg_capture(struct lg *lg)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT};

	lg->capture = lg->stamp = 1;
	lg->nstamped = 0;
	for (size_t fd = 0; fd < lg->nfd; fd++) {
		struct xfer *x = lg->by_fd[fd];

		if (x == NULL || !x->hold || x->finished || x->fd != (int)fd)
			continue;
		ev.data.fd = (int)fd;
		if (epoll_ctl(lg->epfd, EPOLL_CTL_MOD, (int)fd, &ev) == 0)
			x->oneshot = 1;
	}
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
		if (x->oneshot && x->fd >= 0) {
			/* Re-armed as curl last asked: a reply to read. */
			struct epoll_event ev = {.events = EPOLLIN,
			    .data.fd = x->fd};
			epoll_ctl(lg->epfd, EPOLL_CTL_MOD, x->fd, &ev);
		}
		x->oneshot = 0;
		if (x->fd >= 0)
			curl_multi_socket_action(lg->multi, x->fd,
			    CURL_CSELECT_IN, &running);
	}
	lg->nheld = 0;
	lg_flush_later(lg);
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
	curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, on_sockopt);
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
run_one(struct lg *lg, const char *method, const char *url, const char *body)
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
		    method != NULL ? method : "GET", url,
		    x->finished ? curl_easy_strerror(x->rc) : "timed out",
		    x->code, x->body);
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
	int64_t t0 = now_us(), t_sent = 0, last_poll = 0,
	        c0 = cpu_ns(p->o->pid);
	long parked = -1, rss, nconn;

	lg->added = lg->sent = lg->finished = 0;
	for (;;) {
		int64_t now = now_us();

		while (lg->added < n && lg->added - lg->sent < CONNECT_BATCH)
			if (lg_add(lg, p->w[lg->added]) < 0) {
				cli_fail(ST_RESOURCE_EXHAUSTED,
				    "out of memory");
				return -1;
			}
		if (lg->finished > 0) {
			for (size_t i = 0; i < n; i++) {
				struct xfer *x = p->w[i];

				if (!x->finished)
					continue;
				cli_fail(ST_INTERNAL,
				    "a waiter was answered "
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
			cli_fail(ST_DEADLINE_EXCEEDED,
			    "after %.0f ms: %zu of "
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
		        &nconn) == CURLE_OK &&
		    nconn == 0)
			reused++;
	printf("parked%s %ld waiters (muster_http_parked) on %zu new and "
	       "%zu kept-alive connections, all sent after %.0f ms, all parked "
	       "after %.0f ms\n",
	    sfx(round), parked, n - reused, reused, ms(t_sent - t0),
	    ms(now_us() - t0));
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
	put->late = 1;
	lg_capture(lg);
	c0 = cpu_ns(p->o->pid);
	t_put = now_us();
	/* For perf record -k CLOCK_MONOTONIC ... --time: the release window. */
	log_debug("round %d: PUT sent at %.6f s (CLOCK_MONOTONIC)", round,
	    (double)t_put / 1e6);
	if (lg_add(lg, put) < 0) {
		cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
		goto out;
	}
	while (
	    (!put->finished || lg->nstamped < n) && now_us() < lg->deadline_us)
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
			fprintf(stderr,
			    "%s: first bad reply: %s, HTTP %ld: %.100s\n",
			    log_prog(),
			    x->finished ? curl_easy_strerror(x->rc) :
			                  "no reply in time",
			    x->code, x->body);
	}
	log_debug("round %d: curl finished the last waiter at %.6f s", round,
	    (double)last / 1e6);
	qsort(p->arr, nready, sizeof(*p->arr), cmp_i64);
	if (nready > 0) {
		printf("release%s %.2f ms from the PUT's reply to the last "
		       "waiter's reply\n",
		    sfx(round), ms(p->arr[nready - 1]));
		printf("release_from_put_sent%s %.2f ms (the PUT itself took "
		       "%.2f ms)\n",
		    sfx(round), ms(p->arr[nready - 1] + t_reply - t_put),
		    ms(t_reply - t_put));
		printf("release_p50%s %.2f ms, p99 %.2f ms from the PUT's "
		       "reply\n",
		    sfx(round), ms(p->arr[nready / 2]),
		    ms(p->arr[nready * 99 / 100]));
	}
	printf("release_cpu%s %.2f us of coordd CPU per waiter released "
	       "(%.1f ms in all)\n",
	    sfx(round), (double)(c1 - c0) / 1e3 / (double)n,
	    (double)(c1 - c0) / 1e6);
	printf("replies%s %zu of %zu: 200 with the value (%zu bad)\n",
	    sfx(round), ok, n, bad);
	rss = rss_kib(p->o->pid);
	printf("rss_answered%s %ld KiB with the %zu connections idle, %.2f "
	       "KiB per connection\n",
	    sfx(round), rss, n, (double)(rss - p->rss_base) / (double)n);
	fflush(stdout);
	ret = ok == n ? 0 : -1;
	goto out;
syserr:
	cli_fail(ST_INTERNAL, "epoll_wait: %m");
out:
	lg->capture = lg->stamp = 0;
	lg_flush_later(lg);
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
		return cli_usage_error(synopsis,
		    "parked needs --pid of coordd");
	if (lg_init(&p.lg, o->timeout_ms, err, sizeof(err)) < 0) {
		cli_fail(ST_INTERNAL, "%s", err);
		goto out;
	}
	if (p.n + 64 > p.lg.nfd) {
		cli_fail(ST_RESOURCE_EXHAUSTED,
		    "%zu waiters need %zu open "
		    "files; the limit is %zu (raise ulimit -n)",
		    p.n, p.n + 64, p.lg.nfd);
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
				cli_fail(ST_NOT_FOUND,
				    "cannot read /proc/%ld/status: %m", o->pid);
				goto out;
			}
			printf("rss_base %ld KiB\n", p.rss_base);
		} else {
			printf("round %d: the same %zu waiters again, on their "
			       "kept-alive connections\n",
			    round, p.n);
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

/*
 * CPU time of pid as /proc/PID/stat counts it (utime + stime, in clock
 * ticks), in microseconds; -1 when unreadable.
 */
static int64_t
stat_cpu_us(long pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut, st;
	size_t len;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	if ((f = fopen(path, "r")) == NULL)
		return -1;
	len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[len] = '\0';
	/* Fields 14 and 15, counted after the ") " that ends the name. */
	if ((p = strrchr(buf, ')')) == NULL ||
	    sscanf(p + 2,
	        "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
	        &st) != 2)
		return -1;
	return (int64_t)((ut + st) * 1000000ULL /
	    (unsigned long long)sysconf(_SC_CLK_TCK));
}

/* The integer after "name": in a JSON text, or -1. */
static long
json_int_field(const char *text, const char *name)
{
	char pat[128];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", name);
	if ((p = strstr(text, pat)) == NULL)
		return -1;
	return strtol(p + strlen(pat), NULL, 10);
}

static size_t
count_str(const char *s, const char *sub)
{
	size_t n = 0;

	while ((s = strstr(s, sub)) != NULL) {
		n++;
		s += strlen(sub);
	}
	return n;
}

/* A GET /v1/errors?wait= poll, the arg of its transfer. */
struct errpoll {
	struct lg *lg;
	int done; /* an error came, or the poll failed */
};

static void
errpoll_done(struct xfer *x)
{
	struct errpoll *p = x->arg;

	/* The poll ended with no error in the list: ask again. */
	if (x->rc == CURLE_OK && x->code == 200 && !x->truncated &&
	    strstr(x->body, "\"task\"") == NULL && lg_add(p->lg, x) == 0)
		return;
	p->done = 1;
}

/*
 * tasks.
 */

enum tphase { T_REGISTER, T_WAITALL, T_UP, T_BARRIER, T_PASSED, T_FAILED };

struct tasks;

struct ttask {
	struct tasks *ts;
	size_t i;
	enum tphase phase;
	char inc[17];
	struct xfer *x;      /* register, wait-all, barrier */
	CURLSH *conn;        /* x's own connection cache */
	int hb_busy;         /* a heartbeat of it is in flight */
	int hb_stop;         /* 1: its next beat is its last; 2: sent */
	int64_t last_hb_us;  /* once stopped: its last beat's sending, */
	long last_hb_code;   /* and the reply's status */
	int64_t reg_sent_us; /* register sent */
	int64_t reg_us;      /* register answered */
	int64_t up_us;       /* wait-all answered 200 */
};

struct tasks {
	const struct opts *o;
	struct lg lg;
	struct ttask *t;
	size_t n;
	size_t base, total; /* ours are base..base+n-1 of total tasks */
	size_t nreg, nup, npassed, nfail, nretry;
	/* Heartbeat slot s is task s % n's, due at hb_t0 + s seconds / n. */
	int64_t hb_t0;
	size_t hb_next, hb_limit;
	struct xfer **pool; /* idle heartbeat transfers */
	struct xfer **hbx;  /* all of them, at most HB_XFERS */
	size_t npool, nhb_xfers, hb_inflight, nnoted;
	int hb_starved; /* a beat is due and every transfer is in flight */
	size_t hb_ok, hb_fail, hb_skipped;
	int64_t *lat; /* heartbeat latencies while recording */
	size_t nlat, caplat;
	/* How late each heartbeat left this process: its own lag. */
	int64_t *lag;
	size_t nlag;
	int record_lat;
	struct xfer *errs; /* --detect: GET /v1/errors?wait=30s */
	struct errpoll ep;
};

/* Reports a failed request; the first few in full, on stderr. */
static void
tasks_note(struct tasks *ts, const char *what, struct ttask *t,
    const struct xfer *x)
{
	if (ts->nnoted++ < 5)
		fprintf(stderr, "%s: %s of worker:%zu: %s, HTTP %ld: %.200s\n",
		    log_prog(), what, t->i,
		    x->rc != CURLE_OK ? curl_easy_strerror(x->rc) : "reply",
		    x->code, x->body);
}

/* A request of t's own failed: t is out. */
static void
tasks_bad(struct tasks *ts, const char *what, struct ttask *t,
    const struct xfer *x)
{
	tasks_note(ts, what, t, x);
	t->phase = T_FAILED;
	ts->nfail++;
}

static const char *
tasks_url(struct tasks *ts, struct ttask *t, const char *verb,
    const char *extra)
{
	static char url[512];

	snprintf(url, sizeof(url),
	    "http://%s/v1/tasks/worker/%zu/%s?incarnation=%s%s", ts->o->addr,
	    t->i, verb, t->inc, extra);
	return url;
}

static void
task_done(struct xfer *x)
{
	struct ttask *t = x->arg;
	struct tasks *ts = t->ts;
	int ok = x->rc == CURLE_OK && !x->truncated;

	switch (t->phase) {
	case T_REGISTER:
		if (!ok || x->code != 200) {
			tasks_bad(ts, "register", t, x);
			return;
		}
		t->reg_sent_us = x->sent_us;
		t->reg_us = x->done_us;
		ts->nreg++;
		t->phase = T_WAITALL;
		xfer_set(x, tasks_url(ts, t, "wait-all", "&wait=30s"), "");
		break;
	case T_WAITALL:
		if (ok && x->code == 200) {
			t->up_us = x->done_us;
			t->phase = T_UP;
			ts->nup++;
			return;
		}
		if (!ok || x->code != 202) {
			tasks_bad(ts, "wait-all", t, x);
			return;
		}
		ts->nretry++;
		break;
	case T_BARRIER:
		if (ok && x->code == 200 && strstr(x->body, "\"passed\"")) {
			t->phase = T_PASSED;
			ts->npassed++;
			return;
		}
		if (!ok || x->code != 202) {
			tasks_bad(ts, "barrier", t, x);
			return;
		}
		ts->nretry++;
		break;
	default: return;
	}
	if (lg_add(&ts->lg, x) < 0)
		tasks_bad(ts, "curl_multi_add_handle", t, x);
}

static void
hb_done(struct xfer *x)
{
	struct ttask *t = x->arg;
	struct tasks *ts = t->ts;

	t->hb_busy = 0;
	ts->hb_inflight--;
	if (t->hb_stop == 2) {
		t->last_hb_us = x->sent_us;
		t->last_hb_code = x->rc == CURLE_OK ? x->code : 0;
	}
	if (x->rc == CURLE_OK && x->code == 200) {
		ts->hb_ok++;
		if (ts->record_lat && ts->nlat < ts->caplat && x->sent_us != 0)
			ts->lat[ts->nlat++] = x->done_us - x->sent_us;
	} else {
		ts->hb_fail++;
		tasks_note(ts, "heartbeat", t, x);
	}
	ts->pool[ts->npool++] = x;
}

/* Task base+i beats at base+i / total of each second: all processes
 * together spread the beats evenly. */
static int64_t
hb_due(const struct tasks *ts, size_t slot)
{
	int64_t iv = ts->o->hb_interval_ms * 1000;

	return ts->hb_t0 + (int64_t)(slot / ts->n) * iv +
	    (int64_t)(ts->base + slot % ts->n) * iv / (int64_t)ts->total;
}

/*
 * Heartbeat transfers of one process, at most, and so connections: those
 * of all processes, with a connection per task, must stay under coordd's
 * connection limit, or coordd refuses the next and the beat reads as
 * failed. A beat due with all of them in flight waits for the first to
 * come back, and counts as the load generator's lag.
 */
#define HB_XFERS 128

/* Sends the heartbeats due by now. */
static int
hb_pump(struct tasks *ts, int64_t now)
{
	ts->hb_starved = 0;
	while (ts->hb_next < ts->hb_limit && hb_due(ts, ts->hb_next) <= now) {
		struct ttask *t = &ts->t[ts->hb_next % ts->n];
		struct xfer *x;

		if (ts->npool == 0 && ts->nhb_xfers >= HB_XFERS &&
		    !t->hb_busy && t->hb_stop != 2) {
			ts->hb_starved = 1;
			break;
		}

		if (ts->record_lat && ts->nlag < ts->caplat)
			ts->lag[ts->nlag++] = now - hb_due(ts, ts->hb_next);
		ts->hb_next++;
		if (t->hb_stop == 2)
			continue;
		if (t->hb_busy) {
			ts->hb_skipped++;
			continue;
		}
		if (ts->npool > 0) {
			x = ts->pool[--ts->npool];
		} else if ((x = xfer_new(&ts->lg, "http://localhost/", NULL,
		                NULL)) != NULL) {
			x->done = hb_done;
			ts->hbx[ts->nhb_xfers++] = x;
		} else {
			return -1;
		}
		x->arg = t;
		xfer_set(x, tasks_url(ts, t, "heartbeat", ""), "");
		if (lg_add(&ts->lg, x) < 0) {
			ts->pool[ts->npool++] = x;
			return -1;
		}
		t->hb_busy = 1;
		ts->hb_inflight++;
		if (t->hb_stop == 1)
			t->hb_stop = 2;
	}
	return 0;
}

/* One turn of the loop with heartbeats going, waiting until until_us. */
static int
tasks_step(struct tasks *ts, int64_t until_us)
{
	if (hb_pump(ts, now_us()) < 0) {
		cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
		return -1;
	}
	if (!ts->hb_starved && ts->hb_next < ts->hb_limit &&
	    hb_due(ts, ts->hb_next) < until_us)
		until_us = hb_due(ts, ts->hb_next);
	if (lg_step(&ts->lg, until_us) < 0) {
		cli_fail(ST_INTERNAL, "epoll_wait: %m");
		return -1;
	}
	return 0;
}

static int
tasks_late(struct tasks *ts, const char *what)
{
	if (now_us() < ts->lg.deadline_us)
		return 0;
	cli_fail(ST_DEADLINE_EXCEEDED, "%s: --timeout reached", what);
	return 1;
}

/* Every task registers, then waits for all; CONNECT_BATCH connects at once. */
static int
tasks_bringup(struct tasks *ts)
{
	struct lg *lg = &ts->lg;
	size_t next = 0, n = ts->n;
	int64_t t0 = INT64_MAX, last_reg = 0, last_up = 0, c0, c1, s0;
	long rss;

	c0 = stat_cpu_us(ts->o->pid);
	s0 = cpu_ns(ts->o->pid);
	while (ts->nup + ts->nfail < n) {
		while (next < n && lg->added - lg->sent < CONNECT_BATCH) {
			struct ttask *t = &ts->t[next++];
			xfer_set(t->x, tasks_url(ts, t, "register", ""), "");
			if (lg_add(lg, t->x) < 0) {
				cli_fail(ST_RESOURCE_EXHAUSTED,
				    "out of memory");
				return -1;
			}
		}
		if (ts->nfail > 0 || tasks_late(ts, "bring-up"))
			break;
		if (lg_step(lg, now_us() + 20000) < 0) {
			cli_fail(ST_INTERNAL, "epoll_wait: %m");
			return -1;
		}
	}
	c1 = stat_cpu_us(ts->o->pid);
	if (ts->nup < n) {
		cli_fail(ST_UNAVAILABLE,
		    "bring-up: %zu of %zu registered, %zu up, %zu failed",
		    ts->nreg, n, ts->nup, ts->nfail);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		struct ttask *t = &ts->t[i];
		if (t->reg_sent_us != 0 && t->reg_sent_us < t0)
			t0 = t->reg_sent_us;
		if (t->reg_us > last_reg)
			last_reg = t->reg_us;
		if (t->up_us > last_up)
			last_up = t->up_us;
	}
	rss = rss_kib(ts->o->pid);
	printf("bringup %.1f ms from the first register sent to the last "
	       "wait-all reply, %zu tasks\n",
	    ms(last_up - t0), n);
	printf("bringup_registered %.1f ms until the last register reply\n",
	    ms(last_reg - t0));
	printf("bringup_release %.1f ms from the last register reply to the "
	       "last wait-all reply\n",
	    ms(last_up - last_reg));
	printf("bringup_cpu %.2f us of coordd CPU per task (utime+stime; "
	       "schedstat %.2f us)\n",
	    (double)(c1 - c0) / (double)n,
	    (double)(cpu_ns(ts->o->pid) - s0) / 1e3 / (double)n);
	printf("bringup_retries %zu wait-all requests re-issued on 202\n",
	    ts->nretry);
	printf("rss_up %ld KiB with %zu tasks connected\n", rss, n);
	/* For a parent that split the tasks: times on CLOCK_MONOTONIC. */
	printf("abs_first_register %" PRId64 " us\n", t0);
	printf("abs_last_registered %" PRId64 " us\n", last_reg);
	printf("abs_last_up %" PRId64 " us\n", last_up);
	fflush(stdout);
	return 0;
}

/* This process's CPU time (user + system), in microseconds. */
static int64_t
self_cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
	    ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

/* Every task heartbeats every --hb-interval for the --duration. */
static int
tasks_heartbeats(struct tasks *ts, long rss_base)
{
	size_t n = ts->n, total;
	int64_t t0, t1, c0, c1, s0, s1, own0, own1, d = ts->o->duration_ms;
	int64_t iv = ts->o->hb_interval_ms;
	long rss;

	total = (size_t)(d / iv) * n + (size_t)(d % iv) * n / (size_t)iv;
	ts->caplat = total;
	if ((ts->lat = calloc(total + 1, sizeof(*ts->lat))) == NULL ||
	    (ts->lag = calloc(total + 1, sizeof(*ts->lag))) == NULL) {
		cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
		return -1;
	}
	ts->record_lat = 1;
	c0 = stat_cpu_us(ts->o->pid);
	s0 = cpu_ns(ts->o->pid);
	own0 = self_cpu_us();
	t0 = ts->hb_t0 = now_us();
	printf("abs_hb_start %" PRId64 " us\n", t0);
	fflush(stdout);
	ts->hb_next = 0;
	ts->hb_limit = total;
	while (ts->hb_next < total || ts->hb_inflight > 0) {
		if (tasks_late(ts, "heartbeats"))
			return -1;
		if (tasks_step(ts, now_us() + 20000) < 0)
			return -1;
	}
	t1 = now_us();
	c1 = stat_cpu_us(ts->o->pid);
	s1 = cpu_ns(ts->o->pid);
	own1 = self_cpu_us();
	ts->record_lat = 0;
	rss = rss_kib(ts->o->pid);
	qsort(ts->lat, ts->nlat, sizeof(*ts->lat), cmp_i64);
	printf("hb_sent %zu heartbeats in %.2f s (%.0f/s), at most %zu in "
	       "flight\n",
	    ts->hb_ok + ts->hb_fail, (double)(t1 - t0) / 1e6,
	    (double)(ts->hb_ok + ts->hb_fail) / ((double)(t1 - t0) / 1e6),
	    ts->nhb_xfers);
	printf("hb_failures %zu\n", ts->hb_fail);
	printf("hb_skipped %zu beats not sent: the task's last one still in "
	       "flight\n",
	    ts->hb_skipped);
	printf("hb_cpu %.2f us of coordd CPU per heartbeat (utime+stime from "
	       "/proc/PID/stat; %.1f%% of a CPU)\n",
	    (double)(c1 - c0) / (double)total,
	    (double)(c1 - c0) / (double)(t1 - t0) * 100);
	printf("hb_cpu_schedstat %.2f us per heartbeat (/proc/PID/task/*/"
	       "schedstat)\n",
	    (double)(s1 - s0) / 1e3 / (double)total);
	if (ts->nlat > 0)
		printf("hb_latency_p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
		    ms(ts->lat[ts->nlat / 2]), ms(ts->lat[ts->nlat * 99 / 100]),
		    ms(ts->lat[ts->nlat - 1]));
	printf("rss_hb %ld KiB after the heartbeats, %.2f KiB per task over "
	       "the RSS before\n",
	    rss, (double)(rss - rss_base) / (double)n);
	/*
	 * The load generator's own share: how late it sent the beats it
	 * owed, and how busy it was. A lag near the latency, or a CPU near
	 * 100%, blames the client, not coordd.
	 */
	qsort(ts->lag, ts->nlag, sizeof(*ts->lag), cmp_i64);
	if (ts->nlag > 0)
		printf("client_lag_p99 %.3f ms: heartbeats sent after they "
		       "were due\nclient_lag_max %.3f ms\n",
		    ms(ts->lag[ts->nlag * 99 / 100]),
		    ms(ts->lag[ts->nlag - 1]));
	printf("client_cpu %.1f %% of a CPU in this load generator\n",
	    (double)(own1 - own0) / (double)(t1 - t0) * 100);
	printf("abs_hb_end %" PRId64 " us\n", t1);
	fflush(stdout);
	return 0;
}

/* All N at barrier b1, heartbeats going: N-1 parked, then the last. */
static int
tasks_barrier(struct tasks *ts)
{
	struct lg *lg = &ts->lg;
	size_t n = ts->n, next = 0, hb_fail0 = ts->hb_fail, bad = 0;
	char url[512], body[256];
	int64_t t0 = now_us(), last_poll = 0, t_sent, c0, c1, *arr;
	long parked = -1;
	struct ttask *last = &ts->t[n - 1];
	size_t nready = 0;
	/* Split over processes, the last arrival is the last one's. */
	int last_here = ts->base + n == ts->total;
	size_t nfirst = last_here ? n - 1 : n;
	int64_t last_ready = 0;

	if ((arr = calloc(n, sizeof(*arr))) == NULL) {
		cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
		return -1;
	}
	ts->hb_limit = SIZE_MAX;
	snprintf(url, sizeof(url), "http://%s/v1/barriers/b1?wait=30s",
	    ts->o->addr);
	for (size_t i = 0; i < n; i++) {
		struct ttask *t = &ts->t[i];
		snprintf(body, sizeof(body),
		    "{\"task\":\"worker:%zu\","
		    "\"incarnation\":\"%s\",\"timeout_ms\":60000}",
		    t->i, t->inc);
		xfer_set(t->x, url, body);
		t->x->hold = 1;
		t->phase = T_BARRIER;
	}
	ts->nretry = 0;
	for (;;) {
		int64_t now = now_us();

		while (next < nfirst && lg->added - lg->sent < CONNECT_BATCH)
			if (lg_add(lg, ts->t[next++].x) < 0)
				goto nomem;
		if (!last_here && next == nfirst)
			break; /* the last process watches them park */
		if (ts->npassed > 0 || ts->nfail > 0) {
			cli_fail(ST_INTERNAL,
			    "barrier: %zu passed, %zu failed "
			    "before the last arrival",
			    ts->npassed, ts->nfail);
			goto fail;
		}
		if (next == n - 1 && now - last_poll >= 50000) {
			last_poll = now;
			parked = metric(ts->o->addr, "muster_http_parked");
			if (parked >= (long)ts->total - 1)
				break;
		}
		if (tasks_late(ts, "barrier"))
			goto fail;
		if (tasks_step(ts, now + 20000) < 0)
			goto fail;
	}
	if (last_here)
		printf("barrier_parked %ld requests parked at b1 after %.0f ms "
		       "(muster_http_parked)\n",
		    parked, ms(now_us() - t0));
	/* Replies are stamped as their sockets turn readable. */
	lg_capture(lg);
	c0 = cpu_ns(ts->o->pid);
	if (last_here && lg_add(lg, last->x) < 0)
		goto nomem;
	while (lg->nstamped < n && ts->nfail == 0) {
		if (tasks_late(ts, "barrier release"))
			goto fail;
		if (tasks_step(ts, now_us() + 20000) < 0)
			goto fail;
	}
	c1 = cpu_ns(ts->o->pid);
	/* For perf record -k CLOCK_MONOTONIC ... --time: the release window. */
	log_debug("barrier: last arrival sent at %.6f s, last reply readable "
	          "by %.6f s (CLOCK_MONOTONIC)",
	    (double)last->x->sent_us / 1e6, (double)now_us() / 1e6);
	lg_release_held(lg);
	lg->stamp = 0;
	while (ts->npassed + ts->nfail < n) {
		if (tasks_late(ts, "barrier replies"))
			goto fail;
		if (tasks_step(ts, now_us() + 20000) < 0)
			goto fail;
	}
	t_sent = last_here ? last->x->sent_us : 0;
	for (size_t i = 0; i < n; i++) {
		struct xfer *x = ts->t[i].x;
		if (x->ready_us != 0)
			arr[nready++] = x->ready_us - t_sent;
		if (x->ready_us > last_ready)
			last_ready = x->ready_us;
		if (ts->t[i].phase != T_PASSED)
			bad++;
	}
	qsort(arr, nready, sizeof(*arr), cmp_i64);
	if (last_here)
		printf("abs_barrier_sent %" PRId64 " us\n", t_sent);
	printf("abs_barrier_last_reply %" PRId64 " us\n", last_ready);
	if (last_here && nready > 0) {
		printf(
		    "barrier_release %.2f ms from sending the last arrival to "
		    "the last reply\n",
		    ms(arr[nready - 1]));
		printf("barrier_release_p50 %.2f ms, first %.2f ms, own reply "
		       "of the last arrival %.2f ms\n",
		    ms(arr[nready / 2]), ms(arr[0]),
		    ms(last->x->ready_us - t_sent));
	}
	printf("barrier_cpu %.2f us of coordd CPU per task released (%.1f ms "
	       "in all)\n",
	    (double)(c1 - c0) / 1e3 / (double)n, (double)(c1 - c0) / 1e6);
	printf("barrier_replies %zu of %zu: 200 passed (%zu bad, %zu "
	       "re-issued on 202)\n",
	    n - bad, n, bad, ts->nretry);
	printf("barrier_hb_failures %zu heartbeats failed during the barrier\n",
	    ts->hb_fail - hb_fail0);
	fflush(stdout);
	free(arr);
	return bad == 0 ? 0 : -1;
nomem:
	cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
fail:
	lg->capture = lg->stamp = 0;
	lg_flush_later(lg);
	free(arr);
	return -1;
}

/*
 * --detect, after the barrier, heartbeats going: the last task sends one
 * more beat and stops, and every process parks GET /v1/errors until the
 * error comes. The one with the last task reports the time from that
 * beat's sending to the error's arrival; every process, the heartbeats
 * that failed meanwhile (none should: the others are alive).
 */
static int
tasks_detect(struct tasks *ts)
{
	struct ttask *v = &ts->t[ts->n - 1];
	int last_here = ts->base + ts->n == ts->total;
	size_t hb_fail0 = ts->hb_fail, nfail;
	char url[512], want[64];

	snprintf(url, sizeof(url), "http://%s/v1/errors?wait=30s", ts->o->addr);
	if ((ts->errs = xfer_new(&ts->lg, url, NULL, NULL)) == NULL) {
		cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
		return -1;
	}
	ts->ep.lg = &ts->lg;
	ts->errs->arg = &ts->ep;
	ts->errs->done = errpoll_done;
	if (lg_add(&ts->lg, ts->errs) < 0) {
		cli_fail(ST_INTERNAL, "curl_multi_add_handle failed");
		return -1;
	}
	if (last_here)
		v->hb_stop = 1;
	while (!ts->ep.done || (last_here && v->hb_busy)) {
		if (tasks_late(ts, "detect"))
			return -1;
		if (tasks_step(ts, now_us() + 20000) < 0)
			return -1;
	}
	if (ts->errs->rc != CURLE_OK || ts->errs->code != 200) {
		cli_fail(ST_INTERNAL,
		    "detect: GET /v1/errors: %s, HTTP %ld: %s",
		    curl_easy_strerror(ts->errs->rc), ts->errs->code,
		    ts->errs->body);
		return -1;
	}
	nfail = ts->hb_fail - hb_fail0;
	printf("detect_hb_failures %zu heartbeats failed before the error "
	       "came\n",
	    nfail);
	fflush(stdout);
	snprintf(want, sizeof(want), "\"task\":\"worker:%zu\"", v->i);
	if (!last_here) {
		/* Beat on a moment: this process's exit, its thousands of
		 * resets, would slow the last one's receipt of the error. */
		for (int64_t end = now_us() + 1000000; now_us() < end;)
			if (tasks_step(ts, end) < 0)
				return -1;
	} else if (v->hb_stop != 2 || v->last_hb_code != 200 ||
	    strstr(ts->errs->body, want) == NULL ||
	    count_str(ts->errs->body, "\"task\"") != 1) {
		cli_fail(ST_INTERNAL,
		    "detect: the last heartbeat of worker:%zu got HTTP %ld; "
		    "GET /v1/errors: %.300s",
		    v->i, v->last_hb_code, ts->errs->body);
		return -1;
	} else {
		printf("detect %.1f ms from the last heartbeat of worker:%zu "
		       "to the error's arrival\n",
		    ms(ts->errs->done_us - v->last_hb_us), v->i);
		fflush(stdout);
	}
	if (nfail == 0)
		return 0;
	cli_fail(ST_INTERNAL,
	    "detect: %zu heartbeats failed before the error came", nfail);
	return -1;
}

/*
 * tasks over --procs processes: each drives its share of the tasks (one
 * process could not keep 10,000 on two cores, and its lag read as
 * coordd's), and this one adds their figures up and measures coordd.
 */
#define MAX_PROCS 64

struct share {
	pid_t pid;
	int fd;
	char line[1024];
	size_t len;
};

struct split {
	int nprocs;
	int64_t first_reg, last_reg, last_up, hb_start, hb_end;
	int nup, nhb_start, nhb_end;
	int64_t cpu_up, cpu_hb0, cpu_hb1, t_hb0, t_hb1;
	long rss_up;
	double hb_sent, hb_fail, hb_skipped, bar_hb_fail, bar_ok;
	double lat_p99, lag_p99, lag_max, cpu_max, cpu_sum;
	int64_t bar_sent, bar_last;
	double det, det_fail;
	int ndet;
};

static void
split_line(struct split *sp, const struct opts *o, int k, const char *line)
{
	char key[64];
	double v = 0, v2 = 0;
	int64_t a = 0;

	if (o->verbose)
		fprintf(stderr, "[%d] %s\n", k, line);
	if (sscanf(line, "%63s %lf", key, &v) < 2)
		return;
	a = (int64_t)v;
	if (strcmp(key, "abs_first_register") == 0) {
		if (sp->first_reg == 0 || a < sp->first_reg)
			sp->first_reg = a;
	} else if (strcmp(key, "abs_last_registered") == 0) {
		if (a > sp->last_reg)
			sp->last_reg = a;
	} else if (strcmp(key, "abs_last_up") == 0) {
		if (a > sp->last_up)
			sp->last_up = a;
		if (++sp->nup == sp->nprocs) {
			sp->cpu_up = stat_cpu_us(o->pid);
			sp->rss_up = rss_kib(o->pid);
		}
	} else if (strcmp(key, "abs_hb_start") == 0) {
		if (sp->nhb_start++ == 0) {
			sp->cpu_hb0 = stat_cpu_us(o->pid);
			sp->t_hb0 = now_us();
		}
	} else if (strcmp(key, "abs_hb_end") == 0) {
		if (++sp->nhb_end == sp->nprocs) {
			sp->cpu_hb1 = stat_cpu_us(o->pid);
			sp->t_hb1 = now_us();
		}
	} else if (strcmp(key, "hb_sent") == 0) {
		sp->hb_sent += v;
	} else if (strcmp(key, "hb_failures") == 0) {
		sp->hb_fail += v;
	} else if (strcmp(key, "hb_skipped") == 0) {
		sp->hb_skipped += v;
	} else if (strcmp(key, "hb_latency_p50") == 0) {
		if (sscanf(line, "%*s %lf ms, p99 %lf", &v, &v2) == 2 &&
		    v2 > sp->lat_p99)
			sp->lat_p99 = v2;
	} else if (strcmp(key, "client_lag_p99") == 0) {
		if (v > sp->lag_p99)
			sp->lag_p99 = v;
	} else if (strcmp(key, "client_lag_max") == 0) {
		if (v > sp->lag_max)
			sp->lag_max = v;
	} else if (strcmp(key, "client_cpu") == 0) {
		sp->cpu_sum += v;
		if (v > sp->cpu_max)
			sp->cpu_max = v;
	} else if (strcmp(key, "abs_barrier_sent") == 0) {
		sp->bar_sent = a;
	} else if (strcmp(key, "abs_barrier_last_reply") == 0) {
		if (a > sp->bar_last)
			sp->bar_last = a;
	} else if (strcmp(key, "barrier_replies") == 0) {
		sp->bar_ok += v;
	} else if (strcmp(key, "barrier_hb_failures") == 0) {
		sp->bar_hb_fail += v;
	} else if (strcmp(key, "detect") == 0) {
		sp->det = v;
	} else if (strcmp(key, "detect_hb_failures") == 0) {
		sp->det_fail += v;
		sp->ndet++;
	}
}

/* Reads what the processes print, line by line, until all have ended. */
static void
split_read(struct split *sp, const struct opts *o, struct share *sh, int np)
{
	int open = np;

	while (open > 0) {
		struct pollfd pf[MAX_PROCS];
		int m = 0, map[MAX_PROCS];

		for (int k = 0; k < np; k++)
			if (sh[k].fd >= 0) {
				pf[m].fd = sh[k].fd;
				pf[m].events = POLLIN;
				map[m++] = k;
			}
		if (poll(pf, (nfds_t)m, 1000) < 0 && errno != EINTR)
			return;
		for (int j = 0; j < m; j++) {
			struct share *c = &sh[map[j]];
			ssize_t r;

			if (pf[j].revents == 0)
				continue;
			r = read(c->fd, c->line + c->len,
			    sizeof(c->line) - 1 - c->len);
			if (r <= 0) {
				close(c->fd);
				c->fd = -1;
				open--;
				continue;
			}
			c->len += (size_t)r;
			c->line[c->len] = '\0';
			for (char *nl; (nl = strchr(c->line, '\n')) != NULL;) {
				*nl = '\0';
				split_line(sp, o, map[j], c->line);
				c->len -= (size_t)(nl + 1 - c->line);
				memmove(c->line, nl + 1, c->len + 1);
			}
			if (c->len == sizeof(c->line) - 1)
				c->len = 0; /* a line too long: dropped */
		}
	}
}

static int
mode_tasks_split(const struct opts *o)
{
	struct share sh[MAX_PROCS];
	struct split sp = {.nprocs = (int)o->procs};
	char a_pid[32], a_n[32], a_base[32], a_total[32], a_dur[32], a_to[32],
	    a_iv[32];
	long rss_base = rss_kib(o->pid);
	int np = (int)o->procs, failed = 0;
	int64_t cpu0 = stat_cpu_us(o->pid);

	if (rss_base < 0)
		return cli_fail(ST_NOT_FOUND,
		    "cannot read /proc/%ld/status: %m", o->pid);
	printf("procs %d load generator processes, %ld tasks\n", np, o->n);
	fflush(stdout);
	snprintf(a_pid, sizeof(a_pid), "%ld", o->pid);
	snprintf(a_total, sizeof(a_total), "%ld", o->n);
	snprintf(a_dur, sizeof(a_dur), "%" PRId64 "ms", o->duration_ms);
	snprintf(a_to, sizeof(a_to), "%" PRId64 "ms", o->timeout_ms);
	snprintf(a_iv, sizeof(a_iv), "%" PRId64 "ms", o->hb_interval_ms);
	for (int k = 0; k < np; k++) {
		long lo = o->n * k / np, hi = o->n * (k + 1) / np;
		int p[2];

		if (pipe(p) < 0)
			return cli_fail(ST_INTERNAL, "pipe: %m");
		snprintf(a_n, sizeof(a_n), "%ld", hi - lo);
		snprintf(a_base, sizeof(a_base), "%ld", lo);
		sh[k].len = 0;
		sh[k].fd = p[0];
		if ((sh[k].pid = fork()) < 0)
			return cli_fail(ST_INTERNAL, "fork: %m");
		if (sh[k].pid == 0) {
			dup2(p[1], 1);
			close(p[0]);
			close(p[1]);
			char *av[24] = {(char *)o->self, "tasks", "-c",
			    (char *)o->addr, "--pid", a_pid, "-n", a_n,
			    "--base", a_base, "--total", a_total, "--duration",
			    a_dur, "--timeout", a_to, "--hb-interval", a_iv};
			int ac = 18;

			if (o->spread)
				av[ac++] = "--spread-addrs";
			if (o->detect)
				av[ac++] = "--detect";
			if (o->verbose)
				av[ac++] = "-v";
			av[ac] = NULL;
			execv(o->self, av);
			_exit(127);
		}
		close(p[1]);
	}
	split_read(&sp, o, sh, np);
	for (int k = 0; k < np; k++) {
		int st;
		if (waitpid(sh[k].pid, &st, 0) < 0 || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 0)
			failed++;
	}
	if (sp.nup == np) {
		printf("bringup %.1f ms from the first register sent to the "
		       "last wait-all reply, %ld tasks\n",
		    ms(sp.last_up - sp.first_reg), o->n);
		printf("bringup_registered %.1f ms until the last register "
		       "reply\n",
		    ms(sp.last_reg - sp.first_reg));
		printf("bringup_cpu %.2f us of coordd CPU per task\n",
		    (double)(sp.cpu_up - cpu0) / (double)o->n);
		printf("rss_up %ld KiB with %ld tasks connected, %.2f KiB per "
		       "task over the RSS before\n",
		    sp.rss_up, o->n,
		    (double)(sp.rss_up - rss_base) / (double)o->n);
	}
	if (sp.nhb_end == np && sp.hb_sent > 0) {
		printf("hb_sent %.0f heartbeats\n", sp.hb_sent);
		printf("hb_failures %.0f\n", sp.hb_fail);
		printf("hb_skipped %.0f beats not sent: the task's last one "
		       "still in flight\n",
		    sp.hb_skipped);
		printf("hb_cpu %.2f us of coordd CPU per heartbeat (%.1f%% of "
		       "a CPU)\n",
		    (double)(sp.cpu_hb1 - sp.cpu_hb0) / sp.hb_sent,
		    (double)(sp.cpu_hb1 - sp.cpu_hb0) /
		        (double)(sp.t_hb1 - sp.t_hb0) * 100);
		printf("hb_latency_p99 %.3f ms, the worst process's\n",
		    sp.lat_p99);
		printf(
		    "client_lag_p99 %.3f ms, the worst process's: heartbeats "
		    "sent after they were due\n",
		    sp.lag_p99);
		printf("client_lag_max %.3f ms\n", sp.lag_max);
		printf("client_cpu %.1f %% of a CPU at most in one process, "
		       "%.1f %% in all %d\n",
		    sp.cpu_max, sp.cpu_sum, np);
	}
	if (sp.bar_sent != 0 && sp.bar_last != 0) {
		printf("barrier_release %.2f ms from sending the last arrival "
		       "to the last reply, in any process\n",
		    ms(sp.bar_last - sp.bar_sent));
		printf("barrier_replies %.0f of %ld: 200 passed\n", sp.bar_ok,
		    o->n);
		printf("barrier_hb_failures %.0f heartbeats failed during the "
		       "barrier\n",
		    sp.bar_hb_fail);
	}
	if (sp.det > 0 && sp.ndet == np) {
		printf(
		    "detect %.1f ms from the last heartbeat of worker:%ld to "
		    "the error's arrival\n",
		    sp.det, o->n - 1);
		printf("detect_hb_failures %.0f heartbeats of the others "
		       "failed before it came\n",
		    sp.det_fail);
	}
	fflush(stdout);
	if (failed > 0)
		return cli_fail(ST_INTERNAL,
		    "%d of %d load generator processes failed", failed, np);
	return 0;
}

static int
mode_tasks(const struct opts *o)
{
	struct tasks ts = {.o = o, .n = (size_t)o->n};
	char err[256];
	long rss_base;
	int ret = 1;

	if (o->pid <= 0)
		return cli_usage_error(synopsis, "tasks needs --pid of coordd");
	if (o->total == 0 && o->procs > 1 && o->n >= 2 * o->procs)
		return mode_tasks_split(o);
	ts.total = o->total > 0 ? (size_t)o->total : ts.n;
	ts.base = (size_t)o->base;
	if (ts.base + ts.n > ts.total)
		return cli_usage_error(synopsis,
		    "--base %ld -n %ld goes past --total %ld", o->base, o->n,
		    o->total);
	if (ts.total < 2)
		return cli_usage_error(synopsis, "tasks needs -n 2 or more");
	if (lg_init(&ts.lg, o->timeout_ms, err, sizeof(err)) < 0) {
		cli_fail(ST_INTERNAL, "%s", err);
		goto out;
	}
	/* A connection per task, and some for the heartbeats. */
	if (ts.n + HB_XFERS + 64 > ts.lg.nfd) {
		cli_fail(ST_RESOURCE_EXHAUSTED,
		    "%zu tasks need %zu open files; "
		    "the limit is %zu (raise ulimit -n)",
		    ts.n, ts.n + HB_XFERS + 64, ts.lg.nfd);
		goto out;
	}
	if ((ts.t = calloc(ts.n, sizeof(*ts.t))) == NULL ||
	    (ts.pool = calloc(HB_XFERS, sizeof(*ts.pool))) == NULL ||
	    (ts.hbx = calloc(HB_XFERS, sizeof(*ts.hbx))) == NULL)
		goto nomem;
	for (size_t i = 0; i < ts.n; i++) {
		struct ttask *t = &ts.t[i];
		t->ts = &ts;
		t->i = ts.base + i;
		task_format_incarnation(task_new_incarnation(), t->inc);
		if ((t->x = xfer_new(&ts.lg, "http://localhost/", NULL,
		         NULL)) == NULL ||
		    (t->conn = curl_share_init()) == NULL)
			goto nomem;
		/*
		 * A connection cache of its own: the task keeps one connection
		 * alive, and curl (7.88) does not walk thousands of others
		 * each time it adds, reuses or removes a transfer.
		 */
		curl_share_setopt(t->conn, CURLSHOPT_SHARE,
		    CURL_LOCK_DATA_CONNECT);
		curl_easy_setopt(t->x->easy, CURLOPT_SHARE, t->conn);
		if (o->spread)
			t->x->src = 0x7f000002u + (uint32_t)t->i;
		t->x->arg = t;
		t->x->done = task_done;
	}
	if ((rss_base = rss_kib(o->pid)) < 0) {
		cli_fail(ST_NOT_FOUND, "cannot read /proc/%ld/status: %m",
		    o->pid);
		goto out;
	}
	printf("rss_base %ld KiB\n", rss_base);
	if (tasks_bringup(&ts) < 0)
		goto out;
	printf("rss_per_task %.2f KiB over the RSS before\n",
	    (double)(rss_kib(o->pid) - rss_base) / (double)ts.n);
	if (tasks_heartbeats(&ts, rss_base) < 0 || tasks_barrier(&ts) < 0 ||
	    (o->detect && tasks_detect(&ts) < 0))
		goto out;
	ret = ts.hb_fail == 0 && ts.nfail == 0 ? 0 : 1;
	goto out;
nomem:
	cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
out:
	/* Removing a handle that is not in the multi is harmless. */
	for (size_t i = 0; ts.t != NULL && i < ts.n; i++) {
		if (ts.t[i].x != NULL)
			curl_multi_remove_handle(ts.lg.multi, ts.t[i].x->easy);
		xfer_free(ts.t[i].x);
		if (ts.t[i].conn != NULL)
			curl_share_cleanup(ts.t[i].conn);
	}
	free(ts.t);
	for (size_t i = 0; i < ts.nhb_xfers; i++) {
		curl_multi_remove_handle(ts.lg.multi, ts.hbx[i]->easy);
		xfer_free(ts.hbx[i]);
	}
	free(ts.hbx);
	if (ts.errs != NULL) {
		curl_multi_remove_handle(ts.lg.multi, ts.errs->easy);
		xfer_free(ts.errs);
	}
	free(ts.pool);
	free(ts.lat);
	free(ts.lag);
	lg_free(&ts.lg);
	return ret;
}

/*
 * detect.
 */

struct detect;

struct dtask {
	struct detect *d;
	size_t i;
	char inc[17];
	struct xfer *hb;
	int busy;
	int stopped;
};

struct detect {
	const struct opts *o;
	struct lg lg;
	struct dtask *t;
	size_t k;
	size_t hb_ok, hb_fail, hb_skipped;
	struct xfer *errs; /* GET /v1/errors?wait=10s */
	struct errpoll ep;
};

static void
dhb_done(struct xfer *x)
{
	struct dtask *t = x->arg;
	struct detect *d = t->d;

	t->busy = 0;
	if (x->rc == CURLE_OK && x->code == 200) {
		d->hb_ok++;
		return;
	}
	if (d->hb_fail++ < 5)
		fprintf(stderr,
		    "%s: heartbeat of worker:%zu: %s, HTTP %ld: %.200s\n",
		    log_prog(), t->i,
		    x->rc != CURLE_OK ? curl_easy_strerror(x->rc) : "reply",
		    x->code, x->body);
}

/* Heartbeats every task not stopped and not still waiting for a reply. */
static int
detect_beat(struct detect *d, const char *addr)
{
	char url[512];

	for (size_t i = 0; i < d->k; i++) {
		struct dtask *t = &d->t[i];
		if (t->stopped)
			continue;
		if (t->busy) {
			d->hb_skipped++;
			continue;
		}
		snprintf(url, sizeof(url),
		    "http://%s/v1/tasks/worker/%zu/heartbeat?incarnation=%s",
		    addr, i, t->inc);
		xfer_set(t->hb, url, "");
		if (lg_add(&d->lg, t->hb) < 0)
			return -1;
		t->busy = 1;
	}
	return 0;
}

static int
detect_wait_idle(struct detect *d)
{
	for (;;) {
		int busy = 0;
		for (size_t i = 0; i < d->k; i++)
			busy |= d->t[i].busy;
		if (!busy)
			return 0;
		if (now_us() >= d->lg.deadline_us ||
		    lg_step(&d->lg, now_us() + 20000) < 0)
			return -1;
	}
}

/*
 * One round: all register, heartbeat, the victim stops after its last
 * beat; returns the time from that beat's sending to the error's arrival
 * in *us. Then every task leaves, which starts a new epoch.
 */
static int
detect_round(struct detect *d, int round, size_t victim, int64_t interval,
    int64_t *us)
{
	const char *addr = d->o->addr;
	struct dtask *v = &d->t[victim];
	static char text[65536];
	char url[512], want[64];
	long code, epoch;
	int64_t next, t0;
	int tick = 0, ret = -1;
	/* Ticks of heartbeats before the victim's last: the poll is parked. */
	const int warm = 3;

	snprintf(url, sizeof(url), "http://%s/v1/tasks", addr);
	if (fetch(url, text, sizeof(text), &code) < 0 || code != 200 ||
	    (epoch = json_int_field(text, "epoch")) < 0 ||
	    json_int_field(text, "connected") != 0) {
		cli_fail(ST_FAILED_PRECONDITION,
		    "round %d: tasks are still connected: %.200s", round, text);
		return -1;
	}
	/*
	 * coordd scans for silent tasks every timeout / 4. Rounds that began
	 * right after the last one's detection would all stop at the same
	 * phase of that scan; a random start samples every phase.
	 */
	next = now_us() +
	    (int64_t)(task_new_incarnation() % (uint64_t)(interval / 2 + 1));
	while (now_us() < next)
		if (lg_step(&d->lg, next) < 0)
			return -1;
	for (size_t i = 0; i < d->k; i++) {
		struct dtask *t = &d->t[i];
		task_format_incarnation(task_new_incarnation(), t->inc);
		t->stopped = 0;
		snprintf(url, sizeof(url),
		    "http://%s/v1/tasks/worker/%zu/register?incarnation=%s",
		    addr, i, t->inc);
		if (run_one(&d->lg, "POST", url, "") < 0)
			return -1;
	}
	snprintf(url, sizeof(url), "http://%s/v1/errors?wait=10s", addr);
	xfer_set(d->errs, url, NULL);
	d->ep.done = 0;
	if (lg_add(&d->lg, d->errs) < 0)
		return -1;
	next = now_us();
	while (!d->ep.done) {
		int64_t now = now_us();
		if (now >= next) {
			if (detect_beat(d, addr) < 0) {
				cli_fail(ST_RESOURCE_EXHAUSTED,
				    "out of memory");
				return -1;
			}
			if (tick++ == warm)
				v->stopped = 1;
			next += interval;
		}
		if (now >= d->lg.deadline_us) {
			cli_fail(ST_DEADLINE_EXCEEDED,
			    "round %d: no error reported before --timeout",
			    round);
			return -1;
		}
		if (lg_step(&d->lg, next < now + 20000 ? next : now + 20000) <
		    0)
			return -1;
	}
	if (!v->stopped) {
		cli_fail(ST_INTERNAL,
		    "round %d: an error came before worker:%zu stopped: %s",
		    round, victim, d->errs->body);
		return -1;
	}
	if (detect_wait_idle(d) < 0)
		return -1;
	t0 = v->hb->sent_us;
	*us = d->errs->done_us - t0;
	snprintf(want, sizeof(want), "\"task\":\"worker:%zu\"", victim);
	if (d->errs->rc != CURLE_OK || d->errs->code != 200 ||
	    v->hb->code != 200 || strstr(d->errs->body, want) == NULL ||
	    count_str(d->errs->body, "\"task\"") != 1) {
		cli_fail(ST_INTERNAL,
		    "round %d: the last heartbeat of "
		    "worker:%zu got HTTP %ld; GET /v1/errors: %s, HTTP %ld: %s",
		    round, victim, v->hb->code, curl_easy_strerror(d->errs->rc),
		    d->errs->code, d->errs->body);
		goto leave;
	}
	ret = 0;
leave:
	/* The failed task is reset and the others shut down: a new epoch. */
	snprintf(url, sizeof(url), "http://%s/v1/tasks/worker/%zu/reset", addr,
	    victim);
	if (run_one(&d->lg, "POST", url, "") < 0)
		return -1;
	for (size_t i = 0; i < d->k; i++) {
		if (i == victim)
			continue;
		snprintf(url, sizeof(url),
		    "http://%s/v1/tasks/worker/%zu/"
		    "shutdown?incarnation=%s&wait=5s&barrier=0",
		    addr, i, d->t[i].inc);
		if (run_one(&d->lg, "POST", url, "") < 0)
			return -1;
	}
	snprintf(url, sizeof(url), "http://%s/v1/tasks", addr);
	if (fetch(url, text, sizeof(text), &code) < 0 || code != 200 ||
	    json_int_field(text, "epoch") <= epoch) {
		cli_fail(ST_INTERNAL,
		    "round %d: no new epoch once every task left: %.200s",
		    round, text);
		return -1;
	}
	return ret;
}

static int
mode_detect(const struct opts *o)
{
	struct detect d = {.o = o};
	static char text[65536];
	char url[512], err[256];
	int64_t *us = NULL, sum = 0;
	long code, timeout, total;
	int ret = 1, r;

	snprintf(url, sizeof(url), "http://%s/v1/tasks", o->addr);
	if (fetch(url, text, sizeof(text), &code) < 0 || code != 200)
		return cli_fail(ST_UNAVAILABLE, "GET %s: HTTP %ld", url, code);
	timeout = json_int_field(text, "heartbeat_timeout_ms");
	total = json_int_field(text, "total");
	if (timeout <= 0 || total <= 0)
		return cli_fail(ST_FAILED_PRECONDITION,
		    "detect needs coordd --cluster worker=K: %.200s", text);
	d.k = o->n_set ? (size_t)o->n : (size_t)total;
	if (d.k > (size_t)total)
		return cli_fail(ST_INVALID_ARGUMENT,
		    "-n %zu: coordd has %ld tasks", d.k, total);
	if (d.k != (size_t)total)
		return cli_fail(ST_INVALID_ARGUMENT,
		    "-n %zu: coordd has %ld "
		    "tasks, and every one must take part so that the cluster "
		    "empties between rounds",
		    d.k, total);
	if (lg_init(&d.lg, o->timeout_ms, err, sizeof(err)) < 0) {
		cli_fail(ST_INTERNAL, "%s", err);
		goto out;
	}
	if ((d.t = calloc(d.k, sizeof(*d.t))) == NULL ||
	    (us = calloc((size_t)o->rounds, sizeof(*us))) == NULL ||
	    (d.errs = xfer_new(&d.lg, url, NULL, NULL)) == NULL)
		goto nomem;
	d.ep.lg = &d.lg;
	d.errs->arg = &d.ep;
	d.errs->done = errpoll_done;
	for (size_t i = 0; i < d.k; i++) {
		d.t[i].d = &d;
		d.t[i].i = i;
		if ((d.t[i].hb = xfer_new(&d.lg, url, NULL, NULL)) == NULL)
			goto nomem;
		d.t[i].hb->arg = &d.t[i];
		d.t[i].hb->done = dhb_done;
	}
	printf("detect_timeout %ld ms heartbeat timeout, heartbeats every %ld "
	       "ms, %zu tasks\n",
	    timeout, timeout / 2, d.k);
	for (r = 1; r <= o->rounds; r++) {
		size_t victim = (size_t)(r - 1) % d.k;
		if (detect_round(&d, r, victim, timeout / 2 * 1000,
		        &us[r - 1]) < 0)
			goto out;
		sum += us[r - 1];
		printf(
		    "detect_r%d %.1f ms from worker:%zu's last heartbeat sent "
		    "to GET /v1/errors answering (%.2fx the timeout)\n",
		    r, ms(us[r - 1]), victim, ms(us[r - 1]) / (double)timeout);
		fflush(stdout);
	}
	qsort(us, (size_t)o->rounds, sizeof(*us), cmp_i64);
	printf("detect_max %.1f ms (%.2fx the timeout), min %.1f ms, mean "
	       "%.1f ms over %d rounds\n",
	    ms(us[o->rounds - 1]), ms(us[o->rounds - 1]) / (double)timeout,
	    ms(us[0]), ms(sum / o->rounds), o->rounds);
	printf("detect_hb_failures %zu of %zu heartbeats of live tasks failed "
	       "(%zu skipped, reply still pending)\n",
	    d.hb_fail, d.hb_ok + d.hb_fail, d.hb_skipped);
	ret = d.hb_fail == 0 ? 0 : 1;
	goto out;
nomem:
	cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
out:
	for (size_t i = 0; d.t != NULL && i < d.k; i++) {
		if (d.t[i].hb != NULL)
			curl_multi_remove_handle(d.lg.multi, d.t[i].hb->easy);
		xfer_free(d.t[i].hb);
	}
	if (d.errs != NULL)
		curl_multi_remove_handle(d.lg.multi, d.errs->easy);
	xfer_free(d.errs);
	free(d.t);
	free(us);
	lg_free(&d.lg);
	return ret;
}

static const struct mode {
	const char *name;
	int (*run)(const struct opts *o);
} modes[] = {
    {"parked", mode_parked},
    {"tasks", mode_tasks},
    {"detect", mode_detect},
};

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"coord", required_argument, NULL, 'c'},
	    {"pid", required_argument, NULL, 'p'},
	    {"key", required_argument, NULL, 'k'},
	    {"timeout", required_argument, NULL, 't'},
	    {"rounds", required_argument, NULL, 'r'},
	    {"duration", required_argument, NULL, 'D'},
	    {"hb-interval", required_argument, NULL, 'I'},
	    {"procs", required_argument, NULL, 'P'},
	    {"base", required_argument, NULL, 'B'},
	    {"total", required_argument, NULL, 'N'},
	    {"spread-addrs", no_argument, NULL, 'S'},
	    {"detect", no_argument, NULL, 'E'},
	    {"verbose", no_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct opts o = {.n = 10000,
	    .key = "bench-parked",
	    .timeout_ms = 60000,
	    .duration_ms = 10000,
	    .hb_interval_ms = 1000,
	    .rounds = 2,
	    .procs = 4};
	const struct mode *m = NULL;
	long v;
	int c, ret;

	log_init(argv[0], 0);
	if (argc > 1 &&
	    (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
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
		case 'c': o.addr = optarg; break;
		case 'n':
			if (parse_long(optarg, 1, 1000000, &o.n) < 0)
				return cli_usage_error(synopsis,
				    "-n %s is not a number from 1 to 1000000",
				    optarg);
			o.n_set = 1;
			break;
		case 'p':
			if (parse_long(optarg, 1, LONG_MAX, &o.pid) < 0)
				return cli_usage_error(synopsis,
				    "--pid %s is not a process id", optarg);
			break;
		case 'k': o.key = optarg; break;
		case 't':
			if (duration_parse(optarg, &o.timeout_ms) < 0 ||
			    o.timeout_ms <= 0)
				return cli_usage_error(synopsis,
				    "--timeout %s is not a duration (like 30s)",
				    optarg);
			break;
		case 'D':
			if (cli_duration_flag(synopsis, "--duration", optarg,
			        1000, &o.duration_ms) != 0)
				return 2;
			break;
		case 'I':
			if (cli_duration_flag(synopsis, "--hb-interval", optarg,
			        100, &o.hb_interval_ms) != 0)
				return 2;
			break;
		case 'r':
			if (parse_long(optarg, 1, 100, &v) < 0)
				return cli_usage_error(synopsis,
				    "--rounds %s is not a number from 1 to 100",
				    optarg);
			o.rounds = (int)v;
			break;
		case 'P':
			if (parse_long(optarg, 1, MAX_PROCS, &o.procs) < 0)
				return cli_usage_error(synopsis,
				    "--procs %s is not a number from 1 to 64",
				    optarg);
			break;
		case 'B':
			if (parse_long(optarg, 0, 1000000, &o.base) < 0)
				return cli_usage_error(synopsis,
				    "--base %s is not a task index", optarg);
			break;
		case 'N':
			if (parse_long(optarg, 2, 1000000, &o.total) < 0)
				return cli_usage_error(synopsis,
				    "--total %s is not a number from 2 to "
				    "1000000",
				    optarg);
			break;
		case 'S': o.spread = 1; break;
		case 'E': o.detect = 1; break;
		case 'v':
			log_init(log_prog(), 1);
			o.verbose = 1;
			break;
		case 'h': fputs(synopsis, stdout); return 0;
		default: fputs(synopsis, stderr); return 2;
		}
	}
	if (optind != argc)
		return cli_usage_error(synopsis, "unexpected argument %s",
		    argv[optind]);
	o.addr = cli_coord_addr(o.addr);
	if (o.spread && strncmp(o.addr, "127.", 4) != 0)
		return cli_usage_error(synopsis,
		    "--spread-addrs needs coordd at an IPv4 loopback address "
		    "(127.x.x.x:PORT), not %s",
		    o.addr);
	o.self = "/proc/self/exe";
	signal(SIGPIPE, SIG_IGN);
	daemon_raise_nofile();
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
		return cli_fail(ST_INTERNAL, "curl_global_init failed");
	ret = m->run(&o);
	curl_global_cleanup();
	return ret;
}
