/*
 * dispatchd: the work dispatcher of a muster job: closure queues with
 * at-least-once execution on workerloop workers, and datasets read by
 * jobs whose splits workers lease.
 *
 * With --local-workers N it is a whole cluster on one machine: once it
 * listens it starts N workers (workerloop --supervise, local:0 to
 * local:N-1) in process groups of their own, and on SIGINT or SIGTERM
 * (Ctrl-C) it stops them, while it still serves their leaving, before it
 * stops itself.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "daemon.h"
#include "dispatch.h"
#include "duration.h"
#include "log.h"
#include "parse.h"
#include "proc.h"
#include "task.h"

static const char synopsis[] =
    "usage: dispatchd [-nv] [-l HOST:PORT] [--port-file FILE] "
    "[--heartbeat-timeout DUR]\n"
    "                 [--queue-max N] [--worker-recovery DUR] "
    "[--watchdog DUR]\n"
    "                 [--max-worker-deaths N] [--max-closure-size BYTES]\n"
    "                 [--max-store-bytes BYTES]\n"
    "                 [--static-workers NAME,...] [--client-timeout DUR] "
    "[--job-gc-timeout DUR]\n"
    "                 [--threads N] [--max-connections N] "
    "[--max-inflight-bytes BYTES]\n"
    "                 [--request-timeout DUR] [--max-wait DUR]\n"
    "                 [--token-file FILE] [--insecure]\n"
    "                 [--tls-cert FILE --tls-key FILE [--tls-client-ca "
    "FILE]]\n"
    "                 [--state-dir DIR [--fsync always|batch|none]\n"
    "                  [--journal-max-bytes BYTES]] [--local-workers N]\n";

/* --local-workers: the workers it starts, and the hooks it wraps. */
static struct local {
	long n;
	pid_t *pids; /* each worker's supervisor; 0: none now */
	char prog[PATH_MAX + 32];
	char addr[300];
	char **env;
	int stopping;
	pthread_mutex_t mu; /* pids and stopping */
	pthread_cond_t cv;  /* a supervisor ended */
	pthread_t watcher;
	int watching;
	const char *token_file;
	int tls;
	void (*started)(struct http_server *, void *);
} local = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

extern char **environ;

static int workerloop_path(char *out, size_t len);

/*
 * The workers of the static sharding modes, in shard order, as workers
 * name themselves (JOB:INDEX: "w0" is spelled "w0:0").
 */
static int
static_workers(const char *arg, struct ds_config *c)
{
	char *list = strdup(arg), *save = NULL, name[TASK_JOB_MAX + 32];

	if (list == NULL)
		return -1;
	for (char *s = strtok_r(list, ",", &save); s != NULL;
	     s = strtok_r(NULL, ",", &save)) {
		struct task_name tn;
		char **v;
		if (task_parse(s, &tn) < 0)
			goto bad;
		task_format(&tn, name, sizeof(name));
		for (size_t i = 0; i < c->nstatic; i++)
			if (strcmp(c->static_workers[i], name) == 0)
				goto bad;
		if ((v = realloc(c->static_workers,
		         (c->nstatic + 1) * sizeof(*v))) == NULL)
			goto bad;
		c->static_workers = v;
		if ((v[c->nstatic] = strdup(name)) == NULL)
			goto bad;
		c->nstatic++;
	}
	free(list);
	return c->nstatic > 0 ? 0 : -1;
bad:
	free(list);
	return -1;
}

static const struct option longopts[] = {
    DAEMON_LONGOPTS,
    {"heartbeat-timeout", required_argument, NULL, 'H'},
    {"queue-max", required_argument, NULL, 'Q'},
    {"worker-recovery", required_argument, NULL, 'R'},
    {"watchdog", required_argument, NULL, 'W'},
    {"max-worker-deaths", required_argument, NULL, 'D'},
    {"max-closure-size", required_argument, NULL, 'M'},
    {"max-store-bytes", required_argument, NULL, 'B'},
    {"static-workers", required_argument, NULL, 'S'},
    {"client-timeout", required_argument, NULL, 'C'},
    {"job-gc-timeout", required_argument, NULL, 'G'},
    {"local-workers", required_argument, NULL, 'L'},
    {NULL, 0, NULL, 0},
};

static int
option(int c, const char *arg, void *cfg)
{
	struct dispatch_config *dc = cfg;
	long n;

	switch (c) {
	case 'H':
		return cli_duration_flag(synopsis, "--heartbeat-timeout", arg,
		    100, &dc->cq.hb_timeout_ms);
	case 'Q':
		if (cli_number_flag(synopsis, "--queue-max", arg, 1, 1L << 30,
		        &n) != 0)
			return 2;
		dc->cq.queue_max = (size_t)n;
		return 0;
	case 'R':
		return cli_duration_flag(synopsis, "--worker-recovery", arg, 1,
		    &dc->worker_recovery_ms);
	case 'W':
		return cli_duration_flag(synopsis, "--watchdog", arg, 10,
		    &dc->watchdog_ms);
	case 'D':
		if (cli_number_flag(synopsis, "--max-worker-deaths", arg, 1,
		        1000000, &n) != 0)
			return 2;
		dc->cq.max_deaths = n;
		return 0;
	case 'M':
		if (parse_size(arg, &dc->cq.max_spec) < 0 ||
		    dc->cq.max_spec < 1024)
			return cli_usage_error(synopsis,
			    "--max-closure-size %s is not a size of "
			    "at least 1K (like 64K, 16M)",
			    arg);
		return 0;
	case 'B':
		if (parse_size(arg, &dc->cq.max_store) < 0 ||
		    dc->cq.max_store < 1024)
			return cli_usage_error(synopsis,
			    "--max-store-bytes %s is not a size of "
			    "at least 1K (like 512M, 4G)",
			    arg);
		return 0;
	case 'S':
		if (static_workers(arg, &dc->ds) < 0) {
			fprintf(stderr,
			    "dispatchd: --static-workers %s: a list of "
			    "worker names (JOB:INDEX), comma-separated, "
			    "each once\n%s",
			    arg, synopsis);
			return 2;
		}
		return 0;
	case 'C':
		return cli_duration_flag(synopsis, "--client-timeout", arg, 1,
		    &dc->ds.client_timeout_ms);
	case 'G':
		return cli_duration_flag(synopsis, "--job-gc-timeout", arg, 1,
		    &dc->ds.gc_timeout_ms);
	case 'L':
		return cli_number_flag(synopsis, "--local-workers", arg, 1, 256,
		    &local.n);
	default: return cli_std_option(c, synopsis);
	}
}

static int
configure(struct daemon_options *d, void *cfg)
{
	struct dispatch_config *dc = cfg;

	if (local.n > 0 && d->store != NULL)
		return cli_usage_error(synopsis,
		    "--local-workers is for one dispatchd on one machine, "
		    "not for replicas (--store)");
	if (local.n > 0 && workerloop_path(local.prog, sizeof(local.prog)) < 0)
		return cli_usage_error(synopsis,
		    "--local-workers: no workerloop beside dispatchd, nor on "
		    "the PATH");
	if (dc->cq.max_spec == 0)
		dc->cq.max_spec = 16u << 20;
	/* A schedule request carries many closures; a result, a value of
	 * up to 16 MiB in base64. */
	d->max_body = dc->cq.max_spec / 3 * 4 + (64u << 20);
	return 0;
}

/* The workerloop beside this dispatchd, or PATH's; -1 when neither. */
static int
workerloop_path(char *out, size_t len)
{
	char self[PATH_MAX], *slash, *path, *save = NULL;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n > 0) {
		self[n] = '\0';
		if ((slash = strrchr(self, '/')) != NULL) {
			*slash = '\0';
			if (snprintf(out, len, "%.*s/workerloop",
			        (int)(len > 16 ? len - 16 : 0),
			        self) < (int)len &&
			    access(out, X_OK) == 0)
				return 0;
		}
	}
	if ((path = strdup(getenv("PATH") != NULL ? getenv("PATH") : "")) ==
	    NULL)
		return -1;
	for (char *d = strtok_r(path, ":", &save); d != NULL;
	     d = strtok_r(NULL, ":", &save)) {
		if (snprintf(out, len, "%s/workerloop", *d != '\0' ? d : ".") <
		        (int)len &&
		    access(out, X_OK) == 0) {
			free(path);
			return 0;
		}
	}
	free(path);
	return -1;
}

/* Starts worker i's supervisor (local.mu held, or no thread yet). */
static void
local_spawn(long i)
{
	char name[32], why[256];
	char *argv[] = {local.prog, "--supervise", "-d", local.addr, "-t", name,
	    NULL};
	struct proc_spec spec = {argv, local.env, NULL, SIGTERM, -1, -1, -1,
	    NULL};
	int e;

	snprintf(name, sizeof(name), "local:%ld", i);
	if ((local.pids[i] = proc_spawn(&spec, &e, why, sizeof(why))) < 0) {
		log_info("cannot start %s: %s", name, why);
		local.pids[i] = 0;
	}
}

/*
 * Reaps the supervisors as they end. One killed (kill -9 of the
 * supervisor itself) is started again a second later; one that ended by
 * itself was stopped on purpose or cannot work as configured (a refused
 * token: its log says), and is not. Ends when none is left.
 */
static void *
local_watch(void *arg)
{
	(void)arg;
	for (;;) {
		char what[64];
		int status;
		pid_t pid = waitpid(-1, &status, 0);
		long i;

		if (pid < 0 && errno == EINTR)
			continue;
		if (pid < 0)
			return NULL; /* none left */
		pthread_mutex_lock(&local.mu);
		for (i = 0; i < local.n && local.pids[i] != pid; i++)
			;
		if (i < local.n) {
			local.pids[i] = 0;
			pthread_cond_broadcast(&local.cv);
		}
		if (i < local.n && !local.stopping) {
			proc_status_text(status, what, sizeof(what));
			if (WIFSIGNALED(status)) {
				log_info("local:%ld: its supervisor (pid %ld) "
				         "%s: starting it again in 1s",
				    i, (long)pid, what);
				pthread_mutex_unlock(&local.mu);
				sleep(1);
				pthread_mutex_lock(&local.mu);
				if (!local.stopping)
					local_spawn(i);
			} else {
				log_info("local:%ld: its supervisor (pid %ld) "
				         "%s: not started again",
				    i, (long)pid, what);
			}
		}
		pthread_mutex_unlock(&local.mu);
	}
}

/* The server listens: the workers start, each told where it is (the
 * address it listens on; loopback for a wildcard one). */
static void
local_started(struct http_server *srv, void *arg)
{
	char tok[PATH_MAX + 32];
	char *set[2] = {NULL, NULL};
	const char *h = local.addr; /* the host, put there by open_service */
	char host[256];

	if (local.started != NULL)
		local.started(srv, arg);
	if (strcmp(h, "0.0.0.0") == 0)
		h = "127.0.0.1";
	else if (strcmp(h, "::") == 0)
		h = "::1";
	snprintf(host, sizeof(host), strchr(h, ':') != NULL ? "[%s]" : "%s", h);
	snprintf(local.addr, sizeof(local.addr), "%s%s:%d",
	    local.tls ? "https://" : "", host, http_server_port(srv));
	if (local.token_file != NULL) {
		snprintf(tok, sizeof(tok), "MUSTER_TOKEN_FILE=%s",
		    local.token_file);
		set[0] = tok;
	}
	local.env = proc_env(environ, set);
	pthread_mutex_lock(&local.mu);
	for (long i = 0; i < local.n; i++)
		local_spawn(i);
	if (pthread_create(&local.watcher, NULL, local_watch, NULL) == 0)
		local.watching = 1;
	pthread_mutex_unlock(&local.mu);
	log_info("%ld local worker%s (%s --supervise -d %s), local:0 to "
	         "local:%ld",
	    local.n, local.n == 1 ? "" : "s", local.prog, local.addr,
	    local.n - 1);
}

/* Signals each supervisor still there. */
static void
local_signal(int sig)
{
	for (long i = 0; i < local.n; i++)
		if (local.pids[i] > 0)
			kill(local.pids[i], sig);
}

/* Waits (local.mu held) until no supervisor is left (the watcher reaps
 * them) or until; how many are. */
static long
local_wait(int64_t until)
{
	for (;;) {
		long left = 0;
		struct timespec ts;

		for (long i = 0; i < local.n; i++)
			left += local.pids[i] > 0;
		if (left == 0 || duration_now_ms() >= until)
			return left;
		ts = duration_realtime_in(until - duration_now_ms() + 1);
		pthread_cond_timedwait(&local.cv, &local.mu, &ts);
	}
}

/*
 * SIGTERM or Ctrl-C: each worker gets TERM (its supervisor passes it
 * on), gives its closures back and leaves while this daemon still serves;
 * one still there after 15 s (a worker's grace is 10) gets a second TERM,
 * which its supervisor turns into KILL (its closures' processes with it);
 * a supervisor still there 5 s later is killed.
 */
static void
local_stopping(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&local.mu);
	local.stopping = 1;
	local_signal(SIGTERM);
	if (local_wait(duration_now_ms() + 15000) > 0) {
		log_info("local workers still running after 15s: killed");
		local_signal(SIGTERM);
		if (local_wait(duration_now_ms() + 5000) > 0)
			for (long i = 0; i < local.n; i++)
				if (local.pids[i] > 0)
					kill(-local.pids[i], SIGKILL);
	}
	pthread_mutex_unlock(&local.mu);
	if (local.watching)
		pthread_join(local.watcher, NULL);
	free(local.env);
}

static enum status
open_service(void *cfg, const struct daemon_options *o,
    struct daemon_service *svc, char *err, size_t errlen)
{
	enum status st = dispatch_open(cfg, o, svc, err, errlen);

	if (st != ST_OK || local.n == 0)
		return st;
	if ((local.pids = calloc((size_t)local.n, sizeof(pid_t))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	local.token_file = o->token_file;
	local.tls = o->tls_cert_pem != NULL;
	snprintf(local.addr, sizeof(local.addr), "%s", o->host);
	local.started = svc->started;
	svc->started = local_started;
	svc->stopping = local_stopping;
	return ST_OK;
}

int
main(int argc, char **argv)
{
	static struct dispatch_config dc;
	static const struct daemon_program p = {"dispatchd", 7701, synopsis,
	    longopts, &dc, option, configure, open_service};

	/*
	 * Values are held until forgotten, between requests whose bodies
	 * come and go: allocations of 128 KiB and more get pages of their
	 * own (glibc would raise this threshold as they are freed, and carve
	 * later values out of the heap between freed bodies, which held
	 * 1.5 to 2.9 times the values).
	 */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	return daemon_main(&p, argc, argv);
}
