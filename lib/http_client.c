#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "duration.h"
#include "http_client.h"
#include "log.h"

struct http_client {
	CURL *curl;
	char base[300];
	char addr[280];
	char errbuf[CURL_ERROR_SIZE];
	unsigned seed;
};

struct http_client *
http_client_new(const char *addr, int defport, char *err, size_t errlen)
{
	struct http_client *c;
	char host[256];
	const char *colon, *port = NULL;
	size_t hlen;
	char *end;
	long p = defport;

	if (addr == NULL || *addr == '\0') {
		snprintf(err, errlen, "empty address");
		return NULL;
	}
	if (addr[0] == '[') {
		const char *rb = strchr(addr, ']');
		if (rb == NULL) {
			snprintf(err, errlen, "bad address %s", addr);
			return NULL;
		}
		hlen = (size_t)(rb - addr) + 1;
		if (rb[1] == ':')
			port = rb + 2;
		else if (rb[1] != '\0')
			hlen = 0;
	} else {
		colon = strrchr(addr, ':');
		hlen = colon != NULL ? (size_t)(colon - addr) : strlen(addr);
		if (colon != NULL)
			port = colon + 1;
		if (strchr(addr, ':') != colon)
			hlen = 0;       /* a bare IPv6 address needs brackets */
	}
	if (port != NULL) {
		p = strtol(port, &end, 10);
		if (*port == '\0' || *end != '\0' || p <= 0 || p > 65535)
			hlen = 0;
	}
	if (hlen == 0 || hlen >= sizeof(host)) {
		snprintf(err, errlen, "bad address %s (want HOST:PORT)", addr);
		return NULL;
	}
	memcpy(host, addr, hlen);
	host[hlen] = '\0';
	if ((c = calloc(1, sizeof(*c))) == NULL ||
	    (c->curl = curl_easy_init()) == NULL) {
		free(c);
		snprintf(err, errlen, "cannot start libcurl");
		return NULL;
	}
	snprintf(c->base, sizeof(c->base), "http://%s:%ld", host, p);
	snprintf(c->addr, sizeof(c->addr), "%s:%ld", host, p);
	c->seed = (unsigned)getpid() ^ (unsigned)duration_now_ms();
	return c;
}

void
http_client_free(struct http_client *c)
{
	if (c == NULL)
		return;
	curl_easy_cleanup(c->curl);
	free(c);
}

const char *
http_client_addr(const struct http_client *c)
{
	return c->addr;
}

void
http_resp_free(struct http_resp *resp)
{
	buf_free(&resp->body);
}

static size_t
on_body(char *p, size_t size, size_t n, void *arg)
{
	struct http_resp *resp = arg;

	if (buf_append(&resp->body, p, size * n) < 0)
		return 0;
	return size * n;
}

static size_t
on_header(char *p, size_t size, size_t n, void *arg)
{
	struct http_resp *resp = arg;
	size_t len = size * n;
	static const char rev[] = "X-Muster-Revision:";
	static const char ra[] = "Retry-After:";

	if (len > sizeof(rev) - 1 && strncasecmp(p, rev, sizeof(rev) - 1) == 0)
		resp->revision = strtoll(p + sizeof(rev) - 1, NULL, 10);
	else if (len > sizeof(ra) - 1 &&
	    strncasecmp(p, ra, sizeof(ra) - 1) == 0)
		resp->retry_after = 1;
	return len;
}

/* The error a non-2xx reply carries, from its JSON body when it has one. */
static enum status
reply_status(struct http_resp *resp, char *err, size_t errlen)
{
	json_t *root = json_loadb(resp->body.data != NULL ? resp->body.data :
	    "", resp->body.len, 0, NULL);
	const char *code = NULL, *msg = NULL;
	enum status st;

	if (root != NULL)
		json_unpack(root, "{s:{s?s,s?s}}", "error", "code", &code,
		    "message", &msg);
	if (code != NULL) {
		st = status_from_name(code);
		snprintf(err, errlen, "%s", msg != NULL ? msg : code);
	} else {
		st = status_from_http((int)resp->code);
		snprintf(err, errlen, "server replied HTTP %ld", resp->code);
	}
	json_decref(root);
	return st;
}

static int
may_retry(CURLcode rc, int idempotent, int fresh_conn)
{
	switch (rc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
		return 1;
	case CURLE_GOT_NOTHING:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
		/* The server went away mid-call, or a kept-alive connection
		 * had died: repeat only what is safe to repeat. */
		return idempotent || !fresh_conn;
	default:
		return 0;
	}
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
	char hdr[128];
	struct buf url = {0};
	int64_t backoff = 20, now;
	struct curl_slist *hdrs = NULL;
	enum status st;

	memset(resp, 0, sizeof(*resp));
	if (buf_printf(&url, "%s%s", c->base, path) < 0) {
		snprintf(err, errlen, "out of memory");
		return ST_RESOURCE_EXHAUSTED;
	}
	/* No "Expect: 100-continue": it costs a round trip per PUT. */
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (ctype != NULL) {
		snprintf(hdr, sizeof(hdr), "Content-Type: %s", ctype);
		hdrs = curl_slist_append(hdrs, hdr);
	}
	for (;;) {
		CURLcode rc;
		long nconn = 0;

		buf_reset(&resp->body);
		resp->code = 0;
		resp->revision = -1;
		resp->retry_after = 0;
		curl_easy_reset(c->curl);
		curl_easy_setopt(c->curl, CURLOPT_URL, url.data);
		curl_easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST, method);
		curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c->curl, CURLOPT_TCP_NODELAY, 1L);
		curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, c->errbuf);
		curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_body);
		curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, resp);
		curl_easy_setopt(c->curl, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(c->curl, CURLOPT_HEADERDATA, resp);
		if (strcmp(method, "GET") == 0) {
			curl_easy_setopt(c->curl, CURLOPT_HTTPGET, 1L);
		} else if (strcmp(method, "DELETE") != 0 || len > 0) {
			curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS,
			    body != NULL ? body : "");
			curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE,
			    (curl_off_t)len);
		}
		now = duration_now_ms();
		if (deadline != HTTP_NO_DEADLINE) {
			if (deadline <= now) {
				snprintf(err, errlen, "deadline passed before "
				    "%s could be reached", c->addr);
				st = ST_DEADLINE_EXCEEDED;
				break;
			}
			curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS,
			    (long)(deadline - now + grace_ms));
		}
		c->errbuf[0] = '\0';
		rc = curl_easy_perform(c->curl);
		curl_easy_getinfo(c->curl, CURLINFO_NUM_CONNECTS, &nconn);
		if (rc == CURLE_OK) {
			curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE,
			    &resp->code);
			if (resp->code >= 200 && resp->code < 300) {
				st = ST_OK;
				break;
			}
			st = reply_status(resp, err, errlen);
			if (!(resp->retry_after && idempotent))
				break;
		} else if (rc == CURLE_OPERATION_TIMEDOUT) {
			snprintf(err, errlen, "no reply from %s before the "
			    "deadline", c->addr);
			st = ST_DEADLINE_EXCEEDED;
			break;
		} else if (may_retry(rc, idempotent, nconn > 0)) {
			snprintf(err, errlen, "cannot reach %s: %s", c->addr,
			    c->errbuf[0] != '\0' ? c->errbuf :
			    curl_easy_strerror(rc));
			st = ST_UNAVAILABLE;
		} else {
			snprintf(err, errlen, "%s: %s", c->addr,
			    c->errbuf[0] != '\0' ? c->errbuf :
			    curl_easy_strerror(rc));
			st = ST_UNAVAILABLE;
			break;
		}
		/* Retry after a jittered, growing pause, within the deadline. */
		log_debug("%s; retrying", err);
		{
			int64_t pause = backoff / 2 +
			    (int64_t)(rand_r(&c->seed) % (unsigned)(backoff / 2 + 1));
			struct timespec ts;

			now = duration_now_ms();
			if (deadline != HTTP_NO_DEADLINE && now + pause >= deadline) {
				if (deadline <= now)
					break;
				pause = deadline - now;
			}
			ts.tv_sec = pause / 1000;
			ts.tv_nsec = (pause % 1000) * 1000000;
			nanosleep(&ts, NULL);
			if (backoff < 1000)
				backoff *= 2;
			if (deadline != HTTP_NO_DEADLINE &&
			    duration_now_ms() >= deadline)
				break;
		}
	}
	curl_slist_free_all(hdrs);
	buf_free(&url);
	return st;
}
