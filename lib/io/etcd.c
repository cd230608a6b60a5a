/*
 * etcd.c: the client of an etcd cluster: its members, TLS and
 * authentication, a call that goes round the members until one answers,
 * and one attempt at a stream.
 */
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duration.h"
#include "etcd_int.h"
#include "log.h"
#include "readall.h"
#include "tls.h"

#define AUTH_PATH "/v3/auth/authenticate"
/* The pause after a round of the members in which none answered, doubled
 * after each such round up to PAUSE_MAX_MS. */
#define PAUSE_MS 50
#define PAUSE_MAX_MS 1000
/* The largest auth file read. */
#define AUTH_FILE_MAX 4096

struct member {
	char *url;                /* as given: the scheme, host and port */
	char *addr;               /* HOST:PORT, for messages */
	struct http_client *http; /* NULL until used, or after a new token */
};

struct etcd {
	struct member *m;
	size_t n;
	size_t cur; /* the member in use */
	struct tls_cred *cred;
	char *user; /* NULL: no authentication */
	char *password;
	char *token; /* NULL until authenticated */
	int cancel_fd;
	int64_t attempt_ms;
	int64_t retry_ms;
	int answered;   /* the last attempt had a reply */
	enum status st; /* of the last failure */
	char err[1024];
};

enum status
etcd_fail(struct etcd *e, enum status st, const char *fmt, ...)
{
	char msg[sizeof(e->err)];
	va_list ap;

	/* fmt may print the old error: format before overwriting it. */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	memcpy(e->err, msg, sizeof(e->err));
	e->st = st;
	return st;
}

enum status
etcd_status(const struct etcd *e)
{
	return e->st;
}

const char *
etcd_error(const struct etcd *e)
{
	return e->err;
}

const char *
etcd_member(const struct etcd *e)
{
	return e->m[e->cur].addr;
}

void
etcd_set_cancel(struct etcd *e, int fd)
{
	e->cancel_fd = fd;
	for (size_t i = 0; i < e->n; i++)
		if (e->m[i].http != NULL)
			http_client_set_cancel(e->m[i].http, fd);
}

/* Member m's HTTP client, made with the headers every request carries. */
static struct http_client *
member_http(struct etcd *e, struct member *m, char *err, size_t errlen)
{
	struct buf h = {0};
	int rc;

	if (m->http != NULL)
		return m->http;
	if ((m->http = http_client_new_tls(m->url, ETCD_DEFAULT_PORT, e->cred,
	         err, errlen)) == NULL)
		return NULL;
	http_client_set_retry(m->http, 0);
	http_client_set_cancel(m->http, e->cancel_fd);
	/* A member without a leader refuses at once (etcd's "hasleader"). */
	rc = http_client_add_header(m->http, "Grpc-Metadata-Hasleader: true");
	if (rc == 0 && e->token != NULL)
		rc = buf_printf(&h, "Authorization: %s", e->token) < 0 ||
		        http_client_add_header(m->http, h.data) < 0 ?
		    -1 :
		    0;
	buf_free(&h);
	if (rc < 0) {
		http_client_free(m->http);
		m->http = NULL;
		snprintf(err, errlen, "out of memory");
	}
	return m->http;
}

/* A new token (or none) for every request from now on. */
static int
set_token(struct etcd *e, const char *token)
{
	char *t = NULL;

	if (token != NULL && (t = strdup(token)) == NULL)
		return -1;
	free(e->token);
	e->token = t;
	for (size_t i = 0; i < e->n; i++) {
		http_client_free(e->m[i].http);
		e->m[i].http = NULL;
	}
	return 0;
}

/* Reads USER:PASSWORD from the first line of path. */
static int
read_auth(struct etcd *e, const char *path, char *err, size_t errlen)
{
	struct buf b = {0};
	char *colon, *nl;
	int rc = -1;

	if ((rc = readall_file(path, &b, AUTH_FILE_MAX)) < 0) {
		snprintf(err, errlen, "auth file %s: %s", path,
		    rc == -2 ? "too long" : "cannot be read");
		buf_free(&b);
		return -1;
	}
	rc = -1;
	if (b.data != NULL && (nl = strpbrk(b.data, "\r\n")) != NULL)
		*nl = '\0';
	if (b.data == NULL || (colon = strchr(b.data, ':')) == NULL ||
	    colon == b.data) {
		snprintf(err, errlen,
		    "auth file %s: its first line is not USER:PASSWORD", path);
	} else {
		*colon = '\0';
		if ((e->user = strdup(b.data)) == NULL ||
		    (e->password = strdup(colon + 1)) == NULL)
			snprintf(err, errlen, "out of memory");
		else
			rc = 0;
	}
	if (b.data != NULL)
		memset(b.data, 0, b.cap);
	buf_free(&b);
	return rc;
}

/* The members of a list HOST:PORT,...; each checked now. */
static int
add_members(struct etcd *e, const char *list, char *err, size_t errlen)
{
	const char *p = list != NULL ? list : "";

	for (;;) {
		size_t len = strcspn(p, ",");
		struct member *m;

		if (len == 0) {
			snprintf(err, errlen, "bad etcd endpoints \"%s\"",
			    list != NULL ? list : "");
			return -1;
		}
		if ((m = realloc(e->m, (e->n + 1) * sizeof(*m))) == NULL) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		e->m = m;
		m = &e->m[e->n];
		memset(m, 0, sizeof(*m));
		e->n++;
		if ((m->url = strndup(p, len)) == NULL ||
		    member_http(e, m, err, errlen) == NULL ||
		    (m->addr = strdup(http_client_addr(m->http))) == NULL) {
			if (m->url == NULL || m->http != NULL)
				snprintf(err, errlen, "out of memory");
			return -1;
		}
		if (p[len] == '\0')
			return 0;
		p += len + 1;
	}
}

struct etcd *
etcd_new(const struct etcd_opts *o, char *err, size_t errlen)
{
	struct etcd *e = calloc(1, sizeof(*e));

	if (e == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	e->cancel_fd = -1;
	e->attempt_ms = o->attempt_ms > 0 ? o->attempt_ms : ETCD_ATTEMPT_MS;
	e->retry_ms = o->retry_ms > 0 ? o->retry_ms : ETCD_RETRY_MS;
	if ((o->ca_file != NULL || o->cert_file != NULL ||
	        o->key_file != NULL) &&
	    (e->cred = tls_cred_new(o->ca_file, o->cert_file, o->key_file, err,
	         errlen)) == NULL) {
		etcd_free(e);
		return NULL;
	}
	if (add_members(e, o->endpoints, err, errlen) < 0 ||
	    (o->auth_file != NULL &&
	        read_auth(e, o->auth_file, err, errlen) < 0)) {
		etcd_free(e);
		return NULL;
	}
	return e;
}

void
etcd_free(struct etcd *e)
{
	if (e == NULL)
		return;
	for (size_t i = 0; i < e->n; i++) {
		http_client_free(e->m[i].http);
		free(e->m[i].url);
		free(e->m[i].addr);
	}
	free(e->m);
	tls_cred_free(e->cred);
	if (e->password != NULL)
		memset(e->password, 0, strlen(e->password));
	free(e->user);
	free(e->password);
	free(e->token);
	free(e);
}

/*
 * After a member failed: the next one, and once every member has failed
 * in a row, a pause that grows. 0 when there is no time left for another
 * try (retry_ms since since, or deadline) or the cancel fd fired; e's
 * error then says so.
 */
static int
next_member(struct etcd *e, int tries, int64_t since, int64_t deadline)
{
	int64_t now = duration_now_ms(), pause = 0, end;
	struct pollfd p = {.fd = e->cancel_fd, .events = POLLIN};

	e->cur = (e->cur + 1) % e->n;
	if (tries % (int)e->n == 0) {
		pause = PAUSE_MS
		    << (tries / (int)e->n - 1 < 5 ? tries / (int)e->n - 1 : 5);
		if (pause > PAUSE_MAX_MS)
			pause = PAUSE_MAX_MS;
	}
	end = since + e->retry_ms < deadline ? since + e->retry_ms : deadline;
	if (now + pause >= end) {
		if (end == deadline)
			etcd_fail(e, ST_DEADLINE_EXCEEDED,
			    "deadline passed; last: %s", e->err);
		else
			etcd_fail(e, e->st,
			    "%s (every member tried for %lld ms)", e->err,
			    (long long)(now - since));
		return 0;
	}
	if (pause > 0 && poll(&p, 1, (int)pause) > 0) {
		etcd_fail(e, ST_CANCELLED, "cancelled");
		return 0;
	}
	return 1;
}

/* etcd's answers that say it refused a request before proposing it. */
static int
not_applied(const char *msg)
{
	static const char *const refused[] = {
	    "etcdserver: no leader",
	    "etcdserver: leader changed",
	    "etcdserver: not capable",
	    "etcdserver: rpc not supported for learner",
	};

	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		if (strcmp(msg, refused[i]) == 0)
			return 1;
	return 0;
}

/* What to do after an attempt. */
enum next {
	N_DONE,   /* the call is over: its status */
	N_MEMBER, /* try the next member */
	N_AUTH,   /* authenticate again, then try again */
};

/* Whether etcd no longer knows e's token (it expired), by its error. */
static int
token_expired(const struct etcd *e, enum status st, const char *msg)
{
	return st == ST_UNAUTHENTICATED && e->user != NULL &&
	    strstr(msg, "etcdserver: invalid auth token") != NULL;
}

/* What an error etcd sent calls for. */
static enum next
after_error(struct etcd *e, enum status st, long code, const char *msg,
    int flags)
{
	etcd_fail(e, st, "etcd %s: %s", etcd_member(e), msg);
	if (token_expired(e, st, msg))
		return N_AUTH;
	if (not_applied(msg))
		return N_MEMBER;
	if (st == ST_UNAVAILABLE || (code >= 500 && st == ST_INTERNAL))
		return flags & ETCD_CHANGE ? N_DONE : N_MEMBER;
	return N_DONE;
}

/* The reply of a 2xx: its JSON (a stream's first result unwrapped), or an
 * error a stream sent in it. */
static enum next
take_reply(struct etcd *e, const struct http_resp *resp, int flags,
    json_t **reply, enum status *st)
{
	json_t *root =
	    json_loadb(resp->body.data != NULL ? resp->body.data : "",
	        resp->body.len, JSON_DISABLE_EOF_CHECK, NULL);
	json_t *res = json_object_get(root, "result");
	char msg[512];

	if (json_is_object(json_object_get(root, "error"))) {
		*st = etcd_json_error(resp->body.data, resp->body.len,
		    resp->code, msg, sizeof(msg));
		json_decref(root);
		return after_error(e, *st, resp->code, msg, flags);
	}
	if (!json_is_object(root)) {
		json_decref(root);
		*st = etcd_fail(e, ST_INTERNAL,
		    "etcd %s sent a reply that is not a JSON object",
		    etcd_member(e));
		return N_DONE;
	}
	if (json_is_object(res)) {
		json_incref(res);
		json_decref(root);
		root = res;
	}
	*reply = root;
	*st = ST_OK;
	return N_DONE;
}

/* One attempt of a call at the member in use. */
static enum next
attempt(struct etcd *e, const char *path, const char *body, size_t len,
    int flags, int64_t deadline, json_t **reply, enum status *st)
{
	struct http_client *h;
	struct http_resp resp;
	char why[512];
	int64_t at = deadline, now = duration_now_ms();
	enum next nx;

	if (!(flags & ETCD_LONG) && now + e->attempt_ms < at)
		at = now + e->attempt_ms;
	if ((h = member_http(e, &e->m[e->cur], why, sizeof(why))) == NULL) {
		*st = etcd_fail(e, ST_INTERNAL, "%s", why);
		return N_DONE;
	}
	*st = http_client_do(h, "POST", path, body, len, "application/json", at,
	    !(flags & ETCD_CHANGE), &resp, why, sizeof(why));
	e->answered = resp.code != 0;
	if (*st == ST_OK) {
		nx = take_reply(e, &resp, flags, reply, st);
	} else if (resp.code != 0) {
		char msg[512];
		*st = etcd_json_error(resp.body.data, resp.body.len, resp.code,
		    msg, sizeof(msg));
		nx = after_error(e, *st, resp.code, msg, flags);
	} else if (*st == ST_CANCELLED ||
	    (*st == ST_DEADLINE_EXCEEDED && duration_now_ms() >= deadline)) {
		etcd_fail(e, *st, "etcd: %s", why);
		nx = N_DONE;
	} else {
		/* No reply from this member: it may be down or cut off. */
		if (*st == ST_DEADLINE_EXCEEDED)
			snprintf(why, sizeof(why),
			    "%s did not answer in %lld ms", etcd_member(e),
			    (long long)e->attempt_ms);
		*st = ST_UNAVAILABLE;
		if (resp.unsent || !(flags & ETCD_CHANGE)) {
			etcd_fail(e, *st, "etcd: %s", why);
			nx = N_MEMBER;
		} else {
			etcd_fail(e, *st,
			    "etcd: %s; the change may have been made", why);
			nx = N_DONE;
		}
	}
	http_resp_free(&resp);
	return nx;
}

/* Authenticates as the auth file's user: a token for every request. */
static enum status
authenticate(struct etcd *e, int64_t deadline)
{
	json_t *req =
	    json_pack("{s:s,s:s}", "name", e->user, "password", e->password);
	json_t *reply;
	const char *token;
	enum status st;

	if (req == NULL)
		return etcd_fail(e, ST_INTERNAL, "out of memory");
	if ((st = etcd_call(e, AUTH_PATH, req, 0, deadline, &reply)) != ST_OK)
		return etcd_fail(e, st, "%s (authenticating as %s)", e->err,
		    e->user);
	token = json_string_value(json_object_get(reply, "token"));
	if (token == NULL || *token == '\0' || strpbrk(token, "\r\n") != NULL)
		st = etcd_fail(e, ST_INTERNAL, "etcd %s gave no token to %s",
		    etcd_member(e), e->user);
	else if (set_token(e, token) < 0)
		st = etcd_fail(e, ST_INTERNAL, "out of memory");
	json_decref(reply);
	return st;
}

/* Authenticates first if the client has no token yet. */
static enum status
ensure_token(struct etcd *e, const char *path, int64_t deadline)
{
	if (e->user == NULL || e->token != NULL || strcmp(path, AUTH_PATH) == 0)
		return ST_OK;
	return authenticate(e, deadline);
}

enum status
etcd_call(struct etcd *e, const char *path, json_t *req, int flags,
    int64_t deadline, json_t **reply)
{
	char *body = json_dumps(req, JSON_COMPACT);
	char said[sizeof(e->err)] = "";
	int64_t start = duration_now_ms();
	enum status st = ST_OK;
	int tries = 0, reauthed = 0;

	json_decref(req);
	*reply = NULL;
	if (body == NULL)
		return etcd_fail(e, ST_INTERNAL, "out of memory");
	for (;;) {
		int64_t t0 = duration_now_ms();
		enum next nx;

		if ((st = ensure_token(e, path, deadline)) != ST_OK)
			break;
		nx = attempt(e, path, body, strlen(body), flags, deadline,
		    reply, &st);
		if (nx == N_DONE)
			break;
		if (nx == N_AUTH && !reauthed++) {
			/* The token expired: a new one, and the same member. */
			log_debug("%s; authenticating again", e->err);
			set_token(e, NULL);
			continue;
		}
		if (nx == N_AUTH)
			break;
		log_debug("%s; trying the next member", e->err);
		/* What a member said beats a member that said nothing. */
		if (e->answered)
			memcpy(said, e->err, sizeof(said));
		else if (said[0] != '\0')
			etcd_fail(e, e->st, "%s", said);
		/* A long poll that waited long had got somewhere. */
		if ((flags & ETCD_LONG) &&
		    duration_now_ms() - t0 > e->attempt_ms) {
			start = duration_now_ms();
			tries = 0;
		}
		if (!next_member(e, ++tries, start, deadline)) {
			st = e->st;
			break;
		}
	}
	free(body);
	return st;
}

/* A stream being read: its messages cut apart and handed on. */
struct stream {
	struct etcd *e;
	struct etcd_split split;
	etcd_msg_fn fn;
	void *arg;
	int got; /* results on this stream its reader took */
	int end; /* 1: the reader has had enough; -1: failed (e says why) */
};

static int
on_message(void *arg, const char *msg, size_t len)
{
	struct stream *s = arg;
	json_t *root = json_loadb(msg, len, 0, NULL);
	json_t *res = json_object_get(root, "result");
	char why[512];

	if (json_is_object(res)) {
		/* One it refused (a cancel) is no progress to retry on. */
		if ((s->end = s->fn(s->arg, res)) >= 0)
			s->got++;
	} else {
		enum status st = root != NULL ?
		    etcd_json_error(msg, len, 200, why, sizeof(why)) :
		    ST_INTERNAL;
		etcd_fail(s->e, st, "etcd %s: %s", etcd_member(s->e),
		    root != NULL ? why : "a message that is not JSON");
		s->end = -1;
	}
	json_decref(root);
	return s->end != 0;
}

static int
on_bytes(void *arg, const char *p, size_t n)
{
	struct stream *s = arg;

	if (etcd_split_feed(&s->split, p, n, on_message, s) < 0) {
		etcd_fail(s->e, ST_RESOURCE_EXHAUSTED,
		    "etcd %s sent a message over %zu bytes", etcd_member(s->e),
		    s->split.max);
		s->end = -1;
	}
	return s->end != 0;
}

/* One stream of s's, with request body, on the member in use. */
static enum status
stream_once(struct stream *s, const char *path, const char *body,
    int64_t silence_ms, int64_t deadline)
{
	struct etcd *e = s->e;
	struct http_client *h;
	struct http_resp resp;
	char why[512];
	enum status st;

	s->got = s->end = 0;
	if ((st = ensure_token(e, path, deadline)) != ST_OK)
		return st;
	if ((h = member_http(e, &e->m[e->cur], why, sizeof(why))) == NULL)
		return etcd_fail(e, ST_INTERNAL, "%s", why);
	st = http_client_stream(h, "POST", path, body, strlen(body),
	    "application/json", deadline, silence_ms, on_bytes, s, &resp, why,
	    sizeof(why));
	buf_reset(&s->split.part);
	if (st == ST_OK) {
		st = s->end > 0 ? ST_OK : e->st;
	} else if (resp.code != 0 && (resp.code < 200 || resp.code >= 300)) {
		char msg[512];
		st = etcd_json_error(resp.body.data, resp.body.len, resp.code,
		    msg, sizeof(msg));
		etcd_fail(e, st, "etcd %s: %s", etcd_member(e), msg);
	} else if (st == ST_DEADLINE_EXCEEDED && duration_now_ms() < deadline) {
		/* Quiet too long: the member is taken for lost. */
		st = etcd_fail(e, ST_UNAVAILABLE, "etcd: %s", why);
	} else {
		etcd_fail(e, st, "etcd: %s", why);
	}
	http_resp_free(&resp);
	return st;
}

enum status
etcd_stream(struct etcd *e, const char *path, etcd_req_fn req,
    int64_t silence_ms, size_t max_msg, int64_t deadline, etcd_msg_fn fn,
    void *arg)
{
	struct stream s = {.e = e,
	    .split = {.max = max_msg},
	    .fn = fn,
	    .arg = arg};
	int64_t since = duration_now_ms();
	int tries = 0, reauthed = 0;
	enum status st;

	for (;;) {
		json_t *r = req(arg);
		char *body = json_dumps(r, JSON_COMPACT);

		json_decref(r);
		if (body == NULL) {
			st = etcd_fail(e, ST_INTERNAL, "out of memory");
			break;
		}
		st = stream_once(&s, path, body, silence_ms, deadline);
		free(body);
		if (s.got > 0) {
			since = duration_now_ms();
			tries = reauthed = 0;
		}
		if (token_expired(e, st, e->err) && !reauthed++) {
			log_debug("%s; authenticating again", e->err);
			set_token(e, NULL);
			continue;
		}
		if (st != ST_UNAVAILABLE)
			break;
		log_debug("%s; trying the next member", e->err);
		if (!next_member(e, ++tries, since, deadline)) {
			st = e->st;
			break;
		}
	}
	etcd_split_free(&s.split);
	return st;
}
