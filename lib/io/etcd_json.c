/*
 * etcd_json.c: the JSON etcd's gateway sends and takes, and its streams
 * cut into messages. Pure: bytes and JSON in, fields out; fuzzed
 * (fuzz/fuzz_etcd_stream.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_int.h"
#include "text.h"

int
etcd_json_int(const json_t *o, const char *name, int64_t *v)
{
	const json_t *f = json_object_get(o, name);
	const char *s;
	char *end;

	*v = 0;
	if (f == NULL || json_is_null(f))
		return 0;
	if (json_is_integer(f)) {
		*v = json_integer_value(f);
		return 0;
	}
	if (!json_is_string(f))
		return -1;
	s = json_string_value(f);
	errno = 0;
	*v = strtoll(s, &end, 10);
	return *s == '\0' || *end != '\0' || errno != 0 ? -1 : 0;
}

int
etcd_json_bytes(const json_t *o, const char *name, char **p, size_t *n)
{
	const json_t *f = json_object_get(o, name);
	struct buf b = {0};

	*p = NULL;
	*n = 0;
	if (f != NULL && !json_is_null(f) &&
	    (!json_is_string(f) ||
	        text_base64_decode(&b, json_string_value(f),
	            json_string_length(f)) < 0)) {
		buf_free(&b);
		return -1;
	}
	if (b.data == NULL && buf_append(&b, "", 0) < 0)
		return -1;
	*p = buf_take(&b, n);
	return 0;
}

void
etcd_kv_free(struct etcd_kv *kv)
{
	free(kv->key);
	free(kv->value);
	memset(kv, 0, sizeof(*kv));
}

int
etcd_json_kv(const json_t *o, struct etcd_kv *kv)
{
	memset(kv, 0, sizeof(*kv));
	if (!json_is_object(o) ||
	    etcd_json_bytes(o, "key", &kv->key, &kv->key_len) < 0 ||
	    etcd_json_bytes(o, "value", &kv->value, &kv->value_len) < 0 ||
	    etcd_json_int(o, "create_revision", &kv->create_revision) < 0 ||
	    etcd_json_int(o, "mod_revision", &kv->mod_revision) < 0 ||
	    etcd_json_int(o, "version", &kv->version) < 0 ||
	    etcd_json_int(o, "lease", &kv->lease) < 0) {
		etcd_kv_free(kv);
		return -1;
	}
	return 0;
}

int64_t
etcd_json_revision(const json_t *reply)
{
	int64_t rev;

	if (etcd_json_int(json_object_get(reply, "header"), "revision", &rev) <
	    0)
		return 0;
	return rev;
}

int
etcd_json_set_bytes(json_t *o, const char *name, const void *p, size_t n)
{
	return json_object_set_new(o, name, text_base64_json(p, n));
}

int
etcd_json_set_key(json_t *o, const void *key, size_t n, int prefix)
{
	unsigned char *end;
	size_t len = n;
	int rc;

	/* Every key: from the lowest ("\0", as etcd wants a key) on. */
	if (prefix && n == 0)
		return etcd_json_set_bytes(o, "key", "", 1) < 0 ||
		        etcd_json_set_bytes(o, "range_end", "", 1) < 0 ?
		    -1 :
		    0;
	if (etcd_json_set_bytes(o, "key", key, n) < 0)
		return -1;
	if (!prefix)
		return 0;
	/* The prefix with its last byte that can grow grown, and cut there. */
	while (len > 0 && ((const unsigned char *)key)[len - 1] == 0xff)
		len--;
	if (len == 0)
		return etcd_json_set_bytes(o, "range_end", "", 1);
	if ((end = malloc(len)) == NULL)
		return -1;
	memcpy(end, key, len);
	end[len - 1]++;
	rc = etcd_json_set_bytes(o, "range_end", end, len);
	free(end);
	return rc;
}

/* gRPC's codes, as the gateway sends them, in our terms. */
static enum status
from_grpc(int64_t code)
{
	switch (code) {
	case 0: return ST_OK;
	case 1: return ST_CANCELLED;
	case 3: return ST_INVALID_ARGUMENT;
	case 4: return ST_DEADLINE_EXCEEDED;
	case 5: return ST_NOT_FOUND;
	case 6: return ST_ALREADY_EXISTS;
	case 7: return ST_UNAUTHENTICATED; /* PERMISSION_DENIED */
	case 8: return ST_RESOURCE_EXHAUSTED;
	case 9: return ST_FAILED_PRECONDITION;
	case 10: return ST_ABORTED;
	case 11: return ST_FAILED_PRECONDITION; /* OUT_OF_RANGE */
	case 14: return ST_UNAVAILABLE;
	case 16: return ST_UNAUTHENTICATED;
	default: return ST_INTERNAL;
	}
}

/* etcd's errors whose gRPC code says less than their message. */
static const struct {
	const char *msg;
	enum status st;
} by_message[] = {
    {"etcdserver: request is too large", ST_RESOURCE_EXHAUSTED},
    {"etcdserver: authentication failed, invalid user ID or password",
        ST_UNAUTHENTICATED},
    {"etcdserver: user name is empty", ST_UNAUTHENTICATED},
    {"etcdserver: invalid auth token", ST_UNAUTHENTICATED},
    {"etcdserver: permission denied", ST_UNAUTHENTICATED},
    /* The election API's own, which gRPC calls UNKNOWN. */
    {"election: no leader", ST_NOT_FOUND},
    {"election: not leader", ST_FAILED_PRECONDITION},
};

enum status
etcd_json_error(const char *body, size_t len, long http, char *msg,
    size_t msglen)
{
	json_t *root = json_loadb(body != NULL ? body : "", len, 0, NULL);
	json_t *e = json_object_get(root, "error");
	const char *m = NULL;
	int64_t code = -1;
	enum status st;

	if (json_is_object(e)) {
		m = json_string_value(json_object_get(e, "message"));
		if (etcd_json_int(e, "grpc_code", &code) < 0)
			code = -1;
	} else if (json_is_object(root)) {
		m = json_string_value(json_object_get(root, "message"));
		if (m == NULL)
			m = json_string_value(e);
		if (json_object_get(root, "code") == NULL ||
		    etcd_json_int(root, "code", &code) < 0)
			code = -1;
	}
	/* No error of etcd's is gRPC's OK (0, which proto3 leaves out): a
	 * body without a code is another server's, its HTTP code the status. */
	if (code <= 0 || m == NULL || *m == '\0') {
		st = status_from_http((int)http);
		if (m != NULL && *m != '\0')
			snprintf(msg, msglen, "HTTP %ld: %s", http, m);
		else
			snprintf(msg, msglen, "HTTP %ld", http);
		json_decref(root);
		return st == ST_OK ? ST_INTERNAL : st;
	}
	st = from_grpc(code);
	for (size_t i = 0; i < sizeof(by_message) / sizeof(by_message[0]); i++)
		if (strcmp(m, by_message[i].msg) == 0)
			st = by_message[i].st;
	snprintf(msg, msglen, "%s", m);
	json_decref(root);
	return st;
}

enum status
etcd_json_cancel(const char *reason)
{
	const char *m = reason != NULL ? strstr(reason, "desc = ") : NULL;

	m = m != NULL ? m + 7 : reason != NULL ? reason : "";
	for (size_t i = 0; i < sizeof(by_message) / sizeof(by_message[0]); i++)
		if (strcmp(m, by_message[i].msg) == 0)
			return by_message[i].st;
	return ST_UNAVAILABLE;
}

int
etcd_split_feed(struct etcd_split *s, const char *p, size_t n, etcd_split_fn fn,
    void *arg)
{
	while (n > 0) {
		const char *nl = memchr(p, '\n', n);
		size_t take = nl != NULL ? (size_t)(nl - p) : n;
		const char *msg = p;
		size_t len = take;
		int rc;

		if (s->part.len + take > s->max) {
			buf_reset(&s->part);
			return -1;
		}
		if (nl == NULL)
			return buf_append(&s->part, p, n) < 0 ? -1 : 0;
		/* A message whole in p is handed over without a copy. */
		if (s->part.len > 0) {
			if (buf_append(&s->part, p, take) < 0)
				return -1;
			msg = s->part.data;
			len = s->part.len;
		}
		p += take + 1;
		n -= take + 1;
		while (len > 0 &&
		    (msg[len - 1] == '\r' || msg[len - 1] == ' ' ||
		        msg[len - 1] == '\t'))
			len--;
		rc = len > 0 ? fn(arg, msg, len) : 0;
		buf_reset(&s->part);
		if (rc != 0)
			return rc;
	}
	return 0;
}

void
etcd_split_free(struct etcd_split *s)
{
	buf_free(&s->part);
}
