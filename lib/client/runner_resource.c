/*
 * runner_resource.c: the resources a closure needs, built on this worker
 * once per incarnation, each in a directory of its own under the
 * runner's (DIR/INCARNATION/NAME): the first slot that needs one builds
 * it, and the others wait for it. dispatchd hears of each as it goes
 * (building, then ready or failed).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "duration.h"
#include "log.h"
#include "proc.h"
#include "runner_int.h"

extern char **environ;

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

int
runner_dir_make(const char *dir, char *path, size_t size, int *made)
{
	const char *tmp = getenv("TMPDIR");

	*made = 0;
	if (dir != NULL) {
		snprintf(path, size, "%s", dir);
		return mkdirs(path);
	}
	snprintf(path, size, "%s/workerloop.XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	if (mkdtemp(path) == NULL)
		return -1;
	*made = 1;
	return 0;
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

void
runner_dir_remove(const char *path)
{
	nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

void
runner_resources_clear(struct runner *wk)
{
	while (wk->res != NULL) {
		struct runner_res *r = wk->res;
		wk->res = r->next;
		free(r->message);
		free(r);
	}
}

static void
report_resource(struct runner_slot *s, const char *name, const char *state,
    const char *message)
{
	char inc[sizeof(s->wk->inc)];

	pthread_mutex_lock(&s->wk->mu);
	snprintf(inc, sizeof(inc), "%s", s->wk->inc);
	pthread_mutex_unlock(&s->wk->mu);
	dc_resource_state(s->dc, s->wk->o.task, inc, name, state, message,
	    duration_now_ms() + 10000);
}

/*
 * Runs argv in dir and waits; its exit code (127 or 126 when it cannot
 * be run at all), or -1 when this worker could not start it (err says
 * why).
 */
static int
run_resource(struct runner_slot *s, char **argv, const char *dir, char *err,
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
	struct proc_spec spec = {argv, env, s->wk->o.blocked, SIGKILL, devnull,
	    devnull, ep[1], dir};
	pid = proc_spawn(&spec, &e, err, errlen);
	close(ep[1]);
	close(devnull);
	free(env);
	if (pid < 0) {
		close(ep[0]);
		return e != 0 && !runner_exec_local(e) ? proc_exec_status(e) :
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

int
runner_resource_ensure(struct runner_slot *s, json_t *def, char *dir,
    size_t dirlen, char *msg, size_t msglen)
{
	struct runner *wk = s->wk;
	const char *name = json_string_value(json_object_get(def, "name"));
	json_t *jargv = json_object_get(def, "argv"), *v;
	struct runner_res *r;
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
	snprintf(r->dir, sizeof(r->dir), "%s/%s/%s", wk->o.dir, wk->inc, name);
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
		struct runner_res **pp = &wk->res;
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
	snprintf(dir, dirlen, "%s/%s/%s", wk->o.dir, wk->inc, name);
	pthread_cond_broadcast(&wk->cond);
	pthread_mutex_unlock(&wk->mu);
	return code;
}
