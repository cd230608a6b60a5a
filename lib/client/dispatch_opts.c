/*
 * dispatch_opts.c: dispatchctl's options and operands, verb by verb.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "closurestate.h"
#include "datapos.h"
#include "dispatch_opts.h"
#include "duration.h"
#include "http_client.h"
#include "parse.h"
#include "readopts.h"
#include "shardmode.h"
#include "splitorder.h"
#include "text.h"

const char dispatch_opts_synopsis[] =
    "usage: dispatchctl [-d ADDR] [--json] [-q QUEUE] VERB ...\n"
    "  schedule [--stdin FILE|-] [--env K=V]... [--timeout DUR] "
    "[--retry-exit CODE]...\n"
    "           [--max-retries N] [--on TASK] [--needs RESOURCE]... "
    "[--key KEY]\n"
    "           [--no-block] [--each] [--independent] -- COMMAND [ARG...]\n"
    "  fetch [--timeout DUR] ID...\n"
    "  join [--timeout DUR]\n"
    "  done\n"
    "  cancel ID...\n"
    "  forget ID...\n"
    "  ls [--state STATE]\n"
    "  status\n"
    "  resource add NAME -- COMMAND [ARG...]\n"
    "  resource status NAME\n"
    "  resource ls\n"
    "  dataset add --splits FILE|- --reader CMD [--framing lines|nul|len32]\n"
    "          [--reader-skips] [--name NAME]\n"
    "  dataset ls | dataset show D | dataset splits D\n"
    "  splits files GLOB...\n"
    "  splits range START END [STEP]\n"
    "  splits bytes FILE SIZE\n"
    "  read D [--job NAME] [--mode MODE] [--repeat N] [--seed S]\n"
    "       [--consumers N --consumer-index I] [--local] [--host HOST]\n"
    "       [--from-state FILE...] [--run ID] [--positions] [--close-ok]\n"
    "       [--refresh DUR] [--max-bytes N] [--timeout DUR]\n"
    "  checkpoint --job NAME\n"
    "  job ls | job show J\n";

static const char *const synopsis = dispatch_opts_synopsis;

/* The mistake, fmt taking arg, and the synopsis on stderr: 2. */
static int
usage(const char *fmt, const char *arg)
{
	return cli_usage_error(synopsis, fmt, arg);
}

int
dispatch_opts_main(int argc, char **argv, const char **addr, const char **queue,
    int *json)
{
	static const struct option longopts[] = {
	    {"dispatcher", required_argument, NULL, 'd'},
	    {"queue", required_argument, NULL, 'q'},
	    {"json", no_argument, NULL, 'J'},
	    CLI_STD_LONGOPTS,
	    {NULL, 0, NULL, 0},
	};
	int c;

	*addr = NULL;
	*queue = "default";
	*json = 0;
	while ((c = getopt_long(argc, argv, "+hd:q:", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': *addr = optarg; break;
		case 'q': *queue = optarg; break;
		case 'J': *json = 1; break;
		default: return cli_std_option(c, synopsis);
		}
	}
	if (optind >= argc)
		return usage("no verb given%s", "");
	if (!text_name(*queue, 128))
		return usage("-q %s is not a queue name (letters, digits, "
		             "_-.:)",
		    *queue);
	return 0;
}

/* One of schedule's options into s: 0, or the exit code. */
static int
sched_opt(struct dispatch_sched *s, int c, const char *arg)
{
	int64_t ms;
	long n;
	int r;

	switch (c) {
	case 'i': s->in = arg; return 0;
	case 'e':
		if ((r = dispatch_sched_env(s, arg)) < 0)
			return usage(r == -1 ? "--env %s is not NAME=value" :
			                       "--env %s: not UTF-8",
			    arg);
		return 0;
	case 'T':
		if (cli_duration_flag(synopsis, "--timeout", arg, 1, &ms) != 0)
			return 2;
		dispatch_sched_timeout(s, ms);
		return 0;
	case 'r':
		if (cli_number_flag(synopsis, "--retry-exit", arg, 1, 255,
		        &n) != 0)
			return 2;
		dispatch_sched_retry_exit(s, n);
		return 0;
	case 'm':
		if (cli_number_flag(synopsis, "--max-retries", arg, 0, 1000000,
		        &n) != 0)
			return 2;
		dispatch_sched_max_retries(s, n);
		return 0;
	case 'o':
		if (dispatch_sched_on(s, arg) < 0)
			return usage("--on %s is not a task name (JOB:INDEX)",
			    arg);
		return 0;
	case 'n':
		if (dispatch_sched_needs(s, arg) < 0)
			return usage("--needs %s: not UTF-8", arg);
		return 0;
	case 'k': s->key = arg; return 0;
	case 'B': s->block = 0; return 0;
	case 'E': s->each = 1; return 0;
	case 'I': dispatch_sched_independent(s); return 0;
	default: return cli_std_option(c, synopsis);
	}
}

int
dispatch_opts_schedule(int argc, char **argv, struct dispatch_sched *s)
{
	static const struct option longopts[] = {
	    {"stdin", required_argument, NULL, 'i'},
	    {"env", required_argument, NULL, 'e'},
	    {"timeout", required_argument, NULL, 'T'},
	    {"retry-exit", required_argument, NULL, 'r'},
	    {"max-retries", required_argument, NULL, 'm'},
	    {"on", required_argument, NULL, 'o'},
	    {"needs", required_argument, NULL, 'n'},
	    {"key", required_argument, NULL, 'k'},
	    {"no-block", no_argument, NULL, 'B'},
	    {"each", no_argument, NULL, 'E'},
	    {"independent", no_argument, NULL, 'I'},
	    {NULL, 0, NULL, 0},
	};
	int c, rc = 0;

	optind = 1;
	while (
	    rc == 0 && (c = getopt_long(argc, argv, "+", longopts, NULL)) != -1)
		rc = sched_opt(s, c, optarg);
	if (rc != 0)
		return rc;
	if (optind < argc && strcmp(argv[optind - 1], "--") != 0 &&
	    strcmp(argv[optind], "--") == 0)
		optind++;
	s->cmd = argv + optind;
	s->ncmd = argc - optind;
	if (s->ncmd <= 0)
		return usage("schedule needs a command%s", "");
	if (s->each && s->in != NULL && strcmp(s->in, "-") == 0)
		return usage("--each reads its lines from stdin: --stdin %s "
		             "must be a file",
		    s->in);
	if (s->each && s->key != NULL && !dispatch_sched_braces(s->key))
		return usage("with --each, --key %s must hold {} (one key a "
		             "line)",
		    s->key);
	return 0;
}

int
dispatch_opts_wait(int argc, char **argv, int64_t *deadline, const char **state)
{
	static const struct option longopts[] = {
	    {"timeout", required_argument, NULL, 'T'},
	    {"state", required_argument, NULL, 's'},
	    {NULL, 0, NULL, 0},
	};
	int c;
	int64_t ms;

	*deadline = HTTP_NO_DEADLINE;
	optind = 1;
	while ((c = getopt_long(argc, argv, "+", longopts, NULL)) != -1) {
		switch (c) {
		case 'T':
			if (cli_duration_flag(synopsis, "--timeout", optarg, 0,
			        &ms) != 0)
				return 2;
			*deadline = duration_now_ms() + ms;
			break;
		case 's':
			if (state == NULL)
				return usage("%s takes no --state", argv[0]);
			if (closure_states_parse(optarg) == 0)
				return usage(
				    "--state %s is not " CLOSURE_STATE_NAMES,
				    optarg);
			*state = optarg;
			break;
		default: return cli_std_option(c, synopsis);
		}
	}
	return 0;
}

uint64_t
dispatch_opts_id(const char *arg)
{
	char *end;
	uint64_t id;

	errno = 0;
	id = strtoull(arg, &end, 10);
	return arg[0] >= '1' && arg[0] <= '9' && *end == '\0' && errno == 0 ?
	    id :
	    0;
}

int
dispatch_opts_ids(int first, int argc, char **argv)
{
	if (first >= argc)
		return usage("%s needs a closure id", argv[0]);
	for (int i = first; i < argc; i++)
		if (dispatch_opts_id(argv[i]) == 0)
			return usage("%s is not a closure id", argv[i]);
	return 0;
}

int
dispatch_opts_resource(int argc, char **argv)
{
	if (argc < 2)
		return usage("resource %s needs a name", argv[0]);
	if (strlen(argv[1]) > 128)
		return usage("resource name %s is too long", argv[1]);
	if (!text_name(argv[1], 128))
		return usage("%s is not a resource name (letters, digits, "
		             "_-.:)",
		    argv[1]);
	return 0;
}

int
dispatch_opts_dataset(int argc, char **argv, struct dispatch_opts_dataset *d)
{
	static const struct option longopts[] = {
	    {"splits", required_argument, NULL, 's'},
	    {"reader", required_argument, NULL, 'r'},
	    {"framing", required_argument, NULL, 'f'},
	    {"reader-skips", no_argument, NULL, 'k'},
	    {"name", required_argument, NULL, 'n'},
	    {NULL, 0, NULL, 0},
	};
	enum framing f;
	int c;

	*d = (struct dispatch_opts_dataset){0};
	optind = 1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's': d->splits = optarg; break;
		case 'r': d->reader = optarg; break;
		case 'f': d->framing = optarg; break;
		case 'k': d->skips = 1; break;
		case 'n': d->name = optarg; break;
		default: return cli_std_option(c, synopsis);
		}
	}
	if (optind < argc)
		return usage("unexpected argument %s", argv[optind]);
	if (d->splits == NULL || d->reader == NULL)
		return usage("dataset add needs --splits and --reader%s", "");
	if (d->framing != NULL && framing_parse(d->framing, &f) < 0)
		return usage("--framing %s is not lines, nul or len32",
		    d->framing);
	return 0;
}

int
dispatch_opts_checkpoint(int argc, char **argv, const char **job)
{
	static const struct option longopts[] = {
	    {"job", required_argument, NULL, 'j'},
	    {NULL, 0, NULL, 0},
	};
	int c;

	*job = NULL;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (c != 'j')
			return cli_std_option(c, synopsis);
		*job = optarg;
	}
	if (optind < argc)
		return usage("unexpected argument %s", argv[optind]);
	if (*job == NULL)
		return usage("checkpoint needs --job%s", "");
	return 0;
}

int
dispatch_opts_range(int argc, char **argv, int64_t *start, int64_t *end,
    int64_t *step)
{
	*step = 1;
	if (argc < 3 || argc > 4)
		return usage("splits range needs START END [STEP]%s", "");
	if (parse_int64(argv[1], start) < 0 || *start < 0)
		return usage("splits range: START %s is not a number >= 0",
		    argv[1]);
	if (parse_int64(argv[2], end) < 0 || *end < *start)
		return usage("splits range: END %s is not a number >= START",
		    argv[2]);
	if (argc == 4 && (parse_int64(argv[3], step) < 0 || *step < 1))
		return usage("splits range: STEP %s is not a number above zero",
		    argv[3]);
	return 0;
}

int
dispatch_opts_bytes(int argc, char **argv, size_t *size)
{
	if (argc != 3)
		return usage("splits bytes needs FILE SIZE%s", "");
	if (parse_size(argv[2], size) < 0 || *size == 0 ||
	    *size > (size_t)INT64_MAX)
		return usage("splits bytes: SIZE %s is not a size above zero "
		             "(1048576, 64k, 16M, 1G)",
		    argv[2]);
	return 0;
}

/* read's options, and what it needs to check them. */
struct readargs {
	struct dispatch_opts_read *d;
	struct datapos *pos; /* --from-state's */
	int local, index;    /* --local, --consumer-index given */
};

/* One of read's options into r: 0, or the exit code. */
static int
read_opt(struct readargs *r, int c, const char *arg)
{
	struct dataread_opts *o = &r->d->o;
	enum shard_mode mode;
	char err[512];

	switch (c) {
	case 'j': o->job = arg; return 0;
	case 'm':
		if (shard_mode_parse(arg, &mode) < 0)
			return usage(
			    "--mode %s is not off, dynamic, file, data, "
			    "file_or_data or hint",
			    arg);
		o->mode = arg;
		return 0;
	case 'r':
		return cli_number_flag(synopsis, "--repeat", arg, 0, LONG_MAX,
		    &o->repeat);
	case 's':
		if (parse_int64(arg, &o->seed) < 0 || o->seed < 0)
			return usage("--seed %s is not a number >= 0", arg);
		return 0;
	case 'c':
		return cli_number_flag(synopsis, "--consumers", arg, 1, 1000000,
		    &o->consumers);
	case 'i':
		r->index = 1;
		return cli_number_flag(synopsis, "--consumer-index", arg, 0,
		    999999, &o->consumer_index);
	case 'l': r->local = 1; return 0;
	case 'H': o->host = arg; return 0;
	case 'f':
		if (readopts_from_state(r->pos, arg, err, sizeof(err)) < 0)
			return cli_fail(ST_INVALID_ARGUMENT,
			    "--from-state %s: %s", arg, err);
		return 0;
	case 'P': o->positions = 1; return 0;
	case 'u': o->run = arg; return 0;
	case 'C': o->close_ok = 1; return 0;
	case 'R':
		return cli_duration_flag(synopsis, "--refresh", arg, 1,
		    &o->refresh_ms);
	case 'b':
		if (parse_size(arg, &o->max_bytes) < 0 || o->max_bytes == 0 ||
		    o->max_bytes > DATAREAD_MAX_BYTES_LIMIT)
			return usage("--max-bytes %s is not 1 to 64M", arg);
		return 0;
	case 'T':
		return cli_duration_flag(synopsis, "--timeout", arg, 0,
		    &o->timeout_ms);
	default: return cli_std_option(c, synopsis);
	}
}

/* read's options and dataset into r: 0, or the exit code. */
static int
read_args(struct readargs *r, int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"job", required_argument, NULL, 'j'},
	    {"mode", required_argument, NULL, 'm'},
	    {"repeat", required_argument, NULL, 'r'},
	    {"seed", required_argument, NULL, 's'},
	    {"consumers", required_argument, NULL, 'c'},
	    {"consumer-index", required_argument, NULL, 'i'},
	    {"local", no_argument, NULL, 'l'},
	    {"host", required_argument, NULL, 'H'},
	    {"from-state", required_argument, NULL, 'f'},
	    {"positions", no_argument, NULL, 'P'},
	    {"run", required_argument, NULL, 'u'},
	    {"close-ok", no_argument, NULL, 'C'},
	    {"refresh", required_argument, NULL, 'R'},
	    {"max-bytes", required_argument, NULL, 'b'},
	    {"timeout", required_argument, NULL, 'T'},
	    {NULL, 0, NULL, 0},
	};
	char err[1024];
	enum status st;
	int c, rc = 0;

	/* 0: getopt starts anew, and options may follow the dataset. */
	optind = 0;
	while (
	    rc == 0 && (c = getopt_long(argc, argv, "", longopts, NULL)) != -1)
		rc = read_opt(r, c, optarg);
	if (rc != 0)
		return rc;
	if (optind + 1 != argc)
		return usage(optind < argc ? "read takes one dataset, not %s" :
		                             "read needs a dataset%s",
		    optind < argc ? argv[argc - 1] : "");
	r->d->o.dataset = argv[optind];
	st = readopts_check(&r->d->o, r->local, r->index, r->pos, r->d->host,
	    sizeof(r->d->host), err, sizeof(err));
	if (st == ST_USAGE)
		return cli_usage_error(synopsis, "%s", err);
	return st == ST_OK ? 0 : cli_fail(st, "%s", err);
}

int
dispatch_opts_read(int argc, char **argv, struct dispatch_opts_read *d)
{
	struct readargs r = {.d = d, .pos = datapos_new()};
	int rc;

	*d = (struct dispatch_opts_read){
	    .o = {.repeat = 1,
	        .refresh_ms = DATAREAD_REFRESH_DEFAULT,
	        .max_bytes = DATAREAD_MAX_BYTES_DEFAULT,
	        .timeout_ms = -1,
	        .out = 1}};
	if (r.pos == NULL)
		return cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
	rc = read_args(&r, argc, argv);
	datapos_free(r.pos);
	/* Progress for whoever watches a terminal; never into a pipe. */
	d->o.progress = isatty(STDERR_FILENO);
	return rc;
}
