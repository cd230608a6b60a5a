/*
 * http1.c: HTTP/1.1 heads from a peer (see http1.h). Every scan is bounded
 * by the length given: a head need not be NUL-terminated.
 */
#include <string.h>
#include <strings.h>

#include "http1.h"

size_t
http1_head_len(const char *p, size_t n)
{
	const char *e = memmem(p, n, "\r\n\r\n", 4);

	return e != NULL ? (size_t)(e - p) + 4 : 0;
}

/* The end of the line at p (its CR), or end when it has none. */
static const char *
line_end(const char *p, const char *end)
{
	const char *e = memmem(p, (size_t)(end - p), "\r\n", 2);

	return e != NULL ? e : end;
}

static int
blank(char c)
{
	return c == ' ' || c == '\t';
}

const char *
http1_header(const char *head, size_t len, const char *name, size_t *vlen)
{
	const char *end = head + len, *p = line_end(head, end);
	size_t n = strlen(name);

	/* p is at the CRLF that ends the line before. */
	while (p + 2 < end) {
		const char *e, *v, *colon;
		p += 2;
		e = line_end(p, end);
		if (e == p)
			break; /* the blank line */
		colon = memchr(p, ':', (size_t)(e - p));
		/* A line with a bare CR or LF is no header: a reader that
		 * split lines there would see another one. */
		if (colon != NULL && (size_t)(colon - p) == n &&
		    memchr(p, '\n', (size_t)(e - p)) == NULL &&
		    memchr(p, '\r', (size_t)(e - p)) == NULL &&
		    strncasecmp(p, name, n) == 0) {
			for (v = colon + 1; v < e && blank(*v); v++)
				;
			while (e > v && blank(e[-1]))
				e--;
			*vlen = (size_t)(e - v);
			return v;
		}
		p = e;
	}
	return NULL;
}

/* Whether v[0..n) is the token tok, without regard to case. */
static int
http1_is(const char *v, size_t n, const char *tok)
{
	return strlen(tok) == n && strncasecmp(v, tok, n) == 0;
}

/* A decimal of v[0..n), at most 18 digits: 0 with *out, or -1. */
static int
decimal(const char *v, size_t n, long long *out)
{
	long long x = 0;

	if (n == 0 || n > 18)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -1;
		x = x * 10 + (v[i] - '0');
	}
	*out = x;
	return 0;
}

/* Content-Length into *out (absent: def): 0, or -1 when not a number. */
static int
content_length(const char *head, size_t len, long long def, long long *out)
{
	size_t n;
	const char *v = http1_header(head, len, "Content-Length", &n);

	*out = def;
	return v != NULL ? decimal(v, n, out) : 0;
}

int
http1_parse_reply(const char *head, size_t len, struct http1_reply *r)
{
	const char *end = head + len, *p = head, *v;
	size_t n;

	*r = (struct http1_reply){.length = -1};
	/* HTTP/1.x SP 3DIGIT, then a reason or the line's end. */
	if (len < 7 || memcmp(p, "HTTP/1.", 7) != 0)
		return -1;
	for (p += 7, n = 0; p < end && *p >= '0' && *p <= '9'; p++)
		n++;
	if (n == 0 || p == end || *p++ != ' ' || end - p < 3 || *p < '1' ||
	    *p > '9' || p[1] < '0' || p[1] > '9' || p[2] < '0' || p[2] > '9')
		return -1;
	r->code = (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
	p += 3;
	if (p < end && *p != ' ' && *p != '\r')
		return -1;
	if (content_length(head, len, -1, &r->length) < 0)
		return -1;
	v = http1_header(head, len, "Transfer-Encoding", &n);
	r->chunked = v != NULL && http1_is(v, n, "chunked");
	v = http1_header(head, len, "Connection", &n);
	r->close = v != NULL && http1_is(v, n, "close");
	return 0;
}

/* A token's character (RFC 9110, 5.6.2). */
static int
tchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') ||
	    (c != '\0' && strchr("!#$%&'*+-.^_`|~", c));
}

enum http1_verdict
http1_parse_request(char *head, size_t len, struct http1_request *r)
{
	char *end = head + len, *eol = (char *)line_end(head, end), *p = head;
	char *target, *version;
	const char *v;
	size_t n;

	*r = (struct http1_request){.query = ""};
	/* method SP target SP version CRLF */
	while (p < eol && tchar(*p))
		p++;
	if (p == head || p == eol || *p != ' ')
		return HTTP1_MALFORMED;
	*p++ = '\0';
	target = p;
	while (p < eol && (unsigned char)*p > ' ' && *p != 0x7f)
		p++;
	if (p == target || p == eol || *p != ' ')
		return HTTP1_MALFORMED;
	*p++ = '\0';
	version = p;
	while (p < eol && (unsigned char)*p > ' ' && *p != 0x7f)
		p++;
	if (p != eol || eol == end || p - version < 5 ||
	    memcmp(version, "HTTP/", 5) != 0)
		return HTTP1_MALFORMED;
	r->method = head;
	r->path = target;
	r->keep = http1_is(version, (size_t)(eol - version), "HTTP/1.1");
	/* The '?' ends the path; the query ends where the target did. */
	for (char *q = target; *q != '\0'; q++)
		if (*q == '?') {
			*q = '\0';
			r->query = q + 1;
			break;
		}
	if (r->path[0] == '\0')
		return HTTP1_MALFORMED; /* a target that is only a query */
	if ((v = http1_header(head, len, "Connection", &n)) != NULL)
		r->keep = !http1_is(v, n, "close") &&
		    (r->keep || http1_is(v, n, "keep-alive"));
	if ((v = http1_header(head, len, "Authorization", &n)) != NULL &&
	    n > 7 && strncasecmp(v, "Bearer ", 7) == 0) {
		for (v += 7, n -= 7; n > 0 && blank(*v); v++, n--)
			;
		r->auth = v;
		r->auth_len = n;
	}
	if (http1_header(head, len, "Transfer-Encoding", &n) != NULL)
		return HTTP1_CHUNKED;
	if (content_length(head, len, 0, &r->length) < 0)
		return HTTP1_BAD_LENGTH;
	return HTTP1_OK;
}
