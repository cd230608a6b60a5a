/*
 * barrierwait: wait at a named barrier of the cluster, or cancel one.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "cli.h"
#include "coord_client.h"
#include "duration.h"
#include "log.h"
#include "task.h"

#define DEFAULT_TIMEOUT_MS (10 * 60 * 1000)

static const char synopsis[] =
    "usage: barrierwait [-c ADDR] [-t TASK] [--timeout DUR] "
    "[--tasks TASK[,TASK...]] ID\n"
    "       barrierwait [-c ADDR] [-t TASK] --cancel ID\n";

struct progress {
	const char *id;
	int shown;
};

/* "waiting at ID: 6/8 tasks", redrawn in place on a terminal. */
static void
show(void *arg, long done, long total)
{
	struct progress *p = arg;

	fprintf(stderr, "\rwaiting at %s: %ld/%ld tasks", p->id, done, total);
	p->shown = 1;
}

static json_t *
task_list(const char *s)
{
	json_t *arr = json_array();
	char *copy = strdup(s), *save = NULL, *name;
	struct task_name tn;
	char buf[TASK_JOB_MAX + 24];

	if (arr == NULL || copy == NULL)
		goto bad;
	for (name = strtok_r(copy, ",", &save); name != NULL;
	     name = strtok_r(NULL, ",", &save)) {
		if (task_parse(name, &tn) < 0) {
			cli_usage_error(synopsis,
			    "--tasks: %s is not a task (want JOB:INDEX)", name);
			goto bad;
		}
		json_array_append_new(arr,
		    json_string(task_format(&tn, buf, sizeof(buf))));
	}
	if (json_array_size(arr) == 0) {
		cli_usage_error(synopsis, "--tasks: empty list");
		goto bad;
	}
	free(copy);
	return arr;
bad:
	free(copy);
	json_decref(arr);
	return NULL;
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"timeout", required_argument, NULL, 'T'},
	    {"tasks", required_argument, NULL, 'k'},
	    {"cancel", no_argument, NULL, 'x'},
	    CLI_STD_LONGOPTS,
	    {NULL, 0, NULL, 0},
	};
	const char *addr = NULL, *task = getenv("MUSTER_TASK"), *inc_s;
	const char *tasks_s = NULL;
	int64_t timeout = DEFAULT_TIMEOUT_MS, deadline;
	struct progress prog = {0};
	struct coord_client *cc;
	struct coord_agent a;
	json_t *tasks = NULL;
	uint64_t inc = 0;
	char err[512];
	int c, cancel = 0;
	enum status st;

	log_init(argv[0], 0);
	while ((c = getopt_long(argc, argv, "c:ht:", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': addr = optarg; break;
		case 't': task = optarg; break;
		case 'T':
			if (cli_duration_flag(synopsis, "--timeout", optarg, 1,
			        &timeout) != 0)
				return 2;
			break;
		case 'k': tasks_s = optarg; break;
		case 'x': cancel = 1; break;
		default: return cli_std_option(c, synopsis);
		}
	}
	if (optind != argc - 1)
		return cli_usage_error(synopsis,
		    optind == argc ? "no barrier ID given" :
		                     "more than one barrier ID given");
	prog.id = argv[optind];
	if (task == NULL || *task == '\0')
		return cli_usage_error(synopsis,
		    "no task: use -t TASK or set MUSTER_TASK");
	inc_s = getenv("MUSTER_INCARNATION");
	if (inc_s != NULL && *inc_s != '\0' &&
	    task_parse_incarnation(inc_s, &inc) < 0)
		return cli_usage_error(synopsis,
		    "MUSTER_INCARNATION=%s is not an incarnation", inc_s);
	if (coord_agent_init(&a, task, inc) < 0)
		return cli_usage_error(synopsis,
		    "%s is not a task (want JOB:INDEX)", task);
	/* Under preemptwatch, it speaks for the task with its secret. */
	snprintf(a.secret, sizeof(a.secret), "%s",
	    getenv("MUSTER_TASK_SECRET") != NULL ?
	        getenv("MUSTER_TASK_SECRET") :
	        "");
	if (cancel && tasks_s != NULL)
		return cli_usage_error(synopsis,
		    "--tasks makes no sense with --cancel");
	if (tasks_s != NULL && (tasks = task_list(tasks_s)) == NULL)
		return 2;
	if ((cc = coord_client_new(cli_coord_addr(addr), err, sizeof(err))) ==
	    NULL) {
		json_decref(tasks);
		return cli_usage_error(synopsis, "%s", err);
	}
	coord_client_set_task_secret(cc, a.secret);
	/* The barrier's own timeout bounds the wait; allow for bring-up. */
	deadline = duration_now_ms() + timeout + 5000;
	if (cancel)
		st = coord_barrier_cancel(cc, &a, argv[optind], deadline);
	else
		st = coord_barrier_wait(cc, &a, argv[optind], timeout, tasks,
		    deadline, isatty(STDERR_FILENO) ? 1000 : 0,
		    isatty(STDERR_FILENO) ? show : NULL, &prog);
	if (prog.shown)
		fputc('\n', stderr);
	json_decref(tasks);
	if (st != ST_OK) {
		int rc = cli_fail(st, "%s", coord_client_error(cc));
		coord_client_free(cc);
		return rc;
	}
	coord_client_free(cc);
	return 0;
}
