#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "duration.h"
#include "log.h"
#include "session.h"
#include "sigfd.h"

void
session_post(struct evq *q, enum session_ev type, unsigned gen, enum status st,
    int64_t value, const char *fmt, ...)
{
	struct session_event ev = {.type = type,
	    .gen = gen,
	    .st = st,
	    .value = value};
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ev.msg, sizeof(ev.msg), fmt, ap);
	va_end(ap);
	evq_post(q, &ev, sizeof(ev));
}

struct coord_client *
session_client(struct session *s)
{
	char err[256];
	struct coord_client *cc = coord_client_new(s->addr, err, sizeof(err));

	if (cc != NULL) {
		coord_client_set_cancel(cc, cancel_fd(&s->cancel));
		coord_client_set_task_secret(cc, s->a.secret);
	}
	return cc;
}

/*
 * Heartbeats every interval coordd asked for. The task counts as failed
 * when coordd says so, or when coordd cannot be reached for longer than
 * the heartbeat timeout: by then coordd has given up on us too. A
 * coordd that took the heartbeat and does not answer yet is stalled
 * (stopped, starved of CPU), not gone: it does not count silence it
 * could not hear, and the heartbeat waits for its answer, up to
 * HB_PATIENCE timeouts, before the task gives up.
 */
#define HB_PATIENCE 3

static void *
heartbeat_main(void *arg)
{
	struct session *s = arg;
	struct coord_client *cc = session_client(s);
	int64_t last_ok = duration_now_ms();
	char svc[17], a[32];

	while (cc != NULL &&
	    nap(cancel_fd(&s->cancel), s->a.heartbeat_interval_ms) == 0) {
		int64_t now = duration_now_ms();
		int not_reg = 0;
		enum status st;

		st =
		    coord_heartbeat(cc, &s->a, now + s->a.heartbeat_interval_ms,
		        HB_PATIENCE * s->a.heartbeat_timeout_ms, &not_reg, svc);
		if (st == ST_OK) {
			last_ok = duration_now_ms();
			continue;
		}
		if (st == ST_CANCELLED)
			break;
		if (not_reg && strcmp(svc, s->a.service_incarnation) != 0) {
			/* A new coordd: join it as the same incarnation. */
			log_info("coordd restarted; registering %s again",
			    s->a.task);
			if (coord_register(cc, &s->a,
			        now + s->a.heartbeat_interval_ms) == ST_OK) {
				last_ok = duration_now_ms();
				continue;
			}
		} else if (not_reg) {
			session_post(s->q, SESSION_FAILED, s->gen, ST_ABORTED,
			    0,
			    "coordd no longer counts task %s as connected: it "
			    "was declared failed and the cluster moved on",
			    s->a.task);
			break;
		}
		if (st == ST_UNAVAILABLE || st == ST_DEADLINE_EXCEEDED) {
			if (duration_now_ms() - last_ok >
			    s->a.heartbeat_timeout_ms) {
				session_post(s->q, SESSION_FAILED, s->gen,
				    ST_UNAVAILABLE, 0,
				    "coordd unreachable for %s: %s",
				    duration_format(duration_now_ms() - last_ok,
				        a, sizeof(a)),
				    coord_client_error(cc));
				break;
			}
			continue;
		}
		session_post(s->q, SESSION_FAILED, s->gen, st, 0,
		    "coordd refused the heartbeat of %s: %s: %s", s->a.task,
		    status_name(st), coord_client_error(cc));
		break;
	}
	coord_client_free(cc);
	return NULL;
}

/*
 * Waits for every task (unless told not to), then for errors of other
 * tasks, for as long as the session lasts.
 */
static void *
poller_main(void *arg)
{
	struct session *s = arg;
	struct coord_client *cc = session_client(s);
	enum status st;

	if (cc == NULL)
		return NULL;
	if (s->wait_all) {
		st = coord_wait_all(cc, &s->a,
		    duration_now_ms() + s->bringup_ms, NULL, NULL);
		if (st == ST_CANCELLED)
			goto out;
		if (st != ST_OK) {
			session_post(s->q, SESSION_BRINGUP_FAILED, s->gen, st,
			    0, "waiting for all tasks: %s: %s", status_name(st),
			    coord_client_error(cc));
			goto out;
		}
	}
	atomic_store(&s->ready, 1);
	session_post(s->q, SESSION_READY, s->gen, ST_OK, 0, "ready");
	for (;;) {
		json_t *errors = NULL, *e;
		size_t i;

		st = coord_poll_errors(cc, HTTP_NO_DEADLINE, &errors);
		if (st == ST_CANCELLED)
			break;
		if (st != ST_OK) {
			/* Unreachability is the heartbeat thread's to judge. */
			if (nap(cancel_fd(&s->cancel), 200) < 0)
				break;
			continue;
		}
		json_array_foreach(errors, i, e) {
			struct coord_task_error te;
			int own;

			coord_task_error(e, &te);
			own = strcmp(te.task, s->a.task) == 0;
			session_post(s->q, SESSION_FAILED, s->gen,
			    status_from_name(te.code), 0,
			    "%s%s%s failed: %s: %s",
			    own ? "this task (" : "task ", te.task,
			    own ? ")" : "", te.code, te.message);
			json_decref(errors);
			goto out;
		}
		json_decref(errors);
	}
out:
	coord_client_free(cc);
	return NULL;
}

int
session_spawn(struct session *s, void *(*fn)(void *), void *arg)
{
	if (s->nthreads == SESSION_MAX_THREADS ||
	    pthread_create(&s->threads[s->nthreads], NULL, fn, arg) != 0)
		return -1;
	s->nthreads++;
	return 0;
}

/*
 * Tells the command's guard that this process is alive, four times in
 * each of its stall periods: on a thread of its own, as the heartbeat
 * may wait long on a stalled coordd without this process being frozen.
 */
static void *
ticker_main(void *arg)
{
	struct session *s = arg;
	int64_t every = s->a.heartbeat_timeout_ms / 4;

	if (every < 50)
		every = 50;
	do {
		if (s->guard != NULL)
			proc_guard_tick(s->guard);
	} while (nap(cancel_fd(&s->cancel), every) == 0);
	return NULL;
}

int
session_start(struct session *s)
{
	s->nthreads = 0;
	atomic_store(&s->ready, 0);
	if (cancel_open(&s->cancel) < 0)
		return -1;
	if (session_spawn(s, heartbeat_main, s) < 0 ||
	    (s->guard != NULL && session_spawn(s, ticker_main, s) < 0) ||
	    session_spawn(s, poller_main, s) < 0) {
		session_stop(s);
		return -1;
	}
	return 0;
}

void
session_stop(struct session *s)
{
	cancel_fire(&s->cancel);
	for (int i = 0; i < s->nthreads; i++)
		pthread_join(s->threads[i], NULL);
	s->nthreads = 0;
	cancel_close(&s->cancel);
}

enum status
session_interruptible(struct coord_client *cc, int sfd,
    enum status (*call)(struct coord_client *cc, void *arg), void *arg,
    int *sig)
{
	enum status st;

	*sig = 0;
	for (;;) {
		coord_client_set_cancel(cc, sfd);
		st = call(cc, arg);
		coord_client_set_cancel(cc, -1);
		if (st != ST_CANCELLED)
			return st;
		/* A late SIGCHLD is no reason to stop waiting. */
		while ((*sig = sigfd_read(sfd)) == SIGCHLD)
			;
		if (*sig != 0)
			return ST_CANCELLED;
	}
}
