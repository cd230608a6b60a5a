/*
 * coord_reach.c: whether a client's daemon can be reached, asked before a
 * call waits for it, so that a person waiting is told what for.
 *
 * The call itself cannot say: its retries are the HTTP client's, which
 * stay silent. So the connection the call is to use is opened first
 * (http_client_reach), and again until it is made or it is time to say
 * so: the question costs no connection of its own, and is asked only
 * until the daemon has been reached once.
 */
#include <poll.h>
#include <stdio.h>
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
		enum status st = http_client_reach(cc->http,
		    deadline - now < PROBE_MAX_MS ? deadline :
		                                    now + PROBE_MAX_MS,
		    why, sizeof(why));

		if (st == ST_OK) {
			cc->reached = 1;
			return ST_OK;
		}
		now = duration_now_ms();
		if (st == ST_CANCELLED || reach == COORD_REACH_NOW ||
		    now >= deadline) {
			snprintf(cc->err, sizeof(cc->err), "%s", why);
			return st;
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
