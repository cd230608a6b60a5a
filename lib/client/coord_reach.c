/*
 * coord_reach.c: whether a client's daemon can be reached, asked before a
 * call waits for it, so that a person waiting is told what for.
 *
 * The call itself cannot say: its retries are the HTTP client's, which
 * stay silent. A connection made and closed at once answers the question
 * for the price of one more connect, and only until the daemon has been
 * reached once.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "coord_call.h"
#include "coord_reach.h"
#include "duration.h"
#include "log.h"

/* A stderr that is not a terminal hears of the wait only after this. */
#define SAY_AFTER_MS 3000
/* How often a daemon not reached yet is asked again until then. */
#define PROBE_EVERY_MS 100
/* A connection not accepted within this counts as not answered. */
#define PROBE_MAX_MS 1000

void
coord_reach_set(struct coord_client *cc, enum coord_reach how)
{
	cc->reach = how;
}

/* Whether the address ai accepts a connection by at: 0, or an errno. */
static int
knock(const struct addrinfo *ai, int64_t at)
{
	int fd = socket(ai->ai_family,
	    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
	struct pollfd pfd = {.fd = fd, .events = POLLOUT};
	int64_t left = at - duration_now_ms();
	socklen_t sl = sizeof(int);
	int why = 0;

	if (fd < 0)
		return errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		if (errno != EINPROGRESS)
			why = errno;
		else if (poll(&pfd, 1, left > 0 ? (int)left : 0) <= 0)
			why = ETIMEDOUT;
		else
			getsockopt(fd, SOL_SOCKET, SO_ERROR, &why, &sl);
	}
	close(fd);
	return why;
}

/*
 * Whether one of the addresses addr ("HOST:PORT" or "[V6]:PORT", as
 * http_client_addr writes it) names accepts a connection by at: 0, or -1
 * with the reason in why, worded as the HTTP client words it.
 */
static int
probe(const char *addr, int64_t at, char *why, size_t len)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
	    .ai_flags = AI_ADDRCONFIG};
	struct addrinfo *res, *ai;
	const char *colon = strrchr(addr, ':');
	int v6 = addr[0] == '[', rc, last = ECONNREFUSED;
	char host[256];

	snprintf(host, sizeof(host), "%.*s", (int)(colon - addr) - 2 * v6,
	    addr + v6);
	if ((rc = getaddrinfo(host, colon + 1, &hints, &res)) != 0) {
		snprintf(why, len, "cannot resolve %s: %s", host,
		    gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai != NULL && last != 0; ai = ai->ai_next)
		last = knock(ai, at);
	freeaddrinfo(res);
	if (last == 0)
		return 0;
	snprintf(why, len, "cannot reach %s: %s", addr, strerror(last));
	return -1;
}

/* Sleeps until at, or until fd (when not -1) is readable: -1 then. */
static int
pause_until(int fd, int64_t at)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	int64_t left = at - duration_now_ms();

	if (left <= 0)
		return 0;
	return poll(&pfd, 1, (int)left) > 0 ? -1 : 0;
}

enum status
coord_reach_wait(struct coord_client *cc, int how, int64_t deadline)
{
	const char *addr = http_client_addr(cc->http);
	int reach = cc->reach;
	int64_t say_at;
	char why[512];

	if (reach == COORD_REACH_QUIET && (how & CALL_SAY) != 0)
		reach = COORD_REACH_SAY;
	if (reach == COORD_REACH_QUIET || cc->reached)
		return ST_OK;
	say_at = duration_now_ms() + (isatty(STDERR_FILENO) ? 0 : SAY_AFTER_MS);
	for (;;) {
		int64_t now = duration_now_ms(), next;

		if (probe(addr,
		        deadline - now < PROBE_MAX_MS ? deadline :
		                                        now + PROBE_MAX_MS,
		        why, sizeof(why)) == 0) {
			cc->reached = 1;
			return ST_OK;
		}
		now = duration_now_ms();
		if (reach == COORD_REACH_NOW || now >= deadline) {
			snprintf(cc->err, sizeof(cc->err), "%s", why);
			return ST_UNAVAILABLE;
		}
		if (now >= say_at) {
			char left[32];

			if (deadline == HTTP_NO_DEADLINE)
				log_info("waiting for %s (%s)", cc->peer, why);
			else
				log_info("waiting up to %s for %s (%s)",
				    duration_format((deadline - now + 500) /
				            1000 * 1000,
				        left, sizeof(left)),
				    cc->peer, why);
			/* The call's own retries wait on, in silence. */
			cc->reached = 1;
			return ST_OK;
		}
		next = now + PROBE_EVERY_MS;
		if (next > say_at)
			next = say_at;
		if (next > deadline)
			next = deadline;
		if (pause_until(cc->cancel_fd, next) < 0) {
			snprintf(cc->err, sizeof(cc->err), "cancelled");
			return ST_CANCELLED;
		}
	}
}
