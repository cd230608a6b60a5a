/*
 * The task registry and barriers as state machines: every transition the
 * reference agent header describes, on a clock the test moves by hand.
 */
#include <stdlib.h>
#include <string.h>

#include "barrier.h"
#include "buf.h"
#include "rec.h"
#include "registry.h"
#include "unit.h"

#define INC1 "00000000000000a1"
#define INC2 "00000000000000b2"

struct events {
	int failed, failed_propagated, all, epochs, connected, left;
	struct reg_task *last;
};

static void
on_event(const struct reg_event *ev, void *arg)
{
	struct events *e = arg;

	switch (ev->type) {
	case REG_TASK_FAILED:
		e->failed++;
		e->failed_propagated += ev->propagate;
		e->last = ev->task;
		break;
	case REG_TASK_CONNECTED: e->connected++; break;
	case REG_TASK_LEFT: e->left++; break;
	case REG_ALL_CONNECTED: e->all++; break;
	case REG_EPOCH: e->epochs++; break;
	}
}

static struct registry *
cluster(const char *spec, const char *recoverable, struct events *e)
{
	struct registry_config cfg = {.heartbeat_timeout_ms = 1000,
	    .register_timeout_ms = 5000};
	char err[256];

	memset(e, 0, sizeof(*e));
	CHECK(task_parse_cluster(spec, &cfg.cluster, err, sizeof(err)) == 0);
	if (recoverable != NULL) {
		strcpy(cfg.recoverable[0], recoverable);
		cfg.nrecoverable = 1;
	}
	return registry_new(&cfg, on_event, e, err, sizeof(err));
}

static void
registry_connect_and_incarnations(void)
{
	struct events e;
	struct registry *r = cluster("worker=2", NULL, &e);
	struct reg_task *w0 = registry_find(r, "worker:0");
	struct reg_task *w1 = registry_find(r, "/job:worker/replica:0/task:1");
	struct reg_answer a;

	CHECK(registry_view(r)->ntasks == 2 && w0 != NULL && w1 != NULL);
	CHECK(registry_find(r, "worker:2") == NULL);
	CHECK(registry_register(r, w0, "zz", 0, &a) == ST_INVALID_ARGUMENT);
	CHECK(registry_register(r, w0, NULL, 0, &a) == ST_INVALID_ARGUMENT);
	CHECK(registry_register(r, w0, INC1, 0, &a) == ST_OK);
	CHECK(w0->state == REG_CONNECTED && registry_view(r)->nconnected == 1);
	/* The same incarnation again is the same registration. */
	CHECK(registry_register(r, w0, INC1, 10, &a) == ST_OK);
	CHECK(registry_view(r)->nconnected == 1 && e.all == 0);
	CHECK(registry_register(r, w1, INC1, 10, &a) == ST_OK);
	CHECK(e.all == 1);
	/* Another incarnation while connected: it restarted (Aborted); the
	 * old one fails, the new one is sent to the next run. */
	CHECK(registry_register(r, w1, INC2, 20, &a) == ST_ABORTED);
	CHECK(a.reason == REG_FAILED_IN_EPOCH);
	CHECK(w1->state == REG_ERROR && w1->err == ST_ABORTED);
	CHECK(e.failed == 1 && e.failed_propagated == 1 && e.last == w1);
	CHECK(registry_failed(r) == w1);
	registry_free(r);
}

static void
registry_heartbeats_and_timeout(void)
{
	struct events e;
	struct registry *r = cluster("worker=2", NULL, &e);
	struct reg_task *w0 = registry_task(r, 0), *w1 = registry_task(r, 1);
	struct reg_answer a;

	CHECK(registry_heartbeat(r, w0, INC1, 0, &a) == ST_INVALID_ARGUMENT);
	CHECK(a.reason == REG_NOT_REGISTERED);
	CHECK(registry_register(r, w0, INC1, 0, &a) == ST_OK);
	CHECK(registry_register(r, w1, INC1, 0, &a) == ST_OK);
	CHECK(registry_heartbeat(r, w0, INC2, 100, &a) == ST_ABORTED);
	CHECK(registry_heartbeat(r, w0, "x", 100, &a) == ST_INVALID_ARGUMENT);
	CHECK(registry_heartbeat(r, w0, INC1, 900, &a) == ST_OK);
	/* At 1001 ms w1 has been silent past the 1 s timeout, w0 not. */
	registry_scan(r, 1000, NULL, NULL);
	CHECK(w1->state == REG_CONNECTED);
	registry_scan(r, 1001, NULL, NULL);
	CHECK(w1->state == REG_ERROR && w1->err == ST_UNAVAILABLE);
	CHECK(w0->state == REG_CONNECTED && e.failed == 1);
	/* A task in error hears of it at its next heartbeat. */
	CHECK(registry_heartbeat(r, w1, INC1, 1100, &a) == ST_UNAVAILABLE);
	CHECK(strstr(a.msg, "no heartbeat") != NULL);
	registry_free(r);
}

static void
registry_errors_reset_shutdown(void)
{
	struct events e;
	struct registry *r = cluster("worker=2", NULL, &e);
	struct reg_task *w0 = registry_task(r, 0), *w1 = registry_task(r, 1);
	struct reg_answer a;
	int barrier;

	CHECK(registry_may_report(r, w0, INC1, &a) == ST_FAILED_PRECONDITION);
	CHECK(registry_reset(r, w0, &a) == ST_FAILED_PRECONDITION);
	CHECK(registry_shutdown(r, w0, INC1, 0, 0, &barrier, &a) ==
	    ST_FAILED_PRECONDITION);
	CHECK(registry_register(r, w0, INC1, 0, &a) == ST_OK);
	CHECK(registry_register(r, w1, INC2, 0, &a) == ST_OK);
	CHECK(registry_may_report(r, w0, INC1, &a) == ST_OK);
	registry_set_error(r, w0, ST_INTERNAL, "boom", 1, 1);
	CHECK(w0->state == REG_ERROR && w0->err_reported && e.failed == 1);
	CHECK(registry_error_visible(w0));
	CHECK(registry_may_report(r, w0, INC1, &a) == ST_FAILED_PRECONDITION);
	/* Shutdown of a task in error disconnects it all the same. */
	CHECK(registry_shutdown(r, w0, INC1, 0, 0, &barrier, &a) ==
	    ST_FAILED_PRECONDITION);
	CHECK(w0->state == REG_DISCONNECTED);
	/* Failed in this epoch: it may not come back until reset. */
	CHECK(registry_register(r, w0, INC1, 10, &a) == ST_ABORTED);
	CHECK(a.reason == REG_FAILED_IN_EPOCH);
	CHECK(registry_reset(r, w0, &a) == ST_OK);
	CHECK(registry_failed(r) == NULL);
	CHECK(registry_register(r, w0, INC1, 20, &a) == ST_OK);
	/* A plain shutdown, no barrier configured. */
	CHECK(registry_shutdown(r, w1, INC2, 0, 0, &barrier, &a) == ST_OK);
	CHECK(!barrier && w1->state == REG_DISCONNECTED);
	/* With a shutdown barrier, the caller goes through it. */
	CHECK(registry_shutdown(r, w0, INC1, 0, 1, &barrier, &a) == ST_OK);
	CHECK(barrier && w0->state == REG_CONNECTED);
	registry_free(r);
}

static void
registry_wait_all_and_epochs(void)
{
	struct events e;
	struct registry *r = cluster("worker=2", NULL, &e);
	struct reg_task *w0 = registry_task(r, 0), *w1 = registry_task(r, 1);
	struct reg_answer a;
	int64_t until = 0;
	int wait, barrier;

	CHECK(registry_wait_all(r, w0, INC1, 0, &wait, &until, &a) ==
	    ST_FAILED_PRECONDITION);
	CHECK(registry_register(r, w0, INC1, 0, &a) == ST_OK);
	CHECK(registry_wait_all(r, w0, INC1, 100, &wait, &until, &a) == ST_OK &&
	    wait && until == 5100);
	/* The first caller started the register clock; it does not move. */
	CHECK(registry_wait_all(r, w0, INC1, 200, &wait, &until, &a) == ST_OK &&
	    until == 5100);
	CHECK(registry_all_expired(r, 5000, &a) == ST_OK);
	CHECK(registry_all_expired(r, 5100, &a) == ST_DEADLINE_EXCEEDED);
	CHECK(strstr(a.msg, "worker:1") != NULL);
	CHECK(registry_register(r, w1, INC2, 5200, &a) == ST_OK);
	CHECK(
	    registry_wait_all(r, w1, INC2, 5200, &wait, &until, &a) == ST_OK &&
	    !wait);
	/* Everyone leaves: a new epoch, once. */
	CHECK(registry_shutdown(r, w0, INC1, 0, 0, &barrier, &a) == ST_OK);
	registry_settle(r);
	CHECK(e.epochs == 0 && registry_view(r)->epoch == 0);
	/* A task that left this run waits for the next one. */
	CHECK(registry_register(r, w0, INC1, 5300, &a) ==
	        ST_FAILED_PRECONDITION &&
	    a.reason == REG_RUN_OVER);
	CHECK(registry_shutdown(r, w1, INC2, 0, 0, &barrier, &a) == ST_OK);
	registry_settle(r);
	registry_settle(r);
	CHECK(e.epochs == 1 && registry_view(r)->epoch == 1);
	CHECK(registry_register(r, w0, INC1, 5400, &a) == ST_OK);
	registry_free(r);
}

/*
 * A task that leaves because its work is done has finished the run; one
 * that leaves after a failure or a preemption (barrier=0) or in error has
 * not, and runs again. A restart keeps which.
 */
static void
registry_finished_tasks(void)
{
	struct events e, e2;
	struct registry *r = cluster("worker=3", NULL, &e);
	struct registry *back = cluster("worker=3", NULL, &e2);
	struct reg_task *w0 = registry_task(r, 0), *w1 = registry_task(r, 1),
	                *w2 = registry_task(r, 2);
	struct reg_answer a;
	struct buf snap = {0};
	struct rec_in in;
	char err[256];
	int barrier;

	CHECK(registry_register(r, w0, INC1, 0, &a) == ST_OK);
	CHECK(registry_register(r, w1, INC2, 0, &a) == ST_OK);
	CHECK(registry_register(r, w2, "00000000000000c3", 0, &a) == ST_OK);
	CHECK(registry_shutdown(r, w0, INC1, 0, 0, &barrier, &a) == ST_OK);
	CHECK(registry_shutdown(r, w1, INC2, 1, 0, &barrier, &a) == ST_OK);
	registry_set_error(r, w2, ST_INTERNAL, "boom", 1, 1);
	CHECK(registry_shutdown(r, w2, "00000000000000c3", 0, 0, &barrier,
	          &a) == ST_FAILED_PRECONDITION);
	registry_settle(r);
	CHECK(registry_view(r)->epoch == 1);
	CHECK(registry_finished_in(w0, 0) && !registry_finished_in(w0, 1));
	CHECK(!registry_finished_in(w1, 0) && !registry_finished_in(w2, 0));
	/* Through the shutdown barrier: finished as it arrives. */
	CHECK(registry_register(r, w1, INC2, 10, &a) == ST_OK);
	CHECK(registry_shutdown(r, w1, INC2, 0, 1, &barrier, &a) == ST_OK);
	CHECK(barrier);
	registry_disconnect(r, w1);
	CHECK(registry_finished_in(w1, 1));
	CHECK(registry_snapshot(r, &snap) == 0);
	rec_in_init(&in, snap.data, snap.len);
	CHECK(registry_restore(back, &in, 20, err, sizeof(err)) == 0);
	CHECK(registry_finished_in(registry_task(back, 0), 0));
	CHECK(registry_finished_in(registry_task(back, 1), 1));
	CHECK(!registry_finished_in(registry_task(back, 2), 0));
	buf_free(&snap);
	registry_free(back);
	registry_free(r);
}

/* Wait for all tasks counts one that came and left already this epoch. */
static void
registry_wait_all_after_a_quick_task(void)
{
	struct events e;
	struct registry *r = cluster("worker=3", NULL, &e);
	struct reg_task *w0 = registry_task(r, 0), *w1 = registry_task(r, 1),
	                *w2 = registry_task(r, 2);
	struct reg_answer a;
	int64_t until = 0;
	int wait, barrier;

	CHECK(registry_register(r, w0, INC1, 0, &a) == ST_OK);
	CHECK(registry_register(r, w2, "00000000000000c3", 0, &a) == ST_OK);
	CHECK(registry_shutdown(r, w2, "00000000000000c3", 0, 0, &barrier,
	          &a) == ST_OK);
	/* worker:1 has not come: wait for it. */
	CHECK(registry_wait_all(r, w0, INC1, 10, &wait, &until, &a) == ST_OK &&
	    wait);
	CHECK(registry_register(r, w1, INC2, 20, &a) == ST_OK);
	CHECK(registry_wait_all(r, w0, INC1, 30, &wait, &until, &a) == ST_OK &&
	    !wait);
	CHECK(registry_wait_all(r, w1, INC2, 30, &wait, &until, &a) == ST_OK &&
	    !wait);
	registry_free(r);
}

static void
registry_recoverable_stays_local(void)
{
	struct events e;
	struct registry *r = cluster("chief=1,worker=1", "worker", &e);
	struct reg_task *c = registry_find(r, "chief:0");
	struct reg_task *w = registry_find(r, "worker:0");
	struct reg_answer a;

	CHECK(w->recoverable && !c->recoverable);
	CHECK(registry_register(r, c, INC1, 0, &a) == ST_OK);
	CHECK(registry_register(r, w, INC1, 0, &a) == ST_OK);
	/* A recoverable task may register again as a new incarnation. */
	CHECK(registry_register(r, w, INC2, 10, &a) == ST_OK);
	registry_scan(r, 5000, NULL, NULL);
	CHECK(e.failed == 2 && e.failed_propagated == 1);
	CHECK(registry_failed(r) == c);
	CHECK(!registry_error_visible(w) && registry_error_visible(c));
	registry_free(r);
}

struct ended {
	int n;
	struct barrier *last;
};

static void
on_end(struct barrier *b, void *arg)
{
	struct ended *x = arg;

	x->n++;
	x->last = b;
}

static void
connect_all(struct registry *r)
{
	struct reg_answer a;

	for (size_t i = 0; i < registry_view(r)->ntasks; i++)
		CHECK(registry_register(r, registry_task(r, i), INC1, 0, &a) ==
		    ST_OK);
}

static void
barriers_pass_and_reuse(void)
{
	struct events e;
	struct registry *r = cluster("worker=3", NULL, &e);
	struct ended x = {0};
	struct barriers *bs = barriers_new(r, on_end, &x);
	struct barrier *b;
	int64_t until = 0;
	enum status st;
	char msg[512];

	CHECK(barriers_wait(bs, "b", registry_task(r, 0), 0, 0, NULL, 0, NULL,
	          0, &b, &until, &st, msg, sizeof(msg)) == BAR_ANSWER);
	CHECK(st == ST_FAILED_PRECONDITION); /* not connected */
	connect_all(r);
	CHECK(barriers_wait(bs, "b", registry_task(r, 0), 0, 1000, NULL, 0,
	          NULL, 0, &b, &until, &st, msg, sizeof(msg)) == BAR_WAIT);
	CHECK(b->members == 3 && b->arrived == 1 && b->deadline == 1000);
	CHECK(barriers_next_deadline(bs) == 1000);
	/* Asking again counts once. */
	CHECK(barriers_wait(bs, "b", registry_task(r, 0), 0, 1000, NULL, 0,
	          NULL, 0, &b, &until, &st, msg, sizeof(msg)) == BAR_WAIT);
	CHECK(b->arrived == 1);
	CHECK(barriers_wait(bs, "b", registry_task(r, 1), 0, 1000, NULL, 0,
	          NULL, 10, &b, &until, &st, msg, sizeof(msg)) == BAR_WAIT);
	CHECK(barriers_wait(bs, "b", registry_task(r, 2), 0, 1000, NULL, 0,
	          NULL, 20, &b, &until, &st, msg, sizeof(msg)) == BAR_ANSWER);
	CHECK(st == ST_OK && x.n == 1 && b->state == BAR_PASSED);
	CHECK(barriers_next_deadline(bs) == INT64_MAX);
	/* Members asking again get the same answer. */
	CHECK(barriers_wait(bs, "b", registry_task(r, 0), 0, 1000, NULL, 0,
	          NULL, 30, &b, &until, &st, msg, sizeof(msg)) == BAR_ANSWER &&
	    st == ST_OK);
	/* A wrong incarnation is told so. */
	CHECK(barriers_wait(bs, "c", registry_task(r, 0), 0xbad, 1000, NULL, 0,
	          NULL, 30, &b, &until, &st, msg, sizeof(msg)) == BAR_ANSWER &&
	    st == ST_ABORTED);
	barriers_reset(bs, ST_ABORTED, "reset");
	barriers_free(bs);
	registry_free(r);
}

static void
barriers_fail_every_way(void)
{
	struct events e;
	struct registry *r = cluster("worker=3", NULL, &e);
	struct ended x = {0};
	struct barriers *bs = barriers_new(r, on_end, &x);
	struct barrier *b;
	int64_t until = 0;
	enum status st;
	char msg[512];
	size_t two[] = {0, 1}, other[] = {1, 2};

	connect_all(r);
	/* Deadline: DEADLINE_EXCEEDED naming who did not come. */
	CHECK(barriers_wait(bs, "t", registry_task(r, 0), 0, 500, NULL, 0, NULL,
	          0, &b, &until, &st, msg, sizeof(msg)) == BAR_WAIT);
	barriers_expire(bs, 499);
	CHECK(b->state == BAR_PENDING);
	barriers_expire(bs, 500);
	CHECK(b->result == ST_DEADLINE_EXCEEDED);
	CHECK(strstr(b->message, "worker:1, worker:2") != NULL);
	/* Conflicting member lists. */
	CHECK(barriers_wait(bs, "l", registry_task(r, 0), 0, 500, two, 2, NULL,
	          0, &b, &until, &st, msg, sizeof(msg)) == BAR_WAIT);
	CHECK(b->members == 2 && b->explicit_set);
	CHECK(barriers_wait(bs, "l", registry_task(r, 1), 0, 500, other, 2,
	          NULL, 0, &b, &until, &st, msg, sizeof(msg)) == BAR_ANSWER);
	CHECK(st == ST_INVALID_ARGUMENT && b->result == ST_INVALID_ARGUMENT);
	/* A caller outside the members. */
	CHECK(barriers_wait(bs, "m", registry_task(r, 0), 0, 500, two, 2, NULL,
	          0, &b, &until, &st, msg, sizeof(msg)) == BAR_WAIT);
	CHECK(barriers_wait(bs, "m", registry_task(r, 2), 0, 500, two, 2, NULL,
	          0, &b, &until, &st, msg, sizeof(msg)) == BAR_ANSWER);
	CHECK(st == ST_INVALID_ARGUMENT);
	/* A member list naming no task of the cluster. */
	CHECK(barriers_wait(bs, "n", registry_task(r, 0), 0, 500, NULL, 0,
	          "task ps:0 is not in the cluster", 0, &b, &until, &st, msg,
	          sizeof(msg)) == BAR_ANSWER &&
	    st == ST_INVALID_ARGUMENT);
	/* Cancel: now and for later arrivals; a passed one cannot be. */
	CHECK(barriers_wait(bs, "c", registry_task(r, 0), 0, 500, NULL, 0, NULL,
	          0, &b, &until, &st, msg, sizeof(msg)) == BAR_WAIT);
	CHECK(barriers_cancel(bs, "c", "worker:1", 0, msg, sizeof(msg)) ==
	        ST_OK &&
	    b->result == ST_CANCELLED);
	CHECK(
	    barriers_cancel(bs, "c", "worker:1", 0, msg, sizeof(msg)) == ST_OK);
	CHECK(barriers_cancel(bs, "early", "worker:1", 0, msg, sizeof(msg)) ==
	    ST_OK);
	CHECK(barriers_wait(bs, "early", registry_task(r, 0), 0, 500, NULL, 0,
	          NULL, 0, &b, &until, &st, msg, sizeof(msg)) == BAR_ANSWER &&
	    st == ST_CANCELLED);
	/* A member that fails fails the barrier (INTERNAL). */
	CHECK(barriers_wait(bs, "f", registry_task(r, 0), 0, 500, NULL, 0, NULL,
	          0, &b, &until, &st, msg, sizeof(msg)) == BAR_WAIT);
	registry_set_error(r, registry_task(r, 2), ST_UNAVAILABLE, "gone", 0,
	    1);
	barriers_task_failed(bs, registry_task(r, 2));
	CHECK(b->result == ST_INTERNAL && strstr(b->message, "worker:2"));
	/* A barrier whose member is already in error fails at once. */
	CHECK(barriers_wait(bs, "g", registry_task(r, 0), 0, 500, other, 2,
	          NULL, 0, &b, &until, &st, msg, sizeof(msg)) == BAR_ANSWER);
	CHECK(st == ST_INTERNAL && strstr(msg, "worker:2") != NULL);
	CHECK(barriers_find(bs, "g")->result == ST_INTERNAL);
	/* Abort (the service going away). */
	CHECK(barriers_wait(bs, "h", registry_task(r, 0), 0, 500, two, 2, NULL,
	          0, &b, &until, &st, msg, sizeof(msg)) == BAR_WAIT);
	barriers_abort(bs, ST_ABORTED, "going away");
	CHECK(b->result == ST_ABORTED);
	CHECK(barriers_cancel(bs, "h", "worker:0", 0, msg, sizeof(msg)) ==
	    ST_FAILED_PRECONDITION);
	barriers_reset(bs, ST_ABORTED, "reset");
	CHECK(barriers_find(bs, "h") == NULL);
	barriers_free(bs);
	registry_free(r);
}

static void
barriers_shutdown(void)
{
	struct events e;
	struct registry *r = cluster("worker=3", NULL, &e);
	struct ended x = {0};
	struct barriers *bs = barriers_new(r, on_end, &x);
	struct reg_task *w0 = registry_task(r, 0), *w1 = registry_task(r, 1),
	                *w2 = registry_task(r, 2);
	struct barrier *b;
	enum status st;
	char msg[512];

	connect_all(r);
	CHECK(barriers_shutdown_wait(bs, w0, 1000, 0, &b, &st, msg,
	          sizeof(msg)) == BAR_WAIT &&
	    b->members == 3);
	CHECK(barriers_shutdown_wait(bs, w1, 1000, 5, &b, &st, msg,
	          sizeof(msg)) == BAR_WAIT);
	/* A member that fails meanwhile fails it for all (INTERNAL, naming
	 * the task): the job did not finish together. */
	registry_set_error(r, w2, ST_UNAVAILABLE, "gone", 0, 1);
	barriers_task_failed(bs, w2);
	CHECK(b->state == BAR_FAILED && b->result == ST_INTERNAL &&
	    strstr(b->message, "worker:2") != NULL);
	/* Those who made it are disconnected all the same. */
	CHECK(w0->state == REG_DISCONNECTED && w1->state == REG_DISCONNECTED);
	barriers_reset(bs, ST_ABORTED, "reset");

	/* A task in error before the first arrival is no member of it. */
	registry_reset(r, w2, &(struct reg_answer){0});
	registry_settle(r);
	connect_all(r);
	registry_set_error(r, w2, ST_UNAVAILABLE, "gone", 0, 1);
	CHECK(barriers_shutdown_wait(bs, w0, 1000, 0, &b, &st, msg,
	          sizeof(msg)) == BAR_WAIT &&
	    b->members == 2);
	CHECK(barriers_shutdown_wait(bs, w1, 1000, 10, &b, &st, msg,
	          sizeof(msg)) == BAR_ANSWER &&
	    st == ST_OK);
	barriers_reset(bs, ST_ABORTED, "reset");

	/* A straggler at the deadline is put in error, without telling the
	 * others (they shut down anyway). */
	registry_reset(r, w2, &(struct reg_answer){0});
	registry_settle(r);
	connect_all(r);
	e.failed = e.failed_propagated = 0;
	CHECK(barriers_shutdown_wait(bs, w0, 1000, 0, &b, &st, msg,
	          sizeof(msg)) == BAR_WAIT);
	barriers_expire(bs, 1000);
	CHECK(b->result == ST_DEADLINE_EXCEEDED);
	CHECK(w0->state == REG_DISCONNECTED);
	CHECK(w1->state == REG_ERROR && w2->state == REG_ERROR);
	CHECK(e.failed == 2 && e.failed_propagated == 0);
	barriers_reset(bs, ST_ABORTED, "reset");
	barriers_free(bs);
	registry_free(r);
}

static void
barriers_member_leaves(void)
{
	struct events e;
	struct registry *r = cluster("worker=2", NULL, &e);
	struct ended x = {0};
	struct barriers *bs = barriers_new(r, on_end, &x);
	struct barrier *b;
	int64_t until = 0;
	enum status st;
	char msg[512];
	int barrier;

	connect_all(r);
	CHECK(barriers_wait(bs, "b", registry_task(r, 0), 0, 1000, NULL, 0,
	          NULL, 0, &b, &until, &st, msg, sizeof(msg)) == BAR_WAIT);
	/* worker:0 waits there, then shuts down: the barrier cannot pass. */
	CHECK(registry_shutdown(r, registry_task(r, 0), INC1, 1, 0, &barrier,
	          &(struct reg_answer){0}) == ST_OK);
	CHECK(e.left == 1);
	barriers_task_left(bs, registry_task(r, 0));
	CHECK(b->result == ST_INTERNAL && strstr(b->message, "left") != NULL);
	barriers_reset(bs, ST_ABORTED, "reset");
	barriers_free(bs);
	registry_free(r);
}

static void
barriers_settle_after_start(void)
{
	struct events e;
	struct registry *r = cluster("worker=3", NULL, &e);
	struct ended x = {0};
	struct barriers *bs = barriers_new(r, on_end, &x);
	struct reg_answer a;
	struct barrier *b;
	int64_t until = 0;
	enum status st;
	char msg[512];

	barriers_set_settle(bs, 5000);
	CHECK(registry_register(r, registry_task(r, 0), INC1, 0, &a) == ST_OK);
	/* No task showed it outlived a coordd: a fresh start, and the first
	 * arrival fixes the members to those connected, as ever. */
	CHECK(barriers_wait(bs, "fresh", registry_task(r, 0), 0, 1000, NULL, 0,
	          NULL, 5, &b, &until, &st, msg, sizeof(msg)) == BAR_ANSWER &&
	    st == ST_OK);
	/* A task whose agent has not registered again yet waits for it, when
	 * it gives its incarnation; without one it is refused, as ever. */
	CHECK(barriers_wait(bs, "b", registry_task(r, 1), 0xa1, 1000, NULL, 0,
	          NULL, 10, &b, &until, &st, msg, sizeof(msg)) == BAR_REGISTER);
	CHECK(until == 5000);
	CHECK(barriers_wait(bs, "b", registry_task(r, 1), 0, 1000, NULL, 0,
	          NULL, 10, &b, &until, &st, msg, sizeof(msg)) == BAR_ANSWER &&
	    st == ST_FAILED_PRECONDITION);
	/* The first arrival, with only one task back: the members are every
	 * task, not the one connected so far. */
	CHECK(barriers_wait(bs, "b", registry_task(r, 0), 0, 60000, NULL, 0,
	          NULL, 20, &b, &until, &st, msg, sizeof(msg)) == BAR_WAIT);
	CHECK(b->members == 3 && b->fix_at == 5000);
	CHECK(barriers_next_deadline(bs) == 5000);
	CHECK(registry_register(r, registry_task(r, 1), INC1, 30, &a) == ST_OK);
	CHECK(barriers_wait(bs, "b", registry_task(r, 1), 0xa1, 60000, NULL, 0,
	          NULL, 40, &b, &until, &st, msg, sizeof(msg)) == BAR_WAIT);
	/* worker:2 never comes back: at the settle time it is dropped, and
	 * the two that arrived pass. */
	barriers_expire(bs, 4999);
	CHECK(b->state == BAR_PENDING);
	barriers_expire(bs, 5000);
	CHECK(b->state == BAR_PASSED && b->members == 2);

	/* All back before then: the member set is simply all of them. */
	barriers_set_settle(bs, 9000);
	CHECK(barriers_wait(bs, "c", registry_task(r, 0), 0, 60000, NULL, 0,
	          NULL, 6000, &b, &until, &st, msg, sizeof(msg)) == BAR_WAIT);
	CHECK(b->fix_at == 9000);
	CHECK(
	    registry_register(r, registry_task(r, 2), INC1, 6100, &a) == ST_OK);
	barriers_all_connected(bs);
	CHECK(b->fix_at == 0 && b->members == 3 && b->state == BAR_PENDING);
	barriers_reset(bs, ST_ABORTED, "reset");
	barriers_free(bs);
	registry_free(r);
}

/*
 * A barrier of every task (the preemption protocol's): one that has not
 * registered yet is waited for; one in error, or gone from the run, when
 * the first arrives fails it at once, since it will not come.
 */
static void
barriers_of_every_task(void)
{
	struct events e;
	struct registry *r = cluster("worker=3", NULL, &e);
	struct ended x = {0};
	struct barriers *bs = barriers_new(r, on_end, &x);
	struct reg_task *w0 = registry_task(r, 0), *w1 = registry_task(r, 1),
	                *w2 = registry_task(r, 2);
	const size_t all[] = {0, 1, 2};
	struct reg_answer a;
	struct barrier *b;
	int64_t until = 0;
	enum status st;
	char msg[512];
	int barrier;

	CHECK(registry_register(r, w0, INC1, 0, &a) == ST_OK);
	CHECK(registry_register(r, w1, INC2, 0, &a) == ST_OK);
	/* worker:2 is still coming: a member all the same. */
	CHECK(barriers_wait(bs, "a", w0, 0, 1000, all, 3, NULL, 0, &b, &until,
	          &st, msg, sizeof(msg)) == BAR_WAIT);
	CHECK(b->members == 3);
	CHECK(barriers_wait(bs, "a", w1, 0, 1000, all, 3, NULL, 0, &b, &until,
	          &st, msg, sizeof(msg)) == BAR_WAIT);
	CHECK(registry_register(r, w2, "00000000000000c3", 0, &a) == ST_OK);
	CHECK(barriers_wait(bs, "a", w2, 0, 1000, all, 3, NULL, 0, &b, &until,
	          &st, msg, sizeof(msg)) == BAR_ANSWER &&
	    st == ST_OK);
	/* worker:2 in error: the next such barrier fails as it is made. */
	registry_set_error(r, w2, ST_INTERNAL, "boom", 1, 1);
	CHECK(barriers_wait(bs, "b", w0, 0, 1000, all, 3, NULL, 0, &b, &until,
	          &st, msg, sizeof(msg)) == BAR_ANSWER);
	CHECK(st == ST_INTERNAL && strstr(msg, "worker:2 is in error") != NULL);
	/* One that left this run will not come either. */
	CHECK(registry_shutdown(r, w1, INC2, 1, 0, &barrier, &a) == ST_OK);
	CHECK(barriers_wait(bs, "c", w0, 0, 1000, (const size_t[]){0, 1}, 2,
	          NULL, 0, &b, &until, &st, msg, sizeof(msg)) == BAR_ANSWER);
	CHECK(st == ST_FAILED_PRECONDITION &&
	    strstr(msg, "worker:1 already left this run") != NULL);
	barriers_reset(bs, ST_ABORTED, "reset");
	barriers_free(bs);
	registry_free(r);
}

UNIT_TESTS(state_tests) = {
    {"registry: connect, incarnations, duplicate registration",
        registry_connect_and_incarnations},
    {"registry: heartbeats and the heartbeat timeout",
        registry_heartbeats_and_timeout},
    {"registry: reported errors, reset and shutdown",
        registry_errors_reset_shutdown},
    {"registry: wait for all, the register timeout, epochs",
        registry_wait_all_and_epochs},
    {"registry: tasks that finished their work, kept by a restart",
        registry_finished_tasks},
    {"registry: wait for all after a task came and left",
        registry_wait_all_after_a_quick_task},
    {"registry: a recoverable task's failure stays its own",
        registry_recoverable_stays_local},
    {"barriers: pass, ask again, single use", barriers_pass_and_reuse},
    {"barriers: deadline, conflicts, outsiders, cancel, errors, abort",
        barriers_fail_every_way},
    {"barriers: the shutdown barrier", barriers_shutdown},
    {"barriers: of every task, one in error or gone fails it at once",
        barriers_of_every_task},
    {"barriers: a member that leaves fails the barrier",
        barriers_member_leaves},
    {"barriers: after a start, members are fixed once tasks are back",
        barriers_settle_after_start},
    {NULL, NULL},
};
