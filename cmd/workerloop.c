/*
 * workerloop: a worker of dispatchd. Registers, keeps a heartbeat parked at
 * dispatchd (its connection closing is how dispatchd learns at once that
 * the worker died), and runs closures in SLOTS threads: each takes a
 * closure, runs it (a process of its own, or a line to a --serve process),
 * and reports its end together with the request for the next one.
 *
 * The data tasks its heartbeat replies list run in lib/client/dataserve.c:
 * a reader per task, and a small HTTP server consumers fetch elements from.
 *
 * On SIGTERM or SIGINT it stops taking work, stops its closures (TERM, the
 * grace period, KILL), reports them aborted so that they run again at once
 * elsewhere, leaves, and exits 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "buf.h"
#include "cli.h"
#include "dataserve.h"
#include "dispatch_client.h"
#include "duration.h"
#include "log.h"
#include "parse.h"
#include "proc.h"
#include "sigfd.h"
#include "task.h"
#include "text.h"
#include "tls.h"

extern char **environ;

static const char synopsis[] =
    "usage: workerloop [-v] [-d ADDR] [-t TASK] [-j SLOTS] [--start-delay "
    "DUR]\n"
    "                  [--start-delay-max DUR] [--grace DUR] "
    "[--max-output BYTES]\n"
    "                  [--dir DIR] [--serve COMMAND] [--listen ADDR]\n"
    "                  [--host NAME] [--buffer BYTES] [--lease N]\n"
    "                  [--max-connections N] [--request-timeout DUR]\n"
    "                  [--reader-retries N] [--tls-cert FILE --tls-key FILE]\n";

#define ERR_TAIL 4096
#define POLL_MS 30000

struct opts {
	const char *addr;
	const char *task;
	long slots;
	int64_t start_delay, start_delay_max, grace;
	size_t max_output;
	const char *dir;
	const char *serve;
	const char *listen;
	char host[256];
	size_t buffer;
	long lease;
	long max_conns;
	int64_t request_ms;
	long reader_retries;
	const char *tls_cert, *tls_key;
};

/* A resource, as built on this worker in this incarnation. */
struct res {
	char name[132];
	int state; /* 0 building, 1 ready, 2 failed */
	char *message;
	int code;
	char dir[1280];
	struct res *next;
};

struct slot;

/* The worker: shared by every thread, guarded by mu. */
struct worker {
	struct opts o;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	char inc[17];
	unsigned long gen; /* incarnations of this process */
	long index;
	int64_t hb_timeout;
	atomic_int stopping;
	struct res *res;
	char workdir[1024];
	int made_workdir;
	sigset_t blocked;
	int sigfd; /* SIGTERM, SIGINT and SIGHUP, as they come */
	struct slot *slots;
	int hb_cancel[2];
	char err[512]; /* why registering failed */
	struct dataserve *ds;
};

/* One slot: a thread that runs one closure at a time. */
struct slot {
	struct worker *wk;
	int n;
	pthread_t th;
	struct dispatch_client *dc;
	int cancel[2]; /* wakes its take and its child's wait */
	pthread_mutex_t mu;
	pid_t pid;   /* the process running its closure, 0 */
	uint64_t id; /* the closure running, 0 */
	long attempt;
	int stop; /* 1: cancelled, 2: preempted */
	/* --serve */
	pid_t serve_pid;
	int serve_in, serve_out;
	struct buf serve_buf;
};

static struct worker W;

/* Registers (again): a new incarnation, resources to build anew, and
 * data tasks to be handed anew. */
static enum status
register_worker(struct worker *wk, struct dispatch_client *dc)
{
	json_t *reply;
	enum status st;

	st = dc_register(dc, wk->o.task, wk->o.slots, dataserve_address(wk->ds),
	    wk->o.host, HTTP_NO_DEADLINE, &reply);
	if (st != ST_OK) {
		snprintf(wk->err, sizeof(wk->err), "%s",
		    dispatch_client_error(dc));
		return st;
	}
	pthread_mutex_lock(&wk->mu);
	snprintf(wk->inc, sizeof(wk->inc), "%s",
	    json_string_value(json_object_get(reply, "incarnation")));
	wk->index = (long)json_integer_value(json_object_get(reply, "index"));
	wk->hb_timeout =
	    json_integer_value(json_object_get(reply, "heartbeat_timeout_ms"));
	wk->gen++;
	/* Resources are built again for each incarnation. */
	while (wk->res != NULL) {
		struct res *r = wk->res;
		wk->res = r->next;
		free(r->message);
		free(r);
	}
	pthread_cond_broadcast(&wk->cond);
	pthread_mutex_unlock(&wk->mu);
	json_decref(reply);
	dataserve_incarnation(wk->ds, wk->inc, wk->hb_timeout);
	log_debug("registered as %s, incarnation %s", wk->o.task, wk->inc);
	return 0;
}

static void
nap(int64_t ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void
wake(int fd)
{
	char c = 1;

	(void)!write(fd, &c, 1);
}

static void
drain_fd(int fd)
{
	char b[64];

	while (read(fd, b, sizeof(b)) > 0)
		;
}

static void
close_pair(int p[2])
{
	for (int i = 0; i < 2; i++)
		if (p[i] >= 0) {
			close(p[i]);
			p[i] = -1;
		}
}

/*
 * Whether exec failed for want of this machine's resources (memory, file
 * descriptors, processes), not because of the command it was given.
 */
static int
exec_errno_local(int e)
{
	return e == ENOMEM || e == EMFILE || e == ENFILE || e == EAGAIN;
}

/* Stops what slot s runs: why 1 cancelled, 2 preempted or superseded. */
static void
slot_stop(struct slot *s, int why)
{
	pthread_mutex_lock(&s->mu);
	if (s->id != 0 && s->stop == 0) {
		s->stop = why;
		wake(s->cancel[1]);
	}
	pthread_mutex_unlock(&s->mu);
}

/* Heartbeat. */

static void *
heartbeat_main(void *arg)
{
	struct worker *wk = arg;
	struct dispatch_client *dc;
	char err[512], inc[sizeof(wk->inc)];

	if ((dc = dispatch_client_new(wk->o.addr, err, sizeof(err))) == NULL)
		return NULL;
	dispatch_client_set_cancel(dc, wk->hb_cancel[0]);
	while (!atomic_load(&wk->stopping)) {
		json_t *reply, *errbody, *v;
		int64_t wait = wk->hb_timeout / 2, hd;
		enum status st;
		size_t i;

		pthread_mutex_lock(&wk->mu);
		snprintf(inc, sizeof(inc), "%s", wk->inc);
		pthread_mutex_unlock(&wk->mu);
		hd = duration_now_ms() + wait + wk->hb_timeout;
		st = dc_heartbeat(dc, wk->o.task, inc, wait, hd, &reply,
		    &errbody);
		json_decref(errbody);
		if (atomic_load(&wk->stopping))
			break;
		if (st == ST_ABORTED) {
			/* dispatchd failed this incarnation (it did not hear
			 * it in time, or restarted): its closures run
			 * elsewhere now. Stop them, and start again. */
			log_info("%s", dispatch_client_error(dc));
			for (long n = 0; n < wk->o.slots; n++)
				slot_stop(&wk->slots[n], 2);
			while (!atomic_load(&wk->stopping) &&
			    register_worker(wk, dc) != ST_OK) {
				log_info("cannot register: %s", wk->err);
				nap(1000);
			}
			continue;
		}
		if (st != ST_OK) {
			if (st != ST_CANCELLED)
				log_debug("heartbeat: %s",
				    dispatch_client_error(dc));
			nap(200);
			continue;
		}
		/* A reply without the list (an older dispatchd's) changes
		 * nothing. */
		if (json_is_array(json_object_get(reply, "tasks")))
			dataserve_tasks(wk->ds,
			    json_object_get(reply, "tasks"));
		json_array_foreach(json_object_get(reply, "stop"), i, v) {
			uint64_t id = (uint64_t)json_integer_value(
			    json_object_get(v, "id"));
			long at = (long)json_integer_value(
			    json_object_get(v, "attempt"));
			for (long n = 0; n < wk->o.slots; n++) {
				struct slot *s = &wk->slots[n];
				pthread_mutex_lock(&s->mu);
				int hit = s->id == id && s->attempt == at;
				pthread_mutex_unlock(&s->mu);
				if (hit) {
					log_debug("closure %" PRIu64
					          " cancelled: stopping it",
					    id);
					slot_stop(s, 1);
				}
			}
		}
		json_decref(reply);
	}
	dispatch_client_free(dc);
	return NULL;
}

/* Resources. */

static void
env_name(const char *name, char *out, size_t size)
{
	size_t j = snprintf(out, size, "MUSTER_RESOURCE_");

	for (const char *p = name; *p != '\0' && j + 1 < size; p++)
		out[j++] = (*p >= 'a' && *p <= 'z') ? (char)(*p - 32) :
		    ((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')) ?
		                                      *p :
		                                      '_';
	out[j] = '\0';
}

static void
report_resource(struct slot *s, const char *name, const char *state,
    const char *message)
{
	char inc[sizeof(s->wk->inc)];

	pthread_mutex_lock(&s->wk->mu);
	snprintf(inc, sizeof(inc), "%s", s->wk->inc);
	pthread_mutex_unlock(&s->wk->mu);
	dc_resource_state(s->dc, s->wk->o.task, inc, name, state, message,
	    duration_now_ms() + 10000);
}

static int mkdirs(const char *path);

/*
 * Runs argv in dir and waits; its exit code (127 or 126 when it cannot
 * be run at all), or -1 when this worker could not start it (err says
 * why).
 */
static int
run_resource(struct slot *s, char **argv, const char *dir, char *err,
    size_t errlen)
{
	char envdir[4200], envw[256];
	char *set[] = {envdir, envw, NULL};
	char **env = NULL;
	int ep[2] = {-1, -1}, devnull, status, e;
	pid_t pid;
	struct buf tail = {0};

	snprintf(envdir, sizeof(envdir), "MUSTER_RESOURCE_DIR=%s", dir);
	snprintf(envw, sizeof(envw), "MUSTER_WORKER=%s", s->wk->o.task);
	if (mkdirs(dir) < 0) {
		snprintf(err, errlen, "cannot make %.400s: %s", dir,
		    strerror(errno));
		return -1;
	}
	if ((env = proc_env_child(environ, set)) == NULL ||
	    pipe2(ep, O_CLOEXEC) < 0 ||
	    (devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
		snprintf(err, errlen, "%s",
		    strerror(env == NULL ? ENOMEM : errno));
		free(env);
		if (ep[0] >= 0) {
			close(ep[0]);
			close(ep[1]);
		}
		return -1;
	}
	struct proc_spec spec = {argv, env, &s->wk->blocked, SIGKILL, devnull,
	    devnull, ep[1], dir};
	pid = proc_spawn(&spec, &e, err, errlen);
	close(ep[1]);
	close(devnull);
	free(env);
	if (pid < 0) {
		close(ep[0]);
		return e != 0 && !exec_errno_local(e) ? proc_exec_status(e) :
		                                        -1;
	}
	for (;;) {
		char b[4096];
		ssize_t n = read(ep[0], b, sizeof(b));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		buf_append(&tail, b, (size_t)n);
	}
	close(ep[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (status != 0) {
		char how[64];
		size_t off = tail.len > 400 ? tail.len - 400 : 0;
		snprintf(err, errlen, "%s%s%.*s",
		    proc_status_text(status, how, sizeof(how)),
		    tail.len > 0 ? ": " : "", (int)(tail.len - off),
		    tail.data != NULL ? tail.data + off : "");
		/* One line for the message. */
		for (char *p = err; *p != '\0'; p++)
			if (*p == '\n')
				*p = ' ';
	}
	buf_free(&tail);
	return proc_status_code(status);
}

/*
 * Makes sure resource def is built on this worker: builds it (one slot
 * does, the others wait for it). 0 and its directory in dir; else its exit
 * code, with why in msg, or -1 when this worker could not start it.
 */
static int
ensure_resource(struct slot *s, json_t *def, char *dir, size_t dirlen,
    char *msg, size_t msglen)
{
	struct worker *wk = s->wk;
	const char *name = json_string_value(json_object_get(def, "name"));
	json_t *jargv = json_object_get(def, "argv"), *v;
	struct res *r;
	unsigned long gen;
	size_t i;
	int code;

	if (name == NULL || !json_is_array(jargv)) {
		snprintf(msg, msglen, "a resource without name or argv");
		return 1;
	}
	pthread_mutex_lock(&wk->mu);
	for (;;) {
		for (r = wk->res; r != NULL; r = r->next)
			if (strcmp(r->name, name) == 0)
				break;
		if (r == NULL || r->state != 0)
			break;
		pthread_cond_wait(&wk->cond, &wk->mu);
	}
	if (r != NULL) {
		code = r->state == 1 ? 0 : r->code;
		snprintf(dir, dirlen, "%s", r->dir);
		if (r->message != NULL)
			snprintf(msg, msglen, "%s", r->message);
		pthread_mutex_unlock(&wk->mu);
		return code;
	}
	if ((r = calloc(1, sizeof(*r))) == NULL) {
		pthread_mutex_unlock(&wk->mu);
		snprintf(msg, msglen, "out of memory");
		return 1;
	}
	snprintf(r->name, sizeof(r->name), "%s", name);
	snprintf(r->dir, sizeof(r->dir), "%s/%s/%s", wk->workdir, wk->inc,
	    name);
	gen = wk->gen;
	r->next = wk->res;
	wk->res = r;
	pthread_mutex_unlock(&wk->mu);

	report_resource(s, name, "building", NULL);
	char **argv = calloc(json_array_size(jargv) + 1, sizeof(char *));
	char err[1024] = "";
	if (argv != NULL) {
		json_array_foreach(jargv, i, v)
			argv[i] = (char *)json_string_value(v);
		log_debug("building resource %s in %s", name, r->dir);
		code = run_resource(s, argv, r->dir, err, sizeof(err));
	} else {
		snprintf(err, sizeof(err), "%s", strerror(ENOMEM));
		code = -1;
	}
	free(argv);
	if (code < 0)
		snprintf(msg, msglen, "resource %s could not be started: %s",
		    name, err);
	else if (code != 0)
		snprintf(msg, msglen, "resource %s failed on %s: %s", name,
		    wk->o.task, err);
	report_resource(s, name, code == 0 ? "ready" : "failed",
	    code == 0 ? NULL : msg);

	pthread_mutex_lock(&wk->mu);
	/* Still ours? A new incarnation freed the list meanwhile. */
	if (gen == wk->gen && code < 0) {
		/* This worker's failure, not the resource's: it is built
		 * again by the next closure that needs it. */
		struct res **pp = &wk->res;
		while (*pp != r)
			pp = &(*pp)->next;
		*pp = r->next;
		free(r);
	} else if (gen == wk->gen) {
		r->state = code == 0 ? 1 : 2;
		r->code = code;
		if (code != 0)
			r->message = strdup(msg);
	}
	snprintf(dir, dirlen, "%s/%s/%s", wk->workdir, wk->inc, name);
	pthread_cond_broadcast(&wk->cond);
	pthread_mutex_unlock(&wk->mu);
	return code;
}

/* Closures. */

struct run {
	uint64_t id;
	long attempt;
	const char *queue;
	json_t *spec;
	json_t *resources;
	/* the end */
	int exited, code;
	struct buf out, err;
	int truncated;
	char message[1280];
	int aborted;      /* stopped: preempted, or superseded */
	int skip;         /* cancelled: nothing to report */
	int start_failed; /* not started, this worker's failure: given back */
};

static void
tail_append(struct buf *b, const char *p, size_t n)
{
	buf_append(b, p, n);
	if (b->len > 2 * ERR_TAIL) {
		memmove(b->data, b->data + b->len - ERR_TAIL, ERR_TAIL);
		b->len = ERR_TAIL;
	}
}

static void
out_append(struct slot *s, struct run *r, const char *p, size_t n)
{
	size_t room = s->wk->o.max_output > r->out.len ?
	    s->wk->o.max_output - r->out.len :
	    0;

	if (n > room) {
		r->truncated = 1;
		n = room;
	}
	buf_append(&r->out, p, n);
}

static int
set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* What a closure sees set in its environment ("NAME=value" each). */
static char **
closure_vars(struct slot *s, struct run *r)
{
	json_t *env = json_object_get(r->spec, "env"), *v, *d;
	size_t n = json_object_size(env) + json_array_size(r->resources) + 8;
	char **set = calloc(n, sizeof(char *));
	const char *k;
	size_t i = 0, j;

	if (set == NULL)
		return NULL;
	asprintf(&set[i++], "MUSTER_CLOSURE_ID=%" PRIu64, r->id);
	asprintf(&set[i++], "MUSTER_ATTEMPT=%ld", r->attempt);
	asprintf(&set[i++], "MUSTER_WORKER=%s", s->wk->o.task);
	asprintf(&set[i++], "MUSTER_QUEUE=%s", r->queue);
	json_array_foreach(r->resources, j, d) {
		char en[200];
		const char *dir = json_string_value(json_object_get(d, "dir"));
		env_name(json_string_value(json_object_get(d, "name")), en,
		    sizeof(en));
		asprintf(&set[i++], "%s=%s", en, dir != NULL ? dir : "");
	}
	json_object_foreach(env, k, v)
		asprintf(&set[i++], "%s=%s", k, json_string_value(v));
	set[i] = NULL;
	return set;
}

static void
free_strv(char **v)
{
	for (size_t i = 0; v != NULL && v[i] != NULL; i++)
		free(v[i]);
	free(v);
}

static void not_started(struct slot *s, struct run *r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * r could not be started here, for a reason of this worker's (no file
 * descriptors, no memory, no fork, no /bin/sh for --serve): it goes back
 * to dispatchd, which runs it elsewhere or later and rests this worker.
 */
static void
not_started(struct slot *s, struct run *r, const char *fmt, ...)
{
	char why[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	r->start_failed = 1;
	snprintf(r->message, sizeof(r->message),
	    "cannot start closure %" PRIu64 " on %s: %s", r->id, s->wk->o.task,
	    why);
	log_info("%s: given back to dispatchd; this worker is unhealthy",
	    r->message);
}

/* Runs r as a process of its own, filling its end. */
static void
run_fork(struct slot *s, struct run *r)
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
	if (argv != NULL && (owned = closure_vars(s, r)) != NULL)
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
		not_started(s, r, "%s: %s", what, strerror(errno));
		close_pair(ip);
		close_pair(op);
		close_pair(ep);
		goto out;
	}
	struct proc_spec spec = {argv, env, &s->wk->blocked, SIGKILL, ip[0],
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
		if (e != 0 && !exec_errno_local(e)) {
			r->exited = 1;
			r->code = proc_exec_status(e);
			snprintf(r->message, sizeof(r->message), "%s", why);
		} else {
			not_started(s, r, "%s", why);
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
			drain_fd(s->cancel[0]);
			if (stop.kill_at == 0)
				proc_stop_begin(&stop, pid, SIGTERM,
				    s->wk->o.grace, now);
		}
		if (io >= 0 && pf[io].revents != 0) {
			ssize_t n = read(op[0], b, sizeof(b));
			if (n > 0)
				out_append(s, r, b, (size_t)n);
			else if (n == 0 || errno != EINTR)
				open_out = 0;
		}
		if (ie >= 0 && pf[ie].revents != 0) {
			ssize_t n = read(ep[0], b, sizeof(b));
			if (n > 0)
				tail_append(&r->err, b, (size_t)n);
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
			drain_fd(s->cancel[0]);
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
	free_strv(owned);
	buf_free(&in);
}

/* --serve: a persistent process per slot. */

static void
serve_close(struct slot *s, int kill_it)
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
			nap(10);
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
serve_start(struct slot *s, char *err, size_t errlen)
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
	struct proc_spec spec = {argv, env, &s->wk->blocked, SIGKILL, ip[0],
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
	s->serve_in = ip[1];
	s->serve_out = op[0];
	return 0;
}

/* One line from the serve process, or NULL when it ended or the slot was told to stop. */
static char *
serve_line(struct slot *s, int64_t deadline, int *timed_out)
{
	for (;;) {
		char *nl = s->serve_buf.data != NULL ?
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
		struct pollfd pf[2] = {{s->serve_out, POLLIN, 0},
		    {s->cancel[0], POLLIN, 0}};
		int64_t wait = deadline > 0 ? deadline - duration_now_ms() : -1;
		if (deadline > 0 && wait <= 0) {
			*timed_out = 1;
			return NULL;
		}
		if (poll(pf, 2, wait < 0 ? -1 : (int)wait) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (pf[1].revents != 0) {
			drain_fd(s->cancel[0]);
			pthread_mutex_lock(&s->mu);
			int stopped = s->stop;
			pthread_mutex_unlock(&s->mu);
			if (stopped)
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

static void
run_serve(struct slot *s, struct run *r)
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
		not_started(s, r, "--serve: %s", why);
		return;
	}
	jenv = json_object();
	/* The closure's environment, as the process would have had it
	 * (MUSTER_ and its own), for the serve process to apply. */
	owned = closure_vars(s, r);
	for (size_t i = 0; owned != NULL && owned[i] != NULL; i++) {
		char *eq = strchr(owned[i], '=');
		if (eq != NULL)
			json_object_setn_new(jenv, owned[i],
			    (size_t)(eq - owned[i]), json_string(eq + 1));
	}
	free_strv(owned);
	req = json_pack("{s:I,s:i,s:O,s:o}", "id", (json_int_t)r->id, "attempt",
	    (int)r->attempt, "argv", json_object_get(r->spec, "argv"), "env",
	    jenv);
	if (json_object_get(r->spec, "stdin") != NULL)
		json_object_set(req, "stdin",
		    json_object_get(r->spec, "stdin"));
	text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	size_t len = strlen(text), off = 0;
	text[len] = '\0';
	while (off < len + 1) {
		const char *p = off < len ? text + off : "\n";
		size_t n = off < len ? len - off : 1;
		ssize_t w = write(s->serve_in, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		off += (size_t)w;
	}
	free(text);
	line = serve_line(s, timeout > 0 ? duration_now_ms() + timeout : 0,
	    &timed_out);
	if (line == NULL) {
		pthread_mutex_lock(&s->mu);
		int stopped = s->stop;
		pthread_mutex_unlock(&s->mu);
		serve_close(s, 1);
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
		serve_close(s, 1);
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
		out_append(s, r, b.data, b.len);
	buf_reset(&b);
	if (e != NULL && text_base64_decode(&b, e, strlen(e)) == 0)
		tail_append(&r->err, b.data, b.len);
	buf_free(&b);
	json_decref(reply);
}

/* What a result says, as JSON text. */
static void
result_json(struct run *r, struct buf *b)
{
	size_t off = r->err.len > ERR_TAIL ? r->err.len - ERR_TAIL : 0;

	buf_printf(b, "{\"id\":%" PRIu64 ",\"attempt\":%ld", r->id, r->attempt);
	if (r->aborted) {
		buf_puts(b, ",\"aborted\":true}");
		return;
	}
	if (r->start_failed) {
		/* Given back, and this worker says why it could not. */
		json_t *m = json_string(r->message);
		char *t = json_dumps(m, JSON_ENCODE_ANY);
		buf_printf(b, ",\"aborted\":true,\"unhealthy\":%s}",
		    t != NULL ? t : "\"\"");
		free(t);
		json_decref(m);
		return;
	}
	buf_printf(b, r->exited ? ",\"exit\":%d" : ",\"signal\":%d", r->code);
	if (r->out.len > 0) {
		buf_puts(b, ",\"stdout\":\"");
		text_base64_encode(b, r->out.data, r->out.len);
		buf_puts(b, "\"");
	}
	if (r->truncated)
		buf_puts(b, ",\"stdout_truncated\":true");
	if (r->err.len > off) {
		buf_puts(b, ",\"stderr_tail\":\"");
		text_base64_encode(b, r->err.data + off, r->err.len - off);
		buf_puts(b, "\"");
	}
	if (r->message[0] != '\0') {
		json_t *m = json_string(r->message);
		char *s = json_dumps(m, JSON_ENCODE_ANY);
		buf_printf(b, ",\"message\":%s", s != NULL ? s : "\"\"");
		free(s);
		json_decref(m);
	}
	buf_puts(b, "}");
}

/* Runs one closure from the take reply. */
static void
run_one(struct slot *s, json_t *cl, struct run *r)
{
	json_t *defs = json_object_get(cl, "resources"), *d;
	size_t i;

	memset(r, 0, sizeof(*r));
	r->id = (uint64_t)json_integer_value(json_object_get(cl, "id"));
	r->attempt = (long)json_integer_value(json_object_get(cl, "attempt"));
	r->queue = json_string_value(json_object_get(cl, "queue"));
	if (r->queue == NULL)
		r->queue = "default";
	r->spec = json_object_get(cl, "spec");
	r->resources = json_array();
	pthread_mutex_lock(&s->mu);
	s->id = r->id;
	s->attempt = r->attempt;
	s->stop = 0;
	pthread_mutex_unlock(&s->mu);
	if (atomic_load(&s->wk->stopping))
		slot_stop(s, 2);
	json_array_foreach(defs, i, d) {
		char dir[4096] = "", msg[1200] = "";
		int code =
		    ensure_resource(s, d, dir, sizeof(dir), msg, sizeof(msg));
		if (code < 0) {
			not_started(s, r, "%s", msg);
			goto done;
		}
		if (code != 0) {
			r->exited = 1;
			r->code = code;
			snprintf(r->message, sizeof(r->message), "%s", msg);
			goto done;
		}
		json_array_append_new(r->resources,
		    json_pack("{s:O,s:s}", "name", json_object_get(d, "name"),
		        "dir", dir));
	}
	if (s->wk->o.serve != NULL)
		run_serve(s, r);
	else
		run_fork(s, r);
done:
	pthread_mutex_lock(&s->mu);
	if (s->stop == 1)
		r->skip = 1;
	else if (s->stop == 2)
		r->aborted = 1;
	s->id = 0;
	s->stop = 0;
	pthread_mutex_unlock(&s->mu);
	json_decref(r->resources);
	log_debug("closure %" PRIu64 " attempt %ld: %s %d%s", r->id, r->attempt,
	    r->exited ? "exit" : "signal", r->code,
	    r->aborted  ? " (stopped: reported aborted)" :
	        r->skip ? " (cancelled)" :
	                  "");
}

static void
start_delay(struct slot *s)
{
	struct worker *wk = s->wk;
	int64_t d = wk->o.start_delay * wk->index;

	if (wk->o.start_delay_max > 0 && d > wk->o.start_delay_max)
		d = wk->o.start_delay_max;
	if (d <= 0)
		return;
	struct pollfd pf = {s->cancel[0], POLLIN, 0};
	int64_t until = duration_now_ms() + d;
	while (!atomic_load(&wk->stopping)) {
		int64_t left = until - duration_now_ms();
		if (left <= 0)
			break;
		poll(&pf, 1, (int)left);
		drain_fd(s->cancel[0]);
	}
}

/*
 * Whether results refused with st are to be kept and sent again: dispatchd
 * did not take them (its disk is full, it is away or restarting, the
 * reply was lost), and the closures stay running there until it does.
 * They are dropped only when dispatchd will never take them: this
 * incarnation is gone (its closures were queued again), or the request
 * itself is wrong.
 */
static int
results_kept(enum status st)
{
	return st != ST_ABORTED && st != ST_INVALID_ARGUMENT &&
	    st != ST_NOT_FOUND;
}

static void *
slot_main(void *arg)
{
	struct slot *s = arg;
	struct worker *wk = s->wk;
	struct buf body = {0}; /* results dispatchd has not taken yet */
	unsigned long body_gen = 0;
	int held = 0; /* they were refused at least once */
	json_t *reply = NULL;
	char inc[sizeof(wk->inc)];
	unsigned long gen;

	start_delay(s);
	while (!atomic_load(&wk->stopping)) {
		json_t *errbody, *cl;
		int64_t hd, wait;
		enum status st;
		size_t i;

		pthread_mutex_lock(&wk->mu);
		memcpy(inc, wk->inc, sizeof(inc));
		gen = wk->gen;
		pthread_mutex_unlock(&wk->mu);
		if (body.len > 0 && body_gen != gen) {
			/* Registered again meanwhile: dispatchd queued this
			 * incarnation's closures again already. */
			log_info("slot %d: results of a former incarnation "
			         "dropped: their closures run again",
			    s->n);
			buf_reset(&body);
			held = 0;
		}
		wait = dispatch_poll_wait(HTTP_NO_DEADLINE, POLL_MS, &hd);
		st = dc_take(s->dc, wk->o.task, inc,
		    body.len > 0 ? body.data : NULL, body.len, 1, wait, hd,
		    DC_POLL, &reply, &errbody);
		json_decref(errbody);
		if (st == ST_CANCELLED || atomic_load(&wk->stopping))
			break;
		if (st != ST_OK && body.len > 0 && results_kept(st)) {
			if (!held)
				log_info("slot %d: dispatchd did not take its "
				         "results (%s: %s): kept, and sent "
				         "again until it does",
				    s->n, status_name(st),
				    dispatch_client_error(s->dc));
			held = 1;
			nap(200);
			continue;
		}
		if (held && st == ST_OK)
			log_info("slot %d: dispatchd took its results", s->n);
		if (body.len > 0 && st != ST_OK)
			log_info("slot %d: results dropped: %s", s->n,
			    dispatch_client_error(s->dc));
		buf_reset(&body);
		held = 0;
		if (st != ST_OK) {
			/* Not registered any more: the heartbeat registers
			 * again; wait for the new incarnation. */
			log_debug("slot %d: %s", s->n,
			    dispatch_client_error(s->dc));
			pthread_mutex_lock(&wk->mu);
			if (gen == wk->gen && st == ST_ABORTED) {
				struct timespec at;
				clock_gettime(CLOCK_REALTIME, &at);
				at.tv_sec += 1;
				pthread_cond_timedwait(&wk->cond, &wk->mu, &at);
			}
			pthread_mutex_unlock(&wk->mu);
			if (st != ST_ABORTED)
				nap(200);
			continue;
		}
		json_array_foreach(json_object_get(reply, "closures"), i, cl) {
			struct run r;
			run_one(s, cl, &r);
			pthread_mutex_lock(&wk->mu);
			int same = gen == wk->gen;
			pthread_mutex_unlock(&wk->mu);
			if (!r.skip && same) {
				buf_puts(&body,
				    body.len == 0 ? "{\"results\":[" : ",");
				result_json(&r, &body);
			}
			buf_free(&r.out);
			buf_free(&r.err);
		}
		if (body.len > 0) {
			buf_puts(&body, "]}");
			body_gen = gen;
		}
		json_decref(reply);
		reply = NULL;
	}
	json_decref(reply);
	/* Stopped with results in hand (aborted ones, or ends dispatchd has
	 * not taken): report them, so that they run again at once. What
	 * cannot be sent in time runs again once this worker is gone. */
	pthread_mutex_lock(&wk->mu);
	if (body.len > 0 && body_gen == wk->gen) {
		snprintf(inc, sizeof(inc), "%s", wk->inc);
		pthread_mutex_unlock(&wk->mu);
		dispatch_client_set_cancel(s->dc, -1);
		dc_take(s->dc, wk->o.task, inc, body.data, body.len, 0, 0,
		    duration_now_ms() + 5000, DC_REPEAT, NULL, NULL);
	} else {
		pthread_mutex_unlock(&wk->mu);
	}
	buf_free(&body);
	serve_close(s, 1);
	return NULL;
}

/* The working directory. */

static int
mkdirs(const char *path)
{
	char p[4096];

	snprintf(p, sizeof(p), "%s", path);
	for (char *q = p + 1; *q != '\0'; q++) {
		if (*q != '/')
			continue;
		*q = '\0';
		if (mkdir(p, 0700) < 0 && errno != EEXIST)
			return -1;
		*q = '/';
	}
	return mkdir(p, 0700) < 0 && errno != EEXIST ? -1 : 0;
}

static int
rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static int
parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
	    {"dispatcher", required_argument, NULL, 'd'},
	    {"task", required_argument, NULL, 't'},
	    {"slots", required_argument, NULL, 'j'},
	    {"start-delay", required_argument, NULL, 'S'},
	    {"start-delay-max", required_argument, NULL, 'M'},
	    {"grace", required_argument, NULL, 'g'},
	    {"max-output", required_argument, NULL, 'O'},
	    {"dir", required_argument, NULL, 'D'},
	    {"serve", required_argument, NULL, 's'},
	    {"listen", required_argument, NULL, 'L'},
	    {"host", required_argument, NULL, 'H'},
	    {"buffer", required_argument, NULL, 'B'},
	    {"lease", required_argument, NULL, 'l'},
	    {"max-connections", required_argument, NULL, 'C'},
	    {"request-timeout", required_argument, NULL, 'R'},
	    {"reader-retries", required_argument, NULL, 'r'},
	    {"tls-cert", required_argument, NULL, 'X'},
	    {"tls-key", required_argument, NULL, 'K'},
	    {"verbose", no_argument, NULL, 'v'},
	    CLI_STD_LONGOPTS,
	    {NULL, 0, NULL, 0},
	};
	const char *addr = NULL;
	int c, verbose = 0, port;
	struct task_name tn;
	char host[128];

	o->slots = 1;
	o->listen = "127.0.0.1:0";
	o->buffer = 64u << 20;
	o->lease = 16;
	o->reader_retries = 3;
	o->grace = 10000;
	o->max_output = 1u << 20;
	o->start_delay_max = 0;
	while (
	    (c = getopt_long(argc, argv, "+hvd:t:j:", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': addr = optarg; break;
		case 't': o->task = optarg; break;
		case 'j':
			if (cli_number_flag(synopsis, "-j", optarg, 1, 256,
			        &o->slots) != 0)
				return 2;
			break;
		case 'S':
			if (cli_duration_flag(synopsis, "--start-delay", optarg,
			        0, &o->start_delay) != 0)
				return 2;
			break;
		case 'M':
			if (cli_duration_flag(synopsis, "--start-delay-max",
			        optarg, 0, &o->start_delay_max) != 0)
				return 2;
			break;
		case 'g':
			if (cli_duration_flag(synopsis, "--grace", optarg, 0,
			        &o->grace) != 0)
				return 2;
			break;
		case 'O':
			if (parse_size(optarg, &o->max_output) < 0 ||
			    o->max_output > (64u << 20))
				return cli_usage_error(synopsis,
				    "--max-output %s is not a size up to 64M",
				    optarg);
			break;
		case 'D': o->dir = optarg; break;
		case 's':
			if (*optarg == '\0')
				return cli_usage_error(synopsis,
				    "--serve needs a command");
			o->serve = optarg;
			break;
		case 'L':
			if (parse_listen(optarg, host, sizeof(host), &port) < 0)
				return cli_usage_error(synopsis,
				    "--listen %s is not HOST:PORT", optarg);
			o->listen = optarg;
			break;
		case 'H':
			if (*optarg == '\0' ||
			    strlen(optarg) >= sizeof(o->host))
				return cli_usage_error(synopsis,
				    "--host needs a name of up to %zu bytes",
				    sizeof(o->host) - 1);
			snprintf(o->host, sizeof(o->host), "%s", optarg);
			break;
		case 'B':
			if (parse_size(optarg, &o->buffer) < 0 ||
			    o->buffer < (64u << 10))
				return cli_usage_error(synopsis,
				    "--buffer %s is not a size of 64k or more",
				    optarg);
			break;
		case 'l':
			if (cli_number_flag(synopsis, "--lease", optarg, 1,
			        1024, &o->lease) != 0)
				return 2;
			break;
		case 'C':
			if (cli_number_flag(synopsis, "--max-connections",
			        optarg, 1, 65536, &o->max_conns) != 0)
				return 2;
			break;
		case 'R':
			if (cli_duration_flag(synopsis, "--request-timeout",
			        optarg, 1, &o->request_ms) != 0)
				return 2;
			break;
		case 'r':
			if (cli_number_flag(synopsis, "--reader-retries",
			        optarg, 0, 1000, &o->reader_retries) != 0)
				return 2;
			break;
		case 'X': o->tls_cert = optarg; break;
		case 'K': o->tls_key = optarg; break;
		case 'v': verbose = 1; break;
		default: return cli_std_option(c, synopsis);
		}
	}
	if (optind != argc)
		return cli_usage_error(synopsis, "unexpected argument %s",
		    argv[optind]);
	if ((o->tls_cert != NULL) != (o->tls_key != NULL))
		return cli_usage_error(synopsis,
		    "--tls-cert and --tls-key go together");
	if (o->tls_cert != NULL) {
		/* Checked now, as the daemons do: a bad file is a usage
		 * error, not a server that never comes up. */
		char err[512];
		struct tls_server *probe =
		    tls_server_new(o->tls_cert, o->tls_key, err, sizeof(err));
		if (probe == NULL)
			return cli_usage_error(synopsis, "%s", err);
		tls_server_free(probe);
	}
	if (o->task == NULL)
		o->task = getenv("MUSTER_TASK");
	if (o->task == NULL || *o->task == '\0')
		return cli_usage_error(synopsis,
		    "no worker name: give -t TASK or set MUSTER_TASK");
	if (task_parse(o->task, &tn) < 0)
		return cli_usage_error(synopsis,
		    "%s is not a task name (JOB:INDEX, like worker:3)",
		    o->task);
	if (o->host[0] == '\0' && gethostname(o->host, sizeof(o->host)) < 0)
		snprintf(o->host, sizeof(o->host), "localhost");
	o->host[sizeof(o->host) - 1] = '\0';
	o->addr = cli_dispatch_addr(addr);
	log_init(argv[0], verbose);
	return 0;
}

static const int stop_sigs[] = {SIGTERM, SIGINT, SIGHUP};

/*
 * The first registration, for as long as dispatchd is away, but no longer
 * than a signal: SIGTERM or SIGINT ends it at once (exit 128 + the
 * signal), as before any work was taken there is nothing to hand back.
 * 0, or the exit code.
 */
static int
register_first(struct worker *wk, struct dispatch_client *dc)
{
	enum status st;
	int sig;

	dispatch_client_set_cancel(dc, wk->sigfd);
	while ((st = register_worker(wk, dc)) == ST_CANCELLED) {
		if ((sig = sigfd_read(wk->sigfd)) == SIGHUP || sig == 0)
			continue;
		log_info("%s: stopped by %s before it could register with %s",
		    wk->o.task, strsignal(sig), wk->o.addr);
		return 128 + sig;
	}
	dispatch_client_set_cancel(dc, -1);
	if (st != ST_OK)
		return cli_fail(st, "%s", wk->err);
	return 0;
}

int
main(int argc, char **argv)
{
	struct worker *wk = &W;
	struct dispatch_client *dc;
	char err[512], name[TASK_JOB_MAX + 32];
	struct task_name tn;
	int rc, sig;

	log_init(argv[0], 0);
	if ((rc = parse_args(argc, argv, &wk->o)) != 0)
		return rc;
	/* Always the JOB:INDEX spelling, whatever was given. */
	task_parse(wk->o.task, &tn);
	wk->o.task = strdup(task_format(&tn, name, sizeof(name)));
	pthread_mutex_init(&wk->mu, NULL);
	pthread_cond_init(&wk->cond, NULL);
	/* Before any thread starts: every thread has them blocked, and they
	 * wait on the descriptor (a shell may have started us with them
	 * ignored: they are ours again). */
	if ((wk->sigfd = sigfd_open(stop_sigs,
	         sizeof(stop_sigs) / sizeof(stop_sigs[0]), &wk->blocked)) < 0)
		return cli_fail(ST_INTERNAL, "signalfd: %s", strerror(errno));
	signal(SIGPIPE, SIG_IGN);
	if (wk->o.dir != NULL) {
		snprintf(wk->workdir, sizeof(wk->workdir), "%s", wk->o.dir);
		if (mkdirs(wk->workdir) < 0)
			return cli_fail(ST_INVALID_ARGUMENT,
			    "cannot make --dir %s: %s", wk->o.dir,
			    strerror(errno));
	} else {
		const char *tmp = getenv("TMPDIR");
		snprintf(wk->workdir, sizeof(wk->workdir),
		    "%s/workerloop.XXXXXX",
		    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
		if (mkdtemp(wk->workdir) == NULL)
			return cli_fail(ST_INTERNAL, "mkdtemp %s: %s",
			    wk->workdir, strerror(errno));
		wk->made_workdir = 1;
	}
	if ((dc = dispatch_client_new(wk->o.addr, err, sizeof(err))) == NULL)
		return cli_fail(ST_INVALID_ARGUMENT, "%s", err);
	/* Listening first: registration advertises the address. */
	struct dataserve_config dsc = {wk->o.listen, wk->o.host, wk->o.addr,
	    wk->o.task, wk->o.buffer, wk->o.lease, &wk->blocked,
	    wk->o.max_conns, wk->o.request_ms, wk->o.reader_retries,
	    wk->o.tls_cert, wk->o.tls_key};
	if ((wk->ds = dataserve_start(&dsc, err, sizeof(err))) == NULL) {
		rc = cli_fail(ST_UNAVAILABLE, "%s", err);
		goto out;
	}
	if ((rc = register_first(wk, dc)) != 0)
		goto out;
	if (pipe2(wk->hb_cancel, O_CLOEXEC) < 0 ||
	    (wk->slots = calloc((size_t)wk->o.slots, sizeof(*wk->slots))) ==
	        NULL) {
		rc = cli_fail(ST_INTERNAL, "%s", strerror(errno));
		goto out;
	}
	pthread_t hb;
	pthread_create(&hb, NULL, heartbeat_main, wk);
	for (long n = 0; n < wk->o.slots; n++) {
		struct slot *s = &wk->slots[n];
		s->wk = wk;
		s->n = (int)n;
		pthread_mutex_init(&s->mu, NULL);
		if (pipe2(s->cancel, O_CLOEXEC | O_NONBLOCK) < 0 ||
		    (s->dc = dispatch_client_new(wk->o.addr, err,
		         sizeof(err))) == NULL) {
			rc = cli_fail(ST_INTERNAL, "%s", err);
			/* The heartbeat hands dataserve tasks until it ends. */
			atomic_store(&wk->stopping, 1);
			wake(wk->hb_cancel[1]);
			pthread_join(hb, NULL);
			goto out;
		}
		dispatch_client_set_cancel(s->dc, s->cancel[0]);
		pthread_create(&s->th, NULL, slot_main, s);
	}
	log_info("%s: %ld slot%s, taking closures from %s; serving data on %s",
	    wk->o.task, wk->o.slots, wk->o.slots == 1 ? "" : "s", wk->o.addr,
	    dataserve_address(wk->ds));
	while (sigwait(&wk->blocked, &sig) == 0 && sig == SIGHUP)
		;
	log_info("%s: stopping (%s): its closures go back to the queue",
	    wk->o.task, strsignal(sig));
	atomic_store(&wk->stopping, 1);
	for (long n = 0; n < wk->o.slots; n++) {
		struct slot *s = &wk->slots[n];
		pthread_mutex_lock(&s->mu);
		if (s->id != 0 && s->stop == 0)
			s->stop = 2;
		pthread_mutex_unlock(&s->mu);
		wake(s->cancel[1]);
	}
	for (long n = 0; n < wk->o.slots; n++)
		pthread_join(wk->slots[n].th, NULL);
	/* Leave, then let the heartbeat go (in that order: a heartbeat
	 * that closes first looks like a worker that died). */
	dc_leave(dc, wk->o.task, wk->inc, duration_now_ms() + 5000);
	wake(wk->hb_cancel[1]);
	pthread_join(hb, NULL);
	rc = 0;
out:
	/* After the heartbeat, the only thread that hands it tasks. */
	dataserve_stop(wk->ds);
	dispatch_client_free(dc);
	if (wk->made_workdir)
		nftw(wk->workdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return rc;
}
