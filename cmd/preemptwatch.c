/*
 * preemptwatch: the agent of one task. Registers it with coordd, keeps it
 * alive with heartbeats, waits for the whole cluster, runs the training
 * command, stops it when another task fails and reports its own failure.
 * It also watches for preemption notices, runs the sync protocol that picks
 * the step every task checkpoints at, answers syncpoint, and exits with the
 * restart code (or restarts the command itself) afterwards.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "parse.h"
#include "agent.h"
#include "coord_client.h"
#include "duration.h"
#include "log.h"
#include "notice.h"
#include "preempt.h"
#include "sync_server.h"
#include "task.h"
#include "wallclock.h"

/* Exit code: the command was stopped because the cluster failed. */
#define EXIT_PEER_FAILED 43
#define MAX_NOTICES 8

static const char synopsis[] =
    "usage: preemptwatch [-v] [-c ADDR] [-t TASK] [--no-wait-all] "
    "[--grace DUR] [--timeout DUR]\n"
    "                    [--notice SOURCE]... [--notice-grace DUR] "
    "[--notice-interval DUR]\n"
    "                    [--metadata-url URL] [--protocol-window DUR]\n"
    "                    [--sync-barrier-timeout DUR] "
    "[--restart-exit-code N]\n"
    "                    [--max-restarts N] -- COMMAND [ARG...]\n";

struct opts {
	const char *addr;
	const char *task;
	int wait_all;
	int64_t grace;
	int64_t bringup;
	struct notice_source notices[MAX_NOTICES];
	size_t nnotices;
	int64_t notice_grace;
	int64_t notice_interval;
	int64_t window;
	int64_t barrier_timeout;
	int restart_code;
	long max_restarts;
	char **cmd;
};

enum ev_type {
	EV_READY,               /* every task is there: start the command */
	EV_FAILED,              /* the cluster failed: stop the command */
	EV_BRINGUP_FAILED,      /* the cluster never came together */
	EV_NOTICE,              /* a notice from one of our own sources */
	EV_DEATH,               /* the cluster's notice: the death time */
	EV_SYNCED,              /* the protocol ended (st says how) */
};

/* What the threads tell the main loop, one write() each. */
struct event {
	enum ev_type type;
	unsigned gen;
	enum status st;
	int64_t value;          /* a death time, or the sync step */
	char msg[1800];
};

struct pw {
	struct opts o;
	int evpipe[2];
	struct sync_page *page;
};

/* One run of the command: one incarnation, its threads, their cancel. */
struct run {
	struct pw *pw;
	struct coord_agent a;
	unsigned gen;
	atomic_int ready;               /* every task is there */
	int guard;                      /* pipe to the command's guard */
	int cancel[2];
	pthread_t threads[3];
	int nthreads;
};

static void
post(struct pw *pw, enum ev_type type, unsigned gen, enum status st,
    int64_t value, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void
post(struct pw *pw, enum ev_type type, unsigned gen, enum status st,
    int64_t value, const char *fmt, ...)
{
	struct event ev = {.type = type, .gen = gen, .st = st, .value = value};
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ev.msg, sizeof(ev.msg), fmt, ap);
	va_end(ap);
	/* Smaller than PIPE_BUF: one atomic write. */
	while (write(pw->evpipe[1], &ev, sizeof(ev)) < 0 && errno == EINTR)
		;
}

/* Sleeps ms, or less when fd (a cancel pipe, -1 none) becomes readable:
 * then returns -1. */
static int
nap(int fd, int64_t ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	if (ms < 0)
		ms = 0;
	while (poll(&p, 1, ms > 1000000000 ? 1000000000 : (int)ms) < 0)
		if (errno != EINTR)
			break;
	return (p.revents & (POLLIN | POLLHUP)) != 0 ? -1 : 0;
}

static struct coord_client *
run_client(struct run *r)
{
	char err[256];
	struct coord_client *cc = coord_client_new(r->pw->o.addr, err,
	    sizeof(err));

	if (cc != NULL)
		coord_client_set_cancel(cc, r->cancel[0]);
	return cc;
}

/*
 * Heartbeats every interval coordd asked for. The task counts as failed
 * when coordd says so, or when coordd cannot be reached for longer than
 * the heartbeat timeout: by then coordd has given up on us too.
 */
static void *
heartbeat_main(void *arg)
{
	struct run *r = arg;
	struct pw *pw = r->pw;
	struct coord_client *cc = run_client(r);
	int64_t last_ok = duration_now_ms();
	char svc[17], a[32];

	while (cc != NULL && nap(r->cancel[0], r->a.heartbeat_interval_ms) == 0) {
		int64_t now = duration_now_ms();
		int not_reg = 0;
		enum status st = coord_heartbeat(cc, &r->a, now +
		    r->a.heartbeat_interval_ms, &not_reg, svc);

		if (st == ST_OK) {
			last_ok = duration_now_ms();
			continue;
		}
		if (st == ST_CANCELLED)
			break;
		if (not_reg && strcmp(svc, r->a.service_incarnation) != 0) {
			/* A new coordd: join it as the same incarnation. */
			log_info("coordd restarted; registering %s again",
			    r->a.task);
			if (coord_register(cc, &r->a, now +
			    r->a.heartbeat_interval_ms) == ST_OK) {
				last_ok = duration_now_ms();
				continue;
			}
		} else if (not_reg) {
			post(pw, EV_FAILED, r->gen, ST_ABORTED, 0, "coordd no "
			    "longer counts task %s as connected: it was declared "
			    "failed and the cluster moved on", r->a.task);
			break;
		}
		if (st == ST_UNAVAILABLE || st == ST_DEADLINE_EXCEEDED) {
			if (duration_now_ms() - last_ok >
			    r->a.heartbeat_timeout_ms) {
				post(pw, EV_FAILED, r->gen, ST_UNAVAILABLE, 0,
				    "coordd unreachable for %s: %s",
				    duration_format(duration_now_ms() - last_ok,
				    a, sizeof(a)), coord_client_error(cc));
				break;
			}
			continue;
		}
		post(pw, EV_FAILED, r->gen, st, 0, "coordd refused the "
		    "heartbeat of %s: %s: %s", r->a.task, status_name(st),
		    coord_client_error(cc));
		break;
	}
	coord_client_free(cc);
	return NULL;
}

/*
 * Waits for every task (unless told not to), then for errors of other
 * tasks, for as long as the run lasts.
 */
static void *
poller_main(void *arg)
{
	struct run *r = arg;
	struct pw *pw = r->pw;
	struct coord_client *cc = run_client(r);
	enum status st;

	if (cc == NULL)
		return NULL;
	if (pw->o.wait_all) {
		st = coord_wait_all(cc, &r->a, duration_now_ms() +
		    pw->o.bringup, NULL, NULL);
		if (st == ST_CANCELLED)
			goto out;
		if (st != ST_OK) {
			post(pw, EV_BRINGUP_FAILED, r->gen, st, 0, "waiting for "
			    "all tasks: %s: %s", status_name(st), coord_client_error(cc));
			goto out;
		}
	}
	atomic_store(&r->ready, 1);
	post(pw, EV_READY, r->gen, ST_OK, 0, "ready");
	for (;;) {
		json_t *errors = NULL, *e;
		size_t i;

		st = coord_poll_errors(cc, HTTP_NO_DEADLINE, &errors);
		if (st == ST_CANCELLED)
			break;
		if (st != ST_OK) {
			/* Unreachability is the heartbeat thread's to judge. */
			if (nap(r->cancel[0], 200) < 0)
				break;
			continue;
		}
		json_array_foreach(errors, i, e) {
			const char *task = json_string_value(json_object_get(e,
			    "task"));
			const char *code = json_string_value(json_object_get(e,
			    "code"));
			const char *msg = json_string_value(json_object_get(e,
			    "message"));
			int own = task != NULL && strcmp(task, r->a.task) == 0;

			post(pw, EV_FAILED, r->gen, status_from_name(code), 0,
			    "%s%s%s failed: %s: %s", own ? "this task (" : "task ",
			    task != NULL ? task : "?", own ? ")" : "",
			    code != NULL ? code : "?", msg != NULL ? msg : "");
			json_decref(errors);
			goto out;
		}
		json_decref(errors);
	}
out:
	coord_client_free(cc);
	return NULL;
}

/*
 * Waits for the cluster's preemption notice, then runs the sync protocol
 * once the death time is within the protocol window.
 */
static void *
watcher_main(void *arg)
{
	struct run *r = arg;
	struct pw *pw = r->pw;
	struct coord_client *cc = run_client(r);
	struct buf val = {0};
	int64_t death = 0, sync_step = -1, start;
	char when[48], d[32];
	enum status st;

	if (cc == NULL)
		return NULL;
	for (;;) {
		st = coord_kv_get(cc, PREEMPT_NOTICE_KEY, 1, HTTP_NO_DEADLINE,
		    &val, NULL);
		if (st == ST_OK || st == ST_CANCELLED)
			break;
		if (nap(r->cancel[0], 1000) < 0) {
			st = ST_CANCELLED;
			break;
		}
	}
	if (st == ST_CANCELLED)
		goto out;
	if (wall_parse_rfc3339(val.data != NULL ? val.data : "", &death) < 0) {
		log_info("preemption notice %s is not an RFC 3339 time; taking "
		    "the death time as now + %s", val.data, duration_format(
		    pw->o.notice_grace, d, sizeof(d)));
		death = wall_now_ms() + pw->o.notice_grace;
	}
	atomic_store(&pw->page->death_ms, death);
	sync_page_set(pw->page, SYNC_NOTICE);
	post(pw, EV_DEATH, r->gen, ST_OK, death, "death time %s",
	    wall_format(death, when, sizeof(when)));
	/* Not too early: only within the window before the death time. */
	start = death - pw->o.window;
	if (start > wall_now_ms())
		log_info("the sync protocol starts in %s, %s before the death "
		    "time", duration_format(start - wall_now_ms(), d, sizeof(d)),
		    duration_format(pw->o.window, when, sizeof(when)));
	/* Nor before every task is there: the barrier is everyone's. */
	while (start > wall_now_ms() || !atomic_load(&r->ready)) {
		int64_t left = start - wall_now_ms();
		if (nap(r->cancel[0], !atomic_load(&r->ready) ? 100 :
		    left < 60000 ? left : 60000) < 0)
			goto out;
	}
	st = preempt_sync(cc, &r->a, pw->page, pw->o.barrier_timeout,
	    &sync_step);
	if (st != ST_CANCELLED)
		post(pw, EV_SYNCED, r->gen, st, sync_step, "%s", st == ST_OK ?
		    "synced" : coord_client_error(cc));
out:
	buf_free(&val);
	coord_client_free(cc);
	return NULL;
}

/* Polls the file and cloud notice sources, for the life of the process. */
static void *
notices_main(void *arg)
{
	struct pw *pw = arg;
	char last[MAX_NOTICES][256] = {{0}};

	for (;;) {
		for (size_t i = 0; i < pw->o.nnotices; i++) {
			struct notice_source *src = &pw->o.notices[i];
			char err[256] = "", when[48];
			int64_t death = 0;
			int r;

			if (src->kind == NOTICE_SIGNAL)
				continue;
			r = notice_check(src, pw->o.notice_grace, &death, err,
			    sizeof(err));
			if (r == 1) {
				post(pw, EV_NOTICE, 0, ST_OK, death, "%s: death "
				    "at %s", src->spec, wall_format(death, when,
				    sizeof(when)));
			} else if (r < 0 && strcmp(err, last[i]) != 0) {
				/* Logged once per distinct error, and retried. */
				log_info("notice source %s: %s", src->spec, err);
			}
			snprintf(last[i], sizeof(last[i]), "%s", r < 0 ? err :
			    "");
		}
		nap(-1, pw->o.notice_interval);
	}
	return NULL;
}

static void start_guard(struct run *r, pid_t group);

extern char **environ;

/*
 * The command's environment: ours, with the task's variables set. Built
 * here rather than with setenv(), which other threads could race.
 */
static char **
command_env(struct run *r)
{
	static const char *names[] = {"MUSTER_COORD=", "MUSTER_TASK=",
	    "MUSTER_INCARNATION="};
	size_t n = 0, k = 0;
	char **env, inc[17];

	while (environ[n] != NULL)
		n++;
	if ((env = calloc(n + 4, sizeof(*env))) == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		int ours = 0;
		for (size_t j = 0; j < 3; j++)
			ours |= strncmp(environ[i], names[j],
			    strlen(names[j])) == 0;
		if (!ours)
			env[k++] = environ[i];
	}
	if (asprintf(&env[k++], "MUSTER_COORD=%s", r->pw->o.addr) < 0 ||
	    asprintf(&env[k++], "MUSTER_TASK=%s", r->a.task) < 0 ||
	    asprintf(&env[k++], "MUSTER_INCARNATION=%s",
	    task_format_incarnation(r->a.incarnation, inc)) < 0) {
		free(env);
		return NULL;
	}
	env[k] = NULL;
	return env;
}

static pid_t
start_command(struct run *r, const sigset_t *blocked)
{
	char **env = command_env(r);
	pid_t pid, parent = getpid();

	if (env == NULL)
		return -1;
	pid = fork();
	if (pid == 0) {
		/* Its own process group, so signals reach all it starts. */
		setpgid(0, 0);
		/* If preemptwatch is killed outright, the command must not
		 * train on alone: the cluster already counts it as failed. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)        /* it died before prctl */
			_exit(EXIT_PEER_FAILED);
		signal(SIGPIPE, SIG_DFL);
		sigprocmask(SIG_UNBLOCK, blocked, NULL);
		execvpe(r->pw->o.cmd[0], r->pw->o.cmd, env);
		/* Only async-signal-safe calls after fork in a threaded
		 * process: no stdio. */
		{
			int e = errno;
			const char *m = strerror(e);
			(void)!write(2, "preemptwatch: cannot run ", 25);
			(void)!write(2, r->pw->o.cmd[0], strlen(r->pw->o.cmd[0]));
			(void)!write(2, ": ", 2);
			(void)!write(2, m, strlen(m));
			(void)!write(2, "\n", 1);
			_exit(e == ENOENT ? 127 : 126);
		}
	}
	if (pid > 0) {
		setpgid(pid, pid);
		start_guard(r, pid);
	}
	for (size_t i = 0; env[i] != NULL; i++)
		if (strncmp(env[i], "MUSTER_COORD=", 13) == 0 ||
		    strncmp(env[i], "MUSTER_TASK=", 12) == 0 ||
		    strncmp(env[i], "MUSTER_INCARNATION=", 19) == 0)
			free(env[i]);
	free(env);
	return pid;
}

/*
 * A guard outlives preemptwatch: it waits on a pipe that only preemptwatch
 * holds. When the command's leader has ended (a word on the pipe), or
 * preemptwatch dies outright (kill -9, the pipe closes), it stops what is
 * left of the command's process group: SIGTERM, then SIGKILL after the
 * grace period. Neither the parent-death signal nor a reaped leader would
 * reach the rest of the group.
 */
static void
start_guard(struct run *r, pid_t group)
{
	int fds[2];
	pid_t mid;

	r->guard = -1;
	if (pipe2(fds, O_CLOEXEC) < 0)
		return;
	if ((mid = fork()) == 0) {
		char c;

		if (fork() != 0)
			_exit(0);       /* the guard goes on, under init */
		setsid();
		signal(SIGINT, SIG_IGN);
		signal(SIGTERM, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		dup2(fds[0], 0);
		close_range(1, ~0U, 0);
		ssize_t n;

		while ((n = read(0, &c, 1)) < 0 && errno == EINTR)
			;
		if (kill(-group, SIGTERM) == 0) {
			/* Until the group is gone, or the grace is over. */
			struct timespec tick = {0, 100 * 1000000};
			int64_t until = duration_now_ms() + r->pw->o.grace;

			while (duration_now_ms() < until && kill(-group, 0) == 0)
				nanosleep(&tick, NULL);
			kill(-group, SIGKILL);
		}
		_exit(0);
	}
	close(fds[0]);
	if (mid > 0) {
		waitpid(mid, NULL, 0);
		r->guard = fds[1];
	} else {
		close(fds[1]);
	}
}

/* The command's leader has ended: the guard stops the rest of it. */
static void
dismiss_guard(struct run *r)
{
	if (r->guard >= 0) {
		(void)!write(r->guard, "x", 1);
		close(r->guard);
		r->guard = -1;
	}
}

/*
 * Reaps every child that has ended (as process 1 of a container, orphans
 * are ours to reap too) and says whether the command is among them.
 */
static int
reap(pid_t child, int *status)
{
	int found = 0, st;
	pid_t pid;

	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		if (pid == child && child > 0) {
			*status = st;
			found = 1;
		}
	}
	return found;
}

/* Tells coordd this task leaves; failures here change nothing. */
static void
leave(struct coord_client *cc, const struct coord_agent *a, int barrier)
{
	enum status st = coord_shutdown_task(cc, a, barrier,
	    duration_now_ms() + (barrier ? 3600000 : 3000));

	if (st != ST_OK && st != ST_FAILED_PRECONDITION)
		log_info("leaving the cluster: %s: %s", status_name(st),
		    coord_client_error(cc));
}

static void
stop_run(struct run *r)
{
	(void)!write(r->cancel[1], "x", 1);
	for (int i = 0; i < r->nthreads; i++)
		pthread_join(r->threads[i], NULL);
	close(r->cancel[0]);
	close(r->cancel[1]);
	r->nthreads = 0;
}

static int
start_run(struct run *r)
{
	void *(*mains[3])(void *) = {heartbeat_main, poller_main, watcher_main};

	if (pipe2(r->cancel, O_CLOEXEC) < 0)
		return -1;
	for (int i = 0; i < 3; i++) {
		if (pthread_create(&r->threads[i], NULL, mains[i], r) != 0) {
			stop_run(r);
			return -1;
		}
		r->nthreads++;
	}
	return 0;
}

/* Publishes this task's own notice: the first in the cluster wins. */
static void
own_notice(struct coord_client *cc, int64_t death, const char *from)
{
	char when[48];
	enum status st = preempt_publish(cc, &death, duration_now_ms() + 5000);

	if (st == ST_OK)
		log_info("preemption notice (%s): death at %s", from,
		    wall_format(death, when, sizeof(when)));
	else
		log_info("could not publish the preemption notice (%s): %s: %s",
		    from, status_name(st), coord_client_error(cc));
}

static int interrupted(int sfd, const char *what);

struct outcome {
	int code;
	int restartable;
};

/*
 * One run: waits for the cluster, runs the command, and follows it to its
 * end, whatever ends it.
 */
static struct outcome
run_loop(struct run *r, struct coord_client *cc, int sfd,
    const sigset_t *blocked, const int *notice_sig)
{
	struct pw *pw = r->pw;
	struct outcome out = {status_exit(ST_INTERNAL), 0};
	int64_t stop_at = 0, kill_at = 0;
	int stopping = 0, noticed = 0, own_sent = 0;
	pid_t child = 0;
	char reason[2000] = "", err[512], d[32];

	for (;;) {
		struct pollfd pfd[2] = {{sfd, POLLIN, 0},
		    {pw->evpipe[0], POLLIN, 0}};
		int64_t now = duration_now_ms(), next = 0;
		int timeout = -1;

		if (stop_at != 0)
			next = stop_at;
		if (kill_at != 0 && (next == 0 || kill_at < next))
			next = kill_at;
		if (next != 0)
			timeout = next > now ? (int)(next - now) : 0;
		if (poll(pfd, 2, timeout) < 0 && errno != EINTR)
			break;
		now = duration_now_ms();
		if (stop_at != 0 && now >= stop_at) {
			stop_at = 0;
			if (child > 0) {
				log_info("the death time is %s away: stopping the "
				    "command", duration_format(pw->o.grace, d,
				    sizeof(d)));
				kill(-child, SIGTERM);
				kill_at = now + pw->o.grace;
			}
		}
		if (kill_at != 0 && now >= kill_at) {
			kill_at = 0;
			if (child > 0) {
				log_info("the command is still running after "
				    "the grace period: SIGKILL");
				kill(-child, SIGKILL);
			}
		}
		if (pfd[1].revents & POLLIN) {
			struct event ev;

			if (read(pw->evpipe[0], &ev, sizeof(ev)) != sizeof(ev))
				continue;
			if (ev.type == EV_NOTICE) {
				own_notice(cc, ev.value, ev.msg);
				own_sent = 1;
				continue;
			}
			if (ev.gen != r->gen)
				continue;       /* from an earlier run */
			switch (ev.type) {
			case EV_READY:
				if (stopping || child > 0)
					break;
				if ((child = start_command(r, blocked)) < 0) {
					out.code = cli_fail(ST_INTERNAL, "fork: %s",
					    strerror(errno));
					return out;
				}
				log_debug("started %s (pid %ld)", pw->o.cmd[0],
				    (long)child);
				break;
			case EV_BRINGUP_FAILED:
				fprintf(stderr, "%s: %s\n", log_prog(), ev.msg);
				out.code = ev.st == ST_INTERNAL ?
				    EXIT_PEER_FAILED : status_exit(ev.st);
				out.restartable = ev.st == ST_INTERNAL;
				leave(cc, &r->a, 0);
				return out;
			case EV_FAILED:
				if (stopping)
					break;
				stopping = 1;
				snprintf(reason, sizeof(reason), "%s", ev.msg);
				fprintf(stderr, "%s: %s; stopping the command of "
				    "%s\n", log_prog(), ev.msg, r->a.task);
				if (child <= 0) {
					out.code = EXIT_PEER_FAILED;
					out.restartable = 1;
					leave(cc, &r->a, 0);
					return out;
				}
				kill(-child, SIGTERM);
				kill_at = now + pw->o.grace;
				break;
			case EV_DEATH:
				noticed = 1;
				/* SIGTERM a grace period before the death time,
				 * SIGKILL at it, if the command is still up. */
				stop_at = now + (ev.value - pw->o.grace -
				    wall_now_ms());
				if (stop_at <= 0)
					stop_at = 1;
				log_info("preemption notice for the cluster: "
				    "%s", ev.msg);
				break;
			case EV_SYNCED:
				if (ev.st != ST_OK)
					log_info("preemption sync failed: %s; the "
					    "command will be stopped before the "
					    "death time", ev.msg);
				break;
			default:
				break;
			}
		}
		if (pfd[0].revents & POLLIN) {
			struct signalfd_siginfo si;
			int status, sig;

			if (read(sfd, &si, sizeof(si)) != sizeof(si))
				continue;
			sig = (int)si.ssi_signo;
			if (sig != SIGCHLD) {
				if (notice_sig[sig] && !own_sent) {
					char from[32];
					snprintf(from, sizeof(from), "SIG%s",
					    sigabbrev_np(sig));
					own_notice(cc, wall_now_ms() +
					    pw->o.notice_grace, from);
					own_sent = 1;
					continue;
				}
				if (child > 0) {
					kill(-child, sig);
					continue;
				}
				/* Nothing started yet: just leave. */
				leave(cc, &r->a, 0);
				out.code = 128 + sig;
				return out;
			}
			if (!reap(child, &status))
				continue;
			child = 0;
			dismiss_guard(r);
			/* A failure trumps a notice: no sync point was
			 * kept, the command was stopped. */
			if (stopping) {
				fprintf(stderr, "%s: stopped because %s\n",
				    log_prog(), reason);
				leave(cc, &r->a, 0);
				out.code = EXIT_PEER_FAILED;
				out.restartable = 1;
				return out;
			}
			/*
			 * After a notice every exit is a preemption exit, 0
			 * included: a command may well save on the notice
			 * alone and leave. Asking for a restart is the safe
			 * side; a job that had finished finds so at once.
			 */
			if (noticed || own_sent) {
				/* Preempted: checkpointed (or stopped); the
				 * scheduler, or we, bring the task back. */
				log_info("the command exited after a preemption "
				    "notice%s; exiting with the restart code %d",
				    atomic_load(&pw->page->reached) ? " at the "
				    "sync point" : "", pw->o.restart_code);
				leave(cc, &r->a, 0);
				out.code = pw->o.restart_code;
				out.restartable = 1;
				return out;
			}
			if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
				/* Done: leave together, through the shutdown
				 * barrier when coordd has one; a signal while
				 * waiting there leaves at once. */
				int64_t until = duration_now_ms() + 3600000;
				enum status st;
				int rc = 0;

				do {
					coord_client_set_cancel(cc, sfd);
					st = coord_shutdown_task(cc, &r->a, 1,
					    until);
					coord_client_set_cancel(cc, -1);
				} while (st == ST_CANCELLED && (rc = interrupted(
				    sfd, "waiting at the shutdown barrier")) == 0);
				out.code = 0;
				if (st == ST_CANCELLED) {
					leave(cc, &r->a, 0);
					out.code = rc;
				} else if (st != ST_OK &&
				    st != ST_FAILED_PRECONDITION) {
					log_info("leaving the cluster: %s: %s",
					    status_name(st), coord_client_error(cc));
				}
				return out;
			}
			if (WIFEXITED(status)) {
				snprintf(err, sizeof(err), "command %s exited "
				    "with status %d", pw->o.cmd[0],
				    WEXITSTATUS(status));
				out.code = WEXITSTATUS(status);
			} else {
				const char *name = sigabbrev_np(WTERMSIG(status));
				snprintf(err, sizeof(err), "command %s killed by "
				    "SIG%s", pw->o.cmd[0], name != NULL ? name :
				    "?");
				out.code = 128 + WTERMSIG(status);
			}
			log_info("%s; reporting the error of %s", err, r->a.task);
			if (coord_report_error(cc, &r->a, ST_INTERNAL, err,
			    duration_now_ms() + 5000) != ST_OK)
				log_info("could not report the error: %s",
				    coord_client_error(cc));
			leave(cc, &r->a, 0);
			out.restartable = 1;
			return out;
		}
	}
	return out;
}

/*
 * The signal that cut a wait short while no command ran, or 0 when it was
 * only a late SIGCHLD. Exiting on it is what a shell would do.
 */
static int
interrupted(int sfd, const char *what)
{
	struct signalfd_siginfo si;

	while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo != SIGCHLD) {
			log_info("SIG%s while %s: exiting",
			    sigabbrev_np((int)si.ssi_signo), what);
			return 128 + (int)si.ssi_signo;
		}
	}
	return 0;
}

/*
 * Waits until every task has left run epoch, so that the next run starts
 * clean. 0, or the exit code to leave with.
 */
static int
wait_next_run(struct coord_client *cc, int sfd, long epoch, int64_t deadline)
{
	enum status st;
	long now_epoch;
	int rc = 0;

	do {
		coord_client_set_cancel(cc, sfd);
		st = coord_wait_epoch(cc, epoch, deadline, &now_epoch);
		coord_client_set_cancel(cc, -1);
	} while (st == ST_CANCELLED && (rc = interrupted(sfd,
	    "waiting for the job to wind down")) == 0);
	if (st == ST_CANCELLED)
		return rc;
	if (st != ST_OK)
		return cli_fail(st, "waiting for the job to wind down: %s",
		    coord_client_error(cc));
	return 0;
}

static int
parse_count(const char *flag, const char *arg, long min, long max, long *v)
{
	if (parse_long(arg, min, max, v) < 0)
		return cli_usage_error(synopsis, "%s %s is not a number from %ld "
		    "to %ld", flag, arg, min, max);
	return 0;
}

static int
parse_dur(const char *flag, const char *arg, int64_t min, int64_t *ms)
{
	if (duration_parse(arg, ms) < 0 || *ms < min)
		return cli_usage_error(synopsis, "%s %s is not a duration%s",
		    flag, arg, min > 0 ? " above zero" : "");
	return 0;
}

static int
parse_args(int argc, char **argv, struct opts *o, int *verbose)
{
	static const struct option longopts[] = {
		{"no-wait-all", no_argument, NULL, 'W'},
		{"grace", required_argument, NULL, 'g'},
		{"timeout", required_argument, NULL, 'T'},
		{"notice", required_argument, NULL, 'N'},
		{"notice-grace", required_argument, NULL, 'G'},
		{"notice-interval", required_argument, NULL, 'I'},
		{"metadata-url", required_argument, NULL, 'M'},
		{"protocol-window", required_argument, NULL, 'P'},
		{"sync-barrier-timeout", required_argument, NULL, 'B'},
		{"restart-exit-code", required_argument, NULL, 'R'},
		{"max-restarts", required_argument, NULL, 'X'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	const char *specs[MAX_NOTICES], *meta = NULL;
	size_t nspecs = 0;
	char err[256];
	long v;
	int c;

	while ((c = getopt_long(argc, argv, "+c:ht:v", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': o->addr = optarg; break;
		case 't': o->task = optarg; break;
		case 'v': (*verbose)++; break;
		case 'W': o->wait_all = 0; break;
		case 'g':
			if (parse_dur("--grace", optarg, 0, &o->grace) != 0)
				return 2;
			break;
		case 'T':
			if (parse_dur("--timeout", optarg, 1, &o->bringup) != 0)
				return 2;
			break;
		case 'N':
			if (nspecs == MAX_NOTICES)
				return cli_usage_error(synopsis, "at most %d "
				    "--notice sources", MAX_NOTICES);
			specs[nspecs++] = optarg;
			break;
		case 'G':
			if (parse_dur("--notice-grace", optarg, 0,
			    &o->notice_grace) != 0)
				return 2;
			break;
		case 'I':
			if (parse_dur("--notice-interval", optarg, 1,
			    &o->notice_interval) != 0)
				return 2;
			break;
		case 'M':
			meta = optarg;
			if (strncmp(meta, "http://", 7) != 0 || meta[7] == '\0' ||
			    meta[7] == '/')
				return cli_usage_error(synopsis, "--metadata-url %s "
				    "is not http://HOST[:PORT][/PATH]", meta);
			break;
		case 'P':
			if (parse_dur("--protocol-window", optarg, 0,
			    &o->window) != 0)
				return 2;
			break;
		case 'B':
			if (parse_dur("--sync-barrier-timeout", optarg, 1,
			    &o->barrier_timeout) != 0)
				return 2;
			break;
		case 'R':
			if (parse_count("--restart-exit-code", optarg, 1, 255,
			    &v) != 0)
				return 2;
			if (v == EXIT_PEER_FAILED)
				return cli_usage_error(synopsis, "--restart-exit-"
				    "code %d is the code for a failed peer",
				    EXIT_PEER_FAILED);
			o->restart_code = (int)v;
			break;
		case 'X':
			if (parse_count("--max-restarts", optarg, 0, 1000000,
			    &o->max_restarts) != 0)
				return 2;
			break;
		case 'h':
			fputs(synopsis, stdout);
			exit(0);
		case 'V':
			printf("preemptwatch %s\n", MUSTER_VERSION);
			exit(0);
		default:
			fputs(synopsis, stderr);
			return 2;
		}
	}
	if (optind >= argc)
		return cli_usage_error(synopsis, "no COMMAND given");
	o->cmd = argv + optind;
	if (o->task == NULL || *o->task == '\0')
		return cli_usage_error(synopsis, "no task: use -t TASK or set "
		    "MUSTER_TASK");
	if (nspecs == 0)
		specs[nspecs++] = "sigterm";
	for (size_t i = 0; i < nspecs; i++) {
		if (notice_parse(specs[i], meta, &o->notices[i], err,
		    sizeof(err)) < 0)
			return cli_usage_error(synopsis, "--notice %s: %s",
			    specs[i], err);
		o->nnotices++;
	}
	return 0;
}

int
main(int argc, char **argv)
{
	static struct pw pw = {.o = {.wait_all = 1, .grace = 10000,
	    .bringup = 3600000, .notice_grace = 30000, .notice_interval = 1000,
	    .window = 15 * 60000, .barrier_timeout = 3 * 60000,
	    .restart_code = 42}};
	struct opts *o = &pw.o;
	struct sync_server *sync;
	struct coord_client *cc;
	struct run r = {.pw = &pw, .guard = -1};
	int notice_sig[65] = {0}, polled = 0, verbose = 0, sfd, rc;
	long restarts = 0;
	sigset_t blocked;
	pthread_t nt;
	char err[512];

	log_init(argv[0], 0);
	o->task = getenv("MUSTER_TASK");
	if ((rc = parse_args(argc, argv, o, &verbose)) != 0)
		return rc;
	log_init(argv[0], verbose);
	if (coord_agent_init(&r.a, o->task, 0) < 0)
		return cli_usage_error(synopsis, "%s is not a task (want "
		    "JOB:INDEX)", o->task);
	o->addr = cli_coord_addr(o->addr);
	if ((cc = coord_client_new(o->addr, err, sizeof(err))) == NULL)
		return cli_usage_error(synopsis, "%s", err);
	if (pipe2(pw.evpipe, O_CLOEXEC) < 0)
		return cli_fail(ST_INTERNAL, "pipe: %s", strerror(errno));
	if ((sync = sync_server_new(err, sizeof(err))) == NULL)
		return cli_fail(ST_INTERNAL, "%s", err);
	pw.page = sync_server_page(sync);
	setenv(SYNCPOINT_ENV, sync_server_path(sync), 1);

	/* Signals come through signalfd, never to the threads. */
	/* A shell may have started us with these ignored; they are ours. */
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	sigemptyset(&blocked);
	sigaddset(&blocked, SIGCHLD);
	sigaddset(&blocked, SIGINT);
	sigaddset(&blocked, SIGTERM);
	sigaddset(&blocked, SIGHUP);
	for (size_t i = 0; i < o->nnotices; i++) {
		if (o->notices[i].kind == NOTICE_SIGNAL) {
			notice_sig[o->notices[i].signo] = 1;
			sigaddset(&blocked, o->notices[i].signo);
		} else {
			polled = 1;
		}
	}
	sigprocmask(SIG_BLOCK, &blocked, NULL);
	signal(SIGPIPE, SIG_IGN);
	if ((sfd = signalfd(-1, &blocked, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
		return cli_fail(ST_INTERNAL, "signalfd: %s", strerror(errno));
	if (sync_server_start(sync) < 0 || (polled &&
	    pthread_create(&nt, NULL, notices_main, &pw) != 0))
		return cli_fail(ST_INTERNAL, "cannot start threads");

	for (;;) {
		struct outcome out;
		enum status st;

		r.a.incarnation = task_new_incarnation();
		r.gen++;
		/* A signal while coordd is still away ends the wait. */
		do {
			coord_client_set_cancel(cc, sfd);
			st = coord_register(cc, &r.a, duration_now_ms() +
			    o->bringup);
			coord_client_set_cancel(cc, -1);
		} while (st == ST_CANCELLED &&
		    (rc = interrupted(sfd, "registering")) == 0);
		if (st == ST_CANCELLED)
			break;
		if (st != ST_OK && r.a.wait_epoch >= 0) {
			/* Restarted from outside while the run it left winds
			 * down: join the next run, as a restart from here would. */
			log_info("%s; waiting for the next run", coord_client_error(cc));
			if ((rc = wait_next_run(cc, sfd, r.a.wait_epoch,
			    duration_now_ms() + o->bringup)) != 0)
				break;
			r.gen--;
			continue;
		}
		if (st != ST_OK) {
			rc = cli_fail(st, "registering %s: %s", r.a.task, coord_client_error(cc));
			break;
		}
		log_debug("registered %s in epoch %ld; heartbeat every %" PRId64
		    "ms", r.a.task, r.a.epoch, r.a.heartbeat_interval_ms);
		if (start_run(&r) < 0) {
			rc = cli_fail(ST_INTERNAL, "cannot start threads");
			break;
		}
		out = run_loop(&r, cc, sfd, &blocked, notice_sig);
		stop_run(&r);
		rc = out.code;
		if (!out.restartable || restarts >= o->max_restarts)
			break;
		restarts++;
		log_info("restarting the command (%ld of at most %ld) once "
		    "every task has left run %ld", restarts, o->max_restarts,
		    r.a.epoch);
		if ((rc = wait_next_run(cc, sfd, r.a.epoch, duration_now_ms() +
		    o->bringup)) != 0)
			break;
		sync_page_reset(pw.page);
	}
	coord_client_free(cc);
	sync_server_free(sync);
	fflush(NULL);
	/* Pollers of notices may be mid-call; exit ends them. */
	_exit(rc);
}
