/*
 * bench-bare: libmicrohttpd configured exactly as coordd configures it
 * (lib/http_server.c: same flags, thread pool, memory limit and options)
 * answering every request with one constant small body. No routing, no
 * store, no per-request allocation: the ceiling of our own stack, that
 * coordd's figures are divided by.
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "cli.h"
#include "daemon.h"
#include "log.h"
#include "parse.h"

static const char synopsis[] =
    "usage: bench-bare [-l HOST:PORT] [--port-file FILE] [--threads N]\n";

static const char body[] = "ok\n";

/* Marks a request whose headers were seen, as coordd's first call does. */
static int seen;

/*
 * Takes the same two steps as coordd's on_request: the first call only
 * notes the request, uploads are drained, and the reply is queued on the
 * final call. The response is one shared, reference-counted object.
 */
static enum MHD_Result
on_request(void *cls, struct MHD_Connection *conn, const char *url,
    const char *method, const char *version, const char *upload,
    size_t *upload_size, void **ctx)
{
	struct MHD_Response *resp = cls;

	(void)url;
	(void)method;
	(void)version;
	(void)upload;
	if (*ctx == NULL) {
		*ctx = &seen;
		return MHD_YES;
	}
	if (*upload_size > 0) {
		*upload_size = 0;
		return MHD_YES;
	}
	return MHD_queue_response(conn, MHD_HTTP_OK, resp);
}

static void
on_completed(void *cls, struct MHD_Connection *conn, void **ctx,
    enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)conn;
	(void)toe;
	*ctx = NULL;
}

static size_t
unescape_none(void *cls, struct MHD_Connection *c, char *s)
{
	(void)cls;
	(void)c;
	return strlen(s);
}

static void
on_mhd_error(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	if (log_verbose())
		vfprintf(stderr, fmt, ap);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"listen", required_argument, NULL, 'l'},
	    {"port-file", required_argument, NULL, 'P'},
	    {"threads", required_argument, NULL, 'T'},
	    {"verbose", no_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *listen = "127.0.0.1:0", *port_file = NULL;
	long threads = 2 * sysconf(_SC_NPROCESSORS_ONLN); /* as coordd */
	unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD |
	    MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO | MHD_USE_ERROR_LOG;
	struct sockaddr_storage ss;
	struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
	const union MHD_DaemonInfo *info;
	struct MHD_Response *resp;
	struct MHD_Daemon *mhd;
	char host[256];
	int c, port, verbose = 0, sig;
	sigset_t set;

	log_init(argv[0], 0);
	while ((c = getopt_long(argc, argv, "hl:v", longopts, NULL)) != -1) {
		switch (c) {
		case 'l': listen = optarg; break;
		case 'P': port_file = optarg; break;
		case 'T':
			if (parse_long(optarg, 1, 64, &threads) < 0)
				return cli_usage_error(synopsis,
				    "--threads %s is not a number from 1 to 64",
				    optarg);
			break;
		case 'v': verbose++; break;
		case 'h': fputs(synopsis, stdout); return 0;
		default: fputs(synopsis, stderr); return 2;
		}
	}
	if (optind != argc)
		return cli_usage_error(synopsis, "unexpected argument %s",
		    argv[optind]);
	log_init(argv[0], verbose);
	if (parse_listen(listen, host, sizeof(host), &port) < 0)
		return cli_usage_error(synopsis, "-l %s is not HOST:PORT",
		    listen);
	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons((uint16_t)port);
	} else if (inet_pton(AF_INET6, host, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons((uint16_t)port);
		flags |= MHD_USE_IPv6;
	} else {
		return cli_usage_error(synopsis,
		    "%s is not a numeric IP address", host);
	}

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	daemon_raise_nofile();

	resp = MHD_create_response_from_buffer(sizeof(body) - 1, (void *)body,
	    MHD_RESPMEM_PERSISTENT);
	if (resp == NULL)
		return cli_fail(ST_INTERNAL, "out of memory");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
	    "text/plain");
	mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, resp,
	    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
	    MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(threads > 1 ? threads : 0),
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000000,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(8 * 1024),
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
	    MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)4096,
	    MHD_OPTION_UNESCAPE_CALLBACK, unescape_none, NULL,
	    MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
	    MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error, NULL, MHD_OPTION_END);
	if (mhd == NULL) {
		MHD_destroy_response(resp);
		return cli_fail(ST_UNAVAILABLE,
		    "cannot listen on %s port %d: %m", host, port);
	}
	info = MHD_get_daemon_info(mhd, MHD_DAEMON_INFO_BIND_PORT);
	if (info != NULL)
		port = info->port;
	if (port_file != NULL && daemon_write_port_file(port_file, port) < 0) {
		MHD_stop_daemon(mhd);
		MHD_destroy_response(resp);
		return cli_fail(ST_INTERNAL, "cannot write port file %s: %m",
		    port_file);
	}
	log_info("listening on %s:%d", host, port);

	if (sigwait(&set, &sig) != 0)
		sig = SIGTERM;
	MHD_stop_daemon(mhd);
	MHD_destroy_response(resp);
	return 0;
}
