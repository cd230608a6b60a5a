/*
 * dispatchctl: dispatchd from the shell: schedule closures (one, or one per
 * line of input), fetch their values, join a queue, cancel, list, and
 * define per-worker resources; register datasets, make their split lists,
 * read a job's elements to stdout, and checkpoint a job.
 *
 * Glue: the verbs are a table; their options and operands are
 * dispatch_opts.h's, and what they do is the library's: dispatchd's calls (dispatch_client.h), its long polls
 * (dispatch_wait.h), what is shown (dispatch_show.h), schedule's batches
 * (dispatch_sched.h), split lists (splitlist.h), and a read (readopts.h,
 * dataread.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "buf.h"
#include "cli.h"
#include "dataread.h"
#include "dispatch_client.h"
#include "dispatch_opts.h"
#include "dispatch_sched.h"
#include "dispatch_show.h"
#include "dispatch_wait.h"
#include "duration.h"
#include "log.h"
#include "sigfd.h"
#include "splitlist.h"
#include "text.h"

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

struct ctl {
	struct dispatch_client *dc;
	const char *queue;
	int json;
	const struct verb *v; /* the verb's row */
};

static int
usage(const char *fmt, const char *arg)
{
	return cli_usage_error(dispatch_opts_synopsis, fmt, arg);
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
	    dispatch_show_code(c) :
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

static int
cmd_schedule(struct ctl *x, int argc, char **argv)
{
	struct dispatch_sched s;
	json_t *errbody;
	char err[2048];
	enum status st;
	int rc = 0;

	if (dispatch_sched_init(&s, x->dc, x->queue, stdout) < 0)
		rc = cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
	if (rc == 0)
		rc = dispatch_opts_schedule(argc, argv, &s);
	if (rc == 0) {
		st = dispatch_sched_run(&s, stdin, &errbody, err, sizeof(err));
		rc = st == ST_OK ? 0 : fail(x, st, errbody, err);
	}
	dispatch_sched_free(&s);
	return rc;
}

/* Each closure's value; the exit code is the first that is not 0. */
static int
cmd_fetch(struct ctl *x, int argc, char **argv)
{
	json_t *c, *errbody;
	int64_t deadline;
	int rc, first = 0;

	if ((rc = dispatch_opts_wait(argc, argv, &deadline, NULL)) != 0 ||
	    (rc = dispatch_opts_ids(optind, argc, argv)) != 0)
		return rc;
	for (int i = optind; i < argc; i++) {
		uint64_t id = dispatch_opts_id(argv[i]);
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
				rc = x->json ? dispatch_show_code(c) :
				               dispatch_show_end(stdout, c, id);
			json_decref(c);
		}
		first = first != 0 ? first : rc;
	}
	return first;
}

/* join, and done: whether the queue is done, at once. */
static int
cmd_join(struct ctl *x, int argc, char **argv)
{
	int join = x->v->wait, done, rc;
	struct dispatch_progress prog = {x->queue, 0};
	json_t *reply, *errbody;
	int64_t deadline;
	enum status st;

	if ((rc = dispatch_opts_wait(argc, argv, &deadline, NULL)) != 0)
		return rc;
	if (optind < argc)
		return usage("unexpected argument %s", argv[optind]);
	st = join ? dispatch_wait_queue(x->dc, x->queue, deadline,
	                isatty(2) ? dispatch_show_progress : NULL, &prog,
	                &reply, &errbody) :
	            dc_done(x->dc, x->queue, deadline, &reply, &errbody);
	dispatch_show_progress_end(&prog);
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
	int rc = dispatch_opts_ids(1, argc, argv), r;

	if (rc != 0)
		return rc;
	for (int i = 1; i < argc; i++) {
		enum status st = x->v->each(x->dc, dispatch_opts_id(argv[i]),
		    soon(), &reply, &errbody);
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

	if ((rc = dispatch_opts_wait(argc, argv, &deadline, &state)) != 0)
		return rc;
	if (optind < argc)
		return usage("unexpected argument %s", argv[optind]);
	/* A stdout that refused a page takes no more of them. */
	while (rc == 0 && more && !ferror(stdout)) {
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
	if (rc == 0 && ferror(stdout))
		rc = cli_fail(ST_INTERNAL, "writing: %s", strerror(errno));
	return rc;
}

static int
resource_status(struct ctl *x, int argc, char **argv)
{
	json_t *reply, *errbody;
	enum status st;
	int rc = dispatch_opts_resource(argc, argv);

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

	if ((rc = dispatch_opts_resource(argc, argv)) != 0)
		return rc;
	if (i < argc && strcmp(argv[i], "--") == 0)
		i++;
	if (i >= argc)
		return usage("resource add needs a command after --%s", "");
	for (cmd = json_array(); i < argc; i++)
		if (json_array_append_new(cmd, json_string(argv[i])) < 0) {
			json_decref(cmd);
			return cli_fail(ST_INVALID_ARGUMENT,
			    "resource add: the command is not UTF-8");
		}
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
	int rc = dispatch_opts_resource(argc, argv);

	(void)x;
	return rc != 0 ? rc : usage("resource: unknown verb %s", argv[0]);
}

static int
dataset_add(struct ctl *x, int argc, char **argv)
{
	struct dispatch_opts_dataset d;
	json_t *body, *reply, *errbody, *lines;
	char err[512];
	enum status st;
	int rc;

	if ((rc = dispatch_opts_dataset(argc, argv, &d)) != 0)
		return rc;
	if ((st = splitlist_load(d.splits, &lines, err, sizeof(err))) != ST_OK)
		return cli_fail(st, "--splits %s: %s", d.splits, err);
	if ((body = json_pack("{s:o,s:s,s:s?,s:b,s:s?}", "splits", lines,
	         "reader", d.reader, "framing", d.framing, "reader_skips",
	         d.skips, "name", d.name)) == NULL)
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
	const char *job;
	json_t *reply, *errbody;
	enum status st;
	int rc;

	if ((rc = dispatch_opts_checkpoint(argc, argv, &job)) != 0)
		return rc;
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
		return 0;
	if (st == ST_RESOURCE_EXHAUSTED || st == ST_INTERNAL)
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
	char err[2048];
	int64_t a, end, step;
	int rc = dispatch_opts_range(argc, argv, &a, &end, &step);

	(void)x;
	if (rc != 0)
		return rc;
	return splits_done("range",
	    splitlist_range(stdout, a, end, step, err, sizeof(err)), err);
}

static int
splits_bytes(struct ctl *x, int argc, char **argv)
{
	char err[2048];
	size_t size;
	int rc = dispatch_opts_bytes(argc, argv, &size);

	(void)x;
	if (rc != 0)
		return rc;
	return splits_done("bytes",
	    splitlist_bytes(stdout, argv[1], size, err, sizeof(err)), err);
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
	struct dispatch_opts_read r;
	char err[2048];
	sigset_t blocked;
	enum status st;
	int rc, sig;

	rc = dispatch_opts_read(argc, argv, &r);
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

/* clang-format off */
static const struct verb verbs[] = {
	{"schedule", NULL, .run = cmd_schedule},
	{"fetch", NULL, .run = cmd_fetch},
	{"join", NULL, .run = cmd_join, .wait = 1},
	{"done", NULL, .run = cmd_join},
	{"cancel", NULL, .run = cmd_each, .each = dc_cancel},
	{"forget", NULL, .run = cmd_each, .each = dc_forget},
	{"ls", NULL, .run = cmd_ls},
	{"status", NULL, .args = NONE, .list = dc_status, .show = dispatch_show_status},
	{"resource", "add", .run = resource_add},
	{"resource", "status", .run = resource_status},
	{"resource", "ls", .args = NONE, .list = dc_resources, .show = dispatch_show_resources},
	{"resource", NULL, .run = resource_other},
	{"dataset", "add", .run = dataset_add},
	{"dataset", "ls", .args = NONE, .list = dc_datasets, .show = dispatch_show_datasets},
	{"dataset", "show", .args = ONE, .get = dc_dataset, .show = dispatch_show_dataset},
	{"dataset", "splits", .args = ONE, .run = dataset_splits},
	{"splits", "files", .local = 1, .run = splits_files},
	{"splits", "range", .local = 1, .run = splits_range},
	{"splits", "bytes", .local = 1, .run = splits_bytes},
	{"read", NULL, .run = cmd_read},
	{"checkpoint", NULL, .run = cmd_checkpoint},
	{"job", "ls", .args = NONE, .list = dc_jobs, .show = dispatch_show_jobs},
	{"job", "show", .args = ONE, .get = dc_job, .show = dispatch_show_job},
	{.name = NULL},
};
/* clang-format on */

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
	rc = cli_usage_error(dispatch_opts_synopsis, "%s needs %s", name,
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
			return cli_usage_error(dispatch_opts_synopsis,
			    "%s: unknown verb %s", argv[0], argv[1]);
		argc--;
		argv++;
	}
	if (v->args == NONE && argc > 1)
		return usage("unexpected argument %s", argv[1]);
	if (v->args == ONE && argc != 2)
		return cli_usage_error(dispatch_opts_synopsis,
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
	struct ctl x = {0};
	const struct verb *v;
	const char *addr;
	char err[512];
	int rc;

	log_init(argv[0], 0);
	signal(SIGPIPE, SIG_IGN);
	if ((rc = dispatch_opts_main(argc, argv, &addr, &x.queue, &x.json)) !=
	    0)
		return rc;
	argc -= optind;
	argv += optind;
	if ((v = verb_find(argv[0], NULL)) == NULL)
		return usage("unknown verb %s", argv[0]);
	if (!v->local &&
	    (x.dc = dispatch_client_new(cli_dispatch_addr(addr), err,
	         sizeof(err))) == NULL)
		return cli_fail(ST_INVALID_ARGUMENT, "%s", err);
	rc = run(&x, v, argc, argv);
	dispatch_client_free(x.dc);
	/* Whatever the verb, its output is out, or it fails. */
	return cli_flushed(stdout, rc);
}
