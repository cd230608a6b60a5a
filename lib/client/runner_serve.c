/*
 * runner_serve.c: --serve. Each slot keeps a process of the command
 * running (started with the first closure it takes, and again after one
 * that died or answered badly) and runs a closure as a line of JSON to
 * its stdin: {"id","attempt","argv","env","stdin"}, the environment the
 * closure would have had as a process of its own. Its answer is a line,
 * {"exit":N,"stdout","stderr"}. A process that cannot be started is this
 * worker's failure; one that dies, or never answers in the closure's
 * time, is the closure's.
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

void
runner_serve_close(struct runner_slot *s, int kill_it)
{
	int status;

	if (s->serve_pid <= 0)
		return;
	close(s->serve_in);
	close(s->serve_out);
	if (kill_it) {
		struct proc_stop st = {0};
		proc_stop_begin(&st, s->serve_pid, SIGTERM, s->wk->o.grace,
		    duration_now_ms());
		while (waitpid(s->serve_pid, &status, WNOHANG) == 0) {
			runner_nap(10);
			proc_stop_tick(&st, duration_now_ms());
		}
	} else {
		while (waitpid(s->serve_pid, &status, 0) < 0 && errno == EINTR)
			;
	}
	s->serve_pid = 0;
	buf_reset(&s->serve_buf);
}

/* Starts the slot's --serve process: 0, or -1 with err filled. */
static int
serve_start(struct runner_slot *s, char *err, size_t errlen)
{
	char *argv[] = {"/bin/sh", "-c", (char *)s->wk->o.serve, NULL};
	char envs[64], envw[256], *set[] = {envs, envw, NULL}, **env;
	int ip[2], op[2], e;

	snprintf(envs, sizeof(envs), "MUSTER_SLOT=%d", s->n);
	snprintf(envw, sizeof(envw), "MUSTER_WORKER=%s", s->wk->o.task);
	if ((env = proc_env_child(environ, set)) == NULL) {
		snprintf(err, errlen, "%s", strerror(ENOMEM));
		return -1;
	}
	if (pipe2(ip, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		free(env);
		return -1;
	}
	if (pipe2(op, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		close(ip[0]);
		close(ip[1]);
		free(env);
		return -1;
	}
	struct proc_spec spec = {argv, env, s->wk->o.blocked, SIGKILL, ip[0],
	    op[1], -1, NULL};
	s->serve_pid = proc_spawn(&spec, &e, err, errlen);
	free(env);
	close(ip[0]);
	close(op[1]);
	if (s->serve_pid < 0) {
		close(ip[1]);
		close(op[0]);
		s->serve_pid = 0;
		return -1;
	}
	/* Written as it reads: see serve_call. */
	fcntl(ip[1], F_SETFL, O_NONBLOCK);
	s->serve_in = ip[1];
	s->serve_out = op[0];
	return 0;
}

/*
 * Sends the len bytes of req to the serve process and waits for one line
 * from it: the line, or NULL when it ended, the slot was told to stop or
 * the deadline passed (*timed_out). The request is written as the process
 * reads it, so that one that reads none of it is still stopped in time.
 */
static char *
serve_call(struct runner_slot *s, const char *req, size_t len, int64_t deadline,
    int *timed_out)
{
	size_t off = 0;

	for (;;) {
		/* Its answer comes after the whole request. */
		char *nl = off == len && s->serve_buf.data != NULL ?
		    memchr(s->serve_buf.data, '\n', s->serve_buf.len) :
		    NULL;
		if (nl != NULL) {
			size_t n = (size_t)(nl - s->serve_buf.data);
			char *line = strndup(s->serve_buf.data, n);
			memmove(s->serve_buf.data, nl + 1,
			    s->serve_buf.len - n - 1);
			s->serve_buf.len -= n + 1;
			return line;
		}
		struct pollfd pf[3] = {{s->serve_out, POLLIN, 0},
		    {s->cancel[0], POLLIN, 0},
		    {off < len ? s->serve_in : -1, POLLOUT, 0}};
		int64_t wait = deadline > 0 ? deadline - duration_now_ms() : -1;
		if (deadline > 0 && wait <= 0) {
			*timed_out = 1;
			return NULL;
		}
		if (poll(pf, 3, wait < 0 ? -1 : (int)wait) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (pf[1].revents != 0) {
			runner_drain(s->cancel[0]);
			pthread_mutex_lock(&s->mu);
			int stopped = s->stop;
			pthread_mutex_unlock(&s->mu);
			if (stopped)
				return NULL;
		}
		if (pf[2].revents != 0) {
			ssize_t n = write(s->serve_in, req + off, len - off);
			if (n > 0)
				off += (size_t)n;
			else if (errno != EAGAIN && errno != EINTR)
				return NULL;
		}
		if (pf[0].revents != 0) {
			char b[65536];
			ssize_t n = read(s->serve_out, b, sizeof(b));
			if (n == 0 || (n < 0 && errno != EINTR))
				return NULL;
			if (n > 0)
				buf_append(&s->serve_buf, b, (size_t)n);
		}
	}
}

void
runner_serve(struct runner_slot *s, struct runner_run *r)
{
	json_t *req, *reply;
	char *line, *text;
	int64_t timeout =
	    json_integer_value(json_object_get(r->spec, "timeout_ms"));
	int timed_out = 0;
	char **owned = NULL, why[1024];
	json_t *jenv;

	/* No --serve process (no /bin/sh, no pipes, no fork): this worker's
	 * failure. One that starts and then dies is the closure's. */
	if (s->serve_pid == 0 && serve_start(s, why, sizeof(why)) < 0) {
		runner_not_started(s, r, "--serve: %s", why);
		return;
	}
	jenv = json_object();
	/* The closure's environment, as the process would have had it
	 * (MUSTER_ and its own), for the serve process to apply. */
	owned = runner_closure_vars(s, r);
	for (size_t i = 0; owned != NULL && owned[i] != NULL; i++) {
		char *eq = strchr(owned[i], '=');
		if (eq != NULL)
			json_object_setn_new(jenv, owned[i],
			    (size_t)(eq - owned[i]), json_string(eq + 1));
	}
	runner_strv_free(owned);
	req = json_pack("{s:I,s:i,s:O,s:o}", "id", (json_int_t)r->id, "attempt",
	    (int)r->attempt, "argv", json_object_get(r->spec, "argv"), "env",
	    jenv);
	if (json_object_get(r->spec, "stdin") != NULL)
		json_object_set(req, "stdin",
		    json_object_get(r->spec, "stdin"));
	text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (text == NULL) {
		runner_not_started(s, r, "--serve: %s", strerror(ENOMEM));
		return;
	}
	size_t len = strlen(text);
	text[len] = '\n'; /* in place of its NUL: the request is a line */
	line = serve_call(s, text, len + 1,
	    timeout > 0 ? duration_now_ms() + timeout : 0, &timed_out);
	free(text);
	if (line == NULL) {
		pthread_mutex_lock(&s->mu);
		int stopped = s->stop;
		pthread_mutex_unlock(&s->mu);
		runner_serve_close(s, 1);
		r->exited = 0;
		r->code = SIGKILL;
		if (timed_out) {
			char d[32];
			snprintf(r->message, sizeof(r->message),
			    "timed out after %s",
			    duration_format(timeout, d, sizeof(d)));
		} else if (!stopped) {
			snprintf(r->message, sizeof(r->message),
			    "the --serve process ended without answering");
		}
		return;
	}
	reply = json_loads(line, 0, NULL);
	free(line);
	if (reply == NULL || !json_is_integer(json_object_get(reply, "exit"))) {
		json_decref(reply);
		runner_serve_close(s, 1);
		r->exited = 1;
		r->code = 126;
		snprintf(r->message, sizeof(r->message),
		    "the --serve process answered a line that is not "
		    "{\"exit\":N,...}");
		return;
	}
	r->exited = 1;
	r->code = (int)json_integer_value(json_object_get(reply, "exit"));
	const char *o = json_string_value(json_object_get(reply, "stdout"));
	const char *e = json_string_value(json_object_get(reply, "stderr"));
	struct buf b = {0};
	if (o != NULL && text_base64_decode(&b, o, strlen(o)) == 0)
		runner_out_append(s, r, b.data, b.len);
	buf_reset(&b);
	if (e != NULL && text_base64_decode(&b, e, strlen(e)) == 0)
		pump_tail_add(&r->err, b.data, b.len);
	buf_free(&b);
	json_decref(reply);
}
