/*
 * etcd-probe: the etcd client (lib/io/etcd*.h) from the shell, one call a
 * run, for test/26-etcd-client.bats. Keys and values are text; what a
 * call returns is printed a line a thing, and a failure is "etcd-probe:
 * CODE: message" with the status's exit code.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "duration.h"
#include "etcd.h"
#include "etcd_election.h"
#include "etcd_kv.h"
#include "etcd_lease.h"
#include "etcd_watch.h"
#include "log.h"

static const char synopsis[] =
    "usage: etcd-probe [-e ENDPOINTS] [-t DUR] [--attempt DUR] [--retry DUR]\n"
    "                  [--ca FILE] [--cert FILE] [--key FILE] [--auth FILE]\n"
    "                  [--again DUR] COMMAND [ARG...]\n"
    "commands:\n"
    "  put KEY VALUE [LEASE]        get KEY [prefix] [limit=N] [rev=N] [keys]\n"
    "  del KEY [prefix]             txn CMP... [-- OP...] [-- OP...]\n"
    "  grant TTL                    keepalive ID EVERY [COUNT]\n"
    "  revoke ID                    ttl ID\n"
    "  campaign NAME VALUE LEASE    leader NAME\n"
    "  proclaim NAME KEY REV LEASE VALUE\n"
    "  resign NAME KEY REV LEASE    observe NAME COUNT\n"
    "  watch KEY [prefix] [from=REV] [count=N] [silence=DUR] [progress]\n"
    "CMP is TARGET(KEY)OP OPERAND: TARGET create, mod, version or value, OP\n"
    "=, !=, < or >; an OP is put:KEY=VALUE, get:KEY or del:KEY.\n";

static struct etcd *e;
static int64_t deadline = ETCD_NO_DEADLINE;

/* Sleeps for ms. */
static void
nap(int64_t ms)
{
	int64_t end = duration_now_ms() + ms;

	while ((ms = end - duration_now_ms()) > 0) {
		struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
		nanosleep(&ts, NULL);
	}
}

static int
fail(enum status st)
{
	return cli_fail(st, "%s", etcd_error(e));
}

/* A number argument, or a usage error. */
static int
number(const char *s, int64_t *v)
{
	char *end;

	*v = strtoll(s, &end, 10);
	if (*s == '\0' || *end != '\0') {
		cli_usage_error(synopsis, "%s is not a number", s);
		return -1;
	}
	return 0;
}

static void
print_kv(const struct etcd_kv *kv)
{
	printf("%s %s create=%lld mod=%lld version=%lld lease=%lld\n", kv->key,
	    kv->value, (long long)kv->create_revision,
	    (long long)kv->mod_revision, (long long)kv->version,
	    (long long)kv->lease);
}

static void
print_kvs(const struct etcd_kvs *r)
{
	for (size_t i = 0; i < r->n; i++)
		print_kv(&r->kv[i]);
	printf("count=%lld more=%d revision=%lld\n", (long long)r->count,
	    r->more, (long long)r->revision);
}

static int
cmd_put(int argc, char **argv)
{
	int64_t lease = 0, rev;
	enum status st;

	if (argc < 3 || argc > 4 || (argc == 4 && number(argv[3], &lease) < 0))
		return cli_usage_error(synopsis, "put KEY VALUE [LEASE]");
	st = etcd_put(e, argv[1], strlen(argv[1]), argv[2], strlen(argv[2]),
	    lease, deadline, &rev);
	if (st != ST_OK)
		return fail(st);
	printf("revision=%lld\n", (long long)rev);
	return 0;
}

/* The options of get's and del's key, "prefix", "limit=N" and the like. */
static int
key_opts(int argc, char **argv, struct etcd_op *op)
{
	op->key = argv[1];
	op->key_len = strlen(argv[1]);
	for (int i = 2; i < argc; i++) {
		int rc = 0;
		if (strcmp(argv[i], "prefix") == 0)
			op->prefix = 1;
		else if (strcmp(argv[i], "keys") == 0)
			op->keys_only = 1;
		else if (strncmp(argv[i], "limit=", 6) == 0)
			rc = number(argv[i] + 6, &op->limit);
		else if (strncmp(argv[i], "rev=", 4) == 0)
			rc = number(argv[i] + 4, &op->revision);
		else
			rc = -1;
		if (rc < 0) {
			cli_usage_error(synopsis, "%s: bad option", argv[i]);
			return -1;
		}
	}
	return 0;
}

static int
cmd_get(int argc, char **argv)
{
	struct etcd_op op = {.kind = ETCD_OP_RANGE};
	struct etcd_kvs r;
	enum status st;

	if (argc < 2 || key_opts(argc, argv, &op) < 0)
		return 2;
	if ((st = etcd_range(e, &op, deadline, &r)) != ST_OK)
		return fail(st);
	print_kvs(&r);
	etcd_kvs_free(&r);
	return 0;
}

static int
cmd_del(int argc, char **argv)
{
	struct etcd_op op = {.kind = ETCD_OP_DELETE};
	int64_t n, rev;
	enum status st;

	if (argc < 2 || key_opts(argc, argv, &op) < 0)
		return 2;
	st = etcd_delete(e, op.key, op.key_len, op.prefix, deadline, &n, &rev);
	if (st != ST_OK)
		return fail(st);
	printf("deleted=%lld revision=%lld\n", (long long)n, (long long)rev);
	return 0;
}

/* TARGET(KEY)OP OPERAND, its strings pointing into s (written to). */
static int
parse_cmp(char *s, struct etcd_cmp *c)
{
	static const char *const targets[] = {"version", "create", "mod",
	    "value"};
	static const char *const ops[] = {"=", "!=", "<", ">"};
	char *open = strchr(s, '('), *close = strchr(s, ')'), *arg;
	int t;

	if (open == NULL || close == NULL || close < open)
		return -1;
	*open = '\0';
	*close = '\0';
	for (t = 0; t < 4 && strcmp(s, targets[t]) != 0; t++)
		;
	if (t == 4)
		return -1;
	c->target = (enum etcd_cmp_target)t;
	c->key = open + 1;
	c->key_len = strlen(open + 1);
	arg = close + 1;
	c->result = ETCD_EQ;
	for (int o = 3; o >= 0; o--)
		if (strncmp(arg, ops[o], strlen(ops[o])) == 0) {
			c->result = (enum etcd_cmp_result)o;
			arg += strlen(ops[o]);
			break;
		}
	if (arg == close + 1)
		return -1;
	c->value = arg;
	c->value_len = strlen(arg);
	if (c->target != ETCD_CMP_VALUE) {
		char *end;
		c->number = strtoll(arg, &end, 10);
		if (*arg == '\0' || *end != '\0')
			return -1;
	}
	return 0;
}

/* put:KEY=VALUE, get:KEY or del:KEY, pointing into s (written to). */
static int
parse_op(char *s, struct etcd_op *op)
{
	char *eq;

	memset(op, 0, sizeof(*op));
	if (strncmp(s, "put:", 4) == 0 && (eq = strchr(s + 4, '=')) != NULL) {
		*eq = '\0';
		op->kind = ETCD_OP_PUT;
		op->value = eq + 1;
		op->value_len = strlen(eq + 1);
	} else if (strncmp(s, "get:", 4) == 0) {
		op->kind = ETCD_OP_RANGE;
	} else if (strncmp(s, "del:", 4) == 0) {
		op->kind = ETCD_OP_DELETE;
	} else {
		return -1;
	}
	op->key = s + 4;
	op->key_len = strlen(s + 4);
	return 0;
}

static int
cmd_txn(int argc, char **argv)
{
	struct etcd_cmp cmp[16];
	struct etcd_op ops[2][16];
	size_t n[3] = {0};
	struct etcd_txn t;
	struct etcd_txn_result r;
	enum status st;
	char arg[256];
	int part = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			if (++part > 2)
				return cli_usage_error(synopsis,
				    "txn: too many --");
			continue;
		}
		if (n[part] == 16)
			return cli_usage_error(synopsis, "txn: too many");
		snprintf(arg, sizeof(arg), "%s", argv[i]);
		if (part == 0 ? parse_cmp(argv[i], &cmp[n[0]]) < 0 :
		                parse_op(argv[i], &ops[part - 1][n[part]]) < 0)
			return cli_usage_error(synopsis, "txn: bad %s", arg);
		n[part]++;
	}
	t = (struct etcd_txn){.cmp = cmp,
	    .ncmp = n[0],
	    .then = ops[0],
	    .nthen = n[1],
	    .otherwise = ops[1],
	    .notherwise = n[2]};
	if ((st = etcd_txn(e, &t, deadline, &r)) != ST_OK)
		return fail(st);
	printf("%s revision=%lld\n", r.succeeded ? "succeeded" : "failed",
	    (long long)r.revision);
	for (size_t i = 0; i < r.n; i++) {
		if (r.res[i].kind == ETCD_OP_RANGE)
			print_kvs(&r.res[i].range);
		else if (r.res[i].kind == ETCD_OP_DELETE)
			printf("deleted=%lld\n", (long long)r.res[i].deleted);
		else
			printf("put\n");
	}
	etcd_txn_result_free(&r);
	return 0;
}

static int
cmd_grant(int argc, char **argv)
{
	int64_t ttl, id;
	enum status st;

	if (argc != 2 || number(argv[1], &ttl) < 0)
		return cli_usage_error(synopsis, "grant TTL");
	if ((st = etcd_lease_grant(e, ttl, deadline, &id, &ttl)) != ST_OK)
		return fail(st);
	printf("%lld\n", (long long)id);
	return 0;
}

/* Keeps lease ID alive every EVERY (COUNT times, or until it fails). */
static int
cmd_keepalive(int argc, char **argv)
{
	int64_t id, every, count = -1, ttl;
	enum status st;

	if (argc < 3 || argc > 4 || number(argv[1], &id) < 0 ||
	    duration_parse(argv[2], &every) < 0 ||
	    (argc == 4 && number(argv[3], &count) < 0))
		return cli_usage_error(synopsis, "keepalive ID EVERY [COUNT]");
	for (int64_t i = 0; count < 0 || i < count; i++) {
		int64_t next = duration_now_ms() + every;
		if ((st = etcd_lease_keepalive(e, id, deadline, &ttl)) != ST_OK)
			return fail(st);
		printf("ttl=%lld\n", (long long)ttl);
		fflush(stdout);
		nap(next - duration_now_ms());
	}
	return 0;
}

static int
cmd_revoke(int argc, char **argv)
{
	int64_t id;
	enum status st;

	if (argc != 2 || number(argv[1], &id) < 0)
		return cli_usage_error(synopsis, "revoke ID");
	if ((st = etcd_lease_revoke(e, id, deadline)) != ST_OK)
		return fail(st);
	return 0;
}

static int
cmd_ttl(int argc, char **argv)
{
	int64_t id, ttl, granted;
	enum status st;

	if (argc != 2 || number(argv[1], &id) < 0)
		return cli_usage_error(synopsis, "ttl ID");
	if ((st = etcd_lease_ttl(e, id, deadline, &ttl, &granted)) != ST_OK)
		return fail(st);
	printf("ttl=%lld granted=%lld\n", (long long)ttl, (long long)granted);
	return 0;
}

static int
cmd_campaign(int argc, char **argv)
{
	struct etcd_leader l;
	int64_t lease;
	enum status st;

	if (argc != 4 || number(argv[3], &lease) < 0)
		return cli_usage_error(synopsis, "campaign NAME VALUE LEASE");
	st = etcd_campaign(e, argv[1], strlen(argv[1]), lease, argv[2],
	    strlen(argv[2]), deadline, &l);
	if (st != ST_OK)
		return fail(st);
	printf("%s %lld %lld\n", l.key, (long long)l.rev, (long long)l.lease);
	etcd_leader_free(&l);
	return 0;
}

static int
cmd_leader(int argc, char **argv)
{
	struct etcd_kv kv;
	enum status st;

	if (argc != 2)
		return cli_usage_error(synopsis, "leader NAME");
	if ((st = etcd_leader(e, argv[1], strlen(argv[1]), deadline, &kv)) !=
	    ST_OK)
		return fail(st);
	print_kv(&kv);
	etcd_kv_free(&kv);
	return 0;
}

/* proclaim and resign: NAME KEY REV LEASE [VALUE] */
static int
cmd_leadership(int argc, char **argv)
{
	int proclaim = strcmp(argv[0], "proclaim") == 0;
	struct etcd_leader l = {0};
	enum status st;

	if (argc != 5 + proclaim || number(argv[3], &l.rev) < 0 ||
	    number(argv[4], &l.lease) < 0)
		return cli_usage_error(synopsis, "%s NAME KEY REV LEASE%s",
		    argv[0], proclaim ? " VALUE" : "");
	l.name = argv[1];
	l.name_len = strlen(argv[1]);
	l.key = argv[2];
	l.key_len = strlen(argv[2]);
	st = proclaim ?
	    etcd_proclaim(e, &l, argv[5], strlen(argv[5]), deadline) :
	    etcd_resign(e, &l, deadline);
	return st != ST_OK ? fail(st) : 0;
}

/* Events and leaders to print, and when to stop. */
struct printer {
	int64_t left; /* changes still to print; <0: no end */
	const char *member;
};

/* Says on stderr which member a stream is on, when that changes. */
static void
note_member(struct printer *p)
{
	if (p->member == NULL || strcmp(p->member, etcd_member(e)) != 0) {
		p->member = etcd_member(e);
		fprintf(stderr, "etcd-probe: on %s\n", p->member);
	}
}

static int
on_leader(void *arg, const struct etcd_kv *kv)
{
	struct printer *p = arg;

	note_member(p);
	printf("%s %s\n", kv->key, kv->value);
	fflush(stdout);
	return --p->left == 0;
}

static int
cmd_observe(int argc, char **argv)
{
	struct printer p = {0};
	enum status st;

	if (argc != 3 || number(argv[2], &p.left) < 0)
		return cli_usage_error(synopsis, "observe NAME COUNT");
	st = etcd_observe(e, argv[1], strlen(argv[1]), deadline, on_leader, &p);
	return st != ST_OK ? fail(st) : 0;
}

static int
on_event(void *arg, const struct etcd_event *ev)
{
	static const char *const kinds[] = {"PUT", "DELETE", "PROGRESS",
	    "COMPACTED"};
	struct printer *p = arg;

	note_member(p);
	if (ev->kind == ETCD_EV_PUT)
		printf("PUT %s %s %lld\n", ev->kv->key, ev->kv->value,
		    (long long)ev->revision);
	else if (ev->kind == ETCD_EV_DELETE)
		printf("DELETE %s %lld\n", ev->kv->key,
		    (long long)ev->revision);
	else
		printf("%s %lld\n", kinds[ev->kind], (long long)ev->revision);
	fflush(stdout);
	return ev->kind <= ETCD_EV_DELETE && --p->left == 0;
}

static int
cmd_watch(int argc, char **argv)
{
	struct printer p = {.left = -1};
	struct etcd_watch_opts w = {.fn = on_event, .arg = &p};
	enum status st;

	if (argc < 2)
		return cli_usage_error(synopsis, "watch KEY [OPTION...]");
	w.key = argv[1];
	w.key_len = strlen(argv[1]);
	for (int i = 2; i < argc; i++) {
		int rc = 0;
		if (strcmp(argv[i], "prefix") == 0)
			w.prefix = 1;
		else if (strcmp(argv[i], "progress") == 0)
			w.progress = 1;
		else if (strncmp(argv[i], "from=", 5) == 0)
			rc = number(argv[i] + 5, &w.start);
		else if (strncmp(argv[i], "count=", 6) == 0)
			rc = number(argv[i] + 6, &p.left);
		else if (strncmp(argv[i], "silence=", 8) == 0)
			rc = duration_parse(argv[i] + 8, &w.silence_ms);
		else
			rc = -1;
		if (rc < 0)
			return cli_usage_error(synopsis, "watch: bad %s",
			    argv[i]);
	}
	st = etcd_watch(e, &w, deadline);
	return st != ST_OK ? fail(st) : 0;
}

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
} commands[] = {
    {"put", cmd_put},
    {"get", cmd_get},
    {"del", cmd_del},
    {"txn", cmd_txn},
    {"grant", cmd_grant},
    {"keepalive", cmd_keepalive},
    {"revoke", cmd_revoke},
    {"ttl", cmd_ttl},
    {"campaign", cmd_campaign},
    {"leader", cmd_leader},
    {"proclaim", cmd_leadership},
    {"resign", cmd_leadership},
    {"observe", cmd_observe},
    {"watch", cmd_watch},
};

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"attempt", required_argument, NULL, 'A'},
	    {"retry", required_argument, NULL, 'R'},
	    {"ca", required_argument, NULL, 'C'},
	    {"cert", required_argument, NULL, 'E'},
	    {"key", required_argument, NULL, 'K'},
	    {"auth", required_argument, NULL, 'U'},
	    {"again", required_argument, NULL, 'G'},
	    CLI_STD_LONGOPTS,
	    {NULL, 0, NULL, 0},
	};
	struct etcd_opts o = {.endpoints = getenv("ETCD_ENDPOINTS")};
	int64_t timeout = 0, again = 0;
	char err[512];
	int c, rc;

	log_init(argv[0], getenv("ETCD_PROBE_DEBUG") != NULL);
	/* A member that closes a connection mid-request is a failed call. */
	signal(SIGPIPE, SIG_IGN);
	while ((c = getopt_long(argc, argv, "+e:t:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'e': o.endpoints = optarg; break;
		case 't':
			if (cli_duration_flag(synopsis, "-t", optarg, 1,
			        &timeout) != 0)
				return 2;
			break;
		case 'A':
			if (cli_duration_flag(synopsis, "--attempt", optarg, 1,
			        &o.attempt_ms) != 0)
				return 2;
			break;
		case 'R':
			if (cli_duration_flag(synopsis, "--retry", optarg, 1,
			        &o.retry_ms) != 0)
				return 2;
			break;
		case 'C': o.ca_file = optarg; break;
		case 'E': o.cert_file = optarg; break;
		case 'K': o.key_file = optarg; break;
		case 'U': o.auth_file = optarg; break;
		case 'G':
			if (cli_duration_flag(synopsis, "--again", optarg, 1,
			        &again) != 0)
				return 2;
			break;
		default: return cli_std_option(c, synopsis);
		}
	}
	if (optind == argc)
		return cli_usage_error(synopsis, "no command given");
	if (timeout > 0)
		deadline = duration_now_ms() + timeout;
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(argv[optind], commands[i].name) != 0)
			continue;
		if ((e = etcd_new(&o, err, sizeof(err))) == NULL)
			return cli_usage_error(synopsis, "%s", err);
		rc = commands[i].fn(argc - optind, argv + optind);
		/* The same client once more: after its token expired, say. */
		if (rc == 0 && again > 0) {
			nap(again);
			rc = commands[i].fn(argc - optind, argv + optind);
		}
		etcd_free(e);
		return rc;
	}
	return cli_usage_error(synopsis, "%s: unknown command", argv[optind]);
}
