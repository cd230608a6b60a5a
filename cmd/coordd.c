/*
 * coordd: the coordination service of a muster job.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "daemon.h"
#include "parse.h"
#include "duration.h"
#include "coord.h"
#include "http_server.h"
#include "log.h"

static const char synopsis[] =
    "usage: coordd [-nv] [-l HOST:PORT] [--port-file FILE] "
    "[--max-value-size BYTES]\n"
    "              [--cluster JOB=N[,JOB=N...]] [--heartbeat-timeout DUR]\n"
    "              [--register-timeout DUR] [--shutdown-barrier-timeout DUR]\n"
    "              [--recoverable JOB[,JOB...]] [--threads N]\n";

/* A duration flag into *ms; min is the smallest value allowed. */
static int
duration_flag(const char *name, const char *arg, int64_t min, int64_t *ms)
{
	if (duration_parse(arg, ms) < 0 || *ms < min) {
		cli_usage_error(synopsis, "--%s %s is not a duration%s", name,
		    arg, min > 0 ? " above zero" : "");
		return -1;
	}
	return 0;
}

/* --recoverable JOB[,JOB...]: every job must be one of --cluster's. */
static int
parse_recoverable(const char *arg, struct coord_config *cc)
{
	char copy[1024], *save = NULL, *job;

	snprintf(copy, sizeof(copy), "%s", arg);
	for (job = strtok_r(copy, ",", &save); job != NULL;
	    job = strtok_r(NULL, ",", &save)) {
		size_t j;
		for (j = 0; j < cc->cluster.cluster.njobs; j++)
			if (strcmp(cc->cluster.cluster.jobs[j].name, job) == 0)
				break;
		if (j == cc->cluster.cluster.njobs)
			return cli_usage_error(synopsis, "--recoverable: job %s "
			    "is not in --cluster", job);
		if (cc->cluster.nrecoverable == REG_MAX_RECOVERABLE)
			return cli_usage_error(synopsis, "--recoverable: too "
			    "many jobs");
		snprintf(cc->cluster.recoverable[cc->cluster.nrecoverable++], TASK_JOB_MAX,
		    "%s", job);
	}
	return 0;
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"port-file", required_argument, NULL, 'P'},
		{"max-value-size", required_argument, NULL, 'V'},
		{"threads", required_argument, NULL, 'T'},
		{"cluster", required_argument, NULL, 'C'},
		{"heartbeat-timeout", required_argument, NULL, 'H'},
		{"register-timeout", required_argument, NULL, 'G'},
		{"shutdown-barrier-timeout", required_argument, NULL, 'S'},
		{"recoverable", required_argument, NULL, 'r'},
		{"verbose", no_argument, NULL, 'v'},
		{"check", no_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'R'},
		{NULL, 0, NULL, 0},
	};
	const char *listen = "127.0.0.1:7700", *port_file = NULL;
	static struct coord_config cc;
	const char *recoverable = NULL;
	struct http_server_config hc = {0};
	struct http_server *srv;
	struct coord *co;
	char host[256], err[512];
	int c, verbose = 0, check = 0, sig;
	/*
	 * Twice the CPUs: while one worker resumes thousands of parked
	 * requests, the others already send their replies. Before parked
	 * pools were prefaulted, a 10,000-waiter release was about a third
	 * faster so than with one per CPU; now the two are within the noise.
	 */
	long threads = 2 * sysconf(_SC_NPROCESSORS_ONLN);
	sigset_t set;

	log_init(argv[0], 0);
	while ((c = getopt_long(argc, argv, "hl:nv", longopts, NULL)) != -1) {
		switch (c) {
		case 'l':
			listen = optarg;
			break;
		case 'P':
			port_file = optarg;
			break;
		case 'V':
			if (parse_size(optarg, &cc.kv.max_value) < 0 ||
			    cc.kv.max_value == 0)
				return cli_usage_error(synopsis, "--max-value-size "
				    "%s is not a size (like 1048576, 64K, 16M)",
				    optarg);
			break;
		case 'T':
			if (parse_long(optarg, 1, 64, &threads) < 0)
				return cli_usage_error(synopsis, "--threads %s is "
				    "not a number from 1 to 64", optarg);
			break;
		case 'C':
			if (task_parse_cluster(optarg, &cc.cluster.cluster, err,
			    sizeof(err)) < 0)
				return cli_usage_error(synopsis, "--cluster: %s",
				    err);
			break;
		case 'H':
			if (duration_flag("heartbeat-timeout", optarg, 1,
			    &cc.cluster.heartbeat_timeout_ms) < 0)
				return 2;
			break;
		case 'G':
			if (duration_flag("register-timeout", optarg, 1,
			    &cc.cluster.register_timeout_ms) < 0)
				return 2;
			break;
		case 'S':
			if (duration_flag("shutdown-barrier-timeout", optarg, 0,
			    &cc.shutdown_barrier_timeout_ms) < 0)
				return 2;
			break;
		case 'r':
			recoverable = optarg;
			break;
		case 'v':
			verbose++;
			break;
		case 'n':
			check = 1;
			break;
		case 'h':
			fputs(synopsis, stdout);
			return 0;
		case 'R':
			printf("coordd %s\n", MUSTER_VERSION);
			return 0;
		default:
			fputs(synopsis, stderr);
			return 2;
		}
	}
	if (optind != argc)
		return cli_usage_error(synopsis, "unexpected argument %s",
		    argv[optind]);
	log_init(argv[0], verbose);
	if (parse_listen(listen, host, sizeof(host), &hc.port) < 0)
		return cli_usage_error(synopsis, "-l %s is not HOST:PORT",
		    listen);
	if (cc.kv.max_value == 0)
		cc.kv.max_value = KV_MAX_VALUE_DEFAULT;
	if (recoverable != NULL && parse_recoverable(recoverable, &cc) != 0)
		return 2;
	if (check) {
		printf("coordd: configuration ok\n");
		return 0;
	}

	/* Signals are taken by sigwait below, never by the server threads. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* Parked requests each hold a socket: as many as the system allows. */
	daemon_raise_nofile();

	/* From here on a stalled stderr must not stall the service. */
	log_async(1u << 20);
	if ((co = coord_new(&cc, err, sizeof(err))) == NULL)
		return cli_fail(ST_INTERNAL, "%s", err);
	hc.host = host;
	hc.threads = (unsigned)threads;
	/* Room for a whole value in a compare-and-swap, base64 twice. */
	hc.max_body = cc.kv.max_value / 3 * 8 + 64 * 1024;
	hc.handler = coord_handle;
	hc.arg = co;
	if ((srv = http_server_start(&hc, err, sizeof(err))) == NULL) {
		coord_free(co);
		return cli_fail(ST_UNAVAILABLE, "%s", err);
	}
	coord_set_server(co, srv);
	if (port_file != NULL &&
	    daemon_write_port_file(port_file, http_server_port(srv)) < 0) {
		coord_shutdown(co);
		http_server_stop(srv);
		coord_free(co);
		return cli_fail(ST_INTERNAL, "cannot write port file %s: %m",
		    port_file);
	}
	log_info("listening on %s:%d", host, http_server_port(srv));

	do {
		if (sigwait(&set, &sig) != 0)
			sig = SIGTERM;
	} while (sig == SIGHUP);

	log_info("%s: shutting down", strsignal(sig));
	coord_shutdown(co);
	http_server_stop(srv);
	coord_free(co);
	log_flush(2000);
	return 0;
}
