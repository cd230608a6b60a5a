/*
 * http1.h: the HTTP/1.1 heads muster's hand-written ends read from a peer:
 * a reply's (the daemons' client, a data consumer) and a request's (a
 * worker's data server). Every byte of a head a peer sends is parsed
 * here and nowhere else; the functions are pure (bytes in, fields out),
 * read nothing beyond the length they are given, and are fuzzed
 * (fuzz/fuzz_http1.c). Bodies are the callers': each knows how much it
 * takes and how long it waits for it.
 *
 * A head is the status or request line and the header lines, through the
 * blank line that ends them ("\r\n\r\n"). Lines end with CRLF; obsolete
 * line folding is not a header, and a line without a colon, or with a
 * bare CR or LF in it, is skipped.
 */
#ifndef MUSTER_HTTP1_H
#define MUSTER_HTTP1_H

#include <stddef.h>

/* The length of the head at the start of p[0..n), blank line included;
 * 0 while its end has not come. */
size_t http1_head_len(const char *p, size_t n);

/*
 * Header name's value in head[0..len) (names compare without case; the
 * first of several): a pointer to it and *vlen, with spaces and tabs
 * around it left out; NULL when there is none.
 */
const char *http1_header(const char *head, size_t len, const char *name,
    size_t *vlen);

/* A reply's head. */
struct http1_reply {
	long code;        /* 100..999 */
	long long length; /* Content-Length; -1 when absent */
	int chunked;      /* Transfer-Encoding: chunked */
	int close;        /* Connection: close (the server closes after it) */
};

/* Reads head[0..len): 0, or -1 when its status line is not one, or its
 * Content-Length is not a number. */
int http1_parse_reply(const char *head, size_t len, struct http1_reply *r);

/* A request's head. The strings point into the head, which the parse
 * NUL-terminates where they end (it is written to). */
struct http1_request {
	const char *method; /* a token */
	const char *path;   /* the target up to its '?' */
	const char *query;  /* after the '?', or "" */
	const char *auth;   /* the token of Authorization: Bearer, or NULL */
	size_t auth_len;
	long long length; /* Content-Length; 0 when absent */
	int keep;         /* the connection stays open after the reply */
};

enum http1_verdict {
	HTTP1_OK = 0,
	HTTP1_MALFORMED,  /* not a request line: say nothing, close */
	HTTP1_CHUNKED,    /* a body in chunks (Transfer-Encoding) */
	HTTP1_BAD_LENGTH, /* Content-Length is not a number */
};

/* Reads head[0..len), a head as http1_head_len measured it. */
enum http1_verdict http1_parse_request(char *head, size_t len,
    struct http1_request *r);

#endif
