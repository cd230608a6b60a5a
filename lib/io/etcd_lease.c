/*
 * etcd_lease.c: leases, as the gateway's /v3/lease/... take them.
 */
#include <stdio.h>

#include "etcd_int.h"
#include "etcd_lease.h"

/*
 * Posts {"ID": id} to path, for its reply's TTL and, when reply is not
 * NULL, the reply (the caller's to free).
 */
static enum status
lease_call(struct etcd *e, const char *path, int64_t id, int64_t deadline,
    int64_t *ttl, json_t **reply)
{
	json_t *r;
	enum status st;

	st = etcd_call(e, path, json_pack("{s:I}", "ID", (json_int_t)id), 0,
	    deadline, &r);
	if (st != ST_OK)
		return st;
	if (etcd_json_int(r, "TTL", ttl) < 0)
		st = etcd_fail(e, ST_INTERNAL,
		    "etcd %s sent a malformed reply to %s", etcd_member(e),
		    path);
	/* An ended lease has no time left (keep-alive: 0, which proto3
	 * leaves out; time to live: -1). */
	else if (*ttl <= 0)
		st = etcd_fail(e, ST_NOT_FOUND,
		    "etcd lease %lld has ended (expired or revoked)",
		    (long long)id);
	if (st == ST_OK && reply != NULL)
		*reply = r;
	else
		json_decref(r);
	return st;
}

/*
 * A grant sent again (its reply lost) makes a second lease, which expires
 * unused: grants go round the members as reads do.
 */
enum status
etcd_lease_grant(struct etcd *e, int64_t ttl_s, int64_t deadline, int64_t *id,
    int64_t *ttl)
{
	json_t *reply;
	enum status st;

	st = etcd_call(e, "/v3/lease/grant",
	    json_pack("{s:I}", "TTL", (json_int_t)ttl_s), 0, deadline, &reply);
	if (st != ST_OK)
		return st;
	if (etcd_json_int(reply, "ID", id) < 0 || *id == 0 ||
	    etcd_json_int(reply, "TTL", ttl) < 0)
		st = etcd_fail(e, ST_INTERNAL,
		    "etcd %s granted a lease without an ID", etcd_member(e));
	json_decref(reply);
	return st;
}

enum status
etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t deadline, int64_t *ttl)
{
	return lease_call(e, "/v3/lease/keepalive", id, deadline, ttl, NULL);
}

enum status
etcd_lease_ttl(struct etcd *e, int64_t id, int64_t deadline, int64_t *ttl,
    int64_t *granted)
{
	json_t *reply;
	enum status st;

	st = lease_call(e, "/v3/lease/timetolive", id, deadline, ttl, &reply);
	if (st != ST_OK)
		return st;
	if (etcd_json_int(reply, "grantedTTL", granted) < 0)
		*granted = 0;
	json_decref(reply);
	return ST_OK;
}

enum status
etcd_lease_revoke(struct etcd *e, int64_t id, int64_t deadline)
{
	json_t *reply;
	enum status st;

	st = etcd_call(e, "/v3/lease/revoke",
	    json_pack("{s:I}", "ID", (json_int_t)id), 0, deadline, &reply);
	if (st == ST_OK)
		json_decref(reply);
	return st;
}
