#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include <gnutls/gnutls.h>

#include "cli.h"
#include "commit.h"
#include "daemon.h"
#include "daemon_page.h"
#include "duration.h"
#include "http_server.h"
#include "journal.h"
#include "log.h"
#include "park.h"
#include "parse.h"

struct daemon {
	const struct daemon_options *o;
	const struct daemon_service *svc;
	/* Set once http_server_start returns: its threads serve requests
	 * before that. */
	struct http_server *_Atomic srv;
	atomic_int closing;
	atomic_ulong unauthenticated;
};

/* Frees what daemon_options_check read (the TLS files' contents). */
static void daemon_options_free(struct daemon_options *o);

/* Fills o with the defaults (listen on 127.0.0.1:port). */
static void
daemon_options_init(struct daemon_options *o, int port)
{
	static char listen[32];

	memset(o, 0, sizeof(*o));
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	o->listen = listen;
	/*
	 * Twice the CPUs: while one worker resumes thousands of parked
	 * requests, the others already send their replies.
	 */
	o->threads = 2 * sysconf(_SC_NPROCESSORS_ONLN);
	if (o->threads < 1)
		o->threads = 2;
	o->max_body = 1u << 20;
}

/* The skeleton's short options; a program's own are long ones. */
#define DAEMON_SHORTOPTS "hl:nv"

/*
 * Takes option c if it is one of the skeleton's: 1 taken, 0 not ours, -1
 * a usage error (said on stderr). -h and --version are cli_std_option's.
 */
static int
daemon_option(struct daemon_options *o, int c, const char *arg,
    const char *synopsis)
{
	switch (c) {
	case 'l': o->listen = arg; return 1;
	case 0x100: o->port_file = arg; return 1;
	case 0x101:
		if (parse_long(arg, 1, 64, &o->threads) < 0) {
			cli_usage_error(synopsis,
			    "--threads %s is not a number from 1 to 64", arg);
			return -1;
		}
		return 1;
	case 0x102:
		if (parse_long(arg, 16, 1L << 24, &o->max_conns) < 0) {
			cli_usage_error(synopsis,
			    "--max-connections %s is not a number from 16 to "
			    "16777216",
			    arg);
			return -1;
		}
		return 1;
	case 0x103:
		if (parse_size(arg, &o->max_inflight) < 0 ||
		    o->max_inflight == 0) {
			cli_usage_error(synopsis,
			    "--max-inflight-bytes %s is not a size (like 256M)",
			    arg);
			return -1;
		}
		return 1;
	case 0x104:
		return cli_duration_flag(synopsis, "--request-timeout", arg, 1,
		           &o->request_timeout_ms) != 0 ?
		    -1 :
		    1;
	case 0x105:
		if (cli_duration_flag(synopsis, "--max-wait", arg, 1,
		        &o->max_wait_ms) != 0)
			return -1;
		if (o->max_wait_ms > PARK_MAX_WAIT_MS) {
			cli_usage_error(synopsis, "--max-wait %s is over 24h",
			    arg);
			return -1;
		}
		return 1;
	case 0x106: o->token_file = arg; return 1;
	case 0x107: o->insecure = 1; return 1;
	case 0x108: o->tls_cert = arg; return 1;
	case 0x109: o->tls_key = arg; return 1;
	case 0x10a: o->tls_client_ca = arg; return 1;
	case 0x10b:
		if (arg[0] == '\0') {
			cli_usage_error(synopsis, "--state-dir is empty");
			return -1;
		}
		o->state_dir = arg;
		return 1;
	case 0x10d:
		if (parse_size(arg, &o->journal_max) < 0 ||
		    o->journal_max < 4096) {
			cli_usage_error(synopsis,
			    "--journal-max-bytes %s is not a size of 4K or "
			    "more (like 64M)",
			    arg);
			return -1;
		}
		return 1;
	case 0x10c:
		if ((o->fsync = journal_fsync_parse(arg)) < 0) {
			cli_usage_error(synopsis,
			    "--fsync %s is not one of always, batch, none",
			    arg);
			return -1;
		}
		return 1;
	case 0x10e: o->store = arg; return 1;
	case 0x10f: {
		int64_t ms;

		if (cli_duration_flag(synopsis, "--store-lease", arg, 1, &ms) !=
		    0)
			return -1;
		if (ms < 1000 || ms > 3600 * 1000) {
			cli_usage_error(synopsis,
			    "--store-lease %s is not from 1s to 1h", arg);
			return -1;
		}
		o->store_cfg.ttl_s = ms / 1000;
		return 1;
	}
	case 0x110: o->store_cfg.etcd.ca_file = arg; return 1;
	case 0x111: o->store_cfg.etcd.cert_file = arg; return 1;
	case 0x112: o->store_cfg.etcd.key_file = arg; return 1;
	case 0x113: o->store_cfg.etcd.auth_file = arg; return 1;
	case 0x114: o->advertise = arg; return 1;
	case 'v': o->verbose++; return 1;
	case 'n': o->check = 1; return 1;
	default: return 0;
	}
}

/* Whether host (numeric) is a loopback address: 127.0.0.0/8 or ::1. */
static int
loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

/* The largest PEM file taken: a chain of certificates, or a key. */
#define PEM_MAX (1 << 20)

/* The contents of PEM file path, NUL-terminated; NULL (err) on failure. */
static char *
read_pem(const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	struct buf b = {0};
	char chunk[4096];
	size_t n;

	if (f == NULL) {
		snprintf(err, errlen, "cannot open %s: %m", path);
		return NULL;
	}
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
		if (b.len + n > PEM_MAX || buf_append(&b, chunk, n) < 0) {
			snprintf(err, errlen, "%s is over 1 MiB", path);
			goto fail;
		}
	}
	if (ferror(f)) {
		snprintf(err, errlen, "cannot read %s: %m", path);
		goto fail;
	}
	if (b.len == 0 || strstr(b.data, "-----BEGIN ") == NULL) {
		snprintf(err, errlen, "%s holds no PEM block", path);
		goto fail;
	}
	fclose(f);
	return b.data;
fail:
	fclose(f);
	buf_free(&b);
	return NULL;
}

/* A datum over PEM text, as GnuTLS takes it. */
static gnutls_datum_t
datum(char *pem)
{
	return (gnutls_datum_t){(unsigned char *)pem, (unsigned)strlen(pem)};
}

/*
 * Reads the TLS files once, for the server, and checks them with GnuTLS
 * itself, so that a bad certificate, a key that is not its pair or a CA
 * file without a certificate stops the daemon with a reason before it
 * listens.
 */
static int
tls_options_check(struct daemon_options *o, const char *synopsis)
{
	gnutls_certificate_credentials_t cred = NULL;
	gnutls_datum_t cert, key, ca;
	char err[512] = "";
	int rc;

	if (o->tls_cert == NULL && o->tls_key == NULL) {
		if (o->tls_client_ca != NULL)
			return cli_usage_error(synopsis,
			    "--tls-client-ca needs --tls-cert and --tls-key");
		return 0;
	}
	if (o->tls_cert == NULL || o->tls_key == NULL)
		return cli_usage_error(synopsis,
		    "--tls-cert and --tls-key go together");
	if ((o->tls_cert_pem = read_pem(o->tls_cert, err, sizeof(err))) ==
	        NULL ||
	    (o->tls_key_pem = read_pem(o->tls_key, err, sizeof(err))) == NULL ||
	    (o->tls_client_ca != NULL &&
	        (o->tls_client_ca_pem =
	                read_pem(o->tls_client_ca, err, sizeof(err))) == NULL))
		goto fail;
	if (gnutls_certificate_allocate_credentials(&cred) < 0) {
		snprintf(err, sizeof(err), "out of memory");
		goto fail;
	}
	cert = datum(o->tls_cert_pem);
	key = datum(o->tls_key_pem);
	rc = gnutls_certificate_set_x509_key_mem(cred, &cert, &key,
	    GNUTLS_X509_FMT_PEM);
	if (rc < 0) {
		snprintf(err, sizeof(err), "--tls-cert %s, --tls-key %s: %s",
		    o->tls_cert, o->tls_key, gnutls_strerror(rc));
		goto fail;
	}
	if (o->tls_client_ca_pem != NULL) {
		ca = datum(o->tls_client_ca_pem);
		rc = gnutls_certificate_set_x509_trust_mem(cred, &ca,
		    GNUTLS_X509_FMT_PEM);
		if (rc <= 0) {
			snprintf(err, sizeof(err), "--tls-client-ca %s: %s",
			    o->tls_client_ca,
			    rc == 0 ? "holds no certificate" :
			              gnutls_strerror(rc));
			goto fail;
		}
	}
	gnutls_certificate_free_credentials(cred);
	return 0;
fail:
	if (cred != NULL)
		gnutls_certificate_free_credentials(cred);
	daemon_options_free(o);
	fprintf(stderr, "%s: %s\n", log_prog(), err);
	return status_exit(ST_USAGE);
}

static void
daemon_options_free(struct daemon_options *o)
{
	free(o->tls_cert_pem);
	free(o->tls_key_pem);
	free(o->tls_client_ca_pem);
	o->tls_cert_pem = o->tls_key_pem = o->tls_client_ca_pem = NULL;
}

/*
 * Checks what the options say once all are read, and reads the token: 0,
 * or 2 (usage). A daemon that would listen beyond loopback without a
 * token refuses, unless told --insecure (Redis's protected mode).
 */
static int
daemon_options_check(struct daemon_options *o, const char *synopsis)
{
	char err[512];
	int loose;

	if (parse_listen(o->listen, o->host, sizeof(o->host), &o->port) < 0)
		return cli_usage_error(synopsis, "-l %s is not HOST:PORT",
		    o->listen);
	if (o->token_file != NULL) {
		if (token_read_file(o->token_file, o->token, sizeof(o->token),
		        &loose, err, sizeof(err)) < 0) {
			fprintf(stderr, "%s: --token-file: %s\n", log_prog(),
			    err);
			return status_exit(ST_USAGE);
		}
		o->token_len = strlen(o->token);
		if (loose)
			log_info("warning: token file %s may be read by other "
			         "users (chmod 600 it)",
			    o->token_file);
	} else if (!o->insecure && o->tls_client_ca == NULL &&
	    !loopback(o->host)) {
		fprintf(stderr,
		    "%s: listening on %s, beyond this machine, needs "
		    "--token-file FILE (or --tls-client-ca FILE), so that only "
		    "those who hold the token are served (or --insecure, to "
		    "serve anyone who can reach it)\n",
		    log_prog(), o->host);
		return status_exit(ST_USAGE);
	}
	if (o->store != NULL) {
		if (o->state_dir != NULL)
			return cli_usage_error(synopsis,
			    "--store and --state-dir: one or the other (the "
			    "records go to etcd, or to a directory)");
		if (store_parse_url(o->store, &o->store_cfg, o->store_endpoints,
		        sizeof(o->store_endpoints), o->store_prefix,
		        sizeof(o->store_prefix), err, sizeof(err)) < 0)
			return cli_usage_error(synopsis, "--store: %s", err);
		o->store_cfg.max_bytes = o->journal_max;
	} else if (o->store_cfg.ttl_s > 0 || o->store_cfg.etcd.ca_file ||
	    o->store_cfg.etcd.cert_file || o->store_cfg.etcd.key_file ||
	    o->store_cfg.etcd.auth_file || o->advertise != NULL) {
		return cli_usage_error(synopsis,
		    "--store-lease, --store-ca-file, --store-cert-file, "
		    "--store-key-file, --store-auth-file and --advertise go "
		    "with --store");
	}
	return tls_options_check(o, synopsis);
}

static void
reply_closing(struct daemon *d, struct http_req *req)
{
	http_set_header(req, "Retry-After", "1");
	http_reply_error(req, ST_UNAVAILABLE, "%s is shutting down",
	    d->svc->name);
}

/*
 * Takes mu within 2 s (0, the caller then lets it go the service's way),
 * or says in why that name could not.
 */
static int
health_lock(pthread_mutex_t *mu, const char *name, char *why, size_t len)
{
	struct timespec at = duration_realtime_in(2000);

	if (pthread_mutex_timedlock(mu, &at) != 0) {
		snprintf(why, len, "%s could not take its lock for 2s", name);
		return -1;
	}
	return 0;
}

static void
healthz(struct daemon *d, struct http_req *req)
{
	char why[256] = "";

	if (atomic_load(&d->closing)) {
		http_reply(req, 503, "text/plain", "shutting down\n", 14);
		return;
	}
	if (d->svc->mu != NULL) {
		if (health_lock(d->svc->mu, d->svc->name, why,
		        sizeof(why) - 1) != 0) {
			strcat(why, "\n");
			http_reply(req, 503, "text/plain", why, strlen(why));
			return;
		}
		d->svc->unlock(d->svc->arg);
	}
	http_reply(req, 200, "text/plain", "ok\n", 3);
}

static void
metrics(struct daemon *d, struct http_req *req)
{
	struct http_server *srv = atomic_load(&d->srv);
	struct buf b = {0};
	struct http_stats st;

	/* A request served as the server starts, before its pointer is
	 * known here. */
	if (srv == NULL) {
		http_set_header(req, "Retry-After", "1");
		http_reply_error(req, ST_UNAVAILABLE,
		    "%s is starting: try again", d->svc->name);
		return;
	}
	if (d->svc->metrics != NULL)
		d->svc->metrics(&b, d->svc->arg);
	http_server_stats(srv, &st);
	buf_printf(&b,
	    "# HELP muster_http_requests_total Requests received.\n"
	    "# TYPE muster_http_requests_total counter\n"
	    "muster_http_requests_total %lu\n"
	    "# HELP muster_http_parked Requests parked now.\n"
	    "# TYPE muster_http_parked gauge\nmuster_http_parked %lu\n"
	    "# HELP muster_http_connections Connections open now.\n"
	    "# TYPE muster_http_connections gauge\n"
	    "muster_http_connections %lu\n"
	    "# HELP muster_http_connections_max The connection limit.\n"
	    "# TYPE muster_http_connections_max gauge\n"
	    "muster_http_connections_max %lu\n"
	    "# HELP muster_http_refused_total Connections refused at the "
	    "limit.\n# TYPE muster_http_refused_total counter\n"
	    "muster_http_refused_total %lu\n"
	    "# HELP muster_http_abandoned_total Requests whose client went "
	    "away before the answer.\n"
	    "# TYPE muster_http_abandoned_total counter\n"
	    "muster_http_abandoned_total %lu\n"
	    "# HELP muster_http_timed_out_total Connections closed idle or "
	    "too slow to send a request.\n"
	    "# TYPE muster_http_timed_out_total counter\n"
	    "muster_http_timed_out_total %lu\n"
	    "# HELP muster_http_body_bytes Bytes of request bodies held now."
	    "\n# TYPE muster_http_body_bytes gauge\n"
	    "muster_http_body_bytes %lu\n"
	    "# HELP muster_http_body_refused_total Requests refused because "
	    "the bodies held reached --max-inflight-bytes.\n"
	    "# TYPE muster_http_body_refused_total counter\n"
	    "muster_http_body_refused_total %lu\n"
	    "# HELP muster_http_unauthenticated_total Requests refused for "
	    "a missing or wrong token.\n"
	    "# TYPE muster_http_unauthenticated_total counter\n"
	    "muster_http_unauthenticated_total %lu\n"
	    "# HELP muster_log_dropped_total Log lines dropped because "
	    "stderr did not keep up.\n# TYPE muster_log_dropped_total counter\n"
	    "muster_log_dropped_total %lu\n",
	    st.requests, st.parked, st.connections, st.max_connections,
	    st.refused, st.abandoned, st.timed_out, st.body_bytes,
	    st.body_refused, atomic_load(&d->unauthenticated), log_dropped());
	if (b.data == NULL)
		http_reply_error(req, ST_RESOURCE_EXHAUSTED, "out of memory");
	else
		http_reply(req, 200, "text/plain; version=0.0.4", b.data,
		    b.len);
	buf_free(&b);
}

/*
 * Whether req carries the cluster's token (or none is needed). /healthz
 * needs none: a liveness probe holds no secret, and learns only "ok";
 * nor does the status page (/), which holds no data: it asks for it with
 * the token the browser gives it; nor the icon a browser asks for with it
 * (there is none).
 */
static int
authenticated(struct daemon *d, struct http_req *req)
{
	const char *h;
	size_t n;

	if (strcmp(http_req_path(req), "/healthz") == 0 ||
	    strcmp(http_req_path(req), "/") == 0 ||
	    strcmp(http_req_path(req), "/favicon.ico") == 0)
		return 1;
	if (d->o->tls_client_ca_pem != NULL) {
		int v = http_req_peer_verified(req);
		if (v <= 0) {
			atomic_fetch_add(&d->unauthenticated, 1);
			http_reply_error(req, ST_UNAUTHENTICATED,
			    v == 0 ?
			        "this %s needs a client certificate: set "
			        "MUSTER_TLS_CERT_FILE and MUSTER_TLS_KEY_FILE" :
			        "the client certificate is not signed by "
			        "this %s's --tls-client-ca, or has expired",
			    d->svc->name);
			return 0;
		}
	}
	if (d->o->token_len == 0)
		return 1;
	h = http_req_header(req, "Authorization");
	if (h != NULL && strncasecmp(h, "Bearer ", 7) == 0) {
		for (h += 7; *h == ' '; h++)
			;
		n = strlen(h);
		while (n > 0 && h[n - 1] == ' ')
			n--;
		if (token_equal(h, n, d->o->token, d->o->token_len))
			return 1;
	}
	atomic_fetch_add(&d->unauthenticated, 1);
	http_set_header(req, "WWW-Authenticate", "Bearer realm=\"muster\"");
	http_reply_error(req, ST_UNAUTHENTICATED,
	    h == NULL ? "this %s needs a token: set MUSTER_TOKEN_FILE to the "
	                "file that holds the cluster's token" :
	                "the token is not this %s's",
	    d->svc->name);
	return 0;
}

/* GET /: the status page, which asks the JSON API for what it shows. */
static void
page(struct daemon *d, struct http_req *req)
{
	(void)d;
	http_set_header(req, "Cache-Control", "no-store");
	http_set_header(req, "X-Content-Type-Options", "nosniff");
	http_set_header(req, "Referrer-Policy", "no-referrer");
	/* Nothing from elsewhere, not in a frame: its own script and
	 * style, and requests to this daemon only. */
	http_set_header(req, "Content-Security-Policy",
	    "default-src 'none'; script-src 'unsafe-inline'; "
	    "style-src 'unsafe-inline'; connect-src 'self'; "
	    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
	http_reply(req, 200, "text/html; charset=utf-8", daemon_page,
	    daemon_page_len);
}

/*
 * GET /v1/daemon: which daemon this is, and where its state is kept:
 * {"daemon","version","state":"memory"|"journal"|"store", with a journal
 * "state_dir","fsync","journal_bytes","snapshot_bytes","error", with a
 * store "store"}.
 */
static void
whoami(struct daemon *d, struct http_req *req)
{
	static const char *const fsync[] = {"always", "batch", "none"};
	const struct daemon_options *o = d->o;
	uint64_t jb = 0, sb = 0;
	char why[512] = "";
	json_t *v = json_pack("{s:s,s:s}", "daemon", d->svc->name, "version",
	    MUSTER_VERSION);

	if (o->store != NULL) {
		json_object_set_new(v, "state", json_string("store"));
		json_object_set_new(v, "store", json_string(o->store));
	} else if (d->svc->commit != NULL &&
	    commit_journal_info(d->svc->commit, &jb, &sb, why, sizeof(why)) ==
	        0) {
		json_object_set_new(v, "state", json_string("journal"));
		char *abs = realpath(o->state_dir, NULL);

		json_object_set_new(v, "state_dir",
		    json_string(abs != NULL ? abs : o->state_dir));
		free(abs);
		json_object_set_new(v, "fsync",
		    json_string(
		        o->fsync >= 0 && o->fsync < 3 ? fsync[o->fsync] : "?"));
		json_object_set_new(v, "journal_bytes",
		    json_integer((json_int_t)jb));
		json_object_set_new(v, "snapshot_bytes",
		    json_integer((json_int_t)sb));
		json_object_set_new(v, "error",
		    why[0] != '\0' ? json_string(why) : json_null());
	} else {
		json_object_set_new(v, "state", json_string("memory"));
	}
	http_reply_json(req, 200, v);
}

/* GET /v1/replicas: a replicated daemon's replicas (store_status). */
static void
replicas(struct daemon *d, struct http_req *req)
{
	struct buf b = {0};
	char err[512];

	if (d->svc->commit == NULL || !commit_replicated(d->svc->commit)) {
		http_reply_error(req, ST_FAILED_PRECONDITION,
		    "this %s has no replicas: it runs without --store",
		    d->svc->name);
		return;
	}
	if (commit_status(d->svc->commit, &b, err, sizeof(err)) < 0)
		http_reply_error(req, ST_UNAVAILABLE, "%s", err);
	else
		http_reply(req, 200, "application/json", b.data, b.len);
	buf_free(&b);
}

/*
 * A standby's answer to every request but /healthz, /metrics and
 * /v1/replicas: UNAVAILABLE, with the leader's address for the client to
 * go to (X-Muster-Leader) when one is known. It has made no change, so
 * any request may be sent again (X-Muster-Standby says so).
 */
static void
reply_standby(struct daemon *d, struct http_req *req, const char *leader)
{
	http_set_header(req, "Retry-After", "1");
	http_set_header(req, "X-Muster-Standby", "1");
	if (leader[0] != '\0') {
		http_set_header(req, "X-Muster-Leader", leader);
		http_reply_error(req, ST_UNAVAILABLE,
		    "this %s is a standby; its leader is %s", d->svc->name,
		    leader);
	} else {
		http_reply_error(req, ST_UNAVAILABLE,
		    "this %s is a standby, and no leader is elected yet",
		    d->svc->name);
	}
}

/* The skeleton's own resources come first; then the service's. */
/* The skeleton's own paths, served whatever the service's state:
 * GET (and HEAD where head is set) only. */
static const struct {
	const char *path;
	int head;
	void (*serve)(struct daemon *d, struct http_req *req);
} own[] = {
    {"/healthz", 1, healthz},
    {"/metrics", 0, metrics},
    {"/", 1, page},
    {"/v1/daemon", 0, whoami},
    {"/v1/replicas", 0, replicas},
};

static void
handle(struct http_req *req, void *arg)
{
	struct daemon *d = arg;
	const char *path = http_req_path(req);
	unsigned m = route_method(http_req_method(req));
	char leader[300];

	if (!authenticated(d, req))
		return;
	if (strcmp(path, "/favicon.ico") == 0) {
		http_reply(req, 204, "image/x-icon", "", 0);
		return;
	}
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
		unsigned allowed =
		    own[i].head ? ROUTE_GET | ROUTE_HEAD : ROUTE_GET;

		if (strcmp(path, own[i].path) != 0)
			continue;
		if ((m & allowed) == 0) {
			http_set_header(req, "Allow",
			    own[i].head ? "GET, HEAD" : "GET");
			http_reply_error_http(req, 405, ST_INVALID_ARGUMENT,
			    "method %s not allowed on %s", http_req_method(req),
			    path);
		} else {
			own[i].serve(d, req);
		}
		return;
	}
	if (atomic_load(&d->closing)) {
		reply_closing(d, req);
		return;
	}
	if (d->svc->commit != NULL &&
	    !commit_leads(d->svc->commit, leader, sizeof(leader))) {
		reply_standby(d, req, leader);
		return;
	}
	route_dispatch(d->svc->routes, d->svc->nroutes, req, d->svc->arg);
}

static void
gone(struct http_req *req, void *arg)
{
	struct daemon *d = arg;

	park_gone(d->svc->park, req);
}

/*
 * Stops serving: every request from now on is answered as closing, the
 * service answers what is parked, the journal makes what it holds durable
 * and lets every reply go, and the server stops.
 */
static void
stop(struct daemon *d)
{
	atomic_store(&d->closing, 1);
	d->svc->shutdown(d->svc->arg);
	if (d->svc->commit != NULL)
		commit_detach(d->svc->commit);
	http_server_stop(d->srv);
	log_flush(2000);
}

/*
 * Serves svc on the options' address until SIGINT or SIGTERM; returns
 * the exit code (0, or UNAVAILABLE when it cannot listen).
 */
/*
 * The address clients reach this daemon at, for a replica's campaign:
 * --advertise, or the scheme, host and port it listens on (its host name
 * for a wildcard address).
 */
static void
advertised(const struct daemon_options *o, int port, char *out, size_t len)
{
	char host[256];

	if (o->advertise != NULL) {
		snprintf(out, len, "%s", o->advertise);
		return;
	}
	if (strcmp(o->host, "0.0.0.0") == 0 || strcmp(o->host, "::") == 0) {
		if (gethostname(host, sizeof(host)) != 0)
			snprintf(host, sizeof(host), "localhost");
		host[sizeof(host) - 1] = '\0';
	} else {
		snprintf(host, sizeof(host),
		    strchr(o->host, ':') != NULL ? "[%s]" : "%s", o->host);
	}
	snprintf(out, len, "%s://%s:%d",
	    o->tls_cert_pem != NULL ? "https" : "http", host, port);
}

/*
 * Serves svc on the options' address (or the listening socket
 * listen_fd, inherited) until SIGINT or SIGTERM; returns the exit code
 * (0, or UNAVAILABLE when it cannot listen). A replica told to start
 * again as a standby (SIGUSR2, commit.h) stops too, and leaves its
 * listening socket in *keep_fd for the next one, and returns -1.
 */
static int
daemon_run(const struct daemon_options *o, const struct daemon_service *svc,
    int listen_fd, int *keep_fd)
{
	struct daemon d = {.o = o, .svc = svc};
	struct http_server_config hc = {.host = o->host,
	    .port = o->port,
	    .listen_fd = listen_fd,
	    .threads = (unsigned)o->threads,
	    .max_body = o->max_body,
	    .max_inflight = o->max_inflight,
	    .max_conns = (unsigned)o->max_conns,
	    .request_timeout_ms = o->request_timeout_ms,
	    .tls_cert = o->tls_cert_pem,
	    .tls_key = o->tls_key_pem,
	    .tls_trust = o->tls_client_ca_pem,
	    .handler = handle,
	    .arg = &d,
	    .gone = svc->park != NULL ? gone : NULL,
	    .gate = svc->commit != NULL ? commit_gate : NULL,
	    .gate_flush = svc->commit != NULL ? commit_flush : NULL,
	    .gate_arg = svc->commit};
	struct http_server *srv;
	char err[512];
	sigset_t set;
	int sig;

	daemon_signals(&set);
	/* Parked requests each hold a socket: as many as the system allows. */
	daemon_raise_nofile();
	/* From here on a stalled stderr must not stall the service. */
	log_async(1u << 20);
	if ((srv = http_server_start(&hc, err, sizeof(err))) == NULL) {
		log_flush(2000);
		return cli_fail(ST_UNAVAILABLE, "%s", err);
	}
	atomic_store(&d.srv, srv);
	if (svc->commit != NULL)
		commit_attach(svc->commit, srv);
	if (svc->started != NULL)
		svc->started(d.srv, svc->arg);
	if (svc->commit != NULL && commit_replicated(svc->commit)) {
		char addr[300];

		advertised(o, http_server_port(d.srv), addr, sizeof(addr));
		commit_campaign(svc->commit, addr);
	}
	if (o->port_file != NULL &&
	    daemon_write_port_file(o->port_file, http_server_port(d.srv)) < 0) {
		int rc = cli_fail(ST_INTERNAL, "cannot write port file %s: %m",
		    o->port_file);
		stop(&d);
		return rc;
	}
	log_info("listening on %s%s:%d%s",
	    o->tls_cert_pem != NULL ? "https://" : "", o->host,
	    http_server_port(d.srv),
	    o->tls_client_ca_pem != NULL ? " (client certificates required)" :
	                                   "");
	do {
		if (sigwait(&set, &sig) != 0)
			sig = SIGTERM;
	} while (sig == SIGHUP ||
	    (sig == SIGUSR2 &&
	        (svc->commit == NULL || !commit_replicated(svc->commit))));
	if (sig == SIGUSR2) {
		/* Answered as closing meanwhile; the next one listens on. */
		log_info("starting again as a standby");
		atomic_store(&d.closing, 1);
		d.svc->shutdown(d.svc->arg);
		commit_detach(d.svc->commit);
		*keep_fd = http_server_stop_keep(d.srv);
		return -1;
	}
	log_info("%s: shutting down", strsignal(sig));
	if (svc->stopping != NULL)
		svc->stopping(svc->arg);
	stop(&d);
	if (svc->commit != NULL && commit_fatal(svc->commit) != NULL)
		return cli_fail(ST_INTERNAL, "%s", commit_fatal(svc->commit));
	return 0;
}

void
daemon_signals(sigset_t *set)
{
	/* Taken by sigwait in daemon_run, never by another thread. */
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, set, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/*
 * Starts this program again, in this process, on the listening socket
 * fd: a replica that must come back as a standby. Returns only when it
 * cannot (the exit code).
 */
static int
daemon_exec(char **argv, int fd)
{
	char num[16];
	int keep = fd >= 0 ? fcntl(fd, F_DUPFD, 3) : -1;

	if (keep >= 0) {
		snprintf(num, sizeof(num), "%d", keep);
		setenv("MUSTER_LISTEN_FD", num, 1);
	}
	log_flush(2000);
	execv("/proc/self/exe", argv);
	return cli_fail(ST_INTERNAL, "cannot start again: %m");
}

/* The socket a daemon started again inherited (MUSTER_LISTEN_FD), taken
 * out of the environment; -1 if none. */
static int
inherited_socket(void)
{
	const char *v = getenv("MUSTER_LISTEN_FD");
	long fd;

	if (v == NULL)
		return -1;
	if (parse_long(v, 3, 1 << 20, &fd) < 0)
		fd = -1;
	unsetenv("MUSTER_LISTEN_FD");
	if (fd > 0)
		fcntl((int)fd, F_SETFD, FD_CLOEXEC);
	return (int)fd;
}

void
daemon_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int
daemon_write_port_file(const char *path, int port)
{
	char tmp[4096];
	FILE *f;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >=
	    (int)sizeof(tmp))
		return -1;
	if ((f = fopen(tmp, "w")) == NULL)
		return -1;
	fprintf(f, "%d\n", port);
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

/*
 * Reads the command line into o (the skeleton's options) and p->cfg (the
 * program's, through its hooks): 0, or the exit code.
 */
static int
daemon_parse(const struct daemon_program *p, int argc, char **argv,
    struct daemon_options *o)
{
	int c, r;

	while ((c = getopt_long(argc, argv, DAEMON_SHORTOPTS, p->longopts,
	            NULL)) != -1) {
		if ((r = daemon_option(o, c, optarg, p->synopsis)) != 0) {
			if (r < 0)
				return 2;
			continue;
		}
		if ((r = p->option(c, optarg, p->cfg)) != 0)
			return r;
	}
	if (optind != argc)
		return cli_usage_error(p->synopsis, "unexpected argument %s",
		    argv[optind]);
	if ((r = daemon_options_check(o, p->synopsis)) != 0)
		return r;
	return p->configure(o, p->cfg);
}

int
daemon_main(const struct daemon_program *p, int argc, char **argv)
{
	struct daemon_options o;
	struct daemon_service svc;
	char err[512];
	enum status st;
	sigset_t set;
	int rc, listen_fd = inherited_socket(), keep_fd = -1;

	log_init(argv[0], 0);
	daemon_options_init(&o, p->port);
	if ((rc = daemon_parse(p, argc, argv, &o)) != 0)
		return rc;
	log_init(argv[0], o.verbose);
	if (o.check) {
		printf("%s: configuration ok\n", p->name);
		if (listen_fd > 0)
			close(listen_fd);
		daemon_options_free(&o);
		return 0;
	}
	/* Before the service's threads start, so that they inherit it. */
	daemon_signals(&set);
	if ((st = p->open(p->cfg, &o, &svc, err, sizeof(err))) != ST_OK) {
		rc = cli_fail(st, "%s", err);
	} else {
		rc = daemon_run(&o, &svc, listen_fd, &keep_fd);
		svc.free(svc.arg);
	}
	daemon_options_free(&o);
	if (rc == -1)
		return daemon_exec(argv, keep_fd);
	return rc;
}
