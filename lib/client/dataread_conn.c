/*
 * dataread_conn.c: a consumer's connections to workers, on sockets of our
 * own rather than http_client: a reply is received once into a buffer
 * kept for the task, and its payloads go out in one writev, with no copy
 * and no per-element work between. Its requests, replies and the chunks
 * of a reply's body.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dataread_int.h"
#include "http1.h"
#include "vec.h"

#define CONNECT_MS 5000
#define MAX_HEAD 16384
/* The largest reply taken: one element may exceed max, not this. */
#define MAX_REPLY (1ULL << 34)

/* The host of [https://]HOST:PORT or [V6]:PORT into host, and its port;
 * NULL. */
static const char *
addr_split(const char *addr, char *host, size_t size)
{
	const char *port, *h;
	size_t hlen;

	if (strncmp(addr, "https://", 8) == 0)
		addr += 8;
	h = addr;

	if (*addr == '[') {
		h = addr + 1;
		port = strchr(h, ']');
		hlen = port != NULL ? (size_t)(port - h) : 0;
		port = port != NULL && port[1] == ':' ? port + 2 : NULL;
	} else {
		port = strrchr(addr, ':');
		hlen = port != NULL ? (size_t)(port - addr) : 0;
		port = port != NULL ? port + 1 : NULL;
	}
	if (port == NULL || hlen == 0 || hlen >= size)
		return NULL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	return port;
}

/*
 * Connects the non-blocking fd within ms, then makes it blocking: a
 * worker's machine that vanished must not hold us for the minutes a
 * blocking connect takes. 0, or -1.
 */
static int
connect_within(int fd, const struct addrinfo *ai, int64_t ms)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int soerr = 0;
	socklen_t sl = sizeof(soerr);

	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 &&
	    (errno != EINPROGRESS || poll(&p, 1, (int)ms) != 1 ||
	        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 ||
	        soerr != 0))
		return -1;
	return fcntl(fd, F_SETFL, 0);
}

/*
 * A connection to a worker's address into wc, TLS for an https:// one
 * (trusting what MUSTER_TLS_CA_FILE, or the system, trusts), made within
 * CONNECT_MS or io_ms if shorter, its calls timing out after io_ms: 0; -1
 * when it cannot be reached now; -2 when TLS failed, which will not mend
 * by itself (an untrusted certificate, say), with why in err.
 */
int
dataread_conn_open(const char *addr, int64_t io_ms, struct wconn *wc, char *err,
    size_t errlen)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
	    .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res, *ai;
	struct timeval tv = {.tv_sec = io_ms / 1000,
	    .tv_usec = (io_ms % 1000) * 1000};
	char host[256];
	const char *port = addr_split(addr, host, sizeof(host));
	int fd = -1, one = 1;

	if (port == NULL || getaddrinfo(host, port, &hints, &res) != 0)
		return -1;
	for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
		fd = socket(ai->ai_family,
		    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    ai->ai_protocol);
		if (fd >= 0 &&
		    connect_within(fd, ai,
		        io_ms < CONNECT_MS ? io_ms : CONNECT_MS) < 0) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	wc->fd = fd;
	wc->tls = NULL;
	if (strncmp(addr, "https://", 8) == 0) {
		/* A blocking socket: the handshake ends, or times out. */
		int rc = -2;
		err[0] = '\0';
		if ((wc->tls = tls_new(fd, host, err, errlen)) != NULL &&
		    (rc = tls_handshake(wc->tls, err, errlen)) != 0) {
			if (rc == TLS_LOST || rc == TLS_WANT_READ ||
			    rc == TLS_WANT_WRITE)
				rc = -1; /* broken, or timed out: again */
			else
				rc = -2;
		}
		if (rc != 0) {
			tls_free(wc->tls);
			close(fd);
			wc->fd = -1;
			wc->tls = NULL;
			return rc;
		}
	}
	return 0;
}

void
dataread_conn_close(struct wconn *wc)
{
	tls_free(wc->tls);
	if (wc->fd >= 0)
		close(wc->fd);
	wc->fd = -1;
	wc->tls = NULL;
}

/* Sends all n bytes of p on wc: 0, or -1. */
static int
conn_send(struct wconn *wc, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = wc->tls != NULL ? tls_send(wc->tls, p, n) :
		                              send(wc->fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && wc->tls == NULL && errno == EINTR)
			continue;
		if (w <= 0)
			return -1; /* broken, or its timeout */
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Receives up to n bytes into p (all of them with all): the count, 0 at
 * the end, or -1 (broken, or its timeout). */
static ssize_t
conn_recv(struct wconn *wc, char *p, size_t n, int all)
{
	size_t got = 0;

	do {
		ssize_t r = wc->tls != NULL ?
		    tls_recv(wc->tls, p + got, n - got) :
		    recv(wc->fd, p + got, n - got, all ? MSG_WAITALL : 0);
		if (r < 0 && wc->tls == NULL && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			return (ssize_t)got;
		got += (size_t)r;
	} while (all && got < n);
	return (ssize_t)got;
}

/* A request on wc, showing the job's secret to the worker. */
int
dataread_send_get(struct wconn *wc, const char *path, const char *addr,
    const char *secret)
{
	char req[640];
	int n = snprintf(req, sizeof(req),
	    "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n",
	    path, addr, secret);

	if (n < 0 || (size_t)n >= sizeof(req))
		return -1;
	return conn_send(wc, req, (size_t)n);
}

/*
 * Receives one reply into *buf (grown to fit; at least want bytes, so
 * that the first read may take a whole reply). 0, or -1 when the
 * connection broke, timed out or carried something else than a reply.
 */
int
dataread_recv_reply(struct wconn *wc, char **buf, size_t *cap, size_t want,
    struct reply *rp)
{
	size_t have = 0, head = 0;
	struct http1_reply h;

	if (vec_grow(buf, cap, want, 1) < 0)
		return -1;
	while (head == 0) {
		ssize_t n = conn_recv(wc, *buf + have, *cap - have, 0);
		if (n <= 0)
			return -1;
		have += (size_t)n;
		head = http1_head_len(*buf, have);
		if (head == 0 && have > MAX_HEAD)
			return -1;
	}
	/* A worker's reply says how long it is. */
	if (head > MAX_HEAD || http1_parse_reply(*buf, head, &h) < 0 ||
	    h.length < 0 || (unsigned long long)h.length > MAX_REPLY ||
	    have > head + (size_t)h.length ||
	    vec_grow(buf, cap, head + (size_t)h.length, 1) < 0)
		return -1;
	while (have < head + (size_t)h.length) {
		ssize_t n = conn_recv(wc, *buf + have,
		    head + (size_t)h.length - have, 1);
		if (n <= 0)
			return -1;
		have += (size_t)n;
	}
	rp->code = h.code;
	rp->close = h.close;
	rp->body = *buf + head;
	rp->len = (size_t)h.length;
	return 0;
}

/* The message of an error reply's JSON body, or a stand-in. */
const char *
dataread_reply_message(const struct reply *rp)
{
	static __thread char msg[512];
	json_t *o = json_loadb(rp->body, rp->len, 0, NULL);
	const char *m = json_string_value(
	    json_object_get(json_object_get(o, "error"), "message"));

	snprintf(msg, sizeof(msg), "%s", m != NULL ? m : "refused");
	json_decref(o);
	return msg;
}
