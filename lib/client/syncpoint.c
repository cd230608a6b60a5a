/*
 * syncpoint.c: the C API of the sync page, for training programs. It is
 * also built alone as a shared library (for ctypes, JNI, ...), so it
 * depends on nothing of the library but the page's layout.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "sync_page.h"
#include "syncpoint.h"

struct syncpoint {
	struct sync_page *page;
};

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

static struct syncpoint *
fail(int e, char *err, size_t errlen, const char *fmt, const char *path)
{
	snprintf(err, errlen, fmt, path, strerror(e));
	errno = e;
	return NULL;
}

struct syncpoint *
syncpoint_open(char *err, size_t errlen)
{
	const char *path = getenv(SYNCPOINT_ENV);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char cbuf[CMSG_SPACE(sizeof(int))], reply[8];
	struct iovec iov = {reply, sizeof(reply)};
	struct msghdr msg = {.msg_iov = &iov,
	    .msg_iovlen = 1,
	    .msg_control = cbuf,
	    .msg_controllen = sizeof(cbuf)};
	struct syncpoint *sp;
	struct cmsghdr *cm;
	int fd, pfd = -1, e;
	void *p;

	if (path == NULL || *path == '\0') {
		snprintf(err, errlen,
		    "not running under preemptwatch (%s is not set)",
		    SYNCPOINT_ENV);
		errno = ENOTCONN;
		return NULL;
	}
	if (strlen(path) >= sizeof(sa.sun_path))
		return fail(ENAMETOOLONG, err, errlen, "%s: %s", path);
	strcpy(sa.sun_path, path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return fail(errno, err, errlen, "socket for %s: %s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    write(fd, "PAGE\n", 5) != 5) {
		e = errno;
		close(fd);
		return fail(e, err, errlen,
		    "cannot reach preemptwatch at %s: %s", path);
	}
	if (recvmsg(fd, &msg, MSG_CMSG_CLOEXEC) <= 0) {
		e = errno != 0 ? errno : EPROTO;
		close(fd);
		return fail(e, err, errlen,
		    "no reply from preemptwatch at %s: %s", path);
	}
	close(fd);
	for (cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(&pfd, CMSG_DATA(cm), sizeof(int));
	if (pfd < 0)
		return fail(EPROTO, err, errlen,
		    "preemptwatch at %s sent no page: %s", path);
	p = mmap(NULL, sizeof(struct sync_page), PROT_READ | PROT_WRITE,
	    MAP_SHARED, pfd, 0);
	e = errno;
	close(pfd);
	if (p == MAP_FAILED)
		return fail(e, err, errlen, "cannot map the page from %s: %s",
		    path);
	if ((sp = calloc(1, sizeof(*sp))) == NULL) {
		munmap(p, sizeof(struct sync_page));
		return fail(ENOMEM, err, errlen, "%s: %s", path);
	}
	sp->page = p;
	return sp;
}

void
syncpoint_close(struct syncpoint *sp)
{
	if (sp == NULL)
		return;
	munmap(sp->page, sizeof(*sp->page));
	free(sp);
}

int
syncpoint_reached(struct syncpoint *sp, int64_t step)
{
	struct sync_page *p = sp->page;
	uint32_t st, seq;

	atomic_store(&p->step, step);
	for (;;) {
		seq = atomic_load(&p->seq);
		st = atomic_load(&p->state);
		if (st != SYNC_FROZEN)
			break;
		/* The protocol runs: wait for its answer, as upstream does. */
		sync_page_wait(p, seq, 1000);
	}
	if (st == SYNC_KNOWN && atomic_load(&p->sync_step) <= step) {
		int answer = atomic_load(&p->sync_step) == step ?
		    SYNCPOINT_YES :
		    SYNCPOINT_PAST;
		uint32_t none = 0;

		/* preemptwatch reads what the command was told first. */
		atomic_compare_exchange_strong(&p->reached, &none,
		    (uint32_t)answer);
		return answer;
	}
	return SYNCPOINT_NO;
}

static void
fill_status(const struct sync_page *p, struct syncpoint_status *st)
{
	st->state = (enum sync_state)atomic_load(&p->state);
	st->death_ms = atomic_load(&p->death_ms);
	st->sync_step =
	    st->state == SYNC_KNOWN ? atomic_load(&p->sync_step) : -1;
	st->step = atomic_load(&p->step);
	st->answered = (int)atomic_load(&p->reached);
}

void
syncpoint_status(struct syncpoint *sp, struct syncpoint_status *st)
{
	fill_status(sp->page, st);
}

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
syncpoint_wait_notice(struct syncpoint *sp, int64_t timeout_ms,
    struct syncpoint_status *st)
{
	struct sync_page *p = sp->page;
	int64_t until = now_ms() + timeout_ms;

	for (;;) {
		uint32_t seq = atomic_load(&p->seq);
		int64_t left = until - now_ms();

		fill_status(p, st);
		if (st->state != SYNC_IDLE)
			return 1;
		if (timeout_ms >= 0 && left <= 0)
			return 0;
		sync_page_wait(p, seq,
		    timeout_ms < 0 || left > 1000 ? 1000 : left);
	}
}
