/*
 * runner_slot.c: a slot told to stop. Each slot's cancel pipe wakes
 * whatever it waits on (its take, its child's end, a --serve reply, its
 * start delay); the files above drain it once woken.
 */
#include <errno.h>
#include <time.h>
#include <unistd.h>

#include "runner_int.h"

void
runner_nap(int64_t ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

void
runner_wake(int fd)
{
	char c = 1;

	(void)!write(fd, &c, 1);
}

void
runner_drain(int fd)
{
	char b[64];

	while (read(fd, b, sizeof(b)) > 0)
		;
}

void
runner_slot_stop(struct runner_slot *s, int why)
{
	pthread_mutex_lock(&s->mu);
	if (s->id != 0 && s->stop == 0) {
		s->stop = why;
		runner_wake(s->cancel[1]);
	}
	pthread_mutex_unlock(&s->mu);
}
