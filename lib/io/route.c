#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "route.h"

static const struct {
	const char *name;
	unsigned bit;
} methods[] = {
    {"GET", ROUTE_GET},
    {"HEAD", ROUTE_HEAD},
    {"PUT", ROUTE_PUT},
    {"POST", ROUTE_POST},
    {"DELETE", ROUTE_DELETE},
};

unsigned
route_method(const char *method)
{
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if (strcmp(method, methods[i].name) == 0)
			return methods[i].bit;
	return 0;
}

/* Whether path matches pattern; fills m with what it captured. */
static int
match(const char *pat, const char *path, struct route_match *m)
{
	m->nseg = 0;
	m->rest = "";
	for (;;) {
		if (pat[0] == '/' && pat[1] == '*' && pat[2] == '*' &&
		    pat[3] == '\0') {
			/* The rest, or nothing at all. */
			if (*path == '\0') {
				m->rest = "";
				return 1;
			}
			if (*path != '/')
				return 0;
			m->rest = path + 1;
			return 1;
		}
		if (*pat == '\0' || *path == '\0')
			return *pat == '\0' && *path == '\0';
		if (*pat == '*' && (pat[1] == '/' || pat[1] == '\0')) {
			size_t n = strcspn(path, "/");
			if (n == 0 || m->nseg == ROUTE_MAX_SEGS)
				return 0;
			m->seg[m->nseg] = path;
			m->seglen[m->nseg++] = n;
			path += n;
			pat++;
			continue;
		}
		if (*pat != *path)
			return 0;
		pat++;
		path++;
	}
}

static void
allow_header(struct http_req *req, unsigned mask)
{
	struct buf b = {0};

	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if (mask & methods[i].bit)
			buf_printf(&b, "%s%s", b.len > 0 ? ", " : "",
			    methods[i].name);
	if (b.data != NULL)
		http_set_header(req, "Allow", b.data);
	buf_free(&b);
}

int
route_dispatch(const struct route *routes, size_t n, struct http_req *req,
    void *arg)
{
	const char *path = http_req_path(req), *method = http_req_method(req);
	unsigned bit = route_method(method), allowed = 0;
	struct route_match m;

	for (size_t i = 0; i < n; i++) {
		if (!match(routes[i].pattern, path, &m))
			continue;
		if ((routes[i].methods & bit) == 0) {
			allowed |= routes[i].methods;
			continue;
		}
		m.method = bit;
		m.op = routes[i].op;
		routes[i].fn(req, &m, arg);
		return 1;
	}
	if (allowed != 0) {
		allow_header(req, allowed);
		http_reply_error_http(req, 405, ST_INVALID_ARGUMENT,
		    "method %s not allowed on %s", method, path);
	} else {
		http_reply_error(req, ST_NOT_FOUND, "no such resource: %s %s",
		    method, path);
	}
	return 0;
}

char *
route_seg(const struct route_match *m, int i, char *buf, size_t size)
{
	size_t n = i < m->nseg ? m->seglen[i] : 0;

	if (n >= size)
		n = size - 1;
	memcpy(buf, i < m->nseg ? m->seg[i] : "", n);
	buf[n] = '\0';
	return buf;
}
