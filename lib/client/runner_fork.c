/*
 * runner_fork.c: a closure as a process of its own. Its stdin is fed from
 * the spec, its stdout kept (up to max_output) and the tail of its stderr;
 * a timeout, or the slot told to stop, stops it (TERM, the grace period,
 * KILL). What fails before the closure's own command is reached is this
 * worker's failure, and the closure is given back.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "duration.h"
#include "proc.h"
#include "runner_int.h"
#include "text.h"

extern char **environ;

static void
close_pair(int p[2])
{
	for (int i = 0; i < 2; i++)
		if (p[i] >= 0) {
			close(p[i]);
			p[i] = -1;
		}
}

static int
set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void
runner_fork(struct runner_slot *s, struct runner_run *r)
{
	json_t *jargv = json_object_get(r->spec, "argv"), *v;
	json_t *jin = json_object_get(r->spec, "stdin");
	int64_t timeout =
	    json_integer_value(json_object_get(r->spec, "timeout_ms"));
	struct buf in = {0};
	size_t inoff = 0, i;
	int ip[2] = {-1, -1}, op[2] = {-1, -1}, ep[2] = {-1, -1}, e, status = 0;
	char **argv, **env = NULL, **owned = NULL, why[1024];
	const char *what = NULL;
	struct proc_stop stop = {0};
	int64_t start = duration_now_ms();
	pid_t pid;
	int timed_out = 0;

	if (jin != NULL)
		text_base64_decode(&in, json_string_value(jin),
		    json_string_length(jin));
	argv = calloc(json_array_size(jargv) + 1, sizeof(char *));
	if (argv != NULL) {
		json_array_foreach(jargv, i, v)
			argv[i] = (char *)json_string_value(v);
	}
	if (argv != NULL && (owned = runner_closure_vars(s, r)) != NULL)
		env = proc_env_child(environ, owned);
	/* What fails before the closure's own command is reached is this
	 * worker's failure, not the closure's: it is given back. */
	if (argv == NULL || env == NULL) {
		errno = ENOMEM;
		what = "its environment";
	} else if (in.len > 0 ?
	        pipe2(ip, O_CLOEXEC) < 0 :
	        (ip[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
		what = in.len > 0 ? "a pipe for its stdin" : "/dev/null";
	} else if (pipe2(op, O_CLOEXEC) < 0 || pipe2(ep, O_CLOEXEC) < 0) {
		what = "pipes for its output";
	}
	if (what != NULL) {
		runner_not_started(s, r, "%s: %s", what, strerror(errno));
		close_pair(ip);
		close_pair(op);
		close_pair(ep);
		goto out;
	}
	struct proc_spec spec = {argv, env, s->wk->o.blocked, SIGKILL, ip[0],
	    op[1], ep[1], NULL};
	pid = proc_spawn(&spec, &e, why, sizeof(why));
	close(ip[0]);
	close(op[1]);
	close(ep[1]);
	if (pid < 0) {
		/* The closure's command could not be run (not found, not
		 * executable): its failure, 127 or 126 as from a shell. The
		 * process could not be made, or exec ran out of this
		 * machine's memory or files: this worker's. */
		if (e != 0 && !runner_exec_local(e)) {
			r->exited = 1;
			r->code = proc_exec_status(e);
			snprintf(r->message, sizeof(r->message), "%s", why);
		} else {
			runner_not_started(s, r, "%s", why);
		}
		close(op[0]);
		close(ep[0]);
		if (ip[1] >= 0)
			close(ip[1]);
		goto out;
	}
	pthread_mutex_lock(&s->mu);
	s->pid = pid;
	int pre = s->stop;
	pthread_mutex_unlock(&s->mu);
	if (pre)
		proc_stop_begin(&stop, pid, SIGTERM, s->wk->o.grace, start);
	if (ip[1] >= 0)
		set_nonblock(ip[1]);
	int open_out = 1, open_err = 1;
	while (open_out || open_err) {
		struct pollfd pf[4];
		int np = 0, io = -1, ie = -1, ii = -1, ic;
		int64_t now = duration_now_ms(), wait = -1;
		char b[65536];

		if (open_out) {
			io = np;
			pf[np++] = (struct pollfd){op[0], POLLIN, 0};
		}
		if (open_err) {
			ie = np;
			pf[np++] = (struct pollfd){ep[0], POLLIN, 0};
		}
		if (ip[1] >= 0) {
			ii = np;
			pf[np++] = (struct pollfd){ip[1], POLLOUT, 0};
		}
		ic = np;
		pf[np++] = (struct pollfd){s->cancel[0], POLLIN, 0};
		if (timeout > 0 && !timed_out) {
			wait = start + timeout - now;
			if (wait <= 0) {
				timed_out = 1;
				proc_stop_begin(&stop, pid, SIGTERM,
				    s->wk->o.grace, now);
				continue;
			}
		}
		if (proc_stop_next(&stop) != 0) {
			int64_t k = proc_stop_next(&stop) - now;
			if (k < 0)
				k = 0;
			if (wait < 0 || k < wait)
				wait = k;
		}
		if (poll(pf, (nfds_t)np, wait < 0 ? -1 : (int)wait) < 0 &&
		    errno != EINTR)
			break;
		now = duration_now_ms();
		proc_stop_tick(&stop, now);
		if (pf[ic].revents != 0) {
			runner_drain(s->cancel[0]);
			if (stop.kill_at == 0)
				proc_stop_begin(&stop, pid, SIGTERM,
				    s->wk->o.grace, now);
		}
		if (io >= 0 && pf[io].revents != 0) {
			ssize_t n = read(op[0], b, sizeof(b));
			if (n > 0)
				runner_out_append(s, r, b, (size_t)n);
			else if (n == 0 || errno != EINTR)
				open_out = 0;
		}
		if (ie >= 0 && pf[ie].revents != 0) {
			ssize_t n = read(ep[0], b, sizeof(b));
			if (n > 0)
				runner_tail_append(&r->err, b, (size_t)n);
			else if (n == 0 || errno != EINTR)
				open_err = 0;
		}
		if (ii >= 0 && pf[ii].revents != 0) {
			ssize_t n =
			    write(ip[1], in.data + inoff, in.len - inoff);
			if (n > 0)
				inoff += (size_t)n;
			if ((n < 0 && errno != EAGAIN && errno != EINTR) ||
			    inoff == in.len) {
				close(ip[1]);
				ip[1] = -1;
			}
		}
	}
	close(op[0]);
	close(ep[0]);
	if (ip[1] >= 0)
		close(ip[1]);
	/* Its output closed; it may still be ending (or in its grace): wait
	 * on a pidfd, so that its end is seen at once. */
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	while (waitpid(pid, &status, WNOHANG) == 0) {
		struct pollfd pf[2] = {{s->cancel[0], POLLIN, 0},
		    {pfd, POLLIN, 0}};
		int64_t now = duration_now_ms(), wait = pfd >= 0 ? 1000 : 5;
		if (proc_stop_next(&stop) != 0 &&
		    proc_stop_next(&stop) - now < wait)
			wait = proc_stop_next(&stop) > now ?
			    proc_stop_next(&stop) - now :
			    0;
		if (timeout > 0 && !timed_out && start + timeout - now < wait)
			wait =
			    start + timeout > now ? start + timeout - now : 0;
		if (poll(pf, pfd >= 0 ? 2 : 1, (int)wait) > 0 &&
		    pf[0].revents != 0) {
			runner_drain(s->cancel[0]);
			if (stop.kill_at == 0)
				proc_stop_begin(&stop, pid, SIGTERM,
				    s->wk->o.grace, now);
		}
		now = duration_now_ms();
		if (timeout > 0 && !timed_out && now - start >= timeout) {
			timed_out = 1;
			proc_stop_begin(&stop, pid, SIGTERM, s->wk->o.grace,
			    now);
		}
		proc_stop_tick(&stop, now);
	}
	if (pfd >= 0)
		close(pfd);
	pthread_mutex_lock(&s->mu);
	s->pid = 0;
	pthread_mutex_unlock(&s->mu);
	if (WIFEXITED(status)) {
		r->exited = 1;
		r->code = WEXITSTATUS(status);
	} else {
		r->code = WTERMSIG(status);
	}
	if (timed_out) {
		char d[32];
		snprintf(r->message, sizeof(r->message), "timed out after %s",
		    duration_format(timeout, d, sizeof(d)));
	}
out:
	free(argv);
	free(env);
	runner_strv_free(owned);
	buf_free(&in);
}
