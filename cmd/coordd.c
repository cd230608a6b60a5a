/*
 * coordd: the coordination service of a muster job.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"
#include "coord.h"
#include "http_server.h"
#include "log.h"

static const char synopsis[] =
    "usage: coordd [-nv] [-l HOST:PORT] [--port-file FILE] "
    "[--max-value-size BYTES]\n"
    "              [--threads N]\n";

/* Parked requests each hold a socket: allow as many as the system will. */
static void
raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"port-file", required_argument, NULL, 'P'},
		{"max-value-size", required_argument, NULL, 'V'},
		{"threads", required_argument, NULL, 'T'},
		{"verbose", no_argument, NULL, 'v'},
		{"check", no_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'R'},
		{NULL, 0, NULL, 0},
	};
	const char *listen = "127.0.0.1:7700", *port_file = NULL;
	struct coord_config cc = {{0}};
	struct http_server_config hc = {0};
	struct http_server *srv;
	struct coord *co;
	char host[256], err[512];
	int c, verbose = 0, check = 0, sig;
	long threads = sysconf(_SC_NPROCESSORS_ONLN);
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
			if (cli_parse_size(optarg, &cc.kv.max_value) < 0 ||
			    cc.kv.max_value == 0)
				return cli_usage_error(synopsis, "--max-value-size "
				    "%s is not a size (like 1048576, 64K, 16M)",
				    optarg);
			break;
		case 'T': {
			char *end;
			threads = strtol(optarg, &end, 10);
			if (*optarg == '\0' || *end != '\0' || threads < 1 ||
			    threads > 64)
				return cli_usage_error(synopsis, "--threads %s is "
				    "not a number from 1 to 64", optarg);
			break;
		}
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
	if (cli_parse_listen(listen, host, sizeof(host), &hc.port) < 0)
		return cli_usage_error(synopsis, "-l %s is not HOST:PORT",
		    listen);
	if (cc.kv.max_value == 0)
		cc.kv.max_value = KV_MAX_VALUE_DEFAULT;
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
	raise_nofile();

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
	    cli_write_port_file(port_file, http_server_port(srv)) < 0) {
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
	return 0;
}
