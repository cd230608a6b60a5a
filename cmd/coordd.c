/*
 * coordd: the coordination service of a muster job.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "coord.h"
#include "daemon.h"
#include "duration.h"
#include "log.h"
#include "parse.h"

static const char synopsis[] =
    "usage: coordd [-nv] [-l HOST:PORT] [--port-file FILE] "
    "[--max-value-size BYTES]\n"
    "              [--cluster JOB=N[,JOB=N...]] [--heartbeat-timeout DUR]\n"
    "              [--register-timeout DUR] [--shutdown-barrier-timeout DUR]\n"
    "              [--recoverable JOB[,JOB...]] [--threads N]\n"
    "              [--max-keys N] [--max-store-bytes BYTES] "
    "[--max-barriers N]\n"
    "              [--max-connections N] [--max-inflight-bytes BYTES]\n"
    "              [--request-timeout DUR] [--max-wait DUR]\n"
    "              [--token-file FILE] [--insecure]\n"
    "              [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]\n"
    "              [--state-dir DIR [--fsync always|batch|none]\n"
    "               [--journal-max-bytes BYTES]]\n";

/* --recoverable JOB[,JOB...]: every job must be one of --cluster's. */
static int
parse_recoverable(const char *arg, struct registry_config *rc)
{
	char copy[1024], *save = NULL, *job;

	snprintf(copy, sizeof(copy), "%s", arg);
	for (job = strtok_r(copy, ",", &save); job != NULL;
	     job = strtok_r(NULL, ",", &save)) {
		size_t j;
		for (j = 0; j < rc->cluster.njobs; j++)
			if (strcmp(rc->cluster.jobs[j].name, job) == 0)
				break;
		if (j == rc->cluster.njobs)
			return cli_usage_error(synopsis,
			    "--recoverable: job %s is not in --cluster", job);
		if (rc->nrecoverable == REG_MAX_RECOVERABLE)
			return cli_usage_error(synopsis,
			    "--recoverable: too many jobs");
		snprintf(rc->recoverable[rc->nrecoverable++], TASK_JOB_MAX,
		    "%s", job);
	}
	return 0;
}

static const struct option longopts[] = {
    DAEMON_LONGOPTS,
    {"max-value-size", required_argument, NULL, 'M'},
    {"cluster", required_argument, NULL, 'C'},
    {"heartbeat-timeout", required_argument, NULL, 'H'},
    {"register-timeout", required_argument, NULL, 'G'},
    {"shutdown-barrier-timeout", required_argument, NULL, 'S'},
    {"recoverable", required_argument, NULL, 'r'},
    {"max-keys", required_argument, NULL, 'K'},
    {"max-store-bytes", required_argument, NULL, 'B'},
    {"max-barriers", required_argument, NULL, 'b'},
    {NULL, 0, NULL, 0},
};

/* --recoverable's jobs, checked once --cluster is read, wherever it is. */
static const char *recoverable;

static int
option(int c, const char *arg, void *cfg)
{
	struct coord_config *cc = cfg;
	struct registry_config *rc = &cc->cluster;
	char err[512];
	long n;

	switch (c) {
	case 'M':
		if (parse_size(arg, &cc->kv.max_value) < 0 ||
		    cc->kv.max_value == 0)
			return cli_usage_error(synopsis,
			    "--max-value-size "
			    "%s is not a size (like 1048576, 64K, 16M)",
			    arg);
		return 0;
	case 'C':
		if (task_parse_cluster(arg, &rc->cluster, err, sizeof(err)) < 0)
			return cli_usage_error(synopsis, "--cluster: %s", err);
		return 0;
	case 'H':
		return cli_duration_flag(synopsis, "--heartbeat-timeout", arg,
		    1, &rc->heartbeat_timeout_ms);
	case 'G':
		return cli_duration_flag(synopsis, "--register-timeout", arg, 1,
		    &rc->register_timeout_ms);
	case 'S':
		return cli_duration_flag(synopsis, "--shutdown-barrier-timeout",
		    arg, 0, &cc->shutdown_barrier_timeout_ms);
	case 'r': recoverable = arg; return 0;
	case 'K':
		if (cli_number_flag(synopsis, "--max-keys", arg, 1, 1L << 40,
		        &n) != 0)
			return 2;
		cc->kv.max_keys = (size_t)n;
		return 0;
	case 'B':
		if (parse_size(arg, &cc->kv.max_bytes) < 0 ||
		    cc->kv.max_bytes == 0)
			return cli_usage_error(synopsis,
			    "--max-store-bytes %s is not a size (like "
			    "1G, 512M)",
			    arg);
		return 0;
	case 'b':
		if (cli_number_flag(synopsis, "--max-barriers", arg, 1,
		        1L << 30, &n) != 0)
			return 2;
		cc->max_barriers = (size_t)n;
		return 0;
	default: return cli_std_option(c, synopsis);
	}
}

static int
configure(struct daemon_options *d, void *cfg)
{
	struct coord_config *cc = cfg;

	if (cc->kv.max_value == 0)
		cc->kv.max_value = KV_MAX_VALUE_DEFAULT;
	if (recoverable != NULL &&
	    parse_recoverable(recoverable, &cc->cluster) != 0)
		return 2;
	/* Room for a whole value in a compare-and-swap, base64 twice. */
	d->max_body = cc->kv.max_value / 3 * 8 + 64 * 1024;
	return 0;
}

static enum status
open_service(void *cfg, const struct daemon_options *o,
    struct daemon_service *svc, char *err, size_t errlen)
{
	return coord_open(cfg, o, svc, err, errlen);
}

int
main(int argc, char **argv)
{
	static struct coord_config cc;
	static const struct daemon_program p = {"coordd", 7700, synopsis,
	    longopts, &cc, option, configure, open_service};

	return daemon_main(&p, argc, argv);
}
