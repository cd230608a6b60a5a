#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <jansson.h>

#include "duration.h"
#include "evq.h"
#include "http_client.h"
#include "log.h"
#include "notice.h"
#include "session.h"
#include "wallclock.h"

/* What a metadata reply may weigh: they are a few hundred bytes. */
#define NOTICE_MAX_REPLY (1u << 20)

static const struct {
	const char *name;
	int signo;
} signals[] = {
    {"TERM", SIGTERM},
    {"INT", SIGINT},
    {"HUP", SIGHUP},
    {"USR1", SIGUSR1},
    {"USR2", SIGUSR2},
    {"QUIT", SIGQUIT},
    {"ALRM", SIGALRM},
    {"URG", SIGURG},
    {"XCPU", SIGXCPU},
    {"PWR", SIGPWR},
};

int
notice_signal_number(const char *name)
{
	if (strncasecmp(name, "SIG", 3) == 0)
		name += 3;
	for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++)
		if (strcasecmp(name, signals[i].name) == 0)
			return signals[i].signo;
	return -1;
}

/* "http://HOST[:PORT][/PREFIX]" into addr and prefix. */
static int
parse_base(const char *url, struct notice_source *src)
{
	const char *host, *slash;
	size_t n;

	if (strncmp(url, "http://", 7) != 0)
		return -1;
	host = url + 7;
	slash = strchr(host, '/');
	n = slash != NULL ? (size_t)(slash - host) : strlen(host);
	if (n == 0 || n >= sizeof(src->addr) - 6)
		return -1;
	memcpy(src->addr, host, n);
	src->addr[n] = '\0';
	snprintf(src->prefix, sizeof(src->prefix), "%s",
	    slash != NULL ? slash : "");
	n = strlen(src->prefix);
	while (n > 0 && src->prefix[n - 1] == '/')
		src->prefix[--n] = '\0';
	return 0;
}

int
notice_parse(const char *spec, const char *base, struct notice_source *src,
    char *err, size_t errlen)
{
	const char *def = NULL;

	memset(src, 0, sizeof(*src));
	snprintf(src->spec, sizeof(src->spec), "%s", spec);
	if (strcmp(spec, "sigterm") == 0) {
		src->kind = NOTICE_SIGNAL;
		src->signo = SIGTERM;
		return 0;
	}
	if (strncmp(spec, "signal:", 7) == 0) {
		src->kind = NOTICE_SIGNAL;
		if ((src->signo = notice_signal_number(spec + 7)) < 0) {
			snprintf(err, errlen, "unknown signal %s", spec + 7);
			return -1;
		}
		return 0;
	}
	if (strncmp(spec, "file:", 5) == 0) {
		src->kind = NOTICE_FILE;
		if (spec[5] == '\0' || strlen(spec + 5) >= sizeof(src->path)) {
			snprintf(err, errlen, "file: needs a path");
			return -1;
		}
		snprintf(src->path, sizeof(src->path), "%s", spec + 5);
		return 0;
	}
	if (strcmp(spec, "gce") == 0) {
		src->kind = NOTICE_GCE;
		def = "http://metadata.google.internal";
	} else if (strcmp(spec, "aws") == 0) {
		src->kind = NOTICE_AWS;
		def = "http://169.254.169.254";
	} else if (strcmp(spec, "azure") == 0) {
		src->kind = NOTICE_AZURE;
		def = "http://169.254.169.254";
	} else {
		snprintf(err, errlen,
		    "unknown notice source %s (sigterm, "
		    "signal:NAME, file:PATH, gce, aws, azure)",
		    spec);
		return -1;
	}
	if (parse_base(base != NULL ? base : def, src) < 0) {
		snprintf(err, errlen,
		    "metadata URL %s is not http://HOST[:PORT][/PATH]",
		    base != NULL ? base : def);
		return -1;
	}
	if ((src->http = http_client_new(src->addr, 80, err, errlen)) == NULL)
		return -1;
	/* A metadata server is not ours to trust with our memory. */
	http_client_set_max_reply(src->http, NOTICE_MAX_REPLY);
	/* Metadata servers answer only requests that say they mean it. */
	if (src->kind == NOTICE_GCE)
		http_client_add_header(src->http, "Metadata-Flavor: Google");
	else if (src->kind == NOTICE_AZURE)
		http_client_add_header(src->http, "Metadata: true");
	return 0;
}

void
notice_free(struct notice_source *src)
{
	http_client_free(src->http);
	src->http = NULL;
}

/* A file notice: once per file (inode and modification time). */
static int
check_file(struct notice_source *src, int64_t grace_ms, int64_t *death_ms)
{
	struct stat sb;
	char text[128];
	FILE *f;
	int64_t mt;
	size_t n;

	if (stat(src->path, &sb) < 0)
		return 0;
	mt = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
	if (sb.st_ino == src->ino && mt == src->mtime_ns)
		return 0;
	*death_ms = wall_now_ms() + grace_ms;
	n = 0;
	if ((f = fopen(src->path, "r")) != NULL) {
		n = fread(text, 1, sizeof(text) - 1, f);
		fclose(f);
	}
	text[n] = '\0';
	text[strcspn(text, "\r\n")] = '\0';
	/* A file still being written (no time in it yet, touched within the
	 * last half second) is looked at again next time. */
	if (wall_parse_rfc3339(text, death_ms) < 0 &&
	    wall_now_ms() - mt / 1000000 < 500)
		return 0;
	src->ino = sb.st_ino;
	src->mtime_ns = mt;
	return 1;
}

/* GET prefix+path; the body into out. -1 with err on failure. */
static int
meta_get(struct notice_source *src, const char *method, const char *path,
    struct buf *out, long *code, char *err, size_t errlen)
{
	struct http_resp resp;
	struct buf url = {0};
	enum status st;

	buf_printf(&url, "%s%s", src->prefix, path);
	st = http_client_do(src->http, method, url.data, NULL, 0, NULL,
	    duration_now_ms() + 2000, 1, &resp, err, errlen);
	buf_free(&url);
	*code = resp.code;
	if (st != ST_OK && resp.code == 0) {
		http_resp_free(&resp);
		return -1;
	}
	buf_reset(out);
	buf_append(out, resp.body.data != NULL ? resp.body.data : "",
	    resp.body.len);
	http_resp_free(&resp);
	return 0;
}

static int
check_gce(struct notice_source *src, int64_t grace_ms, int64_t *death_ms,
    char *err, size_t errlen)
{
	static const struct {
		const char *path;
		const char *value;
	} checks[] = {
	    {"/computeMetadata/v1/instance/preempted", "TRUE"},
	    {"/computeMetadata/v1/instance/maintenance-event",
	        "TERMINATE_ON_HOST_MAINTENANCE"},
	};
	struct buf body = {0};
	long code;

	for (size_t i = 0; i < 2; i++) {
		if (meta_get(src, "GET", checks[i].path, &body, &code, err,
		        errlen) < 0) {
			buf_free(&body);
			return -1;
		}
		if (code != 200) {
			snprintf(err, errlen, "metadata %s: HTTP %ld",
			    checks[i].path, code);
			buf_free(&body);
			return -1;
		}
		if (body.data != NULL &&
		    strncmp(body.data, checks[i].value,
		        strlen(checks[i].value)) == 0) {
			*death_ms = wall_now_ms() + grace_ms;
			buf_free(&body);
			return 1;
		}
	}
	buf_free(&body);
	return 0;
}

static int
aws_token(struct notice_source *src, char *err, size_t errlen)
{
	struct http_resp resp;
	struct http_client *c;
	enum status st;

	if (src->token[0] != '\0' &&
	    duration_now_ms() - src->token_at < 3 * 3600 * 1000)
		return 0;
	if ((c = http_client_new(src->addr, 80, err, errlen)) == NULL)
		return -1;
	http_client_set_max_reply(c, NOTICE_MAX_REPLY);
	http_client_add_header(c,
	    "X-aws-ec2-metadata-token-ttl-seconds: 21600");
	{
		struct buf url = {0};
		buf_printf(&url, "%s/latest/api/token", src->prefix);
		st = http_client_do(c, "PUT", url.data, NULL, 0, NULL,
		    duration_now_ms() + 2000, 1, &resp, err, errlen);
		buf_free(&url);
	}
	http_client_free(c);
	if (st != ST_OK || resp.body.len == 0 ||
	    resp.body.len >= sizeof(src->token) - 40) {
		if (st == ST_OK)
			snprintf(err, errlen, "metadata token: bad reply");
		http_resp_free(&resp);
		return -1;
	}
	snprintf(src->token, sizeof(src->token), "%.*s", (int)resp.body.len,
	    resp.body.data);
	src->token_at = duration_now_ms();
	http_resp_free(&resp);
	/* The token goes with every request of this source from now on. */
	http_client_free(src->http);
	if ((src->http = http_client_new(src->addr, 80, err, errlen)) == NULL)
		return -1;
	http_client_set_max_reply(src->http, NOTICE_MAX_REPLY);
	{
		char h[600];
		snprintf(h, sizeof(h), "X-aws-ec2-metadata-token: %s",
		    src->token);
		http_client_add_header(src->http, h);
	}
	return 0;
}

static int
check_aws(struct notice_source *src, int64_t grace_ms, int64_t *death_ms,
    char *err, size_t errlen)
{
	struct buf body = {0};
	json_t *root;
	const char *when = NULL;
	long code;

	if (aws_token(src, err, errlen) < 0)
		return -1;
	if (meta_get(src, "GET", "/latest/meta-data/spot/instance-action",
	        &body, &code, err, errlen) < 0) {
		buf_free(&body);
		return -1;
	}
	if (code == 401) {
		src->token[0] = '\0'; /* expired: a new one next time */
		buf_free(&body);
		snprintf(err, errlen, "metadata token refused");
		return -1;
	}
	if (code == 404) {
		buf_free(&body);
		return 0;
	}
	if (code != 200) {
		snprintf(err, errlen, "spot/instance-action: HTTP %ld", code);
		buf_free(&body);
		return -1;
	}
	root =
	    json_loadb(body.data != NULL ? body.data : "", body.len, 0, NULL);
	buf_free(&body);
	if (root == NULL || json_unpack(root, "{s?s}", "time", &when) < 0) {
		json_decref(root);
		snprintf(err, errlen,
		    "spot/instance-action: not the JSON expected");
		return -1;
	}
	if (when == NULL || wall_parse_rfc3339(when, death_ms) < 0)
		*death_ms = wall_now_ms() + grace_ms;
	json_decref(root);
	return 1;
}

static int
check_azure(struct notice_source *src, int64_t grace_ms, int64_t *death_ms,
    char *err, size_t errlen)
{
	struct buf body = {0};
	json_t *root, *ev;
	size_t i;
	long code;
	int found = 0;

	if (meta_get(src, "GET",
	        "/metadata/scheduledevents?api-version=2020-07-01", &body,
	        &code, err, errlen) < 0) {
		buf_free(&body);
		return -1;
	}
	if (code != 200) {
		snprintf(err, errlen, "scheduledevents: HTTP %ld", code);
		buf_free(&body);
		return -1;
	}
	root =
	    json_loadb(body.data != NULL ? body.data : "", body.len, 0, NULL);
	buf_free(&body);
	if (!json_is_array(json_object_get(root, "Events"))) {
		json_decref(root);
		snprintf(err, errlen, "scheduledevents: not the JSON expected");
		return -1;
	}
	json_array_foreach(json_object_get(root, "Events"), i, ev) {
		const char *type =
		    json_string_value(json_object_get(ev, "EventType"));
		const char *nb =
		    json_string_value(json_object_get(ev, "NotBefore"));
		int64_t t;

		if (type == NULL ||
		    (strcmp(type, "Preempt") != 0 &&
		        strcmp(type, "Terminate") != 0))
			continue;
		if (nb == NULL || wall_parse_http_date(nb, &t) < 0)
			t = wall_now_ms() + grace_ms;
		if (!found || t < *death_ms)
			*death_ms = t;
		found = 1;
	}
	json_decref(root);
	return found;
}

int
notice_check(struct notice_source *src, int64_t grace_ms, int64_t *death_ms,
    char *err, size_t errlen)
{
	int r;

	switch (src->kind) {
	case NOTICE_FILE: return check_file(src, grace_ms, death_ms);
	case NOTICE_GCE:
		r = check_gce(src, grace_ms, death_ms, err, errlen);
		break;
	case NOTICE_AWS:
		r = check_aws(src, grace_ms, death_ms, err, errlen);
		break;
	case NOTICE_AZURE:
		r = check_azure(src, grace_ms, death_ms, err, errlen);
		break;
	default: return 0;
	}
	/* A cloud notice stands until the machine goes: take it once. */
	if (r == 1) {
		if (src->fired)
			return 0;
		src->fired = 1;
	}
	return r;
}

int
notice_signals(const struct notice_source *src, size_t n, int *sigs,
    size_t *nsigs, int *is_signal)
{
	int polled = 0;

	for (size_t i = 0; i < n; i++) {
		if (src[i].kind == NOTICE_SIGNAL) {
			is_signal[src[i].signo] = 1;
			sigs[(*nsigs)++] = src[i].signo;
		} else {
			polled = 1;
		}
	}
	return polled;
}

void *
notice_watcher(void *arg)
{
	struct notice_watch *w = arg;
	char last[8][256] = {{0}};

	for (;;) {
		for (size_t i = 0; i < w->n; i++) {
			struct notice_source *src = &w->src[i];
			char err[256] = "", when[48];
			int64_t death = 0;
			int r;

			if (src->kind == NOTICE_SIGNAL)
				continue;
			r = notice_check(src, w->grace_ms, &death, err,
			    sizeof(err));
			if (r == 1) {
				session_post(w->q, SESSION_NOTICE, 0, ST_OK,
				    death, "%s: death at %s", src->spec,
				    wall_format(death, when, sizeof(when)));
			} else if (r < 0 && i < 8 &&
			    strcmp(err, last[i]) != 0) {
				log_info("notice source %s: %s", src->spec,
				    err);
			}
			if (i < 8)
				snprintf(last[i], sizeof(last[i]), "%s",
				    r < 0 ? err : "");
		}
		nap(-1, w->interval_ms);
	}
	return NULL;
}
