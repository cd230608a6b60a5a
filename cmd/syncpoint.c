/*
 * syncpoint: is this step the one every task checkpoints at before a
 * preemption? Asks the preemptwatch that runs this task.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "duration.h"
#include "log.h"
#include "syncpoint.h"
#include "wallclock.h"

static const char synopsis[] =
    "usage: syncpoint STEP\n       syncpoint --status [--json]\n"
    "       syncpoint --wait-notice [--json] [--timeout DUR]\n";

static void
print_status(const struct syncpoint_status *st, int json)
{
	char when[40] = "", left[32];

	if (st->death_ms != 0)
		wall_format(st->death_ms, when, sizeof(when));
	if (json) {
		printf("{\"state\":\"%s\",\"notice\":%s,\"death_time\":",
		    syncpoint_state_name(st->state),
		    st->state != SYNC_IDLE ? "true" : "false");
		if (st->death_ms != 0)
			printf("\"%s\"", when);
		else
			printf("null");
		printf(",\"sync_step\":");
		if (st->sync_step >= 0)
			printf("%" PRId64, st->sync_step);
		else
			printf("null");
		printf(",\"step\":");
		if (st->step >= 0)
			printf("%" PRId64, st->step);
		else
			printf("null");
		printf(",\"answered\":%s}\n",
		    st->answered == SYNCPOINT_YES      ? "\"yes\"" :
		        st->answered == SYNCPOINT_PAST ? "\"past\"" :
		                                         "null");
		return;
	}
	if (st->state == SYNC_IDLE) {
		printf("no preemption notice\n");
		return;
	}
	printf("preemption notice: death at %s (%s%s)\n", when,
	    duration_format(st->death_ms > wall_now_ms() ?
	            st->death_ms - wall_now_ms() :
	            wall_now_ms() - st->death_ms,
	        left, sizeof(left)),
	    st->death_ms > wall_now_ms() ? " from now" : " ago");
	if (st->state == SYNC_KNOWN)
		printf("sync step: %" PRId64 "\n", st->sync_step);
	else if (st->state == SYNC_FROZEN)
		printf("sync step: being agreed\n");
	else if (st->state == SYNC_FAILED)
		printf("sync step: none (the protocol failed)\n");
	else
		printf("sync step: not yet agreed\n");
}

static int
unavailable(const char *err)
{
	if (getenv(SYNCPOINT_ENV) == NULL)
		return cli_usage_error(synopsis, "%s", err);
	return cli_fail(ST_UNAVAILABLE, "%s", err);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"status", no_argument, NULL, 's'},
	    {"wait-notice", no_argument, NULL, 'w'},
	    {"json", no_argument, NULL, 'j'},
	    {"timeout", required_argument, NULL, 'T'},
	    CLI_STD_LONGOPTS,
	    {NULL, 0, NULL, 0},
	};
	struct syncpoint_status st;
	struct syncpoint *sp;
	int c, status = 0, wait = 0, json = 0, r = 1;
	int64_t timeout = -1, step;
	char *end, err[512];

	log_init(argv[0], 0);
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case 's': status = 1; break;
		case 'w': wait = 1; break;
		case 'j': json = 1; break;
		case 'T':
			if (cli_duration_flag(synopsis, "--timeout", optarg, 0,
			        &timeout) != 0)
				return 2;
			break;
		default: return cli_std_option(c, synopsis);
		}
	}
	if (status + wait > 1)
		return cli_usage_error(synopsis,
		    "--status and --wait-notice exclude each other");
	if (status || wait) {
		if (optind != argc)
			return cli_usage_error(synopsis,
			    "unexpected argument %s", argv[optind]);
		if ((sp = syncpoint_open(err, sizeof(err))) == NULL)
			return unavailable(err);
		if (status)
			syncpoint_status(sp, &st);
		else
			r = syncpoint_wait_notice(sp, timeout, &st);
		syncpoint_close(sp);
		if (r == 0)
			return cli_fail(ST_DEADLINE_EXCEEDED,
			    "no preemption notice within the timeout");
		print_status(&st, json);
		return 0;
	}
	if (json || timeout >= 0)
		return cli_usage_error(synopsis,
		    "--json and --timeout go with --status or --wait-notice");
	if (optind != argc - 1)
		return cli_usage_error(synopsis,
		    optind == argc ? "no STEP given" :
		                     "more than one STEP given");
	step = strtoll(argv[optind], &end, 10);
	if (*argv[optind] == '\0' || *end != '\0' || step < 0)
		return cli_usage_error(synopsis, "STEP %s is not a step number",
		    argv[optind]);
	if ((sp = syncpoint_open(err, sizeof(err))) == NULL)
		return unavailable(err);
	switch (syncpoint_reached(sp, step)) {
	case SYNCPOINT_YES: r = 0; break;
	case SYNCPOINT_PAST:
		/* Saving now is still the best this task can do. */
		syncpoint_status(sp, &st);
		fprintf(stderr,
		    "%s: step %" PRId64 " is past the sync point, step %" PRId64
		    ": checkpoint now; this task's checkpoint will not be at the "
		    "step the others save at\n",
		    log_prog(), step, st.sync_step);
		r = 0;
		break;
	default: r = 1; break;
	}
	syncpoint_close(sp);
	return r;
}
