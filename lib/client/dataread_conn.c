/*
 * dataread_conn.c: a consumer's connections to workers, on sockets of our
 * own rather than http_client: a reply is received once into a buffer
 * kept for the task, and its payloads go out in one writev, with no
 * per-element work between; or, on a plain connection, its payloads are
 * moved into the task's stage without a copy (dataread_stage.c). Its
 * requests, replies and the chunks of a reply's body.
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
/* A staged reply's first read: its head, and little of its body. */
#define HEAD_READ 4096
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
 * Reads until buf (of cap bytes) holds a reply's head, and parses it into
 * h: *have bytes read, the head's *head. A worker's reply says how long it
 * is, and the bytes read are not past its end. 0, or -1.
 */
static int
recv_head(struct wconn *wc, char *buf, size_t cap, size_t *have, size_t *head,
    struct http1_reply *h)
{
	while (*head == 0) {
		ssize_t n = conn_recv(wc, buf + *have,
		    (*have < cap ? cap : MAX_HEAD + 1) - *have, 0);
		if (n <= 0)
			return -1;
		*have += (size_t)n;
		*head = http1_head_len(buf, *have);
		if (*head == 0 && *have > MAX_HEAD)
			return -1;
	}
	return *head > MAX_HEAD || http1_parse_reply(buf, *head, h) < 0 ||
	        h->length < 0 || (unsigned long long)h->length > MAX_REPLY ||
	        *have > *head + (size_t)h->length ?
	    -1 :
	    0;
}

/* The reply of head h, its body at body (NULL: staged). */
static void
set_reply(struct reply *rp, const struct http1_reply *h, const char *body)
{
	rp->code = h->code;
	rp->close = h->close;
	rp->body = body;
	rp->len = (size_t)h->length;
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

	if (vec_grow(buf, cap, want, 1) < 0 ||
	    recv_head(wc, *buf, *cap, &have, &head, &h) < 0 ||
	    vec_grow(buf, cap, head + (size_t)h.length, 1) < 0)
		return -1;
	while (have < head + (size_t)h.length) {
		ssize_t n = conn_recv(wc, *buf + have,
		    head + (size_t)h.length - have, 1);
		if (n <= 0)
			return -1;
		have += (size_t)n;
	}
	set_reply(rp, &h, *buf + head);
	return 0;
}

/*
 * A staged reply's body as it is received: bytes read with its head
 * (the prefix, at pre .. end in the buffer), then the socket's; what goes
 * to memory is added at used.
 */
struct body {
	struct wconn *wc;
	char **buf;
	size_t *cap;
	size_t pre, end, used;
	size_t left; /* of the body */
};

/* The next n bytes of the body into the buffer at used (the prefix's
 * first): their offset, or -1. */
static ssize_t
body_mem(struct body *b, size_t n)
{
	size_t at = b->used, k;

	if (n > b->left)
		return -1;
	if (b->end - b->pre >= n) { /* read with the head already */
		b->pre += n;
		b->left -= n;
		return (ssize_t)(b->pre - n);
	}
	if (vec_grow(b->buf, b->cap, b->used + n, 1) < 0)
		return -1;
	k = b->end - b->pre;
	memmove(*b->buf + at, *b->buf + b->pre, k);
	b->pre += k;
	if (k < n &&
	    conn_recv(b->wc, *b->buf + at + k, n - k, 1) != (ssize_t)(n - k))
		return -1;
	b->used += n;
	b->left -= n;
	return (ssize_t)at;
}

static int
add_piece(struct piece **pc, size_t *npc, size_t *cappc, struct piece p)
{
	if (*npc > 0 && p.staged && (*pc)[*npc - 1].staged &&
	    (*pc)[*npc - 1].chunk == p.chunk) {
		(*pc)[*npc - 1].len += p.len;
		return 0;
	}
	if (vec_grow(pc, cappc, *npc + 1, sizeof(**pc)) < 0)
		return -1;
	(*pc)[(*npc)++] = p;
	return 0;
}

/* Chunk c's payload of n bytes: the prefix's part, then the stage's,
 * then memory for what the stage does not take. 0, or -1. */
static int
body_payload(struct body *b, struct stage *st, size_t c, size_t n,
    struct piece **pc, size_t *npc, size_t *cappc)
{
	size_t k = b->end - b->pre < n ? b->end - b->pre : n;
	ssize_t at, got;

	if (k > 0) {
		if ((at = body_mem(b, k)) < 0 ||
		    add_piece(pc, npc, cappc,
		        (struct piece){(size_t)at, k, c, 0, 0}) < 0)
			return -1;
		n -= k;
	}
	if (n > 0 && (got = dataread_stage_fill(st, b->wc->fd, n)) != 0) {
		if (got < 0 ||
		    add_piece(pc, npc, cappc,
		        (struct piece){0, (size_t)got, c, 1, 0}) < 0)
			return -1;
		n -= (size_t)got;
		b->left -= (size_t)got;
	}
	if (n > 0 &&
	    ((at = body_mem(b, n)) < 0 ||
	        add_piece(pc, npc, cappc,
	            (struct piece){(size_t)at, n, c, 0, 0}) < 0))
		return -1;
	return 0;
}

int
dataread_recv_staged(struct wconn *wc, char **buf, size_t *cap,
    struct stage *st, struct piece **pc, size_t *npc, size_t *cappc,
    struct reply *rp)
{
	struct body b = {.wc = wc, .buf = buf, .cap = cap};
	size_t head = 0, have = 0, c = 0;
	struct http1_reply h;
	int rc = -1;

	*npc = 0;
	/* The head in a first read that takes little of the body with it:
	 * what it takes goes through memory. */
	if (vec_grow(buf, cap, MAX_HEAD + 1, 1) < 0 ||
	    recv_head(wc, *buf, HEAD_READ, &have, &head, &h) < 0)
		return -1;
	b.pre = head;
	b.end = b.used = have;
	b.left = (size_t)h.length;
	if (h.code != 200) { /* a refusal's message, not chunks */
		ssize_t at = body_mem(&b, b.left);
		if (at < 0)
			goto fail;
		set_reply(rp, &h, *buf + at);
		return 0;
	}
	while (b.left > 0) {
		struct chunk_hdr ch;
		ssize_t at = body_mem(&b, sizeof(ch));
		if (at < 0)
			goto fail;
		if (dw_chunk_head(*buf + at, b.left, &ch) < 0) {
			rc = -2;
			goto fail;
		}
		if (add_piece(pc, npc, cappc,
		        (struct piece){(size_t)at, sizeof(ch), c, 0, 1}) < 0)
			goto fail;
		/* Only data goes through the stage: a message is read. */
		if (ch.len > 0 && ch.type == CHUNK_DATA) {
			if (body_payload(&b, st, c, ch.len, pc, npc, cappc) < 0)
				goto fail;
		} else if (ch.len > 0) {
			if ((at = body_mem(&b, ch.len)) < 0 ||
			    add_piece(pc, npc, cappc,
			        (struct piece){(size_t)at, ch.len, c, 0, 0}) <
			        0)
				goto fail;
		}
		c++;
	}
	set_reply(rp, &h, NULL);
	return 0;
fail:
	dataread_stage_reset(st);
	*npc = 0;
	return rc;
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
