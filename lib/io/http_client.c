#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "duration.h"
#include "http1.h"
#include "http_client.h"
#include "iov.h"
#include "log.h"
#include "tls.h"

/* The largest header block a reply may have. */
#define MAX_HEAD (64 * 1024)

/* One address of a server's: a daemon's replicas have several. */
struct endpoint {
	char host[256];
	char port[12];
	char addr[280];
};

#define MAX_ENDPOINTS 16

struct http_client {
	/* The endpoint calls go to now (a copy of eps[cur]). */
	char host[256];
	char port[12];
	char addr[280];
	struct endpoint eps[MAX_ENDPOINTS];
	size_t neps, cur;
	char leader[280];   /* a standby's word on where its leader is */
	int fd;             /* the kept-alive connection, or -1 */
	int https;          /* the address began with https:// */
	struct tls *tls;    /* fd's TLS session, when https */
	int cancel_fd;      /* readable: give up, or -1 */
	struct buf in;      /* bytes read and not yet used */
	struct buf headers; /* extra request headers */
	size_t max_reply;   /* the largest reply body taken */
	unsigned seed;
	int retry;  /* calls retry (0: one attempt) */
	int unsent; /* the last attempt could not connect: nothing went out */
	int fresh;  /* fd, opened by http_client_reach, carried no request */
	const struct tls_cred *cred; /* its own TLS credentials, or NULL */
};

/* Why one attempt failed, which decides whether it is tried again. */
enum fail {
	F_NONE,
	F_CONNECT, /* never connected: always safe to retry */
	F_STALE,   /* a reused connection died before any reply byte */
	F_BROKEN,  /* the connection broke after the request went out */
	F_TIMEOUT,
	F_PROTOCOL,
	F_CANCELLED,
};

struct http_client *
http_client_new(const char *addr, int defport, char *err, size_t errlen)
{
	return http_client_new_tls(addr, defport, NULL, err, errlen);
}

/*
 * Reads one address (HOST:PORT, [V6]:PORT or HOST, after an optional
 * scheme) into ep; *https says whether it is https://: 0, or -1 (err).
 */
static int
parse_endpoint(const char *addr, size_t alen, int defport, struct endpoint *ep,
    int *https, char *err, size_t errlen)
{
	char one[300];
	const char *host, *port = NULL;
	size_t hlen;
	char *end;
	long p = defport;

	if (alen >= sizeof(one)) {
		snprintf(err, errlen, "address %.40s... is too long", addr);
		return -1;
	}
	memcpy(one, addr, alen);
	one[alen] = '\0';
	addr = one;
	*https = 0;
	if (strncasecmp(addr, "https://", 8) == 0) {
		*https = 1;
		addr += 8;
	} else if (strncasecmp(addr, "http://", 7) == 0) {
		addr += 7;
	}
	host = addr;
	if (addr[0] == '[') {
		const char *rb = strchr(addr, ']');
		if (rb == NULL || (rb[1] != ':' && rb[1] != '\0')) {
			snprintf(err, errlen, "bad address %s (want HOST:PORT)",
			    addr);
			return -1;
		}
		host = addr + 1;
		hlen = (size_t)(rb - host);
		if (rb[1] == ':')
			port = rb + 2;
	} else {
		const char *colon = strchr(addr, ':');
		if (colon != NULL && strchr(colon + 1, ':') != NULL)
			hlen = 0; /* a bare IPv6 address needs brackets */
		else
			hlen = colon != NULL ? (size_t)(colon - addr) :
			                       strlen(addr);
		if (colon != NULL)
			port = colon + 1;
	}
	if (port != NULL) {
		p = strtol(port, &end, 10);
		if (*port == '\0' || *end != '\0' || p <= 0 || p > 65535)
			hlen = 0;
	}
	if (hlen == 0 || hlen >= sizeof(ep->host)) {
		snprintf(err, errlen, "bad address %s (want HOST:PORT)", addr);
		return -1;
	}
	memcpy(ep->host, host, hlen);
	ep->host[hlen] = '\0';
	snprintf(ep->port, sizeof(ep->port), "%ld", p);
	snprintf(ep->addr, sizeof(ep->addr),
	    addr[0] == '[' ? "[%s]:%ld" : "%s:%ld", ep->host, p);
	return 0;
}

/* Calls go to endpoint i from now. */
static void disconnect(struct http_client *c);

static void
use_endpoint(struct http_client *c, size_t i)
{
	if (c->fd >= 0 && i != c->cur)
		disconnect(c);
	c->cur = i;
	memcpy(c->host, c->eps[i].host, sizeof(c->host));
	memcpy(c->port, c->eps[i].port, sizeof(c->port));
	memcpy(c->addr, c->eps[i].addr, sizeof(c->addr));
}

struct http_client *
http_client_new_tls(const char *addr, int defport, const struct tls_cred *cred,
    char *err, size_t errlen)
{
	struct http_client *c;
	int https = -1;

	if (addr == NULL || *addr == '\0') {
		snprintf(err, errlen, "empty address");
		return NULL;
	}
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	for (const char *p = addr;;) {
		size_t n = strcspn(p, ",");
		int h;

		if (c->neps == MAX_ENDPOINTS) {
			snprintf(err, errlen, "%s: more than %d addresses",
			    addr, MAX_ENDPOINTS);
			goto fail;
		}
		if (parse_endpoint(p, n, defport, &c->eps[c->neps], &h, err,
		        errlen) < 0)
			goto fail;
		if (https >= 0 && h != https) {
			snprintf(err, errlen,
			    "%s: the addresses mix http:// and https://", addr);
			goto fail;
		}
		https = h;
		c->neps++;
		if (p[n] == '\0')
			break;
		p += n + 1;
	}
	/* Fails now, not at each attempt, on a bad TLS setting; credentials
	 * of its own were loaded when they were made. */
	if (https && cred == NULL && tls_client_init(err, errlen) < 0)
		goto fail;
	use_endpoint(c, 0);
	c->fd = -1;
	c->https = https;
	c->cancel_fd = -1;
	c->max_reply = HTTP_MAX_REPLY_DEFAULT;
	c->retry = 1;
	c->cred = cred;
	c->seed = (unsigned)getpid() ^ (unsigned)duration_now_ms();
	return c;
fail:
	free(c);
	return NULL;
}

/*
 * After a failed attempt or a standby's answer: the next endpoint, or
 * the leader the standby named (added when it is not one of them). 1 when
 * it moved to one not tried since the last pause, 0 when a round is done.
 */
static int
next_endpoint(struct http_client *c, size_t *tried)
{
	struct endpoint ep;
	size_t i = c->neps;
	int h;

	/* The leader a standby named: one of the addresses, or one more. */
	if (c->leader[0] != '\0' &&
	    parse_endpoint(c->leader, strlen(c->leader), 0, &ep, &h, NULL, 0) ==
	        0 &&
	    h == c->https) {
		for (i = 0; i < c->neps; i++)
			if (strcmp(c->eps[i].addr, ep.addr) == 0)
				break;
		if (i == c->neps && c->neps < MAX_ENDPOINTS)
			c->eps[c->neps++] = ep;
	}
	c->leader[0] = '\0';
	if (i < c->neps && i != c->cur) {
		use_endpoint(c, i);
		return 1;
	}
	if (c->neps < 2)
		return 0;
	use_endpoint(c, (c->cur + 1) % c->neps);
	return ++*tried < c->neps;
}

static void
disconnect(struct http_client *c)
{
	tls_free(c->tls);
	c->tls = NULL;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	buf_reset(&c->in);
}

void
http_client_free(struct http_client *c)
{
	if (c == NULL)
		return;
	disconnect(c);
	buf_free(&c->in);
	buf_free(&c->headers);
	free(c);
}

const char *
http_client_addr(const struct http_client *c)
{
	return c->addr;
}

int
http_client_https(const struct http_client *c)
{
	return c->https;
}

int
http_client_sockaddr(const struct http_client *c, struct sockaddr_storage *ss,
    socklen_t *len, char *err, size_t errlen)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
	    .ai_flags = AI_ADDRCONFIG};
	struct addrinfo *res;
	int rc;

	if ((rc = getaddrinfo(c->host, c->port, &hints, &res)) != 0) {
		snprintf(err, errlen, "cannot resolve %s: %s", c->host,
		    gai_strerror(rc));
		return -1;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

void
http_client_set_cancel(struct http_client *c, int fd)
{
	c->cancel_fd = fd;
}

void
http_client_set_max_reply(struct http_client *c, size_t bytes)
{
	c->max_reply = bytes;
}

void
http_client_set_retry(struct http_client *c, int retry)
{
	c->retry = retry;
}

const char *
http_client_headers(const struct http_client *c)
{
	return c->headers.data != NULL ? c->headers.data : "";
}

int
http_client_add_header(struct http_client *c, const char *header)
{
	return buf_printf(&c->headers, "%s\r\n", header);
}

void
http_resp_free(struct http_resp *resp)
{
	buf_free(&resp->body);
}

/* Milliseconds left before at, for poll(); -1 for no deadline. */
static int
left_ms(int64_t at)
{
	int64_t left;

	if (at == HTTP_NO_DEADLINE)
		return -1;
	left = at - duration_now_ms();
	if (left <= 0)
		return 0;
	return left > 1000000000 ? 1000000000 : (int)left;
}

/*
 * Waits until fd (-1: none) is ready for events; 0, -1 when at passes, -2
 * when the client is cancelled.
 */
static int
wait_fd(const struct http_client *c, int fd, short events, int64_t at)
{
	struct pollfd p[2] = {{.fd = fd, .events = events},
	    {.fd = c->cancel_fd, .events = POLLIN}};

	for (;;) {
		int n = poll(p, 2, left_ms(at));
		if (n > 0 && (p[1].revents & (POLLIN | POLLHUP)) != 0)
			return -2;
		if (n > 0)
			return 0;
		if (n == 0)
			return -1;
		if (errno != EINTR)
			return 0; /* let the read or write report it */
	}
}

/* The TLS handshake on the fresh connection c->fd. */
static enum fail
start_tls(struct http_client *c, int64_t at, char *err, size_t errlen)
{
	char why[512];
	int rc;

	c->tls = c->cred != NULL ?
	    tls_new_cred(c->fd, c->host, c->cred, why, sizeof(why)) :
	    tls_new(c->fd, c->host, why, sizeof(why));
	if (c->tls == NULL) {
		snprintf(err, errlen, "%s", why);
		disconnect(c);
		return F_PROTOCOL;
	}
	while ((rc = tls_handshake(c->tls, why, sizeof(why))) != 0) {
		if (rc == TLS_WANT_READ || rc == TLS_WANT_WRITE) {
			rc = wait_fd(c, c->fd,
			    rc == TLS_WANT_READ ? POLLIN : POLLOUT, at);
			if (rc == 0)
				continue;
			disconnect(c);
			snprintf(err, errlen,
			    rc == -2 ?
			        "cancelled" :
			        "cannot reach %s: TLS handshake timed out",
			    c->addr);
			return rc == -2 ? F_CANCELLED : F_TIMEOUT;
		}
		disconnect(c);
		snprintf(err, errlen, "%s: %s", c->addr, why);
		/* A server restarting drops connections: try again then. */
		return rc == TLS_LOST ? F_CONNECT : F_PROTOCOL;
	}
	return F_NONE;
}

static enum fail
open_conn(struct http_client *c, int64_t at, char *err, size_t errlen)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
	    .ai_flags = AI_ADDRCONFIG};
	struct addrinfo *res, *ai;
	int rc, saved = ECONNREFUSED;

	if ((rc = getaddrinfo(c->host, c->port, &hints, &res)) != 0) {
		snprintf(err, errlen, "cannot resolve %s: %s", c->host,
		    gai_strerror(rc));
		return F_CONNECT;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		int fd = socket(ai->ai_family,
		    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    ai->ai_protocol);
		int one = 1, soerr = 0;
		socklen_t sl = sizeof(soerr);

		if (fd < 0) {
			saved = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 &&
		    errno != EINPROGRESS) {
			saved = errno;
			close(fd);
			continue;
		}
		if ((rc = wait_fd(c, fd, POLLOUT, at)) < 0) {
			close(fd);
			freeaddrinfo(res);
			snprintf(err, errlen,
			    rc == -2 ? "cancelled" :
			               "cannot reach %s: connection timed out",
			    c->addr);
			return rc == -2 ? F_CANCELLED : F_TIMEOUT;
		}
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
		if (soerr != 0) {
			saved = soerr;
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		freeaddrinfo(res);
		return c->https ? start_tls(c, at, err, errlen) : F_NONE;
	}
	freeaddrinfo(res);
	snprintf(err, errlen, "cannot reach %s: %s", c->addr, strerror(saved));
	return saved == ETIMEDOUT ? F_TIMEOUT : F_CONNECT;
}

static enum fail
send_all(struct http_client *c, struct iovec *iov, int n, int64_t at)
{
	while (n > 0) {
		ssize_t w;
		short ev = POLLOUT;

		if (c->tls != NULL) {
			w = tls_send(c->tls, iov->iov_base, iov->iov_len);
			if (w == TLS_WANT_READ || w == TLS_WANT_WRITE) {
				ev = w == TLS_WANT_READ ? POLLIN : POLLOUT;
				w = -1;
				errno = EAGAIN;
			}
		} else {
			w = writev(c->fd, iov, n);
		}
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				int rc = wait_fd(c, c->fd, ev, at);
				if (rc < 0)
					return rc == -2 ? F_CANCELLED :
					                  F_TIMEOUT;
				continue;
			}
			return F_STALE;
		}
		n = (int)iov_advance(&iov, (size_t)n, (size_t)w);
	}
	return F_NONE;
}

/*
 * Reads more bytes into c->in; 1 on data, 0 on EOF, -1 on error, timeout
 * (*timed_out 1) or cancel (*timed_out 2).
 */
static int
fill(struct http_client *c, int64_t at, int *timed_out)
{
	for (;;) {
		ssize_t r;

		short ev = POLLIN;

		if (buf_reserve(&c->in, 16384) < 0)
			return -1;
		if (c->tls != NULL) {
			r = tls_recv(c->tls, c->in.data + c->in.len,
			    c->in.cap - c->in.len - 1);
			if (r == TLS_WANT_READ || r == TLS_WANT_WRITE) {
				ev = r == TLS_WANT_READ ? POLLIN : POLLOUT;
				r = -1;
				errno = EAGAIN;
			}
		} else {
			r = read(c->fd, c->in.data + c->in.len,
			    c->in.cap - c->in.len - 1);
		}
		if (r > 0) {
			c->in.len += (size_t)r;
			c->in.data[c->in.len] = '\0';
			return 1;
		}
		if (r == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -1;
		if ((r = wait_fd(c, c->fd, ev, at)) < 0) {
			*timed_out = r == -2 ? 2 : 1;
			return -1;
		}
	}
}

static void
consume(struct buf *b, size_t n)
{
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
	b->data[b->len] = '\0';
}

/* Reads a reply's head into resp and h, and takes it off c->in. */
static enum fail
read_head(struct http_client *c, int64_t at, struct http_resp *resp,
    struct http1_reply *h, char *err, size_t errlen)
{
	size_t headlen, n;
	const char *v;
	int timed_out = 0, got_any = 0, r;

	while ((headlen = http1_head_len(c->in.data != NULL ? c->in.data : "",
	            c->in.len)) == 0) {
		if (c->in.len > MAX_HEAD) {
			snprintf(err, errlen,
			    "%s sent an oversized reply header", c->addr);
			return F_PROTOCOL;
		}
		r = fill(c, at, &timed_out);
		if (r <= 0) {
			if (timed_out)
				return timed_out == 2 ? F_CANCELLED : F_TIMEOUT;
			snprintf(err, errlen, "%s closed the connection",
			    c->addr);
			return got_any || c->in.len > 0 ? F_BROKEN : F_STALE;
		}
		got_any = 1;
	}
	if (http1_parse_reply(c->in.data, headlen, h) < 0) {
		snprintf(err, errlen, "%s sent a malformed reply", c->addr);
		return F_PROTOCOL;
	}
	resp->code = h->code;
	if ((v = http1_header(c->in.data, headlen, "X-Muster-Revision", &n)) !=
	    NULL) {
		char num[24];
		snprintf(num, sizeof(num), "%.*s", (int)(n < 23 ? n : 23), v);
		resp->revision = strtoll(num, NULL, 10);
	}
	if (http1_header(c->in.data, headlen, "Retry-After", &n) != NULL)
		resp->retry_after = 1;
	if (http1_header(c->in.data, headlen, "X-Muster-Standby", &n) != NULL)
		resp->standby = 1;
	if ((v = http1_header(c->in.data, headlen, "X-Muster-Leader", &n)) !=
	        NULL &&
	    n < sizeof(c->leader)) {
		memcpy(c->leader, v, n);
		c->leader[n] = '\0';
	}
	consume(&c->in, headlen);
	return F_NONE;
}

/*
 * Where a body's bytes go as they arrive: a reply's buffer (whole replies)
 * or a stream's reader. take returns 0 to go on, 1 when the reader wants
 * no more, -1 when the bytes are over a limit (err says which).
 */
struct sink {
	int (*take)(struct sink *s, const char *p, size_t n, char *err,
	    size_t errlen);
	struct http_client *c;
	struct http_resp *resp; /* a whole reply's */
	http_stream_fn fn;      /* a stream's reader */
	void *arg;
	int64_t silence_ms; /* 0, or the longest wait for the next byte */
	int stopped;        /* take returned 1 */
};

static int
take_reply(struct sink *s, const char *p, size_t n, char *err, size_t errlen)
{
	if (s->resp->body.len + n > s->c->max_reply) {
		snprintf(err, errlen,
		    "%s sent a reply over the limit of %zu bytes", s->c->addr,
		    s->c->max_reply);
		return -1;
	}
	if (buf_append(&s->resp->body, p, n) < 0) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

static int
take_stream(struct sink *s, const char *p, size_t n, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	return s->fn(s->arg, p, n) != 0;
}

/* Hands the first n bytes of c->in to s and takes them off. */
static int
pass(struct sink *s, size_t n, char *err, size_t errlen)
{
	int rc = s->take(s, s->c->in.data, n, err, errlen);

	consume(&s->c->in, n);
	if (rc > 0)
		s->stopped = 1;
	return rc;
}

/*
 * fill, for a body: a stream waits no longer for a byte than its silence
 * allows, and its deadline holds while bytes keep coming (fill looks at
 * the clock only when none are there).
 */
static int
fill_body(struct http_client *c, int64_t at, const struct sink *s,
    int *timed_out)
{
	int64_t now;

	if (s->fn == NULL)
		return fill(c, at, timed_out);
	if ((now = duration_now_ms()) >= at) {
		*timed_out = 1;
		return -1;
	}
	return fill(c,
	    s->silence_ms > 0 && now + s->silence_ms < at ?
	        now + s->silence_ms :
	        at,
	    timed_out);
}

/*
 * Reads a body into s as it arrives. Content-Length, chunked and
 * read-to-close bodies are understood; anything else is a protocol error.
 * *keep says whether the connection may carry another request.
 */
static enum fail
read_body(struct http_client *c, int64_t at, const struct http1_reply *h,
    struct sink *s, int *keep, char *err, size_t errlen)
{
	long long clen = h->length;
	int timed_out = 0, r = 0, rc;

	*keep = !h->close;
	if (h->chunked) {
		for (;;) {
			char *nl, *end;
			unsigned long long n;
			while (
			    (nl = strstr(c->in.data != NULL ? c->in.data : "",
			         "\r\n")) == NULL) {
				if (c->in.len > MAX_HEAD)
					goto bad_chunk;
				if ((r = fill_body(c, at, s, &timed_out)) <= 0)
					goto broken;
			}
			n = strtoull(c->in.data, &end, 16);
			/* Untrusted servers too (a metadata URL). */
			if (end == c->in.data ||
			    (*end != '\r' && *end != ';') || n > (1ULL << 30))
				goto bad_chunk;
			consume(&c->in, (size_t)(nl - c->in.data) + 2);
			if (n == 0) {
				/* Trailers, if any, end with an empty line. */
				char *eot;
				while ((eot = c->in.len >= 2 &&
				                   memcmp(c->in.data, "\r\n",
				                       2) == 0 ?
				               c->in.data :
				               strstr(c->in.data,
				                   "\r\n\r\n")) == NULL) {
					if (c->in.len > MAX_HEAD ||
					    (r = fill_body(c, at, s,
					         &timed_out)) <= 0)
						goto broken;
				}
				consume(&c->in,
				    (size_t)(eot - c->in.data) +
				        (eot == c->in.data ? 2 : 4));
				return F_NONE;
			}
			while (n > 0) {
				size_t k;
				while (c->in.len == 0)
					if ((r = fill_body(c, at, s,
					         &timed_out)) <= 0)
						goto broken;
				k = c->in.len < n ? c->in.len : (size_t)n;
				if ((rc = pass(s, k, err, errlen)) != 0)
					goto stop;
				n -= k;
			}
			while (c->in.len < 2)
				if ((r = fill_body(c, at, s, &timed_out)) <= 0)
					goto broken;
			consume(&c->in, 2);
		}
	}
	if (clen < 0 && h->code != 204 && h->code != 304) {
		/* The body runs to the end of the connection. */
		*keep = 0;
		do {
			if (c->in.len > 0 &&
			    (rc = pass(s, c->in.len, err, errlen)) != 0)
				goto stop;
		} while ((r = fill_body(c, at, s, &timed_out)) > 0);
		if (r < 0)
			goto broken;
		return F_NONE;
	}
	if (clen < 0)
		clen = 0;
	if ((unsigned long long)clen > c->max_reply) {
		snprintf(err, errlen,
		    "%s sent a reply over the limit of %zu bytes", c->addr,
		    c->max_reply);
		return F_PROTOCOL;
	}
	while (clen > 0) {
		size_t k;
		while (c->in.len == 0)
			if ((r = fill_body(c, at, s, &timed_out)) <= 0)
				goto broken;
		k = c->in.len < (size_t)clen ? c->in.len : (size_t)clen;
		if ((rc = pass(s, k, err, errlen)) != 0)
			goto stop;
		clen -= (long long)k;
	}
	return F_NONE;
stop:
	/* The rest of the body is left unread: the connection cannot carry
	 * another request. */
	*keep = 0;
	return rc < 0 ? F_PROTOCOL : F_NONE;
broken:
	if (timed_out)
		return timed_out == 2 ? F_CANCELLED : F_TIMEOUT;
	snprintf(err, errlen, "%s closed the connection mid-reply", c->addr);
	return F_BROKEN;
bad_chunk:
	snprintf(err, errlen, "%s sent a bad chunk", c->addr);
	return F_PROTOCOL;
}

/* Reads one whole reply into resp. */
static enum fail
read_reply(struct http_client *c, int64_t at, struct http_resp *resp, int *keep,
    char *err, size_t errlen)
{
	struct sink s = {.take = take_reply, .c = c, .resp = resp};
	struct http1_reply h;
	enum fail f;

	*keep = 1;
	if ((f = read_head(c, at, resp, &h, err, errlen)) != F_NONE ||
	    (f = read_body(c, at, &h, &s, keep, err, errlen)) != F_NONE)
		return f;
	/* A body with a length is there, if empty, as callers expect. */
	if (!h.chunked && buf_append(&resp->body, "", 0) < 0) {
		snprintf(err, errlen, "out of memory");
		return F_PROTOCOL;
	}
	return F_NONE;
}

/*
 * Whether the server has let the kept-alive connection go while it was
 * idle: it ended it (a TLS close_notify too), reset it, or sent bytes no
 * request asked for. A request not yet written to it cannot reach the
 * server then.
 */
static int
idle_closed(struct http_client *c)
{
	char b;
	int timed_out = 0;
	ssize_t r = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);

	if (r < 0)
		return errno != EAGAIN && errno != EWOULDBLOCK;
	if (r == 0 || c->tls == NULL)
		return 1;
	/* A record that is not data (a session ticket) leaves it open. */
	return fill(c, duration_now_ms(), &timed_out) >= 0 || timed_out == 0;
}

/*
 * Connects if need be and sends one request; *reused says whether the
 * connection had carried one before. A client of one attempt first
 * replaces a connection the server closed while it was idle, so that
 * only a request that may have reached the server is left in doubt.
 */
static enum fail
send_request(struct http_client *c, const char *method, const char *path,
    const void *body, size_t len, const char *ctype, int64_t at, int *reused,
    char *err, size_t errlen)
{
	struct buf head = {0};
	struct iovec iov[2];
	enum fail f;

	if (c->fd >= 0 && !c->fresh && !c->retry && idle_closed(c))
		disconnect(c);
	*reused = c->fd >= 0 && !c->fresh;
	c->fresh = 0;
	c->unsent = c->fd < 0 && (f = open_conn(c, at, err, errlen)) != F_NONE;
	if (c->unsent)
		return f;
	if (buf_printf(&head,
	        "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %zu\r\n", method,
	        path, c->addr, len) < 0 ||
	    (ctype != NULL &&
	        buf_printf(&head, "Content-Type: %s\r\n", ctype) < 0) ||
	    (c->headers.len > 0 &&
	        buf_append(&head, c->headers.data, c->headers.len) < 0) ||
	    buf_puts(&head, "\r\n") < 0) {
		buf_free(&head);
		snprintf(err, errlen, "out of memory");
		return F_PROTOCOL;
	}
	iov[0].iov_base = head.data;
	iov[0].iov_len = head.len;
	iov[1].iov_base = (void *)body;
	iov[1].iov_len = len;
	f = send_all(c, iov, len > 0 ? 2 : 1, at);
	buf_free(&head);
	return f;
}

enum status
http_client_reach(struct http_client *c, int64_t at, char *err, size_t errlen)
{
	enum fail f;

	if (c->fd >= 0)
		return ST_OK;
	f = open_conn(c, at, err, errlen);
	/* A daemon's replicas: any of them will do (it names its leader). */
	for (size_t i = 1; i < c->neps && f == F_CONNECT; i++) {
		use_endpoint(c, (c->cur + 1) % c->neps);
		f = open_conn(c, at, err, errlen);
	}
	c->fresh = f == F_NONE;
	if (f == F_CANCELLED)
		return ST_CANCELLED;
	/* A handshake the server refused came from the server all the same:
	 * the call that follows says why it cannot be made. */
	return f == F_NONE || f == F_PROTOCOL ? ST_OK : ST_UNAVAILABLE;
}

/* One attempt: connect if needed, send, read the reply. */
static enum fail
attempt(struct http_client *c, const char *method, const char *path,
    const void *body, size_t len, const char *ctype, int64_t at,
    struct http_resp *resp, int *reused, char *err, size_t errlen)
{
	enum fail f;
	int keep = 0;

	f = send_request(c, method, path, body, len, ctype, at, reused, err,
	    errlen);
	if (f == F_STALE && !*reused) {
		/* A fresh connection the server closed mid-request: it may
		 * have refused the body (413) before reading it; read that. */
		f = read_reply(c, at, resp, &keep, err, errlen);
		if (f == F_STALE)
			f = F_BROKEN;
		keep = 0;
	} else if (f == F_STALE) {
		snprintf(err, errlen, "%s closed the connection", c->addr);
	} else if (f == F_NONE) {
		f = read_reply(c, at, resp, &keep, err, errlen);
	}
	/* Bytes past the reply would be taken for the next request's. */
	if (f != F_NONE || !keep || c->in.len > 0)
		disconnect(c);
	return f;
}

/* The error a non-2xx reply carries, from its JSON body when it has one. */
static enum status
reply_status(struct http_resp *resp, char *err, size_t errlen)
{
	json_t *root =
	    json_loadb(resp->body.data != NULL ? resp->body.data : "",
	        resp->body.len, 0, NULL);
	const char *code = NULL, *msg = NULL;
	enum status st;

	if (root != NULL)
		json_unpack(root, "{s:{s?s,s?s}}", "error", "code", &code,
		    "message", &msg);
	if (code != NULL) {
		st = status_from_name(code);
		/* An empty message says nothing: the code does. */
		snprintf(err, errlen, "%s",
		    msg != NULL && msg[0] != '\0' ? msg : code);
		if (err[0] == '\0')
			snprintf(err, errlen, "server replied HTTP %ld",
			    resp->code);
	} else {
		st = status_from_http((int)resp->code);
		snprintf(err, errlen, "server replied HTTP %ld", resp->code);
	}
	json_decref(root);
	return st;
}

enum status
http_client_do(struct http_client *c, const char *method, const char *path,
    const void *body, size_t len, const char *ctype, int64_t deadline,
    int idempotent, struct http_resp *resp, char *err, size_t errlen)
{
	return http_client_poll(c, method, path, body, len, ctype, deadline, 0,
	    idempotent, resp, err, errlen);
}

enum status
http_client_poll(struct http_client *c, const char *method, const char *path,
    const void *body, size_t len, const char *ctype, int64_t deadline,
    int64_t grace_ms, int idempotent, struct http_resp *resp, char *err,
    size_t errlen)
{
	int64_t backoff = 20, reply_at;
	enum status st;
	int sent = 0;     /* an attempt may have reached the server */
	size_t tried = 0; /* endpoints tried since the last pause */

	memset(resp, 0, sizeof(*resp));
	reply_at =
	    deadline == HTTP_NO_DEADLINE ? deadline : deadline + grace_ms;
	for (;;) {
		int reused = 0;
		enum fail f;

		buf_reset(&resp->body);
		resp->code = 0;
		resp->revision = -1;
		resp->retry_after = 0;
		resp->unsent = 0;
		resp->standby = 0;
		if (deadline != HTTP_NO_DEADLINE &&
		    duration_now_ms() >= deadline) {
			snprintf(err, errlen,
			    "deadline passed before %s could be reached",
			    c->addr);
			return ST_DEADLINE_EXCEEDED;
		}
		f = attempt(c, method, path, body, len, ctype, reply_at, resp,
		    &reused, err, errlen);
		sent |= !c->unsent;
		resp->unsent = !sent;
		if (f == F_NONE && resp->standby) {
			/* A standby made no change: any request goes again,
			 * to its leader or the next replica. */
			st = reply_status(resp, err, errlen);
			sent = 0;
			if (!c->retry)
				return st;
			if (next_endpoint(c, &tried))
				continue;
		} else if (f == F_NONE) {
			if (resp->code >= 200 && resp->code < 300)
				return ST_OK;
			st = reply_status(resp, err, errlen);
			if (!(resp->retry_after && idempotent))
				return st;
		} else if (f == F_TIMEOUT) {
			snprintf(err, errlen,
			    "no reply from %s before the deadline", c->addr);
			return ST_DEADLINE_EXCEEDED;
		} else if (f == F_CANCELLED) {
			snprintf(err, errlen, "cancelled");
			return ST_CANCELLED;
		} else if (f == F_STALE && reused && (c->retry || idempotent)) {
			/* The kept-alive connection had died: at once again. */
			continue;
		} else if (f == F_PROTOCOL || (f != F_CONNECT && !idempotent)) {
			return ST_UNAVAILABLE;
		} else {
			st = ST_UNAVAILABLE;
			/* Another replica, at once, while some are untried. */
			if (c->retry && next_endpoint(c, &tried))
				continue;
		}
		if (!c->retry)
			return st;
		tried = 0;
		/* Retry after a jittered, growing pause, within the deadline. */
		log_debug("%s; retrying", err);
		{
			int64_t now = duration_now_ms(),
			        pause = backoff / 2 +
			    (int64_t)(rand_r(&c->seed) %
			        (unsigned)(backoff / 2 + 1));

			if (deadline != HTTP_NO_DEADLINE) {
				if (deadline <= now)
					return st;
				if (now + pause > deadline)
					pause = deadline - now;
			}
			if (wait_fd(c, -1, 0, now + pause) == -2) {
				snprintf(err, errlen, "cancelled");
				return ST_CANCELLED;
			}
			if (backoff < 1000)
				backoff *= 2;
			if (deadline != HTTP_NO_DEADLINE &&
			    duration_now_ms() >= deadline)
				return st;
		}
	}
}

enum status
http_client_stream(struct http_client *c, const char *method, const char *path,
    const void *body, size_t len, const char *ctype, int64_t deadline,
    int64_t silence_ms, http_stream_fn fn, void *arg, struct http_resp *resp,
    char *err, size_t errlen)
{
	struct sink stream = {.take = take_stream,
	    .c = c,
	    .fn = fn,
	    .arg = arg,
	    .silence_ms = silence_ms};
	struct sink whole = {.take = take_reply, .c = c, .resp = resp};
	struct http1_reply h;
	int64_t head_at = deadline;
	enum fail f;
	int keep, reused, tries = 0;

	memset(resp, 0, sizeof(*resp));
	resp->revision = -1;
	if (silence_ms > 0 && duration_now_ms() + silence_ms < deadline)
		head_at = duration_now_ms() + silence_ms;
	do {
		/* A kept-alive connection found dead is replaced at once. */
		f = send_request(c, method, path, body, len, ctype, head_at,
		    &reused, err, errlen);
		if (f == F_NONE)
			f = read_head(c, head_at, resp, &h, err, errlen);
		if (f != F_NONE)
			disconnect(c);
	} while (f == F_STALE && reused && ++tries < 2);
	if (f == F_NONE)
		f = read_body(c, deadline, &h,
		    resp->code >= 200 && resp->code < 300 ? &stream : &whole,
		    &keep, err, errlen);
	/* What is left of a stream is of no use to the next request. */
	disconnect(c);
	switch (f) {
	case F_NONE:
		if (resp->code < 200 || resp->code >= 300)
			return reply_status(resp, err, errlen);
		if (stream.stopped)
			return ST_OK;
		snprintf(err, errlen, "%s ended the stream", c->addr);
		return ST_UNAVAILABLE;
	case F_TIMEOUT:
		if (duration_now_ms() >= deadline)
			snprintf(err, errlen,
			    "no reply from %s before the deadline", c->addr);
		else
			snprintf(err, errlen, "%s sent nothing for %lld ms",
			    c->addr, (long long)silence_ms);
		return ST_DEADLINE_EXCEEDED;
	case F_CANCELLED:
		snprintf(err, errlen, "cancelled");
		return ST_CANCELLED;
	default:
		if (f == F_STALE)
			snprintf(err, errlen, "%s closed the connection",
			    c->addr);
		resp->unsent = c->unsent;
		return ST_UNAVAILABLE;
	}
}
