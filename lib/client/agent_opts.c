/*
 * agent_opts.c: preemptwatch's options.
 */
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "agent_exit.h"
#include "agent_opts.h"
#include "cli.h"

const char agent_opts_synopsis[] =
    "usage: preemptwatch [-v] [-c ADDR] [-t TASK] [--no-wait-all] "
    "[--grace DUR] [--timeout DUR]\n"
    "                    [--notice SOURCE]... [--notice-grace DUR] "
    "[--notice-interval DUR]\n"
    "                    [--metadata-url URL] [--protocol-window DUR]\n"
    "                    [--sync-barrier-timeout DUR] [--restart-exit-code N]\n"
    "                    [--unsynced-exit-code N] [--max-restarts N]\n"
    "                    [--stop-signal SIG] -- COMMAND [ARG...]\n";

int
agent_opts_parse(int argc, char **argv, struct agent_opts *o, int *verbose)
{
	static const struct option longopts[] = {
	    {"no-wait-all", no_argument, NULL, 'W'},
	    {"grace", required_argument, NULL, 'g'},
	    {"timeout", required_argument, NULL, 'T'},
	    {"notice", required_argument, NULL, 'N'},
	    {"notice-grace", required_argument, NULL, 'G'},
	    {"notice-interval", required_argument, NULL, 'I'},
	    {"metadata-url", required_argument, NULL, 'M'},
	    {"protocol-window", required_argument, NULL, 'P'},
	    {"sync-barrier-timeout", required_argument, NULL, 'B'},
	    {"restart-exit-code", required_argument, NULL, 'R'},
	    {"unsynced-exit-code", required_argument, NULL, 'U'},
	    {"stop-signal", required_argument, NULL, 'S'},
	    {"max-restarts", required_argument, NULL, 'X'},
	    CLI_STD_LONGOPTS,
	    {NULL, 0, NULL, 0},
	};
	const char *specs[AGENT_MAX_NOTICES], *meta = NULL;
	size_t nspecs = 0;
	char err[256];
	long v;
	int c;

	*o = (struct agent_opts){.task = getenv("MUSTER_TASK"),
	    .wait_all = 1,
	    .grace = 10000,
	    .bringup = 3600000,
	    .notice_grace = 30000,
	    .notice_interval = 1000,
	    .window = 15 * 60000,
	    .barrier_timeout = 3 * 60000,
	    .stop_signal = SIGTERM,
	    .restart_code = AGENT_EXIT_RESTART,
	    .unsynced_code = AGENT_EXIT_UNSYNCED};
	while ((c = getopt_long(argc, argv, "+c:ht:v", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': o->addr = optarg; break;
		case 't': o->task = optarg; break;
		case 'v': (*verbose)++; break;
		case 'W': o->wait_all = 0; break;
		case 'g':
			if (cli_duration_flag(agent_opts_synopsis, "--grace",
			        optarg, 0, &o->grace) != 0)
				return 2;
			break;
		case 'T':
			if (cli_duration_flag(agent_opts_synopsis, "--timeout",
			        optarg, 1, &o->bringup) != 0)
				return 2;
			break;
		case 'N':
			if (nspecs == AGENT_MAX_NOTICES)
				return cli_usage_error(agent_opts_synopsis,
				    "at most %d --notice sources",
				    AGENT_MAX_NOTICES);
			specs[nspecs++] = optarg;
			break;
		case 'G':
			if (cli_duration_flag(agent_opts_synopsis,
			        "--notice-grace", optarg, 0,
			        &o->notice_grace) != 0)
				return 2;
			break;
		case 'I':
			if (cli_duration_flag(agent_opts_synopsis,
			        "--notice-interval", optarg, 1,
			        &o->notice_interval) != 0)
				return 2;
			break;
		case 'M':
			meta = optarg;
			if (strncmp(meta, "http://", 7) != 0 ||
			    meta[7] == '\0' || meta[7] == '/')
				return cli_usage_error(agent_opts_synopsis,
				    "--metadata-url %s "
				    "is not http://HOST[:PORT][/PATH]",
				    meta);
			break;
		case 'P':
			if (cli_duration_flag(agent_opts_synopsis,
			        "--protocol-window", optarg, 0,
			        &o->window) != 0)
				return 2;
			break;
		case 'B':
			if (cli_duration_flag(agent_opts_synopsis,
			        "--sync-barrier-timeout", optarg, 1,
			        &o->barrier_timeout) != 0)
				return 2;
			break;
		case 'R':
			if (cli_number_flag(agent_opts_synopsis,
			        "--restart-exit-code", optarg, 1, 255, &v) != 0)
				return 2;
			o->restart_code = (int)v;
			break;
		case 'S':
			if ((o->stop_signal = notice_signal_number(optarg)) < 0)
				return cli_usage_error(agent_opts_synopsis,
				    "--stop-signal %s is not a signal (TERM, INT, "
				    "HUP, USR1, USR2, QUIT, ...)",
				    optarg);
			break;
		case 'U':
			if (cli_number_flag(agent_opts_synopsis,
			        "--unsynced-exit-code", optarg, 1, 255,
			        &v) != 0)
				return 2;
			o->unsynced_code = (int)v;
			break;
		case 'X':
			if (cli_number_flag(agent_opts_synopsis,
			        "--max-restarts", optarg, 0, 1000000,
			        &o->max_restarts) != 0)
				return 2;
			break;
		default: return cli_std_option(c, agent_opts_synopsis);
		}
	}
	if (o->restart_code == AGENT_EXIT_PEER_FAILED ||
	    o->unsynced_code == AGENT_EXIT_PEER_FAILED)
		return cli_usage_error(agent_opts_synopsis,
		    "%d is the code for a failed peer", AGENT_EXIT_PEER_FAILED);
	if (o->restart_code == o->unsynced_code)
		return cli_usage_error(agent_opts_synopsis,
		    "--restart-exit-code and --unsynced-exit-code must differ");
	if (optind >= argc)
		return cli_usage_error(agent_opts_synopsis, "no COMMAND given");
	o->cmd = argv + optind;
	if (o->task == NULL || *o->task == '\0')
		return cli_usage_error(agent_opts_synopsis,
		    "no task: use -t TASK or set MUSTER_TASK");
	if (nspecs == 0)
		specs[nspecs++] = "sigterm";
	for (size_t i = 0; i < nspecs; i++) {
		if (notice_parse(specs[i], meta, &o->notices[i], err,
		        sizeof(err)) < 0)
			return cli_usage_error(agent_opts_synopsis,
			    "--notice %s: %s", specs[i], err);
		o->nnotices++;
	}
	o->addr = cli_coord_addr(o->addr);
	return 0;
}
