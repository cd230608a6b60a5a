/*
 * etcd_kv.h: etcd's keys: range, put, delete and transactions (etcd.h
 * makes the client). Keys and values are bytes. A result's revision is
 * the store's revision the member answered at (its header's); a key's
 * revisions are etcd's: create_revision when it was made, mod_revision
 * when it last changed, and version its changes since it was made.
 */
#ifndef MUSTER_ETCD_KV_H
#define MUSTER_ETCD_KV_H

#include <stddef.h>
#include <stdint.h>

#include "etcd.h"

/* A key and its value; key and value are NUL-terminated too. */
struct etcd_kv {
	char *key;
	size_t key_len;
	char *value; /* empty for a range of keys_only, or a deleted key */
	size_t value_len;
	int64_t create_revision;
	int64_t mod_revision;
	int64_t version;
	int64_t lease; /* 0: none */
};

/* Frees what kv holds (not kv). */
void etcd_kv_free(struct etcd_kv *kv);

enum etcd_op_kind {
	ETCD_OP_RANGE,
	ETCD_OP_PUT,
	ETCD_OP_DELETE,
};

/* One request of a transaction, and what etcd_range reads. */
struct etcd_op {
	enum etcd_op_kind kind;
	const void *key;
	size_t key_len;
	int prefix; /* a range or delete of every key that starts with key */
	/* A range or delete of the keys from key up to end (not included),
	 * when end is set; prefix is then not looked at. */
	const void *end;
	size_t end_len;
	/* A put's. */
	const void *value;
	size_t value_len;
	int64_t lease; /* 0: none */
	/* A range's. */
	int64_t limit;    /* the most keys returned; 0: all */
	int64_t revision; /* the store as it was then; 0: now */
	int keys_only;
};

/* The keys a range found, in key order. */
struct etcd_kvs {
	struct etcd_kv *kv;
	size_t n;
	int more;         /* the range held more keys than limit let through */
	int64_t count;    /* the keys in the range */
	int64_t revision; /* the store's */
};

void etcd_kvs_free(struct etcd_kvs *r);

enum status etcd_range(struct etcd *e, const struct etcd_op *op,
    int64_t deadline, struct etcd_kvs *out);
/* The revision of the change in *revision (NULL: not wanted). */
enum status etcd_put(struct etcd *e, const void *key, size_t key_len,
    const void *value, size_t value_len, int64_t lease, int64_t deadline,
    int64_t *revision);
enum status etcd_delete(struct etcd *e, const void *key, size_t key_len,
    int prefix, int64_t deadline, int64_t *deleted, int64_t *revision);

/* What a compare reads of its key. */
enum etcd_cmp_target {
	ETCD_CMP_VERSION,
	ETCD_CMP_CREATE, /* create_revision: 0 when the key does not exist */
	ETCD_CMP_MOD,    /* mod_revision */
	ETCD_CMP_VALUE,
};

enum etcd_cmp_result {
	ETCD_EQ,
	ETCD_NE,
	ETCD_LT,
	ETCD_GT,
};

/* "target of key op operand", such as "create_revision of k = 0". */
struct etcd_cmp {
	const void *key;
	size_t key_len;
	enum etcd_cmp_target target;
	enum etcd_cmp_result result;
	int64_t number;    /* a version or revision */
	const void *value; /* ETCD_CMP_VALUE's operand */
	size_t value_len;
};

/* If every compare holds, then's requests; else otherwise's. */
struct etcd_txn {
	const struct etcd_cmp *cmp;
	size_t ncmp;
	const struct etcd_op *then;
	size_t nthen;
	const struct etcd_op *otherwise;
	size_t notherwise;
};

/* What one request of a transaction did. */
struct etcd_op_result {
	enum etcd_op_kind kind;
	struct etcd_kvs range; /* a range's keys */
	int64_t deleted;       /* a delete's count */
};

struct etcd_txn_result {
	int succeeded; /* every compare held: then's requests were made */
	int64_t revision;
	struct etcd_op_result *res; /* one for each request made */
	size_t n;
};

void etcd_txn_result_free(struct etcd_txn_result *r);

/*
 * One transaction, applied whole or not at all. A compare that fails is
 * not an error: ST_OK with succeeded 0 (and otherwise's results).
 */
enum status etcd_txn(struct etcd *e, const struct etcd_txn *t, int64_t deadline,
    struct etcd_txn_result *out);

#endif
