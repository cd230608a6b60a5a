/*
 * etcd_lease.h: etcd's leases. A key put with a lease is deleted when the
 * lease ends: revoked, or not kept alive for its TTL. A holder keeps it
 * alive by calling etcd_lease_keepalive well within the TTL (a third of it,
 * as etcd's own clients do); each call is one request to the gateway's
 * /v3/lease/keepalive.
 */
#ifndef MUSTER_ETCD_LEASE_H
#define MUSTER_ETCD_LEASE_H

#include <stdint.h>

#include "etcd.h"

/* A new lease of ttl_s seconds: its id, and the TTL etcd gave it. */
enum status etcd_lease_grant(struct etcd *e, int64_t ttl_s, int64_t deadline,
    int64_t *id, int64_t *ttl);
/* Renews lease id to its full TTL (in *ttl); ST_NOT_FOUND once it ended. */
enum status etcd_lease_keepalive(struct etcd *e, int64_t id, int64_t deadline,
    int64_t *ttl);
/* Ends lease id and deletes its keys; ST_NOT_FOUND when it had ended. */
enum status etcd_lease_revoke(struct etcd *e, int64_t id, int64_t deadline);
/* The seconds lease id has left, and those it was granted; ST_NOT_FOUND
 * once it ended. */
enum status etcd_lease_ttl(struct etcd *e, int64_t id, int64_t deadline,
    int64_t *ttl, int64_t *granted);

#endif
