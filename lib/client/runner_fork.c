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
#include <sys/wait.h>
#include <unistd.h>

#include "duration.h"
#include "proc.h"
#include "pump.h"
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

void
runner_fork(struct runner_slot *s, struct runner_run *r)
{
	json_t *jargv = json_object_get(r->spec, "argv"), *v;
	json_t *jin = json_object_get(r->spec, "stdin");
	int64_t timeout =
	    json_integer_value(json_object_get(r->spec, "timeout_ms"));
	struct buf in = {0};
	size_t i;
	int ip[2] = {-1, -1}, op[2] = {-1, -1}, ep[2] = {-1, -1}, e, status = 0;
	char **argv, **env = NULL, **owned = NULL, why[1024];
	const char *what = NULL;
	struct proc_stop stop = {0};
	struct pump pump;
	int64_t start = duration_now_ms();
	pid_t pid;
	int timed_out = 0, cancel;

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
	pump_init(&pump, op[0], ep[0], &r->err);
	if (ip[1] >= 0)
		pump_feed(&pump, ip[1], in.data, in.len);
	pump.pid = pid;
	pump.stop = &stop;
	cancel = pump_watch(&pump, s->cancel[0], POLLIN);
	while (!pump_done(&pump)) {
		char b[65536];
		size_t n;
		int64_t now;

		/* A failed poll ends the pumping: the child is awaited
		 * with its pipes closed, as one whose output ended. */
		if (pump_wait(&pump,
		        timeout > 0 && !timed_out ? start + timeout : 0) < 0)
			pump_close(&pump);
		now = duration_now_ms();
		if (timeout > 0 && !timed_out && now - start >= timeout) {
			timed_out = 1;
			proc_stop_begin(&stop, pid, SIGTERM, s->wk->o.grace,
			    now);
		}
		proc_stop_tick(&stop, now);
		if (pump_ready(&pump, cancel) != 0) {
			runner_drain(s->cancel[0]);
			if (stop.kill_at == 0)
				proc_stop_begin(&stop, pid, SIGTERM,
				    s->wk->o.grace, now);
		}
		if ((n = pump_read(&pump, b, sizeof(b))) > 0)
			runner_out_append(s, r, b, n);
	}
	pump_close(&pump);
	status = pump.status;
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
