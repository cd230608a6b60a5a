/*
 * workerloop: a worker of dispatchd. Registers, keeps a heartbeat parked at
 * dispatchd (its connection closing is how dispatchd learns at once that
 * the worker died), and runs closures in SLOTS threads: each takes a
 * closure, runs it (a process of its own, or a line to a --serve process),
 * and reports its end together with the request for the next one. The
 * runner is lib/client/runner.c's.
 *
 * The data tasks its heartbeat replies list run in lib/client/dataserve.c:
 * a reader per task, and a small HTTP server consumers fetch elements from.
 *
 * On SIGTERM or SIGINT it stops taking work, stops its closures (TERM, the
 * grace period, KILL), reports them aborted so that they run again at once
 * elsewhere, leaves, and exits 0.
 *
 * With --supervise, all of that is a child of a parent that starts it again
 * when it dies (io/respawn.h): a killed worker is back, registered anew,
 * within a fraction of a second.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "dataserve.h"
#include "dispatch_client.h"
#include "log.h"
#include "parse.h"
#include "respawn.h"
#include "runner.h"
#include "sigfd.h"
#include "task.h"
#include "tls.h"

static const char synopsis[] =
    "usage: workerloop [-v] [-d ADDR] [-t TASK] [-j SLOTS] [--start-delay "
    "DUR]\n"
    "                  [--start-delay-max DUR] [--grace DUR] "
    "[--max-output BYTES]\n"
    "                  [--dir DIR] [--serve COMMAND] [--listen ADDR]\n"
    "                  [--host NAME] [--buffer BYTES] [--lease N]\n"
    "                  [--max-connections N] [--request-timeout DUR]\n"
    "                  [--reader-retries N] [--tls-cert FILE --tls-key FILE]\n"
    "                  [--supervise]\n";

struct opts {
	const char *addr;
	const char *task;
	long slots;
	int64_t start_delay, start_delay_max, grace;
	size_t max_output;
	const char *dir;
	const char *serve;
	const char *listen;
	char host[256];
	size_t buffer;
	long lease;
	long max_conns;
	int64_t request_ms;
	long reader_retries;
	const char *tls_cert, *tls_key;
	int supervise;
};

static int
parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
	    {"dispatcher", required_argument, NULL, 'd'},
	    {"task", required_argument, NULL, 't'},
	    {"slots", required_argument, NULL, 'j'},
	    {"start-delay", required_argument, NULL, 'S'},
	    {"start-delay-max", required_argument, NULL, 'M'},
	    {"grace", required_argument, NULL, 'g'},
	    {"max-output", required_argument, NULL, 'O'},
	    {"dir", required_argument, NULL, 'D'},
	    {"serve", required_argument, NULL, 's'},
	    {"listen", required_argument, NULL, 'L'},
	    {"host", required_argument, NULL, 'H'},
	    {"buffer", required_argument, NULL, 'B'},
	    {"lease", required_argument, NULL, 'l'},
	    {"max-connections", required_argument, NULL, 'C'},
	    {"request-timeout", required_argument, NULL, 'R'},
	    {"reader-retries", required_argument, NULL, 'r'},
	    {"tls-cert", required_argument, NULL, 'X'},
	    {"tls-key", required_argument, NULL, 'K'},
	    {"supervise", no_argument, NULL, 'P'},
	    {"verbose", no_argument, NULL, 'v'},
	    CLI_STD_LONGOPTS,
	    {NULL, 0, NULL, 0},
	};
	const char *addr = NULL;
	int c, verbose = 0, port;
	struct task_name tn;
	char host[128];

	o->slots = 1;
	o->listen = "127.0.0.1:0";
	o->buffer = 64u << 20;
	o->lease = 16;
	o->reader_retries = 3;
	o->grace = 10000;
	o->max_output = 1u << 20;
	o->start_delay_max = 0;
	while (
	    (c = getopt_long(argc, argv, "+hvd:t:j:", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': addr = optarg; break;
		case 't': o->task = optarg; break;
		case 'j':
			if (cli_number_flag(synopsis, "-j", optarg, 1, 256,
			        &o->slots) != 0)
				return 2;
			break;
		case 'S':
			if (cli_duration_flag(synopsis, "--start-delay", optarg,
			        0, &o->start_delay) != 0)
				return 2;
			break;
		case 'M':
			if (cli_duration_flag(synopsis, "--start-delay-max",
			        optarg, 0, &o->start_delay_max) != 0)
				return 2;
			break;
		case 'g':
			if (cli_duration_flag(synopsis, "--grace", optarg, 0,
			        &o->grace) != 0)
				return 2;
			break;
		case 'O':
			if (parse_size(optarg, &o->max_output) < 0 ||
			    o->max_output > (64u << 20))
				return cli_usage_error(synopsis,
				    "--max-output %s is not a size up to 64M",
				    optarg);
			break;
		case 'D': o->dir = optarg; break;
		case 's':
			if (*optarg == '\0')
				return cli_usage_error(synopsis,
				    "--serve needs a command");
			o->serve = optarg;
			break;
		case 'L':
			if (parse_listen(optarg, host, sizeof(host), &port) < 0)
				return cli_usage_error(synopsis,
				    "--listen %s is not HOST:PORT", optarg);
			o->listen = optarg;
			break;
		case 'H':
			if (*optarg == '\0' ||
			    strlen(optarg) >= sizeof(o->host))
				return cli_usage_error(synopsis,
				    "--host needs a name of up to %zu bytes",
				    sizeof(o->host) - 1);
			snprintf(o->host, sizeof(o->host), "%s", optarg);
			break;
		case 'B':
			if (parse_size(optarg, &o->buffer) < 0 ||
			    o->buffer < (64u << 10))
				return cli_usage_error(synopsis,
				    "--buffer %s is not a size of 64k or more",
				    optarg);
			break;
		case 'l':
			if (cli_number_flag(synopsis, "--lease", optarg, 1,
			        1024, &o->lease) != 0)
				return 2;
			break;
		case 'C':
			if (cli_number_flag(synopsis, "--max-connections",
			        optarg, 1, 65536, &o->max_conns) != 0)
				return 2;
			break;
		case 'R':
			if (cli_duration_flag(synopsis, "--request-timeout",
			        optarg, 1, &o->request_ms) != 0)
				return 2;
			break;
		case 'r':
			if (cli_number_flag(synopsis, "--reader-retries",
			        optarg, 0, 1000, &o->reader_retries) != 0)
				return 2;
			break;
		case 'X': o->tls_cert = optarg; break;
		case 'K': o->tls_key = optarg; break;
		case 'P': o->supervise = 1; break;
		case 'v': verbose = 1; break;
		default: return cli_std_option(c, synopsis);
		}
	}
	if (optind != argc)
		return cli_usage_error(synopsis, "unexpected argument %s",
		    argv[optind]);
	if ((o->tls_cert != NULL) != (o->tls_key != NULL))
		return cli_usage_error(synopsis,
		    "--tls-cert and --tls-key go together");
	if (o->tls_cert != NULL) {
		/* Checked now, as the daemons do: a bad file is a usage
		 * error, not a server that never comes up. */
		char err[512];
		struct tls_server *probe =
		    tls_server_new(o->tls_cert, o->tls_key, err, sizeof(err));
		if (probe == NULL)
			return cli_usage_error(synopsis, "%s", err);
		tls_server_free(probe);
	}
	if (o->task == NULL)
		o->task = getenv("MUSTER_TASK");
	if (o->task == NULL || *o->task == '\0')
		return cli_usage_error(synopsis,
		    "no worker name: give -t TASK or set MUSTER_TASK");
	if (task_parse(o->task, &tn) < 0)
		return cli_usage_error(synopsis,
		    "%s is not a task name (JOB:INDEX, like worker:3)",
		    o->task);
	if (o->host[0] == '\0' && gethostname(o->host, sizeof(o->host)) < 0)
		snprintf(o->host, sizeof(o->host), "localhost");
	o->host[sizeof(o->host) - 1] = '\0';
	o->addr = cli_dispatch_addr(addr);
	log_init(argv[0], verbose);
	return 0;
}

static const int stop_sigs[] = {SIGTERM, SIGINT, SIGHUP};

/*
 * --supervise: the exits that starting the worker again would not mend (a
 * stop, a usage error, a bad name or directory, a worker dispatchd does
 * not know, a refused token, a stop before it registered). Any other end,
 * a kill -9 or a crash above all, starts it again.
 */
static const int final_exits[] = {0, 2, 3, 6, 11, 130, 143};

/*
 * Without --dir, the parent makes the directory every worker it starts
 * makes its own in, and removes it as it exits: a worker killed with -9
 * cannot remove its own.
 */
static char sup_dir[1024];
static pid_t sup_pid;

static void
sup_dir_remove(void)
{
	if (getpid() == sup_pid)
		runner_dir_remove(sup_dir);
}

static void
supervise(const struct opts *o)
{
	struct respawn_config rc = {o->task, final_exits,
	    sizeof(final_exits) / sizeof(final_exits[0]), 100, 10000, 10000};
	int made;

	if (o->dir == NULL) {
		if (runner_dir_make(NULL, sup_dir, sizeof(sup_dir), &made) < 0)
			exit(cli_fail(ST_INTERNAL, "mkdtemp %s: %s", sup_dir,
			    strerror(errno)));
		sup_pid = getpid();
		atexit(sup_dir_remove);
	}
	if (respawn_fork(&rc) < 0)
		exit(cli_fail(ST_INTERNAL, "fork: %s", strerror(errno)));
}

/*
 * The first registration, for as long as dispatchd is away, but no longer
 * than a signal: SIGTERM or SIGINT ends it at once (exit 128 + the
 * signal), as before any work was taken there is nothing to hand back.
 * 0, or the exit code.
 */
static int
register_first(struct runner *rn, struct dispatch_client *dc, int sigfd,
    const struct opts *o)
{
	char err[512];
	enum status st;
	int sig;

	dispatch_client_set_cancel(dc, sigfd);
	while (
	    (st = runner_register(rn, dc, err, sizeof(err))) == ST_CANCELLED) {
		if ((sig = sigfd_read(sigfd)) == SIGHUP || sig == 0)
			continue;
		log_info("%s: stopped by %s before it could register with %s",
		    o->task, strsignal(sig), o->addr);
		return 128 + sig;
	}
	dispatch_client_set_cancel(dc, -1);
	if (st != ST_OK)
		return cli_fail(st, "%s", err);
	return 0;
}

int
main(int argc, char **argv)
{
	static struct opts o;
	struct dispatch_client *dc;
	struct dataserve *ds = NULL;
	struct runner *rn = NULL;
	char err[512], name[TASK_JOB_MAX + 32], workdir[1024];
	struct task_name tn;
	sigset_t blocked;
	enum status st;
	int rc, sig, sigfd, made_workdir = 0;

	log_init(argv[0], 0);
	if ((rc = parse_args(argc, argv, &o)) != 0)
		return rc;
	/* Always the JOB:INDEX spelling, whatever was given. */
	task_parse(o.task, &tn);
	o.task = strdup(task_format(&tn, name, sizeof(name)));
	/* From here on, in the supervised child. */
	if (o.supervise)
		supervise(&o);
	/* Before any thread starts: every thread has them blocked, and they
	 * wait on the descriptor (a shell may have started us with them
	 * ignored: they are ours again). */
	if ((sigfd = sigfd_open(stop_sigs,
	         sizeof(stop_sigs) / sizeof(stop_sigs[0]), &blocked)) < 0)
		return cli_fail(ST_INTERNAL, "signalfd: %s", strerror(errno));
	signal(SIGPIPE, SIG_IGN);
	if (sup_dir[0] != '\0') {
		/* Its own, in its supervisor's. */
		snprintf(workdir, sizeof(workdir), "%.900s/worker.XXXXXX",
		    sup_dir);
		if (mkdtemp(workdir) == NULL)
			return cli_fail(ST_INTERNAL, "mkdtemp %s: %s", workdir,
			    strerror(errno));
		made_workdir = 1;
	} else if (runner_dir_make(o.dir, workdir, sizeof(workdir),
	               &made_workdir) < 0) {
		if (o.dir != NULL)
			return cli_fail(ST_INVALID_ARGUMENT,
			    "cannot make --dir %s: %s", o.dir, strerror(errno));
		return cli_fail(ST_INTERNAL, "mkdtemp %s: %s", workdir,
		    strerror(errno));
	}
	if ((dc = dispatch_client_new(o.addr, err, sizeof(err))) == NULL)
		return cli_fail(ST_INVALID_ARGUMENT, "%s", err);
	/* Listening first: registration advertises the address. */
	struct dataserve_config dsc = {o.listen, o.host, o.addr, o.task,
	    o.buffer, o.lease, &blocked, o.max_conns, o.request_ms,
	    o.reader_retries, o.tls_cert, o.tls_key};
	if ((ds = dataserve_start(&dsc, err, sizeof(err))) == NULL) {
		rc = cli_fail(ST_UNAVAILABLE, "%s", err);
		goto out;
	}
	struct runner_opts ro = {o.addr, o.task, o.host, o.slots, o.start_delay,
	    o.start_delay_max, o.grace, o.max_output, o.serve, workdir,
	    &blocked, ds};
	if ((rn = runner_new(&ro)) == NULL) {
		rc = cli_fail(ST_INTERNAL, "%s", strerror(ENOMEM));
		goto out;
	}
	if ((rc = register_first(rn, dc, sigfd, &o)) != 0)
		goto out;
	if ((st = runner_start(rn, err, sizeof(err))) != ST_OK) {
		rc = cli_fail(st, "%s", err);
		goto out;
	}
	log_info("%s: %ld slot%s, taking closures from %s; serving data on %s",
	    o.task, o.slots, o.slots == 1 ? "" : "s", o.addr,
	    dataserve_address(ds));
	while (sigwait(&blocked, &sig) == 0 && sig == SIGHUP)
		;
	log_info("%s: stopping (%s): its closures go back to the queue", o.task,
	    strsignal(sig));
	runner_stop(rn, dc);
	rc = 0;
out:
	/* After the heartbeat, the only thread that hands it tasks. */
	dataserve_stop(ds);
	runner_free(rn);
	dispatch_client_free(dc);
	if (made_workdir)
		runner_dir_remove(workdir);
	return rc;
}
