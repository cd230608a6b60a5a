/*
 * http_server_conn.c: connections, from accept to close, and the door
 * thread. It watches the sockets of parked requests for a client that
 * went away, closes connections too slow to send their request, and
 * drains the connections closed with unread input (so that an error reply
 * is not lost to a reset).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "duration.h"
#include "http_server_int.h"
#include "log.h"
#include "vec.h"

/* Records c under its descriptor; -1 on ENOMEM. Under cmu. */
static int
byfd_put(struct http_server *srv, struct conn *c)
{
	if ((size_t)c->fd >= srv->nbyfd) {
		size_t was = srv->nbyfd;

		if (vec_grow(&srv->byfd, &srv->nbyfd, (size_t)c->fd + 1,
		        sizeof(*srv->byfd)) < 0)
			return -1;
		memset(srv->byfd + was, 0,
		    (srv->nbyfd - was) * sizeof(*srv->byfd));
	}
	srv->byfd[c->fd] = c;
	return 0;
}

/*
 * A connection's socket joins the door's epoll set the first time a
 * request of its parks, and stays there, watched for EPOLLRDHUP with
 * EPOLLONESHOT, until the connection closes. Parking and answering set and
 * clear c->parked only: a task that long-polls in a loop, and each of the
 * thousands a barrier releases at once, costs no epoll_ctl. An event for
 * a connection with nothing parked is dropped, and disarms the watch; the
 * next park arms it again, and it fires at once if the client has gone.
 */
enum { DOOR_NONE, DOOR_ARMED, DOOR_FIRED };

/* Stops watching c's parked request, if it was. Under cmu. */
static void
unwatch(struct conn *c)
{
	c->parked = NULL;
}

/* Takes c's socket out of the door's set, as the connection closes. */
static void
door_forget(struct http_server *srv, struct conn *c)
{
	c->parked = NULL;
	if (c->door != DOOR_NONE) {
		c->door = DOOR_NONE;
		epoll_ctl(srv->door_ep, EPOLL_CTL_DEL, c->fd, NULL);
	}
}

static void linger_close(struct http_server *srv, int fd);

void
http_conn_notify(void *cls, struct MHD_Connection *mc, void **ctx,
    enum MHD_ConnectionNotificationCode code)
{
	struct http_server *srv = cls;
	struct conn *c = *ctx;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc,
		    MHD_CONNECTION_INFO_CONNECTION_FD);

		atomic_fetch_add(&srv->conns, 1);
		if (ci == NULL || (c = calloc(1, sizeof(*c))) == NULL)
			return;
		c->fd = ci->connect_fd;
		atomic_init(&c->ready_at, duration_now_ms());
		pthread_mutex_lock(&srv->cmu);
		c->gen = ++srv->gen;
		if (byfd_put(srv, c) < 0) {
			pthread_mutex_unlock(&srv->cmu);
			free(c);
			return;
		}
		c->next = srv->conns_head;
		if (c->next != NULL)
			c->next->prev = c;
		srv->conns_head = c;
		pthread_mutex_unlock(&srv->cmu);
		*ctx = c;
		return;
	}
	atomic_fetch_sub(&srv->conns, 1);
	if (c == NULL)
		return;
	/* libmicrohttpd closes the descriptor only after this returns. */
	pthread_mutex_lock(&srv->cmu);
	door_forget(srv, c);
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		srv->conns_head = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	if ((size_t)c->fd < srv->nbyfd && srv->byfd[c->fd] == c)
		srv->byfd[c->fd] = NULL;
	linger_close(srv, c->fd);
	pthread_mutex_unlock(&srv->cmu);
	free(c);
	*ctx = NULL;
}

/*
 * Closes fd, a connection libmicrohttpd is closing. With input still
 * unread, a plain close would reset the connection, and the client could
 * lose the reply just sent (a 414 for a request line too long, say): the
 * door thread keeps a copy open and drains it for up to LINGER_MS, as
 * Apache's lingering close does. Under cmu.
 */
static void
linger_close(struct http_server *srv, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP};
	int unread = 0, dup_fd;

	if (!srv->door_started || srv->nlinger >= LINGER_MAX ||
	    ioctl(fd, FIONREAD, &unread) < 0 || unread == 0)
		return;
	/* The copy shares the socket's flags: it does not block. */
	if ((dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
		return;
	ev.data.u64 = 1ULL << 63 | (uint64_t)dup_fd << 32;
	shutdown(dup_fd, SHUT_WR);
	if (epoll_ctl(srv->door_ep, EPOLL_CTL_ADD, dup_fd, &ev) < 0) {
		close(dup_fd);
		return;
	}
	srv->linger[srv->nlinger].fd = dup_fd;
	srv->linger[srv->nlinger].until = duration_now_ms() + LINGER_MS;
	srv->nlinger++;
}

/* Reads what a lingering connection sends; at its end, closes it soon. */
static void
linger_read(struct http_server *srv, int fd)
{
	char sink[4096];
	ssize_t n;

	while ((n = read(fd, sink, sizeof(sink))) > 0)
		;
	if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
		pthread_mutex_lock(&srv->cmu);
		for (int j = 0; j < srv->nlinger; j++)
			if (srv->linger[j].fd == fd)
				srv->linger[j].until = 0;
		pthread_mutex_unlock(&srv->cmu);
	}
}

/* Closes the lingering connections that are done. Under cmu. */
static void
linger_expire(struct http_server *srv, int64_t now)
{
	for (int j = 0; j < srv->nlinger;) {
		if (srv->linger[j].until > now) {
			j++;
			continue;
		}
		close(srv->linger[j].fd); /* leaves the epoll set with it */
		srv->linger[j] = srv->linger[--srv->nlinger];
	}
}

/* Says, at most once a minute, how many connections the door closed. */
static void
say_counts(struct http_server *srv, int64_t now)
{
	unsigned long refused = atomic_load(&srv->refused);
	unsigned long slow = atomic_load(&srv->timed_out);

	if (refused != (unsigned long)srv->refused_logged &&
	    now - srv->refused_said_at >= 60000) {
		log_info("refused %lu connections: at the limit of %u open "
		         "connections (from the limit on open files; raise "
		         "ulimit -n)",
		    refused - (unsigned long)srv->refused_logged,
		    srv->max_conns);
		srv->refused_logged = (int64_t)refused;
		srv->refused_said_at = now;
	}
	if (slow != (unsigned long)srv->timed_out_logged &&
	    now - srv->timed_out_said_at >= 60000) {
		log_info("closed %lu connections that were idle or too slow to "
		         "send their request",
		    slow - (unsigned long)srv->timed_out_logged);
		srv->timed_out_logged = (int64_t)slow;
		srv->timed_out_said_at = now;
	}
}

/* Closes the connections too slow to send a request. Under cmu. */
static void
sweep(struct http_server *srv, int64_t now)
{
	for (struct conn *c = srv->conns_head; c != NULL; c = c->next) {
		int64_t ready = atomic_load(&c->ready_at);
		int64_t body = atomic_load(&c->body_from);
		int64_t limit;

		if (ready != 0 && now - ready > srv->request_timeout) {
			atomic_store(&c->ready_at, 0);
		} else if (body != 0) {
			limit = srv->request_timeout +
			    atomic_load(&c->body_bytes) / BODY_MIN_RATE * 1000;
			if (now - body <= limit)
				continue;
			atomic_store(&c->body_from, 0);
		} else {
			continue;
		}
		/* libmicrohttpd sees the end of input and closes it. */
		shutdown(c->fd, SHUT_RDWR);
		atomic_fetch_add(&srv->timed_out, 1);
	}
}

static void *
door_main(void *arg)
{
	struct http_server *srv = arg;
	int64_t next_sweep = duration_now_ms() + 1000;

	for (;;) {
		struct epoll_event evs[64];
		int64_t now = duration_now_ms();
		int n = epoll_wait(srv->door_ep, evs, 64,
		    next_sweep > now ? (int)(next_sweep - now) : 0);

		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;
			int fd = (int)(tag >> 32 & 0x7fffffff);
			struct http_req *req = NULL;
			struct conn *c;

			if (tag == 0) /* stop */
				return NULL;
			if (tag >> 63) {
				linger_read(srv, fd);
				continue;
			}
			pthread_mutex_lock(&srv->cmu);
			if ((size_t)fd < srv->nbyfd &&
			    (c = srv->byfd[fd]) != NULL &&
			    c->gen == (uint32_t)tag) {
				c->door = DOOR_FIRED;
				if ((req = c->parked) != NULL) {
					atomic_fetch_add(&req->refs, 1);
					unwatch(c);
				}
			}
			pthread_mutex_unlock(&srv->cmu);
			if (req != NULL) {
				/* Under the service's lock, it answers the
				 * request if it still waits, and forgets it. */
				atomic_fetch_add(&srv->abandoned, 1);
				srv->cfg.gone(req, srv->cfg.arg);
				http_req_unref(req);
			}
		}
		now = duration_now_ms();
		if (now >= next_sweep) {
			pthread_mutex_lock(&srv->cmu);
			sweep(srv, now);
			linger_expire(srv, now);
			pthread_mutex_unlock(&srv->cmu);
			say_counts(srv, now);
			next_sweep = now + 1000;
		}
	}
}

int
http_door_start(struct http_server *srv)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};

	if ((srv->door_ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
		return -1;
	if ((srv->door_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0 ||
	    epoll_ctl(srv->door_ep, EPOLL_CTL_ADD, srv->door_wake, &ev) < 0 ||
	    pthread_create(&srv->door, NULL, door_main, srv) != 0) {
		if (srv->door_wake >= 0)
			close(srv->door_wake);
		close(srv->door_ep);
		return -1;
	}
	srv->door_started = 1;
	return 0;
}

void
http_door_stop(struct http_server *srv)
{
	uint64_t one = 1;

	if (!srv->door_started)
		return;
	if (write(srv->door_wake, &one, sizeof(one)) < 0)
		log_debug("http: cannot wake the door thread: %m");
	pthread_join(srv->door, NULL);
	linger_expire(srv, INT64_MAX);
	close(srv->door_wake);
	close(srv->door_ep);
	srv->door_started = 0;
}

/* At the connection limit a new client is refused at once, not left in
 * the listen queue with no word, and the refusal is counted. */
enum MHD_Result
http_conn_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
	struct http_server *srv = cls;

	(void)addr;
	(void)addrlen;
	if (atomic_load(&srv->conns) >= (long)srv->max_conns) {
		atomic_fetch_add(&srv->refused, 1);
		return MHD_NO;
	}
	return MHD_YES;
}

unsigned
http_conn_limit(const struct http_server_config *cfg)
{
	struct rlimit rl;
	rlim_t n = 1024, reserve = FD_RESERVE + 2 * cfg->threads + LINGER_MAX;

	if (cfg->max_conns > 0)
		return cfg->max_conns;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		n = rl.rlim_cur;
	else if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		n = 1u << 20;
	if (n > 1u << 24)
		n = 1u << 24;
	return n > reserve + 16 ? (unsigned)(n - reserve) : 16;
}

void
http_door_watch(struct http_req *req)
{
	struct conn *cs = req->cs;
	struct http_server *srv = req->srv;

	if (cs != NULL && srv->cfg.gone != NULL && srv->door_started) {
		struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLONESHOT,
		    .data.u64 = (uint64_t)cs->fd << 32 | cs->gen};

		pthread_mutex_lock(&srv->cmu);
		if (cs->door == DOOR_ARMED ||
		    epoll_ctl(srv->door_ep,
		        cs->door == DOOR_NONE ? EPOLL_CTL_ADD : EPOLL_CTL_MOD,
		        cs->fd, &ev) == 0) {
			cs->door = DOOR_ARMED;
			cs->parked = req;
		}
		pthread_mutex_unlock(&srv->cmu);
	}
}

void
http_door_unwatch(struct http_req *req)
{
	struct http_server *srv = req->srv;

	if (req->cs != NULL && srv->cfg.gone != NULL) {
		pthread_mutex_lock(&srv->cmu);
		if (req->cs->parked == req)
			unwatch(req->cs);
		pthread_mutex_unlock(&srv->cmu);
	}
}
