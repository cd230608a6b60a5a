/*
 * dataread_core.c: what every thread of a consumer shares: the failure
 * that ends the read, pokes that wake the heartbeat loop, the ranges
 * delivered and the tasks lost that the heartbeats report (under r->mu),
 * and the output (under r->out_mu).
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "dataread_int.h"
#include "iov.h"
#include "vec.h"

static void
vfail_locked(struct reader *r, enum status st, const char *fmt, va_list ap)
{
	if (r->fail != ST_OK)
		return;
	r->fail = st;
	vsnprintf(r->failmsg, sizeof(r->failmsg), fmt, ap);
}

void
dataread_fail_locked(struct reader *r, enum status st, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfail_locked(r, st, fmt, ap);
	va_end(ap);
}

void
dataread_fail(struct reader *r, enum status st, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&r->mu);
	va_start(ap, fmt);
	vfail_locked(r, st, fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&r->mu);
}

enum step
dataread_malformed(struct reader *r, int64_t task, const char *addr)
{
	dataread_fail(r, ST_INTERNAL,
	    "task %" PRId64 ": worker %s sent a malformed reply", task, addr);
	return STEP_FAIL;
}

/* Asks the heartbeat loop to look around now. */
void
dataread_poke(struct reader *r)
{
	ssize_t n = write(r->wake[1], "", 1);

	(void)n; /* a full pipe has pokes enough */
}

/* Delivered ranges */

/*
 * Adds a delivered range, merged with the one it continues: a task reads
 * a split in order, so a heartbeat carries about one range per split.
 */
static int
ranges_add(struct ranges *rs, int64_t seq, int64_t first, int64_t end,
    int64_t total)
{
	for (size_t i = rs->n; i-- > 0;) {
		struct range *g = &rs->v[i];
		if (g->seq == seq && g->end == first) {
			g->end = end;
			if (total >= 0)
				g->total = total;
			return 0;
		}
	}
	if (vec_grow(&rs->v, &rs->cap, rs->n + 1, sizeof(*rs->v)) < 0)
		return -1;
	rs->v[rs->n++] = (struct range){seq, first, end, total};
	return 0;
}

void
dataread_note_range_locked(struct reader *r, const struct range *g)
{
	if (ranges_add(&r->pend, g->seq, g->first, g->end, g->total) < 0)
		dataread_fail_locked(r, ST_RESOURCE_EXHAUSTED, "out of memory");
	if (g->total >= 0)
		r->split_end = 1;
}

void
dataread_note_lost_locked(struct reader *r, int64_t id)
{
	if (vec_grow(&r->lost, &r->caplost, r->nlost + 1, sizeof(*r->lost)) <
	    0) {
		dataread_fail_locked(r, ST_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	r->lost[r->nlost++] = id;
}

/* Output */

/*
 * Writes iov whole. A reader that went away ends the read quietly; any
 * other failure ends it with INTERNAL. 0, or -1.
 */
int
dataread_write_out(struct reader *r, struct iovec *iov, size_t n)
{
	while (n > 0) {
		ssize_t w =
		    writev(r->o->out, iov, n > IOV_MAX ? IOV_MAX : (int)n);
		if (w < 0) {
			int e = errno;
			if (e == EINTR)
				continue;
			pthread_mutex_lock(&r->mu);
			if (e == EPIPE)
				r->closed = 1;
			else
				dataread_fail_locked(r, ST_INTERNAL,
				    "writing the elements: %s", strerror(e));
			pthread_mutex_unlock(&r->mu);
			dataread_poke(r);
			return -1;
		}
		__atomic_add_fetch(&r->written_bytes, (uint64_t)w,
		    __ATOMIC_RELAXED);
		n = iov_advance(&iov, n, (size_t)w);
	}
	return 0;
}

/*
 * Writes the next n bytes of st out, or drops them (keep 0), as
 * dataread_write_out does with memory. 0, or -1.
 */
int
dataread_write_staged(struct reader *r, struct stage *st, size_t n, int keep)
{
	uint64_t wrote = 0;
	int rc = dataread_stage_out(st, keep ? r->o->out : -1, n,
	    &r->out_splice, &wrote);
	int e = errno;

	__atomic_add_fetch(&r->written_bytes, wrote, __ATOMIC_RELAXED);
	if (rc == 0)
		return 0;
	pthread_mutex_lock(&r->mu);
	if (e == EPIPE && keep)
		r->closed = 1;
	else
		dataread_fail_locked(r, ST_INTERNAL, "writing the elements: %s",
		    strerror(e));
	pthread_mutex_unlock(&r->mu);
	dataread_poke(r);
	return -1;
}

/*
 * Writes one record of a positioned stream other than a chunk of data:
 * its header, then payload. 0, or -1 (as dataread_write_out).
 */
int
dataread_write_record(struct reader *r, uint32_t type, const char *payload,
    size_t len)
{
	struct chunk_hdr h = {.magic = htole32(CHUNK_MAGIC),
	    .type = htole32(type),
	    .len = htole32((uint32_t)len)};
	struct iovec iov[2] = {{&h, sizeof(h)}, {(void *)payload, len}};
	int rc;

	pthread_mutex_lock(&r->out_mu);
	rc = dataread_write_out(r, iov, len > 0 ? 2 : 1);
	pthread_mutex_unlock(&r->out_mu);
	return rc;
}

/* The start record: the framing and where the job began. 0, or -1. */
int
dataread_write_start(struct reader *r)
{
	json_t *o =
	    json_pack("{s:s,s:O}", "framing", r->framing, "start", r->start);
	char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
	int rc;

	json_decref(o);
	if (text == NULL) {
		dataread_fail(r, ST_RESOURCE_EXHAUSTED, "out of memory");
		return -1;
	}
	rc = dataread_write_record(r, CHUNK_STATE, text, strlen(text));
	free(text);
	return rc;
}
