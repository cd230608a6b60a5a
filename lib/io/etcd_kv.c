/*
 * etcd_kv.c: range, put, delete and transactions, as the gateway's
 * /v3/kv/... take them.
 */
#include <stdlib.h>
#include <string.h>

#include "etcd_int.h"

/* A request's body: a RangeRequest, PutRequest or DeleteRangeRequest. */
static json_t *
op_json(const struct etcd_op *op)
{
	json_t *o = json_object();
	int rc;

	if (o == NULL)
		return NULL;
	if (op->kind != ETCD_OP_PUT && op->end != NULL)
		rc = etcd_json_set_bytes(o, "key", op->key, op->key_len) < 0 ||
		        etcd_json_set_bytes(o, "range_end", op->end,
		            op->end_len) < 0 ?
		    -1 :
		    0;
	else
		rc = etcd_json_set_key(o, op->key, op->key_len,
		    op->kind != ETCD_OP_PUT && op->prefix);
	switch (op->kind) {
	case ETCD_OP_PUT:
		if (rc == 0)
			rc = etcd_json_set_bytes(o, "value", op->value,
			    op->value_len);
		if (rc == 0 && op->lease != 0)
			rc = json_object_set_new(o, "lease",
			    json_integer(op->lease));
		break;
	case ETCD_OP_RANGE:
		if (rc == 0 && op->limit > 0)
			rc = json_object_set_new(o, "limit",
			    json_integer(op->limit));
		if (rc == 0 && op->revision > 0)
			rc = json_object_set_new(o, "revision",
			    json_integer(op->revision));
		if (rc == 0 && op->keys_only)
			rc = json_object_set_new(o, "keys_only", json_true());
		break;
	case ETCD_OP_DELETE: break;
	}
	if (rc < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

void
etcd_kvs_free(struct etcd_kvs *r)
{
	for (size_t i = 0; i < r->n; i++)
		etcd_kv_free(&r->kv[i]);
	free(r->kv);
	memset(r, 0, sizeof(*r));
}

/* A RangeResponse: 0, or -1 (out then holds nothing). */
static int
kvs_read(const json_t *o, struct etcd_kvs *out)
{
	const json_t *kvs = json_object_get(o, "kvs"), *kv;
	size_t i;

	memset(out, 0, sizeof(*out));
	out->revision = etcd_json_revision(o);
	out->more = json_is_true(json_object_get(o, "more"));
	if (etcd_json_int(o, "count", &out->count) < 0 ||
	    (kvs != NULL && !json_is_array(kvs)))
		return -1;
	if (json_array_size(kvs) == 0)
		return 0;
	if ((out->kv = calloc(json_array_size(kvs), sizeof(*out->kv))) == NULL)
		return -1;
	json_array_foreach(kvs, i, kv) {
		if (etcd_json_kv(kv, &out->kv[i]) < 0) {
			etcd_kvs_free(out);
			return -1;
		}
		out->n++;
	}
	return 0;
}

/* The fault of a reply that is JSON but not the one it should be. */
static enum status
bad_reply(struct etcd *e, json_t *reply, const char *path)
{
	json_decref(reply);
	return etcd_fail(e, ST_INTERNAL, "etcd %s sent a malformed reply to %s",
	    etcd_member(e), path);
}

enum status
etcd_range(struct etcd *e, const struct etcd_op *op, int64_t deadline,
    struct etcd_kvs *out)
{
	json_t *req = op_json(op), *reply;
	enum status st;

	memset(out, 0, sizeof(*out));
	if (req == NULL)
		return etcd_fail(e, ST_INTERNAL, "out of memory");
	if ((st = etcd_call(e, "/v3/kv/range", req, 0, deadline, &reply)) !=
	    ST_OK)
		return st;
	if (kvs_read(reply, out) < 0)
		return bad_reply(e, reply, "/v3/kv/range");
	json_decref(reply);
	return ST_OK;
}

enum status
etcd_put(struct etcd *e, const void *key, size_t key_len, const void *value,
    size_t value_len, int64_t lease, int64_t deadline, int64_t *revision)
{
	struct etcd_op op = {.kind = ETCD_OP_PUT,
	    .key = key,
	    .key_len = key_len,
	    .value = value,
	    .value_len = value_len,
	    .lease = lease};
	json_t *req = op_json(&op), *reply;
	enum status st;

	if (req == NULL)
		return etcd_fail(e, ST_INTERNAL, "out of memory");
	st = etcd_call(e, "/v3/kv/put", req, ETCD_CHANGE, deadline, &reply);
	if (st != ST_OK)
		return st;
	if (revision != NULL)
		*revision = etcd_json_revision(reply);
	json_decref(reply);
	return ST_OK;
}

enum status
etcd_delete(struct etcd *e, const void *key, size_t key_len, int prefix,
    int64_t deadline, int64_t *deleted, int64_t *revision)
{
	struct etcd_op op = {.kind = ETCD_OP_DELETE,
	    .key = key,
	    .key_len = key_len,
	    .prefix = prefix};
	json_t *req = op_json(&op), *reply;
	enum status st;
	int64_t n;

	if (req == NULL)
		return etcd_fail(e, ST_INTERNAL, "out of memory");
	st = etcd_call(e, "/v3/kv/deleterange", req, ETCD_CHANGE, deadline,
	    &reply);
	if (st != ST_OK)
		return st;
	if (etcd_json_int(reply, "deleted", &n) < 0)
		return bad_reply(e, reply, "/v3/kv/deleterange");
	if (deleted != NULL)
		*deleted = n;
	if (revision != NULL)
		*revision = etcd_json_revision(reply);
	json_decref(reply);
	return ST_OK;
}

static const char *const targets[] = {
    [ETCD_CMP_VERSION] = "VERSION",
    [ETCD_CMP_CREATE] = "CREATE",
    [ETCD_CMP_MOD] = "MOD",
    [ETCD_CMP_VALUE] = "VALUE",
};

/* The field of each target's operand. */
static const char *const operands[] = {
    [ETCD_CMP_VERSION] = "version",
    [ETCD_CMP_CREATE] = "create_revision",
    [ETCD_CMP_MOD] = "mod_revision",
    [ETCD_CMP_VALUE] = "value",
};

static const char *const results[] = {
    [ETCD_EQ] = "EQUAL",
    [ETCD_NE] = "NOT_EQUAL",
    [ETCD_LT] = "LESS",
    [ETCD_GT] = "GREATER",
};

/* The field of each request in a RequestOp, and of its ResponseOp. */
static const char *const requests[] = {
    [ETCD_OP_RANGE] = "request_range",
    [ETCD_OP_PUT] = "request_put",
    [ETCD_OP_DELETE] = "request_delete_range",
};

static const char *const responses[] = {
    [ETCD_OP_RANGE] = "response_range",
    [ETCD_OP_PUT] = "response_put",
    [ETCD_OP_DELETE] = "response_delete_range",
};

static json_t *
cmp_json(const struct etcd_cmp *c)
{
	json_t *o = json_pack("{s:s,s:s}", "target", targets[c->target],
	    "result", results[c->result]);

	if (o == NULL || etcd_json_set_key(o, c->key, c->key_len, 0) < 0 ||
	    (c->target == ETCD_CMP_VALUE ?
	            etcd_json_set_bytes(o, "value", c->value, c->value_len) :
	            json_object_set_new(o, operands[c->target],
	                json_integer(c->number))) < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* A list of RequestOps; *changes is set when one of them writes. */
static json_t *
ops_json(const struct etcd_op *ops, size_t n, int *changes)
{
	json_t *a = json_array();

	for (size_t i = 0; a != NULL && i < n; i++) {
		if (ops[i].kind != ETCD_OP_RANGE)
			*changes = 1;
		if (json_array_append_new(a,
		        json_pack("{s:o}", requests[ops[i].kind],
		            op_json(&ops[i]))) < 0) {
			json_decref(a);
			a = NULL;
		}
	}
	return a;
}

static json_t *
txn_json(const struct etcd_txn *t, int *changes)
{
	json_t *cmp = json_array();

	for (size_t i = 0; cmp != NULL && i < t->ncmp; i++)
		if (json_array_append_new(cmp, cmp_json(&t->cmp[i])) < 0) {
			json_decref(cmp);
			cmp = NULL;
		}
	return json_pack("{s:o,s:o,s:o}", "compare", cmp, "success",
	    ops_json(t->then, t->nthen, changes), "failure",
	    ops_json(t->otherwise, t->notherwise, changes));
}

void
etcd_txn_result_free(struct etcd_txn_result *r)
{
	for (size_t i = 0; i < r->n; i++)
		etcd_kvs_free(&r->res[i].range);
	free(r->res);
	memset(r, 0, sizeof(*r));
}

/* One ResponseOp: 0, or -1. */
static int
result_read(const json_t *o, struct etcd_op_result *r)
{
	for (int k = ETCD_OP_RANGE; k <= ETCD_OP_DELETE; k++) {
		const json_t *f = json_object_get(o, responses[k]);

		if (f == NULL)
			continue;
		r->kind = (enum etcd_op_kind)k;
		if (k == ETCD_OP_RANGE)
			return kvs_read(f, &r->range);
		return etcd_json_int(f, "deleted", &r->deleted);
	}
	return -1;
}

/* A TxnResponse: 0, or -1 (out then holds nothing). */
static int
txn_read(const json_t *o, struct etcd_txn_result *out)
{
	const json_t *res = json_object_get(o, "responses"), *r;
	size_t i;

	out->succeeded = json_is_true(json_object_get(o, "succeeded"));
	out->revision = etcd_json_revision(o);
	if (res != NULL && !json_is_array(res))
		return -1;
	if (json_array_size(res) == 0)
		return 0;
	if ((out->res = calloc(json_array_size(res), sizeof(*out->res))) ==
	    NULL)
		return -1;
	json_array_foreach(res, i, r) {
		out->n++;
		if (result_read(r, &out->res[i]) < 0) {
			etcd_txn_result_free(out);
			return -1;
		}
	}
	return 0;
}

enum status
etcd_txn(struct etcd *e, const struct etcd_txn *t, int64_t deadline,
    struct etcd_txn_result *out)
{
	int changes = 0;
	json_t *req = txn_json(t, &changes), *reply;
	enum status st;

	memset(out, 0, sizeof(*out));
	if (req == NULL)
		return etcd_fail(e, ST_INTERNAL, "out of memory");
	st = etcd_call(e, "/v3/kv/txn", req, changes ? ETCD_CHANGE : 0,
	    deadline, &reply);
	if (st != ST_OK)
		return st;
	if (txn_read(reply, out) < 0)
		return bad_reply(e, reply, "/v3/kv/txn");
	json_decref(reply);
	return ST_OK;
}
