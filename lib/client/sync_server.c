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

#include "sync_server.h"

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
		snprintf(err, errlen,
		    "cannot make a directory for the sync socket in %s: %s",
		    tmp, strerror(errno));
		free(s);
		return NULL;
	}
	snprintf(s->path, sizeof(s->path), "%s/sock", s->dir);
	strcpy(sa.sun_path, s->path);
	if ((s->memfd = memfd_create("muster-sync", MFD_CLOEXEC)) < 0 ||
	    ftruncate(s->memfd, sizeof(struct sync_page)) < 0 ||
	    (s->page = mmap(NULL, sizeof(struct sync_page),
	         PROT_READ | PROT_WRITE, MAP_SHARED, s->memfd, 0)) ==
	        MAP_FAILED ||
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
	struct msghdr msg = {.msg_iov = &iov,
	    .msg_iovlen = 1,
	    .msg_control = cbuf,
	    .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *cm;
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	ssize_t n;

	/* A client that connects and says nothing must not stall us. */
	if (poll(&pf, 1, 1000) <= 0 ||
	    (n = read(fd, line, sizeof(line) - 1)) <= 0)
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
