/*
 * etcd_election.c: the election API, as the gateway's /v3/election/...
 * take it.
 */
#include <stdlib.h>
#include <string.h>

#include "etcd_election.h"
#include "etcd_int.h"

/* The longest message of an observe's stream: a leader's key and value. */
#define OBSERVE_MAX_MSG (4u << 20)

void
etcd_leader_free(struct etcd_leader *l)
{
	free(l->name);
	free(l->key);
	memset(l, 0, sizeof(*l));
}

void
etcd_leader_cmp(const struct etcd_leader *l, struct etcd_cmp *c)
{
	memset(c, 0, sizeof(*c));
	c->key = l->key;
	c->key_len = l->key_len;
	c->target = ETCD_CMP_CREATE;
	c->result = ETCD_EQ;
	c->number = l->rev;
}

/* {"name": name} and, with a value, {"value": value}. */
static json_t *
name_json(const void *name, size_t name_len, const void *value,
    size_t value_len)
{
	json_t *o = json_object();

	if (o == NULL || etcd_json_set_bytes(o, "name", name, name_len) < 0 ||
	    (value != NULL &&
	        etcd_json_set_bytes(o, "value", value, value_len) < 0)) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* A LeaderKey, as proclaim and resign send it. */
static json_t *
leader_json(const struct etcd_leader *l)
{
	json_t *o = json_pack("{s:I,s:I}", "rev", (json_int_t)l->rev, "lease",
	    (json_int_t)l->lease);

	if (o == NULL ||
	    etcd_json_set_bytes(o, "name", l->name, l->name_len) < 0 ||
	    etcd_json_set_bytes(o, "key", l->key, l->key_len) < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/*
 * etcd's campaign answers once no older key is left under the name, even
 * when its own key went with its lease meanwhile: out's key must still be
 * there, as it was made, to lead.
 */
static enum status
check_key(struct etcd *e, const struct etcd_leader *l, int64_t deadline)
{
	struct etcd_op op = {.kind = ETCD_OP_RANGE,
	    .key = l->key,
	    .key_len = l->key_len};
	struct etcd_kvs r;
	enum status st;
	int held;

	if ((st = etcd_range(e, &op, deadline, &r)) != ST_OK)
		return st;
	held = r.n == 1 && r.kv[0].create_revision == l->rev;
	etcd_kvs_free(&r);
	if (!held)
		return etcd_fail(e, ST_NOT_FOUND,
		    "etcd lease %lld ended while it campaigned",
		    (long long)l->lease);
	return ST_OK;
}

enum status
etcd_campaign(struct etcd *e, const void *name, size_t name_len, int64_t lease,
    const void *value, size_t value_len, int64_t deadline,
    struct etcd_leader *out)
{
	json_t *req = name_json(name, name_len, value, value_len), *reply, *l;
	enum status st;

	memset(out, 0, sizeof(*out));
	if (req == NULL ||
	    json_object_set_new(req, "lease", json_integer(lease)) < 0) {
		json_decref(req);
		return etcd_fail(e, ST_INTERNAL, "out of memory");
	}
	/* The same lease is the same candidate: sent again, it waits on. */
	st = etcd_call(e, "/v3/election/campaign", req, ETCD_LONG, deadline,
	    &reply);
	if (st != ST_OK)
		return st;
	l = json_object_get(reply, "leader");
	if (etcd_json_bytes(l, "name", &out->name, &out->name_len) < 0 ||
	    etcd_json_bytes(l, "key", &out->key, &out->key_len) < 0 ||
	    etcd_json_int(l, "rev", &out->rev) < 0 ||
	    etcd_json_int(l, "lease", &out->lease) < 0 || out->key_len == 0) {
		json_decref(reply);
		etcd_leader_free(out);
		return etcd_fail(e, ST_INTERNAL,
		    "etcd %s sent a malformed reply to a campaign",
		    etcd_member(e));
	}
	json_decref(reply);
	if ((st = check_key(e, out, deadline)) != ST_OK)
		etcd_leader_free(out);
	return st;
}

enum status
etcd_leader(struct etcd *e, const void *name, size_t name_len, int64_t deadline,
    struct etcd_kv *out)
{
	json_t *reply;
	enum status st;

	memset(out, 0, sizeof(*out));
	st = etcd_call(e, "/v3/election/leader",
	    name_json(name, name_len, NULL, 0), 0, deadline, &reply);
	if (st != ST_OK)
		return st;
	if (etcd_json_kv(json_object_get(reply, "kv"), out) < 0) {
		json_decref(reply);
		return etcd_fail(e, ST_INTERNAL,
		    "etcd %s sent a malformed leader", etcd_member(e));
	}
	json_decref(reply);
	return ST_OK;
}

/* Proclaim and resign: the leadership, and what more the call takes. */
static enum status
leader_call(struct etcd *e, const char *path, const struct etcd_leader *l,
    const void *value, size_t value_len, int64_t deadline)
{
	json_t *req = json_pack("{s:o}", "leader", leader_json(l)), *reply;
	enum status st;

	if (req == NULL ||
	    (value != NULL &&
	        etcd_json_set_bytes(req, "value", value, value_len) < 0)) {
		json_decref(req);
		return etcd_fail(e, ST_INTERNAL, "out of memory");
	}
	/* Both are made under a compare on l's key: sent again, no harm. */
	if ((st = etcd_call(e, path, req, 0, deadline, &reply)) == ST_OK)
		json_decref(reply);
	return st;
}

enum status
etcd_proclaim(struct etcd *e, const struct etcd_leader *l, const void *value,
    size_t value_len, int64_t deadline)
{
	return leader_call(e, "/v3/election/proclaim", l,
	    value != NULL ? value : "", value_len, deadline);
}

enum status
etcd_resign(struct etcd *e, const struct etcd_leader *l, int64_t deadline)
{
	return leader_call(e, "/v3/election/resign", l, NULL, 0, deadline);
}

struct observe {
	const void *name;
	size_t name_len;
	etcd_observe_fn fn;
	void *arg;
	struct etcd *e;
};

static json_t *
observe_req(void *arg)
{
	struct observe *o = arg;

	return name_json(o->name, o->name_len, NULL, 0);
}

static int
on_leader(void *arg, json_t *result)
{
	struct observe *o = arg;
	struct etcd_kv kv;
	int rc;

	if (etcd_json_kv(json_object_get(result, "kv"), &kv) < 0) {
		etcd_fail(o->e, ST_INTERNAL, "etcd %s sent a malformed leader",
		    etcd_member(o->e));
		return -1;
	}
	rc = o->fn(o->arg, &kv);
	etcd_kv_free(&kv);
	return rc != 0;
}

enum status
etcd_observe(struct etcd *e, const void *name, size_t name_len,
    int64_t deadline, etcd_observe_fn fn, void *arg)
{
	struct observe o = {.name = name,
	    .name_len = name_len,
	    .fn = fn,
	    .arg = arg,
	    .e = e};

	return etcd_stream(e, "/v3/election/observe", observe_req, 0,
	    OBSERVE_MAX_MSG, deadline, on_leader, &o);
}
