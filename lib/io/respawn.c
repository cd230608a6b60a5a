/*
 * respawn.c: the parent that starts its child again (respawn.h). One
 * thread, one loop over sigtimedwait: a child's death, a signal to pass on,
 * or the end of a pause are all it waits for.
 */
#include "respawn.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "duration.h"
#include "log.h"
#include "proc.h"

int64_t
respawn_backoff(const struct respawn_config *cfg, int64_t last_ms,
    int64_t lived_ms)
{
	int64_t next;

	if (last_ms <= 0 || lived_ms >= cfg->healthy_ms)
		return cfg->backoff_min_ms;
	next = last_ms * 2;
	if (next < cfg->backoff_min_ms)
		next = cfg->backoff_min_ms;
	return next > cfg->backoff_max_ms ? cfg->backoff_max_ms : next;
}

/* What the caller had, for each child to get back. */
struct inherited {
	sigset_t mask;
	void (*pipe)(int);
};

/* The fork: 0 in the child, ready to go on as the program; its pid in the
 * parent; -1 if fork failed. */
static pid_t
start(pid_t parent, const struct inherited *in)
{
	pid_t pid = fork();

	if (pid != 0)
		return pid;
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
		_exit(128 + SIGTERM); /* the parent is gone already */
	prctl(PR_SET_CHILD_SUBREAPER, 0);
	signal(SIGPIPE, in->pipe);
	sigprocmask(SIG_SETMASK, &in->mask, NULL);
	return 0;
}

/*
 * What the dead child left: as the subreaper, the parent gets what the
 * child's processes started and did not wait for (a closure's own
 * children, whose closure died with the worker). Each is killed with its
 * process group (a closure's), and reaped, before the next child starts:
 * none runs on unwatched beside the work given to another.
 */
static void
kill_orphans(void)
{
	struct timespec tick = {0, 10 * 1000000};
	int64_t until = duration_now_ms() + 2000;
	pid_t self = getpid(), group = getpgrp();

	for (;;) {
		DIR *dir = opendir("/proc");
		struct dirent *e;
		int found = 0;

		while (dir != NULL && (e = readdir(dir)) != NULL) {
			char path[64], stat[512], *p;
			long pid = strtol(e->d_name, &p, 10), ppid;
			FILE *f;

			if (*p != '\0' || pid <= 0)
				continue;
			snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
			if ((f = fopen(path, "r")) == NULL)
				continue;
			p = fgets(stat, sizeof(stat), f);
			fclose(f);
			/* pid (comm) state ppid ...: comm may hold ") ". */
			if (p == NULL || (p = strrchr(stat, ')')) == NULL ||
			    sscanf(p + 1, " %*c %ld", &ppid) != 1 ||
			    ppid != (long)self)
				continue;
			found = 1;
			if (getpgid((pid_t)pid) > 0 &&
			    getpgid((pid_t)pid) != group)
				kill(-getpgid((pid_t)pid), SIGKILL);
			kill((pid_t)pid, SIGKILL);
		}
		if (dir != NULL)
			closedir(dir);
		while (waitpid(-1, NULL, WNOHANG) > 0)
			found = 1;
		if (!found || duration_now_ms() >= until)
			return;
		nanosleep(&tick, NULL);
	}
}

static int
is_final(const struct respawn_config *cfg, int code)
{
	for (size_t i = 0; i < cfg->nfinal; i++)
		if (cfg->final[i] == code)
			return 1;
	return 0;
}

/* A death as words: "was killed by SIGKILL", "exited with 9". */
static void
describe(int status, char *out, size_t outlen)
{
	if (WIFSIGNALED(status))
		snprintf(out, outlen, "was killed by SIG%s",
		    sigabbrev_np(WTERMSIG(status)) != NULL ?
		        sigabbrev_np(WTERMSIG(status)) :
		        "?");
	else
		snprintf(out, outlen, "exited with %d", WEXITSTATUS(status));
}

int
respawn_fork(const struct respawn_config *cfg)
{
	pid_t parent = getpid(), child;
	struct inherited in;
	sigset_t want;
	int64_t pause = 0, started, next = 0;
	int stopping = 0, restarts = 0;

	sigemptyset(&want);
	sigaddset(&want, SIGCHLD);
	sigaddset(&want, SIGTERM);
	sigaddset(&want, SIGINT);
	sigaddset(&want, SIGHUP);
	sigprocmask(SIG_BLOCK, &want, &in.mask);
	/* Its own dispositions, whatever it inherited: a child's end is
	 * waited for (not reaped away by an ignored SIGCHLD), and a closed
	 * stderr does not end the parent as it logs a death. */
	signal(SIGCHLD, SIG_DFL);
	in.pipe = signal(SIGPIPE, SIG_IGN);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if ((child = start(parent, &in)) <= 0) {
		if (child < 0)
			sigprocmask(SIG_SETMASK, &in.mask, NULL);
		return child < 0 ? -1 : 0;
	}
	started = duration_now_ms();
	log_info("%s: started as pid %ld", cfg->name, (long)child);
	for (;;) {
		int64_t now = duration_now_ms(), wait_ms = -1;
		struct timespec ts;
		siginfo_t si;
		int sig, status;

		if (child == 0 && !stopping) {
			if (now >= next) {
				if ((child = start(parent, &in)) == 0)
					return 0;
				if (child > 0) {
					started = duration_now_ms();
					log_info("%s: started again as pid %ld "
					         "(restart %d)",
					    cfg->name, (long)child, ++restarts);
					continue;
				}
				log_info("%s: fork: %s; trying again in %s",
				    cfg->name, strerror(errno), "1s");
				child = 0;
				next = now + 1000;
			}
			wait_ms = next - now;
		}
		if (wait_ms >= 0) {
			ts.tv_sec = wait_ms / 1000;
			ts.tv_nsec = (long)(wait_ms % 1000) * 1000000;
			sig = sigtimedwait(&want, &si, &ts);
		} else {
			sig = sigwaitinfo(&want, &si);
		}
		if (sig < 0)
			continue; /* EAGAIN: the pause is over; EINTR */
		if (sig == SIGTERM || sig == SIGINT) {
			if (child == 0)
				exit(128 + sig);
			/* A second one: now. */
			kill(child, stopping ? SIGKILL : sig);
			stopping = 1;
			continue;
		}
		if (sig == SIGHUP) {
			if (child > 0)
				kill(child, sig);
			continue;
		}
		/* SIGCHLD: ours, or a stray one it left behind. */
		while (child > 0) {
			pid_t pid = waitpid(-1, &status, WNOHANG);
			char what[64], in[32];
			int64_t lived;

			if (pid <= 0)
				break;
			if (pid != child)
				continue;
			child = 0;
			describe(status, what, sizeof(what));
			kill_orphans();
			if (stopping)
				exit(proc_status_code(status));
			if (WIFEXITED(status) &&
			    is_final(cfg, WEXITSTATUS(status))) {
				log_info("%s: pid %ld %s: not started again",
				    cfg->name, (long)pid, what);
				exit(WEXITSTATUS(status));
			}
			lived = duration_now_ms() - started;
			pause = respawn_backoff(cfg, pause, lived);
			next = duration_now_ms() + pause;
			duration_format(pause, in, sizeof(in));
			log_info("%s: pid %ld %s after %.1fs; starting it "
			         "again in %s",
			    cfg->name, (long)pid, what, (double)lived / 1000.0,
			    in);
		}
	}
}
