/*
 * dispatchd: the work dispatcher of a muster job: closure queues with
 * at-least-once execution on workerloop workers, and datasets read by
 * jobs whose splits workers lease.
 */
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "daemon.h"
#include "dispatch.h"
#include "duration.h"
#include "log.h"
#include "parse.h"
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
    "                  [--journal-max-bytes BYTES]]\n";

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
	default: return cli_std_option(c, synopsis);
	}
}

static int
configure(struct daemon_options *d, void *cfg)
{
	struct dispatch_config *dc = cfg;

	if (dc->cq.max_spec == 0)
		dc->cq.max_spec = 16u << 20;
	/* A schedule request carries many closures; a result, a value of
	 * up to 16 MiB in base64. */
	d->max_body = dc->cq.max_spec / 3 * 4 + (64u << 20);
	return 0;
}

static enum status
open_service(void *cfg, const struct daemon_options *o,
    struct daemon_service *svc, char *err, size_t errlen)
{
	return dispatch_open(cfg, o, svc, err, errlen);
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
