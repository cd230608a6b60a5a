/*
 * bench-bare: libmicrohttpd configured exactly as coordd configures it
 * (lib/http_server.c: same flags, thread pool, memory limit and options)
 * answering every request with one constant small body. No routing, no
 * store, no per-request allocation: the ceiling of our own stack, that
 * coordd's figures are divided by.
 *
 * --body-bytes N makes the body N bytes, and --raw answers with a plain
 * socket instead (a thread per connection, head and body in one writev):
 * the two, side by side, are how much libmicrohttpd costs a server of
 * bulk bytes, such as a worker's data port (bench/data.sh, lib/README).
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <microhttpd.h>

#include "cli.h"
#include "daemon.h"
#include "log.h"
#include "parse.h"

static const char synopsis[] =
    "usage: bench-bare [-l HOST:PORT] [--port-file FILE] [--threads N]\n"
    "                  [--body-bytes N] [--raw]\n";

static const char small[] = "ok\n";
static char *body;
static size_t body_len;

/* Marks a request whose headers were seen, as coordd's first call does. */
static int seen;

/*
 * Takes the same two steps as coordd's on_request: the first call only
 * notes the request, uploads are drained, and the reply is queued on the
 * final call. The response is one shared, reference-counted object.
 */
/* --raw: answers every request head on the connection, until it closes. */
static void *
raw_conn(void *arg)
{
	int fd = (int)(intptr_t)arg;
	char in[8192], head[128];
	size_t have = 0;
	int hl = snprintf(head, sizeof(head),
	    "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n"
	    "Content-Type: text/plain\r\n\r\n",
	    body_len);

	for (;;) {
		char *end = memmem(in, have, "\r\n\r\n", 4);
		ssize_t n;

		if (end == NULL) {
			if (have == sizeof(in))
				break;
			if ((n = read(fd, in + have, sizeof(in) - have)) <= 0)
				break;
			have += (size_t)n;
			continue;
		}
		have -= (size_t)(end + 4 - in);
		memmove(in, end + 4, have);
		struct iovec iov[2] = {{head, (size_t)hl}, {body, body_len}};
		size_t left = (size_t)hl + body_len;
		int i = 0;

		while (left > 0) {
			if ((n = writev(fd, iov + i, 2 - i)) <= 0)
				goto out;
			left -= (size_t)n;
			while (i < 2 && (size_t)n >= iov[i].iov_len)
				n -= (ssize_t)iov[i++].iov_len;
			if (i < 2) {
				iov[i].iov_base = (char *)iov[i].iov_base + n;
				iov[i].iov_len -= (size_t)n;
			}
		}
	}
out:
	close(fd);
	return NULL;
}

static void *
raw_accept(void *arg)
{
	int lfd = (int)(intptr_t)arg;

	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		pthread_t t;

		if (fd < 0)
			continue;
		if (pthread_create(&t, NULL, raw_conn, (void *)(intptr_t)fd) !=
		    0) {
			close(fd);
			continue;
		}
		pthread_detach(t);
	}
	return NULL;
}

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
	    {"body-bytes", required_argument, NULL, 'B'},
	    {"raw", no_argument, NULL, 'R'},
	    {"verbose", no_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *addr = "127.0.0.1:0", *port_file = NULL;
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
	int c, port, verbose = 0, sig, raw = 0;
	long bytes = -1;
	sigset_t set;

	log_init(argv[0], 0);
	while ((c = getopt_long(argc, argv, "hl:v", longopts, NULL)) != -1) {
		switch (c) {
		case 'l': addr = optarg; break;
		case 'P': port_file = optarg; break;
		case 'T':
			if (parse_long(optarg, 1, 64, &threads) < 0)
				return cli_usage_error(synopsis,
				    "--threads %s is not a number from 1 to 64",
				    optarg);
			break;
		case 'B':
			if (parse_long(optarg, 0, 1L << 30, &bytes) < 0)
				return cli_usage_error(synopsis,
				    "--body-bytes %s is not a number from 0 to "
				    "2^30",
				    optarg);
			break;
		case 'R': raw = 1; break;
		case 'v': verbose++; break;
		case 'h': fputs(synopsis, stdout); return 0;
		default: fputs(synopsis, stderr); return 2;
		}
	}
	if (optind != argc)
		return cli_usage_error(synopsis, "unexpected argument %s",
		    argv[optind]);
	log_init(argv[0], verbose);
	if (parse_listen(addr, host, sizeof(host), &port) < 0)
		return cli_usage_error(synopsis, "-l %s is not HOST:PORT",
		    addr);
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

	if (bytes < 0) {
		body = (char *)small;
		body_len = sizeof(small) - 1;
	} else {
		if ((body = malloc((size_t)bytes + 1)) == NULL)
			return cli_fail(ST_INTERNAL, "out of memory");
		memset(body, 'x', (size_t)bytes);
		body_len = (size_t)bytes;
	}
	if (raw) {
		socklen_t sl =
		    ss.ss_family == AF_INET6 ? sizeof(*sin6) : sizeof(*sin);
		int lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0),
		    one = 1;
		pthread_t t;

		if (lfd < 0 ||
		    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one,
		        sizeof(one)) < 0 ||
		    bind(lfd, (struct sockaddr *)&ss, sl) < 0 ||
		    listen(lfd, 4096) < 0 ||
		    getsockname(lfd, (struct sockaddr *)&ss, &sl) < 0)
			return cli_fail(ST_UNAVAILABLE,
			    "cannot listen on %s port %d: %m", host, port);
		port = ntohs(
		    ss.ss_family == AF_INET6 ? sin6->sin6_port : sin->sin_port);
		if (port_file != NULL &&
		    daemon_write_port_file(port_file, port) < 0)
			return cli_fail(ST_INTERNAL,
			    "cannot write port file %s: %m", port_file);
		if (pthread_create(&t, NULL, raw_accept,
		        (void *)(intptr_t)lfd) != 0)
			return cli_fail(ST_INTERNAL, "cannot start a thread");
		log_info("listening on %s:%d (raw)", host, port);
		if (sigwait(&set, &sig) != 0)
			sig = SIGTERM;
		return 0;
	}
	resp = MHD_create_response_from_buffer(body_len, body,
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
