/*
 * kvctl: coordd's key-value store from the shell.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "buf.h"
#include "cli.h"
#include "coord_client.h"
#include "coord_reach.h"
#include "coord_text.h"
#include "duration.h"
#include "keypath.h"
#include "log.h"
#include "parse.h"
#include "text.h"
#include "wallclock.h"

#define DEFAULT_TIMEOUT_MS 30000

static const char synopsis[] =
    "usage: kvctl [-c ADDR] [--json] [--timeout DUR] put [-f] KEY [VALUE | -]\n"
    "       kvctl [-c ADDR] [--json] [--timeout DUR] update KEY [VALUE | -]\n"
    "       kvctl [-c ADDR] [--json] [--timeout DUR] get KEY\n"
    "       kvctl [-c ADDR] [--json] [--timeout DUR] tryget KEY\n"
    "       kvctl [-c ADDR] [--json] [--timeout DUR] ls PREFIX\n"
    "       kvctl [-c ADDR] [--json] [--timeout DUR] rm KEY\n"
    "       kvctl [-c ADDR] [--json] [--timeout DUR] watch [--since REV] "
    "[--count N] PREFIX\n"
    "       kvctl [-c ADDR] [--json] [--timeout DUR] add KEY [N]\n"
    "       kvctl [-c ADDR] [--json] [--timeout DUR] cas [--absent] KEY "
    "[OLD] NEW\n       kvctl [-c ADDR] [--json] [--timeout DUR] status\n";

struct opts {
	const char *addr;
	int json;
	int64_t timeout; /* ms; -1 when not given */
	int force;
	int absent;
	int64_t since;
	long count;
};

struct ctx {
	struct opts o;
	struct coord_client *cc;
	int64_t deadline;
};

/* The options only some verbs take. */
enum {
	V_FORCE = 1 << 0,
	V_ABSENT = 1 << 1,
	V_WATCH = 1 << 2, /* --since, --count */
	V_KEY = 1 << 3,   /* the first operand is a key */
};

struct verb {
	const char *name;
	int (*fn)(struct ctx *x, int argc, char **argv);
	unsigned takes;
	int64_t timeout; /* default ms; 0: none */
};

static const struct verb *find_verb(const char *name);

static int
usage_error(const char *fmt, const char *arg)
{
	return cli_usage_error(synopsis, fmt, arg);
}

/* A verb's own option: an error unless the verb takes it. */
static int
takes(const struct verb *v, unsigned what, const char *flag)
{
	if (v != NULL && (v->takes & what) != 0)
		return 0;
	return cli_usage_error(synopsis, "%s is not an option of %s", flag,
	    v != NULL ? v->name : "kvctl itself");
}

/* Parses the options shared by every verb and the verb's own. */
static int
parse_opts(int argc, char **argv, struct opts *o, const struct verb *verb)
{
	static const struct option longopts[] = {
	    {"json", no_argument, NULL, 'j'},
	    {"timeout", required_argument, NULL, 't'},
	    {"since", required_argument, NULL, 's'},
	    {"count", required_argument, NULL, 'n'},
	    {"absent", no_argument, NULL, 'a'},
	    {"force", no_argument, NULL, 'f'},
	    CLI_STD_LONGOPTS,
	    {NULL, 0, NULL, 0},
	};
	int c;

	/* "+": options end at the first operand, so "add n -1" works. */
	while ((c = getopt_long(argc, argv, "+c:fh", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': o->addr = optarg; break;
		case 'j': o->json = 1; break;
		case 't':
			if (duration_parse(optarg, &o->timeout) < 0)
				return usage_error(
				    "--timeout %s is not a "
				    "duration (like 500ms, 30s, 5m)",
				    optarg);
			break;
		case 's':
			if (takes(verb, V_WATCH, "--since") != 0)
				return 2;
			if (parse_int64(optarg, &o->since) < 0 || o->since < 0)
				return usage_error("--since %s is not a "
				                   "revision",
				    optarg);
			break;
		case 'n':
			if (takes(verb, V_WATCH, "--count") != 0)
				return 2;
			if (parse_long(optarg, 1, LONG_MAX, &o->count) < 0)
				return usage_error(
				    "--count %s is not a positive number",
				    optarg);
			break;
		case 'a':
			if (takes(verb, V_ABSENT, "--absent") != 0)
				return 2;
			o->absent = 1;
			break;
		case 'f':
			if (takes(verb, V_FORCE, "-f") != 0)
				return 2;
			o->force = 1;
			break;
		default: return cli_std_option(c, synopsis);
		}
	}
	return 0;
}

/* VALUE from the operand, or all of stdin for "-" or no operand. */
static int
read_value(const char *arg, struct buf *out)
{
	char chunk[65536];
	ssize_t n;

	if (arg != NULL && strcmp(arg, "-") != 0)
		return buf_puts(out, arg);
	while ((n = read(STDIN_FILENO, chunk, sizeof(chunk))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (buf_append(out, chunk, (size_t)n) < 0)
			return -1;
	}
	return 0;
}

static int
fail(struct ctx *x, enum status st)
{
	return cli_fail(st, "%s", coord_client_error(x->cc));
}

/* Sets "value" to the text, or "value_base64" when it is not UTF-8 text. */
static void
json_set_value(json_t *obj, const char *p, size_t n)
{
	if (memchr(p, '\0', n) == NULL && text_utf8_valid(p, n)) {
		json_object_set_new(obj, "value", json_stringn(p, n));
	} else {
		struct buf b = {0};
		text_base64_encode(&b, p, n);
		json_object_set_new(obj, "value_base64",
		    json_stringn(b.data != NULL ? b.data : "", b.len));
		buf_free(&b);
	}
}

static void
print_json(json_t *obj)
{
	json_dumpf(obj, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
	putchar('\n');
	json_decref(obj);
}

static int
write_all(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(STDOUT_FILENO, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int
do_put(struct ctx *x, int argc, char **argv, enum coord_put_mode mode)
{
	struct buf val = {0};
	int64_t rev = 0;
	enum status st;

	if (argc < 1 || argc > 2)
		return usage_error("%s takes KEY [VALUE | -]",
		    mode == COORD_PUT_UPDATE ? "update" : "put");
	if (read_value(argc == 2 ? argv[1] : NULL, &val) < 0)
		return cli_fail(ST_INVALID_ARGUMENT,
		    "cannot read the value from standard input: %s",
		    strerror(errno));
	st = coord_kv_put(x->cc, argv[0], val.data != NULL ? val.data : "",
	    val.len, mode, x->deadline, &rev);
	buf_free(&val);
	if (st != ST_OK)
		return fail(x, st);
	if (x->o.json)
		print_json(json_pack("{s:s,s:I}", "key", argv[0], "revision",
		    (json_int_t)rev));
	return 0;
}

static int
do_get(struct ctx *x, int argc, char **argv, int wait)
{
	struct buf val = {0};
	int64_t rev = 0;
	enum status st;
	int rc = 0;

	if (argc != 1)
		return usage_error("%s takes KEY", wait ? "get" : "tryget");
	st = coord_kv_get(x->cc, argv[0], wait, x->deadline, &val, &rev);
	if (st != ST_OK) {
		buf_free(&val);
		return fail(x, st);
	}
	if (x->o.json) {
		json_t *obj = json_pack("{s:s,s:I}", "key", argv[0], "revision",
		    (json_int_t)rev);
		json_set_value(obj, val.data != NULL ? val.data : "", val.len);
		print_json(obj);
	} else if (write_all(val.data != NULL ? val.data : "", val.len) < 0) {
		rc = cli_fail(ST_INTERNAL, "cannot write the value: %s",
		    strerror(errno));
	}
	buf_free(&val);
	return rc;
}

static json_t *
decode_entry(json_t *e)
{
	struct buf b = {0};
	json_t *out = json_pack("{s:O,s:O}", "key", json_object_get(e, "key"),
	    "revision", json_object_get(e, "revision"));

	if (out == NULL)
		return NULL;
	if (coord_kv_value(e, &b) > 0)
		json_set_value(out, b.data != NULL ? b.data : "", b.len);
	buf_free(&b);
	return out;
}

static int
do_ls(struct ctx *x, int argc, char **argv)
{
	json_t *reply, *entries, *e, *out = NULL;
	size_t i;
	enum status st;

	if (argc != 1)
		return usage_error("ls takes PREFIX%s", "");
	if ((st = coord_kv_dir(x->cc, argv[0], x->deadline, &reply)) != ST_OK)
		return fail(x, st);
	entries = json_object_get(reply, "entries");
	if (x->o.json)
		out = json_array();
	json_array_foreach(entries, i, e) {
		if (x->o.json)
			json_array_append_new(out, decode_entry(e));
		else
			printf("%s\n",
			    json_string_value(json_object_get(e, "key")));
	}
	if (x->o.json)
		print_json(json_pack("{s:O,s:o}", "revision",
		    json_object_get(reply, "revision"), "entries", out));
	json_decref(reply);
	return 0;
}

static int
do_rm(struct ctx *x, int argc, char **argv)
{
	int64_t n = 0, rev = 0;
	enum status st;

	if (argc != 1)
		return usage_error("rm takes KEY%s", "");
	if ((st = coord_kv_delete(x->cc, argv[0], x->deadline, &n, &rev)) !=
	    ST_OK)
		return fail(x, st);
	if (x->o.json)
		print_json(json_pack("{s:s,s:I,s:I}", "key", argv[0], "deleted",
		    (json_int_t)n, "revision", (json_int_t)rev));
	return 0;
}

/* One change as a line: "REV TYPE KEY [VALUE]", or a JSON object. */
static void
print_event(json_t *ev, void *arg)
{
	struct ctx *x = arg;
	const char *type = json_string_value(json_object_get(ev, "type"));
	const char *key = json_string_value(json_object_get(ev, "key"));
	json_int_t rev = json_integer_value(json_object_get(ev, "revision"));
	struct buf b = {0};
	int has = coord_kv_value(ev, &b) != 0; /* a deletion has none */

	if (x->o.json) {
		json_t *out = json_pack("{s:s,s:s,s:I}", "type", type, "key",
		    key, "revision", rev);
		if (has)
			json_set_value(out, b.data != NULL ? b.data : "",
			    b.len);
		print_json(out);
	} else if (!has) {
		printf("%" JSON_INTEGER_FORMAT " %s %s\n", rev, type, key);
	} else if (text_printable(b.data != NULL ? b.data : "", b.len)) {
		printf("%" JSON_INTEGER_FORMAT " %s %s %s\n", rev, type, key,
		    b.data != NULL ? b.data : "");
	} else {
		printf("%" JSON_INTEGER_FORMAT " %s %s (%zu bytes)\n", rev,
		    type, key, b.len);
	}
	fflush(stdout);
	buf_free(&b);
}

static int
do_watch(struct ctx *x, int argc, char **argv)
{
	enum status st;
	long seen;

	if (argc != 1)
		return usage_error("watch takes PREFIX%s", "");
	st = coord_kv_follow(x->cc, argv[0], x->o.since, x->o.count,
	    x->deadline, print_event, x, &seen);
	if (st != ST_OK)
		return fail(x, st);
	/* Watching for a while is a success; waiting for N changes that did
	 * not come is not. */
	if (x->o.count > 0 && seen < x->o.count)
		return cli_fail(ST_DEADLINE_EXCEEDED,
		    "saw %ld of %ld changes under %s before the deadline", seen,
		    x->o.count, argv[0]);
	return 0;
}

static int
do_add(struct ctx *x, int argc, char **argv)
{
	int64_t delta = 1, value = 0, rev = 0;
	enum status st;

	if (argc < 1 || argc > 2)
		return usage_error("add takes KEY [N]%s", "");
	if (argc == 2 && parse_int64(argv[1], &delta) < 0)
		return usage_error("add: %s is not an integer", argv[1]);
	st = coord_kv_add(x->cc, argv[0], delta, x->deadline, &value, &rev);
	if (st != ST_OK)
		return fail(x, st);
	if (x->o.json)
		print_json(json_pack("{s:s,s:I,s:I}", "key", argv[0], "value",
		    (json_int_t)value, "revision", (json_int_t)rev));
	else
		printf("%" PRId64 "\n", value);
	return 0;
}

static int
do_cas(struct ctx *x, int argc, char **argv)
{
	struct buf val = {0}, cur = {0};
	const char *old = NULL, *new;
	int has_cur = 0, rc = 0;
	int64_t rev = 0;
	enum status st;

	if (argc != (x->o.absent ? 2 : 3))
		return usage_error(x->o.absent ?
		        "cas --absent takes KEY NEW%s" :
		        "cas takes KEY OLD NEW%s",
		    "");
	if (!x->o.absent)
		old = argv[1];
	new = argv[argc - 1];
	if (read_value(new, &val) < 0)
		return cli_fail(ST_INVALID_ARGUMENT,
		    "cannot read the value from standard input: %s",
		    strerror(errno));
	st = coord_kv_cas(x->cc, argv[0], old, old != NULL ? strlen(old) : 0,
	    x->o.absent, val.data != NULL ? val.data : "", val.len, x->deadline,
	    &rev, &cur, &has_cur);
	buf_free(&val);
	if (st == ST_OK) {
		if (x->o.json)
			print_json(json_pack("{s:s,s:I}", "key", argv[0],
			    "revision", (json_int_t)rev));
	} else {
		/* The current value goes to stdout so a script can retry. */
		if (has_cur && x->o.json) {
			json_t *obj = json_pack("{s:s}", "key", argv[0]);
			json_set_value(obj, cur.data != NULL ? cur.data : "",
			    cur.len);
			print_json(obj);
		} else if (has_cur) {
			write_all(cur.data != NULL ? cur.data : "", cur.len);
		}
		rc = fail(x, st);
	}
	buf_free(&cur);
	return rc;
}

/* The cluster at a glance: tasks, barriers in flight, the store. */
static int
do_status(struct ctx *x, int argc, char **argv)
{
	struct buf out = {0};
	enum status rc;
	json_t *st, *reps;

	(void)argv;
	if (argc != 0)
		return usage_error("status takes no arguments%s", "");
	if ((rc = coord_status(x->cc, x->deadline, &st)) != ST_OK)
		return fail(x, rc);
	if ((rc = coord_replicas(x->cc, x->deadline, &reps)) != ST_OK) {
		json_decref(st);
		return fail(x, rc);
	}
	if (reps != NULL)
		json_object_set_new(st, "replicas", reps);
	if (x->o.json) {
		print_json(st);
		return 0;
	}
	if (coord_text_status(st, &out) < 0 ||
	    (reps != NULL &&
	        coord_text_replicas(reps, wall_now_ms(), &out) < 0)) {
		json_decref(st);
		buf_free(&out);
		return cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
	}
	fwrite(out.data, 1, out.len, stdout);
	json_decref(st);
	buf_free(&out);
	return 0;
}

static int
do_put_verb(struct ctx *x, int argc, char **argv)
{
	return do_put(x, argc, argv,
	    x->o.force ? COORD_PUT_OVERWRITE : COORD_PUT_INSERT);
}

static int
do_update(struct ctx *x, int argc, char **argv)
{
	return do_put(x, argc, argv, COORD_PUT_UPDATE);
}

static int
do_get_verb(struct ctx *x, int argc, char **argv)
{
	return do_get(x, argc, argv, 1);
}

/* tryget waits for nothing: not for the key, and not for coordd. */
static int
do_tryget(struct ctx *x, int argc, char **argv)
{
	coord_reach_set(x->cc, COORD_REACH_NOW);
	return do_get(x, argc, argv, 0);
}

/* Watch runs until --count or --timeout; the rest default to 30 s. */
static const struct verb verbs[] = {
    {"put", do_put_verb, V_KEY | V_FORCE, DEFAULT_TIMEOUT_MS},
    {"update", do_update, V_KEY, DEFAULT_TIMEOUT_MS},
    {"get", do_get_verb, V_KEY, DEFAULT_TIMEOUT_MS},
    {"tryget", do_tryget, V_KEY, DEFAULT_TIMEOUT_MS},
    {"ls", do_ls, V_KEY, DEFAULT_TIMEOUT_MS},
    {"rm", do_rm, V_KEY, DEFAULT_TIMEOUT_MS},
    {"watch", do_watch, V_KEY | V_WATCH, 0},
    {"add", do_add, V_KEY, DEFAULT_TIMEOUT_MS},
    {"cas", do_cas, V_KEY | V_ABSENT, DEFAULT_TIMEOUT_MS},
    {"status", do_status, 0, DEFAULT_TIMEOUT_MS},
};

static const struct verb *
find_verb(const char *name)
{
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (strcmp(verbs[i].name, name) == 0)
			return &verbs[i];
	return NULL;
}

int
main(int argc, char **argv)
{
	struct ctx x = {.o = {.timeout = -1, .since = -1}};
	static struct buf key;
	const struct verb *verb;
	const char *env;
	char err[512];
	int rc;

	log_init(argv[0], 0);
	if ((rc = parse_opts(argc, argv, &x.o, NULL)) != 0)
		return rc;
	if (optind >= argc)
		return cli_usage_error(synopsis, "no command given");
	if ((verb = find_verb(argv[optind])) == NULL)
		return usage_error("unknown command %s", argv[optind]);
	argc -= optind;
	argv += optind;
	optind = 1;
	if ((rc = parse_opts(argc, argv, &x.o, verb)) != 0)
		return rc;
	argc -= optind;
	argv += optind;
	/* MUSTER_TIMEOUT sets the default, for a whole job's scripts. */
	if (x.o.timeout < 0 && verb->timeout != 0 &&
	    (env = getenv("MUSTER_TIMEOUT")) != NULL && *env != '\0' &&
	    duration_parse(env, &x.o.timeout) < 0)
		return cli_usage_error(synopsis,
		    "MUSTER_TIMEOUT=%s is not a duration (like 30s, 10m)", env);
	if ((x.cc = coord_client_new(cli_coord_addr(x.o.addr), err,
	         sizeof(err))) == NULL)
		return cli_usage_error(synopsis, "%s", err);
	/* A person may be waiting: say so while coordd cannot be reached. */
	coord_reach_set(x.cc, COORD_REACH_SAY);
	if (x.o.timeout < 0)
		x.o.timeout = verb->timeout;
	x.deadline = x.o.timeout == 0 ? HTTP_NO_DEADLINE :
	                                duration_now_ms() + x.o.timeout;
	/* Keys are shown as coordd stores them: "//a///b/" is "a/b". */
	if (argc >= 1 && (verb->takes & V_KEY)) {
		if (keypath_normalize(argv[0], strlen(argv[0]), &key) < 0)
			return cli_fail(ST_RESOURCE_EXHAUSTED, "out of memory");
		argv[0] = key.data;
	}
	rc = verb->fn(&x, argc, argv);
	coord_client_free(x.cc);
	/* What went to stdout through stdio is out, or the run failed. */
	return cli_flushed(stdout, rc);
}
