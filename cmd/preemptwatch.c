/*
 * preemptwatch: the agent of one task. Registers it with coordd, keeps it
 * alive with heartbeats, waits for the whole cluster, runs the training
 * command, and stops it when another task fails; reports the command's own
 * failure so the others stop.
 */
#include <errno.h>
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
#include "coord_client.h"
#include "duration.h"
#include "log.h"
#include "task.h"

/* Exit code: the command was stopped because the cluster failed. */
#define EXIT_PEER_FAILED 43

static const char synopsis[] =
    "usage: preemptwatch [-v] [-c ADDR] [-t TASK] [--no-wait-all] "
    "[--grace DUR]\n"
    "                    [--timeout DUR] -- COMMAND [ARG...]\n";

enum ev_type { EV_READY, EV_FAILED, EV_BRINGUP_FAILED };

/* What the threads tell the main loop, one write() each. */
struct event {
	enum ev_type type;
	enum status st;
	char msg[2000];
};

struct agent {
	const char *addr;
	struct coord_agent a;
	int64_t bringup_deadline;
	int wait_all;
	int evpipe[2];
};

static void
post(struct agent *ag, enum ev_type type, enum status st, const char *fmt,
    ...) __attribute__((format(printf, 4, 5)));

static void
post(struct agent *ag, enum ev_type type, enum status st, const char *fmt,
    ...)
{
	struct event ev = {.type = type, .st = st};
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(ev.msg, sizeof(ev.msg), fmt, ap);
	va_end(ap);
	/* Smaller than PIPE_BUF: one atomic write. */
	while (write(ag->evpipe[1], &ev, sizeof(ev)) < 0 && errno == EINTR)
		;
}

static void
sleep_ms(int64_t ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/*
 * Heartbeats every interval coordd asked for. The task counts as failed
 * when coordd says so, or when coordd cannot be reached for longer than
 * the heartbeat timeout: by then coordd has given up on us too.
 */
static void *
heartbeat_main(void *arg)
{
	struct agent *ag = arg;
	struct coord_client *cc;
	int64_t last_ok = duration_now_ms();
	char err[256], svc[17], a[32];

	if ((cc = coord_client_new(ag->addr, err, sizeof(err))) == NULL) {
		post(ag, EV_FAILED, ST_INTERNAL, "heartbeats: %s", err);
		return NULL;
	}
	for (;;) {
		int64_t now, iv = ag->a.heartbeat_interval_ms;
		int not_reg = 0;
		enum status st;

		sleep_ms(iv);
		now = duration_now_ms();
		st = coord_heartbeat(cc, &ag->a, now + iv, &not_reg, svc);
		if (st == ST_OK) {
			last_ok = duration_now_ms();
			continue;
		}
		if (not_reg && strcmp(svc, ag->a.service_incarnation) != 0) {
			/* A new coordd: join it as the same incarnation. */
			log_info("coordd restarted; registering %s again",
			    ag->a.task);
			if (coord_register(cc, &ag->a, now + iv) == ST_OK) {
				last_ok = duration_now_ms();
				continue;
			}
		} else if (not_reg) {
			post(ag, EV_FAILED, ST_ABORTED, "coordd no longer knows "
			    "task %s as connected: it was declared failed and "
			    "the cluster moved on", ag->a.task);
			break;
		}
		if (st == ST_UNAVAILABLE || st == ST_DEADLINE_EXCEEDED) {
			if (duration_now_ms() - last_ok >
			    ag->a.heartbeat_timeout_ms) {
				post(ag, EV_FAILED, ST_UNAVAILABLE, "coordd "
				    "unreachable for %s: %s", duration_format(
				    duration_now_ms() - last_ok, a, sizeof(a)),
				    cc->err);
				break;
			}
			continue;
		}
		post(ag, EV_FAILED, st, "coordd refused the heartbeat of %s: "
		    "%s: %s", ag->a.task, status_name(st), cc->err);
		break;
	}
	coord_client_free(cc);
	return NULL;
}

/*
 * Waits for every task (unless told not to), then for errors of other
 * tasks, for as long as the process lives.
 */
static void *
poller_main(void *arg)
{
	struct agent *ag = arg;
	struct coord_client *cc;
	char err[256];
	enum status st;

	if ((cc = coord_client_new(ag->addr, err, sizeof(err))) == NULL) {
		post(ag, EV_BRINGUP_FAILED, ST_INTERNAL, "%s", err);
		return NULL;
	}
	if (ag->wait_all) {
		st = coord_wait_all(cc, &ag->a, ag->bringup_deadline, NULL,
		    NULL);
		if (st != ST_OK) {
			post(ag, EV_BRINGUP_FAILED, st, "waiting for all tasks: "
			    "%s: %s", status_name(st), cc->err);
			coord_client_free(cc);
			return NULL;
		}
	}
	post(ag, EV_READY, ST_OK, "ready");
	for (;;) {
		json_t *errors = NULL, *e;
		size_t i;

		st = coord_poll_errors(cc, HTTP_NO_DEADLINE, &errors);
		if (st != ST_OK) {
			/* Unreachability is the heartbeat thread's to judge. */
			sleep_ms(200);
			continue;
		}
		json_array_foreach(errors, i, e) {
			const char *task = json_string_value(json_object_get(e,
			    "task"));
			const char *code = json_string_value(json_object_get(e,
			    "code"));
			const char *msg = json_string_value(json_object_get(e,
			    "message"));
			if (task != NULL && strcmp(task, ag->a.task) == 0)
				post(ag, EV_FAILED, status_from_name(code),
				    "this task (%s) was declared failed: %s: %s",
				    task, code, msg != NULL ? msg : "");
			else
				post(ag, EV_FAILED, status_from_name(code),
				    "task %s failed: %s: %s", task != NULL ?
				    task : "?", code != NULL ? code : "?",
				    msg != NULL ? msg : "");
			json_decref(errors);
			coord_client_free(cc);
			return NULL;
		}
		json_decref(errors);
	}
}

static pid_t
start_command(struct agent *ag, char **cmd, const sigset_t *blocked)
{
	char inc[17];
	pid_t pid;

	setenv("MUSTER_COORD", ag->addr, 1);
	setenv("MUSTER_TASK", ag->a.task, 1);
	setenv("MUSTER_INCARNATION", task_format_incarnation(ag->a.incarnation,
	    inc), 1);
	pid = fork();
	if (pid == 0) {
		/* Its own process group, so signals reach all it starts. */
		setpgid(0, 0);
		/* If preemptwatch is killed outright, the command must not
		 * train on alone: the cluster already counts it as failed. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() == 1)
			_exit(EXIT_PEER_FAILED);
		sigprocmask(SIG_UNBLOCK, blocked, NULL);
		close(ag->evpipe[0]);
		close(ag->evpipe[1]);
		execvp(cmd[0], cmd);
		fprintf(stderr, "preemptwatch: cannot run %s: %s\n", cmd[0],
		    strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}
	if (pid > 0)
		setpgid(pid, pid);
	return pid;
}

static const char *
signame(int sig)
{
	const char *s = sigabbrev_np(sig);

	return s != NULL ? s : "?";
}

/* Tells coordd this task leaves; failures here change nothing. */
static void
leave(struct agent *ag, struct coord_client *cc, int64_t deadline)
{
	/* A clean finish goes through the shutdown barrier; the rest not. */
	int barrier = deadline > duration_now_ms() + 3000;
	enum status st = coord_shutdown_task(cc, &ag->a, barrier, deadline);

	if (st != ST_OK && st != ST_FAILED_PRECONDITION)
		log_info("shutdown: %s: %s", status_name(st), cc->err);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"no-wait-all", no_argument, NULL, 'W'},
		{"grace", required_argument, NULL, 'g'},
		{"timeout", required_argument, NULL, 'T'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	const char *task = getenv("MUSTER_TASK"), *addr_flag = NULL;
	int64_t grace = 10000, bringup = 3600000, kill_at = 0;
	struct agent ag = {.wait_all = 1};
	struct coord_client *cc;
	pthread_t hb, poller;
	sigset_t blocked;
	int c, sfd, verbose = 0, stopping = 0, exit_code = -1;
	pid_t child = 0;
	char err[512], stop_reason[2100] = "";
	enum status st;

	log_init(argv[0], 0);
	while ((c = getopt_long(argc, argv, "+c:ht:v", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			addr_flag = optarg;
			break;
		case 't':
			task = optarg;
			break;
		case 'W':
			ag.wait_all = 0;
			break;
		case 'g':
			if (duration_parse(optarg, &grace) < 0)
				return cli_usage_error(synopsis, "--grace %s is "
				    "not a duration", optarg);
			break;
		case 'T':
			if (duration_parse(optarg, &bringup) < 0 || bringup <= 0)
				return cli_usage_error(synopsis, "--timeout %s is "
				    "not a duration above zero", optarg);
			break;
		case 'v':
			verbose++;
			break;
		case 'h':
			fputs(synopsis, stdout);
			return 0;
		case 'V':
			printf("preemptwatch %s\n", MUSTER_VERSION);
			return 0;
		default:
			fputs(synopsis, stderr);
			return 2;
		}
	}
	log_init(argv[0], verbose);
	if (optind >= argc)
		return cli_usage_error(synopsis, "no COMMAND given");
	if (task == NULL || *task == '\0')
		return cli_usage_error(synopsis, "no task: use -t TASK or set "
		    "MUSTER_TASK");
	if (coord_agent_init(&ag.a, task, task_new_incarnation()) < 0)
		return cli_usage_error(synopsis, "%s is not a task (want "
		    "JOB:INDEX)", task);
	ag.addr = cli_coord_addr(addr_flag);
	if ((cc = coord_client_new(ag.addr, err, sizeof(err))) == NULL)
		return cli_usage_error(synopsis, "%s", err);
	if (pipe(ag.evpipe) < 0)
		return cli_fail(ST_INTERNAL, "pipe: %s", strerror(errno));

	/* Signals come through signalfd, never to the threads. */
	sigemptyset(&blocked);
	sigaddset(&blocked, SIGCHLD);
	sigaddset(&blocked, SIGINT);
	sigaddset(&blocked, SIGTERM);
	sigaddset(&blocked, SIGHUP);
	sigprocmask(SIG_BLOCK, &blocked, NULL);
	signal(SIGPIPE, SIG_IGN);
	if ((sfd = signalfd(-1, &blocked, SFD_CLOEXEC)) < 0)
		return cli_fail(ST_INTERNAL, "signalfd: %s", strerror(errno));

	ag.bringup_deadline = duration_now_ms() + bringup;
	st = coord_register(cc, &ag.a, ag.bringup_deadline);
	if (st != ST_OK)
		return cli_fail(st, "registering %s: %s", ag.a.task, cc->err);
	log_debug("registered %s; heartbeat every %" PRId64 "ms", ag.a.task,
	    ag.a.heartbeat_interval_ms);
	if (pthread_create(&hb, NULL, heartbeat_main, &ag) != 0 ||
	    pthread_create(&poller, NULL, poller_main, &ag) != 0)
		return cli_fail(ST_INTERNAL, "cannot start threads");

	for (;;) {
		struct pollfd pfd[2] = {{sfd, POLLIN, 0},
		    {ag.evpipe[0], POLLIN, 0}};
		int timeout = -1;

		if (kill_at != 0) {
			int64_t left = kill_at - duration_now_ms();
			timeout = left > 0 ? (int)left : 0;
		}
		if (poll(pfd, 2, timeout) < 0 && errno != EINTR)
			break;
		if (kill_at != 0 && duration_now_ms() >= kill_at && child > 0) {
			log_info("command still running after the grace "
			    "period: SIGKILL");
			kill(-child, SIGKILL);
			kill_at = 0;
		}
		if (pfd[1].revents & POLLIN) {
			struct event ev;
			if (read(ag.evpipe[0], &ev, sizeof(ev)) != sizeof(ev))
				continue;
			if (ev.type == EV_READY && !stopping) {
				child = start_command(&ag, argv + optind,
				    &blocked);
				if (child < 0) {
					exit_code = cli_fail(ST_INTERNAL,
					    "fork: %s", strerror(errno));
					break;
				}
				log_debug("started %s (pid %ld)", argv[optind],
				    (long)child);
			} else if (ev.type == EV_BRINGUP_FAILED) {
				fprintf(stderr, "%s: %s\n", log_prog(), ev.msg);
				exit_code = ev.st == ST_INTERNAL ?
				    EXIT_PEER_FAILED : status_exit(ev.st);
				leave(&ag, cc, duration_now_ms() + 2000);
				break;
			} else if (ev.type == EV_FAILED && !stopping) {
				stopping = 1;
				snprintf(stop_reason, sizeof(stop_reason), "%s",
				    ev.msg);
				fprintf(stderr, "%s: %s; stopping the command of "
				    "%s\n", log_prog(), ev.msg, ag.a.task);
				if (child <= 0) {
					exit_code = EXIT_PEER_FAILED;
					leave(&ag, cc, duration_now_ms() + 2000);
					break;
				}
				kill(-child, SIGTERM);
				kill_at = duration_now_ms() + grace;
			}
		}
		if (pfd[0].revents & POLLIN) {
			struct signalfd_siginfo si;
			int status;
			pid_t pid;

			if (read(sfd, &si, sizeof(si)) != sizeof(si))
				continue;
			if (si.ssi_signo != SIGCHLD) {
				if (child > 0) {
					kill(-child, (int)si.ssi_signo);
					continue;
				}
				/* Nothing started yet: just leave. */
				leave(&ag, cc, duration_now_ms() + 2000);
				exit_code = 128 + (int)si.ssi_signo;
				break;
			}
			if (child <= 0 || (pid = waitpid(child, &status,
			    WNOHANG)) != child)
				continue;
			child = 0;
			if (stopping) {
				fprintf(stderr, "%s: stopped because %s\n",
				    log_prog(), stop_reason);
				exit_code = EXIT_PEER_FAILED;
				leave(&ag, cc, duration_now_ms() + 2000);
				break;
			}
			if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
				/* Done: leave together, through the shutdown
				 * barrier when coordd has one. */
				leave(&ag, cc, ag.bringup_deadline >
				    duration_now_ms() + 3600000 ?
				    ag.bringup_deadline : duration_now_ms() +
				    3600000);
				exit_code = 0;
				break;
			}
			if (WIFEXITED(status)) {
				snprintf(err, sizeof(err), "command %s exited "
				    "with status %d", argv[optind],
				    WEXITSTATUS(status));
				exit_code = WEXITSTATUS(status);
			} else {
				snprintf(err, sizeof(err), "command %s killed "
				    "by SIG%s", argv[optind],
				    signame(WTERMSIG(status)));
				exit_code = 128 + WTERMSIG(status);
			}
			log_info("%s; reporting the error of %s", err,
			    ag.a.task);
			st = coord_report_error(cc, &ag.a, ST_INTERNAL, err,
			    duration_now_ms() + 5000);
			if (st != ST_OK)
				log_info("could not report the error: %s: %s",
				    status_name(st), cc->err);
			break;
		}
	}
	/* The threads are parked in calls to coordd; exit ends them. */
	coord_client_free(cc);
	fflush(NULL);
	_exit(exit_code < 0 ? status_exit(ST_INTERNAL) : exit_code);
}
