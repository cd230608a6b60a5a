/*
 * dispatchctl: dispatchd from the shell: schedule closures (one, or one per
 * line of input), fetch their values, join a queue, cancel, list, and
 * define per-worker resources; register datasets, make their split lists,
 * read a job's elements to stdout, and checkpoint a job.
 *
 * Parsing and glue: the verbs are a table, and what they do is the
 * library's: dispatchd's calls (dispatch_client.h), its long polls
 * (dispatch_wait.h), what is shown (dispatch_show.h), schedule's batches
 * (dispatch_sched.h), split lists (splitlist.h), and a read (readopts.h,
 * dataread.h).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "buf.h"
#include "cli.h"
#include "datapos.h"
#include "dataread.h"
#include "dispatch_client.h"
#include "dispatch_sched.h"
#include "dispatch_show.h"
#include "dispatch_wait.h"
#include "duration.h"
#include "log.h"
#include "parse.h"
#include "readopts.h"
#include "shardmode.h"
#include "sigfd.h"
#include "splitlist.h"
#include "splitorder.h"
#include "text.h"

static const char synopsis[] =
    "usage: dispatchctl [-d ADDR] [--json] [-q QUEUE] VERB ...\n"
    "  schedule [--stdin FILE|-] [--env K=V]... [--timeout DUR] "
    "[--retry-exit CODE]...\n"
    "           [--max-retries N] [--on TASK] [--needs RESOURCE]... "
    "[--key KEY]\n"
    "           [--no-block] [--each] -- COMMAND [ARG...]\n"
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

/*
 * The verbs, as the synopsis lists them: a row for a verb, or one for
 * each of its sub-verbs, which gets argv from the sub-verb on; a row with
 * no sub-verb after them takes those it does not name. args checks the
 * operands: NONE, ONE (named as the verb is), or ANY (run checks them).
 * A verb that shows what one call answers names the call (list; get,
 * which takes the operand) and the view, and no run; cancel and forget
 * name their call for each closure.
 */
struct ctl;

enum { ANY, NONE, ONE };

struct verb {
	const char *name, *sub;
	int (*run)(struct ctl *x, int argc, char **argv);
	int args;
	int local; /* needs no dispatchd */
	int wait;  /* join waits for the queue, done does not */
	enum status (
	    *list)(struct dispatch_client *, int64_t, json_t **, json_t **);
	enum status (*get)(struct dispatch_client *, const char *, int64_t,
	    json_t **, json_t **);
	dispatch_show_fn *show;
	enum status (*each)(struct dispatch_client *, uint64_t, int64_t,
	    json_t **, json_t **);
};

/* read's options, and what it needs to check them. */
struct readargs {
	struct dataread_opts o;
	struct datapos *pos; /* --from-state's */
	int local, index;    /* --local, --consumer-index given */
	char host[256];
};

struct ctl {
	struct dispatch_client *dc;
	const char *queue;
	int json;
	const struct verb *v; /* the verb's row */
};

static int
usage(const char *fmt, const char *arg)
{
	return cli_usage_error(synopsis, fmt, arg);
}

/* The deadline of a call that answers at once. */
static int64_t
soon(void)
{
	return duration_now_ms() + 30000;
}

static int
is(const char *s, const char *t)
{
	return s != NULL && strcmp(s, t) == 0;
}

/* rc, or the exit code of a write to stdout that failed. */
static int
flushed(int rc)
{
	if (fflush(stdout) != 0 && rc == 0)
		return cli_fail(ST_INTERNAL, "writing: %s", strerror(errno));
	return rc;
}

/* The exit code a closure's end stands for. */
static int
closure_code(json_t *c)
{
	const char *state = json_string_value(json_object_get(c, "state"));
	json_t *ex = json_object_get(c, "exit"), *sig;

	if (is(state, "CANCELLED"))
		return status_exit(ST_CANCELLED);
	if (is(state, "ABORTED"))
		return status_exit(ST_ABORTED);
	if (json_is_integer(ex))
		return json_integer_value(ex) != 0 ||
		        json_object_get(c, "message") == NULL ?
		    (int)json_integer_value(ex) :
		    status_exit(ST_INTERNAL);
	sig = json_object_get(c, "signal");
	if (json_is_integer(sig))
		return 128 + (int)json_integer_value(sig);
	return status_exit(ST_INTERNAL);
}

/*
 * A failed call: a queue's error names its closure, whose exit code is
 * the one to exit with; anything else is the status's, with msg (NULL:
 * the client's last error).
 */
static int
fail(struct ctl *x, enum status st, json_t *errbody, const char *msg)
{
	json_t *c = json_object_get(errbody, "closure");
	int code = c != NULL ?
	    closure_code(c) :
	    cli_fail(st, "%s",
	        msg != NULL ? msg : dispatch_client_error(x->dc));

	if (c != NULL)
		dispatch_show_failed(stdout, stderr, errbody, x->json);
	json_decref(errbody);
	return code != 0 ? code : status_exit(ST_INTERNAL);
}

/* A call's reply shown, or its failure. */
static int
show(struct ctl *x, enum status st, json_t *reply, json_t *errbody,
    dispatch_show_fn *fn)
{
	if (st != ST_OK)
		return fail(x, st, errbody, NULL);
	fn(stdout, reply, x->json);
	json_decref(reply);
	return 0;
}

/* argv[i] as a closure's id (0: it is not one). */
static uint64_t
id_of(char **argv, int i)
{
	char *end;
	uint64_t id;

	errno = 0;
	id = strtoull(argv[i], &end, 10);
	return argv[i][0] >= '1' && argv[i][0] <= '9' && *end == '\0' &&
	        errno == 0 ?
	    id :
	    0;
}

/* argv[first...] are closure ids, at least one. */
static int
ids_check(int first, int argc, char **argv)
{
	if (first >= argc)
		return usage("%s needs a closure id", argv[0]);
	for (int i = first; i < argc; i++)
		if (id_of(argv, i) == 0)
			return usage("%s is not a closure id", argv[i]);
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
	default: return cli_std_option(c, synopsis);
	}
}

static int
cmd_schedule(struct ctl *x, int argc, char **argv)
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
	    {NULL, 0, NULL, 0},
	};
	struct dispatch_sched s;
	json_t *errbody;
	char err[2048];
	enum status st;
	int c, rc = 0;

	if (dispatch_sched_init(&s, x->dc, x->queue, stdout) < 0)
		rc = cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
	optind = 1;
	while (
	    rc == 0 && (c = getopt_long(argc, argv, "+", longopts, NULL)) != -1)
		rc = sched_opt(&s, c, optarg);
	if (rc == 0 && optind < argc && strcmp(argv[optind - 1], "--") != 0 &&
	    strcmp(argv[optind], "--") == 0)
		optind++;
	s.cmd = argv + optind;
	s.ncmd = argc - optind;
	if (rc == 0 && s.ncmd <= 0)
		rc = usage("schedule needs a command%s", "");
	else if (rc == 0 && s.each && is(s.in, "-"))
		rc = usage("--each reads its lines from stdin: --stdin %s "
		           "must be a file",
		    s.in);
	else if (rc == 0 && s.each && s.key != NULL &&
	    !dispatch_sched_braces(s.key))
		rc = usage("with --each, --key %s must hold {} (one key a "
		           "line)",
		    s.key);
	if (rc == 0) {
		st = dispatch_sched_run(&s, stdin, &errbody, err, sizeof(err));
		rc = flushed(st == ST_OK ? 0 : fail(x, st, errbody, err));
	}
	dispatch_sched_free(&s);
	return rc;
}

/* --timeout, and ls's --state (state NULL for the others). */
static int
timeout_opt(int argc, char **argv, int64_t *deadline, const char **state)
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
			*state = optarg;
			break;
		default: return cli_std_option(c, synopsis);
		}
	}
	return 0;
}

/*
 * A closure's end as text: its stdout's bytes, and on stderr how it ended
 * when it did not end of itself.
 */
static int
fetch_end(json_t *c, uint64_t id)
{
	const char *state = json_string_value(json_object_get(c, "state"));
	const char *why = json_string_value(json_object_get(c, "message"));
	int code = closure_code(c);

	if (dispatch_show_stdout(stdout, c) < 0)
		code = cli_fail(ST_INTERNAL, "writing: %s", strerror(errno));
	if (is(state, "CANCELLED"))
		cli_fail(ST_CANCELLED,
		    "closure %" PRIu64 " was cancelled%s%s%s", id,
		    why != NULL ? " (" : "", why != NULL ? why : "",
		    why != NULL ? ")" : "");
	else if (is(state, "ABORTED"))
		cli_fail(ST_ABORTED, "closure %" PRIu64 ": %s", id, why);
	else if (json_is_true(json_object_get(c, "stdout_truncated")))
		fprintf(stderr,
		    "%s: closure %" PRIu64 ": its output was cut at the "
		    "worker's --max-output\n",
		    log_prog(), id);
	return code;
}

/* Each closure's value; the exit code is the first that is not 0. */
static int
cmd_fetch(struct ctl *x, int argc, char **argv)
{
	json_t *c, *errbody;
	int64_t deadline;
	int rc, first = 0;

	if ((rc = timeout_opt(argc, argv, &deadline, NULL)) != 0 ||
	    (rc = ids_check(optind, argc, argv)) != 0)
		return rc;
	for (int i = optind; i < argc; i++) {
		uint64_t id = id_of(argv, i);
		enum status st =
		    dispatch_wait_closure(x->dc, id, deadline, &c, &errbody);
		if (st != ST_OK) {
			rc = fail(x, st, errbody, NULL);
		} else {
			if (x->json)
				dispatch_show_json(stdout, c);
			if (is(json_string_value(json_object_get(c, "state")),
			        "NOT_READY"))
				rc = cli_fail(ST_DEADLINE_EXCEEDED,
				    "closure %" PRIu64 " is not ready", id);
			else
				rc = x->json ? closure_code(c) :
				               fetch_end(c, id);
			json_decref(c);
		}
		first = first != 0 ? first : rc;
	}
	return flushed(first);
}

/* On a terminal, join shows the counts while it waits. */
static void
progress(json_t *counts, void *queue)
{
	fprintf(stderr,
	    "%s: queue %s: %" JSON_INTEGER_FORMAT
	    " queued, %" JSON_INTEGER_FORMAT " in flight\n",
	    log_prog(), (const char *)queue,
	    json_integer_value(json_object_get(counts, "queued")),
	    json_integer_value(json_object_get(counts, "inflight")));
}

/* join, and done: whether the queue is done, at once. */
static int
cmd_join(struct ctl *x, int argc, char **argv)
{
	int join = x->v->wait, done, rc;
	json_t *reply, *errbody;
	int64_t deadline;
	enum status st;

	if ((rc = timeout_opt(argc, argv, &deadline, NULL)) != 0)
		return rc;
	if (optind < argc)
		return usage("unexpected argument %s", argv[optind]);
	st = join ? dispatch_wait_queue(x->dc, x->queue, deadline,
	                isatty(2) ? progress : NULL, (void *)x->queue, &reply,
	                &errbody) :
	            dc_done(x->dc, x->queue, deadline, &reply, &errbody);
	if (st != ST_OK)
		return fail(x, st, errbody, NULL);
	done = json_is_true(json_object_get(reply, "done"));
	if (join && !done) {
		json_decref(reply);
		return cli_fail(ST_DEADLINE_EXCEEDED, "queue %s is not done",
		    x->queue);
	}
	if (x->json)
		dispatch_show_json(stdout, reply);
	else if (!join)
		printf("%s\n", done ? "true" : "false");
	json_decref(reply);
	return done ? 0 : 1;
}

/* cancel and forget: the row's call for each closure, past failures too. */
static int
cmd_each(struct ctl *x, int argc, char **argv)
{
	json_t *reply, *errbody;
	int rc = ids_check(1, argc, argv), r;

	if (rc != 0)
		return rc;
	for (int i = 1; i < argc; i++) {
		enum status st =
		    x->v->each(x->dc, id_of(argv, i), soon(), &reply, &errbody);
		if (st != ST_OK) {
			json_decref(errbody);
			r = cli_fail(st, "%s", dispatch_client_error(x->dc));
			rc = rc != 0 ? rc : r;
			continue;
		}
		if (x->json)
			dispatch_show_json(stdout, reply);
		json_decref(reply);
	}
	return rc;
}

/*
 * Page after page, each shown as it comes: a list of a million closures
 * is never held whole, here or in dispatchd.
 */
static int
cmd_ls(struct ctl *x, int argc, char **argv)
{
	struct dispatch_show_list l = {.f = stdout, .json = x->json};
	const char *state = NULL;
	json_t *page, *errbody;
	uint64_t after = 0;
	int64_t deadline;
	int rc, more = 1;

	if ((rc = timeout_opt(argc, argv, &deadline, &state)) != 0)
		return rc;
	if (optind < argc)
		return usage("unexpected argument %s", argv[optind]);
	while (rc == 0 && more) {
		enum status st = dc_closures(x->dc, x->queue, state, after,
		    soon(), &page, &errbody);
		if (st != ST_OK) {
			rc = fail(x, st, errbody, NULL);
			break;
		}
		dispatch_show_list_page(&l, page);
		more = dc_closures_more(page, &after);
		json_decref(page);
	}
	dispatch_show_list_end(&l);
	return rc != 0 ? rc : flushed(0);
}

/* resource NAME, checked before its sub-verb is known. */
static int
resource_name(int argc, char **argv)
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

static int
resource_status(struct ctl *x, int argc, char **argv)
{
	json_t *reply, *errbody;
	enum status st;
	int rc = resource_name(argc, argv);

	if (rc == 0 && argc > 2)
		rc = usage("unexpected argument %s", argv[2]);
	if (rc != 0)
		return rc;
	st = dc_resource(x->dc, argv[1], soon(), &reply, &errbody);
	return show(x, st, reply, errbody, dispatch_show_resource);
}

static int
resource_add(struct ctl *x, int argc, char **argv)
{
	json_t *cmd, *reply, *errbody;
	enum status st;
	int rc, i = 2;

	if ((rc = resource_name(argc, argv)) != 0)
		return rc;
	if (i < argc && strcmp(argv[i], "--") == 0)
		i++;
	if (i >= argc)
		return usage("resource add needs a command after --%s", "");
	for (cmd = json_array(); i < argc; i++)
		json_array_append_new(cmd, json_string(argv[i]));
	st = dc_resource_add(x->dc, argv[1], cmd, soon(), &reply, &errbody);
	json_decref(cmd);
	if (st != ST_OK)
		return fail(x, st, errbody, NULL);
	json_decref(reply);
	return 0;
}

/* Any other: its name is checked first all the same. */
static int
resource_other(struct ctl *x, int argc, char **argv)
{
	int rc = resource_name(argc, argv);

	(void)x;
	return rc != 0 ? rc : usage("resource: unknown verb %s", argv[0]);
}

static int
dataset_add(struct ctl *x, int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"splits", required_argument, NULL, 's'},
	    {"reader", required_argument, NULL, 'r'},
	    {"framing", required_argument, NULL, 'f'},
	    {"reader-skips", no_argument, NULL, 'k'},
	    {"name", required_argument, NULL, 'n'},
	    {NULL, 0, NULL, 0},
	};
	const char *splits = NULL, *reader = NULL, *framing = NULL,
	           *name = NULL;
	json_t *body, *reply, *errbody, *lines;
	char err[512];
	enum framing f;
	enum status st;
	int c, skips = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's': splits = optarg; break;
		case 'r': reader = optarg; break;
		case 'f': framing = optarg; break;
		case 'k': skips = 1; break;
		case 'n': name = optarg; break;
		default: return cli_std_option(c, synopsis);
		}
	}
	if (optind < argc)
		return usage("unexpected argument %s", argv[optind]);
	if (splits == NULL || reader == NULL)
		return usage("dataset add needs --splits and --reader%s", "");
	if (framing != NULL && framing_parse(framing, &f) < 0)
		return usage("--framing %s is not lines, nul or len32",
		    framing);
	if ((st = splitlist_load(splits, &lines, err, sizeof(err))) != ST_OK)
		return cli_fail(st, "--splits %s: %s", splits, err);
	if ((body = json_pack("{s:o,s:s,s:s?,s:b,s:s?}", "splits", lines,
	         "reader", reader, "framing", framing, "reader_skips", skips,
	         "name", name)) == NULL)
		return cli_fail(ST_INVALID_ARGUMENT,
		    "--reader or --name is not UTF-8");
	st = dc_dataset_add(x->dc, body, soon(), &reply, &errbody);
	json_decref(body);
	return show(x, st, reply, errbody, dispatch_show_added);
}

static int
dataset_splits(struct ctl *x, int argc, char **argv)
{
	struct buf out = {0};
	enum status st = dc_splits(x->dc, argv[1], soon(), &out);
	int rc = 0;

	(void)argc;
	if (st != ST_OK)
		rc = cli_fail(st, "%s", dispatch_client_error(x->dc));
	else if (out.len > 0 && fwrite(out.data, 1, out.len, stdout) != out.len)
		rc = cli_fail(ST_INTERNAL, "writing: %s", strerror(errno));
	buf_free(&out);
	return rc;
}

static int
cmd_checkpoint(struct ctl *x, int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"job", required_argument, NULL, 'j'},
	    {NULL, 0, NULL, 0},
	};
	const char *job = NULL;
	json_t *reply, *errbody;
	enum status st;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (c != 'j')
			return cli_std_option(c, synopsis);
		job = optarg;
	}
	if (optind < argc)
		return usage("unexpected argument %s", argv[optind]);
	if (job == NULL)
		return usage("checkpoint needs --job%s", "");
	st = dc_checkpoint(x->dc, job, soon(), &reply, &errbody);
	if (st != ST_OK)
		return fail(x, st, errbody, NULL);
	dispatch_show_json(stdout, reply);
	json_decref(reply);
	return 0;
}

/* splits' sub-verbs: their list on stdout, or why not. */
static int
splits_done(const char *verb, enum status st, const char *err)
{
	if (st == ST_OK)
		return flushed(0);
	if (st == ST_RESOURCE_EXHAUSTED)
		return cli_fail(st, "%s", err);
	return cli_fail(st, "splits %s: %s", verb, err);
}

static int
splits_files(struct ctl *x, int argc, char **argv)
{
	char err[2048];

	(void)x;
	if (argc < 2)
		return usage("splits files needs a glob%s", "");
	return splits_done("files",
	    splitlist_files(stdout, argc - 1, argv + 1, err, sizeof(err)), err);
}

static int
splits_range(struct ctl *x, int argc, char **argv)
{
	int64_t a, end, step = 1;

	(void)x;
	if (argc < 3 || argc > 4)
		return usage("splits range needs START END [STEP]%s", "");
	if (parse_int64(argv[1], &a) < 0 || a < 0)
		return usage("splits range: START %s is not a number >= 0",
		    argv[1]);
	if (parse_int64(argv[2], &end) < 0 || end < a)
		return usage("splits range: END %s is not a number >= START",
		    argv[2]);
	if (argc == 4 && (parse_int64(argv[3], &step) < 0 || step < 1))
		return usage("splits range: STEP %s is not a number above zero",
		    argv[3]);
	splitlist_range(stdout, a, end, step);
	return flushed(0);
}

static int
splits_bytes(struct ctl *x, int argc, char **argv)
{
	char err[2048];
	size_t size;

	(void)x;
	if (argc != 3)
		return usage("splits bytes needs FILE SIZE%s", "");
	if (parse_size(argv[2], &size) < 0 || size == 0 ||
	    size > (size_t)INT64_MAX)
		return usage("splits bytes: SIZE %s is not a size above zero "
		             "(1048576, 64k, 16M, 1G)",
		    argv[2]);
	return splits_done("bytes",
	    splitlist_bytes(stdout, argv[1], size, err, sizeof(err)), err);
}

/* One of read's options into r: 0, or the exit code. */
static int
read_opt(struct readargs *r, int c, const char *arg)
{
	struct dataread_opts *o = &r->o;
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
	r->o.dataset = argv[optind];
	st = readopts_check(&r->o, r->local, r->index, r->pos, r->host,
	    sizeof(r->host), err, sizeof(err));
	if (st == ST_USAGE)
		return cli_usage_error(synopsis, "%s", err);
	return st == ST_OK ? 0 : cli_fail(st, "%s", err);
}

/*
 * Elements to stdout until the data ends. A signal ends the read inside
 * dataread, which releases the job client; then the signal ends us as it
 * would have, so that the shell sees it.
 */
static int
cmd_read(struct ctl *x, int argc, char **argv)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
	struct readargs r = {.o = {.repeat = 1,
	                         .refresh_ms = DATAREAD_REFRESH_DEFAULT,
	                         .max_bytes = DATAREAD_MAX_BYTES_DEFAULT,
	                         .timeout_ms = -1,
	                         .out = 1},
	    .pos = datapos_new()};
	char err[2048];
	sigset_t blocked;
	enum status st;
	int rc, sig;

	if (r.pos == NULL)
		return cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
	rc = read_args(&r, argc, argv);
	datapos_free(r.pos);
	if (rc == 0 &&
	    (r.o.stop_fd = sigfd_open(sigs, sizeof(sigs) / sizeof(sigs[0]),
	         &blocked)) < 0)
		rc = cli_fail(ST_INTERNAL, "signalfd: %s", strerror(errno));
	if (rc != 0) {
		json_decref(r.o.from_state);
		return rc;
	}
	st = dataread_run(x->dc, &r.o, err, sizeof(err));
	json_decref(r.o.from_state);
	if (st == ST_CANCELLED && (sig = sigfd_read(r.o.stop_fd)) > 0) {
		pthread_sigmask(SIG_UNBLOCK, &blocked, NULL);
		raise(sig);
	}
	close(r.o.stop_fd);
	return st == ST_OK ? 0 : cli_fail(st, "%s", err);
}

static const struct verb verbs[] = {
    {.name = "schedule", .run = cmd_schedule},
    {.name = "fetch", .run = cmd_fetch},
    {.name = "join", .run = cmd_join, .wait = 1},
    {.name = "done", .run = cmd_join},
    {.name = "cancel", .run = cmd_each, .each = dc_cancel},
    {.name = "forget", .run = cmd_each, .each = dc_forget},
    {.name = "ls", .run = cmd_ls},
    {.name = "status",
        .args = NONE,
        .list = dc_status,
        .show = dispatch_show_status},
    {.name = "resource", .sub = "add", .run = resource_add},
    {.name = "resource", .sub = "status", .run = resource_status},
    {.name = "resource",
        .sub = "ls",
        .args = NONE,
        .list = dc_resources,
        .show = dispatch_show_resources},
    {.name = "resource", .run = resource_other},
    {.name = "dataset", .sub = "add", .run = dataset_add},
    {.name = "dataset",
        .sub = "ls",
        .args = NONE,
        .list = dc_datasets,
        .show = dispatch_show_datasets},
    {.name = "dataset",
        .sub = "show",
        .args = ONE,
        .get = dc_dataset,
        .show = dispatch_show_dataset},
    {.name = "dataset", .sub = "splits", .run = dataset_splits, .args = ONE},
    {.name = "splits", .sub = "files", .run = splits_files, .local = 1},
    {.name = "splits", .sub = "range", .run = splits_range, .local = 1},
    {.name = "splits", .sub = "bytes", .run = splits_bytes, .local = 1},
    {.name = "read", .run = cmd_read},
    {.name = "checkpoint", .run = cmd_checkpoint},
    {.name = "job",
        .sub = "ls",
        .args = NONE,
        .list = dc_jobs,
        .show = dispatch_show_jobs},
    {.name = "job",
        .sub = "show",
        .args = ONE,
        .get = dc_job,
        .show = dispatch_show_job},
    {.name = NULL},
};

/* name's first row, or the one of sub (or the row for others). */
static const struct verb *
verb_find(const char *name, const char *sub)
{
	const struct verb *v;

	for (v = verbs; v->name != NULL; v++)
		if (strcmp(v->name, name) == 0 &&
		    (sub == NULL || v->sub == NULL || strcmp(v->sub, sub) == 0))
			return v;
	return NULL;
}

/* "job needs ls or show": name's sub-verbs, as the table has them. */
static int
needs_sub(const char *name)
{
	const struct verb *v, *last = NULL;
	struct buf b = {0};
	int rc;

	for (v = verbs; v->name != NULL; v++) {
		if (strcmp(v->name, name) != 0 || v->sub == NULL)
			continue;
		if (last != NULL)
			buf_printf(&b, "%s%s", b.len > 0 ? ", " : "",
			    last->sub);
		last = v;
	}
	buf_printf(&b, "%s%s", b.len > 0 ? " or " : "", last->sub);
	rc = cli_usage_error(synopsis, "%s needs %s", name,
	    b.data != NULL ? b.data : "");
	buf_free(&b);
	return rc;
}

/* Runs v, the first row of argv's verb. */
static int
run(struct ctl *x, const struct verb *v, int argc, char **argv)
{
	json_t *reply, *errbody;
	enum status st;

	if (v->sub != NULL) {
		if (argc < 2)
			return needs_sub(argv[0]);
		if ((v = verb_find(argv[0], argv[1])) == NULL)
			return cli_usage_error(synopsis, "%s: unknown verb %s",
			    argv[0], argv[1]);
		argc--;
		argv++;
	}
	if (v->args == NONE && argc > 1)
		return usage("unexpected argument %s", argv[1]);
	if (v->args == ONE && argc != 2)
		return cli_usage_error(synopsis,
		    argc < 2 ? "%s %s needs a %s" : "%s %s takes one %s",
		    v->name, v->sub, v->name);
	x->v = v;
	if (v->run != NULL)
		return v->run(x, argc, argv);
	if (v->get != NULL)
		st = v->get(x->dc, argv[1], soon(), &reply, &errbody);
	else
		st = v->list(x->dc, soon(), &reply, &errbody);
	return show(x, st, reply, errbody, v->show);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"dispatcher", required_argument, NULL, 'd'},
	    {"queue", required_argument, NULL, 'q'},
	    {"json", no_argument, NULL, 'J'},
	    CLI_STD_LONGOPTS,
	    {NULL, 0, NULL, 0},
	};
	struct ctl x = {.queue = "default"};
	const struct verb *v;
	const char *addr = NULL;
	char err[512];
	int c, rc;

	log_init(argv[0], 0);
	signal(SIGPIPE, SIG_IGN);
	while ((c = getopt_long(argc, argv, "+hd:q:", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': addr = optarg; break;
		case 'q': x.queue = optarg; break;
		case 'J': x.json = 1; break;
		default: return cli_std_option(c, synopsis);
		}
	}
	if (optind >= argc)
		return usage("no verb given%s", "");
	argc -= optind;
	argv += optind;
	if (!text_name(x.queue, 128))
		return usage("-q %s is not a queue name (letters, digits, "
		             "_-.:)",
		    x.queue);
	if ((v = verb_find(argv[0], NULL)) == NULL)
		return usage("unknown verb %s", argv[0]);
	if (!v->local &&
	    (x.dc = dispatch_client_new(cli_dispatch_addr(addr), err,
	         sizeof(err))) == NULL)
		return cli_fail(ST_INVALID_ARGUMENT, "%s", err);
	rc = run(&x, v, argc, argv);
	dispatch_client_free(x.dc);
	return rc;
}
