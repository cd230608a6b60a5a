#include <limits.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/futex.h>

#include "sync_page.h"

void
sync_page_wait(struct sync_page *p, uint32_t seen, int64_t timeout_ms)
{
	struct timespec ts = {timeout_ms / 1000, (timeout_ms % 1000) * 1000000};

	syscall(SYS_futex, (uint32_t *)&p->seq, FUTEX_WAIT, seen,
	    timeout_ms >= 0 ? &ts : NULL, NULL, 0);
}

static void
futex_wake(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE, INT_MAX, NULL, NULL,
	    0);
}

void
sync_page_set(struct sync_page *p, enum sync_state st)
{
	atomic_store(&p->state, (uint32_t)st);
	atomic_fetch_add(&p->seq, 1);
	futex_wake(&p->seq);
}

int64_t
sync_page_freeze(struct sync_page *p)
{
	sync_page_set(p, SYNC_FROZEN);
	return atomic_load(&p->step);
}

void
sync_page_reset(struct sync_page *p)
{
	atomic_store(&p->step, -1);
	atomic_store(&p->sync_step, -1);
	atomic_store(&p->death_ms, 0);
	atomic_store(&p->reached, 0);
	sync_page_set(p, SYNC_IDLE);
}
