/*
 * daemon.h: the skeleton every muster daemon runs in: its command line
 * (the options they all take, and a program's own through its hooks), its
 * service opened and freed, the listening socket and its port file,
 * /healthz and /metrics, the route table, and the signals. A daemon stays
 * in the foreground, logs to stderr through a queue that never blocks it,
 * and on SIGINT or SIGTERM answers every parked request (clients retry
 * against the next daemon) before it stops. SIGHUP is ignored.
 */
#ifndef MUSTER_DAEMON_H
#define MUSTER_DAEMON_H

#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>

#include "buf.h"
#include "cli.h"
#include "http_server.h"
#include "route.h"
#include "store.h"
#include "token.h"

/* What a service hands the skeleton. */
struct daemon_service {
	const char *name; /* "coordd": logs, messages */
	const struct route *routes;
	size_t nroutes;
	void *arg; /* passed to every callback */
	/* Appends the service's lines to /metrics; may be NULL. */
	void (*metrics)(struct buf *out, void *arg);
	/*
	 * The service's lock, and how it lets it go (unlock(arg), as each of
	 * its locked sections ends): /healthz answers only once it takes the
	 * lock within 2 s, for a daemon stuck holding it must not look
	 * healthy. mu may be NULL.
	 */
	pthread_mutex_t *mu;
	void (*unlock)(void *arg);
	/* SIGTERM: answer what is parked; nothing may park after. */
	void (*shutdown)(void *arg);
	/* The server is up (before the port file is written); may be NULL. */
	void (*started)(struct http_server *srv, void *arg);
	/* SIGINT or SIGTERM came: called while the server still serves,
	 * before shutdown, so that what the daemon started can be stopped
	 * and still talk to it on its way out. May be NULL. */
	void (*stopping)(void *arg);
	/* Where its requests park: one whose client went away leaves it
	 * (park_gone). May be NULL. */
	struct park *park;
	/* With a journal: its replies wait for it (commit.h); else NULL.
	 * The skeleton attaches it to the server, and detaches it once the
	 * service has shut down. */
	struct commit *commit;
	/* Frees the service, once the server has stopped. */
	void (*free)(void *arg);
};

/* The options every daemon takes, with their defaults. */
struct daemon_options {
	const char *listen; /* HOST:PORT */
	const char *port_file;
	long threads; /* worker threads */
	size_t max_body;
	size_t max_inflight;        /* bodies held at once; 0: 4 max_body */
	long max_conns;             /* 0: from the limit on open files */
	int64_t request_timeout_ms; /* 0: 60 s to send a request */
	int64_t max_wait_ms;        /* 0: a long poll waits 10 min at most */
	const char *token_file;     /* the cluster's token */
	int insecure;               /* serve beyond loopback without one */
	const char *tls_cert;       /* PEM files: serve HTTPS */
	const char *tls_key;
	const char *tls_client_ca; /* clients must show a cert it signed */
	/* Their contents, read by daemon_options_check. */
	char *tls_cert_pem, *tls_key_pem, *tls_client_ca_pem;
	char token[TOKEN_MAX + 1]; /* read by daemon_options_check */
	size_t token_len;          /* 0: no token */
	const char *state_dir;     /* the journal's directory; NULL: none */
	int fsync;                 /* enum journal_fsync */
	size_t journal_max;        /* compact past this; 0: 64 MiB */
	/* --store etcd://...: the records in etcd, replicas (store.h). */
	const char *store;
	struct store_config store_cfg; /* read by daemon_options_check */
	char store_endpoints[4096], store_prefix[512];
	const char *advertise; /* the address clients reach it at */
	int verbose;
	int check;     /* -n: check the options, exit */
	char host[64]; /* from listen */
	int port;
};

/* Long options of the skeleton, to put first in a daemon's table. */
/* clang-format off */
#define DAEMON_LONGOPTS \
	{"listen", required_argument, NULL, 'l'}, \
	{"port-file", required_argument, NULL, 0x100}, \
	{"threads", required_argument, NULL, 0x101}, \
	{"max-connections", required_argument, NULL, 0x102}, \
	{"max-inflight-bytes", required_argument, NULL, 0x103}, \
	{"request-timeout", required_argument, NULL, 0x104}, \
	{"max-wait", required_argument, NULL, 0x105}, \
	{"token-file", required_argument, NULL, 0x106}, \
	{"insecure", no_argument, NULL, 0x107}, \
	{"tls-cert", required_argument, NULL, 0x108}, \
	{"tls-key", required_argument, NULL, 0x109}, \
	{"tls-client-ca", required_argument, NULL, 0x10a}, \
	{"state-dir", required_argument, NULL, 0x10b}, \
	{"fsync", required_argument, NULL, 0x10c}, \
	{"journal-max-bytes", required_argument, NULL, 0x10d}, \
	{"store", required_argument, NULL, 0x10e}, \
	{"store-lease", required_argument, NULL, 0x10f}, \
	{"store-ca-file", required_argument, NULL, 0x110}, \
	{"store-cert-file", required_argument, NULL, 0x111}, \
	{"store-key-file", required_argument, NULL, 0x112}, \
	{"store-auth-file", required_argument, NULL, 0x113}, \
	{"advertise", required_argument, NULL, 0x114}, \
	{"verbose", no_argument, NULL, 'v'}, \
	{"check", no_argument, NULL, 'n'}, \
	CLI_STD_LONGOPTS
/* clang-format on */

/*
 * A daemon program: its name and port, its own options and its service.
 * daemon_main does the rest, the same for every daemon.
 */
struct daemon_program {
	const char *name;     /* "coordd" */
	int port;             /* the default port */
	const char *synopsis; /* its usage, for -h and every usage error */
	/* Its long options: DAEMON_LONGOPTS, then its own. */
	const struct option *longopts;
	void *cfg; /* the program's configuration, for its hooks */
	/* Takes option c, not one of the skeleton's, into cfg: 0, or the
	 * exit code (the reason said); cli_std_option's for one it does not
	 * know. */
	int (*option)(int c, const char *arg, void *cfg);
	/* Once every option is read and the skeleton's are checked: what
	 * they make of cfg (defaults, o->max_body): 0, or the exit code. */
	int (*configure)(struct daemon_options *o, void *cfg);
	/* Makes the service from cfg, with its journal when o->state_dir
	 * is set (or its store, o->store), and fills svc: ST_OK, or the
	 * error (err). */
	enum status (*open)(void *cfg, const struct daemon_options *o,
	    struct daemon_service *svc, char *err, size_t errlen);
};

/*
 * A daemon's main: logging, the options, -n (the options are checked and
 * nothing runs), the service opened, served and closed. The
 * exit code.
 */
int daemon_main(const struct daemon_program *p, int argc, char **argv);

/*
 * Blocks the signals a daemon takes by sigwait (SIGINT, SIGTERM, SIGHUP,
 * and SIGUSR2: a replica starts again as a standby) in the calling
 * thread, and those it starts after, into set; ignores SIGPIPE.
 */
void daemon_signals(sigset_t *set);

/* Raises the soft limit on open files to the hard one. */
void daemon_raise_nofile(void);

/* Writes the port to path atomically (a temporary file, then rename). */
int daemon_write_port_file(const char *path, int port);

#endif
