/*
 * http_server_park.c: parked requests. A handler parks a request that must
 * wait; its connection is suspended, holding no thread, until a reply to
 * it resumes it, on any thread, or a holder lets it go (http_req_hold).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include <microhttpd.h>

#include "http_server_int.h"

/*
 * A parked request is answered in a burst with thousands of others, and
 * libmicrohttpd clears its connection's pool after the reply. On a
 * connection that has not replied before, that clear is the first write to
 * most of the pool: a page fault or two per reply, in the middle of the
 * burst, and half of the burst's cost when the connections are new. So the
 * pool's pages are made resident now, while the request parks. The pool
 * starts with the request line, so it begins where the method does, just
 * before the path. Pages are only mapped, never written.
 */
static void
prefault_pool(const struct http_req *req)
{
#ifdef MADV_POPULATE_WRITE
	uintptr_t page = req->srv->pagesize, start, lo, hi;

	start = (uintptr_t)req->path - strlen(req->method) - 1;
	lo = start & ~(page - 1);
	hi = (start + POOL_SIZE + page - 1) & ~(page - 1);
	/* Older kernels say EINVAL: the faults then come with the reply. */
	(void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
#else
	(void)req;
#endif
}

void
http_park(struct http_req *req)
{
	struct conn *cs = req->cs;

	if (cs == NULL || !cs->resident) {
		prefault_pool(req);
		if (cs != NULL)
			cs->resident = 1;
	}
	req->parked = 1;
	req->in_handler = 2;
	atomic_fetch_add(&req->srv->parked, 1);
	/* A client that goes away while its request waits is noticed. */
	http_door_watch(req);
	MHD_suspend_connection(req->conn);
}

void
http_req_resume(struct http_req *req)
{
	/*
	 * The waker may run while the parking handler has not yet returned;
	 * libmicrohttpd allows that, and its lock orders the writes of the
	 * reply before the handler thread reads them.
	 */
	if (req->parked && !req->held) {
		req->parked = 0;
		atomic_fetch_sub(&req->srv->parked, 1);
		http_door_unwatch(req);
		MHD_resume_connection(req->conn);
	}
}

void
http_req_hold(struct http_req *req)
{
	req->held = 1;
}

void
http_req_release(struct http_req *req)
{
	req->held = 0;
	if (req->resp != NULL || req->shared != NULL)
		http_req_resume(req);
}
