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
	pid_t *pids;
	const char *token_file;
	int tls;
	void (*started)(struct http_server *, void *);
} local;

extern char **environ;

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
	if (dc->cq.max_spec == 0)
		dc->cq.max_spec = 16u << 20;
	/* A schedule request carries many closures; a result, a value of
	 * up to 16 MiB in base64. */
	d->max_body = dc->cq.max_spec / 3 * 4 + (64u << 20);
	return 0;
}

/* The workerloop beside this dispatchd, or PATH's. */
static void
workerloop_path(char *out, size_t len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (n > 0) {
		self[n] = '\0';
		if ((slash = strrchr(self, '/')) != NULL) {
			*slash = '\0';
			snprintf(out, len, "%s/workerloop", self);
			if (access(out, X_OK) == 0)
				return;
		}
	}
	snprintf(out, len, "workerloop");
}

/* The server listens: the workers start, each told where it is. */
static void
local_started(struct http_server *srv, void *arg)
{
	char prog[PATH_MAX + 16], addr[64], name[32], why[256],
	    tok[PATH_MAX + 32];
	char *set[2] = {NULL, NULL};
	char **env;
	int e;

	if (local.started != NULL)
		local.started(srv, arg);
	workerloop_path(prog, sizeof(prog));
	snprintf(addr, sizeof(addr), "%s127.0.0.1:%d",
	    local.tls ? "https://" : "", http_server_port(srv));
	if (local.token_file != NULL) {
		snprintf(tok, sizeof(tok), "MUSTER_TOKEN_FILE=%s",
		    local.token_file);
		set[0] = tok;
	}
	env = proc_env(environ, set);
	for (long i = 0; i < local.n; i++) {
		char *argv[] = {prog, "--supervise", "-d", addr, "-t", name,
		    NULL};
		struct proc_spec spec = {argv, env, NULL, SIGTERM, -1, -1, -1,
		    NULL};

		snprintf(name, sizeof(name), "local:%ld", i);
		if ((local.pids[i] = proc_spawn(&spec, &e, why, sizeof(why))) <
		    0) {
			log_info("cannot start %s: %s", name, why);
			local.pids[i] = 0;
		}
	}
	free(env);
	log_info("%ld local worker%s (%s --supervise), local:0 to local:%ld",
	    local.n, local.n == 1 ? "" : "s", prog, local.n - 1);
}

/*
 * SIGTERM or Ctrl-C: each worker gets TERM (its supervisor passes it
 * on), gives its closures back and leaves while this daemon still serves;
 * after 15 s (a worker's grace is 10) what is left is killed.
 */
static void
local_stopping(void *arg)
{
	struct timespec tick = {0, 20 * 1000000};
	int64_t until = duration_now_ms() + 15000;
	long left = 0;

	(void)arg;
	for (long i = 0; i < local.n; i++)
		if (local.pids[i] > 0 && kill(local.pids[i], SIGTERM) == 0)
			left++;
	while (left > 0 && duration_now_ms() < until) {
		left = 0;
		for (long i = 0; i < local.n; i++) {
			if (local.pids[i] <= 0)
				continue;
			if (waitpid(local.pids[i], NULL, WNOHANG) != 0)
				local.pids[i] = 0;
			else
				left++;
		}
		if (left > 0)
			nanosleep(&tick, NULL);
	}
	for (long i = 0; i < local.n; i++) {
		if (local.pids[i] > 0) {
			log_info("local:%ld: still running after 15s: killed",
			    i);
			kill(-local.pids[i], SIGKILL);
			waitpid(local.pids[i], NULL, 0);
		}
	}
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
