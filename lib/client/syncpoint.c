#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <linux/futex.h>

#include "duration.h"
#include "syncpoint.h"

const char *
syncpoint_state_name(enum sync_state s)
{
	switch (s) {
	case SYNC_NOTICE: return "notice";
	case SYNC_FROZEN: return "syncing";
	case SYNC_KNOWN: return "known";
	case SYNC_FAILED: return "failed";
	default: return "idle";
	}
}

static int
futex_wait(_Atomic uint32_t *addr, uint32_t seen, int64_t timeout_ms)
{
	struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000};

	return (int)syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT, seen,
	    timeout_ms >= 0 ? &ts : NULL, NULL, 0);
}

static void
futex_wake(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void
sync_page_set(struct sync_page *p, enum sync_state st)
{
	atomic_store(&p->state, (uint32_t)st);
	atomic_fetch_add(&p->seq, 1);
	futex_wake(&p->seq);
}

int64_t
sync_page_freeze(struct sync_page *p)
{
	sync_page_set(p, SYNC_FROZEN);
	return atomic_load(&p->step);
}

void
sync_page_reset(struct sync_page *p)
{
	atomic_store(&p->step, -1);
	atomic_store(&p->sync_step, -1);
	atomic_store(&p->death_ms, 0);
	atomic_store(&p->reached, 0);
	sync_page_set(p, SYNC_IDLE);
}

/*
 * The client side: one page per process, mapped on first use.
 */

static struct sync_page *page;
static pthread_mutex_t page_mu = PTHREAD_MUTEX_INITIALIZER;
static char errmsg[256];

const char *
syncpoint_error(void)
{
	return errmsg;
}

static int
fail(int err, const char *fmt, const char *arg)
{
	snprintf(errmsg, sizeof(errmsg), fmt, arg, strerror(err));
	errno = err;
	return -1;
}

/* Connects to preemptwatch, asks for the page, maps it. */
static int
map_page(void)
{
	const char *path = getenv(SYNCPOINT_ENV);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char cbuf[CMSG_SPACE(sizeof(int))], reply[8];
	struct iovec iov = {reply, sizeof(reply)};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
	    .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *cm;
	int fd, pfd = -1;
	void *p;

	if (path == NULL || *path == '\0') {
		snprintf(errmsg, sizeof(errmsg), "not running under "
		    "preemptwatch (%s is not set)", SYNCPOINT_ENV);
		errno = ENOTCONN;
		return -1;
	}
	if (strlen(path) >= sizeof(sa.sun_path))
		return fail(ENAMETOOLONG, "%s: %s", path);
	strcpy(sa.sun_path, path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return fail(errno, "socket for %s: %s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    write(fd, "PAGE\n", 5) != 5) {
		int e = errno;
		close(fd);
		return fail(e, "cannot reach preemptwatch at %s: %s", path);
	}
	if (recvmsg(fd, &msg, MSG_CMSG_CLOEXEC) <= 0) {
		int e = errno != 0 ? errno : EPROTO;
		close(fd);
		return fail(e, "no reply from preemptwatch at %s: %s", path);
	}
	close(fd);
	for (cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(&pfd, CMSG_DATA(cm), sizeof(int));
	if (pfd < 0)
		return fail(EPROTO, "preemptwatch at %s sent no page: %s", path);
	p = mmap(NULL, sizeof(struct sync_page), PROT_READ | PROT_WRITE,
	    MAP_SHARED, pfd, 0);
	close(pfd);
	if (p == MAP_FAILED)
		return fail(errno, "cannot map the page from %s: %s", path);
	page = p;
	return 0;
}

static struct sync_page *
get_page(void)
{
	struct sync_page *p = __atomic_load_n(&page, __ATOMIC_ACQUIRE);

	if (p != NULL)
		return p;
	pthread_mutex_lock(&page_mu);
	if (page == NULL)
		map_page();
	p = page;
	pthread_mutex_unlock(&page_mu);
	return p;
}

int
syncpoint_reached(int64_t step)
{
	struct sync_page *p = get_page();
	uint32_t st, seq;

	if (p == NULL)
		return -1;
	atomic_store(&p->step, step);
	for (;;) {
		seq = atomic_load(&p->seq);
		st = atomic_load(&p->state);
		if (st != SYNC_FROZEN)
			break;
		/* The protocol runs: wait for its answer, as upstream does. */
		futex_wait(&p->seq, seq, 1000);
	}
	if (st == SYNC_KNOWN && atomic_load(&p->sync_step) == step) {
		atomic_store(&p->reached, 1);
		return 1;
	}
	return 0;
}

static void
fill_status(const struct sync_page *p, struct syncpoint_status *st)
{
	st->state = (enum sync_state)atomic_load(&p->state);
	st->death_ms = atomic_load(&p->death_ms);
	st->sync_step = st->state == SYNC_KNOWN ? atomic_load(&p->sync_step) :
	    -1;
	st->step = atomic_load(&p->step);
}

int
syncpoint_status(struct syncpoint_status *st)
{
	struct sync_page *p = get_page();

	if (p == NULL)
		return -1;
	fill_status(p, st);
	return 0;
}

int
syncpoint_wait_notice(int64_t timeout_ms, struct syncpoint_status *st)
{
	struct sync_page *p = get_page();
	int64_t until = duration_now_ms() + timeout_ms;

	if (p == NULL)
		return -1;
	for (;;) {
		uint32_t seq = atomic_load(&p->seq);
		int64_t left = until - duration_now_ms();

		fill_status(p, st);
		if (st->state != SYNC_IDLE)
			return 1;
		if (timeout_ms >= 0 && left <= 0)
			return 0;
		futex_wait(&p->seq, seq, timeout_ms < 0 || left > 1000 ? 1000 :
		    left);
	}
}

/*
 * The serving side.
 */

struct sync_server {
	char dir[64];
	char path[128];
	int lfd;
	int memfd;
	int stop[2];
	struct sync_page *page;
	pthread_t thread;
	int running;
};

struct sync_server *
sync_server_new(char *err, size_t errlen)
{
	struct sync_server *s = calloc(1, sizeof(*s));
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	const char *tmp = getenv("TMPDIR");

	if (s == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->lfd = s->memfd = s->stop[0] = s->stop[1] = -1;
	if (tmp == NULL || *tmp == '\0' || strlen(tmp) > 40)
		tmp = "/tmp";
	snprintf(s->dir, sizeof(s->dir), "%s/muster-sync.XXXXXX", tmp);
	if (mkdtemp(s->dir) == NULL) {
		snprintf(err, errlen, "cannot make a directory for the sync "
		    "socket in %s: %s", tmp, strerror(errno));
		free(s);
		return NULL;
	}
	snprintf(s->path, sizeof(s->path), "%s/sock", s->dir);
	strcpy(sa.sun_path, s->path);
	if ((s->memfd = memfd_create("muster-sync", MFD_CLOEXEC)) < 0 ||
	    ftruncate(s->memfd, sizeof(struct sync_page)) < 0 ||
	    (s->page = mmap(NULL, sizeof(struct sync_page), PROT_READ |
	    PROT_WRITE, MAP_SHARED, s->memfd, 0)) == MAP_FAILED ||
	    (s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(s->lfd, 64) < 0 || pipe2(s->stop, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "cannot set up the sync socket %s: %s",
		    s->path, strerror(errno));
		if (s->page == MAP_FAILED)
			s->page = NULL;
		sync_server_free(s);
		return NULL;
	}
	sync_page_reset(s->page);
	return s;
}

const char *
sync_server_path(const struct sync_server *s)
{
	return s->path;
}

struct sync_page *
sync_server_page(struct sync_server *s)
{
	return s->page;
}

/* One request per connection: "PAGE" gets the page's descriptor. */
static void
serve_one(struct sync_server *s, int fd)
{
	char line[64], cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {"ok\n", 3};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
	    .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *cm;
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	ssize_t n;

	/* A client that connects and says nothing must not stall us. */
	if (poll(&pf, 1, 1000) <= 0 || (n = read(fd, line,
	    sizeof(line) - 1)) <= 0)
		return;
	line[n] = '\0';
	if (strncmp(line, "PAGE", 4) != 0) {
		(void)!write(fd, "error: unknown request\n", 23);
		return;
	}
	memset(cbuf, 0, sizeof(cbuf));
	cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &s->memfd, sizeof(int));
	(void)sendmsg(fd, &msg, MSG_NOSIGNAL);
}

static void *
serve(void *arg)
{
	struct sync_server *s = arg;

	for (;;) {
		struct pollfd pf[2] = {{s->lfd, POLLIN, 0},
		    {s->stop[0], POLLIN, 0}};
		int fd;

		if (poll(pf, 2, -1) < 0 && errno != EINTR)
			break;
		if (pf[1].revents != 0)
			break;
		if (!(pf[0].revents & POLLIN))
			continue;
		if ((fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
			continue;
		serve_one(s, fd);
		close(fd);
	}
	return NULL;
}

int
sync_server_start(struct sync_server *s)
{
	if (pthread_create(&s->thread, NULL, serve, s) != 0)
		return -1;
	s->running = 1;
	return 0;
}

void
sync_server_free(struct sync_server *s)
{
	if (s == NULL)
		return;
	if (s->running) {
		(void)!write(s->stop[1], "x", 1);
		pthread_join(s->thread, NULL);
	}
	if (s->lfd >= 0)
		close(s->lfd);
	unlink(s->path);
	rmdir(s->dir);
	if (s->page != NULL)
		munmap(s->page, sizeof(*s->page));
	if (s->memfd >= 0)
		close(s->memfd);
	if (s->stop[0] >= 0) {
		close(s->stop[0]);
		close(s->stop[1]);
	}
	free(s);
}
